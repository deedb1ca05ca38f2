//! The keeper task: owns one keep-alive stream (its slot's, `streams.rs`) and drives the
//! [`Table`] of that slot's leases with it: opens the stream (leader-routed, require-leader,
//! through the transport's pick and retries), sends renewals as they fall due, reads the
//! answers, reopens on another member when the stream fails, falls silent or its member is
//! ejected, and marks leases lost when they expire.
//!
//! # Moving at the member's pace
//!
//! The silence limit (a third of the shortest TTL, at most the request timeout) is a fixed
//! upper bound. Sooner than that, a renewal owed for `STALL_FACTOR` (8) times the member's own
//! pace (`endpoint::stall_limit`, at least 100 ms) makes the member *suspected* (new
//! serializable reads and watch streams avoid it); a stream on a suspected member (suspected
//! by its own renewals or by the unary calls) that is not the leader reopens on the leader
//! at once, unblamed. A stream on the leader stays: leader-bound renewals have nowhere
//! better to go (a follower would forward them to the same leader), so the fixed rules and
//! an election decide there.
//!
//! # On the leader
//!
//! A follower forwards each keep-alive to the leader, one at a time per stream (measured on
//! etcd 3.6: ~2,500 renewals/s on a follower's stream against ~40,000 on the leader's), so a
//! stream left on a follower starves once the leases due outnumber that: 30,000 leases of TTL
//! 10 s lost 19,000 after a leader kill put the stream there. A stream on a follower moves to
//! the leader as soon as the client knows a healthy one.
//!
//! It runs while at least one lease is kept and the client is alive; [`Shared::send`] starts a
//! new one when a lease is kept after it stopped.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::report::{Change, LeaseId, Report};
use super::state::{Table, View};
use crate::call::Transport;
use crate::call::link::{self, Stream};
use crate::call::supervise::{self, FULL_RETRY, Supervisor};
use crate::endpoint::{Endpoint, STALL_FLOOR};
use crate::error::Error;
use crate::proto::etcdserverpb::{LeaseKeepAliveRequest, LeaseKeepAliveResponse};

/// An open keep-alive stream.
type KeepAlive = Stream<LeaseKeepAliveRequest, LeaseKeepAliveResponse>;
/// The keep-alive stream's state: the shared skeleton, never paused, nothing kept beside the
/// stream.
type Link = link::Link<LeaseKeepAliveRequest, LeaseKeepAliveResponse, KeepAlive>;
/// What happened on it.
type LinkEvent = link::LinkEvent<LeaseKeepAliveRequest, LeaseKeepAliveResponse>;

/// At most this many renewals in flight on the stream, and room for as many queued on it, so
/// that one turn of the task can put a whole window out. The server answers a stream's
/// keep-alives one at a time, so what is in flight is a queue: unbounded, HTTP/2's windows let
/// ~100,000 renewals wait there, longer than a TTL; with the stream's default room of 64 the
/// task, woken only by answers and deadlines, sent ~30,000 renewals a second and fell behind
/// at ~100,000 leases of TTL 6 s. 4,096 in flight is ~20 ms of the leader's ~200,000 renewals
/// a second on one stream (etcd 3.5.1 on 2 cores).
const RENEWAL_WINDOW: usize = 4096;

/// What handles ask of the task.
pub(super) enum Command {
    /// Keep this lease (replacing an older registration of the same id).
    Keep {
        id: i64,
        generation: u64,
        view: watch::Sender<View>,
        next_renewal: Instant,
    },
    /// Stop keeping it, if `generation` is still the registration kept.
    Forget { id: i64, generation: u64 },
}

/// The task behind a [`Keeper`](super::Keeper).
pub(super) struct KeeperTask {
    /// For the exit handshake and the stream counter.
    shared: Arc<Shared>,
    /// Its slot in `shared.slots`: the task renews the leases registered there.
    slot: usize,
    /// Opens the stream and judges its member (holds the client weakly: the keeper must not
    /// keep the client alive).
    supervisor: Supervisor,
    /// Cancelled when the client goes away: nothing can be renewed after that.
    cancel: CancellationToken,
    /// Keep / forget requests from handles.
    commands: mpsc::UnboundedReceiver<Command>,
    /// The leases and what the stream owes.
    pub(super) table: Table,
    /// The leases lost, fallen at risk or recovered since the last line (one per kind, at
    /// most once a second).
    pub(super) report: Report,
    /// Wakes the task when an endpoint's health changes, so that it leaves an ejected or
    /// leaderless member at once.
    health: tokio::sync::watch::Receiver<()>,
}

impl KeeperTask {
    pub(super) fn new(
        shared: Arc<Shared>,
        slot: usize,
        transport: &Arc<Transport>,
        commands: mpsc::UnboundedReceiver<Command>,
    ) -> Self {
        let open_limit = transport
            .options
            .request_timeout
            .unwrap_or(crate::options::DEFAULT_REQUEST_TIMEOUT);
        KeeperTask {
            shared,
            slot,
            supervisor: Supervisor::new(transport).with_request_buffer(RENEWAL_WINDOW),
            cancel: transport.cancel.child_token(),
            commands,
            table: Table::new(open_limit),
            report: Report::default(),
            health: transport.health_changes(),
        }
    }

    pub(super) async fn run(mut self) {
        let mut link = Link::Down {
            retry_at: Instant::now(),
            failures: 0,
        };
        loop {
            let mut now = Instant::now();
            let judged = self.table.is_due(now) || self.table.owed_for(now) >= STALL_FLOOR;
            if link.is_up() && judged {
                // Answers already arrived are read before anything due is judged: on a busy box
                // the task falls behind its own stream, and would otherwise mark leases lost or
                // at risk, or the member overdue, for renewals answered in its own buffer.
                link = self.read_arrived(link);
                now = Instant::now();
            }
            self.report.extend(Change::Expired, self.table.expire(now));
            self.report
                .extend(Change::AtRisk, self.table.fall_at_risk(now));
            self.report.flush(now);
            self.publish_at_risk();
            if self.table.is_empty() {
                if self.try_exit() {
                    self.report.flush_all(now);
                    tracing::debug!("no lease kept; keeper stops");
                    self.shared.set_stream_endpoint(self.slot, None);
                    return;
                }
                continue;
            }
            link = self.advance(link, now);
            let mut wake = self.table.next_deadline(link.is_up());
            // The next lease to fall at risk, whether or not a stream is up.
            if let Some(at) = self.table.next_risk() {
                wake = Some(wake.map_or(at, |w| w.min(at)));
            }
            match &link {
                Link::Down { retry_at, .. } => {
                    wake = Some(wake.map_or(*retry_at, |w| w.min(*retry_at)))
                }
                Link::Up(stream)
                    if stream.tx.capacity() == 0 || self.table.in_flight() >= RENEWAL_WINDOW =>
                {
                    wake = Some(now + FULL_RETRY);
                }
                Link::Up(stream) => {
                    // When the owed renewal becomes overdue by the member's pace (once: past
                    // it, the silence limit is the next thing to wait for).
                    let (owed, limit) =
                        (self.table.owed_for(now), self.stall_limit(&stream.endpoint));
                    if owed > Duration::ZERO && owed < limit {
                        let at = now + (limit - owed);
                        wake = Some(wake.map_or(at, |w| w.min(at)));
                    }
                    // When a member leaderless since the open has been so for the grace.
                    if let Some(at) =
                        self.supervisor
                            .recheck_at(&stream.endpoint, stream.opened, now)
                        && at > now
                    {
                        wake = Some(wake.map_or(at, |w| w.min(at)));
                    }
                }
                // Never paused: the keeper's token travels with each open.
                Link::Opening { .. } | Link::Paused { .. } => {}
            }
            let sleep = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // The client is gone: nothing can be renewed any more. Handles see their
                // leases lost at their local expiry without us.
                () = self.cancel.cancelled() => return,
                // A lease kept or forgotten.
                Some(command) = self.commands.recv() => self.apply(command),
                // The stream opened or failed to, or an answer (or an error) arrived.
                event = link.event() => link = self.on_event(link, event),
                // Some endpoint's health changed: is ours ejected?
                Ok(()) = self.health.changed() => {}
                // A renewal, an expiry, the silence limit or a retry is due.
                () = sleep => {}
            }
        }
    }

    /// Tell handles and the metric how many leases are at risk, when that changed (the
    /// metric counts every stream's).
    fn publish_at_risk(&mut self) {
        let at_risk = self.table.at_risk();
        let was = self.shared.slots[self.slot]
            .at_risk
            .swap(at_risk, std::sync::atomic::Ordering::Relaxed);
        if was != at_risk {
            crate::metrics::leases_at_risk(self.shared.at_risk());
        }
    }

    /// Stop if no command is waiting; the handshake runs under the lock that senders take, so
    /// a lease kept at this moment either reaches us or starts a new task.
    fn try_exit(&mut self) -> bool {
        let mut slot = self.shared.slots[self.slot].lock_task();
        match self.commands.try_recv() {
            Ok(command) => {
                drop(slot);
                self.apply(command);
                false
            }
            Err(_) => {
                *slot = None;
                true
            }
        }
    }

    fn apply(&mut self, command: Command) {
        match command {
            Command::Keep {
                id,
                generation,
                view,
                next_renewal,
            } => {
                tracing::debug!(lease = %LeaseId(id), "keeping lease");
                self.table.insert(id, generation, view, next_renewal);
            }
            Command::Forget { id, generation } => {
                if self.table.forget(id, generation) {
                    tracing::debug!(lease = %LeaseId(id), "lease no longer kept");
                }
            }
        }
    }

    /// Do what is due on the link at `now`: open a stream, leave a bad one, send renewals.
    fn advance(&mut self, link: Link, now: Instant) -> Link {
        match link {
            Link::Down { retry_at, failures } if now >= retry_at => self.open(now, failures),
            Link::Up(stream) => {
                let endpoint = &stream.endpoint;
                if self.table.is_silent(now) {
                    let owed = self.table.owed_for(now);
                    tracing::warn!(
                        endpoint = %endpoint.url,
                        ?owed,
                        "keep-alive stream silent; reopening elsewhere",
                    );
                    return self.lost_stream(&stream, Some(&Error::Timeout), now);
                }
                if self.supervisor.better_elsewhere(endpoint, stream.opened) {
                    let health = endpoint.state();
                    tracing::info!(
                        endpoint = %endpoint.url,
                        ?health,
                        "keep-alive stream's member is unhealthy; reopening elsewhere"
                    );
                    return self.lost_stream(&stream, None, now);
                }
                let owed = self.table.owed_for(now);
                if owed > Duration::ZERO && owed >= self.stall_limit(endpoint) {
                    endpoint.suspect();
                }
                // On a follower while the leader is healthy (a stream opened during an
                // election lands where it can): every renewal would be forwarded, one at a
                // time, so move at once. After a leader freeze every lease is urgent: waiting
                // out MIN_STREAM_LIFE there lost 81,000 of 150,000 leases of TTL 6 s. A young
                // stream's move counts as a failed open, so a move that keeps landing on a
                // follower backs off instead of looping.
                if self.supervisor.healthy_leader_elsewhere(endpoint) {
                    tracing::info!(
                        endpoint = %endpoint.url,
                        leases = self.table.len(),
                        "keep-alive stream is on a follower, which forwards each renewal to the \
                         leader; moving it to the leader"
                    );
                    return self.lost_stream(&stream, None, now);
                }
                if endpoint.is_suspected() && self.supervisor.leader_elsewhere(endpoint) {
                    tracing::info!(
                        endpoint = %endpoint.url,
                        ?owed,
                        "keep-alive stream's member stalls by its own pace; reopening on the leader"
                    );
                    return self.lost_stream(&stream, None, now);
                }
                // No more than the stream takes now, nor past the window: the rest stay due,
                // in order, without this turn listing them (at least one while the window has
                // room, so that a closed stream shows).
                let room = RENEWAL_WINDOW.saturating_sub(self.table.in_flight());
                let take = if room == 0 {
                    0
                } else {
                    stream.tx.capacity().clamp(1, room)
                };
                for id in self.table.due_at_most(now, take) {
                    match stream.tx.try_send(LeaseKeepAliveRequest { id }) {
                        Ok(()) => self.table.sent(id, now),
                        // The stream pushes back: the rest go out on the next turn.
                        Err(TrySendError::Full(_)) => break,
                        Err(TrySendError::Closed(_)) => {
                            return self.lost_stream(&stream, Some(&Error::StreamClosed), now);
                        }
                    }
                }
                Link::Up(stream)
            }
            other => other,
        }
    }

    /// How long a renewal may be owed by `endpoint`'s member before it is overdue by its own
    /// pace (at most the silence limit, which then decides alone).
    fn stall_limit(&self, endpoint: &Endpoint) -> Duration {
        crate::endpoint::stall_limit(endpoint.pace_hint(), self.table.silence_limit())
    }

    /// Start opening a stream whose first message renews the lease closest to expiry.
    fn open(&mut self, now: Instant, failures: u32) -> Link {
        let first = self
            .table
            .most_urgent()
            .expect("the table is not empty while the link advances");
        // Sent now as far as the expiry is concerned: whichever attempt of the open carries
        // it, it leaves no earlier than this.
        self.table.sent(first, now);
        let open = self.supervisor.open(LeaseKeepAliveRequest { id: first });
        Link::Opening {
            open,
            started: now,
            failures,
            first: (),
        }
    }

    fn on_event(&mut self, link: Link, event: LinkEvent) -> Link {
        let now = Instant::now();
        match (link, event) {
            (
                Link::Opening {
                    started, failures, ..
                },
                LinkEvent::Opened(Ok(opened)),
            ) => {
                let stream = KeepAlive::new(opened, failures, now);
                let n = self
                    .shared
                    .streams_opened
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    + 1;
                tracing::info!(
                    endpoint = %stream.endpoint.url,
                    took = ?now - started,
                    leases = self.table.len(),
                    streams = n,
                    "keep-alive stream open",
                );
                self.table.stream_opened(now);
                self.shared
                    .set_stream_endpoint(self.slot, Some(stream.endpoint.url.clone()));
                Link::Up(stream)
            }
            (Link::Opening { failures, .. }, LinkEvent::Opened(Err(error))) => {
                // The transport already blamed the members it tried.
                self.table.stream_lost(now);
                let reopen = supervise::failed_open(failures, now);
                let retry_in = reopen.at - now;
                tracing::warn!(%error, ?retry_in, "keep-alive stream did not open");
                Link::down(reopen)
            }
            (Link::Up(mut stream), LinkEvent::Answer(answer)) => match answer {
                Ok(Some(answer)) => {
                    self.on_answer(&answer);
                    let end = self.take_burst(&mut stream.answers);
                    // The member still answers: its late probes are load (see `heard.rs`).
                    stream.endpoint.heard.news(now);
                    match end {
                        None => Link::Up(stream),
                        Some(end) => self.stream_ended(&stream, end, now),
                    }
                }
                Ok(None) => self.stream_ended(&stream, None, now),
                Err(error) => self.stream_ended(&stream, Some(error), now),
            },
            (link, _) => link,
        }
    }

    /// Handle the answers that have already arrived (up to the burst), as if the loop had
    /// waited for the first of them.
    fn read_arrived(&mut self, mut link: Link) -> Link {
        let Link::Up(stream) = &mut link else {
            return link;
        };
        // Polled once: `message` keeps nothing between polls (see `take_burst`).
        match stream.answers.message().now_or_never() {
            Some(answer) => self.on_event(link, LinkEvent::Answer(answer)),
            None => link,
        }
    }

    /// The server ended the stream (`None`) or it failed: count it and reopen.
    fn stream_ended(&mut self, stream: &KeepAlive, error: Option<Error>, now: Instant) -> Link {
        self.shared
            .streams_broken
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let endpoint = &stream.endpoint;
        let error = match error {
            Some(error) => {
                tracing::warn!(
                    endpoint = %endpoint.url,
                    %error,
                    "keep-alive stream failed; reopening",
                );
                error
            }
            None => {
                tracing::warn!(
                    endpoint = %endpoint.url,
                    "keep-alive stream ended by the server; reopening",
                );
                Error::StreamClosed
            }
        };
        self.lost_stream(stream, Some(&error), now)
    }

    /// Leave the stream: tell the transport what went wrong with its member (so the next pick
    /// avoids it), and renew everything at once on the next stream.
    fn lost_stream(&mut self, stream: &KeepAlive, error: Option<&Error>, now: Instant) -> Link {
        let reopen =
            self.supervisor
                .lost(&stream.endpoint, error, stream.opened, stream.failures, now);
        self.table.stream_lost(now);
        self.shared.set_stream_endpoint(self.slot, None);
        Link::down(reopen)
    }
}
