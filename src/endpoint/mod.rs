//! One member endpoint at run time: its URL, its HTTP/2 channel, its health, its raft view.
//!
//! Requests and the prober both write what they learn here (through short, non-async critical
//! sections); the balancer reads [`Candidate`] snapshots.

mod atomic_instant;
mod attempt;
mod candidate;
mod cluster_id;
mod health;
mod heard;
mod in_flight;
mod info;
mod latency;
mod pace;
pub(crate) mod prober;
mod raft_view;
mod read_path;
mod refusals;
mod silence;
mod state;
pub(crate) mod sync;
mod unix;
mod url;
mod version;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

pub(crate) use attempt::{AttemptLayer, AttemptService, Layered};
pub use candidate::Candidate;
pub(crate) use cluster_id::ClusterId;
pub use health::HealthState;
pub(crate) use health::{Failure, Health, HealthConfig};
pub(crate) use in_flight::InFlight;
pub use info::EndpointInfo;
use pace::Pace;
#[cfg(test)]
pub(crate) use pace::{HEDGE_FLOOR, STALL_FACTOR};
pub(crate) use pace::{STALL_FLOOR, stall_limit};
pub(crate) use raft_view::RaftView;
pub(crate) use read_path::clearly_slower;
#[cfg(test)]
pub(crate) use refusals::Refusals;
use silence::Silence;
use state::MemberState;
pub(crate) use state::{Proofs, Serving};
pub(crate) use url::{Dial, is_local, is_secure, member_url, normalize, redact, unix_path};
use version::KnownVersion;
pub use version::{ParseVersionError, ServerVersion};

/// A member endpoint.
pub(crate) struct Endpoint {
    /// `http(s)://host:port`.
    pub(crate) url: Arc<str>,
    /// One HTTP/2 connection, dialled on first use and redialled by tonic after a failure.
    pub(crate) channel: Channel,
    /// What typed calls' attempts go through: the channel, in the user's layers if any.
    pub(crate) attempts: AttemptService,
    /// Its health, raft view, pace and the outage rule's proofs, which change together: one
    /// std mutex, never held across `.await` nor while another endpoint lock is taken.
    state: Mutex<MemberState>,
    /// How long its linearizable reads took (what a leader-bound call costs through it).
    read_path: read_path::ReadPath,
    /// Cancelled when the endpoint leaves the set (member removed) or the client goes away;
    /// stops its prober.
    pub(crate) cancel: CancellationToken,
    /// Shared by every endpoint of a client and bumped on each health transition, so that the
    /// long-lived streams (keep-alive, watch) leave an ejected member at once instead of at
    /// their next look.
    changes: HealthChanges,
    /// Attempts of typed calls and balanced-channel requests now waiting on this member.
    in_flight: AtomicUsize,
    /// Those of them that need the leader and are prompt (see `call::attempt::owes`): on a
    /// follower, forwarded to the leader (see [`Endpoint::leader_bound_in_flight`]).
    leader_bound_in_flight: AtomicUsize,
    /// Times it was ejected (for [`Client::call_stats`](crate::Client::call_stats)).
    ejections: AtomicU64,
    /// Times it became suspected (same).
    suspicions: AtomicU64,
    /// Bumped each time it becomes suspected, so that a long-lived stream on it (the watch
    /// hub's) checks it at once; its own channel, not `changes`: a suspicion is no health
    /// transition and must not wake everyone who follows health.
    suspected_news: tokio::sync::watch::Sender<()>,
    /// Wakes its prober for one probe soon (a permit is kept while a probe runs): a stream
    /// wants to know whether the member is still leaderless.
    look_again: tokio::sync::Notify,
    /// Since when it has owed an answer that needs the leader (see [`silence`]).
    silence: Silence,
    /// Its etcd version, from its last Status answer (see [`version`]).
    version: KnownVersion,
    /// Its Status refused a caller without a user (auth on, etcd 3.6 or 3.5.28+): probes
    /// show it the client's token (see `prober.rs`).
    status_needs_token: AtomicBool,
    /// When its streams last brought news: a late answer ejects it only if they fell silent.
    pub(crate) heard: heard::Heard,
}

/// Tells the client's long-lived streams that some endpoint's health changed (the value is
/// nothing: receivers look at the endpoints themselves).
pub(crate) type HealthChanges = tokio::sync::watch::Sender<()>;

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

impl Endpoint {
    pub(crate) fn new(
        url: Arc<str>,
        channel: Channel,
        layer: Option<&AttemptLayer>,
        config: HealthConfig,
        cancel: CancellationToken,
        changes: HealthChanges,
    ) -> Arc<Self> {
        Arc::new(Endpoint {
            url,
            attempts: AttemptService::new(channel.clone(), layer),
            channel,
            state: Mutex::new(MemberState::new(config, Instant::now())),
            read_path: read_path::ReadPath::default(),
            cancel,
            changes,
            in_flight: AtomicUsize::new(0),
            leader_bound_in_flight: AtomicUsize::new(0),
            ejections: AtomicU64::new(0),
            suspicions: AtomicU64::new(0),
            suspected_news: tokio::sync::watch::Sender::new(()),
            look_again: tokio::sync::Notify::new(),
            silence: Silence::new(Instant::now()),
            version: KnownVersion::default(),
            status_needs_token: AtomicBool::new(false),
            heard: heard::Heard::new(Instant::now()),
        })
    }

    /// The member's state, locked (a poisoned lock still holds a consistent state: every
    /// change to it is a plain assignment or a pure method).
    fn lock(&self) -> MutexGuard<'_, MemberState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn with_pace<T>(&self, f: impl FnOnce(&mut Pace) -> T) -> T {
        f(&mut self.lock().pace)
    }

    /// How long a hedgeable call sent here now waits before it hedges (and suspects this
    /// member), at most `cap`; `None` until the member's tail latency is known.
    pub(crate) fn hedge_delay(&self, cap: Duration, now: Instant) -> Option<Duration> {
        self.with_pace(|p| p.hedge_delay(cap, now))
    }

    /// An attempt here is overdue by this member's own pace: suspect it (no new calls while a
    /// healthy member can take them). Returns whether that is news.
    pub(crate) fn suspect(&self) -> bool {
        let news = self.with_pace(|p| p.suspect(Instant::now()));
        // A member suspected of stalling is no member to detour through until a probe measures
        // it again (the suspicion wakes its prober).
        self.read_path.doubt();
        if news {
            self.suspicions.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(endpoint = %self.url, "endpoint suspected of stalling");
            self.suspected_news.send_replace(());
        }
        news
    }

    /// A request that needs the leader (a prompt leader-bound attempt, a probe) goes out to
    /// this member at `now`: it owes an answer until it serves one (see [`silence`]).
    pub(crate) fn owe(&self, now: Instant) {
        self.silence.owe(now);
    }

    /// Whether this member owes an answer that needs the leader (one atomic load).
    pub(crate) fn owes(&self) -> bool {
        self.silence.owes()
    }

    /// This member served a request that needed the leader: it owes nothing.
    pub(crate) fn served(&self) {
        self.silence.served();
    }

    /// Since when this member has owed an answer that needs the leader, when that is longer
    /// than its silence limit (2 x its own pace, within 100..500 ms; see [`silence`]): it
    /// stalled, or lost its quorum, and a leader-bound call sent here now would hang.
    pub(crate) fn stalled_since(&self) -> Option<Instant> {
        // Nothing owed (the common case), or not for the shortest limit: no clock, no lock.
        let now = self.silence.owes().then(Instant::now)?;
        self.silence.stalled_since(silence::SILENCE_FLOOR, now)?;
        self.silence
            .stalled_since(silence::silence_limit(self.pace_hint()), now)
    }

    /// Asks its prober to probe it soon (after the probe under way, if one is).
    pub(crate) fn probe_soon(&self) {
        self.look_again.notify_one();
    }

    /// Resolves when someone asked for a probe soon ([`probe_soon`](Self::probe_soon)).
    pub(crate) async fn probe_asked(&self) {
        self.look_again.notified().await;
    }

    /// Wakes each time this member becomes suspected.
    pub(crate) fn suspected_news(&self) -> tokio::sync::watch::Receiver<()> {
        self.suspected_news.subscribe()
    }

    /// What the client knows of this member's pace apart from a stream's own answers: the
    /// slower of its calls' recent tail (once known) and its smoothed latency (calls and
    /// probes); `None` before any answer.
    pub(crate) fn pace_hint(&self) -> Option<Duration> {
        self.lock().pace_hint(Instant::now())
    }

    /// Whether an attempt here that has owed its answer for `age` is overdue by this member's
    /// own pace (always, until its pace is known).
    pub(crate) fn is_overdue(&self, age: Duration) -> bool {
        self.with_pace(|p| p.is_overdue(age, Instant::now()))
    }

    /// Whether this member is suspected of stalling now.
    pub(crate) fn is_suspected(&self) -> bool {
        self.with_pace(|p| p.is_suspected(Instant::now()))
    }

    /// Times this endpoint was ejected, and suspected.
    pub(crate) fn ejections_and_suspicions(&self) -> (u64, u64) {
        (
            self.ejections.load(Ordering::Relaxed),
            self.suspicions.load(Ordering::Relaxed),
        )
    }

    /// Read the health state machine; readers never move it (see [`tick`](Self::tick)).
    fn read_health<T>(&self, f: impl FnOnce(&Health) -> T) -> T {
        f(&self.lock().health)
    }

    fn with_health<T>(&self, f: impl FnOnce(&mut Health) -> T) -> T {
        self.update(|s| f(&mut s.health))
    }

    /// Change the member's state; a health transition is logged, counted and published after
    /// the lock is let go.
    fn update<T>(&self, f: impl FnOnce(&mut MemberState) -> T) -> T {
        let mut guard = self.lock();
        let before = guard.health.state();
        let out = f(&mut guard);
        let after = guard.health.state();
        if before != after {
            let error = guard.health.last_error().unwrap_or("").to_owned();
            drop(guard);
            let url = &self.url;
            tracing::info!(
                endpoint = %url,
                from = ?before,
                to = ?after,
                %error,
                "endpoint health changed",
            );
            if after == HealthState::Ejected {
                self.ejections.fetch_add(1, Ordering::Relaxed);
                crate::metrics::ejection(&self.url);
            }
            self.changes.send_replace(());
        }
        out
    }

    /// The health state now (an ejection that ran out reads as probation). Changes nothing.
    pub(crate) fn state(&self) -> HealthState {
        self.read_health(|h| h.state_at(Instant::now()))
    }

    /// Move the health state machine to `now` (an ejection that ran out ends, and its end is
    /// published): the prober's, as its wait for that end is over.
    pub(crate) fn tick(&self, now: Instant) {
        self.with_health(|h| h.tick(now));
    }

    /// When the current ejection ends (in the past when not ejected).
    pub(crate) fn eject_until(&self) -> Instant {
        self.read_health(|h| h.eject_until())
    }

    /// A request here succeeded at `now`, in `latency`. A call that hedges at this member's
    /// pace (bounded by `pace_cap`) feeds the pace too, in the same lock: its latency window,
    /// and a timely answer clears a suspicion.
    pub(crate) fn on_success(&self, latency: Duration, pace_cap: Option<Duration>, now: Instant) {
        self.update(|s| {
            s.answered(latency, now);
            if let Some(cap) = pace_cap {
                s.pace.answered(latency, cap, now);
            }
        });
    }

    /// A request or probe here failed.
    pub(crate) fn on_failure(&self, failure: Failure, error: &dyn std::fmt::Display) {
        self.read_path.doubt();
        let text = error.to_string();
        self.with_health(|h| h.on_failure(failure, text, Instant::now()));
    }

    /// Count one answer owed past one of the client's own timers (an attempt timeout, a
    /// deadline); returns the strikes since the last success. A caller that gives up on its
    /// own never strikes anyone: only our timers know how long a healthy member takes.
    pub(crate) fn strike(&self) -> u32 {
        self.lock().strike()
    }

    /// Start or end draining; the long-lived streams hear of it like a health change.
    pub(crate) fn set_draining(&self, draining: bool) {
        let was = std::mem::replace(&mut self.lock().draining, draining);
        if was != draining {
            tracing::info!(endpoint = %self.url, draining, "endpoint drain changed");
            self.changes.send_replace(());
        }
    }

    /// A probe answered in `latency` (`has_leader`: its member has a working leader). It also
    /// clears a suspicion raised before the probe was sent.
    pub(crate) fn on_probe_ok(&self, has_leader: bool, latency: Duration) {
        let now = Instant::now();
        self.update(|s| s.probe_answered(has_leader, latency, now));
    }

    /// A probe that started at `started` served a linearizable read, which took `took`;
    /// returns whether that read was clearly slower than the one before (probe again soon).
    pub(crate) fn set_linearizable_ok(&self, started: Instant, took: Duration) -> bool {
        self.lock().linearizable_ok = Some(started);
        self.read_path.record(took)
    }

    /// Start of the last probe that served a linearizable read here.
    pub(crate) fn linearizable_ok(&self) -> Option<Instant> {
        self.lock().linearizable_ok
    }

    /// A connection to this member was refused at `now`.
    pub(crate) fn set_refused(&self, now: Instant) {
        self.lock().refused.refused(now);
    }

    /// The refusals since this member last answered, if any.
    #[cfg(test)]
    pub(crate) fn refusals(&self) -> Option<Refusals> {
        self.lock().refused.get()
    }

    /// Whether this member can take a long-lived stream, under one lock at one instant.
    pub(crate) fn serving(&self) -> Serving {
        self.lock().serving(Instant::now())
    }

    /// What the leader-outage rule reads of this member, under one lock at one instant.
    pub(crate) fn proofs(&self) -> Proofs {
        self.lock().proofs(Instant::now())
    }

    /// This member, leading, dropped a proposal at `at`.
    pub(crate) fn set_dropped(&self, at: Instant) {
        self.lock().dropped_at = Some(at);
    }

    pub(crate) fn raft(&self) -> RaftView {
        self.lock().raft
    }

    pub(crate) fn set_raft(&self, view: RaftView) {
        if let Some(version) = view.version {
            self.version.set(version);
        }
        self.lock().raft = view;
    }

    /// Whether its Status needs the client's token (see `prober.rs`).
    pub(crate) fn status_needs_token(&self) -> bool {
        self.status_needs_token.load(Ordering::Relaxed)
    }

    /// Its Status refused a caller without a user.
    pub(crate) fn set_status_needs_token(&self) {
        self.status_needs_token.store(true, Ordering::Relaxed);
    }

    /// Its etcd version, once a Status answer told it.
    pub(crate) fn version(&self) -> Option<ServerVersion> {
        self.version.get()
    }

    /// Whether a txn sent here must be let finish when its caller gives up: canceling it may
    /// crash this member (etcd 3.5.0-3.5.4), or its version is not known yet.
    pub(crate) fn txn_must_finish(&self) -> bool {
        self.version.txn_must_finish()
    }

    /// What the pick policy sees, given the current leader's member id.
    pub(crate) fn candidate(&self, leader_id: u64, now: Instant) -> Candidate {
        // One lock for all of it; inside, atomics only (`read_path`, `silence`).
        let state = self.lock();
        let member_id = state.raft.member_id;
        let is_leader = member_id != 0 && member_id == leader_id;
        Candidate {
            state: state.health.state_at(now),
            is_leader,
            latency: state.health.latency(),
            // The leader's path as confirmed, however it is doing (a slow link shows as a slow
            // path while its probes are owed). A follower's only when fresh: not in doubt
            // since its read, and owing no answer past the shortest stall (a frozen follower's
            // probe goes unanswered): a detour goes only through a member known to be serving
            // (see `read_path.rs`; atomic loads only).
            leader_path: if is_leader {
                self.read_path.confirmed()
            } else {
                self.read_path.fresh().filter(|_| {
                    self.silence
                        .stalled_since(silence::SILENCE_FLOOR, now)
                        .is_none()
                })
            },
            draining: state.draining,
        }
    }

    /// The public snapshot.
    pub(crate) fn info(&self, leader_id: u64) -> EndpointInfo {
        let now = Instant::now();
        // One lock, one instant for all of it; inside, atomics only.
        let state = self.lock();
        let (raft, h) = (state.raft, &state.health);
        EndpointInfo {
            url: self.url.to_string(),
            member_id: (raft.member_id != 0).then_some(raft.member_id),
            health: h.state_at(now),
            is_leader: raft.member_id != 0 && raft.member_id == leader_id,
            latency: h.latency(),
            leader_path: self.read_path.confirmed(),
            last_error: h.last_error().map(str::to_owned),
            since: h.since_at(now).into_std(),
            draining: state.draining,
            in_flight: self.in_flight(),
            suspected: state.pace.is_suspected(now),
            version: self.version(),
        }
    }
}

#[cfg(test)]
mod tests;
