//! Pick policies: which endpoint a request goes to, decided from health snapshots (no IO here).
//!
//! The default, [`LeaderFirst`], never picks an ejected endpoint while a healthy one exists and,
//! when none is healthy, still picks one (probation first) rather than failing at once: the
//! request may well succeed, and its outcome teaches the health state machine.

use std::fmt::Debug;
use std::time::Duration;

pub use crate::endpoint::Candidate;
use crate::endpoint::HealthState;
use crate::rpc::Route;

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
/// - [`Route::Leader`]: the leader when it is healthy; else the fastest healthy member (it
///   forwards to the leader); else probation, then leaderless, then ejected members.
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
        let pool: Vec<usize> = (0..candidates.len())
            .filter(eligible)
            .filter(|&i| tier(route, candidates[i].state) == best)
            .collect();
        if pool.is_empty() {
            return 0;
        }
        if route != Route::Any {
            if let Some(&leader) = pool.iter().find(|&&i| candidates[i].is_leader) {
                return leader;
            }
            // Fastest; ties broken at random so equal members share the load.
            let fastest = pool.iter().map(|&i| latency_key(&candidates[i])).min();
            let ties: Vec<usize> = pool
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
        Candidate {
            state,
            is_leader,
            latency: Some(Duration::from_millis(ms)),
        }
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
