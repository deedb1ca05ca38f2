//! A client never mixes two etcd clusters (issue 8, defect 6): given endpoints of two separate
//! clusters, it either refuses to connect with [`Error::ClusterIdMismatch`] or keeps to the
//! cluster it reached first and drops the other's endpoint, so that no write ever lands there.
//!
//! Without the check, both members are taken for one cluster: each one's probe answer names
//! itself leader in the same raft term, so the leader view flips between them and writes go to
//! both clusters.

mod support;

use std::time::Duration;

use etcd_ha::testkit::Cluster;
use etcd_ha::{Client, Error, GetOptions, Options, PutOptions};
use tokio::time::{Instant, sleep};

/// Keys under this prefix written through the mixed client.
const PREFIX: &str = "cluster-id/";

/// How long the mixed client writes: several probe rounds, each of which (without the check)
/// can move the leader view to the other cluster.
const WRITING: Duration = Duration::from_secs(3);

/// Keys under [`PREFIX`] in `cluster`, read by a client of its own.
async fn keys_in(cluster: &Cluster) -> i64 {
    let client = Client::connect(cluster.endpoints(), Options::new())
        .await
        .expect("connect to one cluster");
    client
        .kv()
        .get(PREFIX, GetOptions::new().with_prefix().with_count_only())
        .await
        .expect("count keys")
        .count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_of_two_clusters_never_both_take_calls() {
    support::init_tracing();
    let a = Cluster::start(1).await.expect("start cluster A");
    let b = Cluster::start(1).await.expect("start cluster B");
    a.leader(support::READY).await.expect("A has a leader");
    b.leader(support::READY).await.expect("B has a leader");
    let (url_a, url_b) = (a.endpoint(0), b.endpoint(0));

    // Member sync off: it would drop B's endpoint for a reason of its own (A's member list).
    // Fast probes: many chances for B's answers to matter.
    let options = Options::new()
        .without_member_sync()
        .with_probe(Duration::from_millis(100), Duration::from_secs(1));
    let client = match Client::connect([url_a.as_str(), url_b.as_str()], options).await {
        Ok(client) => client,
        // Refusing the mix outright is fine too.
        Err(Error::ClusterIdMismatch { .. }) => return,
        Err(e) => panic!("connect failed with {e}, not with a cluster id mismatch"),
    };

    let until = Instant::now() + WRITING;
    let mut written = 0;
    while Instant::now() < until {
        let key = format!("{PREFIX}{written}");
        client
            .kv()
            .put(key.as_str(), "x", PutOptions::new())
            .await
            .expect("a put");
        client
            .kv()
            .get(key.as_str(), GetOptions::new().with_serializable())
            .await
            .expect("a serializable get");
        written += 1;
        sleep(Duration::from_millis(10)).await;
    }

    let (in_a, in_b) = (keys_in(&a).await, keys_in(&b).await);
    assert!(
        (in_a, in_b) == (written, 0) || (in_a, in_b) == (0, written),
        "{written} puts landed {in_a} in cluster A and {in_b} in cluster B"
    );
    // The client kept one cluster's endpoint only.
    let kept = if in_a > 0 { url_a } else { url_b };
    let urls: Vec<String> = client.endpoints().into_iter().map(|e| e.url).collect();
    assert_eq!(urls, [kept], "endpoints left in use");
}

/// Issue 18: a list naming members of two clusters (a typo, a copied config) is refused at
/// connect, whichever answers first; before, the first to answer won.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_of_two_clusters_is_refused_at_connect() {
    support::init_tracing();
    let a = Cluster::start(3).await.expect("start cluster A");
    let b = Cluster::start(1).await.expect("start cluster B");
    a.leader(support::READY).await.expect("A has a leader");
    b.leader(support::READY).await.expect("B has a leader");
    for list in [
        vec![a.endpoint(0), a.endpoint(1), b.endpoint(0)],
        vec![b.endpoint(0), a.endpoint(0), a.endpoint(1), a.endpoint(2)],
    ] {
        let connected = Client::connect(&list, Options::new()).await;
        assert!(
            matches!(connected, Err(Error::ClusterIdMismatch { .. })),
            "{list:?}: {connected:?}"
        );
    }
    // One cluster's members alone connect.
    Client::connect(a.endpoints(), Options::new())
        .await
        .unwrap();
}
