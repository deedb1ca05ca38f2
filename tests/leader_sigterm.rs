//! SIGTERM of the leader *without* a drain, under an application's whole traffic, against a
//! real 3-member cluster: what a client can and cannot hide.
//!
//! What etcd 3.5 (and 3.4) does on SIGTERM (`server/embed/etcd.go`, `Etcd.Close`): first it
//! stops its client servers (`stopServers`: HTTP shutdown, then gRPC `GracefulStop`, which
//! sends GOAWAY, refuses new streams and waits for the RPCs in flight, watch and keep-alive
//! streams included, up to its request timeout, then closes what is left); only then
//! `EtcdServer.Stop` hands leadership to the longest-connected follower (MoveLeader) and stops
//! raft. So the client learns of the stop from the GOAWAY (and then refused connections) before
//! leadership moves; puts the member refused unprocessed are sent again. What cannot be hidden:
//! a put still waiting for its answer when etcd closes a connection, or forwarded by a follower
//! while the old leader hands over (the old leader drops it silently: it times out), may or may
//! not be applied, and is never sent again; the application sees it. Reads, the managed watch,
//! the kept lease and the leadership holder must see nothing at all.

mod support;

use std::time::Duration;

use support::traffic::Traffic;
use tokio::time::Instant;

/// Whether a write error is one a client must not resend: the put may have been applied.
fn is_ambiguous(error: &str) -> bool {
    ["Transport", "Timeout", "StreamClosed", "LeaderChanged"]
        .iter()
        .any(|kind| error.starts_with(kind))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigterm_without_drain_reaches_only_ambiguous_writes() {
    let mut cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    support::all_healthy(&client).await;
    let traffic = Traffic::start(&client, "sigterm", 4).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let leader = cluster.leader(support::READY).await.unwrap();
    let started = Instant::now();
    cluster.terminate(leader).await;
    let stopped = started.elapsed();
    let next = cluster.leader(support::READY).await.unwrap();
    assert_ne!(next, leader);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    cluster.restart(leader).await.expect("restart");
    support::all_healthy(&client).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let report = traffic.finish().await;
    report.print("SIGTERM of the leader without drain");
    println!("MEASURE the leader took {stopped:?} to stop after SIGTERM");
    for (at, error) in report.write_errors() {
        println!(
            "MEASURE write error {:?} after SIGTERM: {error}",
            at.saturating_duration_since(started)
        );
        assert!(
            is_ambiguous(error),
            "a write error that should have been resent: {error}"
        );
    }
    report.assert_all_but_writes_clean();
}
