//! Tests of the lag rule alone: paused time, no IO.

use super::*;
use crate::endpoint::{STALL_FACTOR, STALL_FLOOR};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const FAST: Option<Duration> = Some(Duration::from_millis(1));

#[tokio::test(start_paused = true)]
async fn a_stream_that_shows_the_write_needs_no_ask() {
    let mut lag = Lag::new();
    lag.answered(10, Instant::now());
    assert_eq!(lag.poll(10, FAST, Instant::now()), Verdict::Nothing);
    assert_eq!(lag.next_wake(), None);
    // A write elsewhere: a check starts; the write's own event ends it.
    assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Nothing);
    assert_eq!(lag.next_wake(), Some(Instant::now() + ASK_AFTER));
    tokio::time::advance(ms(2)).await;
    lag.answered(11, Instant::now());
    assert_eq!(lag.next_wake(), None);
    assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Nothing);
}

#[tokio::test(start_paused = true)]
async fn a_quiet_stream_behind_is_asked_and_a_live_member_answers() {
    let mut lag = Lag::new();
    lag.answered(10, Instant::now());
    assert_eq!(lag.poll(12, FAST, Instant::now()), Verdict::Nothing);
    tokio::time::advance(ASK_AFTER).await;
    assert_eq!(lag.poll(12, FAST, Instant::now()), Verdict::Ask);
    assert_eq!(lag.poll(12, FAST, Instant::now()), Verdict::Nothing);
    tokio::time::advance(ms(1)).await;
    lag.answered(12, Instant::now());
    assert_eq!(lag.poll(12, FAST, Instant::now()), Verdict::Nothing);
    assert_eq!(lag.next_wake(), None);
}

#[tokio::test(start_paused = true)]
async fn a_frozen_member_is_stalled_at_the_floor_after_the_ask() {
    let mut lag = Lag::new();
    lag.answered(10, Instant::now());
    let write = Instant::now();
    lag.poll(11, FAST, write);
    tokio::time::advance(ASK_AFTER).await;
    assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Ask);
    // 8 x 1 ms is under the floor.
    tokio::time::advance(STALL_FLOOR - ms(1)).await;
    assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Nothing);
    tokio::time::advance(ms(1)).await;
    assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Stalled);
    assert_eq!(Instant::now() - write, ASK_AFTER + STALL_FLOOR);
}

/// The client has seen `seen`; the member answers each ask 1 ms later with `revision`, until
/// the stream is stalled (the test fails if it never is). How many asks it took.
async fn answered_at_once_until_stalled(lag: &mut Lag, seen: i64, revision: i64) -> u32 {
    let mut asks = 0;
    loop {
        match lag.poll(seen, FAST, Instant::now()) {
            Verdict::Stalled => return asks,
            Verdict::Ask => {
                asks += 1;
                tokio::time::advance(ms(1)).await;
                lag.answered(revision, Instant::now());
            }
            _ => {}
        }
        let wake = lag.next_wake().expect("a check under way wakes again");
        tokio::time::sleep_until(wake).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_partitioned_member_answers_but_never_catches_up() {
    let mut lag = Lag::new();
    lag.answered(10, Instant::now());
    let write = Instant::now();
    lag.poll(11, FAST, write);
    // It answers every ask at once, with its old revision.
    let asks = answered_at_once_until_stalled(&mut lag, 11, 10).await;
    assert!(asks >= 2, "asked again while behind: {asks}");
    assert_eq!(Instant::now() - write, ASK_AFTER + STALL_FLOOR);
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_keeps_showing_newer_revisions_is_slow_not_stuck() {
    let mut lag = Lag::new();
    lag.answered(10, Instant::now());
    let write = Instant::now();
    lag.poll(100, FAST, write);
    let mut shown = 10;
    let verdict = loop {
        let v = lag.poll(100, FAST, Instant::now());
        if v == Verdict::Stalled {
            break v;
        }
        // Every 50 ms the stream shows a little more, never the revision owed.
        tokio::time::advance(ms(50)).await;
        shown += 1;
        lag.answered(shown, Instant::now());
    };
    assert_eq!(verdict, Verdict::Stalled);
    let took = Instant::now() - write;
    // Its answers, 50 ms after each ask, set its own limit (8 x 50 ms).
    let limit = lag.stall_limit(FAST);
    assert_eq!(limit, ms(400));
    assert!(
        took >= CATCH_UP_LIMIT && took <= CATCH_UP_LIMIT + limit,
        "stalled only once it trailed for the catch-up limit: {took:?}"
    );
    // Caught up within the limit: the check ends, nothing is stalled.
    let mut lag = Lag::new();
    lag.answered(10, Instant::now());
    lag.poll(12, FAST, Instant::now());
    for shown in [10, 11, 11, 12] {
        tokio::time::advance(ms(60)).await;
        assert_ne!(lag.poll(12, FAST, Instant::now()), Verdict::Stalled);
        lag.answered(shown, Instant::now());
    }
    assert_eq!(lag.next_wake(), None);
}

#[tokio::test(start_paused = true)]
async fn a_member_that_applies_its_backlog_and_stops_is_stalled_one_limit_later() {
    let mut lag = Lag::new();
    lag.answered(10, Instant::now());
    let write = Instant::now();
    lag.poll(20, FAST, write);
    tokio::time::advance(ASK_AFTER).await;
    assert_eq!(lag.poll(20, FAST, Instant::now()), Verdict::Ask);
    // Cut off from its peers, it applies what it had (11, 12) and stands still.
    lag.answered(11, Instant::now());
    tokio::time::advance(ms(10)).await;
    lag.answered(12, Instant::now());
    answered_at_once_until_stalled(&mut lag, 20, 12).await;
    assert_eq!(Instant::now() - write, ASK_AFTER + STALL_FLOOR * 2);
}

#[tokio::test(start_paused = true)]
async fn a_follower_a_little_behind_catches_up_in_time() {
    let mut lag = Lag::new();
    lag.answered(10, Instant::now());
    lag.poll(12, FAST, Instant::now());
    tokio::time::advance(ASK_AFTER).await;
    assert_eq!(lag.poll(12, FAST, Instant::now()), Verdict::Ask);
    lag.answered(11, Instant::now());
    tokio::time::advance(ASK_AFTER).await;
    assert_eq!(lag.poll(12, FAST, Instant::now()), Verdict::Ask);
    lag.answered(12, Instant::now());
    assert_eq!(lag.next_wake(), None);
}

#[tokio::test(start_paused = true)]
async fn a_doubt_is_cleared_by_any_later_answer_or_stalls() {
    let mut lag = Lag::new();
    lag.answered(10, Instant::now());
    lag.doubt(Instant::now());
    assert_eq!(lag.poll(10, FAST, Instant::now()), Verdict::Ask);
    tokio::time::advance(ms(3)).await;
    lag.answered(10, Instant::now());
    assert_eq!(lag.next_wake(), None);
    // Unanswered: stalled after the limit.
    lag.doubt(Instant::now());
    assert_eq!(lag.poll(10, FAST, Instant::now()), Verdict::Ask);
    tokio::time::advance(STALL_FLOOR).await;
    assert_eq!(lag.poll(10, FAST, Instant::now()), Verdict::Stalled);
}

/// Asks answered after `rtt` each, `n` times.
async fn asked_and_answered(lag: &mut Lag, rtt: Duration, n: u32) {
    for _ in 0..n {
        lag.doubt(Instant::now());
        assert_eq!(lag.poll(0, FAST, Instant::now()), Verdict::Ask);
        tokio::time::advance(rtt).await;
        lag.answered(lag.shown(), Instant::now());
    }
}

#[tokio::test(start_paused = true)]
async fn a_busy_member_that_answers_a_status_with_the_revision_stays() {
    let mut lag = Lag::new();
    lag.answered(10, Instant::now());
    lag.poll(11, FAST, Instant::now());
    tokio::time::advance(ASK_AFTER).await;
    assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Ask);
    let sent = Instant::now();
    // A partitioned member's old revision vouches for nothing...
    lag.member_status(10, sent);
    // ...a current one does.
    lag.member_status(11, sent);
    tokio::time::advance(STALL_FLOOR).await;
    assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Vouched);
    // The next check starts afresh (and must be vouched for again).
    tokio::time::advance(ms(1)).await;
    assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Nothing);
    tokio::time::advance(ASK_AFTER).await;
    assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Ask);
    lag.member_status(10, Instant::now());
    tokio::time::advance(STALL_FLOOR).await;
    assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Stalled);
}

#[tokio::test(start_paused = true)]
async fn a_status_sent_before_the_check_vouches_for_nothing() {
    let mut lag = Lag::new();
    lag.answered(10, Instant::now());
    let early = Instant::now();
    tokio::time::advance(ms(1)).await;
    lag.doubt(Instant::now());
    assert_eq!(lag.poll(10, FAST, Instant::now()), Verdict::Ask);
    lag.member_status(10, early);
    tokio::time::advance(STALL_FLOOR).await;
    assert_eq!(lag.poll(10, FAST, Instant::now()), Verdict::Stalled);
}

#[tokio::test(start_paused = true)]
async fn the_stall_limit_follows_the_pace_within_its_bounds() {
    let mut lag = Lag::new();
    assert_eq!(lag.stall_limit(None), STALL_CAP);
    assert_eq!(lag.stall_limit(FAST), STALL_FLOOR);
    assert_eq!(lag.stall_limit(Some(ms(50))), ms(400));
    assert_eq!(lag.stall_limit(Some(ms(500))), STALL_CAP);
    // Too few answers of its own: the hint still decides.
    asked_and_answered(&mut lag, ms(1), OWN_SAMPLES - 1).await;
    assert_eq!(lag.stall_limit(Some(ms(50))), ms(400));
    // Enough: the stream's own (fast) progress answers decide, not a slow probe's pace.
    asked_and_answered(&mut lag, ms(1), 1).await;
    assert_eq!(lag.stall_limit(Some(ms(50))), STALL_FLOOR);
    // The slowest of its recent answers sets it.
    asked_and_answered(&mut lag, ms(30), 1).await;
    assert_eq!(lag.stall_limit(None), ms(240));
    // ...until RTT_SAMPLES newer ones push it out.
    asked_and_answered(&mut lag, ms(1), RTT_SAMPLES as u32).await;
    assert_eq!(lag.stall_limit(None), STALL_FLOOR);
}

#[tokio::test(start_paused = true)]
async fn a_loaded_member_gets_its_own_longer_limit() {
    let mut lag = Lag::new();
    lag.answered(10, Instant::now());
    lag.poll(11, Some(ms(60)), Instant::now());
    tokio::time::advance(ASK_AFTER).await;
    assert_eq!(lag.poll(11, Some(ms(60)), Instant::now()), Verdict::Ask);
    tokio::time::advance(ms(300)).await;
    assert_eq!(lag.poll(11, Some(ms(60)), Instant::now()), Verdict::Nothing);
    // Answered at its (slow) pace: no move, and once the stream has enough answers of its
    // own, that slow one lengthens its limit.
    lag.answered(11, Instant::now());
    asked_and_answered(&mut lag, ms(1), OWN_SAMPLES - 1).await;
    assert_eq!(lag.stall_limit(FAST), STALL_CAP.min(ms(300) * STALL_FACTOR));
}
