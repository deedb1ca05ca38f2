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
//! (which drops them silently while it hands over: they would time out). Unless the stop is
//! held open: another client's stream keeps etcd's `GracefulStop` waiting up to its request
//! timeout (7 s), and all that time the refusing member still leads; once it has led for
//! longer than a quick hand-over (`STOP_HANDOVER`, 150 ms) and a follower's read proves it,
//! puts go through the followers (the second test). What cannot be
//! hidden: a put still waiting for its answer when etcd closes a connection (etcd logs
//! "failed to write status: transport is closing": it was applied) may or may not be applied,
//! and is never sent again; the application sees it. Reads, the managed watch, the kept lease
//! and the leadership holder must see nothing at all.

mod support;

use std::time::Duration;

use support::traffic::Traffic;
use tokio::time::Instant;

/// Held by each test for its whole run, whatever `--test-threads`: a SIGTERM of the leader is
/// measured in gaps of a few hundred milliseconds, which a second cluster under load on the
/// same two cores would blur.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Whether a write error is one a client must not resend: the put may have been applied.
fn is_ambiguous(error: &str) -> bool {
    ["Transport", "Timeout", "StreamClosed", "LeaderChanged"]
        .iter()
        .any(|kind| error.starts_with(kind))
}

/// Writers of the traffic, each with one put at a time.
const WRITERS: usize = 4;

/// The deadline of each put of the traffic (`support::traffic`).
const WRITE_DEADLINE: Duration = Duration::from_secs(1);

/// How long before its end etcd's stop may start handing leadership over: the transfer, then
/// the hard stop, then up to 1 s for the peers' idle connections (etcd's `Close`).
const HANDOVER_SLACK: Duration = Duration::from_millis(1500);

/// How long after SIGTERM a put may have been sent and still reach the stopping leader before
/// it closes its connections: etcd closes them within a few ms (1-7 ms measured); the rest is
/// for a loaded CI box.
const IN_FLIGHT_AT_CLOSE: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigterm_without_drain_reaches_only_ambiguous_writes() {
    let _serial = SERIAL.lock().await;
    let mut cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    support::all_healthy(&client).await;
    let traffic = Traffic::start(&client, "sigterm", WRITERS).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let leader = cluster.leader(support::READY).await.unwrap();
    let started = Instant::now();
    cluster.terminate(leader).await;
    let stopped = started.elapsed();
    after_the_stop(&mut cluster, &client, leader).await;

    let report = traffic.finish().await;
    report.print("SIGTERM of the leader without drain");
    println!("MEASURE the leader took {stopped:?} to stop after SIGTERM");
    // Only the puts in flight when etcd closed its connections (a few ms after SIGTERM) may
    // fail. A put sent later waits for the new leader: it is never forwarded by a follower to
    // the refusing old leader, which would drop it during its handover and leave it to time
    // out a second later (seen before the refused connection counted).
    check_write_errors(&report, started, None, WRITERS);
    report.assert_all_but_writes_clean();
}

/// The same SIGTERM while another client holds a watch stream open on the leader (any other
/// client of a real cluster does: Go's clientv3, etcd-client, a second etcd-ha). etcd's
/// graceful stop then waits for that stream up to its request timeout (7 s with default
/// timing) before it hands leadership over: for that long the stopping leader refuses our
/// connections but still leads, and followers forward writes to it. Waiting for a new leader
/// meanwhile held every put to its deadline (etcd 3.6.16 in the benchmark: a 2 s gap and
/// errors at 1 in flight, where clientv3 lost nothing); through the followers they go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_sigterm_held_open_by_another_clients_stream_goes_on_through_followers() {
    let _serial = SERIAL.lock().await;
    use etcd_ha::proto::etcdserverpb::watch_client::WatchClient;
    use etcd_ha::proto::etcdserverpb::{WatchCreateRequest, WatchRequest, watch_request};

    let mut cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    support::all_healthy(&client).await;
    let leader = cluster.leader(support::READY).await.unwrap();
    // Another client's watch on the leader, on a plain channel that never moves.
    let channel = tonic::transport::Endpoint::from_shared(cluster.endpoint(leader))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let (requests, outbound) = tokio::sync::mpsc::channel(1);
    requests
        .send(WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(
                WatchCreateRequest {
                    key: b"held-open".to_vec(),
                    ..Default::default()
                },
            )),
        })
        .await
        .unwrap();
    let mut held_open = WatchClient::new(channel)
        .watch(tokio_stream::wrappers::ReceiverStream::new(outbound))
        .await
        .unwrap()
        .into_inner();
    held_open.message().await.unwrap().expect("watch created");

    let traffic = Traffic::start(&client, "sigterm-held", WRITERS).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    cluster.terminate(leader).await;
    let stopped = started.elapsed();
    drop((requests, held_open));
    after_the_stop(&mut cluster, &client, leader).await;

    let report = traffic.finish().await;
    report.print("SIGTERM of the leader held open by another client's stream");
    println!("MEASURE the leader took {stopped:?} to stop after SIGTERM");
    // Measured: 3.5.35, 3.6.16 and 3.7.3 wait for the stream (7-8 s); 3.4.23 and 3.5.1 close
    // it at once (~0.1-1.1 s), and there this is the quick stop of the test above, held to the
    // same bounds. (The 3.5 patch that changed it was not looked for.)
    let held_open = holds_its_stop_open_for_streams(cluster.etcd_version());
    if held_open {
        assert!(
            stopped > Duration::from_secs(3),
            "the other client's stream held the graceful stop ({stopped:?}): the test's premise"
        );
    } else {
        println!(
            "MEASURE etcd {} did not wait for the stream",
            cluster.etcd_version()
        );
    }
    // etcd hands leadership over when its stop ends: a put a follower forwarded to it just
    // then is dropped by raft, silently, and times out (ambiguous: no client can tell). Those
    // are the only failures allowed after the connections closed, one per writer at most. A
    // quick stop gets no such allowance: puts wait for its new leader, as in the test above.
    let handover = started + stopped.saturating_sub(WRITE_DEADLINE + HANDOVER_SLACK);
    let handover = if held_open {
        handover
    } else {
        started + stopped
    };
    check_write_errors(&report, started, held_open.then_some(handover), 2 * WRITERS);
    // Until the hand-over, a put waits no longer than a quick hand-over would take.
    for (i, writer) in report.writers.iter().enumerate() {
        let (gap, at) = writer.longest_gap_in(started, handover);
        println!(
            "MEASURE writer {i}: longest gap {gap:?}, {:?} after SIGTERM",
            at.saturating_duration_since(started)
        );
        assert!(
            gap < Duration::from_secs(1),
            "writer {i} waited {gap:?} while the stopping leader still led"
        );
    }
    report.assert_all_but_writes_clean();
}

/// After the stopped `leader`: another member leads; a moment later the old one starts
/// again, and the client sees every member healthy.
async fn after_the_stop(
    cluster: &mut etcd_ha::testkit::Cluster,
    client: &etcd_ha::Client,
    leader: usize,
) {
    let next = cluster.leader(support::READY).await.unwrap();
    assert_ne!(next, leader);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    cluster.restart(leader).await.expect("restart");
    support::all_healthy(client).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Every write error of `report` is ambiguous, came from a put sent before etcd closed its
/// connections (it was in flight at the close, or reached the stopping leader before it did)
/// or, from `handover` on, one a follower forwarded during the hand-over; and there are at
/// most `at_most` of them. Judged by when each put was sent, not when its error came: a put
/// that reached the leader just before the close may wait there for the whole deadline (the
/// project's CI saw one sent 19 ms after SIGTERM time out 1 s later, on a loaded box).
fn check_write_errors(
    report: &support::traffic::Report,
    started: Instant,
    handover: Option<Instant>,
    at_most: usize,
) {
    let errors = report.write_errors();
    for failed in &errors {
        let error = &failed.error;
        let sent_after = failed.sent.saturating_duration_since(started);
        let after = failed.came.saturating_duration_since(started);
        println!(
            "MEASURE write error {after:?} after SIGTERM (sent {sent_after:?} after it): {error}"
        );
        assert!(
            is_ambiguous(error),
            "a write error that should have been resent: {error}"
        );
        assert!(
            sent_after < IN_FLIGHT_AT_CLOSE || handover.is_some_and(|h| failed.came >= h),
            "a put sent after the leader closed its connections failed: {error}, sent \
             {sent_after:?} after SIGTERM, failed {after:?} after it"
        );
    }
    assert!(
        errors.len() <= at_most,
        "at most {at_most} puts in flight at the close (and the hand-over) can fail, got {}",
        errors.len()
    );
}

/// Whether etcd `version`'s graceful stop waits for other clients' open streams (up to its
/// request timeout) before it hands leadership over: measured on 3.5.35, 3.6.16 and 3.7.3
/// (yes) and on 3.4.23 and 3.5.1 (no).
fn holds_its_stop_open_for_streams(version: &str) -> bool {
    let parts: Vec<u32> = version.split('.').map(|p| p.parse().unwrap_or(0)).collect();
    let (major, minor, patch) = (
        parts[0],
        parts.get(1).copied().unwrap_or(0),
        parts.get(2).copied().unwrap_or(0),
    );
    (major, minor, patch) >= (3, 5, 35)
}
