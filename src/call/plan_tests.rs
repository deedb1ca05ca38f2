//! Tests of the call plan alone: a fake clock, no IO.

use super::*;

const ATTEMPT: Duration = Duration::from_millis(300);

fn config(rpc: Rpc) -> PlanConfig {
    PlanConfig {
        rpc,
        pinned: false,
        hedging: rpc.hedgeable(),
        prompt: !rpc.holds_open(),
        attempt_timeout: ATTEMPT,
        attempt_limit: None,
        has_token: true,
        retry: RetryPolicy {
            jitter: 0.0,
            ..RetryPolicy::default()
        },
    }
}

fn read() -> Rpc {
    Rpc::Range { serializable: true }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn failed(error: Error) -> Failed {
    Failed {
        error,
        unsent: false,
        wants_login: false,
    }
}

#[test]
fn hedge_fires_at_the_attempt_timeout_or_a_third_of_what_is_left() {
    let t0 = Instant::now();
    // A 1 s deadline: the attempt timeout (300 ms) comes first.
    let mut plan = Plan::new(config(read()), Some(t0 + ms(1000)));
    plan.launched(t0, false);
    assert_eq!(plan.next_timer(), Some((t0 + ATTEMPT, Timer::Hedge)));
    // The caller's own 200 ms deadline: hedge after a third of it, not never.
    let mut plan = Plan::new(config(read()), Some(t0 + ms(200)));
    plan.launched(t0, false);
    let (at, timer) = plan.next_timer().unwrap();
    assert_eq!(timer, Timer::Hedge);
    assert_eq!(at.duration_since(t0), ms(200) / 3);
    assert!(matches!(
        plan.fire(Timer::Hedge, at),
        Step::Hedge { early: false }
    ));
    // After the hedge, two are in flight: no third.
    plan.launched(at, false);
    assert!(matches!(plan.next_timer(), Some((_, Timer::Deadline))));
}

#[test]
fn mutations_are_never_hedged() {
    let t0 = Instant::now();
    let mut plan = Plan::new(config(Rpc::Put), Some(t0 + ms(1000)));
    plan.launched(t0, false);
    // The only timers are the late-answer mark and the deadline.
    assert_eq!(plan.next_timer(), Some((t0 + ATTEMPT, Timer::Late(0))));
    assert!(matches!(
        plan.fire(Timer::Late(0), t0 + ATTEMPT),
        Step::Blame(0)
    ));
    assert_eq!(plan.next_timer(), Some((t0 + ms(1000), Timer::Deadline)));
}

#[test]
fn a_mutation_is_never_sent_again_after_an_ambiguous_failure() {
    let t0 = Instant::now();
    for error in [Error::Timeout, Error::LeaderChanged, Error::StreamClosed] {
        let mut plan = Plan::new(config(Rpc::Put), Some(t0 + ms(1000)));
        let id = plan.launched(t0, false);
        let step = plan.failed(id, failed(error), t0 + ms(5));
        assert!(matches!(step, Step::Fail { .. }), "{step:?}");
    }
    // Refused before anything was done, or never sent: safe to send again.
    let mut plan = Plan::new(config(Rpc::Put), Some(t0 + ms(1000)));
    let id = plan.launched(t0, false);
    let step = plan.failed(id, failed(Error::NoLeader), t0 + ms(5));
    assert!(
        matches!(step, Step::Retry { after, .. } if after == ms(25)),
        "{step:?}"
    );
    let id = plan.launched(t0 + ms(30), false);
    let unsent = Failed {
        error: Error::Timeout,
        unsent: true,
        wants_login: false,
    };
    assert!(matches!(
        plan.failed(id, unsent, t0 + ms(40)),
        Step::Retry { .. }
    ));
}

#[test]
fn a_definite_answer_from_either_attempt_wins() {
    let t0 = Instant::now();
    let mut plan = Plan::new(config(read()), Some(t0 + ms(1000)));
    let first = plan.launched(t0, false);
    let hedge = plan.launched(t0 + ATTEMPT, false);
    // The hedge says "compacted": that is the answer, whatever the first would say.
    let step = plan.failed(
        hedge,
        failed(Error::Compacted {
            compact_revision: Some(7),
        }),
        t0 + ms(310),
    );
    assert!(
        matches!(
            step,
            Step::Fail {
                error: Error::Compacted { .. },
                ..
            }
        ),
        "{step:?}"
    );

    let _ = first;
    // A transient failure of one attempt waits for the other (whose success would be the
    // answer); when the other fails too, the call retries.
    let mut plan = Plan::new(config(read()), Some(t0 + ms(1000)));
    let first2 = plan.launched(t0, false);
    let hedge2 = plan.launched(t0 + ATTEMPT, false);
    assert!(matches!(
        plan.failed(first2, failed(Error::Timeout), t0 + ms(320)),
        Step::Wait
    ));
    assert!(matches!(
        plan.failed(hedge2, failed(Error::Timeout), t0 + ms(330)),
        Step::Retry { .. }
    ));
}

#[test]
fn the_token_is_renewed_once() {
    let t0 = Instant::now();
    let login = || Failed {
        error: Error::InvalidAuthToken,
        unsent: false,
        wants_login: true,
    };
    let mut plan = Plan::new(config(Rpc::Put), Some(t0 + ms(1000)));
    let id = plan.launched(t0, false);
    assert!(matches!(plan.failed(id, login(), t0 + ms(1)), Step::Renew));
    let again = plan.launched(t0 + ms(2), true);
    // A second rejection is the answer: no renewal loop.
    let step = plan.failed(again, login(), t0 + ms(3));
    assert!(
        matches!(
            step,
            Step::Fail {
                error: Error::InvalidAuthToken,
                ..
            }
        ),
        "{step:?}"
    );

    // Without credentials there is nothing to renew.
    let mut plan = Plan::new(
        PlanConfig {
            has_token: false,
            ..config(Rpc::Put)
        },
        Some(t0 + ms(1000)),
    );
    let id = plan.launched(t0, false);
    assert!(matches!(
        plan.failed(id, login(), t0 + ms(1)),
        Step::Fail { .. }
    ));
}

#[test]
fn only_attempts_that_still_owe_an_answer_are_blamed() {
    let t0 = Instant::now();
    let mut plan = Plan::new(config(read()), Some(t0 + ms(1000)));
    let first = plan.launched(t0, false);
    assert!(matches!(plan.fire(Timer::Late(first), t0 + ATTEMPT), Step::Blame(id) if id == first));
    let hedge = plan.launched(t0 + ATTEMPT, false);
    // The first answers (a transient failure) before the deadline: it owes nothing any more.
    assert!(matches!(
        plan.failed(first, failed(Error::Timeout), t0 + ms(400)),
        Step::Wait
    ));
    // At the deadline the hedge has owed its answer for 700 ms: only it is blamed.
    match plan.fire(Timer::Deadline, t0 + ms(1000)) {
        Step::Fail {
            error: Error::Timeout,
            blame,
        } => assert_eq!(blame, vec![hedge]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_attempt_younger_than_the_attempt_timeout_is_not_blamed_at_the_deadline() {
    // A caller's own short deadline (200 ms) says nothing about the member.
    let t0 = Instant::now();
    let mut plan = Plan::new(config(Rpc::Put), Some(t0 + ms(200)));
    plan.launched(t0, false);
    assert_eq!(plan.next_timer(), Some((t0 + ms(200), Timer::Deadline)));
    match plan.fire(Timer::Deadline, t0 + ms(200)) {
        Step::Fail { blame, .. } => assert!(blame.is_empty()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn calls_that_wait_by_design_blame_nobody() {
    let t0 = Instant::now();
    let mut plan = Plan::new(config(Rpc::Lock), None);
    plan.launched(t0, false);
    assert_eq!(
        plan.next_timer(),
        None,
        "no hedge, no late mark, no deadline"
    );
    let mut plan = Plan::new(config(Rpc::Lock), Some(t0 + ms(5000)));
    plan.launched(t0, false);
    match plan.fire(Timer::Deadline, t0 + ms(5000)) {
        Step::Fail { blame, .. } => assert!(blame.is_empty()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_attempt_past_its_limit_is_retried_elsewhere_when_repeatable() {
    let t0 = Instant::now();
    let mut plan = Plan::new(
        PlanConfig {
            hedging: false,
            prompt: false,
            attempt_limit: Some(ms(1000)),
            ..config(Rpc::Watch)
        },
        Some(t0 + ms(5000)),
    );
    let id = plan.launched(t0, false);
    assert_eq!(plan.next_timer(), Some((t0 + ms(1000), Timer::Limit(id))));
    assert!(matches!(
        plan.fire(Timer::Limit(id), t0 + ms(1000)),
        Step::Retry { .. }
    ));
}

#[test]
fn no_retry_that_cannot_finish_before_the_deadline() {
    let t0 = Instant::now();
    let mut plan = Plan::new(config(read()), Some(t0 + ms(100)));
    let id = plan.launched(t0, false);
    let step = plan.failed(id, failed(Error::Timeout), t0 + ms(90));
    assert!(
        matches!(
            step,
            Step::Fail {
                error: Error::Timeout,
                ..
            }
        ),
        "{step:?}"
    );
}

#[test]
fn a_hedge_with_nowhere_to_go_is_looked_at_again_later() {
    let t0 = Instant::now();
    let mut plan = Plan::new(config(read()), None);
    plan.launched(t0, false);
    assert!(matches!(
        plan.fire(Timer::Hedge, t0 + ATTEMPT),
        Step::Hedge { early: false }
    ));
    plan.no_hedge(t0 + ATTEMPT);
    assert!(matches!(
        plan.fire(Timer::Late(0), t0 + ATTEMPT),
        Step::Blame(0)
    ));
    // Looked at again soon (a member may come back any moment), not a whole cap later.
    assert_eq!(
        plan.next_timer(),
        Some((t0 + ATTEMPT + ms(25), Timer::Hedge))
    );
}

#[test]
fn a_refused_hedge_at_the_cap_waits_a_whole_cap() {
    let t0 = Instant::now();
    let mut plan = Plan::new(config(read()), None);
    plan.launched(t0, false);
    assert!(matches!(
        plan.fire(Timer::Hedge, t0 + ATTEMPT),
        Step::Hedge { early: false }
    ));
    plan.hedge_refused(t0 + ATTEMPT);
    plan.fire(Timer::Late(0), t0 + ATTEMPT);
    assert_eq!(plan.next_timer(), Some((t0 + ATTEMPT * 2, Timer::Hedge)));
}

#[test]
fn a_paced_member_is_hedged_early_and_never_after_the_cap() {
    let t0 = Instant::now();
    // The member's own pace says 5 ms: hedge then, early (before the 300 ms cap).
    let mut plan = Plan::new(config(read()), Some(t0 + ms(1000)));
    plan.launched_to(t0, false, Some(ms(5)));
    assert_eq!(plan.next_timer(), Some((t0 + ms(5), Timer::Hedge)));
    assert!(matches!(
        plan.fire(Timer::Hedge, t0 + ms(5)),
        Step::Hedge { early: true }
    ));
    // A pace slower than the cap: the cap wins, and the hedge is not early.
    let mut plan = Plan::new(config(read()), Some(t0 + ms(1000)));
    plan.launched_to(t0, false, Some(ms(900)));
    assert_eq!(plan.next_timer(), Some((t0 + ATTEMPT, Timer::Hedge)));
    assert!(matches!(
        plan.fire(Timer::Hedge, t0 + ATTEMPT),
        Step::Hedge { early: false }
    ));
}

#[test]
fn a_refused_early_hedge_waits_for_the_cap() {
    let t0 = Instant::now();
    let mut plan = Plan::new(config(read()), Some(t0 + ms(1000)));
    plan.launched_to(t0, false, Some(ms(5)));
    assert!(matches!(
        plan.fire(Timer::Hedge, t0 + ms(5)),
        Step::Hedge { early: true }
    ));
    plan.hedge_refused(t0 + ms(5));
    assert_eq!(plan.next_timer(), Some((t0 + ATTEMPT, Timer::Hedge)));
    assert!(matches!(
        plan.fire(Timer::Hedge, t0 + ATTEMPT),
        Step::Hedge { early: false }
    ));
}

#[test]
fn mutations_ignore_the_pace() {
    let t0 = Instant::now();
    let mut plan = Plan::new(config(Rpc::Put), Some(t0 + ms(1000)));
    plan.launched_to(t0, false, Some(ms(5)));
    assert_eq!(plan.next_timer(), Some((t0 + ATTEMPT, Timer::Late(0))));
}

#[test]
fn a_due_hedge_goes_with_the_budget_or_when_its_member_is_stalled() {
    let plan = Plan::new(config(read()), None);
    let asked = std::cell::Cell::new(0);
    let budget = |answer: bool| {
        let asked = &asked;
        move || {
            asked.set(asked.get() + 1);
            answer
        }
    };
    // The budget decides a speculative hedge, early or at the cap.
    assert!(plan.hedge_goes(true, Some(ms(20)), budget(true)));
    assert!(!plan.hedge_goes(true, Some(ms(20)), budget(false)));
    assert!(!plan.hedge_goes(false, None, budget(false)), "pace unknown");
    assert!(
        !plan.hedge_goes(false, Some(ms(200)), budget(false)),
        "a member this slow is slow, not stalled"
    );
    // At the cap, a member that answers in half the attempt timeout or less is stalled: the
    // hedge is recovery and goes over budget.
    assert!(plan.hedge_goes(false, Some(ms(20)), budget(false)));
    assert!(plan.hedge_goes(false, Some(ATTEMPT / 2), budget(false)));
    // The budget is asked every time, so a hedge that goes takes its share.
    assert_eq!(asked.get(), 6);
}

#[test]
fn a_retry_waits_for_the_next_leader_only_when_that_wait_is_longer_than_the_backoff() {
    let now = Instant::now();
    let after = ms(25);
    assert_eq!(retry_wait(after, None, now), RetryWait::Backoff);
    assert_eq!(
        retry_wait(after, Some(now + ms(10)), now),
        RetryWait::Backoff,
        "a leader wait shorter than the backoff would retry sooner than a failing member allows"
    );
    assert_eq!(
        retry_wait(after, Some(now + after), now),
        RetryWait::Leader(now + after)
    );
    assert_eq!(
        retry_wait(after, Some(now + ms(900)), now),
        RetryWait::Leader(now + ms(900))
    );
}

#[test]
fn nothing_is_sent_once_the_deadline_has_passed() {
    let now = Instant::now();
    let unread = || -> Instant { panic!("a deadline this far needs no clock reading") };
    let plan = Plan::new(config(read()), Some(now + ms(5)));
    assert!(!plan.expired(now, unread));
    assert!(plan.expired(now + ms(5), unread));
    assert!(!Plan::new(config(read()), None).expired(now + ms(5_000), unread));
    // Within a timer tick of the call's own reading, the clock decides: a timer would fire
    // only at the next tick, after a fast answer.
    let tiny = Plan::new(config(read()), Some(now + Duration::from_micros(1)));
    assert!(tiny.expired(now, || now + Duration::from_micros(40)));
    assert!(!tiny.expired(now, || now));
}

#[test]
fn a_member_of_unknown_pace_hedges_at_the_slowest_known_pace_of_the_others() {
    let others = || [Some(ms(20)), None, Some(ms(45))];
    // Its own pace, when known, whatever the others'.
    assert_eq!(hedge_pace(Some(ms(5)), others), Some(ms(5)));
    // Unknown: the slowest known of the others, not the cap.
    assert_eq!(hedge_pace(None, others), Some(ms(45)));
    // Nobody's known: the cap (`None`).
    assert_eq!(hedge_pace(None, || [None, None]), None);
}

#[test]
fn a_retry_avoids_every_member_tried_until_a_round_is_done_then_only_the_last() {
    let members = ["a", "b", "c"];
    let url = |s: &str| -> Arc<str> { s.into() };
    let mut tried: Tried = [url("a")].into_iter().collect();
    retry_round(&mut tried, members.into_iter(), Some(url("a")));
    assert_eq!(
        tried.as_slice(),
        [url("a")],
        "b and c are left: nothing forgotten"
    );
    tried.push(url("b"));
    tried.push(url("c"));
    retry_round(&mut tried, members.into_iter(), Some(url("c")));
    assert_eq!(
        tried.as_slice(),
        [url("c")],
        "all tried: a new round, not straight back to c"
    );
    // A member that left the cluster does not keep the round open.
    let mut tried: Tried = [url("a"), url("b"), url("gone")].into_iter().collect();
    retry_round(&mut tried, ["a", "b"].into_iter(), Some(url("b")));
    assert_eq!(tried.as_slice(), [url("b")]);
}
