//! A TLS client never dials a member in plain text (issue 8, defect 6): a member of an https
//! cluster that advertises an `http://` client URL is left out by member sync, so the auth token
//! and password never cross the network in the clear.
//!
//! The client is given `https://` endpoints and no TLS options (it trusts the system roots, here
//! the testkit's CA through `SSL_CERT_FILE`): that is the case where the old code took the
//! member's `http://` URL as it came.

mod support;

use std::time::Duration;

use etcd_ha::testkit::Cluster;
use etcd_ha::{Client, Options};
use support::members::{ExtraMember, free_port, peer_url, settled};
use tokio::time::{Instant, sleep};

/// Member sync period of the client: many syncs within the test's window.
const SYNC: Duration = Duration::from_millis(200);

/// How long the client is watched once the plain-text member is started and listed.
const WATCHED: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_sync_never_adds_an_http_url_to_an_https_client() {
    support::init_tracing();
    let cluster = Cluster::builder()
        .members(3)
        .tls(true)
        .start()
        .await
        .expect("start a TLS cluster");
    cluster
        .leader(support::READY)
        .await
        .expect("the cluster elects a leader");
    let ca = cluster.tls().expect("a TLS cluster").ca.clone();
    // The system roots are read when a channel is built, from here on.
    // SAFETY: set once, before this test builds any client; nothing else in this test binary
    // reads or writes the environment concurrently.
    unsafe { std::env::set_var("SSL_CERT_FILE", &ca) };

    let endpoints = cluster.endpoints();
    assert!(endpoints.iter().all(|u| u.starts_with("https://")));
    let client = Client::connect(&endpoints, Options::new().with_member_sync(SYNC))
        .await
        .expect("connect over https with the system roots");

    // A fourth voter (quorum stays at 3 of the live members) whose client URL is plain http.
    let peer = peer_url();
    let plain = format!("http://127.0.0.1:{}", free_port());
    let api = client.cluster();
    let added = settled(|| api.member_add([peer.clone()]))
        .await
        .expect("add a member");
    let id = added.member.expect("the added member").id;
    let _extra = ExtraMember::start(
        "plain",
        &cluster.dir().join("plain"),
        &peer,
        &plain,
        &added.members,
    );
    // Until it has started, etcd lists no name and no client URL for it, and sync skips it.
    let until = Instant::now() + support::READY;
    loop {
        let listed = client.cluster().member_list().await.expect("member list");
        let started = listed
            .members
            .iter()
            .any(|m| m.id == id && !m.name.is_empty() && m.client_ur_ls == [plain.clone()]);
        if started {
            break;
        }
        assert!(Instant::now() < until, "the plain-text member never starts");
        sleep(Duration::from_millis(100)).await;
    }

    // Many syncs later, no endpoint is plain text.
    let until = Instant::now() + WATCHED;
    while Instant::now() < until {
        let urls: Vec<String> = client.endpoints().into_iter().map(|e| e.url).collect();
        assert!(
            urls.iter().all(|u| u.starts_with("https://")),
            "member sync downgraded to plain text: {urls:?}"
        );
        sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(client.endpoints().len(), 3, "the https members stay in use");
    client.cluster().member_remove(id).await.expect("remove it");
}
