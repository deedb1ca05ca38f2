//! Which members one pick chooses among: the candidates of a pick, and the filters that take
//! suspected or stalled members out of it. Nothing is filtered almost always, and then nothing
//! is copied or allocated (the flags and candidates sit inline for a cluster's usual size).

use std::sync::Arc;

use smallvec::SmallVec;

use super::Candidate;
use crate::endpoint::{Endpoint, HealthState};
use crate::rpc::Route;

/// The candidates of one pick, inline for a cluster's usual size (no allocation per call).
pub(super) type Candidates = SmallVec<[Candidate; 4]>;

/// One flag per member of a pool.
pub(super) type Flags = SmallVec<[bool; 4]>;

/// The members of `pool` (and their candidates) that `keep` marks.
pub(super) fn kept(
    pool: &[Arc<Endpoint>],
    candidates: Candidates,
    keep: &[bool],
) -> (Vec<Arc<Endpoint>>, Candidates) {
    let members = pool
        .iter()
        .zip(keep)
        .filter(|(_, k)| **k)
        .map(|(e, _)| e.clone())
        .collect();
    let candidates = candidates
        .into_iter()
        .zip(keep)
        .filter(|(_, k)| **k)
        .map(|(c, _)| c)
        .collect();
    (members, candidates)
}

/// Which members of `pool` a call on `route` may go to when some are suspected of stalling:
/// all but the suspected ones, when a healthy member that is not suspected remains; `None` when
/// nothing is to be filtered (the common case: no copy is made).
///
/// Only calls any member serves ([`Route::Any`]: serializable reads, status, watches) avoid a
/// suspected member. A leader-bound call sent elsewhere is forwarded to the leader anyway, so
/// avoiding a suspected leader would buy nothing when it is frozen and would add a hop to every
/// write on a false alarm; the leader keeps its fixed timers (two late answers eject it).
pub(super) fn avoid_suspected(
    route: Route,
    pool: &[Arc<Endpoint>],
    candidates: &[Candidate],
) -> Option<Flags> {
    if route != Route::Any {
        return None;
    }
    let suspected: Flags = pool.iter().map(|e| e.is_suspected()).collect();
    if !suspected.contains(&true) {
        return None;
    }
    let alternative = candidates
        .iter()
        .zip(&suspected)
        .any(|(c, s)| !s && c.state == HealthState::Healthy);
    alternative.then(|| suspected.iter().map(|s| !s).collect())
}
