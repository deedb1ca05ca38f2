//! Local watches of a [`Cache`](super::Cache) ([`CacheWatchStream`]): any number of
//! subscribers share the cache's one server watch, each reading the cache's history ring
//! (`history.rs`) from where it stands.
//!
//! A subscriber holds no buffer of its own: it is a revision and a wake-up. Each
//! [`next_batch`](CacheWatchStream::next_batch) reads, under the store's read lock, the ring's
//! revisions after its own, so a slow subscriber costs nothing until the ring has moved past
//! it; then it is reloaded from the store (or told, [`WatchBatch::Compacted`]), never silently
//! skipped.

use std::sync::Arc;

use futures_util::Stream;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::history::History;
use super::options::KeyRange;
use super::store::Store;
use super::task::Shared;
use super::watch_options::{CacheWatchOptions, PROGRESS_EVERY};
use crate::error::Result;
use crate::proto::mvccpb::{Event, KeyValue};
use crate::watch::WatchBatch;

/// Most events in one batch (whole revisions: a revision with more is delivered alone).
const MAX_BATCH: usize = 1_000;

/// A watch served by a [`Cache`](super::Cache) from its history, with the managed watch's
/// batches ([`WatchBatch`]): events in revision order, each revision whole and once; a
/// subscriber that fell behind the history is reloaded or told (see
/// [`CacheWatchOptions::with_reload_on_lag`]). It ends when the cache is dropped or stops
/// serving (with the cache's error).
///
/// ```no_run
/// # async fn demo(cache: etcd_ha::Cache) -> etcd_ha::Result<()> {
/// use etcd_ha::{CacheWatchOptions, WatchBatch};
///
/// let mut jobs = cache.watch("jobs/", CacheWatchOptions::new().with_prefix()).await?;
/// while let Some(batch) = jobs.next_batch().await {
///     if let WatchBatch::Events { events, .. } = batch? {
///         println!("{} changes", events.len());
///     }
/// }
/// # Ok(())
/// # }
/// ```
pub struct CacheWatchStream {
    shared: Arc<Shared>,
    changed: watch::Receiver<()>,
    cancel: CancellationToken,
    range: KeyRange,
    options: CacheWatchOptions,
    /// Every event of the watched keys up to this revision has been delivered.
    revision: i64,
    /// The history's generation this watch's place is in (a load replaces it).
    generation: u64,
    /// The revision the caller was last told (by events, a reload or progress).
    told: i64,
    /// When the caller was last given a batch.
    last_batch: Instant,
    ended: bool,
    /// Reads of the shared state (a unit test's proof that a quiet watch does not spin).
    #[cfg(test)]
    reads: u64,
}

impl CacheWatchStream {
    pub(super) fn new(
        shared: Arc<Shared>,
        cancel: CancellationToken,
        range: KeyRange,
        options: CacheWatchOptions,
        (revision, generation): (i64, u64),
    ) -> Self {
        CacheWatchStream {
            changed: shared.subscribe(),
            shared,
            cancel,
            range,
            options,
            revision,
            told: revision,
            generation,
            last_batch: Instant::now(),
            ended: false,
            #[cfg(test)]
            reads: 0,
        }
    }

    /// The next batch; `None` once the watch ended (after [`WatchBatch::Compacted`], an
    /// error, or the cache's drop).
    ///
    /// ```no_run
    /// # async fn demo(mut w: etcd_ha::CacheWatchStream) -> etcd_ha::Result<()> {
    /// while let Some(batch) = w.next_batch().await {
    ///     let _ = batch?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn next_batch(&mut self) -> Option<Result<WatchBatch>> {
        while !self.ended {
            // Seen before the read: a change after it wakes the wait below.
            self.changed.borrow_and_update();
            #[cfg(test)]
            {
                self.reads += 1;
            }
            let shared = self.shared.clone();
            let next = shared.read_with_history(|store, history| self.take(store, history));
            match next {
                Ok(Some(batch)) => {
                    self.ended = matches!(batch, WatchBatch::Compacted { .. });
                    self.told = batch.revision().max(self.told);
                    self.last_batch = Instant::now();
                    return Some(Ok(batch));
                }
                Ok(None) => {}
                Err(error) => {
                    self.ended = true;
                    return Some(Err(error));
                }
            }
            // A timer only while there is progress to tell: otherwise the next change wakes it.
            let progress = (self.options.progress_notify && self.revision > self.told)
                .then(|| (self.last_batch + PROGRESS_EVERY).max(Instant::now()));
            let woke = tokio::select! {
                changed = self.changed.changed() => changed.is_ok(),
                () = self.cancel.cancelled() => false,
                () = sleep_until(progress), if progress.is_some() => true,
            };
            if !woke {
                self.ended = true;
            }
        }
        None
    }

    /// Every event of the watched keys up to this revision has been delivered; a watch
    /// made again from `revision() + 1` continues this one.
    ///
    /// ```no_run
    /// # fn demo(w: etcd_ha::CacheWatchStream) {
    /// println!("up to date with revision {}", w.revision());
    /// # }
    /// ```
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The watch as a [`Stream`] of its batches.
    ///
    /// ```no_run
    /// # async fn demo(w: etcd_ha::CacheWatchStream) {
    /// use futures_util::StreamExt;
    /// let mut batches = std::pin::pin!(w.into_stream());
    /// while let Some(batch) = batches.next().await {
    ///     println!("{batch:?}");
    /// }
    /// # }
    /// ```
    pub fn into_stream(self) -> impl Stream<Item = Result<WatchBatch>> + Send {
        futures_util::stream::unfold(self, |mut w| async move {
            let batch = w.next_batch().await?;
            Some((batch, w))
        })
    }

    /// What the ring and the store hold for this watch now, if anything is to be delivered.
    fn take(&mut self, store: &Store, history: &History) -> Option<WatchBatch> {
        let now = store.revision();
        #[cfg(feature = "mutants")]
        if crate::mutants::cache_watch_skip() && self.revision < history.since() {
            self.revision = history.since();
            self.generation = history.generation();
        }
        let Some(revisions) = history.after(self.revision, self.generation, MAX_BATCH) else {
            if !self.options.reload_on_lag {
                return Some(WatchBatch::Compacted {
                    compact_revision: history.since() + 1,
                });
            }
            let kvs = store
                .range(&self.range.key, self.range.end())
                .into_iter()
                .map(Arc::unwrap_or_clone)
                .collect();
            self.revision = now;
            self.generation = history.generation();
            return Some(WatchBatch::Reloaded { revision: now, kvs });
        };
        let caught_up = revisions.last().map(|r| r.revision) == history.newest();
        let mut events = Vec::new();
        for r in &revisions {
            self.revision = self.revision.max(r.revision);
            let mine = r.events.iter().filter(|e| self.watches(e));
            events.extend(mine.map(|e| self.copy(e)));
        }
        if caught_up {
            self.revision = self.revision.max(now);
        }
        if let Some(last) = events.last().and_then(|e| e.kv.as_ref()) {
            let revision = last.mod_revision;
            return Some(WatchBatch::Events { revision, events });
        }
        let due = self.last_batch.elapsed() >= PROGRESS_EVERY;
        if self.options.progress_notify && due && self.revision > self.told {
            return Some(WatchBatch::Progress {
                revision: self.revision,
            });
        }
        None
    }

    fn watches(&self, event: &Event) -> bool {
        event
            .kv
            .as_ref()
            .is_some_and(|kv| self.range.contains(&kv.key))
    }

    fn copy(&self, event: &Event) -> Event {
        Event {
            r#type: event.r#type,
            kv: event.kv.clone(),
            prev_kv: match self.options.prev_kv {
                true => event.prev_kv.clone(),
                false => None::<KeyValue>,
            },
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl std::fmt::Debug for CacheWatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheWatchStream")
            .field("key", &String::from_utf8_lossy(&self.range.key))
            .field("revision", &self.revision)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::store::Limits;
    use crate::proto::mvccpb::event::EventType;
    use std::time::Duration;

    const ROOMY: Limits = Limits {
        keys: 100,
        bytes: 1 << 20,
    };

    fn kv(key: &str, value: &str, revision: i64) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: value.into(),
            mod_revision: revision,
            ..Default::default()
        }
    }

    fn put(key: &str, value: &str, revision: i64) -> Event {
        Event {
            r#type: EventType::Put as i32,
            kv: Some(kv(key, value, revision)),
            prev_kv: None,
        }
    }

    fn delete(key: &str, revision: i64) -> Event {
        Event {
            r#type: EventType::Delete as i32,
            kv: Some(kv(key, "", revision)),
            prev_kv: None,
        }
    }

    /// A cache of `a/` loaded at revision 10 with `a/x`, and a ring of `history` events.
    fn cache(history: usize) -> (Arc<Shared>, KeyRange) {
        let whole = KeyRange {
            key: b"a/".to_vec(),
            range_end: b"a0".to_vec(),
        };
        let shared = Shared::new(whole.clone(), ROOMY, history);
        let store = Store::loaded(ROOMY, vec![kv("a/x", "0", 5)], 10).unwrap();
        shared.load_for_test(store);
        (shared, whole)
    }

    fn stream(
        shared: &Arc<Shared>,
        key: &str,
        options: CacheWatchOptions,
        from: i64,
    ) -> CacheWatchStream {
        let range = options.resolve(key.into(), &shared.range).unwrap();
        let generation = shared.read_with_history(|_, h| h.generation()).unwrap();
        CacheWatchStream::new(
            shared.clone(),
            CancellationToken::new(),
            range,
            options,
            (from, generation),
        )
    }

    async fn next(w: &mut CacheWatchStream) -> WatchBatch {
        let batch = tokio::time::timeout(Duration::from_secs(5), w.next_batch()).await;
        batch
            .expect("a batch in time")
            .expect("not ended")
            .expect("no error")
    }

    fn keys(batch: &WatchBatch) -> Vec<(i64, String, Option<String>)> {
        let WatchBatch::Events { events, .. } = batch else {
            panic!("events expected: {batch:?}")
        };
        events
            .iter()
            .map(|e| {
                let kv = e.kv.as_ref().unwrap();
                let prev = e
                    .prev_kv
                    .as_ref()
                    .map(|p| String::from_utf8_lossy(&p.value).into());
                (
                    kv.mod_revision,
                    String::from_utf8_lossy(&kv.key).into(),
                    prev,
                )
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn subscribers_replay_filter_and_follow_with_previous_values() {
        let (shared, _) = cache(100);
        shared
            .apply_for_test(vec![put("a/x", "1", 11), put("a/y", "1", 12)], 12)
            .unwrap();
        let all = CacheWatchOptions::new().with_prefix().with_prev_kv();
        let mut from_11 = stream(&shared, "a/", all, 10);
        let mut y_only = stream(&shared, "a/y", CacheWatchOptions::new(), 10);
        let batch = next(&mut from_11).await;
        assert_eq!(
            keys(&batch),
            vec![
                (11, "a/x".into(), Some("0".into())),
                (12, "a/y".into(), None)
            ]
        );
        assert_eq!(batch.revision(), 12);
        assert_eq!(
            keys(&next(&mut y_only).await),
            vec![(12, "a/y".into(), None)]
        );
        // Live: a change wakes the waiting subscriber; another key's change moves its
        // revision without a batch.
        let waiting = tokio::spawn(async move {
            let batch = next(&mut y_only).await;
            (batch, y_only)
        });
        tokio::task::yield_now().await;
        shared
            .apply_for_test(vec![put("a/x", "2", 13)], 13)
            .unwrap();
        shared.apply_for_test(vec![delete("a/y", 14)], 14).unwrap();
        let (batch, y_only) = waiting.await.unwrap();
        assert_eq!(
            keys(&batch),
            vec![(14, "a/y".into(), None)],
            "no previous values unasked"
        );
        assert_eq!(y_only.revision(), 14);
        let batch = next(&mut from_11).await;
        assert_eq!(
            keys(&batch),
            vec![
                (13, "a/x".into(), Some("1".into())),
                (14, "a/y".into(), Some("1".into()))
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscriber_behind_the_ring_is_reloaded_or_told() {
        let (shared, _) = cache(2);
        for r in 11..=14 {
            shared
                .apply_for_test(vec![put("a/x", &r.to_string(), r)], r)
                .unwrap();
        }
        let reload = CacheWatchOptions::new().with_prefix().with_reload_on_lag();
        let mut slow = stream(&shared, "a/", reload, 11);
        let WatchBatch::Reloaded { revision, kvs } = next(&mut slow).await else {
            panic!("a reload")
        };
        assert_eq!((revision, kvs), (14, vec![kv("a/x", "14", 14)]));
        // Then it follows again.
        shared
            .apply_for_test(vec![put("a/z", "z", 15)], 15)
            .unwrap();
        assert_eq!(keys(&next(&mut slow).await), vec![(15, "a/z".into(), None)]);
        // Without reload: told, then ended.
        let mut told = stream(&shared, "a/", CacheWatchOptions::new().with_prefix(), 11);
        let batch = next(&mut told).await;
        assert_eq!(
            batch,
            WatchBatch::Compacted {
                compact_revision: 14
            }
        );
        assert!(told.next_batch().await.is_none());
        // Within the ring: replayed.
        let mut near = stream(&shared, "a/", CacheWatchOptions::new().with_prefix(), 13);
        assert_eq!(
            keys(&next(&mut near).await),
            vec![(14, "a/x".into(), None), (15, "a/z".into(), None)]
        );
        // A reload of the cache loses the ring: a subscriber behind it is reloaded.
        let store = Store::loaded(ROOMY, vec![kv("a/q", "q", 20)], 20).unwrap();
        shared.load_for_test(store);
        let WatchBatch::Reloaded { revision, kvs } = next(&mut slow).await else {
            panic!("a reload")
        };
        assert_eq!((revision, kvs), (20, vec![kv("a/q", "q", 20)]));
        // A load at the very revision it stands at (after a divergence the detector found)
        // reloads it too: what it was never told is back.
        let store = Store::loaded(ROOMY, vec![kv("a/q", "q", 20), kv("a/r", "r", 19)], 20);
        shared.load_for_test(store.unwrap());
        let WatchBatch::Reloaded { revision, kvs } = next(&mut slow).await else {
            panic!("a reload")
        };
        assert_eq!((revision, kvs.len()), (20, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn progress_comes_when_quiet_and_the_cache_moved_on() {
        let (shared, _) = cache(100);
        let quiet = CacheWatchOptions::new().with_progress_notify();
        let mut w = stream(&shared, "a/q", quiet, 10);
        shared
            .apply_for_test(vec![put("a/x", "1", 11)], 11)
            .unwrap();
        let started = Instant::now();
        assert_eq!(next(&mut w).await, WatchBatch::Progress { revision: 11 });
        assert!(started.elapsed() >= PROGRESS_EVERY);
        // Nothing new: no second progress, and no spinning while it waits (the shared state
        // is read once per wake-up: a spin would read it thousands of times).
        let reads = w.reads;
        let again = tokio::time::timeout(PROGRESS_EVERY * 3, w.next_batch()).await;
        assert!(again.is_err(), "{again:?}");
        assert_eq!(w.reads - reads, 1, "one read, then a wait for a change");
    }

    #[tokio::test(start_paused = true)]
    async fn a_future_start_waits_and_a_cancelled_cache_ends_its_watches() {
        let (shared, _) = cache(100);
        let cancel = CancellationToken::new();
        let options = CacheWatchOptions::new().with_prefix();
        let range = options.resolve(b"a/".to_vec(), &shared.range).unwrap();
        let at = (11, shared.read_with_history(|_, h| h.generation()).unwrap());
        let mut w = CacheWatchStream::new(shared.clone(), cancel.clone(), range, options, at);
        shared
            .apply_for_test(vec![put("a/x", "1", 11)], 11)
            .unwrap();
        assert!(
            tokio::time::timeout(Duration::from_secs(1), w.next_batch())
                .await
                .is_err()
        );
        assert_eq!(w.revision(), 11, "revision 11 is before the start");
        shared
            .apply_for_test(vec![put("a/x", "2", 12)], 12)
            .unwrap();
        assert_eq!(keys(&next(&mut w).await), vec![(12, "a/x".into(), None)]);
        cancel.cancel();
        assert!(w.next_batch().await.is_none());
    }
}
