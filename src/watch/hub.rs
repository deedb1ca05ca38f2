//! The hub: one task per client that owns the shared watch stream and every managed watch on
//! it. It opens the stream (through the transport's pick, retries and require-leader), creates
//! and cancels watches on it, hands each watch's batches to its buffer, keeps the stream honest
//! (progress requests, silence limit, member ejection) and, when the stream is lost, opens one
//! on another member and resumes every watch from its cursor.
//!
//! This file is the handle, the watches' states and the task's loop; the task's other methods
//! are grouped by what they deal with: `link.rs` the stream, `dispatch.rs` the server's answers
//! for each watch, `calls.rs` the calls it makes on the side (version check, reload).
//!
//! ```text
//!            add                 create sent            created
//!   (new) ---------> Queued ------------------> Creating ---------> Active
//!                      ^  ^                                      |  |  |
//!       stream lost /  |  |  consumer drained half   buffer full |  |  | compacted
//!       reloaded    \  |  +--------------------- Paused <--------+  |  +----------> Reloading
//!                    \-+---------------------------------------------+-------------------+
//! ```
//!
//! The watch's bookkeeping is [`Cursor`] (`resume.rs`); the stream's liveness and progress
//! rules are in `progress.rs`, and the rule that moves it off a member that stalls, by that
//! member's own pace, in `lag.rs`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::link::{Link, cancel_request};
use super::managed::{BUFFER, Control, WatchBatch, WatchStream};
use super::resume::Cursor;
use crate::call::Transport;
use crate::call::supervise::Supervisor;
use crate::error::{Error, Result};
use crate::proto::etcdserverpb::{WatchCreateRequest, WatchRequest, watch_request::RequestUnion};
use crate::proto::mvccpb::KeyValue;

/// The client's watch hub: a handle on its task. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Hub {
    inner: Arc<Inner>,
}

/// What the handles and the task share.
pub(super) struct Inner {
    /// Commands to the task; the task lives until the client is gone.
    commands: mpsc::UnboundedSender<Command>,
    /// Tells watches apart in the hub.
    next_key: AtomicU64,
    /// Streams opened so far (one, unless failures forced reopening).
    pub(super) streams_opened: AtomicU64,
    /// The member whose stream carries the watches now.
    endpoint: Mutex<Option<Arc<str>>>,
}

impl Inner {
    /// Say which member carries the stream now (`None`: no stream).
    pub(super) fn set_endpoint(&self, url: Option<Arc<str>>) {
        *self.endpoint.lock().unwrap_or_else(|e| e.into_inner()) = url;
    }
}

/// What handles ask of the task.
enum Command {
    /// Run a new watch.
    Add(Box<NewWatch>),
    /// The consumer dropped the watch.
    Remove(u64),
    /// The consumer drained a paused watch's buffer.
    Resume(u64),
}

/// A watch to run.
struct NewWatch {
    /// Its key in the hub (the stream's handle names it so).
    key: u64,
    /// The create request, less start revision and watch id (the hub sets those).
    create: WatchCreateRequest,
    /// Reload the range instead of ending on compaction.
    reload: bool,
    /// For a watch from "now": the newest revision this client had seen when it was asked
    /// for; nothing at or below it is delivered (see [`Cursor::from_now`]).
    floor: i64,
    /// The sending half of its buffer.
    tx: mpsc::Sender<Result<WatchBatch>>,
    /// Shared with the stream's handle: pause flag, last item.
    control: Arc<Control>,
    /// Answered with the watch's revision once the server created it.
    ready: oneshot::Sender<Result<i64>>,
}

/// Where a client keeps its hub: started on first use, and started again if its task ended
/// (it panicked on something unforeseen), so that one failure does not leave every later
/// managed watch, election and lock of the client failing with `Shutdown`.
#[derive(Debug, Default)]
pub(crate) struct HubCell(Mutex<Option<Hub>>);

impl HubCell {
    /// The hub now, if one was started (it may have ended).
    pub(crate) fn get(&self) -> Option<Hub> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Hub {
    /// The hub of `transport`: the running one, or a new one on first use or after the last
    /// one's task ended (its command channel is closed then).
    pub(crate) fn of(cell: &HubCell, transport: &Arc<Transport>) -> Hub {
        let mut hub = cell.0.lock().unwrap_or_else(|e| e.into_inner());
        match &*hub {
            Some(running) if !running.inner.commands.is_closed() => running.clone(),
            ended => {
                if ended.is_some() {
                    tracing::warn!("the watch hub's task ended; starting a new one");
                }
                let started = Hub::start(transport);
                *hub = Some(started.clone());
                started
            }
        }
    }

    fn start(transport: &Arc<Transport>) -> Hub {
        let (commands, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            commands,
            next_key: AtomicU64::new(1),
            streams_opened: AtomicU64::new(0),
            endpoint: Mutex::new(None),
        });
        let task = HubTask::new(inner.clone(), transport, rx);
        tokio::spawn(
            task.run()
                .instrument(tracing::info_span!("etcd_ha_watch_hub")),
        );
        Hub { inner }
    }

    /// Start a managed watch; returns once the server created it. Gives up after `limit`. A
    /// watch from "now" (start revision 0) delivers nothing at or below `floor`.
    pub(crate) async fn watch(
        &self,
        create: WatchCreateRequest,
        reload: bool,
        floor: i64,
        limit: Option<Duration>,
    ) -> Result<WatchStream> {
        let key = self.inner.next_key.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(BUFFER);
        let (ready, answer) = oneshot::channel();
        let control = Arc::new(Control::default());
        self.inner
            .commands
            .send(Command::Add(Box::new(NewWatch {
                key,
                create,
                reload,
                floor,
                tx,
                control: control.clone(),
                ready,
            })))
            .map_err(|_| Error::Shutdown)?;
        // Made first, so that giving up (timeout, or the caller dropping us) removes the watch.
        let mut stream = WatchStream::new(rx, control, self.clone(), key);
        let answer = match limit {
            Some(limit) => tokio::time::timeout(limit, answer)
                .await
                .map_err(|_| Error::Timeout)?,
            None => answer.await,
        };
        let revision = answer.map_err(|_| Error::Shutdown)??;
        stream.set_revision(revision);
        Ok(stream)
    }

    /// The watch `key` was dropped: cancel it.
    pub(crate) fn remove(&self, key: u64) {
        let _ = self.inner.commands.send(Command::Remove(key));
    }

    /// The consumer of paused watch `key` drained half its buffer: resume it.
    pub(crate) fn resume(&self, key: u64) {
        let _ = self.inner.commands.send(Command::Resume(key));
    }

    /// The URL of the member whose stream carries the watches now.
    pub(crate) fn endpoint(&self) -> Option<String> {
        self.inner
            .endpoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_deref()
            .map(str::to_owned)
    }

    /// Streams opened so far.
    pub(crate) fn streams_opened(&self) -> u64 {
        self.inner.streams_opened.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("endpoint", &self.endpoint())
            .field("streams_opened", &self.streams_opened())
            .finish()
    }
}

/// Where one watch is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// Waiting for a create on the stream.
    Queued,
    /// Create sent on the current stream with this id; its `created` answer is owed.
    Creating { watch_id: i64 },
    /// Running on the current stream; `stamp` says which progress answers cover it.
    Active { watch_id: i64, stamp: u64 },
    /// Its buffer was full: canceled on the server until the consumer drains half of it.
    Paused,
    /// Its history was compacted: reading the current state of its range.
    Reloading,
    /// Refused as not permitted by stream `stream` (its generation): a read of its range,
    /// which etcd permits by the same rule, tells a real denial from a stale token on that
    /// stream (see `relogin.rs`).
    Verifying { stream: u64 },
}

/// One managed watch.
pub(super) struct Entry {
    /// Its create request (start revision and watch id are set per create).
    pub(super) create: WatchCreateRequest,
    /// Read the current state instead of ending on compaction.
    pub(super) reload: bool,
    /// Deliver [`WatchBatch::Progress`] (the watch asked for progress notifications).
    pub(super) progress: bool,
    /// Where it stands: the revision it resumes from, fragments, dedup.
    pub(super) cursor: Cursor,
    /// Its buffer (never awaited: a full one pauses the watch).
    pub(super) tx: mpsc::Sender<Result<WatchBatch>>,
    /// Shared with its stream handle: pause flag, last item.
    pub(super) control: Arc<Control>,
    /// The creator's wait, until the first `created` answer.
    pub(super) ready: Option<oneshot::Sender<Result<i64>>>,
    /// Where it is (see the diagram above).
    pub(super) state: State,
    /// Creates of it refused as not permitted since its last successful create: after
    /// `MAX_AUTH_REFUSALS` of them it ends whatever the checks say (see `relogin.rs`).
    pub(super) auth_refusals: u8,
}

impl Entry {
    /// The create request that resumes this watch, with `watch_id`.
    pub(super) fn create_request(&self, watch_id: i64) -> WatchRequest {
        let mut create = self.create.clone();
        create.start_revision = self.cursor.resume_from();
        create.watch_id = watch_id;
        WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(create)),
        }
    }
}

/// What background calls report back.
pub(super) enum Internal {
    /// The version check of stream `generation`: whether its member orders progress answers.
    Version { generation: u64, ordered: bool },
    /// The permission check of a watch refused again after a renewal finished.
    Permission { key: u64, result: Result<()> },
    /// The stream `generation`'s member answered a Status sent at `sent` (see `lag.rs`).
    MemberStatus {
        generation: u64,
        sent: Instant,
        revision: i64,
    },
    /// A reload finished.
    Reloaded {
        key: u64,
        result: Result<(i64, Vec<KeyValue>)>,
    },
}

/// The task behind a [`Hub`].
pub(super) struct HubTask {
    /// Shared with the handles: counters, the current endpoint.
    pub(super) inner: Arc<Inner>,
    /// Weak: the hub lives inside the client's transport and must not keep it alive.
    pub(super) transport: Weak<Transport>,
    /// Cancelled when the client goes away.
    pub(super) cancel: CancellationToken,
    /// From the handles.
    commands: mpsc::UnboundedReceiver<Command>,
    /// Given to the calls made on the side, to report back.
    pub(super) internal_tx: mpsc::UnboundedSender<Internal>,
    /// Their reports.
    internal: mpsc::UnboundedReceiver<Internal>,
    /// Every managed watch, by key.
    pub(super) entries: HashMap<u64, Entry>,
    /// Watches in [`State::Queued`], in the order they are to be created (may hold stale keys;
    /// skipped when popped).
    pub(super) queue: VecDeque<u64>,
    /// The next watch id asked for; ids are never reused, so a late answer for a canceled
    /// watch cannot be mistaken for a new one. 0 would mean "server's choice".
    pub(super) next_watch_id: i64,
    /// Streams opened (for `Up::generation`).
    pub(super) generation: u64,
    /// Opens the stream and judges its member (the same rules as the lease keeper's).
    pub(super) supervisor: Supervisor,
    /// Most bytes one watch's reassembled response or reload may take (the client's largest
    /// response).
    pub(super) max_bytes: usize,
    /// Wakes the task when an endpoint's health changes, so that the stream leaves an ejected
    /// or leaderless member at once.
    health: tokio::sync::watch::Receiver<()>,
    /// The newest revision the client knows of, from its answers or its probes (how a client
    /// that writes nothing itself learns of other clients' writes, within a probe interval);
    /// wakes the task when it grows: the stream should show it soon (the lag rule, `lag.rs`).
    pub(super) revisions: tokio::sync::watch::Receiver<i64>,
}

impl HubTask {
    fn new(
        inner: Arc<Inner>,
        transport: &Arc<Transport>,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> Self {
        let (internal_tx, internal) = mpsc::unbounded_channel();
        HubTask {
            inner,
            transport: Arc::downgrade(transport),
            cancel: transport.cancel.child_token(),
            commands,
            internal_tx,
            internal,
            entries: HashMap::new(),
            queue: VecDeque::new(),
            next_watch_id: 1,
            generation: 0,
            supervisor: Supervisor::new(transport),
            max_bytes: transport.options.max_response_bytes,
            health: transport.health_changes(),
            revisions: transport.revisions.subscribe(),
        }
    }

    async fn run(mut self) {
        let mut link = Link::Down {
            retry_at: Instant::now(),
            failures: 0,
        };
        loop {
            let now = Instant::now();
            link = self.advance(link, now);
            let wake = self.next_wake(&link, now);
            let sleep = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // The client is gone: every watch ends.
                () = self.cancel.cancelled() => {
                    self.shutdown();
                    return;
                }
                // A watch added, dropped or drained.
                Some(command) = self.commands.recv() => self.apply(command, &mut link),
                // A version check or a reload finished.
                Some(internal) = self.internal.recv() => self.on_internal(internal, &mut link),
                // The stream opened or failed to, or a response (or an error) arrived.
                event = link.event() => link = self.on_event(link, event),
                // Some endpoint's health changed: look at the stream's member now.
                Ok(()) = self.health.changed() => link.check_health_now(),
                // An answer or a probe showed a newer revision: the next advance checks the
                // stream's lag.
                Ok(()) = self.revisions.changed() => {}
                // A probe, the silence limit, a health check, a retry or the idle close is due.
                () = sleep => {}
            }
        }
    }

    /// Whether a watch waits for a create.
    pub(super) fn has_queued(&self) -> bool {
        self.queue.iter().any(|k| {
            self.entries
                .get(k)
                .is_some_and(|e| e.state == State::Queued)
        })
    }

    /// The next queued watch, taken off the queue.
    pub(super) fn pop_queued(&mut self) -> Option<u64> {
        while let Some(key) = self.queue.pop_front() {
            if self
                .entries
                .get(&key)
                .is_some_and(|e| e.state == State::Queued)
            {
                return Some(key);
            }
        }
        None
    }

    pub(super) fn enqueue(&mut self, key: u64) {
        if let Some(entry) = self.entries.get_mut(&key) {
            entry.state = State::Queued;
            self.queue.push_back(key);
        }
    }

    pub(super) fn watch_id(&mut self) -> i64 {
        let id = self.next_watch_id;
        self.next_watch_id += 1;
        id
    }

    fn apply(&mut self, command: Command, link: &mut Link) {
        match command {
            Command::Add(new) => {
                let NewWatch {
                    key,
                    create,
                    reload,
                    floor,
                    tx,
                    control,
                    ready,
                } = *new;
                let entry = Entry {
                    progress: create.progress_notify,
                    cursor: if create.start_revision > 0 {
                        Cursor::new(create.start_revision, self.max_bytes)
                    } else {
                        Cursor::from_now(floor, self.max_bytes)
                    },
                    create,
                    reload,
                    tx,
                    control,
                    ready: Some(ready),
                    state: State::Queued,
                    auth_refusals: 0,
                };
                self.entries.insert(key, entry);
                self.queue.push_back(key);
            }
            Command::Remove(key) => {
                let Some(entry) = self.entries.remove(&key) else {
                    return;
                };
                // A create in flight is canceled when its answer comes (the watch is gone).
                if let (State::Active { watch_id, .. }, Link::Up(up)) = (entry.state, link) {
                    up.ids.remove(&watch_id);
                    up.outbox.push_back(cancel_request(watch_id));
                }
            }
            Command::Resume(key) => {
                if self
                    .entries
                    .get(&key)
                    .is_some_and(|e| e.state == State::Paused)
                {
                    tracing::debug!("watch consumer caught up; resuming the watch");
                    self.enqueue(key);
                }
            }
        }
    }

    fn on_internal(&mut self, internal: Internal, link: &mut Link) {
        match internal {
            Internal::Version {
                generation,
                ordered,
            } => {
                if let Link::Up(up) = link
                    && up.generation == generation
                {
                    up.gate.set_ordered(ordered);
                }
            }
            Internal::Permission { key, result } => self.permission_checked(key, result, link),
            Internal::MemberStatus {
                generation,
                sent,
                revision,
            } => {
                if let Link::Up(up) = link
                    && up.generation == generation
                {
                    up.lag.member_status(revision, sent);
                }
            }
            Internal::Reloaded { key, result } => {
                if !self
                    .entries
                    .get(&key)
                    .is_some_and(|e| e.state == State::Reloading)
                {
                    return;
                }
                match result {
                    Ok((revision, kvs)) => {
                        let entry = self.entries.get_mut(&key).expect("checked above");
                        match entry
                            .tx
                            .try_send(Ok(WatchBatch::Reloaded { revision, kvs }))
                        {
                            Ok(()) => {
                                entry.cursor.advance(revision);
                                tracing::info!(revision, "watch range reloaded; resuming after it");
                                self.enqueue(key);
                            }
                            Err(TrySendError::Full(_)) => {
                                // Resumed (and so reloaded again) once the consumer caught up.
                                entry.state = State::Paused;
                                entry.control.paused.store(true, Ordering::SeqCst);
                                if entry.control.should_resume(BUFFER - entry.tx.capacity()) {
                                    self.enqueue(key);
                                }
                            }
                            Err(TrySendError::Closed(_)) => {
                                self.entries.remove(&key);
                            }
                        }
                    }
                    Err(error) => self.end(key, Err(error)),
                }
            }
        }
    }

    /// End one watch with its last item (an error, or [`WatchBatch::Compacted`]).
    pub(super) fn end(&mut self, key: u64, last: Result<WatchBatch>) {
        let Some(mut entry) = self.entries.remove(&key) else {
            return;
        };
        match (entry.ready.take(), last) {
            // Its creator still waits: the error is the answer to the watch call.
            (Some(ready), Err(error)) => {
                let _ = ready.send(Err(error));
            }
            (_, last) => entry.control.set_last(last),
        }
        // Dropping the entry drops the buffer's sender: the stream ends after `last`.
    }

    pub(super) fn end_all(&mut self, error: impl Fn() -> Error) {
        let keys: Vec<u64> = self.entries.keys().copied().collect();
        for key in keys {
            self.end(key, Err(error()));
        }
    }

    fn shutdown(&mut self) {
        self.end_all(|| Error::Shutdown);
        *self
            .inner
            .endpoint
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Options;

    #[tokio::test(start_paused = true)]
    async fn a_hub_whose_task_ended_is_started_again() {
        let urls = vec!["http://127.0.0.1:1".to_string()];
        let transport = Transport::unprobed(&urls, Options::default());
        let cell = HubCell::default();
        let first = Hub::of(&cell, &transport);
        assert!(Arc::ptr_eq(&first.inner, &Hub::of(&cell, &transport).inner));
        // A hub whose task is gone (it panicked): its command channel is closed.
        let (commands, rx) = mpsc::unbounded_channel();
        drop(rx);
        let dead = Hub {
            inner: Arc::new(Inner {
                commands,
                next_key: AtomicU64::new(1),
                streams_opened: AtomicU64::new(0),
                endpoint: Mutex::new(None),
            }),
        };
        *cell.0.lock().unwrap() = Some(dead.clone());
        let again = Hub::of(&cell, &transport);
        assert!(!Arc::ptr_eq(&again.inner, &dead.inner), "a new hub");
        assert!(!again.inner.commands.is_closed(), "and it runs");
    }
}
