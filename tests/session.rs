//! Sessions against a real 3-member cluster: close revokes the lease (its keys vanish at once)
//! and ends the session for every clone without calling it lost; a lease revoked behind the
//! session's back makes it lost; a session can be built on an existing lease.
//!
//! Run against etcd 3.4 too: `ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test --features testkit --test session`.

mod support;

use std::time::Duration;

use etcd_ha::{Client, Error, GetOptions, PutOptions, Session};
use tokio::time::{Instant, sleep, timeout};

/// Whether `key` exists.
async fn exists(client: &Client, key: &str) -> bool {
    !client
        .kv()
        .get(key, GetOptions::new())
        .await
        .expect("get")
        .kvs
        .is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_revokes_and_ends_every_clone() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    const TTL: Duration = Duration::from_secs(3);
    let session = Session::new(&client, TTL).await.unwrap();
    assert_eq!(session.lease().ttl(), TTL);
    assert_eq!(session.lease_id(), session.lease().id());
    let p = support::unique("session-close");
    let keys = [format!("{p}/a"), format!("{p}/b")];
    for key in &keys {
        session
            .client()
            .kv()
            .put(
                key.as_str(),
                "v",
                PutOptions::new().with_lease(session.lease_id()),
            )
            .await
            .unwrap();
    }
    // Kept beyond its TTL.
    sleep(TTL + Duration::from_secs(1)).await;
    assert!(!session.lease().is_expired());
    for key in &keys {
        assert!(exists(&client, key).await);
    }

    let clone = session.clone();
    let done = tokio::spawn({
        let clone = clone.clone();
        async move {
            clone.done().await;
            Instant::now()
        }
    });
    let lost = tokio::spawn({
        let clone = clone.clone();
        async move { clone.lost().await }
    });
    let id = session.lease_id();
    let closing = Instant::now();
    session.close().await.unwrap();
    let closed = Instant::now();
    let done_at = timeout(Duration::from_secs(1), done)
        .await
        .expect("done completes on close")
        .unwrap();
    eprintln!(
        "close took {:?}; done completed {:?} after close began",
        closed - closing,
        done_at.saturating_duration_since(closing)
    );

    // Revoked: the server forgets the lease and its keys are gone at once.
    let info = client.lease().time_to_live(id, false).await.unwrap();
    assert_eq!(info.ttl, -1);
    for key in &keys {
        assert!(!exists(&client, key).await, "{key} outlived the session");
    }
    // Closing is not losing, even after the (no longer renewed) local expiry.
    let past_expiry = clone.lease().expires_at() + Duration::from_millis(500);
    tokio::time::sleep_until(past_expiry).await;
    assert!(!lost.is_finished(), "lost completed after close");
    lost.abort();
    // Closing another clone again is harmless (the lease is already gone).
    clone.close().await.unwrap();

    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_behind_its_back_the_session_is_lost() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    const TTL: Duration = Duration::from_secs(3);
    let session = Session::new(&client, TTL).await.unwrap();
    let key = support::unique("session-lost");
    client
        .kv()
        .put(
            key.as_str(),
            "v",
            PutOptions::new().with_lease(session.lease_id()),
        )
        .await
        .unwrap();

    let revoked = Instant::now();
    client.lease().revoke(session.lease_id()).await.unwrap();
    timeout(TTL, session.lost())
        .await
        .expect("lost within a TTL of the revoke");
    let took = revoked.elapsed();
    eprintln!("session lost {took:?} after the revoke");
    // Heard with the next renewal, before the local expiry.
    assert!(took <= TTL / 3 + Duration::from_secs(1), "{took:?}");
    timeout(Duration::from_millis(100), session.done())
        .await
        .expect("done completes when lost");
    assert!(session.lease().is_expired());
    assert!(!exists(&client, &key).await);
    // Closing a lost session is fine.
    session.close().await.unwrap();

    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lease_on_existing_and_missing_leases() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    const TTL: Duration = Duration::from_secs(3);

    let id = client.lease().grant(3, None).await.unwrap().id;
    let session = Session::with_lease(&client, id, TTL).await.unwrap();
    assert_eq!(session.lease_id(), id);
    sleep(TTL * 2).await;
    assert!(!session.lease().is_expired());
    let info = client.lease().time_to_live(id, false).await.unwrap();
    assert!(info.ttl >= 1, "server ttl {}", info.ttl);

    // Dropping the session without closing stops renewing but does not revoke.
    drop(session);
    let info = client.lease().time_to_live(id, false).await.unwrap();
    assert!(info.ttl >= 1, "revoked on drop: ttl {}", info.ttl);
    let deadline = Instant::now() + TTL + Duration::from_secs(5);
    while client.lease().time_to_live(id, false).await.unwrap().ttl != -1 {
        assert!(Instant::now() < deadline, "still renewed after the drop");
        sleep(Duration::from_millis(100)).await;
    }

    // Gone: no session on it.
    assert!(matches!(
        Session::with_lease(&client, id, TTL).await,
        Err(Error::LeaseNotFound)
    ));

    drop(cluster);
}
