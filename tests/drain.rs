//! Planned maintenance with the drain API against a real 3-member cluster, under writers with
//! a 1 s deadline, a managed watch and a kept lease: draining the leader moves leadership and
//! every stream away before the member is stopped, and a rolling restart of every member (drain,
//! SIGTERM, start, undrain) reaches no caller.

mod support;

use std::time::Duration;

use etcd_ha::testkit::Cluster;
use etcd_ha::{Client, HealthState, WatchBatch, WatchOptions};
use support::writers::Writers;
use tokio::time::Instant;

/// Wait until every endpoint is healthy again and the client knows the leader.
async fn all_healthy(client: &Client) {
    let until = Instant::now() + support::READY;
    loop {
        let endpoints = client.endpoints();
        if endpoints.iter().all(|e| e.health == HealthState::Healthy)
            && endpoints.iter().any(|e| e.is_leader)
        {
            return;
        }
        assert!(Instant::now() < until, "not healthy again: {endpoints:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A managed watch on the writers' prefix: counts events, fails the test on an error.
fn watch_writers(client: &Client) -> tokio::task::JoinHandle<u64> {
    let client = client.clone();
    tokio::spawn(async move {
        let mut stream = client
            .watch()
            .watch("writer/", WatchOptions::new().with_prefix())
            .await
            .expect("managed watch");
        let mut events = 0;
        while let Some(batch) = stream.next_batch().await {
            let batch = batch.expect("the managed watch never fails through planned maintenance");
            if let WatchBatch::Events { events: e, .. } = batch {
                events += e.len() as u64;
            }
        }
        events
    })
}

/// Drain member `i`, check nothing of the client is on it, stop it with SIGTERM, start it
/// again, wait until it is healthy, undrain it.
async fn cycle(cluster: &mut Cluster, client: &Client, i: usize) {
    let url = cluster.endpoint(i);
    let started = Instant::now();
    client.drain(&url).await.expect("drain");
    println!("MEASURE drain of member {i} took {:?}", started.elapsed());
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
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.restart(i).await.expect("restart");
    all_healthy(client).await;
    client.undrain(&url).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_with_drain_reaches_no_caller() {
    let mut cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    all_healthy(&client).await;
    let lease = client.keeper().grant(Duration::from_secs(5)).await.unwrap();
    let watch = watch_writers(&client);
    let writers = Writers::start(&client, 4, Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The leader first (leadership moves before the stop), then every other member.
    let leader = cluster.leader(support::READY).await.unwrap();
    let mut order = vec![leader];
    order.extend((0..cluster.len()).filter(|&i| i != leader));
    for i in order {
        cycle(&mut cluster, &client, i).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let seen = writers.finish().await;
    for s in &seen {
        println!("MEASURE writer through a drained rolling restart: {s:?}");
    }
    assert!(
        seen.iter().all(|s| s.ok > 20),
        "the writers made progress: {seen:?}"
    );
    let errors: Vec<&String> = seen.iter().flat_map(|s| &s.errors).collect();
    assert!(errors.is_empty(), "errors reached the caller: {errors:?}");
    assert!(!lease.is_expired(), "the kept lease survived");
    assert!(!watch.is_finished(), "the managed watch is still running");
    watch.abort();
}
