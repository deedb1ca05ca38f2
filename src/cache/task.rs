//! The task that fills a [`Cache`](super::Cache): loads its range at one revision (paged),
//! then applies a managed watch on a stream of its own from the next revision, exactly once
//! through every failover; a compaction past its resume point reloads the range, a watch
//! that ends loads it again. And [`Shared`]: what the task, the rounds and the readers share.
//!
//! ```text
//!   load (pages at one revision R) ──> watch from R + 1 ──> Events: apply, publish
//!        ^                                  │               Progress: advance, publish
//!        │ backoff                          │               Reloaded: replace, publish
//!        └──── the watch ended (an error) ──┘
//!   a limit hit anywhere: the cache is broken, every read fails with Error::CacheLimit
//! ```

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{Notify, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::history::History;
use super::options::KeyRange;
use super::store::{Limits, Proof, Store};
use crate::error::{Error, Result};
use crate::kv::{GetOptions, Kv};
use crate::proto::mvccpb::Event;
use crate::watch::{Hub, Watch, WatchBatch, WatchOptions};

/// How long a round waits for its progress request to go out (the stream may be between
/// members); past it the range's own proof is read instead.
const SEND_PROGRESS_LIMIT: Duration = Duration::from_millis(250);
/// First and longest wait before loading again after the watch ended.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

/// What became of a progress request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sent {
    /// Sent, to a member whose answer proves progress.
    Ordered,
    /// Sent, to a member whose answer proves only that the stream is alive.
    Unordered,
    /// Not sent in time (no stream, or one between members), or to a member whose version is
    /// not known yet.
    Not,
}

/// Counters of a cache's work.
#[derive(Debug, Default)]
pub(super) struct Stats {
    pub(super) loads: AtomicU64,
    pub(super) reloads: AtomicU64,
    pub(super) events: AtomicU64,
    pub(super) rounds: AtomicU64,
    pub(super) quorum_reads: AtomicU64,
    pub(super) range_proofs: AtomicU64,
    pub(super) progress_requests: AtomicU64,
    pub(super) checks: AtomicU64,
    pub(super) mismatches: AtomicU64,
    pub(super) fallbacks: AtomicU64,
}

/// What changes together: the store, the recent events that made it, and whether it may
/// serve.
#[derive(Debug)]
struct State {
    store: Store,
    /// Every event after `history.since()` up to the store's revision.
    history: History,
    /// A limit was hit: `(what, limit)` of the [`Error::CacheLimit`] every read gets.
    broken: Option<(&'static str, usize)>,
    /// The client shut down.
    ended: bool,
}

impl State {
    /// A new load: the history before it is not known, only its result.
    fn replace(&mut self, store: Store) {
        self.history.reset(store.revision());
        self.store = store;
    }

    /// Apply a batch of events to the store and keep them (with their previous values).
    fn apply(&mut self, events: Vec<Event>, revision: i64) -> Result<()> {
        let applied = self.store.apply(events, revision)?;
        self.history.push(applied);
        Ok(())
    }
}

/// What the feeding task, the rounds and the readers share.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) range: KeyRange,
    limits: Limits,
    state: RwLock<State>,
    /// Bumped after every change of the state.
    changed: watch::Sender<()>,
    /// The hub of the current watch (to ask for progress).
    hub: Mutex<Option<Hub>>,
    /// A nudge (a progress request not waited for) is on its way.
    nudging: AtomicBool,
    /// What the stream's member said of its progress answers at the last request: 0 not
    /// known, 1 they prove progress, 2 they do not.
    ordered: AtomicU8,
    /// The revision the newest round needs (for [`Error::NotFresh`]).
    wanted: AtomicI64,
    /// The detector found a divergence: the feeding task loads the range again (set, then
    /// `reload_now` wakes it; cleared when a load begins).
    reload_wanted: AtomicBool,
    reload_now: Notify,
    pub(super) stats: Stats,
}

impl Shared {
    /// `history`: the most events the ring keeps for local watches.
    pub(super) fn new(range: KeyRange, limits: Limits, history: usize) -> Arc<Shared> {
        Arc::new(Shared {
            range,
            limits,
            state: RwLock::new(State {
                store: Store::new(limits),
                history: History::new(history, 0),
                broken: None,
                ended: false,
            }),
            changed: watch::Sender::new(()),
            hub: Mutex::new(None),
            nudging: AtomicBool::new(false),
            ordered: AtomicU8::new(0),
            wanted: AtomicI64::new(0),
            reload_wanted: AtomicBool::new(false),
            reload_now: Notify::new(),
            stats: Stats::default(),
        })
    }

    fn update<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let out = f(&mut self.state.write().unwrap_or_else(|e| e.into_inner()));
        self.changed.send_replace(());
        out
    }

    /// Read the store, unless the cache cannot serve.
    pub(super) fn read<R>(&self, f: impl FnOnce(&Store) -> R) -> Result<R> {
        self.read_with_history(|store, _| f(store))
    }

    /// Read the store and its history together (one revision for both), unless the cache
    /// cannot serve.
    pub(super) fn read_with_history<R>(&self, f: impl FnOnce(&Store, &History) -> R) -> Result<R> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        if let Some((what, limit)) = state.broken {
            return Err(Error::CacheLimit { what, limit });
        }
        if state.ended {
            return Err(Error::Shutdown);
        }
        Ok(f(&state.store, &state.history))
    }

    /// Load `store` as the feeding task does (for the local watches' unit tests).
    #[cfg(test)]
    pub(super) fn load_for_test(&self, store: Store) {
        self.update(|s| s.replace(store));
    }

    /// Apply events as the feeding task does (for the local watches' unit tests).
    #[cfg(test)]
    pub(super) fn apply_for_test(&self, events: Vec<Event>, revision: i64) -> Result<()> {
        self.update(|s| s.apply(events, revision))
    }

    /// Drop `key` from the store without an event (a divergence, for the detector's tests).
    #[cfg(feature = "testkit")]
    pub(super) fn forget(&self, key: &[u8]) -> bool {
        self.update(|s| s.store.forget(key))
    }

    /// Load the range again (the store diverged from etcd).
    pub(super) fn reload(&self) {
        self.reload_wanted.store(true, Ordering::Release);
        self.reload_now.notify_waiters();
    }

    /// Whether the cache can serve.
    pub(super) fn check(&self) -> Result<()> {
        self.read(|_| ())
    }

    /// Whether the store is fresh by `proof`, its revision moved up to the proof's when it
    /// is (see [`Store::prove`]).
    pub(super) fn store_fresh(&self, proof: &Proof) -> bool {
        match self.read(|s| (s.is_fresh(proof), s.revision())) {
            Ok((true, revision)) if revision < proof.revision() => {
                self.update(|s| s.store.prove(proof))
            }
            Ok((fresh, _)) => fresh,
            Err(_) => false,
        }
    }

    pub(super) fn not_fresh(&self, wanted: i64) -> Error {
        match self.read(Store::revision) {
            Ok(revision) => Error::NotFresh { revision, wanted },
            Err(e) => e,
        }
    }

    pub(super) fn subscribe(&self) -> watch::Receiver<()> {
        self.changed.subscribe()
    }

    /// Ask the cache's stream for progress: whether the request went out in time, and to a
    /// member whose answers prove progress.
    pub(super) async fn request_progress(&self) -> Sent {
        let hub = self.hub.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(hub) = hub else { return Sent::Not };
        self.stats.progress_requests.fetch_add(1, Ordering::Relaxed);
        let sent = match tokio::time::timeout(SEND_PROGRESS_LIMIT, hub.request_progress()).await {
            Ok(Ok(Some(true))) => Sent::Ordered,
            Ok(Ok(Some(false))) => Sent::Unordered,
            // Sent, but the member's version is not known yet: as good as not sent.
            Ok(Ok(None) | Err(_)) | Err(_) => Sent::Not,
        };
        match sent {
            Sent::Ordered => self.ordered.store(1, Ordering::Relaxed),
            Sent::Unordered => self.ordered.store(2, Ordering::Relaxed),
            Sent::Not => {}
        }
        self.changed.send_replace(());
        sent
    }

    /// Whether the stream's member orders progress answers, as its last request told
    /// (`None`: not known yet).
    pub(super) fn ordered(&self) -> Option<bool> {
        match self.ordered.load(Ordering::Relaxed) {
            1 => Some(true),
            2 => Some(false),
            _ => None,
        }
    }

    pub(super) fn set_wanted(&self, revision: i64) {
        self.wanted.fetch_max(revision, Ordering::Relaxed);
    }

    pub(super) fn wanted(&self) -> i64 {
        self.wanted.load(Ordering::Relaxed)
    }

    /// The member whose stream feeds the cache now.
    pub(super) fn endpoint(&self) -> Option<String> {
        let hub = self.hub.lock().unwrap_or_else(|e| e.into_inner()).clone();
        hub.and_then(|hub| hub.endpoint())
    }

    /// Ask for progress without waiting; one such request at a time.
    pub(super) fn nudge(self: &Arc<Self>) {
        if self.nudging.swap(true, Ordering::AcqRel) {
            return;
        }
        let shared = self.clone();
        tokio::spawn(async move {
            shared.request_progress().await;
            shared.nudging.store(false, Ordering::Release);
        });
    }
}

/// What the feeding task is given.
pub(super) struct Feed {
    pub(super) shared: Arc<Shared>,
    pub(super) kv: Kv,
    /// A watch handle of the cache's own (an isolated stream).
    pub(super) watch: Watch,
    pub(super) page_size: u32,
    pub(super) cancel: CancellationToken,
}

impl Feed {
    /// Load, watch, apply; load again when the watch ends. `first` gets the first load's
    /// outcome (a cache that cannot load once is not made).
    pub(super) async fn run(self, first: oneshot::Sender<Result<()>>) {
        let cancel = self.cancel.clone();
        tokio::select! {
            () = cancel.cancelled() => {}
            () = self.feed(first) => {}
        }
    }

    async fn feed(&self, first: oneshot::Sender<Result<()>>) {
        let mut first = Some(first);
        let mut backoff = BACKOFF.0;
        loop {
            self.shared.reload_wanted.store(false, Ordering::Release);
            let loaded = self.load().await;
            let error = match loaded {
                Ok(store) => {
                    let revision = store.revision();
                    self.shared.update(|s| s.replace(store));
                    match self.follow(revision, &mut first).await {
                        Ok(()) => {
                            backoff = BACKOFF.0;
                            continue;
                        }
                        Err(error) => error,
                    }
                }
                Err(error) => error,
            };
            // The first load or watch failed: the cache is not made, with this error.
            if let Some(first) = first.take() {
                let _ = first.send(Err(error));
                return;
            }
            if self.ends_with(&error) {
                return;
            }
            tracing::warn!(%error, "cache load or watch ended; loading the range again");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF.1);
        }
    }

    /// Whether `error` ends the cache (recorded for the readers).
    fn ends_with(&self, error: &Error) -> bool {
        match error {
            Error::CacheLimit { what, limit } => {
                tracing::warn!(what, limit, "cache over its limit; it stops serving");
                self.shared.update(|s| s.broken = Some((what, *limit)));
                true
            }
            Error::Shutdown => {
                self.shared.update(|s| s.ended = true);
                true
            }
            _ => false,
        }
    }

    /// The whole range at one revision, page by page.
    async fn load(&self) -> Result<Store> {
        let range = &self.shared.range;
        let options = GetOptions::new()
            .with_range(range.range_end.clone())
            .with_page_size(self.page_size);
        let mut pages = self.kv.get_stream(range.key.clone(), options);
        let mut store = Store::new(self.shared.limits);
        while let Some(page) = pages.page().await? {
            for kv in page {
                store.insert(kv)?;
            }
        }
        store.advance(pages.revision().unwrap_or(0));
        self.shared.stats.loads.fetch_add(1, Ordering::Relaxed);
        Ok(store)
    }

    /// Apply the watch from `revision + 1` until it ends: `Ok` when it ended cleanly (a
    /// compaction without reload), else its error. `first`, if still waiting, learns that
    /// the cache is made once the watch is.
    async fn follow(
        &self,
        revision: i64,
        first: &mut Option<oneshot::Sender<Result<()>>>,
    ) -> Result<()> {
        let range = &self.shared.range;
        let options = WatchOptions::new()
            .with_range(range.range_end.clone())
            .with_start_revision(revision + 1)
            .with_progress_notify()
            .with_reload_on_compaction();
        let mut stream = self.watch.watch(range.key.clone(), options).await?;
        *self.shared.hub.lock().unwrap_or_else(|e| e.into_inner()) = Some(stream.hub());
        if let Some(first) = first.take() {
            let _ = first.send(Ok(()));
        }
        loop {
            // Registered before the flag is read: a reload asked for in between still wakes it.
            let reload = self.shared.reload_now.notified();
            tokio::pin!(reload);
            reload.as_mut().enable();
            if self.shared.reload_wanted.load(Ordering::Acquire) {
                return Ok(());
            }
            let batch = tokio::select! {
                batch = stream.next_batch() => batch,
                () = reload => continue,
            };
            let Some(batch) = batch else { break };
            match batch? {
                WatchBatch::Events { revision, events } => {
                    // Counted before they are published: a reader woken by them sees them.
                    let n = events.len() as u64;
                    self.shared.stats.events.fetch_add(n, Ordering::Relaxed);
                    self.shared.update(|s| s.apply(events, revision))?;
                }
                WatchBatch::Progress { revision } => {
                    self.shared.update(|s| s.store.advance(revision));
                }
                WatchBatch::Reloaded { revision, kvs } => {
                    let store = Store::loaded(self.shared.limits, kvs, revision)?;
                    self.shared.stats.reloads.fetch_add(1, Ordering::Relaxed);
                    self.shared.update(|s| s.replace(store));
                }
                WatchBatch::Compacted { .. } => return Ok(()),
            }
        }
        Ok(())
    }
}
