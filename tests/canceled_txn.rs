//! A txn whose caller gives up must not crash the member applying it.
//!
//! etcd 3.5.0 to 3.5.4 panic (`unexpected error during txn`, etcd issue 14110) when a txn's
//! context is canceled while its range runs: a client that cancels txns in flight, as any
//! `tokio::time::timeout` around a campaign does, takes members down. 150 campaigns under a
//! 0-2 ms caller timeout crashed a 3.5.1 member in 4 runs of 5 before the client learnt to let
//! such txns finish (`endpoint/version.rs`); `ETCD_HA_MUTANT=cancel-txns` with the `mutants`
//! feature puts the old behaviour back, and this test then fails on 3.5.1.
//!
//! It runs on 3.5.1 whatever `ETCD_BIN` says (the version with the bug), and on the suite's
//! own server too: there, txns are canceled as usual and must crash nothing either.

mod support;

use std::time::Duration;

use etcd_ha::concurrency::Election;
use etcd_ha::testkit::Cluster;
use etcd_ha::{Client, GetOptions, PutOptions, Session, Txn, TxnOp};

/// Txns abandoned by their caller, as in the reproduction.
const ABANDONED: usize = 150;

/// Keys the read-only txns range over: enough that the range takes milliseconds, so that a
/// caller's cancel lands while it runs.
const KEYS: usize = 2_000;

/// Txns and campaigns abandoned on `cluster`; then every member must still run and serve.
async fn abandon_txns(cluster: &Cluster) {
    let client = support::client(cluster).await;
    support::all_healthy(&client).await;
    let prefix = support::unique("canceled-txn");
    for batch in 0..KEYS / 100 {
        let puts = (0..100)
            .map(|i| TxnOp::put(format!("{prefix}/{batch:02}{i:02}"), "v", PutOptions::new()));
        client.kv().txn(Txn::new().and_then(puts)).await.unwrap();
    }
    let mut gave_up = 0;
    // A read-only txn runs its range under the caller's context on the member it reaches.
    for _ in 0..ABANDONED {
        let within = Duration::from_micros(fastrand::u64(..2_000));
        let read = Txn::new().and_then([TxnOp::get(
            format!("{prefix}/"),
            GetOptions::new().with_prefix(),
        )]);
        if tokio::time::timeout(within, client.kv().txn(read))
            .await
            .is_err()
        {
            gave_up += 1;
        }
    }
    // Campaigns under the caller's timeout, the pattern `Election`'s docs show.
    let session = Session::new(&client, Duration::from_secs(30))
        .await
        .unwrap();
    let election = Election::new(&client, format!("{prefix}-election").as_str());
    for _ in 0..ABANDONED {
        let within = Duration::from_micros(fastrand::u64(..2_000));
        match tokio::time::timeout(within, election.campaign(&session, "v")).await {
            Err(_) => gave_up += 1,
            Ok(Ok(leader)) => leader.resign().await.unwrap(),
            Ok(Err(e)) => panic!("a campaign failed: {e}"),
        }
    }
    assert!(
        gave_up > ABANDONED,
        "only {gave_up} txns and campaigns abandoned"
    );
    // A crash takes a moment to show: the panic comes when the range meets the cancel.
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster
        .check_running()
        .expect("no member crashed on a canceled txn");
    // And every member still serves a write.
    for i in 0..cluster.len() {
        let one = Client::connect([cluster.endpoint(i)], support::options_for(cluster))
            .await
            .unwrap();
        one.kv()
            .put(support::unique("after"), "ok", PutOptions::new())
            .await
            .unwrap_or_else(|e| panic!("member {i} serves after the abandoned txns: {e}"));
    }
    session.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txns_abandoned_in_flight_crash_no_3_5_1_member() {
    support::init_tracing();
    let builder = Cluster::builder()
        .members(3)
        .etcd_bin(support::etcd_of_version("3.5.1"));
    let cluster = builder.start().await.expect("start etcd 3.5.1");
    cluster.leader(support::READY).await.unwrap();
    let client = support::client(&cluster).await;
    support::all_healthy(&client).await;
    for e in client.endpoints() {
        assert_eq!(
            e.version,
            Some(etcd_ha::ServerVersion::new(3, 5, 1)),
            "each member's version is read from its Status"
        );
    }
    abandon_txns(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txns_abandoned_in_flight_crash_no_member_of_the_suites_server() {
    let cluster = support::cluster3().await;
    abandon_txns(&cluster).await;
}
