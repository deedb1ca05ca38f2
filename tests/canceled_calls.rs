//! Calls their callers drop never close the connection under the calls beside them.
//!
//! A dropped call resets its HTTP/2 stream. The member's answer may still arrive after that:
//! HTTP/2 remembers a few reset streams for a moment and ignores their frames, and answers a
//! frame for a forgotten one with a reset of its own. hyper counts those resets over the whole
//! life of a connection and, at 1,024, closes it with `GOAWAY(ENHANCE_YOUR_CALM,
//! too_many_internal_resets)`, failing every call in flight on it as ambiguous. Through a slow
//! link at 256 callers, hedges and callers' deadlines reach that count in seconds
//! (`failover-bench leader-link-latency` lost 184-243 puts so). The limit guards servers
//! against abusive clients; etcd-ha's peers are the cluster's members, so it is off.

mod support;

use std::time::Duration;

use etcd_ha::testkit::{FaultProxy, Mode};
use etcd_ha::{Client, GetOptions, Options};

/// Calls dropped in one wave, all within a few milliseconds: far more than HTTP/2 remembers
/// (50), so most answers arrive for forgotten streams.
const WAVE: usize = 400;

/// Waves: 2,000 forgotten streams in all, twice hyper's limit of 1,024.
const WAVES: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_calls_never_close_the_connection_under_the_others() {
    let cluster = support::cluster1().await;
    let proxy = FaultProxy::start(cluster.client_addr(0)).unwrap();
    let client = Client::connect(
        &[proxy.url("http")],
        Options::new()
            .without_member_sync()
            .with_request_timeout(Duration::from_secs(10)),
    )
    .await
    .unwrap();
    client
        .kv()
        .put("canceled/key", "v", Default::default())
        .await
        .unwrap();
    // Each answer comes 200 ms after its request left, long after its caller gave up.
    proxy.set_mode(Mode::Latency(Duration::from_millis(100)));

    // One call stays in flight on the same connection through every wave.
    let kv = client.kv();
    let beside = tokio::spawn(async move {
        let mut done = 0;
        for _ in 0..WAVES * 4 {
            kv.get("canceled/key", GetOptions::new().with_serializable())
                .await
                .expect("a call beside the dropped ones");
            done += 1;
        }
        done
    });

    for _ in 0..WAVES {
        let mut wave = tokio::task::JoinSet::new();
        for _ in 0..WAVE {
            let kv = client.kv();
            wave.spawn(async move {
                // Dropped after the member has its request (100 ms) and sent its answer, but
                // before the answer is here (200 ms).
                let get = kv.get("canceled/key", GetOptions::new().with_serializable());
                let _ = tokio::time::timeout(Duration::from_millis(150), get).await;
            });
        }
        while wave.join_next().await.is_some() {}
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    let done = beside.await.expect("the call beside ran");
    assert_eq!(done, WAVES * 4);
    // And a call after the waves goes on the same connection, not a new one.
    proxy.set_mode(Mode::Pass);
    client
        .kv()
        .get("canceled/key", GetOptions::new())
        .await
        .expect("a call after the waves");
    assert_eq!(
        proxy.accepted(),
        1,
        "the connection was closed and opened again"
    );
}
