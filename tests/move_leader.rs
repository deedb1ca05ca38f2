//! Planned leader transfer (MoveLeader) under an application's whole traffic against a real
//! 3-member cluster: the old leader drops proposals while leadership moves ("raft proposal
//! dropped"), which are certainly not applied, so the client sends them again to the new leader;
//! reads, the managed watch, the kept lease and a leadership holder go on. The application sees
//! no error, and every acknowledged put is stored and watched exactly once.

mod support;

use std::time::Duration;

use etcd_ha::testkit::Cluster;
use support::traffic::Traffic;

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
    // Four writers with the application's own 1 s deadline, readers, watch, lease, leadership.
    let traffic = Traffic::start(&client, "move", 4).await;
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
    let report = traffic.finish().await;
    report.print("4 MoveLeaders");
    report.assert_clean();
}
