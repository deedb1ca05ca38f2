//! Planned maintenance with the drain API against a real 3-member cluster, under an
//! application's whole traffic (writers with a 1 s deadline, linearizable and serializable
//! readers, a managed watch, a kept lease, a leadership holder): draining the leader moves
//! leadership and every stream away before the member is stopped, and a rolling restart of every
//! member (drain, SIGTERM, start, undrain) reaches no caller and loses or repeats nothing.

mod support;

use std::time::Duration;

use etcd_ha::Client;
use etcd_ha::testkit::Cluster;
use support::traffic::{Seen, Traffic};
use tokio::time::Instant;

/// Held by each test for its whole run, whatever `--test-threads`: draining measures write
/// stalls of tens of milliseconds, which a second cluster under load on the same two cores
/// would blur.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The longest time writes may stand still once `drain` is called, leadership moving off the
/// member included (issue 11's target).
const DRAIN_GAP: Duration = Duration::from_millis(50);

/// What the client may add to etcd's own leader transfer when that alone takes longer than
/// [`DRAIN_GAP`] allows (seen on a loaded 2-core box: 60 ms and more; no member accepts a write
/// while it lasts): noticing the new leader (a Status every 5 ms) and one write to it.
const CLIENT_SHARE: Duration = Duration::from_millis(25);

/// One step of a rolling restart, as the writers' gaps are judged.
struct Step {
    member: usize,
    /// The member led when its step began.
    led: bool,
    /// From `drain` called until it returned (for a leader: until the target said it leads).
    drain: (Instant, Instant),
    /// From `drain` called until a while after `undrain`.
    whole: (Instant, Instant),
}

/// Drain member `i`, check nothing of the client is on it, stop it with SIGTERM, start it
/// again, wait until it is healthy, undrain it.
async fn cycle(cluster: &mut Cluster, client: &Client, i: usize) -> Step {
    let url = cluster.endpoint(i);
    let led = cluster.leader(support::READY).await.unwrap() == i;
    let started = Instant::now();
    client.drain(&url).await.expect("drain");
    let drained = Instant::now();
    let info = client
        .endpoints()
        .into_iter()
        .find(|e| e.url == url)
        .unwrap();
    assert!(
        info.draining && info.in_flight == 0 && !info.is_leader,
        "{info:?}"
    );
    assert_ne!(client.keeper().stream_endpoint(), Some(url.clone()));
    assert_ne!(client.watch().stream_endpoint(), Some(url.clone()));
    cluster.terminate(i).await;
    let stopped = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.restart(i).await.expect("restart");
    let back = started.elapsed();
    support::all_healthy(client).await;
    client.undrain(&url).unwrap();
    println!(
        "MEASURE member {i} (leader: {led}): drained in {:?}, stopped at {stopped:?}, \
         started at {back:?}, undrained at {:?}",
        drained - started,
        started.elapsed()
    );
    // The undrained member takes calls again: part of the step.
    tokio::time::sleep(Duration::from_millis(200)).await;
    Step {
        member: i,
        led,
        drain: (started, drained),
        whole: (started, Instant::now()),
    }
}

/// The longest gap any writer saw that overlaps `window`, and how far into it it began.
fn longest_gap(seen: &[Seen], (from, to): (Instant, Instant)) -> (Duration, Duration) {
    let (gap, at) = seen
        .iter()
        .map(|s| s.longest_gap_in(from, to))
        .max()
        .unwrap();
    (gap, at.saturating_duration_since(from))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_with_drain_reaches_no_caller() {
    let _serial = SERIAL.lock().await;
    let mut cluster = support::cluster3_in_memory().await;
    let client = support::client(&cluster).await;
    support::all_healthy(&client).await;
    let traffic = Traffic::start(&client, "drain", 4).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The leader first (leadership moves before the stop), then every other member.
    let leader = cluster.leader(support::READY).await.unwrap();
    let mut order = vec![leader];
    order.extend((0..cluster.len()).filter(|&i| i != leader));
    let mut steps = Vec::new();
    for i in order {
        steps.push(cycle(&mut cluster, &client, i).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let report = traffic.finish().await;
    report.print("drained rolling restart");
    let seen = &report.writers;
    for step in &steps {
        let (i, led) = (step.member, step.led);
        let (from, to) = step.drain;
        let stall = seen
            .iter()
            .map(|s| s.longest_stall_in(from, to))
            .max()
            .unwrap();
        let (step_gap, step_at) = longest_gap(seen, step.whole);
        println!(
            "MEASURE step of member {i} (leader: {led}): writes stood still {stall:?} at most \
             once drained (drain took {:?}); longest gap in the whole step {step_gap:?} \
             ({step_at:?} in)",
            to - from
        );
        let allowed = DRAIN_GAP.max(to - from + CLIENT_SHARE);
        assert!(
            stall <= allowed,
            "member {i} (leader: {led}): writes stood still {stall:?} once drained"
        );
    }
    report.assert_clean();
}

/// Issue 18: a drain that does not finish leaves nothing drained. Dropped by its caller
/// (here at its first wait, while leadership moves off the member) or failed (a lone member
/// has no one to hand leadership to), the member takes calls again, as after `undrain`, and
/// writes go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_dropped_or_failed_leaves_the_member_undrained() {
    let _serial = SERIAL.lock().await;
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    support::all_healthy(&client).await;
    let draining = |client: &Client, url: &str| {
        client
            .endpoints()
            .into_iter()
            .find(|e| e.url == url)
            .unwrap()
            .draining
    };
    let leader = cluster.endpoint(cluster.leader(support::READY).await.unwrap());
    let dropped = tokio::time::timeout(Duration::ZERO, client.drain(&leader)).await;
    assert!(dropped.is_err(), "dropped before it returned");
    assert!(!draining(&client, &leader), "undrained when dropped");
    let put = tokio::time::timeout(
        Duration::from_secs(3),
        client
            .kv()
            .put("after-drop", "v", etcd_ha::PutOptions::new()),
    )
    .await;
    assert!(matches!(put, Ok(Ok(_))), "writes go on: {put:?}");

    let lone = support::cluster1().await;
    let alone = support::client(&lone).await;
    let only = lone.endpoint(0);
    let failed = alone.drain(&only).await;
    assert!(failed.is_err(), "nobody to hand leadership to: {failed:?}");
    assert!(!draining(&alone, &only), "undrained when it failed");
    alone
        .kv()
        .put("after-failure", "v", etcd_ha::PutOptions::new())
        .await
        .unwrap();
}
