//! Whether leader-bound calls can go now: a lost leader's outage, a stalled leader, and the
//! wait for either to end (the leader view's `watch` channel, not a poll).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Balancer;
use crate::endpoint::{Endpoint, HealthState};

impl Balancer {
    /// When we lost the leader, if that outage is still on: no other leader has been seen since
    /// and the lost one is not healthy again. Ends the outage (and wakes its waiters) when the
    /// evidence says it is over.
    pub(crate) fn leader_outage(&self) -> Option<Instant> {
        let (lost_id, since) = self.leader.get().lost?;
        let endpoints = self.endpoints();
        // A leader handing over for a drain is healthy and serves reads until the transfer
        // ends, but drops the proposals followers forward to it: only a new leader ends that
        // outage (`LeaderCell::observe`).
        //
        // The same holds for a leader whose process is stopping (SIGTERM: etcd closes its
        // client listeners first, and only then hands leadership over and drops what followers
        // forward during the transfer) or gone: it refuses connections, while the followers
        // still name it and may even serve linearizable reads through it for a while. A refused
        // connection since the loss says so; a leader merely cut off from us (a broken link)
        // accepts them. See `stopping_but_leading` for the one way such an outage ends early.
        //
        // And for a leader that dropped our proposal since the loss (someone else's MoveLeader,
        // or etcd's own transfer at a graceful stop): it is healthy and followers can read
        // through it, but it drops their forwarded writes until a new leader takes over.
        if endpoints.iter().any(|e| {
            e.raft().member_id == lost_id
                && (e.is_draining()
                    || e.dropped_at().is_some_and(|t| t >= since)
                    || (e.refusals().is_some_and(|r| r.last >= since)
                        && e.state() != HealthState::Healthy
                        && !stopping_but_leading(e, &endpoints)))
        }) {
            return Some(since);
        }
        // A member served a linearizable read that started after we lost the leader: the
        // cluster's leader is alive and reachable through it (only our link to the leader
        // broke), so calls can go through followers now. Or the same member leads again and
        // answers: the outage was short (a brief freeze).
        let over = endpoints.iter().any(|e| {
            let member = e.raft().member_id;
            (member != lost_id && e.linearizable_ok().is_some_and(|t| t > since))
                || (member == lost_id
                    && (e.state() == HealthState::Healthy || stopping_but_leading(e, &endpoints)))
        });
        if over {
            self.leader.end_outage(lost_id, since);
            return None;
        }
        Some(since)
    }

    /// Since when the leader has stalled, when it has: it owes answers that need the leader
    /// past its own stall limit (see `Endpoint::stalled_since`); with the endpoint, and whether
    /// another member has served a linearizable read since (then the leader is alive behind
    /// its peers and only our link to it is broken).
    pub(super) fn leader_stall(&self) -> Option<(Arc<Endpoint>, Instant, bool)> {
        let leader = self.leader_id();
        if leader == 0 {
            return None;
        }
        let endpoints = self.endpoints();
        // The silence first: one atomic per member unless one owes answers (the common case).
        let (ep, since) = endpoints
            .iter()
            .filter_map(|e| e.stalled_since().map(|since| (e, since)))
            .find(|(e, _)| e.raft().member_id == leader)?;
        // Whatever that member's own health: its read proves the leader alive (a loaded box
        // can leave a follower on probation; waiting on would hold the calls to their end).
        let served_elsewhere = endpoints
            .iter()
            .any(|e| !Arc::ptr_eq(e, ep) && e.linearizable_ok().is_some_and(|t| t > since));
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

/// How long a stopping leader takes to hand over when nothing holds its stop up: etcd closes
/// its client listeners, then transfers leadership at once; the new leader is elected and
/// reported by the followers within tens of ms (52-54 ms measured on etcd 3.6.16 with two
/// clients). A leader that still leads past it is one whose stop waits for something else.
///
/// Why not longer: every leader-bound call waits this long (plus a probe's read) at a held-open
/// stop, and Go's clientv3, which never waits, lost no call through etcd 3.6.16's quick stops
/// at up to 256 in flight, so writes forwarded during a quick hand-over are rarely dropped
/// there. With 500 ms, etcd-ha's longest gap at a held-open stop was 524-619 ms at 1-16 calls
/// in flight; with 150 ms, 168-209 ms, and the quick-stop tests (`tests/leader_sigterm.rs`,
/// etcd 3.4.23, 3.5.1, 3.5.35, 3.6.16) still saw no write fail after the close.
pub(crate) const STOP_HANDOVER: Duration = Duration::from_millis(150);

/// Whether `leader`, which refuses our connections, has been stopping for longer than a quick
/// hand-over and still leads: another member served a linearizable read that began
/// [`STOP_HANDOVER`] after the first refusal.
///
/// etcd's graceful stop (SIGTERM) closes the client listeners, then waits for the RPCs in
/// flight, other clients' watch and keep-alive streams included, up to its request timeout
/// (7 s with default timing), and only then hands leadership over. For all that time the
/// member refuses us but leads, and its followers forward writes to it as usual: waiting for
/// a new leader would hold every leader-bound call to its deadline (etcd 3.6.16: a 2 s gap and
/// errors at 1 call in flight, where Go's clientv3 lost nothing), so calls go through the
/// followers. A quick stop hands over within [`STOP_HANDOVER`], before any read can prove
/// this, and is waited out as before: writes forwarded during the transfer would be dropped.
fn stopping_but_leading(leader: &Endpoint, endpoints: &[Arc<Endpoint>]) -> bool {
    let Some(refusals) = leader.refusals() else {
        return false;
    };
    let held_open = refusals.first + STOP_HANDOVER;
    let member = leader.raft().member_id;
    endpoints.iter().any(|e| {
        e.raft().member_id != member && e.linearizable_ok().is_some_and(|t| t >= held_open)
    })
}
