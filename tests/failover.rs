//! Failover under real faults: traffic keeps flowing when the member the client uses dies,
//! freezes, or stays idle for a long time, within bounds set by the cluster's own election time.
//!
//! Each test runs a steady stream of puts (unique values), linearizable gets and serializable
//! gets through one client with a 1 s deadline per request (as the measurements do),
//! injects the fault, measures the cluster's re-election time in the same run, and asserts:
//! - serializable reads keep succeeding: no gap longer than [`SERIALIZABLE_GAP`];
//! - writes and linearizable reads succeed again within re-election + [`RECOVERY_SLACK`];
//! - no read error reaches the caller after the cluster has a leader again;
//! - every acknowledged put is in the final state and none was applied twice.

mod support;

use std::time::Duration;

use etcd_ha::{Client, HealthState, Options};
use support::workload::{Kind, Record, Workload};

/// How long serializable reads may go without a success after a single-member fault. The issue
/// asks for 1 s; the extra 500 ms absorbs scheduling noise on a loaded 2-core box.
const SERIALIZABLE_GAP: Duration = Duration::from_millis(1500);

/// Writes and linearizable reads must recover within the cluster's re-election time plus this.
const RECOVERY_SLACK: Duration = Duration::from_secs(1);

/// Traffic before the fault, for the throughput baseline.
const WARMUP: Duration = Duration::from_secs(2);

/// The per-request deadline of the workload, as in the measurements.
const REQUEST_DEADLINE: Duration = Duration::from_secs(1);

fn options() -> Options {
    Options::new().with_request_timeout(REQUEST_DEADLINE)
}

/// Run the workload, inject `fault` (which returns once the cluster has a leader again, with the
/// time that took from the fault), keep traffic running for `after`, then check and report.
async fn run_scenario<F, Fut>(
    name: &str,
    client: &Client,
    after: Duration,
    fault: F,
) -> (Record, Duration, Duration)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Duration>,
{
    let workload = Workload::start(client, &support::unique(name));
    tokio::time::sleep(WARMUP).await;
    let fault_at = workload.now();
    let reelection = fault().await;
    tokio::time::sleep(after).await;
    let end = workload.now();
    let record = workload.stop().await;
    for kind in [Kind::Put, Kind::Get, Kind::SerializableGet] {
        eprintln!(
            "{name}: re-election {reelection:?}; {}",
            record.summary(kind, (Duration::ZERO, fault_at), fault_at, end)
        );
    }
    (record, fault_at, reelection)
}

/// The bounds every single-member fault must meet.
fn assert_bounds(
    name: &str,
    record: &Record,
    fault_at: Duration,
    reelection: Duration,
    end: Duration,
) {
    let gap = record.longest_gap(Kind::SerializableGet, fault_at, end);
    // The errors too: a stall as long as the re-election with an error is the monotonic
    // guard waiting for a member at its floor (seen once in CI, 1.504 s against a 1.48 s
    // re-election: the leader may die after answering a write and before its followers learn
    // the commit, and then none of them can serve the floor until the new leader commits).
    assert!(
        gap <= SERIALIZABLE_GAP,
        "{name}: serializable reads stalled for {gap:?} (re-election {reelection:?}); errors: \
         {:?}",
        record.errors(Kind::SerializableGet)
    );
    assert!(
        record.errors(Kind::SerializableGet).is_empty(),
        "{name}: serializable read errors reached the caller: {:?}",
        record.errors(Kind::SerializableGet)
    );
    let bound = reelection + RECOVERY_SLACK;
    for kind in [Kind::Put, Kind::Get] {
        let first = record
            .first_success_after(kind, fault_at)
            .unwrap_or_else(|| panic!("{name}: no {kind:?} succeeded after the fault"));
        assert!(
            first <= bound,
            "{name}: first {kind:?} after {first:?}, bound {bound:?}"
        );
    }
    // Once the cluster has a leader again (plus the slack for the client to find it), a read
    // that failed could have been served elsewhere.
    let settled = fault_at + bound;
    let late: Vec<_> = record
        .errors(Kind::Get)
        .into_iter()
        .filter(|o| o.start >= settled)
        .collect();
    assert!(
        late.is_empty(),
        "{name}: read errors after recovery: {late:?}"
    );
}

/// Wait until the live members agree on a leader other than `old` (or any leader when `old`
/// is None); returns the time since `since`.
async fn reelected(
    cluster: &etcd_ha::testkit::Cluster,
    old: Option<usize>,
    since: tokio::time::Instant,
) -> Duration {
    loop {
        if let Ok(l) = cluster.leader(Duration::from_millis(500)).await
            && Some(l) != old
        {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "no new leader within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed() {
    let mut cluster = support::cluster3().await;
    let client = Client::connect(cluster.endpoints(), options())
        .await
        .unwrap();
    let leader = cluster.leader(support::READY).await.unwrap();
    let after = Duration::from_secs(4);
    let cluster_ref = &mut cluster;
    let (record, fault_at, reelection) =
        run_scenario("leader-kill", &client, after, || async move {
            let t = tokio::time::Instant::now();
            cluster_ref.kill(leader);
            reelected(cluster_ref, Some(leader), t).await
        })
        .await;
    let end = fault_at + reelection + after;
    assert_bounds("leader-kill", &record, fault_at, reelection, end);
    let applied_anyway = record.check_puts(&client).await;
    eprintln!(
        "leader-kill: {} put errors, {applied_anyway} of them applied",
        record.errors(Kind::Put).len()
    );
    // The killed member is ejected, the new leader is known.
    let infos = client.endpoints();
    let dead = infos
        .iter()
        .find(|e| e.url == cluster.endpoint(leader))
        .unwrap();
    assert_ne!(dead.health, HealthState::Healthy, "{infos:?}");
    assert!(
        infos.iter().any(|e| e.is_leader && e.url != dead.url),
        "{infos:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_frozen_then_thawed() {
    let cluster = support::cluster3().await;
    let client = Client::connect(cluster.endpoints(), options())
        .await
        .unwrap();
    let leader = cluster.leader(support::READY).await.unwrap();
    let freeze = Duration::from_secs(10);
    let cluster_ref = &cluster;
    let (record, fault_at, reelection) =
        run_scenario("leader-freeze", &client, Duration::ZERO, || async move {
            let t = tokio::time::Instant::now();
            cluster_ref.stop(leader);
            let r = reelected(cluster_ref, Some(leader), t).await;
            tokio::time::sleep(freeze.saturating_sub(t.elapsed())).await;
            cluster_ref.cont(leader);
            // Traffic for a while after the thaw: the old leader rejoins as a follower.
            tokio::time::sleep(Duration::from_secs(2)).await;
            r
        })
        .await;
    let end = fault_at + freeze + Duration::from_secs(2);
    assert_bounds("leader-freeze", &record, fault_at, reelection, end);
    // Throughput during the freeze stays a large share of before (a naive client drops to ~0).
    let before = record.rate(Kind::Put, Duration::ZERO, fault_at);
    let during = record.rate(
        Kind::Put,
        fault_at + reelection + RECOVERY_SLACK,
        fault_at + freeze,
    );
    assert!(
        during >= before * 0.3,
        "puts during the freeze {during:.0}/s vs {before:.0}/s before"
    );
    record.check_puts(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_killed() {
    let mut cluster = support::cluster3().await;
    let client = Client::connect(cluster.endpoints(), options())
        .await
        .unwrap();
    let leader = cluster.leader(support::READY).await.unwrap();
    let follower = (leader + 1) % 3;
    let after = Duration::from_secs(3);
    let cluster_ref = &mut cluster;
    let (record, fault_at, _) = run_scenario("follower-kill", &client, after, || async move {
        cluster_ref.kill(follower);
        Duration::ZERO
    })
    .await;
    // The leader is untouched: no re-election, so writes must not stall at all beyond the slack.
    assert_bounds(
        "follower-kill",
        &record,
        fault_at,
        Duration::ZERO,
        fault_at + after,
    );
    assert!(
        record.errors(Kind::Get).is_empty(),
        "{:?}",
        record.errors(Kind::Get)
    );
    record.check_puts(&client).await;
}

/// A user's own stream (a raw watch here; a raw keep-alive, a snapshot, an observe and a range
/// stream's chunks alike) is often the one thing on a member that sees it go: here the probes
/// come once a minute. Its failure ejects the member at once, as a failed call's does, so the
/// next stream the user opens goes to a live member instead of the dead one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_streams_failure_ejects_its_member() {
    let mut cluster = support::cluster3().await;
    let options = options().with_probe(Duration::from_secs(60), Duration::from_secs(2));
    let client = Client::connect(cluster.endpoints(), options).await.unwrap();
    let first = etcd_ha::WatchOptions::new().into_request(b"user-stream".to_vec());
    let (_watcher, mut responses) = client.watch().open(first.clone()).await.unwrap();
    let created = responses.message().await.unwrap().unwrap();
    assert!(created.created, "{created:?}");
    let serving = responses.endpoint().to_owned();
    let member = (0..cluster.len())
        .find(|&i| cluster.endpoint(i) == serving)
        .unwrap();
    let health = |client: &Client| {
        client
            .endpoints()
            .into_iter()
            .find(|e| e.url == serving)
            .unwrap()
            .health
    };
    assert_eq!(health(&client), HealthState::Healthy);

    cluster.kill(member);
    let broken = tokio::time::timeout(Duration::from_secs(5), responses.message())
        .await
        .expect("a killed member's stream fails at once");
    assert!(broken.is_err(), "{broken:?}");
    // Learned from the stream alone: no probe came since the kill.
    assert_eq!(health(&client), HealthState::Ejected);

    let (_watcher, mut again) = client.watch().open(first).await.unwrap();
    assert_ne!(again.endpoint(), serving);
    assert!(again.message().await.unwrap().unwrap().created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_client_stays_connected_for_over_a_minute() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let key = support::unique("idle");
    // A watch stream keeps HTTP/2 pings going on its connection (pings only while calls are open);
    // etcd would answer pings closer than 5 s apart with GOAWAY too_many_pings.
    let (_watcher, mut events) = client
        .watch()
        .raw(key.as_str(), etcd_ha::WatchOptions::new())
        .await
        .unwrap();
    let created = events.message().await.unwrap().unwrap();
    assert!(created.created);
    tokio::time::sleep(Duration::from_secs(65)).await;
    // The stream is still the same, alive one: it delivers a new event.
    client
        .kv()
        .put(key.as_str(), "after-idle", Default::default())
        .await
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), events.message())
        .await
        .expect("the watch is still alive after 65 s")
        .expect("no stream error (no GOAWAY)")
        .expect("stream not closed");
    assert_eq!(resp.events.len(), 1);
    for e in client.endpoints() {
        assert_eq!(e.health, HealthState::Healthy, "{e:?}");
    }
}

/// Poll `check` every 100 ms for up to `limit`.
async fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_sync_follows_added_and_removed_members_under_traffic() {
    use support::members::{ExtraMember, free_port, peer_url, settled};

    let cluster = support::cluster3().await;
    let client = Client::connect(
        cluster.endpoints(),
        options().with_member_sync(Duration::from_secs(1)),
    )
    .await
    .unwrap();
    let api = client.cluster();
    let workload = Workload::start(&client, &support::unique("member-sync"));
    tokio::time::sleep(WARMUP).await;

    // A voter joins: the client starts using it without being told.
    let peer = peer_url();
    let new_url = format!("http://127.0.0.1:{}", free_port());
    let added = settled(|| api.member_add([peer.clone()])).await.unwrap();
    let _extra = ExtraMember::start(
        "m3",
        &cluster.dir().join("m3"),
        &peer,
        &new_url,
        &added.members,
    );
    eventually(
        Duration::from_secs(20),
        "the new member is a healthy endpoint",
        || {
            client
                .endpoints()
                .iter()
                .any(|e| e.url == new_url && e.health == HealthState::Healthy)
        },
    )
    .await;

    // A follower is removed: the client stops using it (it shuts itself down once removed).
    let leader = cluster.leader(support::READY).await.unwrap();
    let victim = (leader + 1) % 3;
    let victim_id = cluster.member_id(victim).await.unwrap();
    settled(|| api.member_remove(victim_id)).await.unwrap();
    let victim_url = cluster.endpoint(victim);
    eventually(
        Duration::from_secs(20),
        "the removed member's endpoint is dropped",
        || !client.endpoint_urls().contains(&victim_url),
    )
    .await;
    assert_eq!(
        client.endpoint_urls().len(),
        3,
        "{:?}",
        client.endpoint_urls()
    );

    let record = workload.stop().await;
    assert!(
        record.errors(Kind::SerializableGet).is_empty(),
        "{:?}",
        record.errors(Kind::SerializableGet)
    );
    assert!(
        record.errors(Kind::Get).is_empty(),
        "{:?}",
        record.errors(Kind::Get)
    );
    record.check_puts(&client).await;
}

/// The client's link to the leader goes silent (a TCP proxy keeps the connections open and
/// drops every byte both ways: the half-open case). There is no election, so the bound is the
/// time any client needs to notice a silent link, one request deadline, plus the usual slack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackholed_link_to_the_leader() {
    use etcd_ha::testkit::{FaultProxy, Mode};

    let cluster = support::cluster3().await;
    let leader = cluster.leader(support::READY).await.unwrap();
    let proxy = FaultProxy::start(cluster.client_addr(leader)).unwrap();
    let endpoints: Vec<String> = support::through_proxy(&cluster, leader, &proxy);
    // Member sync would swap the proxy for the leader's advertised URL: keep the list as given.
    let client = Client::connect(&endpoints, options().without_member_sync())
        .await
        .unwrap();
    // Let the probes learn who leads, so traffic really goes through the proxy.
    eventually(
        Duration::from_secs(10),
        "the proxied leader is known",
        || {
            client
                .endpoints()
                .iter()
                .any(|e| e.is_leader && e.url == proxy.url("http"))
        },
    )
    .await;
    let blackhole = Duration::from_secs(8);
    let (record, fault_at, _) = run_scenario("blackhole", &client, Duration::ZERO, || async {
        proxy.set_mode(Mode::Blackhole);
        tokio::time::sleep(blackhole).await;
        proxy.set_mode(Mode::Pass);
        tokio::time::sleep(Duration::from_secs(2)).await;
        Duration::ZERO
    })
    .await;
    let deadline = REQUEST_DEADLINE;
    assert_bounds(
        "blackhole",
        &record,
        fault_at,
        deadline,
        fault_at + blackhole,
    );
    let before = record.rate(Kind::Put, Duration::ZERO, fault_at);
    let during = record.rate(
        Kind::Put,
        fault_at + deadline + RECOVERY_SLACK,
        fault_at + blackhole,
    );
    assert!(
        during >= before * 0.3,
        "puts during the blackhole {during:.0}/s vs {before:.0}/s before"
    );
    record.check_puts(&client).await;
}

/// The leader is cut off from its peers but not from the client (network namespaces): it
/// answers slowly or with "no leader", the others elect a new leader, the client follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_partitioned_from_its_peers() {
    support::init_tracing();
    let cluster = etcd_ha::testkit::Cluster::builder()
        .members(3)
        .isolated_network(true)
        .start()
        .await
        .expect("start a 3-member cluster in network namespaces");
    let leader = cluster.leader(support::READY).await.unwrap();
    let client = Client::connect(cluster.endpoints(), options())
        .await
        .unwrap();
    let partition = Duration::from_secs(8);
    let cluster_ref = &cluster;
    let (record, fault_at, reelection) =
        run_scenario("partition", &client, Duration::ZERO, || async move {
            let t = tokio::time::Instant::now();
            cluster_ref.partition(leader).unwrap();
            let r = reelected(cluster_ref, Some(leader), t).await;
            tokio::time::sleep(partition.saturating_sub(t.elapsed())).await;
            cluster_ref.heal(leader).unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
            r
        })
        .await;
    assert_bounds(
        "partition",
        &record,
        fault_at,
        reelection,
        fault_at + partition,
    );
    record.check_puts(&client).await;
}
