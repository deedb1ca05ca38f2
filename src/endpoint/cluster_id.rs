//! The cluster a client belongs to: the first cluster id seen, and the check every later answer
//! must pass (no IO here).
//!
//! Why: every etcd answer carries `ResponseHeader.cluster_id`. An endpoint list that mixes two
//! clusters (a typo, a copied config), or a member address that a member of *another* cluster
//! took over, would otherwise be used like any member: writes split between two clusters, and
//! the leader view flips between their leaders. The first id seen wins (what the client reached
//! first is what it connected to); an endpoint answering with another id is refused.

use std::sync::atomic::{AtomicU64, Ordering};

/// The first cluster id seen by a client (0 until one is seen); shared by all its endpoints.
#[derive(Debug, Default)]
pub(crate) struct ClusterId {
    /// 0: none seen yet (etcd never uses 0 as a cluster id).
    first: AtomicU64,
}

impl ClusterId {
    /// Check an answer's cluster id: the first non-zero one becomes the client's; a later one
    /// that differs is refused with the expected id. 0 (an answer without a header) proves
    /// nothing and passes.
    pub(crate) fn check(&self, found: u64) -> Result<(), u64> {
        if found == 0 {
            return Ok(());
        }
        // Checked on every answer: a load first, so that calls do not contend on a CAS.
        let first = self.first.load(Ordering::Acquire);
        if first == found {
            return Ok(());
        }
        match self
            .first
            .compare_exchange(0, found, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(()),
            Err(expected) if expected == found => Ok(()),
            Err(expected) => Err(expected),
        }
    }

    /// The client's cluster id, once seen.
    #[cfg(test)]
    pub(crate) fn get(&self) -> Option<u64> {
        Some(self.first.load(Ordering::Acquire)).filter(|&id| id != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_id_wins_and_others_are_refused() {
        let id = ClusterId::default();
        assert_eq!(id.get(), None);
        // No header: nothing learned, nothing refused.
        assert_eq!(id.check(0), Ok(()));
        assert_eq!(id.get(), None);
        assert_eq!(id.check(0xa1), Ok(()));
        assert_eq!(id.get(), Some(0xa1));
        assert_eq!(id.check(0xa1), Ok(()));
        assert_eq!(id.check(0xb2), Err(0xa1));
        // A refusal does not move the client to the other cluster.
        assert_eq!(id.check(0xb2), Err(0xa1));
        assert_eq!(id.check(0), Ok(()));
        assert_eq!(id.get(), Some(0xa1));
    }

    #[test]
    fn racing_first_answers_agree_on_one_id() {
        let id = std::sync::Arc::new(ClusterId::default());
        let threads: Vec<_> = [0xa1u64, 0xb2]
            .into_iter()
            .map(|found| {
                let id = id.clone();
                std::thread::spawn(move || id.check(found).is_ok())
            })
            .collect();
        let accepted = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|ok| *ok)
            .count();
        assert_eq!(accepted, 1, "exactly one of two clusters is accepted");
    }

    /// The prober and first contact both record Status answers through the balancer: an
    /// endpoint answering for another cluster is refused with the typed error and leaves the
    /// set.
    #[tokio::test(start_paused = true)]
    async fn a_status_from_another_cluster_refuses_the_endpoint() {
        use crate::endpoint::RaftView;
        use crate::error::Error;

        let urls = [
            "http://127.0.0.1:9".to_owned(),
            "http://127.0.0.1:10".to_owned(),
        ];
        let options = crate::options::Options::new().without_member_sync();
        let transport = crate::call::Transport::unprobed(&urls, options);
        let balancer = &transport.balancer;
        let endpoints = balancer.endpoints();
        let status = |cluster_id, member_id| RaftView {
            member_id,
            leader_id: member_id,
            raft_term: 2,
            cluster_id,
            ..Default::default()
        };
        balancer
            .record_status(&endpoints[0], status(0xa1, 0x11))
            .unwrap();
        assert_eq!(endpoints[0].raft().member_id, 0x11);
        let theirs = balancer.record_status(&endpoints[1], status(0xb2, 0x22));
        match theirs {
            Err(Error::ClusterIdMismatch {
                endpoint,
                expected: 0xa1,
                found: 0xb2,
            }) => assert_eq!(endpoint, urls[1]),
            other => panic!("expected a cluster id mismatch, got {other:?}"),
        }
        // Nothing of the foreign answer was recorded, and the endpoint is gone.
        assert_eq!(endpoints[1].raft().member_id, 0);
        assert_eq!(balancer.leader_id(), 0x11);
        let left: Vec<String> = balancer
            .endpoints()
            .iter()
            .map(|e| e.url.to_string())
            .collect();
        assert_eq!(left, [urls[0].clone()]);
        assert!(endpoints[1].cancel.is_cancelled());
        // The set is never emptied: the last endpoint stays (ejected, if it were refused).
        assert!(!balancer.remove(&endpoints[0]));
        assert_eq!(balancer.endpoints().len(), 1);
    }
}
