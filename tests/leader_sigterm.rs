//! SIGTERM of the leader *without* a drain, under an application's whole traffic, against a
//! real 3-member cluster: what a client can and cannot hide.
//!
//! What etcd 3.5 (and 3.4) does on SIGTERM (`server/embed/etcd.go`, `Etcd.Close`): first it
//! stops its client servers (`stopServers`: HTTP shutdown, then gRPC `GracefulStop`, which
//! sends GOAWAY, refuses new streams and waits for the RPCs in flight, watch and keep-alive
//! streams included, up to its request timeout, then closes what is left); only then
//! `EtcdServer.Stop` hands leadership to the longest-connected follower (MoveLeader) and stops
//! raft. So the client learns of the stop from the GOAWAY (and then refused connections) before
//! leadership moves; puts the member refused unprocessed are sent again, and new puts wait for
//! the new leader rather than go through a follower that would forward them to the old one
//! (which drops them silently while it hands over: they would time out). What cannot be
//! hidden: a put still waiting for its answer when etcd closes a connection (etcd logs
//! "failed to write status: transport is closing": it was applied) may or may not be applied,
//! and is never sent again; the application sees it. Reads, the managed watch, the kept lease
//! and the leadership holder must see nothing at all.

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

/// Writers of the traffic, each with one put at a time.
const WRITERS: usize = 4;

/// How long after SIGTERM a put that was in flight when etcd closed its connections can fail:
/// etcd closes them within a few ms (1-7 ms measured); the rest is for a loaded CI box.
const IN_FLIGHT_AT_CLOSE: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigterm_without_drain_reaches_only_ambiguous_writes() {
    let mut cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    support::all_healthy(&client).await;
    let traffic = Traffic::start(&client, "sigterm", WRITERS).await;
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
    let errors = report.write_errors();
    for (at, error) in &errors {
        let after = at.saturating_duration_since(started);
        println!("MEASURE write error {after:?} after SIGTERM: {error}");
        assert!(
            is_ambiguous(error),
            "a write error that should have been resent: {error}"
        );
        // Only the puts in flight when etcd closed its connections (a few ms after SIGTERM)
        // may fail. A put sent later waits for the new leader: it is never forwarded by a
        // follower to the refusing old leader, which would drop it during its handover and
        // leave it to time out a second later (seen before the refused connection counted).
        assert!(
            after < IN_FLIGHT_AT_CLOSE,
            "a put sent after the leader closed its connections failed: {error} after {after:?}"
        );
    }
    assert!(
        errors.len() <= WRITERS,
        "at most one put in flight per writer can fail, got {}",
        errors.len()
    );
    report.assert_all_but_writes_clean();
}
