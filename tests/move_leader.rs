//! Planned leader transfer (MoveLeader) under traffic against a real 3-member cluster: the old
//! leader drops proposals while leadership moves ("raft proposal dropped"), which are certainly
//! not applied, so the client sends them again to the new leader and the application sees no
//! error.

mod support;

use std::time::Duration;

use etcd_ha::Client;
use support::writers::Writers;

/// The client's current leader endpoint and the member id of another member.
async fn leader_and_target(client: &Client) -> (String, u64) {
    for _ in 0..250 {
        let endpoints = client.endpoints();
        if let Some(leader) = endpoints.iter().find(|e| e.is_leader)
            && let Some(target) = endpoints
                .iter()
                .filter(|e| !e.is_leader)
                .find_map(|e| e.member_id)
        {
            return (leader.url.clone(), target);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "the client never learned the leader: {:?}",
        client.endpoints()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_transfers_under_traffic_reach_no_caller() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    // Four writers with the application's own 1 s deadline.
    let writers = Writers::start(&client, 4, Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(500)).await;
    for _ in 0..4 {
        let (leader, target) = leader_and_target(&client).await;
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
