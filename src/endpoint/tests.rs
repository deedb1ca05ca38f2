//! Tests of one endpoint's state: what requests and probes teach it.

use super::*;

fn endpoint(changes: HealthChanges) -> Arc<Endpoint> {
    let channel = Channel::from_static("http://127.0.0.1:9").connect_lazy();
    Endpoint::new(
        "http://127.0.0.1:9".into(),
        channel,
        None,
        HealthConfig::default(),
        CancellationToken::new(),
        changes,
    )
}

#[tokio::test(start_paused = true)]
async fn a_new_suspicion_wakes_the_streams_on_the_member_and_health_followers_do_not_hear() {
    let (changes, _) = tokio::sync::watch::channel(());
    let mut health = changes.subscribe();
    let ep = endpoint(changes);
    let mut news = ep.suspected_news();
    assert!(ep.suspect());
    assert!(news.has_changed().unwrap());
    news.borrow_and_update();
    // Already suspected: no news.
    assert!(!ep.suspect());
    assert!(!news.has_changed().unwrap());
    // A suspicion is no health transition.
    assert!(!health.has_changed().unwrap());
    health.borrow_and_update();
}

#[tokio::test(start_paused = true)]
async fn health_transitions_wake_subscribers_and_nothing_else_does() {
    let (changes, _) = tokio::sync::watch::channel(());
    let mut seen = changes.subscribe();
    let ep = endpoint(changes);
    // Successes on a healthy endpoint change nothing.
    ep.on_success(Duration::from_millis(1), None, Instant::now());
    assert!(!seen.has_changed().unwrap());
    // A failure ejects it: subscribers hear of it at once.
    ep.on_failure(Failure::Unreachable, &"connection refused");
    assert_eq!(ep.state(), HealthState::Ejected);
    assert!(seen.has_changed().unwrap());
    seen.borrow_and_update();
    // Another failure while ejected is no transition.
    ep.on_failure(Failure::Unreachable, &"connection refused");
    assert!(!seen.has_changed().unwrap());
}

#[tokio::test(start_paused = true)]
async fn leader_bound_attempts_are_counted_apart_until_they_end() {
    let (changes, _) = tokio::sync::watch::channel(());
    let ep = endpoint(changes);
    let read = InFlight::start(&ep, false);
    let put = InFlight::start(&ep, true);
    let second = InFlight::start(&ep, true);
    assert_eq!((ep.in_flight(), ep.leader_bound_in_flight()), (3, 2));
    drop(put);
    assert_eq!((ep.in_flight(), ep.leader_bound_in_flight()), (2, 1));
    drop(read);
    assert_eq!((ep.in_flight(), ep.leader_bound_in_flight()), (1, 1));
    drop(second);
    assert_eq!((ep.in_flight(), ep.leader_bound_in_flight()), (0, 0));
}
