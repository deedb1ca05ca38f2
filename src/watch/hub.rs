//! The hub: one task per client that owns the shared watch stream and every managed watch on
//! it. It opens the stream (through the transport's pick, retries and require-leader), creates
//! and cancels watches on it, hands each watch's batches to its buffer, keeps the stream honest
//! (progress requests, silence limit, member ejection) and, when the stream is lost, opens one
//! on another member and resumes every watch from its cursor.
//!
//! This file is the watches' states and the task's loop; the handle is `handle.rs`, and the
//! task's other methods are grouped by what they deal with: `link.rs` the stream, `probe.rs`
//! its progress requests, `dispatch.rs` the server's answers for each watch, `calls.rs` the
//! calls it makes on the side (version check, reload).
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
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use futures_util::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::buffer::{BatchSender, Refused};
use super::handle::{Command, Inner, NewWatch};
use super::link::{Link, cancel_request};
use super::managed::{Control, WatchBatch};
use super::resume::Cursor;
use crate::call::Transport;
use crate::call::supervise::Supervisor;
use crate::error::{Error, Result};
use crate::proto::etcdserverpb::{WatchCreateRequest, WatchRequest, watch_request::RequestUnion};
use crate::proto::mvccpb::KeyValue;

/// At most this many more of the stream's events already arrived are handled in one turn of
/// the task: bounded, so that commands and creates still get turns while answers pour in.
const ARRIVED_BURST: usize = 256;

/// Where one watch is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// Waiting for a create on the stream.
    Queued,
    /// Create sent on the current stream with this id; its `created` answer is owed.
    Creating { watch_id: i64 },
    /// Running on the current stream; `created` is the revision of its `created` answer:
    /// progress answers above it cover it (see `progress.rs`).
    Active { watch_id: i64, created: i64 },
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
    pub(super) tx: BatchSender,
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
    /// The member the last stream left: a young stream does not spread back to it (a stream
    /// that left a member overdue by its pace would otherwise return as soon as a probe clears
    /// the suspicion, and pay a second resume).
    pub(super) left: Option<Arc<str>>,
    /// When a settled stream last looked for a member to spread to (at most once a window).
    pub(super) spread_checked: Instant,
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
    /// Callers waiting for a progress request to go out (`Command::Progress`).
    pub(super) progress_wanted: Vec<oneshot::Sender<Option<bool>>>,
}

impl HubTask {
    pub(super) fn new(
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
            left: None,
            spread_checked: Instant::now(),
            supervisor: Supervisor::new(transport),
            max_bytes: transport.options.max_response_bytes,
            health: transport.health_changes(),
            revisions: transport.revisions.subscribe(),
            progress_wanted: Vec::new(),
        }
    }

    pub(super) async fn run(mut self) {
        let mut link = Link::Down {
            retry_at: Instant::now(),
            failures: 0,
        };
        loop {
            let mut now = Instant::now();
            let judging = match &link {
                Link::Up(up) => {
                    up.liveness.next_wake() <= now || up.lag.next_wake().is_some_and(|at| at <= now)
                }
                _ => false,
            };
            if judging {
                // What already arrived is read before anything due is judged: on a busy box the
                // task falls behind its own stream, and the lag rule would blame the member for
                // answers waiting in this task's buffer (a stream of 100,000 watches moved so
                // mid-burst, with no fault, and paid a resume of seconds).
                link = self.read_arrived(link);
                now = Instant::now();
            }
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
                // A watch added, dropped or drained, or progress asked for.
                command = self.commands.recv() => match command {
                    Some(command) => self.apply(command, &mut link),
                    // Every handle is gone (an isolated hub whose watches were all dropped, each
                    // removed before its handle went): nobody can ask or read anything again.
                    None => {
                        self.shutdown();
                        return;
                    }
                },
                // A version check or a reload finished.
                Some(internal) = self.internal.recv() => self.on_internal(internal, &mut link),
                // The stream opened or failed to, or a response (or an error) arrived.
                event = link.event() => {
                    link = self.on_event(link, event);
                    link = self.read_arrived(link);
                }
                // Some endpoint's health changed: look at the stream's member now.
                Ok(()) = self.health.changed() => super::link::check_health_now(&mut link),
                // An answer or a probe showed a newer revision: the next advance checks the
                // stream's lag.
                Ok(()) = self.revisions.changed() => {}
                // A probe, the silence limit, a health check, a retry or the idle close is due.
                () = sleep => {}
            }
        }
    }

    /// Handle the stream's events that have already arrived, up to [`ARRIVED_BURST`]: a burst of
    /// answers takes one turn of the loop, and its due work is done once, after it.
    fn read_arrived(&mut self, mut link: Link) -> Link {
        for _ in 0..ARRIVED_BURST {
            // Polled once: a pending poll loses nothing (the loop's `select!` drops this
            // future every turn too), and a stream that is down has no event.
            let Some(event) = link.event().now_or_never() else {
                break;
            };
            link = self.on_event(link, event);
        }
        link
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
            Command::Progress(answer) => self.progress_wanted.push(answer),
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
                            Err(Refused::Full) => {
                                // Resumed (and so reloaded again) once the consumer caught up.
                                entry.state = State::Paused;
                                entry.control.paused.store(true, Ordering::SeqCst);
                                if entry.control.should_resume(entry.tx.len()) {
                                    self.enqueue(key);
                                }
                            }
                            Err(Refused::Closed) => {
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
