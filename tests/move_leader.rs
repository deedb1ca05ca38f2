//! Planned leader transfer (MoveLeader) under traffic against a real 3-member cluster: the old
//! leader drops proposals while leadership moves ("raft proposal dropped"), which are certainly
//! not applied, so the client sends them again to the new leader and the application sees no
//! error.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use etcd_ha::{Client, PutOptions};
use tokio::time::Instant;

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
    let stop = Arc::new(AtomicBool::new(false));
    // Four writers with the application's own 1 s deadline.
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let client = client.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let kv = client.kv().with_timeout(Duration::from_secs(1));
                let key = support::unique("moved");
                let (mut ok, mut errors, mut longest) = (0u32, Vec::new(), Duration::ZERO);
                let mut last_ok = Instant::now();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    match kv
                        .put(key.as_str(), format!("{w}-{i}"), PutOptions::new())
                        .await
                    {
                        Ok(_) => {
                            ok += 1;
                            longest = longest.max(last_ok.elapsed());
                            last_ok = Instant::now();
                        }
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                (ok, errors, longest)
            })
        })
        .collect();
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
    stop.store(true, Ordering::Relaxed);
    let mut total_ok = 0;
    for writer in writers {
        let (ok, errors, longest) = writer.await.unwrap();
        println!("MEASURE writer: {ok} puts, longest gap {longest:?}, errors {errors:?}");
        assert!(errors.is_empty(), "errors reached the caller: {errors:?}");
        total_ok += ok;
    }
    assert!(total_ok > 100, "the writers made progress: {total_ok}");
}
