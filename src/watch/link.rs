//! The shared stream itself: opening it (through the transport's pick, retries and
//! require-leader), keeping it honest (progress probes, sent by `probe.rs`; the lag rule of
//! `lag.rs`; the silence limit; the member's health as the probers see it), sending creates
//! and cancels, and leaving it for another member.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc::error::TrySendError;
use tokio::time::Instant;

use super::hub::{HubTask, State};
use super::lag::{Lag, Verdict};
use super::progress::{Due, Liveness, ProgressGate};
use crate::call::link::{self, Stream};
use crate::call::supervise::{self, FULL_RETRY};
use crate::error::{Error, Result};
use crate::proto::etcdserverpb::{
    WatchCancelRequest, WatchRequest, WatchResponse, watch_request::RequestUnion,
};

/// A stream with no watch left is closed after this long (a watch made soon after reuses it).
const IDLE_LINGER: Duration = Duration::from_secs(10);

/// A stream younger than this that shares its member with a sibling moves to a free member.
const SPREAD_WINDOW: Duration = Duration::from_secs(5);

/// The shared stream's state: the skeleton every supervised stream has (`call::link`); it
/// opens with the create of watch `first` (key, watch id) as its first message, and pauses
/// while a create was refused though its user may read its range: the token is being renewed
/// (a stream carries the token it was opened with), then a stream opens at `retry_at` (see
/// `relogin.rs`).
pub(super) type Link =
    link::Link<WatchRequest, WatchResponse, Box<Up>, (u64, i64), super::relogin::Renewal>;

/// What happened on the link.
pub(super) type LinkEvent = link::LinkEvent<WatchRequest, WatchResponse>;

/// An open stream and what the hub knows about it.
pub(super) struct Up {
    /// The stream (its requests bounded: a stuck stream pushes back, see [`FULL_RETRY`]).
    pub(super) stream: Stream<WatchRequest, WatchResponse>,
    /// Tells this stream's background results from an older stream's.
    pub(super) generation: u64,
    /// Creates sent and not answered yet, in order (etcd answers creates in order): the id
    /// asked for and the watch (`None`: a canary).
    pub(super) creating: VecDeque<(i64, Option<u64>)>,
    /// Running watches by the id the server uses.
    pub(super) ids: HashMap<i64, u64>,
    /// Is the stream alive (probes, silence limit).
    pub(super) liveness: Liveness,
    /// Does it keep up with the revisions the client sees, at its member's pace (`lag.rs`).
    pub(super) lag: Lag,
    /// Progress requests and what their answers prove on this member.
    pub(super) gate: ProgressGate,
    /// Cancels that did not fit in the request channel yet.
    pub(super) outbox: VecDeque<WatchRequest>,
    /// Since when no watch is left.
    pub(super) idle_since: Option<Instant>,
    /// Look at the member's health on the next advance (some endpoint's health changed).
    pub(super) check_health: bool,
    /// Look again then, though nothing changes: the member lost its leader since the open,
    /// and its grace runs out (`supervise::NO_LEADER_GRACE`).
    pub(super) recheck_health: Option<Instant>,
    /// The token generation when it opened: the token it carries is this one or older.
    pub(super) token_generation: u64,
}

impl link::Holds<WatchRequest, WatchResponse> for Up {
    fn stream(&mut self) -> &mut Stream<WatchRequest, WatchResponse> {
        &mut self.stream
    }
}

/// Some endpoint's health changed: look at the stream's member on the next advance rather
/// than at the next periodic health check.
pub(super) fn check_health_now(link: &mut Link) {
    if let Link::Up(up) = link {
        up.check_health = true;
    }
}

impl HubTask {
    /// When the loop must look again without anything arriving.
    pub(super) fn next_wake(&self, link: &Link, now: Instant) -> Option<Instant> {
        match link {
            Link::Down { retry_at, .. } => self.has_queued().then_some(*retry_at),
            Link::Opening { .. } | Link::Paused { .. } => None,
            Link::Up(up) => {
                let mut wake = up.liveness.next_wake();
                if let Some(lag) = up.lag.next_wake() {
                    wake = wake.min(lag);
                }
                let waiting =
                    !up.outbox.is_empty() || self.has_queued() || !self.progress_wanted.is_empty();
                if waiting && up.stream.tx.capacity() == 0 {
                    wake = wake.min(now + FULL_RETRY);
                }
                if let Some(idle) = up.idle_since {
                    wake = wake.min(idle + IDLE_LINGER);
                }
                if let Some(at) = up.recheck_health {
                    wake = wake.min(at);
                }
                Some(wake)
            }
        }
    }

    /// Whether the stream shares its member with a sibling and a member is free for it. A young
    /// one (streams that opened together share one member) takes any free member but the one
    /// it just left (it would return once a probe cleared the suspicion that made it leave). A
    /// settled one moves only when caught up (its watches resume at the head), to a member
    /// healthy for [`SPREAD_WINDOW`] (one back after a failure), looking once a window.
    fn should_spread(&mut self, up: &Up, seen: i64, now: Instant) -> bool {
        let young = now - up.stream.opened < SPREAD_WINDOW;
        if !young && (up.lag.shown() < seen || now < self.spread_checked + SPREAD_WINDOW) {
            return false;
        }
        if !self.inner.shares_with_lower(&up.stream.endpoint.url) {
            return false;
        }
        if !young {
            self.spread_checked = now;
        }
        let (also, settled) = match young {
            true => (self.left.as_deref(), Duration::ZERO),
            false => (None, SPREAD_WINDOW),
        };
        let siblings = self.inner.siblings();
        let taken = siblings.as_deref().unwrap_or(&[]);
        self.supervisor.free_member(taken, also, settled, now)
    }

    /// Whether the stream should leave its member now (`Supervisor::better_elsewhere`); when
    /// the member lost its leader since the open, when to ask again.
    fn leave_member(&self, up: &mut Up, now: Instant) -> bool {
        let (endpoint, opened) = (&up.stream.endpoint, up.stream.opened);
        up.recheck_health = self
            .supervisor
            .recheck_at(endpoint, opened, now)
            .filter(|at| *at > now);
        self.supervisor.better_elsewhere(endpoint, opened)
    }

    /// Do what is due at `now`: open a stream, leave a dead or bad one, probe it, send
    /// cancels and creates, close it when idle.
    pub(super) fn advance(&mut self, link: Link, now: Instant) -> Link {
        match link {
            Link::Down { retry_at, failures } if now >= retry_at && self.has_queued() => {
                self.open(now, failures)
            }
            Link::Up(mut up) => {
                match up.liveness.poll(now) {
                    Due::Dead => {
                        tracing::warn!(
                            endpoint = %up.stream.endpoint.url,
                            silent = ?up.liveness.silent_for(now),
                            "watch stream silent; reopening elsewhere",
                        );
                        return self.lose(up, Some(&Error::Timeout), now);
                    }
                    // The periodic probe is a doubt: answered within the member's own pace, or
                    // the stream moves (below).
                    Due::Probe => up.lag.doubt(now),
                    Due::Nothing => {}
                }
                let seen = *self.revisions.borrow();
                let hint = up.stream.endpoint.pace_hint();
                match up.lag.poll(seen, hint, now) {
                    Verdict::Ask => {
                        self.probe(&mut up, now);
                        self.ask_member(&up, now);
                    }
                    Verdict::Vouched => {
                        tracing::debug!(
                            endpoint = %up.stream.endpoint.url,
                            "watch stream slow, but its member is current; staying",
                        );
                    }
                    Verdict::Stalled if !self.supervisor.healthy_elsewhere(&up.stream.endpoint) => {
                        // Nowhere better to go: suspected, and the fixed rules decide.
                        tracing::debug!(
                            endpoint = %up.stream.endpoint.url,
                            "watch stream overdue, but no other member is healthy; staying",
                        );
                        up.stream.endpoint.suspect();
                    }
                    Verdict::Stalled => {
                        tracing::warn!(
                            endpoint = %up.stream.endpoint.url,
                            shown = up.lag.shown(),
                            seen,
                            limit = ?up.lag.stall_limit(hint),
                            "watch stream overdue by its member's pace; reopening elsewhere",
                        );
                        // Suspected, not blamed: the next open avoids it, ejection stays with
                        // the probers and the silence limit.
                        up.stream.endpoint.suspect();
                        return self.lose(up, None, now);
                    }
                    Verdict::Nothing => {}
                }
                let recheck = up.recheck_health.is_some_and(|at| now >= at);
                if (std::mem::take(&mut up.check_health) || recheck)
                    && self.leave_member(&mut up, now)
                {
                    let health = up.stream.endpoint.state();
                    tracing::info!(
                        endpoint = %up.stream.endpoint.url,
                        ?health,
                        "watch stream's member is unhealthy; reopening elsewhere"
                    );
                    return self.lose(up, None, now);
                }
                if self.should_spread(&up, seen, now) {
                    tracing::info!(
                        endpoint = %up.stream.endpoint.url,
                        "watch stream shares its member with another; moving to a free one",
                    );
                    return self.lose(up, None, now);
                }
                if self.entries.is_empty() {
                    let since = *up.idle_since.get_or_insert(now);
                    if now - since >= IDLE_LINGER {
                        tracing::debug!(
                            endpoint = %up.stream.endpoint.url,
                            "no watch left; closing the watch stream",
                        );
                        self.inner.set_endpoint(None);
                        return Link::Down {
                            retry_at: now,
                            failures: 0,
                        };
                    }
                } else {
                    up.idle_since = None;
                }
                if !self.progress_wanted.is_empty() {
                    self.progress_now(&mut up, now);
                }
                if let Err(e) = self.flush(&mut up) {
                    return self.lose(up, Some(&e), now);
                }
                Link::Up(up)
            }
            other => other,
        }
    }

    /// Send what waits: cancels first, then creates, as long as the request channel has room.
    pub(super) fn flush(&mut self, up: &mut Up) -> Result<()> {
        while let Some(request) = up.outbox.pop_front() {
            match up.stream.tx.try_send(request) {
                Ok(()) => {}
                Err(TrySendError::Full(request)) => {
                    up.outbox.push_front(request);
                    return Ok(());
                }
                Err(TrySendError::Closed(_)) => return Err(Error::StreamClosed),
            }
        }
        while up.stream.tx.capacity() > 0 {
            let Some(key) = self.pop_queued() else { break };
            let watch_id = self.watch_id();
            let entry = self.entries.get_mut(&key).expect("popped keys exist");
            match up.stream.tx.try_send(entry.create_request(watch_id)) {
                Ok(()) => {
                    entry.state = State::Creating { watch_id };
                    up.creating.push_back((watch_id, Some(key)));
                }
                Err(e) => {
                    self.queue.push_front(key);
                    return match e {
                        TrySendError::Full(_) => Ok(()),
                        TrySendError::Closed(_) => Err(Error::StreamClosed),
                    };
                }
            }
        }
        Ok(())
    }

    /// Start opening a stream whose first message creates the first queued watch.
    pub(super) fn open(&mut self, now: Instant, failures: u32) -> Link {
        let key = self.pop_queued().expect("opened only with a queued watch");
        let watch_id = self.watch_id();
        let entry = self.entries.get_mut(&key).expect("popped keys exist");
        entry.state = State::Creating { watch_id };
        let first = entry.create_request(watch_id);
        // Away from the members the client's other watch streams are on, while there is one.
        let open = self.supervisor.open_avoiding(first, self.inner.siblings());
        Link::Opening {
            open,
            started: now,
            failures,
            first: (key, watch_id),
        }
    }

    /// The stream opened (or failed to), or said something (or failed).
    pub(super) fn on_event(&mut self, link: Link, event: LinkEvent) -> Link {
        let now = Instant::now();
        match (link, event) {
            (
                Link::Opening {
                    started,
                    failures,
                    first,
                    ..
                },
                LinkEvent::Opened(Ok(opened)),
            ) => {
                let stream = Stream::new(opened, failures, now);
                let endpoint = &stream.endpoint;
                let n = self.inner.streams_opened.fetch_add(1, Ordering::Relaxed) + 1;
                self.generation += 1;
                tracing::info!(
                    endpoint = %endpoint.url,
                    took = ?now - started,
                    watches = self.entries.len(),
                    streams = n,
                    "watch stream open",
                );
                self.inner.set_endpoint(Some(endpoint.url.clone()));
                self.check_version(endpoint);
                let token_generation = self.transport.upgrade().map_or(0, |t| t.token_generation());
                Link::Up(Box::new(Up {
                    stream,
                    generation: self.generation,
                    creating: VecDeque::from([(first.1, Some(first.0))]),
                    ids: HashMap::new(),
                    liveness: Liveness::new(now),
                    lag: Lag::new(),
                    gate: ProgressGate::default(),
                    outbox: VecDeque::new(),
                    idle_since: None,
                    // The member may have turned bad while the stream was opening.
                    check_health: true,
                    recheck_health: None,
                    token_generation,
                }))
            }
            (
                Link::Opening {
                    failures, first, ..
                },
                LinkEvent::Opened(Err(error)),
            ) => {
                // The transport already blamed the members it tried.
                if let Some(entry) = self.entries.get_mut(&first.0)
                    && entry.state == (State::Creating { watch_id: first.1 })
                {
                    entry.state = State::Queued;
                    self.queue.push_front(first.0);
                }
                if let Some(fatal) = fatal_copy(&error) {
                    tracing::warn!(%error, "watch stream cannot be opened; ending every watch");
                    self.end_all(fatal);
                }
                let reopen = supervise::failed_open(failures, now);
                let retry_in = reopen.at - now;
                tracing::warn!(%error, ?retry_in, "watch stream did not open");
                Link::down(reopen)
            }
            (Link::Up(mut up), LinkEvent::Answer(answer)) => match answer {
                Ok(Some(response)) => {
                    up.liveness.heard(now);
                    up.lag
                        .answered(response.header.as_ref().map_or(0, |h| h.revision), now);
                    self.on_response(&mut up, response);
                    Link::Up(up)
                }
                Ok(None) => {
                    tracing::warn!(
                        endpoint = %up.stream.endpoint.url,
                        "watch stream ended by the server; reopening",
                    );
                    self.lose(up, Some(&Error::StreamClosed), now)
                }
                Err(error) => {
                    tracing::warn!(
                        endpoint = %up.stream.endpoint.url,
                        %error,
                        "watch stream failed; reopening",
                    );
                    self.lose(up, Some(&error), now)
                }
            },
            (
                Link::Paused {
                    retry_at, failures, ..
                },
                LinkEvent::Resumed(result),
            ) => self.renewed(result, retry_at, failures, now),
            (Link::Up(mut up), LinkEvent::Suspected) => {
                if up.stream.endpoint.is_suspected() {
                    tracing::debug!(
                        endpoint = %up.stream.endpoint.url,
                        "watch member suspected; asking",
                    );
                    up.lag.doubt(now);
                }
                Link::Up(up)
            }
            (link, _) => link,
        }
    }

    /// Leave the stream: tell the transport what went wrong with its member (so the next pick
    /// avoids it), and queue every watch on it for a resume on the next stream.
    pub(super) fn lose(&mut self, up: Box<Up>, error: Option<&Error>, now: Instant) -> Link {
        Link::down(self.leave(up, error, now))
    }

    /// [`lose`](Self::lose) without deciding what comes next: when to open again.
    pub(super) fn leave(
        &mut self,
        up: Box<Up>,
        error: Option<&Error>,
        now: Instant,
    ) -> supervise::Reopen {
        let reopen = self.supervisor.lost(
            &up.stream.endpoint,
            error,
            up.stream.opened,
            up.stream.failures,
            now,
        );
        self.inner.set_endpoint(None);
        self.left = Some(up.stream.endpoint.url.clone());
        if error.is_some() {
            self.inner.streams_broken.fetch_add(1, Ordering::Relaxed);
        }
        let mut moved: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| matches!(e.state, State::Creating { .. } | State::Active { .. }))
            .map(|(k, _)| *k)
            .collect();
        // Oldest watches first, as they were created.
        moved.sort_unstable();
        // How deep in the history the resume starts: etcd catches resumed watches up 512 at a
        // time, each pass reading from the oldest start among them to its head.
        let count = moved.len();
        // Only for the debug line: 100,000 starts sorted cost a few milliseconds.
        let debug = tracing::enabled!(tracing::Level::DEBUG);
        let mut starts = Vec::with_capacity(if debug { count } else { 0 });
        for key in moved {
            if let Some(entry) = self.entries.get_mut(&key) {
                entry.cursor.stream_lost();
                if debug {
                    starts.push(entry.cursor.resume_from());
                }
            }
            self.enqueue(key);
        }
        if !debug {
            return reopen;
        }
        starts.sort_unstable();
        let oldest = starts.first().copied().unwrap_or(0);
        let median = starts.get(starts.len() / 2).copied().unwrap_or(0);
        let newest = starts.last().copied().unwrap_or(0);
        let at_newest = starts.iter().filter(|s| **s == newest).count();
        let seen = *self.revisions.borrow();
        tracing::debug!(
            count,
            oldest,
            median,
            newest,
            at_newest,
            seen,
            "watches to resume on the next stream"
        );
        reopen
    }
}

/// The request that cancels watch `watch_id` on the stream.
pub(super) fn cancel_request(watch_id: i64) -> WatchRequest {
    WatchRequest {
        request_union: Some(RequestUnion::CancelRequest(WatchCancelRequest { watch_id })),
    }
}

/// For an open failure that no retry can cure (the client is gone, or it may not watch at
/// all), a maker of copies of it to end every watch with; `None` for anything else, which is
/// retried for as long as it takes (a cluster restarting says many odd things).
pub(super) fn fatal_copy(error: &Error) -> Option<fn() -> Error> {
    match error {
        Error::Shutdown => Some(|| Error::Shutdown),
        Error::AuthFailed => Some(|| Error::AuthFailed),
        Error::AuthRequired => Some(|| Error::AuthRequired),
        Error::PermissionDenied => Some(|| Error::PermissionDenied),
        _ => None,
    }
}
