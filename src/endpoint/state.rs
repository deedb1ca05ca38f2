//! What one member's state holds that changes together, behind the endpoint's one lock: its
//! health, its raft view, its pace, its strikes, whether the operator drains it, and the proofs
//! the leader-outage rule reads (its last linearizable read, its last dropped proposal, the
//! connections it refused since it last answered). No IO and no clock of its own: every method
//! takes `now`, so the combined rules are tested with a fake clock below.
//!
//! One lock, not one per part: a reader (the pick's [`Candidate`](super::Candidate), the
//! public [`EndpointInfo`](super::EndpointInfo)) sees all of it at one instant, and a pick
//! takes one lock per member instead of two or three.

use std::time::Duration;

use tokio::time::Instant;

use super::health::{Health, HealthConfig, HealthState};
use super::pace::Pace;
use super::raft_view::RaftView;
use super::refusals::{RefusalLog, Refusals};

/// One member's state (see the module docs).
#[derive(Debug)]
pub(super) struct MemberState {
    /// The health state machine.
    pub(super) health: Health,
    /// The raft view from its last Status.
    pub(super) raft: RaftView,
    /// Its recent latency and whether it is suspected of stalling.
    pub(super) pace: Pace,
    /// Start time of the last probe whose linearizable read succeeded: proof that the leader
    /// this member follows was alive and reachable from it at that time.
    pub(super) linearizable_ok: Option<Instant>,
    /// When this member, leading, last dropped a proposal (raft's `ErrProposalDropped`): it is
    /// handing leadership over, and drops what followers forward to it too, silently, until
    /// the transfer ends (see `Balancer::leader_outage`).
    pub(super) dropped_at: Option<Instant>,
    /// Connections it refused since it last answered (see `refusals.rs`).
    pub(super) refused: RefusalLog,
    /// Answers it owed past the client's own timers since a call here last succeeded (see
    /// [`MemberState::strike`]).
    strikes: u32,
    /// Drained by the operator (see `Client::drain`): no new calls or streams while another
    /// member can take them.
    pub(super) draining: bool,
}

/// What the leader-outage rule (`balance/outage_rule.rs`) reads of one member, all of it at
/// one instant.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Proofs {
    /// Its raft member id (0: not known yet).
    pub(crate) member_id: u64,
    /// Its health state.
    pub(crate) health: HealthState,
    /// When it last dropped a proposal of ours, leading.
    pub(crate) dropped_at: Option<Instant>,
    /// The connections it refused since it last answered.
    pub(crate) refusals: Option<Refusals>,
    /// Start of the last probe that served a linearizable read here.
    pub(crate) linearizable_ok: Option<Instant>,
    /// The operator drains it.
    pub(crate) draining: bool,
}

impl Proofs {
    /// Healthy by our calls and probes.
    pub(crate) fn healthy(&self) -> bool {
        self.health == HealthState::Healthy
    }
}

/// Whether a member can take a long-lived stream, all of it read at one instant under one
/// lock (a stream's task asks on every turn, for every member).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Serving {
    /// Its health state.
    pub(crate) health: HealthState,
    /// The operator drains it.
    pub(crate) draining: bool,
    /// Suspected of stalling by its own pace.
    pub(crate) suspected: bool,
    /// Since when its health has been `health`.
    pub(crate) since: Instant,
    /// When something last said its health is `health` (the latest probe that found it so).
    pub(crate) heard: Instant,
}

impl Serving {
    /// Healthy, not drained, not suspected: a stream that must move can go there.
    pub(crate) fn takes_streams(&self) -> bool {
        self.health == HealthState::Healthy && !self.draining && !self.suspected
    }
}

impl MemberState {
    /// A member not heard from yet, at `now`.
    pub(super) fn new(config: HealthConfig, now: Instant) -> Self {
        MemberState {
            health: Health::new(config, now),
            raft: RaftView::default(),
            pace: Pace::new(now),
            linearizable_ok: None,
            dropped_at: None,
            refused: RefusalLog::default(),
            strikes: 0,
            draining: false,
        }
    }

    /// What the leader-outage rule reads of this member at `now`.
    pub(super) fn proofs(&self, now: Instant) -> Proofs {
        Proofs {
            member_id: self.raft.member_id,
            health: self.health.state_at(now),
            dropped_at: self.dropped_at,
            refusals: self.refused.get(),
            linearizable_ok: self.linearizable_ok,
            draining: self.draining,
        }
    }

    /// Whether this member can take a long-lived stream at `now`.
    pub(super) fn serving(&self, now: Instant) -> Serving {
        Serving {
            health: self.health.state_at(now),
            draining: self.draining,
            suspected: self.pace.is_suspected(now),
            since: self.health.since_at(now),
            heard: self.health.heard_at(now),
        }
    }

    /// A call here was answered at `now` in `latency`: health learns it, whatever refused
    /// connections before is listening again, and the strikes start over.
    pub(super) fn answered(&mut self, latency: Duration, now: Instant) {
        self.strikes = 0;
        self.refused.answered();
        self.health.on_success(latency, now);
    }

    /// Count one answer owed past one of the client's own timers (an attempt timeout, a
    /// deadline); returns the strikes since a call here last succeeded. A probe's answer
    /// does not end them: a leader whose link serves probes but lets calls time out is the
    /// case they count (see `Balancer::learn`).
    pub(super) fn strike(&mut self) -> u32 {
        self.strikes = self.strikes.saturating_add(1);
        self.strikes
    }

    /// What the client knows of this member's pace apart from a stream's own answers: the
    /// slower of its calls' recent tail (once known) and its smoothed latency (calls and
    /// probes); `None` before any answer.
    pub(super) fn pace_hint(&mut self, now: Instant) -> Option<Duration> {
        self.pace.tail(now).max(self.health.latency())
    }

    /// A probe answered at `now` in `latency` (`has_leader`: its member has a working
    /// leader): health learns it, and a suspicion raised before the probe was sent ends.
    pub(super) fn probe_answered(&mut self, has_leader: bool, latency: Duration, now: Instant) {
        self.pace
            .probe_answered(now.checked_sub(latency).unwrap_or(now));
        self.refused.answered();
        self.health.on_probe_ok(has_leader, latency, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::HealthState;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_probe_answer_clears_an_older_suspicion_and_readmits_in_one_step() {
        let t0 = Instant::now();
        let mut state = MemberState::new(HealthConfig::default(), t0);
        assert!(state.pace.suspect(t0 + ms(10)));
        assert!(state.pace.is_suspected(t0 + ms(20)));
        // A probe sent after the suspicion (at 15 ms) answers at 30 ms: the member serves.
        state.probe_answered(true, ms(15), t0 + ms(30));
        assert!(!state.pace.is_suspected(t0 + ms(30)));
        assert_eq!(state.health.latency(), Some(ms(15)));
        assert_ne!(state.health.state_at(t0 + ms(30)), HealthState::Ejected);
    }

    #[test]
    fn a_probe_sent_before_the_suspicion_does_not_clear_it() {
        let t0 = Instant::now();
        let mut state = MemberState::new(HealthConfig::default(), t0);
        assert!(state.pace.suspect(t0 + ms(10)));
        // Sent at 5 ms, before the suspicion: it proves nothing about the stall.
        state.probe_answered(true, ms(25), t0 + ms(30));
        assert!(state.pace.is_suspected(t0 + ms(30)));
    }

    #[test]
    fn an_answer_or_a_probe_ends_the_refusals_the_outage_rule_reads() {
        let t0 = Instant::now();
        let mut state = MemberState::new(HealthConfig::default(), t0);
        state.raft.member_id = 7;
        state.refused.refused(t0);
        state.refused.refused(t0 + ms(5));
        let proofs = state.proofs(t0 + ms(5));
        assert_eq!(proofs.member_id, 7);
        assert_eq!(
            proofs.refusals,
            Some(Refusals {
                first: t0,
                last: t0 + ms(5)
            })
        );
        state.answered(ms(1), t0 + ms(10));
        assert_eq!(state.proofs(t0 + ms(10)).refusals, None);
        state.refused.refused(t0 + ms(20));
        state.probe_answered(true, ms(2), t0 + ms(30));
        assert_eq!(state.proofs(t0 + ms(30)).refusals, None);
    }

    #[test]
    fn strikes_count_up_until_a_call_is_answered_and_a_probe_does_not_end_them() {
        let t0 = Instant::now();
        let mut state = MemberState::new(HealthConfig::default(), t0);
        assert_eq!(state.strike(), 1);
        assert_eq!(state.strike(), 2);
        state.probe_answered(true, ms(2), t0 + ms(10));
        assert_eq!(state.strike(), 3, "a probe's answer is no call's");
        state.answered(ms(1), t0 + ms(20));
        assert_eq!(state.strike(), 1, "a call answered: they start over");
    }

    #[test]
    fn a_member_takes_streams_only_healthy_undrained_and_unsuspected() {
        let t0 = Instant::now();
        let mut state = MemberState::new(HealthConfig::default(), t0);
        state.probe_answered(true, ms(1), t0 + ms(1));
        let healthy = state.serving(t0 + ms(1));
        assert_eq!(healthy.health, HealthState::Healthy);
        assert!(healthy.takes_streams());
        state.draining = true;
        assert!(!state.serving(t0 + ms(1)).takes_streams(), "drained");
        state.draining = false;
        assert!(state.pace.suspect(t0 + ms(2)));
        let suspected = state.serving(t0 + ms(3));
        assert!(
            suspected.suspected && !suspected.takes_streams(),
            "suspected"
        );
    }

    #[test]
    fn the_outage_rule_reads_the_drain_with_the_rest() {
        let t0 = Instant::now();
        let mut state = MemberState::new(HealthConfig::default(), t0);
        assert!(!state.proofs(t0).draining);
        state.draining = true;
        assert!(state.proofs(t0).draining);
    }

    #[test]
    fn the_pace_hint_is_the_slower_of_the_tail_and_the_smoothed_latency() {
        let t0 = Instant::now();
        let mut state = MemberState::new(HealthConfig::default(), t0);
        assert_eq!(state.pace_hint(t0), None, "nothing answered yet");
        state.probe_answered(true, ms(40), t0 + ms(40));
        assert_eq!(state.pace_hint(t0 + ms(40)), Some(ms(40)));
    }
}
