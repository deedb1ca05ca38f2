//! Planned leader transfer (MoveLeader) under traffic against a real 3-member cluster: the old
//! leader drops proposals while leadership moves ("raft proposal dropped"), which are certainly
//! not applied, so the client sends them again to the new leader and the application sees no
//! error.

mod support;

use std::time::Duration;

use etcd_ha::testkit::Cluster;
use support::writers::Writers;

/// The current leader's endpoint (as the cluster itself says) and the member id of another
/// member to hand leadership to.
async fn leader_and_target(cluster: &Cluster) -> (String, u64) {
    let leader = cluster.leader(support::READY).await.expect("a leader");
    let other = (0..cluster.len()).find(|&i| i != leader).unwrap();
    let target = cluster.member_id(other).await.expect("member id");
    (cluster.endpoint(leader), target)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_transfers_under_traffic_reach_no_caller() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    // Four writers with the application's own 1 s deadline.
    let writers = Writers::start(&client, 4, Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..4 {
        let (leader, target) = leader_and_target(&cluster).await;
        client
            .maintenance()
            .on(&leader)
            .unwrap()
            .move_leader(target)
            .await
            .expect("MoveLeader");
        // Let the client see the new leader before the next transfer.
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let mut total_ok = 0;
    for seen in writers.finish().await {
        println!("MEASURE writer through 4 MoveLeaders: {seen:?}");
        assert!(
            seen.errors.is_empty(),
            "errors reached the caller: {seen:?}"
        );
        total_ok += seen.ok;
    }
    assert!(total_ok > 100, "the writers made progress: {total_ok}");
}
