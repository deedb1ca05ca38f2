//! Tests of the keeper's bookkeeping at scale and when renewals fall behind: every lease
//! renewed once among a hundred thousand, and leases at risk before their local expiry
//! (paused time, no stream). The helpers are `state_tests.rs`'s.

use super::tests::{TTL, granted, table};
use super::*;

/// Many leases through a whole renewal: each step costs O(log n) per lease, so this finishes
/// quickly (no time is asserted: only that it does, and that every lease is renewed).
#[tokio::test(start_paused = true)]
async fn a_hundred_thousand_leases_are_renewed_once_each() {
    const N: i64 = 100_000;
    let mut t = table();
    let mut views = Vec::new();
    for id in 0..N {
        views.push(granted(&mut t, id));
    }
    tokio::time::advance(TTL / 3).await;
    let now = Instant::now();
    let mut sent = 0;
    // At a stream's pace: 64 per turn.
    loop {
        let due = t.due_at_most(now, 64);
        if due.is_empty() {
            break;
        }
        for id in due {
            t.sent(id, now);
            sent += 1;
        }
    }
    assert_eq!(sent, N);
    tokio::time::advance(Duration::from_millis(10)).await;
    for id in 0..N {
        assert!(matches!(t.answered(id, 6), Answer::Renewed(_)), "{id}");
    }
    assert!(t.expire(Instant::now()).is_empty());
    assert!(views.iter().all(|rx| rx.borrow().renewals == 1));
    assert_eq!(t.next_deadline(true), Some(now + TTL / 3));
    assert_eq!(t.owed_for(Instant::now()), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_lease_renewed_in_time_never_falls_at_risk() {
    let mut t = table();
    let rx = granted(&mut t, 1);
    for _ in 0..10 {
        let due_in = t.next_deadline(true).unwrap() - Instant::now();
        tokio::time::advance(due_in).await;
        assert!(t.fall_at_risk(Instant::now()).is_empty());
        assert_eq!(t.due(Instant::now()), [1]);
        t.sent(1, Instant::now());
        // A slow answer, but well inside a renewal period.
        tokio::time::advance(Duration::from_millis(900)).await;
        assert!(matches!(t.answered(1, 6), Answer::Renewed(_)));
        assert!(t.fall_at_risk(Instant::now()).is_empty());
        assert!(!rx.borrow().is_at_risk(Instant::now()));
    }
    assert_eq!(t.at_risk(), 0);
    assert_eq!(rx.borrow().renewals, 10);
}

#[tokio::test(start_paused = true)]
async fn an_unanswered_lease_falls_at_risk_once_a_third_of_its_ttl_before_expiry() {
    let mut t = table();
    let rx = granted(&mut t, 1);
    let expires = rx.borrow().expires_at;
    assert_eq!(t.next_risk(), Some(expires - TTL / 3));
    tokio::time::advance(TTL / 3).await;
    t.sent(1, Instant::now());
    // The renewal is never answered.
    tokio::time::advance(TTL / 3 - Duration::from_millis(1)).await;
    assert!(t.fall_at_risk(Instant::now()).is_empty());
    assert!(!rx.borrow().is_at_risk(Instant::now()));
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(Instant::now(), expires - TTL / 3);
    assert_eq!(t.fall_at_risk(Instant::now()), [1]);
    assert!(rx.borrow().is_at_risk(Instant::now()));
    assert_eq!(t.at_risk(), 1);
    // Reported once; nothing else is watched.
    tokio::time::advance(Duration::from_millis(500)).await;
    assert!(t.fall_at_risk(Instant::now()).is_empty());
    assert_eq!(t.next_risk(), None);
    // The renewal gets through after all: back in time, watched again from the new expiry.
    let sent = Instant::now();
    t.stream_lost(sent);
    assert_eq!(
        t.at_risk(),
        1,
        "a new stream does not end the risk; an answer does"
    );
    assert_eq!(t.due(sent), [1]);
    t.sent(1, sent);
    assert_eq!(t.answered(1, 6), Answer::Recovered(sent + TTL));
    assert_eq!(t.at_risk(), 0);
    assert!(!rx.borrow().is_at_risk(Instant::now()));
    assert_eq!(t.next_risk(), Some(sent + TTL - TTL / 3));
}

#[tokio::test(start_paused = true)]
async fn an_at_risk_lease_lost_or_forgotten_is_no_longer_counted() {
    let mut t = table();
    let lost = granted(&mut t, 1);
    let (tx, _forgotten) = watch::channel(View {
        ttl: TTL,
        expires_at: Instant::now() + TTL,
        confirmed: true,
        renewals: 0,
        lost: None,
    });
    t.insert(2, 7, tx, Instant::now() + TTL / 3);
    tokio::time::advance(TTL - TTL / 3).await;
    assert_eq!(t.fall_at_risk(Instant::now()), [1, 2]);
    assert_eq!(t.at_risk(), 2);
    assert!(t.forget(2, 7));
    assert_eq!(t.at_risk(), 1);
    tokio::time::advance(TTL / 3).await;
    assert_eq!(t.expire(Instant::now()), [1]);
    assert_eq!(t.at_risk(), 0);
    // Lost is not at risk: the warning is over.
    assert!(!lost.borrow().is_at_risk(Instant::now()));
}

#[tokio::test(start_paused = true)]
async fn a_lease_kept_by_id_is_watched_only_from_its_first_answer() {
    let mut t = table();
    let now = Instant::now();
    // Kept by id: the expiry is a 5 s wait bound for a 30 s lease, not a renewal's.
    let (tx, rx) = watch::channel(View {
        ttl: Duration::from_secs(30),
        expires_at: now + Duration::from_secs(5),
        confirmed: false,
        renewals: 0,
        lost: None,
    });
    t.insert(7, 1, tx, now);
    assert_eq!(t.next_risk(), None);
    assert!(t.fall_at_risk(now).is_empty());
    assert!(!rx.borrow().is_at_risk(now));
    t.sent(7, now);
    assert_eq!(
        t.answered(7, 30),
        Answer::Renewed(now + Duration::from_secs(30))
    );
    assert_eq!(t.next_risk(), Some(now + Duration::from_secs(20)));
}
