//! Tests of the keeper's bookkeeping alone (paused time, no stream).

use super::*;

pub(super) const TTL: Duration = Duration::from_secs(6);

/// A granted lease (confirmed, expiring at now + TTL) and its handle's receiver.
pub(super) fn granted(table: &mut Table, id: i64) -> watch::Receiver<View> {
    let now = Instant::now();
    let (tx, rx) = watch::channel(View {
        ttl: TTL,
        expires_at: now + TTL,
        confirmed: true,
        renewals: 0,
        lost: None,
    });
    table.insert(id, 1, tx, now + TTL / 3);
    rx
}

pub(super) fn table() -> Table {
    Table::new(Duration::from_secs(5))
}

#[tokio::test(start_paused = true)]
async fn renewal_is_due_at_a_third_of_the_ttl() {
    let mut t = table();
    let _rx = granted(&mut t, 1);
    assert!(t.due(Instant::now()).is_empty());
    let start = Instant::now();
    assert_eq!(t.next_deadline(true), Some(start + TTL / 3));
    // Without a stream only the expiry wakes the task (nothing can be sent).
    assert_eq!(t.next_deadline(false), Some(start + TTL));
    tokio::time::advance(TTL / 3).await;
    assert_eq!(t.due(Instant::now()), [1]);
    t.sent(1, Instant::now());
    // One request at a time.
    assert!(t.due(Instant::now()).is_empty());
}

#[tokio::test(start_paused = true)]
async fn renewals_due_within_the_batch_reach_go_with_the_first() {
    // TTL 6 s: renewals every 2 s, and a batch takes those due within 2 s / 64 = 31.25 ms.
    assert_eq!(
        super::super::ttl::batch_ahead(TTL),
        Duration::from_micros(31_250)
    );
    assert_eq!(
        super::super::ttl::batch_ahead(Duration::from_secs(60)),
        Duration::from_millis(50),
        "at most 50 ms ahead"
    );
    let mut t = table();
    let _first = granted(&mut t, 1);
    tokio::time::advance(Duration::from_millis(30)).await;
    let _near = granted(&mut t, 2);
    tokio::time::advance(Duration::from_millis(10)).await;
    let _far = granted(&mut t, 3);
    // The task wakes for the first; the second (due 30 ms later) goes with it, the third
    // (40 ms later, past the reach) waits for its own turn.
    let start = Instant::now() - Duration::from_millis(40);
    assert_eq!(t.next_deadline(true), Some(start + TTL / 3));
    tokio::time::advance(TTL / 3 - Duration::from_millis(40)).await;
    assert_eq!(t.due(Instant::now()), [1, 2]);
    t.sent(1, Instant::now());
    t.sent(2, Instant::now());
    assert_eq!(
        t.next_deadline(true),
        Some(start + TTL / 3 + Duration::from_millis(40))
    );
    tokio::time::advance(Duration::from_millis(40)).await;
    assert_eq!(t.due(Instant::now()), [3]);
}

#[tokio::test(start_paused = true)]
async fn expiry_counts_from_the_send_time_not_the_answer() {
    let mut t = table();
    let rx = granted(&mut t, 1);
    let sent = Instant::now();
    t.sent(1, sent);
    // A slow answer: 800 ms later.
    tokio::time::advance(Duration::from_millis(800)).await;
    assert_eq!(t.answered(1, 6), Answer::Renewed(sent + TTL));
    let v = *rx.borrow();
    assert_eq!(v.expires_at, sent + TTL);
    assert_eq!(v.renewals, 1);
    // Next renewal a third of the TTL after the send.
    assert_eq!(t.next_deadline(true), Some(sent + TTL / 3));
}

#[tokio::test(start_paused = true)]
async fn expiry_never_moves_back() {
    let mut t = table();
    let rx = granted(&mut t, 1);
    let first = rx.borrow().expires_at;
    // An answer for a request sent before the grant's send time cannot exist, but a smaller
    // TTL can (a lease granted elsewhere with a shorter TTL): the expiry keeps the max.
    t.sent(1, Instant::now());
    assert_eq!(t.answered(1, 2), Answer::Renewed(first));
    assert_eq!(rx.borrow().expires_at, first);
    assert_eq!(rx.borrow().ttl, Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn local_expiry_marks_lost_exactly_at_expires_at() {
    let mut t = table();
    let rx = granted(&mut t, 1);
    let expires = rx.borrow().expires_at;
    tokio::time::advance(TTL - Duration::from_millis(1)).await;
    assert!(t.expire(Instant::now()).is_empty());
    assert!(!rx.borrow().is_lost(Instant::now()));
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(Instant::now(), expires);
    assert_eq!(t.expire(Instant::now()), [1]);
    assert_eq!(rx.borrow().lost, Some(Lost::Expired));
    assert!(t.is_empty());
}

#[tokio::test(start_paused = true)]
async fn ttl_zero_means_gone() {
    let mut t = table();
    let rx = granted(&mut t, 1);
    t.sent(1, Instant::now());
    assert_eq!(t.answered(1, 0), Answer::Gone);
    assert_eq!(rx.borrow().lost, Some(Lost::Gone));
    assert!(t.is_empty());
    // Another -1 answer for something no longer kept is ignored.
    assert_eq!(t.answered(1, -1), Answer::Unexpected);
}

#[tokio::test(start_paused = true)]
async fn an_answer_after_the_local_expiry_does_not_revive() {
    let mut t = table();
    let rx = granted(&mut t, 1);
    tokio::time::advance(TTL / 3).await;
    t.sent(1, Instant::now());
    // A reader saw it expire...
    tokio::time::advance(TTL).await;
    assert!(rx.borrow().is_lost(Instant::now()));
    // ...so the late answer keeps it lost.
    assert_eq!(t.answered(1, 6), Answer::Late);
    assert_eq!(rx.borrow().lost, Some(Lost::Expired));
    assert!(t.is_empty());
}

#[tokio::test(start_paused = true)]
async fn unconfirmed_expiry_is_replaced_by_the_first_answer() {
    let mut t = table();
    let now = Instant::now();
    // Kept by id, with a generous wait bound.
    let (tx, rx) = watch::channel(View {
        ttl: Duration::from_secs(30),
        expires_at: now + Duration::from_secs(30),
        confirmed: false,
        renewals: 0,
        lost: None,
    });
    t.insert(7, 1, tx, now);
    assert_eq!(t.due(now), [7]);
    t.sent(7, now);
    // The server says 6 s: the expiry comes *earlier* than the wait bound.
    assert_eq!(t.answered(7, 6), Answer::Renewed(now + TTL));
    let v = *rx.borrow();
    assert!(v.confirmed);
    assert_eq!(v.expires_at, now + TTL);
}

#[tokio::test(start_paused = true)]
async fn stream_failure_makes_every_lease_due_at_once() {
    let mut t = table();
    let _a = granted(&mut t, 1);
    let _b = granted(&mut t, 2);
    t.sent(1, Instant::now());
    tokio::time::advance(Duration::from_millis(100)).await;
    t.stream_lost(Instant::now());
    let mut due = t.due(Instant::now());
    due.sort_unstable();
    assert_eq!(due, [1, 2]);
    // The lost request's answer will never come; nothing is owed without a stream.
    assert!(!t.is_silent(Instant::now() + Duration::from_secs(60)));
}

#[tokio::test(start_paused = true)]
async fn silence_is_measured_from_the_stream_opening_and_the_last_answer() {
    let mut t = table();
    let _a = granted(&mut t, 1);
    let _b = granted(&mut t, 2);
    let limit = TTL / 3;
    assert_eq!(t.silence_limit(), limit);
    // Opening took long; the silence clock starts when it opened.
    t.sent(1, Instant::now());
    tokio::time::advance(Duration::from_secs(1)).await;
    t.stream_opened(Instant::now());
    assert!(!t.is_silent(Instant::now()));
    t.sent(2, Instant::now());
    tokio::time::advance(limit - Duration::from_millis(1)).await;
    assert!(!t.is_silent(Instant::now()));
    // An answer for 1 restarts the clock for what is still owed (2).
    assert!(matches!(t.answered(1, 6), Answer::Renewed(_)));
    tokio::time::advance(limit - Duration::from_millis(1)).await;
    assert!(!t.is_silent(Instant::now()));
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(t.is_silent(Instant::now()));
    assert_eq!(t.owed_for(Instant::now()), limit);
    // Nothing owed, nothing silent.
    assert!(matches!(t.answered(2, 6), Answer::Renewed(_)));
    tokio::time::advance(Duration::from_secs(60)).await;
    assert!(!t.is_silent(Instant::now()));
}

#[tokio::test(start_paused = true)]
async fn silence_limit_is_capped() {
    let mut t = Table::new(Duration::from_secs(2));
    let (tx, _rx) = watch::channel(View {
        ttl: Duration::from_secs(60),
        expires_at: Instant::now() + Duration::from_secs(60),
        confirmed: true,
        renewals: 0,
        lost: None,
    });
    t.insert(1, 1, tx, Instant::now());
    assert_eq!(t.silence_limit(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn forget_only_drops_the_same_registration() {
    let mut t = table();
    let _old = granted(&mut t, 1);
    let (tx, _rx) = watch::channel(View {
        ttl: TTL,
        expires_at: Instant::now() + TTL,
        confirmed: true,
        renewals: 0,
        lost: None,
    });
    t.insert(1, 2, tx, Instant::now());
    assert!(!t.forget(1, 1));
    assert_eq!(t.len(), 1);
    assert!(t.forget(1, 2));
    assert!(t.is_empty());
}

#[tokio::test(start_paused = true)]
async fn most_urgent_is_closest_to_expiry() {
    let mut t = table();
    let _a = granted(&mut t, 1);
    tokio::time::advance(Duration::from_millis(10)).await;
    let _b = granted(&mut t, 2);
    assert_eq!(t.most_urgent(), Some(1));
    tokio::time::advance(Duration::from_millis(10)).await;
    t.sent(1, Instant::now());
    assert!(matches!(t.answered(1, 6), Answer::Renewed(_)));
    assert_eq!(t.most_urgent(), Some(2));
}

/// Issue 9, defect 4: a TTL near `i64::MAX` from the server panicked the keeper task in
/// `Instant` arithmetic. It is clamped to etcd's maximum; every later step works.
#[tokio::test(start_paused = true)]
async fn a_huge_server_ttl_is_clamped_to_etcds_maximum() {
    let max = Duration::from_secs(super::super::MAX_LEASE_TTL.unsigned_abs());
    for huge in [i64::MAX, i64::MAX - 1, super::super::MAX_LEASE_TTL + 1] {
        let mut t = table();
        let rx = granted(&mut t, 1);
        let sent = Instant::now();
        t.sent(1, sent);
        assert_eq!(t.answered(1, huge), Answer::Renewed(sent + max), "{huge}");
        let v = *rx.borrow();
        assert_eq!(v.ttl, max);
        assert!(!v.is_lost(Instant::now()));
        // The cadence, the silence limit and the next wake are all computable.
        assert_eq!(t.next_deadline(true), Some(sent + max / 3));
        assert_eq!(t.silence_limit(), Duration::from_secs(5));
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(t.expire(Instant::now()).is_empty());
        assert!(t.due(Instant::now()).is_empty());
        assert!(!t.is_silent(Instant::now()));
    }
}

/// A zero or negative TTL from the server means the lease is gone, however negative.
#[tokio::test(start_paused = true)]
async fn a_zero_or_negative_server_ttl_means_the_lease_is_gone() {
    for gone in [0, -1, i64::MIN] {
        let mut t = table();
        let rx = granted(&mut t, 1);
        t.sent(1, Instant::now());
        assert_eq!(t.answered(1, gone), Answer::Gone, "{gone}");
        assert_eq!(rx.borrow().lost, Some(Lost::Gone));
        assert!(t.is_empty());
        assert_eq!(t.next_deadline(true), None);
    }
}

/// A lease with a given TTL, expiry and first renewal (confirmed).
fn kept(table: &mut Table, id: i64, ttl: Duration, expires_in: Duration, renew_in: Duration) {
    let now = Instant::now();
    let (tx, _rx) = watch::channel(View {
        ttl,
        expires_at: now + expires_in,
        confirmed: true,
        renewals: 0,
        lost: None,
    });
    table.insert(id, 1, tx, now + renew_in);
}

#[tokio::test(start_paused = true)]
async fn due_leases_come_nearest_to_expiry_first_not_by_renewal_time() {
    let mut t = table();
    let s = Duration::from_secs;
    // 1 fell due first but has the most life left; 3 fell due last and has the least.
    kept(&mut t, 1, TTL, s(9), s(0));
    kept(&mut t, 2, TTL, s(5), s(1));
    kept(&mut t, 3, TTL, s(3), s(2));
    kept(&mut t, 4, TTL, s(7), s(4));
    tokio::time::advance(s(2)).await;
    assert_eq!(t.due(Instant::now()), [3, 2, 1]);
    // A stream that takes two now: the third stays due, ahead of a lease due later.
    assert_eq!(t.due_at_most(Instant::now(), 2), [3, 2]);
    t.sent(3, Instant::now());
    t.sent(2, Instant::now());
    assert_eq!(t.due_at_most(Instant::now(), 2), [1]);
    // The wake for the one still due is its (past) renewal time, as before it was found due.
    assert_eq!(t.next_deadline(true), Some(Instant::now() - s(2)));
    tokio::time::advance(s(2)).await;
    // 4 is nearer to expiry than 1: it goes first although it fell due later.
    assert_eq!(t.due(Instant::now()), [4, 1]);
}

#[tokio::test(start_paused = true)]
async fn forget_drops_a_lease_from_whichever_queue_holds_it() {
    let mut t = table();
    let s = Duration::from_secs;
    kept(&mut t, 1, TTL, s(6), s(1)); // waiting
    kept(&mut t, 2, TTL, s(6), s(0)); // found due, not sent
    kept(&mut t, 3, TTL, s(6), s(0)); // in flight
    kept(&mut t, 4, Duration::from_secs(3), s(7), s(5)); // the shortest TTL
    assert_eq!(t.due(Instant::now()), [2, 3]);
    t.sent(3, Instant::now());
    assert!(t.forget(2, 1));
    assert!(t.due(Instant::now()).is_empty());
    assert_eq!(t.next_deadline(true), Some(Instant::now() + s(1)));
    assert!(t.forget(1, 1));
    // Nothing idle is due before 4's renewal; 3's request still owed (silence: 3 s / 3).
    assert_eq!(t.next_deadline(true), Some(Instant::now() + s(1)));
    assert_eq!(t.silence_limit(), s(1));
    assert!(t.forget(4, 1));
    assert_eq!(t.silence_limit(), s(2));
    assert_eq!(t.next_deadline(true), Some(Instant::now() + s(2)));
    // The one in flight: its request is still in the server's queue, so still owed.
    assert!(t.forget(3, 1));
    assert!(t.is_empty());
    assert_eq!(t.owed_for(Instant::now() + s(60)), s(60));
    assert_eq!(t.most_urgent(), None);
    // Its answer pays it.
    assert_eq!(t.answered(3, 6), Answer::Unexpected);
    assert_eq!(t.owed_for(Instant::now() + s(60)), Duration::ZERO);
    assert_eq!(t.next_deadline(true), None);
}

#[tokio::test(start_paused = true)]
async fn an_answer_after_forget_is_unexpected_and_pays_what_was_owed() {
    let mut t = table();
    let rx = granted(&mut t, 1);
    let _b = granted(&mut t, 2);
    t.sent(1, Instant::now());
    assert!(t.forget(1, 1));
    // A stream that answers no request is stalled, whether or not their leases are kept
    // (a stall hidden this way lost 300,000 leases: their local expiries dropped the
    // requests the stalled stream owed, and with them the silence that would reopen it).
    assert_eq!(t.in_flight(), 1);
    assert!(t.is_silent(Instant::now() + Duration::from_secs(60)));
    assert_eq!(t.answered(1, 6), Answer::Unexpected);
    assert_eq!(t.in_flight(), 0);
    assert!(!t.is_silent(Instant::now() + Duration::from_secs(60)));
    assert_eq!(rx.borrow().renewals, 0);
    assert_eq!(t.len(), 1);
    // A new registration of the same id is not the one the answer was for.
    let (tx, _rx) = watch::channel(*rx.borrow());
    t.insert(1, 2, tx, Instant::now());
    assert_eq!(t.answered(1, 6), Answer::Unexpected);
    assert_eq!(t.due(Instant::now()), [1]);
}

#[tokio::test(start_paused = true)]
async fn a_lost_stream_makes_in_flight_and_waiting_leases_due_nearest_expiry_first() {
    let mut t = table();
    let s = Duration::from_secs;
    kept(&mut t, 1, TTL, s(6), s(0));
    kept(&mut t, 2, TTL, s(4), s(0));
    kept(&mut t, 3, TTL, s(5), s(3));
    assert_eq!(t.due(Instant::now()), [2, 1]);
    t.sent(2, Instant::now());
    tokio::time::advance(Duration::from_millis(500)).await;
    t.stream_lost(Instant::now());
    assert_eq!(t.owed_for(Instant::now() + s(1)), Duration::ZERO);
    assert_eq!(t.due(Instant::now()), [2, 3, 1]);
    // The new stream's first request is the most urgent; the rest follow.
    assert_eq!(t.most_urgent(), Some(2));
    t.sent(2, Instant::now());
    tokio::time::advance(s(1)).await;
    t.stream_opened(Instant::now());
    assert_eq!(t.owed_for(Instant::now()), Duration::ZERO);
    assert_eq!(t.due(Instant::now()), [3, 1]);
    // The request lost with the old stream is never answered; the new one is.
    assert!(matches!(t.answered(2, 6), Answer::Renewed(_)));
    assert_eq!(t.answered(2, 6), Answer::Unexpected);
}

#[tokio::test(start_paused = true)]
async fn a_ttl_changed_by_an_answer_moves_the_silence_limit() {
    let mut t = table();
    let s = Duration::from_secs;
    kept(&mut t, 1, s(6), s(6), s(0));
    kept(&mut t, 2, s(9), s(9), s(0));
    assert_eq!(t.silence_limit(), s(2));
    t.sent(1, Instant::now());
    // The server says 12 s: the shortest TTL is now 2's.
    assert!(matches!(t.answered(1, 12), Answer::Renewed(_)));
    assert_eq!(t.silence_limit(), s(3));
    t.sent(2, Instant::now());
    // And shorter again: 3 s.
    assert!(matches!(t.answered(2, 3), Answer::Renewed(_)));
    assert_eq!(t.silence_limit(), s(1));
    // Next renewal of 2 a third of its new TTL after the send.
    assert_eq!(t.next_deadline(true), Some(Instant::now() + s(1)));
    // A lost lease's TTL no longer counts.
    t.sent(2, Instant::now());
    assert_eq!(t.answered(2, 0), Answer::Gone);
    assert_eq!(t.silence_limit(), s(4));
}

/// A lease within the last-send margin of its expiry (a tenth of the TTL, at most 250 ms) is
/// not sent a renewal: its answer would come too late to save it, and on the server a renewal
/// of a lease already expired there holds the stream until the lease is revoked. It is not
/// waited for either (the task would spin on it): only its expiry wakes the task.
#[tokio::test(start_paused = true)]
async fn a_lease_too_close_to_expiry_is_not_sent_a_renewal() {
    let mut t = table();
    let _late = granted(&mut t, 1);
    tokio::time::advance(Duration::from_millis(500)).await;
    let _fresh = granted(&mut t, 2);
    let expires = Instant::now() - Duration::from_millis(500) + TTL;
    // The stream failed and was replaced when lease 1 had 200 ms left: everything is due now.
    tokio::time::advance(TTL - Duration::from_millis(700)).await;
    t.stream_lost(Instant::now());
    assert_eq!(
        t.most_urgent(),
        Some(2),
        "the stream opens with a lease it can save"
    );
    assert_eq!(t.due(Instant::now()), [2]);
    t.sent(2, Instant::now());
    assert_eq!(
        t.next_deadline(true),
        Some(expires),
        "lease 1: only its expiry"
    );
    tokio::time::advance(Duration::from_millis(200)).await;
    assert_eq!(t.expire(Instant::now()), [1]);
}

/// A lease whose renewal is in flight expires locally: its request is still owed, so a
/// stalled stream still falls silent and is reopened (before, the expiry cleared what was
/// owed, and a stream stalled by the server kept every later renewal waiting for good).
#[tokio::test(start_paused = true)]
async fn a_lease_expiring_in_flight_keeps_its_request_owed() {
    let mut t = table();
    let _a = granted(&mut t, 1);
    tokio::time::advance(TTL - Duration::from_secs(1)).await;
    let _b = granted(&mut t, 2);
    let sent = Instant::now();
    t.sent(1, sent);
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(t.expire(Instant::now()), [1]);
    assert_eq!(t.in_flight(), 1);
    assert_eq!(t.owed_for(Instant::now()), Instant::now() - sent);
    // The silence limit (a third of the TTL) counts from the send.
    assert!(t.is_silent(sent + TTL / 3));
}
