//! Whether leader-bound calls can go now: a lost leader's outage, a stalled leader, and the
//! wait for either to end (the leader view's `watch` channel, not a poll).

use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;
use tokio::time::Instant;

use super::Balancer;
use super::outage_rule::outage_over;
use crate::endpoint::{Endpoint, Proofs};

impl Balancer {
    /// When we lost the leader, if that outage is still on: no other leader has been seen since
    /// and the evidence does not say it is over (`outage_rule.rs`). Changes nothing: the
    /// outage ends in [`settle_outage`](Self::settle_outage).
    pub(crate) fn leader_outage(&self) -> Option<Instant> {
        let (lost_id, since) = self.leader.get().lost?;
        (!self.outage_over(lost_id, since)).then_some(since)
    }

    /// End the leader outage, waking the calls that wait on it, when the evidence says it is
    /// over: the probers' news (only a probe serves the linearizable reads and readmits the
    /// members the rule reads).
    pub(crate) fn settle_outage(&self) {
        if let Some((lost_id, since)) = self.leader.get().lost
            && self.outage_over(lost_id, since)
        {
            self.leader.end_outage(lost_id, since);
        }
    }

    fn outage_over(&self, lost_id: u64, since: Instant) -> bool {
        // On the stack: during an outage every waiting call asks on each turn of its wait.
        let members: SmallVec<[Proofs; 8]> = self.endpoints().iter().map(|e| e.proofs()).collect();
        outage_over(lost_id, since, &members)
    }

    /// Since when the leader has stalled, when it has: it owes answers that need the leader
    /// past its own stall limit (see `Endpoint::stalled_since`); with the endpoint, and whether
    /// another member has served a linearizable read since (then the leader is alive behind
    /// its peers and only our link to it is broken).
    pub(super) fn leader_stall(&self) -> Option<(Arc<Endpoint>, Instant, bool)> {
        // Nobody owes an answer (the common case): one atomic per member, read in place
        // (no copy of the set, no look at the leader view).
        if !self.endpoints.borrow().iter().any(|e| e.owes()) {
            return None;
        }
        self.leader_stall_in(&self.endpoints())
    }

    /// [`leader_stall`](Self::leader_stall) among `endpoints`, the set the caller holds.
    pub(super) fn leader_stall_in(
        &self,
        endpoints: &[Arc<Endpoint>],
    ) -> Option<(Arc<Endpoint>, Instant, bool)> {
        // The silence first: one atomic per member, no clock and no look at the leader view,
        // unless one owes answers (the common case; every leader-bound call asks twice).
        let mut stalled = endpoints
            .iter()
            .filter_map(|e| e.stalled_since().map(|since| (e, since)))
            .peekable();
        stalled.peek()?;
        let leader = self.leader_id();
        if leader == 0 {
            return None;
        }
        let (ep, since) = stalled.find(|(e, _)| e.raft().member_id == leader)?;
        // Whatever that member's own health: its read proves the leader alive (a loaded box
        // can leave a follower on probation; waiting on would hold the calls to their end).
        // Unless a later request needing the leader stalled there since: the leader served its
        // peers then, not now (a read served in the moment of a cut from everyone kept calls
        // going to a follower that forwarded them to the lost leader until the caller's
        // deadline: the likely cause of two 1 s deadlines in one CI run).
        let served_elsewhere = endpoints.iter().any(|e| {
            !Arc::ptr_eq(e, ep)
                && e.linearizable_ok().is_some_and(|t| t > since)
                && e.stalled_since().is_none()
        });
        Some((ep.clone(), since, served_elsewhere))
    }

    /// Since when leader-bound calls should wait rather than go: a leader outage is on (see
    /// [`Balancer::leader_outage`]), or the leader stalled and no other member has served
    /// since (a frozen leader, or one cut off from its peers: a call sent to it, or through a
    /// follower to it, would hang until the next leader or the call's deadline).
    pub(crate) fn leader_unready(&self) -> Option<Instant> {
        if let Some(since) = self.leader_outage() {
            return Some(since);
        }
        match self.leader_stall() {
            Some((_, since, false)) => Some(since),
            _ => None,
        }
    }

    /// Wait until leader-bound calls can go (no leader outage is on, and the leader has not
    /// stalled unless others are served; see [`Balancer::leader_unready`]), at most until
    /// `until`; wakes the probers first and every `nudge` while waiting, so that the new leader
    /// (or the stalled one answering again) is found quickly.
    pub(crate) async fn await_leader(&self, until: Instant, nudge: Duration) {
        let mut view = self.leader_changes();
        loop {
            if self.leader_unready().is_none() {
                return;
            }
            self.probe_now();
            view.borrow_and_update();
            let next_nudge = Instant::now() + nudge;
            tokio::select! {
                changed = view.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = tokio::time::sleep_until(until.min(next_nudge)) => {
                    if Instant::now() >= until {
                        return;
                    }
                }
            }
        }
    }
}
