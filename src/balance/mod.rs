//! The balancer: the current endpoint set, the raft leader as last learned, and picking.
//!
//! Background tasks (probers, member sync) and finished requests write what they learn; a pick
//! only reads snapshots and asks the [`PickPolicy`].

mod pick;

use std::sync::{Arc, Mutex, RwLock};

use crate::endpoint::Endpoint;
use crate::rpc::Route;

pub use pick::{Candidate, LeaderFirst, PickPolicy};

/// Who leads, according to the newest raft term seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct LeaderView {
    /// Leader's member id; 0 while unknown or during an election.
    member_id: u64,
    /// The raft term the view comes from; older terms never overwrite newer ones.
    term: u64,
}

/// The endpoint set and the leader.
#[derive(Debug)]
pub(crate) struct Balancer {
    /// Replaced whole by member sync; readers clone the `Arc`.
    endpoints: RwLock<Arc<Vec<Arc<Endpoint>>>>,
    leader: Mutex<LeaderView>,
    /// The leader we lost contact with, and when: until another leader shows up (or it comes
    /// back), followers may still forward to it and hang, so leader-bound calls wait a little.
    lost: Mutex<Option<(u64, tokio::time::Instant)>>,
    policy: Arc<dyn PickPolicy>,
}

impl Balancer {
    pub(crate) fn new(endpoints: Vec<Arc<Endpoint>>, policy: Arc<dyn PickPolicy>) -> Self {
        Balancer {
            endpoints: RwLock::new(Arc::new(endpoints)),
            leader: Mutex::new(LeaderView::default()),
            lost: Mutex::new(None),
            policy,
        }
    }

    /// The endpoints now.
    pub(crate) fn endpoints(&self) -> Arc<Vec<Arc<Endpoint>>> {
        self.endpoints
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replace the endpoint set (member sync). Never empty: an empty set is ignored.
    pub(crate) fn replace(&self, endpoints: Vec<Arc<Endpoint>>) {
        if endpoints.is_empty() {
            return;
        }
        *self.endpoints.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(endpoints);
    }

    /// Take one endpoint out of the set (it answered for another cluster), under the write lock
    /// so that a concurrent [`replace`](Self::replace) is not undone. Never empties the set;
    /// says whether it was removed.
    pub(crate) fn remove(&self, endpoint: &Endpoint) -> bool {
        let mut set = self.endpoints.write().unwrap_or_else(|e| e.into_inner());
        let rest: Vec<Arc<Endpoint>> = set
            .iter()
            .filter(|e| !std::ptr::eq(e.as_ref(), endpoint))
            .cloned()
            .collect();
        if rest.is_empty() || rest.len() == set.len() {
            return false;
        }
        *set = Arc::new(rest);
        true
    }

    /// The leader's member id, 0 when unknown.
    pub(crate) fn leader_id(&self) -> u64 {
        self.leader
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .member_id
    }

    /// A member said who leads in `term` (0: nobody). Newer terms win; within a term, a known
    /// leader beats "none" (one member may not have heard of the winner yet).
    pub(crate) fn observe_leader(&self, leader_id: u64, term: u64) {
        let mut view = self.leader.lock().unwrap_or_else(|e| e.into_inner());
        let newer = term > view.term || (term == view.term && leader_id != 0);
        if newer && (view.member_id != leader_id || view.term != term) {
            let old = *view;
            *view = LeaderView {
                member_id: leader_id,
                term,
            };
            drop(view);
            if old.member_id != leader_id {
                tracing::info!(from = %format!("{:x}", old.member_id), to = %format!("{:x}", leader_id), term, "leader changed");
                if old.member_id != 0 && leader_id != 0 {
                    crate::metrics::failover();
                }
            }
        }
    }

    /// The leader is gone or moved (an error from it said so): stop preferring it until a probe
    /// says who leads now.
    pub(crate) fn forget_leader(&self, member_id: u64) {
        let mut view = self.leader.lock().unwrap_or_else(|e| e.into_inner());
        if member_id != 0 && view.member_id == member_id {
            view.member_id = 0;
            let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
            if lost.is_none_or(|(id, _)| id != member_id) {
                *lost = Some((member_id, tokio::time::Instant::now()));
            }
        }
    }

    /// When we lost the leader, if that outage is still on: no other leader has been seen since
    /// and the lost one is not healthy again.
    pub(crate) fn leader_outage(&self) -> Option<tokio::time::Instant> {
        let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        let (lost_id, since) = (*lost)?;
        let leader = self.leader_id();
        let endpoints = self.endpoints();
        // A member served a linearizable read that started after we lost the leader: the
        // cluster's leader is alive and reachable through it (only our link to the leader
        // broke), so calls can go through followers now.
        let leader_alive = endpoints.iter().any(|e| {
            e.raft().member_id != lost_id && e.linearizable_ok().is_some_and(|t| t > since)
        });
        let over = if leader_alive || (leader != 0 && leader != lost_id) {
            true
        } else {
            // The same member leads again and answers: the outage was short (a brief freeze).
            self.endpoints().iter().any(|e| {
                e.raft().member_id == lost_id && e.state() == crate::endpoint::HealthState::Healthy
            })
        };
        if over {
            *lost = None;
            return None;
        }
        Some(since)
    }

    /// The endpoint for a request on `route` that already went to `tried` (by URL).
    pub(crate) fn pick(&self, route: Route, tried: &[Arc<str>]) -> Option<Arc<Endpoint>> {
        let endpoints = self.endpoints();
        if endpoints.is_empty() {
            return None;
        }
        let leader = self.leader_id();
        let candidates: Vec<Candidate> = endpoints.iter().map(|e| e.candidate(leader)).collect();
        let tried: Vec<bool> = endpoints
            .iter()
            .map(|e| tried.iter().any(|t| **t == *e.url))
            .collect();
        let index = self.policy.pick(route, &candidates, &tried);
        endpoints.get(index.min(endpoints.len() - 1)).cloned()
    }
}
