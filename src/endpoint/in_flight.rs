//! The attempts waiting on a member: all of them (a drain waits for none), and those that need
//! the leader (on a follower, forwarded to it; a drain lets them finish before it moves
//! leadership).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Endpoint;

/// Counts one attempt as in flight on its member until dropped (answered, or abandoned).
pub(crate) struct InFlight {
    ep: Arc<Endpoint>,
    leader_bound: bool,
}

impl InFlight {
    /// An attempt to `ep` starts; `leader_bound`: a prompt one that needs the leader.
    pub(crate) fn start(ep: &Arc<Endpoint>, leader_bound: bool) -> Self {
        ep.in_flight.fetch_add(1, Ordering::Relaxed);
        if leader_bound {
            ep.leader_bound_in_flight.fetch_add(1, Ordering::Relaxed);
        }
        InFlight {
            ep: ep.clone(),
            leader_bound,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.ep.in_flight.fetch_sub(1, Ordering::Relaxed);
        if self.leader_bound {
            self.ep
                .leader_bound_in_flight
                .fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Endpoint {
    /// Attempts now waiting on this member.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Prompt attempts that need the leader now waiting on this member. On a follower they are
    /// forwarded to the leader, and a leader handing over drops forwarded proposals silently
    /// (they would wait out their deadline): `Client::drain` lets them finish before it moves
    /// leadership.
    pub(crate) fn leader_bound_in_flight(&self) -> usize {
        self.leader_bound_in_flight.load(Ordering::Relaxed)
    }
}
