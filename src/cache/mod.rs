//! [`Cache`]: a key range kept in memory from a watch, read with a stated freshness
//! ([`Freshness`]): linearizable reads at memory speed.
//!
//! A cache loads its range at one revision (paged), then applies a managed watch on a stream
//! of its own from the next revision (`task.rs`). A read that must be fresh waits until the
//! cache holds every event up to a revision a quorum read made after the read began; one such
//! quorum read serves every reader waiting at that moment (`fresh.rs`). The store and its
//! freshness rule are pure (`store.rs`). A detector compares the store with etcd at intervals
//! and reloads on a mismatch (`check.rs`). A cache made with an explicit fallback reads etcd
//! itself when it cannot be made fresh in time (`direct.rs`). Local watches (`watch.rs`) read the recent events
//! the task keeps in a bounded ring beside the store (`history.rs`).

mod check;
mod direct;
mod fresh;
mod history;
mod options;
mod store;
mod task;
mod watch;
mod watch_options;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

pub use check::CacheCheck;
pub use options::{
    CacheOptions, DEFAULT_CHECK_INTERVAL, DEFAULT_HISTORY, DEFAULT_MAX_BYTES, DEFAULT_MAX_KEYS,
};
use store::Proof;
pub use watch::CacheWatchStream;
pub use watch_options::{CacheWatchOptions, PROGRESS_EVERY};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::kv::Kv;
use crate::proto::mvccpb::KeyValue;

/// How fresh a [`Cache`] read must be.
///
/// ```
/// use etcd_ha::Freshness;
/// let token = 42; // a revision another process wrote at
/// let f = Freshness::AtLeast(token);
/// assert_ne!(f, Freshness::Consistent);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Freshness {
    /// Linearizable: the read sees every write that completed before it began (anywhere in
    /// the cluster). The cache answers once it has caught up to the revision of a quorum read
    /// made after the call began, shared with every reader waiting then.
    Consistent,
    /// The read reflects at least this revision: read-your-writes across processes, with the
    /// revision of a write's answer as the token. A revision the cluster has not reached
    /// yet waits until it does (or the read's deadline).
    AtLeast(i64),
    /// Whatever the cache holds now, at once, with its revision.
    Cached,
}

/// The answer to a [`Cache`] read: the value and the revision it reflects (every event of
/// the cache's range up to `revision` is in it).
///
/// ```no_run
/// # async fn demo(cache: etcd_ha::Cache) -> etcd_ha::Result<()> {
/// let read = cache.get("config/mode", etcd_ha::Freshness::Consistent).await?;
/// println!("at {}: {:?}", read.revision, read.value.map(|kv| kv.value.clone()));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct CacheRead<T> {
    /// The revision the value reflects.
    pub revision: i64,
    /// The value read.
    pub value: T,
}

/// What a cache has done so far.
///
/// ```no_run
/// # fn demo(cache: etcd_ha::Cache) {
/// let s = cache.stats();
/// println!("{} quorum reads for {} rounds", s.quorum_reads, s.rounds);
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheStats {
    /// Full loads of the range (the first, and after a watch that ended).
    pub loads: u64,
    /// Reloads after a compaction passed the watch's resume point.
    pub reloads: u64,
    /// Watch events applied.
    pub events: u64,
    /// Rounds of fresh reads (each shared by every reader waiting when it began).
    pub rounds: u64,
    /// Quorum reads those rounds made.
    pub quorum_reads: u64,
    /// Of them, reads of the range's count and newest revision (members whose progress
    /// answers prove nothing).
    pub range_proofs: u64,
    /// Progress requests asked of the cache's stream.
    pub progress_requests: u64,
    /// Keys held now.
    pub keys: usize,
    /// Bytes held now (keys, values and a per-key overhead).
    pub bytes: usize,
    /// Events held now in the history local watches read.
    pub history: usize,
    /// Comparisons with etcd made ([`Cache::check`] and the periodic ones).
    pub checks: u64,
    /// Of them, those that found the cache different from etcd (each reloaded it).
    pub mismatches: u64,
    /// Reads served by etcd itself because the cache could not be made fresh in time
    /// ([`CacheOptions::with_etcd_fallback`]).
    pub fallbacks: u64,
}

/// A key range of etcd kept in memory and read with a stated [`Freshness`]: consistent reads
/// without a range over the cluster, at memory speed.
///
/// # What it guarantees
///
/// - The range is loaded at one revision, then follows a managed watch from the next one:
///   every event is applied once, in order, through any failover. A compaction past its resume
///   point reloads the range; a watch that ends with an error loads it again. It never
///   serves a state the cluster did not have.
/// - [`Freshness::Consistent`] is linearizable: a quorum read made after the call began tells
///   a revision, and the cache answers once it holds every event up to it. When the cache is
///   quiet, the proof comes from the server: a progress request on the cache's own stream,
///   on members that order its answer after pending events (etcd 3.4.25+, 3.5.8+, 3.6+). On
///   older members it comes from a second quorum read, of the range's key count and newest
///   mod revision (etcd reads the whole range for it, but sends one key): if no key in the
///   range changed since the cache's revision, the cache is the range.
/// - A read that cannot be made fresh within the read timeout fails with
///   [`Error::NotFresh`]; the cache never falls back to etcd by itself. With
///   [`CacheOptions::with_etcd_fallback`] such a read reads etcd instead (linearizably, paged
///   at one revision), counted in [`CacheStats::fallbacks`].
/// - Memory is bounded: past [`CacheOptions::with_max_keys`] or
///   [`CacheOptions::with_max_bytes`] the cache stops and reads fail with
///   [`Error::CacheLimit`]. A load holds the old state until the new one is complete, so it
///   may briefly take twice as much.
///
/// Dropping the cache stops its task and its watch.
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use etcd_ha::{Cache, CacheOptions, Freshness};
///
/// let routes = Cache::new(&client, "routes/", CacheOptions::new().with_prefix()).await?;
/// let all = routes.list(Freshness::Consistent).await?;
/// println!("{} routes at revision {}", all.value.len(), all.revision);
/// # Ok(())
/// # }
/// ```
pub struct Cache {
    shared: Arc<task::Shared>,
    rounds: fresh::Rounds,
    kv: Kv,
    read_timeout: Duration,
    page_size: u32,
    /// Reads that cannot be made fresh in time read etcd instead.
    etcd_fallback: bool,
    /// Cancelled when the cache is dropped: its task and its local watches end.
    cancel: CancellationToken,
    _stop: DropGuard,
}

impl Cache {
    /// Load the range `key` and `options` describe and follow it; returns once it is loaded
    /// and its watch created (with the load's or the watch's error if either fails), so the
    /// first read is served at once.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// let one = etcd_ha::Cache::new(&client, "leader", etcd_ha::CacheOptions::new()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn new(
        client: &Client,
        key: impl Into<Vec<u8>>,
        options: CacheOptions,
    ) -> Result<Cache> {
        let kv = client.kv();
        let resolved = options.resolve(key.into(), kv.request_timeout())?;
        let shared = task::Shared::new(resolved.range, resolved.limits, resolved.history);
        let cancel = CancellationToken::new();
        let feed = task::Feed {
            shared: shared.clone(),
            kv: kv.clone(),
            watch: client.watch().isolated(),
            page_size: resolved.page_size,
            cancel: cancel.clone(),
        };
        if let Some(interval) = resolved.check_interval {
            let (shared, kv, cancel) = (shared.clone(), kv.clone(), cancel.clone());
            let page_size = resolved.page_size;
            tokio::spawn(check::every(shared, kv, interval, page_size, cancel));
        }
        let (first, loaded) = oneshot::channel();
        tokio::spawn(feed.run(first));
        let cache = Cache {
            rounds: fresh::Rounds::start(shared.clone(), kv.clone()),
            shared,
            kv,
            read_timeout: resolved.read_timeout,
            page_size: resolved.page_size,
            etcd_fallback: resolved.etcd_fallback,
            cancel: cancel.clone(),
            _stop: cancel.drop_guard(),
        };
        loaded.await.map_err(|_| Error::Shutdown)??;
        Ok(cache)
    }

    /// The value of `key` (which must be in the cache's range), as fresh as asked.
    ///
    /// ```no_run
    /// # async fn demo(cache: etcd_ha::Cache) -> etcd_ha::Result<()> {
    /// if let Some(kv) = cache.get("routes/a", etcd_ha::Freshness::Consistent).await?.value {
    ///     println!("{}", String::from_utf8_lossy(&kv.value));
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get(
        &self,
        key: impl AsRef<[u8]>,
        freshness: Freshness,
    ) -> Result<CacheRead<Option<Arc<KeyValue>>>> {
        let key = key.as_ref();
        if !self.shared.range.contains(key) {
            return Err(Error::InvalidOptions {
                option: "key",
                reason: "outside the cache's range",
            });
        }
        if let Err(error) = self.fresh(freshness).await {
            let end = [key, &[0]].concat();
            let read = self.fall_back(error, freshness, key, Some(&end)).await?;
            return Ok(CacheRead {
                revision: read.revision,
                value: read.value.into_iter().next(),
            });
        }
        self.shared.read(|s| CacheRead {
            revision: s.revision(),
            value: s.get(key),
        })
    }

    /// Every key of the cache's range, in key order, as fresh as asked.
    ///
    /// ```no_run
    /// # async fn demo(cache: etcd_ha::Cache) -> etcd_ha::Result<()> {
    /// let all = cache.list(etcd_ha::Freshness::Cached).await?;
    /// println!("{} keys", all.value.len());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn list(&self, freshness: Freshness) -> Result<CacheRead<Vec<Arc<KeyValue>>>> {
        let range = &self.shared.range;
        self.list_range(
            range.key.clone(),
            range.end().map(<[u8]>::to_vec),
            freshness,
        )
        .await
    }

    /// The keys of the cache's range that start with `prefix`, in key order, as fresh as
    /// asked.
    ///
    /// ```no_run
    /// # async fn demo(cache: etcd_ha::Cache) -> etcd_ha::Result<()> {
    /// let eu = cache.list_prefix("routes/eu/", etcd_ha::Freshness::Consistent).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn list_prefix(
        &self,
        prefix: impl Into<Vec<u8>>,
        freshness: Freshness,
    ) -> Result<CacheRead<Vec<Arc<KeyValue>>>> {
        let prefix = prefix.into();
        let end = crate::kv::prefix_end(&prefix);
        let end = (end != [0]).then_some(end);
        self.list_range(prefix, end, freshness).await
    }

    async fn list_range(
        &self,
        start: Vec<u8>,
        end: Option<Vec<u8>>,
        freshness: Freshness,
    ) -> Result<CacheRead<Vec<Arc<KeyValue>>>> {
        if let Err(error) = self.fresh(freshness).await {
            return self
                .fall_back(error, freshness, &start, end.as_deref())
                .await;
        }
        self.shared.read(|s| CacheRead {
            revision: s.revision(),
            value: s.range(&start, end.as_deref()),
        })
    }

    /// A read the cache could not make fresh (`error`): from etcd itself when the cache was
    /// made with [`CacheOptions::with_etcd_fallback`] and only time ran out, else `error`. An
    /// at-least read whose token etcd has not reached either keeps its error.
    async fn fall_back(
        &self,
        error: Error,
        freshness: Freshness,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> Result<CacheRead<Vec<Arc<KeyValue>>>> {
        if !self.etcd_fallback || !matches!(error, Error::NotFresh { .. }) {
            return Err(error);
        }
        let read = direct::range(&self.kv, start, end, self.page_size).await?;
        self.shared.stats.fallbacks.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(revision = read.revision, "a cache read fell back to etcd");
        match freshness {
            Freshness::AtLeast(token) if read.revision < token => Err(error),
            _ => Ok(read),
        }
    }

    /// A local watch of `key` (and the keys `options` add, inside the cache's range), served
    /// from the cache's history: no watch of its own on the server, however many there are.
    /// From now (the default) it begins after a consistent read of the cache (so it fails
    /// with [`Error::NotFresh`] when the cache cannot be made fresh in time); from a start
    /// revision it replays what the history still holds.
    ///
    /// ```no_run
    /// # async fn demo(cache: etcd_ha::Cache) -> etcd_ha::Result<()> {
    /// use etcd_ha::CacheWatchOptions;
    ///
    /// let options = CacheWatchOptions::new().with_prefix().with_prev_kv().with_reload_on_lag();
    /// let mut routes = cache.watch("routes/eu/", options).await?;
    /// while let Some(batch) = routes.next_batch().await {
    ///     println!("{:?}", batch?);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn watch(
        &self,
        key: impl Into<Vec<u8>>,
        options: CacheWatchOptions,
    ) -> Result<CacheWatchStream> {
        let range = options.resolve(key.into(), &self.shared.range)?;
        if options.start_revision() == 0 {
            self.fresh(Freshness::Consistent).await?;
        }
        // The place and the history it is in, read together: a load in between would
        // otherwise leave the watch at a revision of the old history in the new one.
        let place = self.shared.read_with_history(|s, h| {
            let revision = match options.start_revision() {
                0 => s.revision(),
                start => start - 1,
            };
            (revision, h.generation())
        })?;
        Ok(CacheWatchStream::new(
            self.shared.clone(),
            self.cancel.clone(),
            range,
            options,
            place,
        ))
    }

    /// Wait until the cache is as fresh as asked, within the read timeout.
    async fn fresh(&self, freshness: Freshness) -> Result<()> {
        let deadline = Instant::now() + self.read_timeout;
        #[cfg(feature = "mutants")]
        let freshness = match crate::mutants::cache_skip_fresh() {
            true => Freshness::Cached,
            false => freshness,
        };
        match freshness {
            Freshness::Cached => self.shared.check(),
            Freshness::AtLeast(revision) if self.shared.store_fresh(&Proof::Revision(revision)) => {
                Ok(())
            }
            Freshness::Consistent => {
                fresh::consistent(&self.shared, &self.rounds, &self.kv, deadline).await
            }
            // A quorum read made now is at or past any revision already written; a token
            // beyond it (a revision the cluster has not reached yet) is then waited for.
            Freshness::AtLeast(revision) => {
                fresh::consistent(&self.shared, &self.rounds, &self.kv, deadline).await?;
                let token = Proof::Revision(revision);
                match self.shared.store_fresh(&token) {
                    true => Ok(()),
                    false => fresh::wait(&self.shared, &token, deadline).await,
                }
            }
        }
    }

    /// Compare the cache with etcd now: its keys and their mod revisions against a keys-only
    /// range at the cache's revision. When they differ the cache loads its range again (and
    /// counts it in [`CacheStats::mismatches`]); a revision etcd has compacted away already
    /// fails with [`Error::Compacted`].
    ///
    /// ```no_run
    /// # async fn demo(cache: etcd_ha::Cache) -> etcd_ha::Result<()> {
    /// let found = cache.check().await?;
    /// assert!(found.consistent, "diverged at {}", found.revision);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check(&self) -> Result<CacheCheck> {
        check::check(&self.shared, &self.kv, self.page_size).await
    }

    /// Drop `key` from the cache without an event, as a lost event would: a divergence for
    /// tests of the detector ([`Cache::check`]). Whether the cache held it.
    #[cfg(feature = "testkit")]
    #[doc(hidden)]
    pub fn testkit_forget(&self, key: impl AsRef<[u8]>) -> bool {
        self.shared.forget(key.as_ref())
    }

    /// The revision the cache holds now: every event of its range up to it is applied.
    ///
    /// ```no_run
    /// # fn demo(cache: etcd_ha::Cache) {
    /// println!("at revision {}", cache.revision());
    /// # }
    /// ```
    pub fn revision(&self) -> i64 {
        self.shared.read(store::Store::revision).unwrap_or(0)
    }

    /// The URL of the member whose watch stream feeds the cache now (`None` between streams).
    ///
    /// ```no_run
    /// # fn demo(cache: etcd_ha::Cache) {
    /// println!("fed by {:?}", cache.stream_endpoint());
    /// # }
    /// ```
    pub fn stream_endpoint(&self) -> Option<String> {
        self.shared.endpoint()
    }

    /// What the cache has done so far, and what it holds.
    ///
    /// ```no_run
    /// # fn demo(cache: etcd_ha::Cache) {
    /// println!("{} keys", cache.stats().keys);
    /// # }
    /// ```
    pub fn stats(&self) -> CacheStats {
        let s = &self.shared.stats;
        let (keys, bytes, history) = self
            .shared
            .read_with_history(|s, h| (s.len(), s.bytes(), h.len()))
            .unwrap_or((0, 0, 0));
        CacheStats {
            loads: s.loads.load(Ordering::Relaxed),
            reloads: s.reloads.load(Ordering::Relaxed),
            events: s.events.load(Ordering::Relaxed),
            rounds: s.rounds.load(Ordering::Relaxed),
            quorum_reads: s.quorum_reads.load(Ordering::Relaxed),
            range_proofs: s.range_proofs.load(Ordering::Relaxed),
            progress_requests: s.progress_requests.load(Ordering::Relaxed),
            checks: s.checks.load(Ordering::Relaxed),
            mismatches: s.mismatches.load(Ordering::Relaxed),
            fallbacks: s.fallbacks.load(Ordering::Relaxed),
            keys,
            bytes,
            history,
        }
    }
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("revision", &self.revision())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
