//! Pick policies: which endpoint a request goes to, decided from health snapshots (no IO here).
//!
//! The default, [`LeaderFirst`], never picks an ejected endpoint while a healthy one exists and,
//! when none is healthy, still picks one (probation first) rather than failing at once: the
//! request may well succeed, and its outcome teaches the health state machine.

use std::fmt::Debug;
use std::time::Duration;

pub use crate::endpoint::Candidate;
use crate::endpoint::{HealthState, clearly_slower};
use crate::rpc::Route;

/// Member indices, inline up to a usual cluster's size.
type Indices = smallvec::SmallVec<[usize; 8]>;

/// Chooses the endpoint for a request. Implement it to plug in your own routing; set it with
/// [`Options::with_pick_policy`](crate::Options::with_pick_policy).
///
/// ```
/// use etcd_ha::{Candidate, PickPolicy, Route};
///
/// /// Always the first untried endpoint, whatever its health.
/// #[derive(Debug)]
/// struct InOrder;
///
/// impl PickPolicy for InOrder {
///     fn pick(&self, _route: Route, candidates: &[Candidate], tried: &[bool]) -> usize {
///         tried.iter().position(|t| !t).unwrap_or(0)
///     }
/// }
/// ```
pub trait PickPolicy: Debug + Send + Sync + 'static {
    /// Return an index into `candidates` (never empty). `tried[i]` is true when this request
    /// already failed at (or is still waiting on) endpoint `i`; avoid those unless nothing else
    /// is left.
    fn pick(&self, route: Route, candidates: &[Candidate], tried: &[bool]) -> usize;
}

/// The default policy.
///
/// - [`Route::Leader`]: the leader when it is healthy, unless the client's link to it is
///   measurably slower than a healthy follower's forward (its probes' linearizable reads take
///   over twice as long plus 10 ms, see [`Candidate::leader_path`]): then that follower;
///   else the fastest healthy member (it forwards to the leader); else probation, then
///   leaderless, then ejected members.
/// - [`Route::LeaderItself`]: as [`Route::Leader`], but never a detour around the leader's
///   link (a follower refuses such a call).
/// - [`Route::Any`]: power of two choices by latency among healthy members (spreads serializable
///   reads, avoids slow ones); else leaderless members (they still serve serializable reads),
///   then probation, then ejected.
///
/// ```
/// use etcd_ha::{Candidate, HealthState, LeaderFirst, PickPolicy, Route};
/// let members = [
///     Candidate::new(HealthState::Healthy, false, None),
///     Candidate::new(HealthState::Healthy, true, None),
/// ];
/// assert_eq!(LeaderFirst.pick(Route::Leader, &members, &[false, false]), 1);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct LeaderFirst;

/// Lower is better.
fn tier(route: Route, state: HealthState) -> u8 {
    match (route, state) {
        (_, HealthState::Healthy) => 0,
        (Route::Any, HealthState::NoLeader) => 1,
        (Route::Any, HealthState::Probation) => 2,
        (_, HealthState::Probation) => 1,
        (_, HealthState::NoLeader) => 2,
        (_, HealthState::Ejected) => 3,
    }
}

/// The follower in `pool` that a leader-bound call should take instead of `leader`, when the
/// leader's path is clearly slower than that follower's (twice it plus 10 ms).
///
/// Why a leader-bound call may take a follower when the leader is healthy: a gray failure of
/// the client's own link to the leader (a slow route, a lossy NIC, a congested middlebox) that
/// the cluster does not see, since its peers reach the leader fine. The leader's
/// [`leader_path`](Candidate::leader_path) and a follower's compare the same work (a
/// linearizable read: the link and the read's quorum round; the follower's adds its forward
/// hop). With +100 ms each way on the leader's link, writes on the direct link kept 0.44x of
/// their rate. The leader's path counts as slow once two reads in a row were, and a read clearly
/// slower than the one before is checked again at once (see `endpoint/read_path.rs`): a slow
/// link is confirmed within a round trip of it, a hiccup moves nothing, one good read brings
/// the calls back. Only a follower known to be serving is a way through (its path is `None`
/// while in doubt).
fn detour(candidates: &[Candidate], pool: &[usize], leader: usize) -> Option<usize> {
    let direct = candidates[leader].leader_path?;
    let (follower, forwarded) = pool
        .iter()
        .filter(|&&i| i != leader && candidates[i].state == HealthState::Healthy)
        .filter_map(|&i| candidates[i].leader_path.map(|p| (i, p)))
        .min_by_key(|(_, p)| *p)?;
    clearly_slower(direct, forwarded).then_some(follower)
}

/// Unknown latency sorts after known ones but before nothing: a fresh endpoint gets tried.
fn latency_key(c: &Candidate) -> Duration {
    c.latency.unwrap_or(Duration::from_secs(1))
}

impl PickPolicy for LeaderFirst {
    fn pick(&self, route: Route, candidates: &[Candidate], tried: &[bool]) -> usize {
        let untried = (0..candidates.len()).any(|i| !tried.get(i).copied().unwrap_or(false));
        let eligible = |i: &usize| !untried || !tried.get(*i).copied().unwrap_or(false);
        let best = (0..candidates.len())
            .filter(eligible)
            .map(|i| tier(route, candidates[i].state))
            .min()
            .unwrap_or(0);
        // Indices inline (a cluster has a handful of members): no allocation on every pick.
        let pool: Indices = (0..candidates.len())
            .filter(eligible)
            .filter(|&i| tier(route, candidates[i].state) == best)
            .collect();
        if pool.is_empty() {
            return 0;
        }
        if route != Route::Any {
            if let Some(&leader) = pool.iter().find(|&&i| candidates[i].is_leader) {
                let detoured = (route == Route::Leader)
                    .then(|| detour(candidates, &pool, leader))
                    .flatten();
                return detoured.unwrap_or(leader);
            }
            // Fastest; ties broken at random so equal members share the load.
            let fastest = pool.iter().map(|&i| latency_key(&candidates[i])).min();
            let ties: Indices = pool
                .iter()
                .copied()
                .filter(|&i| Some(latency_key(&candidates[i])) == fastest)
                .collect();
            return ties[fastrand::usize(..ties.len())];
        }
        // Power of two choices: cheap, and steers away from a slow member without sending
        // everything to the single fastest one.
        if pool.len() == 1 {
            return pool[0];
        }
        let a = pool[fastrand::usize(..pool.len())];
        let mut b = pool[fastrand::usize(..pool.len() - 1)];
        if b == a {
            b = pool[pool.len() - 1];
        }
        if latency_key(&candidates[b]) < latency_key(&candidates[a]) {
            b
        } else {
            a
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use HealthState::*;

    fn c(state: HealthState, is_leader: bool, ms: u64) -> Candidate {
        Candidate::new(state, is_leader, Some(Duration::from_millis(ms)))
    }

    /// A candidate whose probe reads took `path_ms`.
    fn p(state: HealthState, is_leader: bool, path_ms: u64) -> Candidate {
        c(state, is_leader, 1).with_leader_path(Some(Duration::from_millis(path_ms)))
    }

    #[test]
    fn leader_bound_calls_detour_around_a_slow_link_to_the_leader() {
        // +100 ms each way on the leader's link: through the fastest healthy follower.
        let slow = [
            p(Healthy, false, 3),
            p(Healthy, true, 201),
            p(Healthy, false, 1),
        ];
        for _ in 0..50 {
            assert_eq!(LeaderFirst.pick(Route::Leader, &slow, &[false; 3]), 2);
        }
        // Once that follower was tried: through the other one.
        assert_eq!(
            LeaderFirst.pick(Route::Leader, &slow, &[false, false, true]),
            0
        );
        // Both followers tried: the leader, slow or not.
        assert_eq!(
            LeaderFirst.pick(Route::Leader, &slow, &[true, false, true]),
            1
        );
        // A call only the leader itself serves (MoveLeader) takes the slow link: a follower
        // would refuse it, not forward it.
        for _ in 0..50 {
            assert_eq!(LeaderFirst.pick(Route::LeaderItself, &slow, &[false; 3]), 1);
        }
    }

    #[test]
    fn leader_bound_calls_stay_on_the_leader_unless_it_is_clearly_slower() {
        let cases: [(u64, u64); 5] = [
            (1, 2),    // steady state: the leader's read is the quicker
            (3, 1),    // slower, but by less than the margin
            (11, 1),   // 2 x 1 + 10 = 12: still within
            (40, 20),  // twice, but not twice plus the margin
            (200, 95), // a follower's forward as slow as the link: nothing to gain
        ];
        for (leader, follower) in cases {
            let m = [p(Healthy, true, leader), p(Healthy, false, follower)];
            assert_eq!(
                LeaderFirst.pick(Route::Leader, &m, &[false; 2]),
                0,
                "leader {leader} ms, follower {follower} ms"
            );
        }
        // Unknown paths (no probe read yet) never detour.
        let unknown = [
            c(Healthy, true, 1).with_leader_path(Some(Duration::from_millis(200))),
            c(Healthy, false, 1),
        ];
        assert_eq!(LeaderFirst.pick(Route::Leader, &unknown, &[false; 2]), 0);
        // Nor to a follower that is not healthy.
        let unwell = [p(Healthy, true, 200), p(NoLeader, false, 1)];
        assert_eq!(LeaderFirst.pick(Route::Leader, &unwell, &[false; 2]), 0);
        // 2 x 1 + 10 < 13: detour.
        let just = [p(Healthy, true, 13), p(Healthy, false, 1)];
        assert_eq!(LeaderFirst.pick(Route::Leader, &just, &[false; 2]), 1);
    }

    #[test]
    fn leader_when_healthy() {
        let m = [
            c(Healthy, false, 1),
            c(Healthy, true, 9),
            c(Healthy, false, 2),
        ];
        for _ in 0..50 {
            assert_eq!(LeaderFirst.pick(Route::Leader, &m, &[false; 3]), 1);
        }
    }

    #[test]
    fn fastest_healthy_when_leader_is_not() {
        let m = [
            c(Healthy, false, 5),
            c(Ejected, true, 1),
            c(Healthy, false, 2),
        ];
        for _ in 0..50 {
            assert_eq!(LeaderFirst.pick(Route::Leader, &m, &[false; 3]), 2);
        }
    }

    #[test]
    fn never_ejected_while_healthy_exists() {
        let m = [
            c(Ejected, false, 1),
            c(Healthy, false, 50),
            c(Ejected, true, 1),
        ];
        for route in [Route::Leader, Route::Any] {
            for _ in 0..100 {
                assert_eq!(LeaderFirst.pick(route, &m, &[false; 3]), 1);
            }
        }
    }

    #[test]
    fn skips_tried_endpoints_then_falls_back() {
        let m = [
            c(Healthy, true, 1),
            c(Healthy, false, 1),
            c(Ejected, false, 1),
        ];
        assert_eq!(
            LeaderFirst.pick(Route::Leader, &m, &[true, false, false]),
            1
        );
        assert_eq!(LeaderFirst.pick(Route::Leader, &m, &[true, true, false]), 2);
        // Everything tried: start over with the best.
        assert_eq!(LeaderFirst.pick(Route::Leader, &m, &[true, true, true]), 0);
    }

    #[test]
    fn none_healthy_prefers_probation_then_anything() {
        let m = [
            c(Ejected, false, 1),
            c(Probation, false, 1),
            c(NoLeader, false, 1),
        ];
        assert_eq!(LeaderFirst.pick(Route::Leader, &m, &[false; 3]), 1);
        assert_eq!(LeaderFirst.pick(Route::Any, &m, &[false; 3]), 2);
        let all_ejected = [c(Ejected, false, 1), c(Ejected, false, 1)];
        let i = LeaderFirst.pick(Route::Leader, &all_ejected, &[false; 2]);
        assert!(i < 2);
    }

    #[test]
    fn serializable_reads_spread_and_avoid_the_slow() {
        let m = [
            c(Healthy, true, 2),
            c(Healthy, false, 2),
            c(Healthy, false, 400),
        ];
        let mut counts = [0; 3];
        for _ in 0..3000 {
            counts[LeaderFirst.pick(Route::Any, &m, &[false; 3])] += 1;
        }
        assert!(counts[0] > 500 && counts[1] > 500, "{counts:?}");
        assert!(counts[2] < counts[0] / 2, "{counts:?}");
    }
}
