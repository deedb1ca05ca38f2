//! A voting member replaced under an application's whole traffic, against a real 3-member
//! cluster: a follower is drained, removed (MemberRemove) and stopped; a new member is added
//! at a new address (MemberAdd, then a new etcd process joining the existing cluster); member
//! sync drops the removed member's URL and takes the new one, and calls go to the new member.
//! No error reaches the application, and nothing is lost or repeated.

mod support;

use std::time::Duration;

use etcd_ha::testkit::Cluster;
use etcd_ha::{Client, HealthState};
use support::members::{ExtraMember, free_port, settled};
use support::traffic::Traffic;
use tokio::time::Instant;

/// Member sync interval: short, so the test sees its changes quickly.
const SYNC: Duration = Duration::from_millis(300);

/// Starts of the new member when one of its ports turned out to be taken meanwhile.
const START_ATTEMPTS: usize = 3;

/// Wait until `done` holds for the client's endpoints, polling.
async fn until(client: &Client, what: &str, done: impl Fn(&Client) -> bool) {
    let deadline = Instant::now() + support::READY;
    while !done(client) {
        assert!(
            Instant::now() < deadline,
            "{what}: {:?}",
            client.endpoints()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Add a voting member at new ports and start it, again at other ports if one was taken.
/// Returns the running process (killed on drop, also on panic), its member id and client URL.
async fn add_member(cluster: &Cluster, client: &Client) -> (ExtraMember, u64, String) {
    let dir = cluster.dir().join("m3");
    let api = client.cluster();
    let mut peer = format!("http://127.0.0.1:{}", free_port());
    let added = settled(|| api.member_add([peer.clone()])).await.unwrap();
    let id = added.member.unwrap().id;
    let mut existing = added.members;
    for attempt in 1..=START_ATTEMPTS {
        let url = format!("http://127.0.0.1:{}", free_port());
        let _ = std::fs::remove_dir_all(&dir);
        let mut member = ExtraMember::start("m3", &dir, &peer, &url, &existing);
        // Bound its ports, or exited because one was taken.
        tokio::time::sleep(Duration::from_millis(500)).await;
        match member.exited(&dir) {
            None => return (member, id, url),
            Some(log) if attempt < START_ATTEMPTS && log.contains("address already in use") => {
                peer = format!("http://127.0.0.1:{}", free_port());
                api.member_update(id, [peer.clone()]).await.unwrap();
                existing = api.member_list().await.unwrap().members;
            }
            Some(log) => panic!("the new member exited: {log}"),
        }
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_replaced_under_traffic_reaches_no_caller() {
    // Members on a tmpfs where there is one, the new one too (it lives in the cluster's
    // directory): a fresh member that leads fsyncs every write, and a disk stall of a busy
    // machine is not the member replacement this test is about.
    let mut cluster = support::cluster3_in_memory().await;
    let options = support::options_for(&cluster).with_member_sync(SYNC);
    let client = Client::connect(cluster.endpoints(), options).await.unwrap();
    until(&client, "healthy with a leader", |c| {
        let e = c.endpoints();
        e.iter().all(|e| e.health == HealthState::Healthy) && e.iter().any(|e| e.is_leader)
    })
    .await;
    let traffic = Traffic::start(&client, "replace", 4).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Out: a follower, drained first so that nothing of the client is on it when it goes.
    let leader = cluster.leader(support::READY).await.unwrap();
    let out = (0..cluster.len()).find(|&i| i != leader).unwrap();
    let out_url = cluster.endpoint(out);
    let out_id = cluster.member_id(out).await.unwrap();
    let started = Instant::now();
    client.drain(&out_url).await.expect("drain");
    let api = client.cluster();
    settled(|| api.member_remove(out_id))
        .await
        .expect("MemberRemove");
    // A removed member stops by itself once it applies its removal; make sure it is gone.
    cluster.terminate(out).await;
    until(&client, "member sync drops the removed member", |c| {
        !c.endpoint_urls().contains(&out_url)
    })
    .await;
    println!(
        "MEASURE removed member dropped by member sync {:?} after its drain began",
        started.elapsed()
    );

    // In: a new member at a new address.
    let started = Instant::now();
    let (new_member, new_id, new_url) = add_member(&cluster, &client).await;
    until(&client, "member sync takes the new member", |c| {
        c.endpoints()
            .iter()
            .any(|e| e.url == new_url && e.health == HealthState::Healthy)
    })
    .await;
    println!(
        "MEASURE new member in use {:?} after MemberAdd",
        started.elapsed()
    );
    let mut urls = client.endpoint_urls();
    urls.sort();
    let mut expected: Vec<String> = (0..cluster.len())
        .filter(|&i| i != out)
        .map(|i| cluster.endpoint(i))
        .chain([new_url.clone()])
        .collect();
    expected.sort();
    assert_eq!(urls, expected);

    // Calls go to the new member: it leads, so every write goes there.
    let leader_url = cluster.endpoint(cluster.leader(support::READY).await.unwrap());
    client
        .maintenance()
        .on(&leader_url)
        .unwrap()
        .move_leader(new_id)
        .await
        .expect("MoveLeader to the new member");
    until(&client, "the new member leads", |c| {
        c.endpoints()
            .iter()
            .any(|e| e.url == new_url && e.is_leader)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;

    let report = traffic.finish().await;
    report.print("member replaced");
    report.assert_clean();
    // Give the new member's place back before the cluster is dropped (its process dies with
    // `new_member`).
    drop(new_member);
}
