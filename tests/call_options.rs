//! Per-call options of the typed sub-clients against a real 3-member cluster: a handle pinned to
//! one member answers from it, routing overrides the RPC table, a per-call deadline bounds the
//! call, and a deadline lets a lock wait give up.

mod support;

use std::time::Duration;

use etcd_ha::{Error, GetOptions, PutOptions, Route};
use tokio::time::Instant;

/// The member id each endpoint answers for, learned from the client's own view.
async fn member_of(client: &etcd_ha::Client, url: &str) -> u64 {
    for _ in 0..200 {
        if let Some(id) = client
            .endpoints()
            .iter()
            .find(|e| e.url == url)
            .and_then(|e| e.member_id)
        {
            return id;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the client never learned the member id of {url}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_handle_is_answered_by_its_member_only() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let key = support::unique("pinned");
    client
        .kv()
        .put(key.as_str(), "v", PutOptions::new())
        .await
        .unwrap();
    for url in client.endpoint_urls() {
        let member = member_of(&client, &url).await;
        let kv = client.kv().with_member(&url).unwrap();
        for _ in 0..5 {
            // Serializable: each member answers from its own state, so the header says who.
            let got = kv
                .get(key.as_str(), GetOptions::new().with_serializable())
                .await
                .unwrap();
            assert_eq!(got.header.unwrap().member_id, member, "{url}");
        }
    }
    // Not one of the client's endpoints: a typed error, not a panic or a silent fallback.
    assert!(matches!(
        client.kv().with_member("http://127.0.0.1:1"),
        Err(Error::InvalidEndpoint { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_overrides_the_rpc_table() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let key = support::unique("routed");
    client
        .kv()
        .put(key.as_str(), "v", PutOptions::new())
        .await
        .unwrap();
    // Wait until the client knows the leader and every member is healthy (a leader still in
    // probation is rightly passed over for a healthy follower, which forwards).
    let leader = loop {
        let endpoints = client.endpoints();
        let all_healthy = endpoints
            .iter()
            .all(|e| e.health == etcd_ha::HealthState::Healthy);
        if let Some(e) = endpoints.iter().find(|e| e.is_leader)
            && all_healthy
        {
            break e.member_id.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Serializable reads are spread by default; routed to the leader they all go there.
    let kv = client.kv().with_route(Route::Leader);
    for _ in 0..20 {
        let got = kv
            .get(key.as_str(), GetOptions::new().with_serializable())
            .await
            .unwrap();
        assert_eq!(got.header.unwrap().member_id, leader);
    }
    // Writes routed "anywhere" still succeed (followers forward them), with or without
    // require-leader.
    for require_leader in [true, false] {
        let kv = client
            .kv()
            .with_route(Route::Any)
            .with_require_leader(require_leader);
        for i in 0..10 {
            kv.put(key.as_str(), format!("{i}"), PutOptions::new())
                .await
                .unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_call_deadline_bounds_the_call_and_a_lock_wait() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    // Too short for any member: a typed timeout, at the caller's deadline, not the client's.
    let started = Instant::now();
    let result = client
        .kv()
        .with_timeout(Duration::from_micros(1))
        .get("k", GetOptions::new())
        .await;
    assert!(matches!(result, Err(Error::Timeout)), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(1));

    // A lock held by someone else: without a deadline the server-side Lock waits forever; with
    // one it gives up at the deadline.
    let name = support::unique("lock");
    let lease = client.lease().grant(30, None).await.unwrap();
    let held = client.lock().lock(name.as_str(), lease.id).await.unwrap();
    let other = client.lease().grant(30, None).await.unwrap();
    let started = Instant::now();
    let waited = client
        .lock()
        .with_timeout(Duration::from_millis(500))
        .lock(name.as_str(), other.id)
        .await;
    let took = started.elapsed();
    assert!(matches!(waited, Err(Error::Timeout)), "{waited:?}");
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_secs(3),
        "{took:?}"
    );
    client.lock().unlock(held.key).await.unwrap();
}
