//! The leader view: who leads according to the newest raft term seen, and whether we lost it.
//!
//! One value behind one lock (a `tokio::sync::watch` channel), changed only through
//! `send_if_modified`: the leader and the lost-leader outage change together, so no code can
//! take their locks in two orders (the old `leader` + `lost` pair could deadlock a worker
//! thread during a failover). Waiters subscribe and wake on every change instead of polling.

use tokio::sync::watch;
use tokio::time::Instant;

/// What the client knows of the leader.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LeaderView {
    /// Leader's member id; 0 while unknown or during an election.
    pub(crate) member_id: u64,
    /// The raft term the view comes from; older terms never overwrite newer ones.
    pub(crate) term: u64,
    /// The leader we lost contact with, and when. Until another leader shows up (or it comes
    /// back), followers may still forward to it and hang, so leader-bound calls wait a little.
    pub(crate) lost: Option<(u64, Instant)>,
}

/// The single writer's side of the view; readers subscribe.
#[derive(Debug)]
pub(crate) struct LeaderCell {
    view: watch::Sender<LeaderView>,
}

impl Default for LeaderCell {
    fn default() -> Self {
        LeaderCell {
            view: watch::Sender::new(LeaderView::default()),
        }
    }
}

impl LeaderCell {
    /// The view now.
    pub(crate) fn get(&self) -> LeaderView {
        *self.view.borrow()
    }

    /// Wakes on every change of the view.
    pub(crate) fn subscribe(&self) -> watch::Receiver<LeaderView> {
        self.view.subscribe()
    }

    /// A member said who leads in `term` (0: nobody). Newer terms win; within a term, a known
    /// leader beats "none" (one member may not have heard of the winner yet). Returns the
    /// previous leader when the leader changed.
    pub(crate) fn observe(&self, leader_id: u64, term: u64) -> Option<u64> {
        let mut previous = None;
        self.view.send_if_modified(|view| {
            let newer = term > view.term || (term == view.term && leader_id != 0);
            if !newer || (view.member_id == leader_id && view.term == term) {
                return false;
            }
            if view.member_id != leader_id {
                previous = Some(view.member_id);
            }
            view.member_id = leader_id;
            view.term = term;
            // Another leader is known: the outage is over.
            if leader_id != 0 && view.lost.is_some_and(|(id, _)| id != leader_id) {
                view.lost = None;
            }
            true
        });
        previous
    }

    /// The leader is gone or moved (an error from it said so): stop preferring it until a probe
    /// says who leads now, and start the outage.
    pub(crate) fn forget(&self, member_id: u64, now: Instant) {
        self.view.send_if_modified(|view| {
            if member_id == 0 || view.member_id != member_id {
                return false;
            }
            view.member_id = 0;
            if view.lost.is_none_or(|(id, _)| id != member_id) {
                view.lost = Some((member_id, now));
            }
            true
        });
    }

    /// A MoveLeader from `from` to `to` is done (etcd answered it, or `to` said it leads): `to`
    /// leads now. Recorded at once, so that calls waiting for the new leader go without waiting
    /// for a probe, unless something newer was learnt meanwhile (the view names neither `from`
    /// nor nobody). Returns whether the view changed.
    ///
    /// Neither says in which raft term (etcd 3.4 and 3.5 send `MoveLeaderResponse` without a
    /// header, and a Status answer's term is that of the member's last applied entry, which
    /// lags behind an election), but `to` won an election after every term seen so far, so its
    /// term is at least one more than the view's: recorded as that lower bound, a late answer
    /// naming `from` in its old term loses, while any real answer from `to`'s term or a later
    /// one wins. If `to` does not lead after all, its own "not leader" error or a newer term
    /// naming another member corrects the view the usual way.
    pub(crate) fn appoint(&self, from: u64, to: u64) -> bool {
        self.view.send_if_modified(|view| {
            if to == 0 || (view.member_id != 0 && view.member_id != from) {
                return false;
            }
            view.member_id = to;
            view.term = view.term.saturating_add(1);
            if view.lost.is_some_and(|(id, _)| id != to) {
                view.lost = None;
            }
            true
        })
    }

    /// A leader move away from `member_id` failed, or its caller dropped it: end the outage
    /// that began when it started, so that waiting calls go now, and name the member the
    /// leader again unless something newer was learnt meanwhile (the view names nobody).
    ///
    /// Why name it: with nobody named, a leader-bound call goes to any member, and a
    /// follower forwards it to the member, which drops forwarded proposals silently while a
    /// move (whose request may have reached it before the caller dropped the drain) hands
    /// over: the call waited out its deadline (`tests/drain.rs`, once in CI on 3.5.35). Sent
    /// to the member itself, it is answered: `raft proposal dropped` (resent) during the
    /// hand-over, forwarded to the new leader after it. Probes and "not leader" answers
    /// correct the view the usual way.
    pub(crate) fn end_outage_of(&self, member_id: u64) {
        self.view.send_if_modified(|view| match view.lost {
            Some((id, _)) if id == member_id => {
                view.lost = None;
                if view.member_id == 0 {
                    view.member_id = member_id;
                }
                true
            }
            _ => false,
        });
    }

    /// End the outage that began at `since` with losing `member_id` (evidence says the
    /// cluster is served again); a newer outage is left alone.
    pub(crate) fn end_outage(&self, member_id: u64, since: Instant) {
        self.view.send_if_modified(|view| match view.lost {
            Some((id, at)) if id == member_id && at == since => {
                view.lost = None;
                true
            }
            _ => false,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn an_appointment_at_the_last_term_does_not_panic() {
        let cell = LeaderCell::default();
        cell.observe(1, u64::MAX);
        assert!(cell.appoint(1, 2));
        assert_eq!(cell.get().term, u64::MAX);
        assert_eq!(cell.get().member_id, 2);
    }

    #[test]
    fn newer_terms_win_and_a_known_leader_beats_none() {
        let cell = LeaderCell::default();
        assert_eq!(cell.observe(1, 5), Some(0));
        assert_eq!(cell.observe(0, 4), None, "an older term changes nothing");
        assert_eq!(cell.get().member_id, 1);
        assert_eq!(
            cell.observe(0, 5),
            None,
            "a member that has not heard of 1 yet"
        );
        assert_eq!(cell.get().member_id, 1);
        assert_eq!(cell.observe(2, 6), Some(1));
        assert_eq!(
            cell.get(),
            LeaderView {
                member_id: 2,
                term: 6,
                lost: None
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn forgetting_starts_an_outage_that_another_leader_ends() {
        let cell = LeaderCell::default();
        cell.observe(1, 5);
        let mut seen = cell.subscribe();
        seen.borrow_and_update();
        let t0 = Instant::now();
        cell.forget(2, t0);
        assert!(
            !seen.has_changed().unwrap(),
            "only the leader can be forgotten"
        );
        cell.forget(1, t0);
        assert!(seen.has_changed().unwrap(), "waiters hear of the outage");
        assert_eq!(cell.get().lost, Some((1, t0)));
        // The same leader in the same term does not end it; a new one does.
        cell.observe(1, 5);
        assert_eq!(cell.get().lost, Some((1, t0)));
        cell.observe(3, 6);
        assert_eq!(cell.get().lost, None);
    }

    #[tokio::test(start_paused = true)]
    async fn ending_an_outage_leaves_a_newer_one() {
        let cell = LeaderCell::default();
        cell.observe(1, 5);
        let t0 = Instant::now();
        cell.forget(1, t0);
        cell.observe(1, 6);
        tokio::time::advance(Duration::from_millis(10)).await;
        let t1 = Instant::now();
        cell.forget(1, t1);
        assert_eq!(
            cell.get().lost,
            Some((1, t0)),
            "the first loss is still the outage"
        );
        cell.end_outage(1, t1);
        assert_eq!(cell.get().lost, Some((1, t0)));
        cell.end_outage(1, t0);
        assert_eq!(cell.get().lost, None);
    }

    /// A drained leader hands over to 2 (MoveLeader answered): the waiters hear of it at once,
    /// a late answer from the old leader's term cannot bring it back, the real term of the new
    /// leader is taken over silently, and a newer term naming someone else still wins.
    #[tokio::test(start_paused = true)]
    async fn a_moveleader_answer_appoints_the_target_at_once() {
        let cell = LeaderCell::default();
        cell.observe(1, 5);
        let t0 = Instant::now();
        cell.forget(1, t0);
        let mut seen = cell.subscribe();
        seen.borrow_and_update();
        // A probe that started before the transfer still names 1 in term 5.
        cell.observe(1, 5);
        tokio::time::advance(Duration::from_millis(30)).await;
        assert!(cell.appoint(1, 2));
        assert!(seen.has_changed().unwrap(), "waiters wake at the answer");
        assert_eq!(
            cell.get(),
            LeaderView {
                member_id: 2,
                term: 6,
                lost: None
            }
        );
        assert_eq!(cell.observe(1, 5), None, "a late answer of the old term");
        assert_eq!(
            cell.observe(0, 6),
            None,
            "a member that has not heard of 2 yet"
        );
        assert_eq!(cell.get().member_id, 2);
        assert_eq!(cell.observe(2, 7), None, "2's real term: no leader change");
        assert_eq!(cell.get().term, 7);
        assert_eq!(cell.observe(3, 8), Some(2), "a newer election still wins");
    }

    #[test]
    fn an_appointment_never_overrides_what_was_learnt_meanwhile() {
        let cell = LeaderCell::default();
        cell.observe(1, 5);
        cell.forget(1, Instant::now());
        // The target itself already said it leads, in its real term.
        cell.observe(2, 6);
        assert!(!cell.appoint(1, 2));
        assert_eq!(cell.get().term, 6, "no term is made up over a real one");
        // Another member leads in a newer term: the stale appointment changes nothing.
        cell.observe(3, 7);
        assert!(!cell.appoint(1, 2));
        assert_eq!(cell.get().member_id, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn an_appointed_leader_that_refuses_is_forgotten() {
        let cell = LeaderCell::default();
        cell.observe(1, 5);
        cell.forget(1, Instant::now());
        cell.appoint(1, 2);
        // 2 answers "not leader": the usual path forgets it and starts an outage.
        let t1 = Instant::now();
        cell.forget(2, t1);
        assert_eq!(cell.get().member_id, 0);
        assert_eq!(cell.get().lost, Some((2, t1)));
        cell.observe(3, 7);
        assert_eq!(cell.get().lost, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_move_ends_its_outage_only() {
        let cell = LeaderCell::default();
        cell.observe(1, 5);
        let t0 = Instant::now();
        cell.forget(1, t0);
        cell.end_outage_of(2);
        assert_eq!(cell.get().lost, Some((1, t0)), "another member's outage");
        cell.end_outage_of(1);
        assert_eq!(cell.get().lost, None);
        assert_eq!(
            cell.get().member_id,
            1,
            "named the leader again: nothing newer known"
        );
        // Something newer learnt during the move stays.
        let t1 = Instant::now();
        cell.forget(1, t1);
        cell.observe(3, 6);
        cell.end_outage_of(1);
        assert_eq!(cell.get().member_id, 3);
    }

    /// Defect 1 of issue 8: forgetting the leader and checking the outage from many threads at
    /// once must never deadlock (the old code took `leader` then `lost` in one and `lost` then
    /// `leader` in the other). Every operation goes through one lock now; this runs them
    /// against each other and fails by timeout if any thread hangs.
    #[test]
    fn concurrent_forget_observe_and_outage_checks_never_deadlock() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let cell = Arc::new(LeaderCell::default());
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        for t in 0..8u64 {
            let cell = cell.clone();
            let done = done_tx.clone();
            let handle = rt.handle().clone();
            std::thread::spawn(move || {
                let _guard = handle.enter();
                for i in 0..20_000u64 {
                    let term = i / 4 + 1;
                    match (i + t) % 4 {
                        0 => drop(cell.observe(1 + t % 3, term)),
                        1 => cell.forget(1 + t % 3, Instant::now()),
                        2 => {
                            if let Some((id, since)) = cell.get().lost {
                                cell.end_outage(id, since);
                            }
                        }
                        _ => drop(cell.get()),
                    }
                }
                done.send(()).unwrap();
            });
        }
        for _ in 0..8 {
            done_rx
                .recv_timeout(Duration::from_secs(30))
                .expect("a thread hung: lock-order deadlock in the leader view");
        }
    }
}
