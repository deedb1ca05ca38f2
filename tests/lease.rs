//! Behaviour of the Lease service against a real 3-member cluster: grant, list, time to live,
//! revoke, the raw keep-alive stream, and expiry of a lease nobody renews.
//!
//! Run against etcd 3.4 too: `ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test --features testkit --test lease`.

mod support;

use std::time::Duration;

use etcd_ha::proto::etcdserverpb::LeaseKeepAliveResponse;
use etcd_ha::{Client, Error, GetOptions, PutOptions, ResponseStream};
use tokio::time::{Instant, sleep, timeout};

/// How long a keep-alive answer may take on a loaded 2-core box.
const ANSWER: Duration = Duration::from_secs(10);

/// The next keep-alive answer, failing the test if none comes.
async fn answer(stream: &mut ResponseStream<LeaseKeepAliveResponse>) -> LeaseKeepAliveResponse {
    timeout(ANSWER, stream.message())
        .await
        .expect("a keep-alive answer in time")
        .expect("the keep-alive stream stays healthy")
        .expect("the keep-alive stream stays open")
}

/// Whether `key` exists.
async fn exists(client: &Client, key: &str) -> bool {
    let resp = client.kv().get(key, GetOptions::new()).await.expect("get");
    !resp.kvs.is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_list_time_to_live_and_revoke() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let lease = client.lease();
    let p = support::unique("lease");

    // A server-chosen id.
    let chosen = lease.grant(60, None).await.unwrap();
    assert_ne!(chosen.id, 0);
    assert_eq!(chosen.ttl, 60);

    // An explicit id is kept; asking for it again is refused.
    let explicit_id = 0x7e57_0000_0001;
    let explicit = lease.grant(30, Some(explicit_id)).await.unwrap();
    assert_eq!((explicit.id, explicit.ttl), (explicit_id, 30));
    assert!(matches!(
        lease.grant(30, Some(explicit_id)).await,
        Err(Error::LeaseExists)
    ));

    // A TTL below etcd's minimum (1.5 election timeouts, 2 s with default timing) is raised.
    let short = lease.grant(1, None).await.unwrap();
    assert!(short.ttl >= 2, "granted {} s", short.ttl);

    // Both leases are listed.
    let listed: Vec<i64> = lease
        .leases()
        .await
        .unwrap()
        .leases
        .iter()
        .map(|l| l.id)
        .collect();
    assert!(listed.contains(&chosen.id), "{listed:?}");
    assert!(listed.contains(&explicit_id), "{listed:?}");

    // Time to live, with and without the attached keys.
    let keys = [format!("{p}/a"), format!("{p}/b")];
    for key in &keys {
        client
            .kv()
            .put(key.as_str(), "v", PutOptions::new().with_lease(chosen.id))
            .await
            .unwrap();
    }
    let info = lease.time_to_live(chosen.id, true).await.unwrap();
    assert_eq!(info.id, chosen.id);
    assert_eq!(info.granted_ttl, 60);
    assert!((50..=60).contains(&info.ttl), "ttl {}", info.ttl);
    let mut attached = info.keys.clone();
    attached.sort();
    assert_eq!(attached, keys.clone().map(String::into_bytes));
    let bare = lease.time_to_live(chosen.id, false).await.unwrap();
    assert!(bare.keys.is_empty());
    assert_eq!(bare.granted_ttl, 60);

    // Revoke deletes the attached keys and forgets the lease.
    lease.revoke(chosen.id).await.unwrap();
    for key in &keys {
        assert!(!exists(&client, key).await, "{key} outlived its lease");
    }
    let gone = lease.time_to_live(chosen.id, true).await.unwrap();
    assert_eq!(gone.ttl, -1);
    assert!(gone.keys.is_empty());
    let listed: Vec<i64> = lease
        .leases()
        .await
        .unwrap()
        .leases
        .iter()
        .map(|l| l.id)
        .collect();
    assert!(!listed.contains(&chosen.id), "{listed:?}");
    assert!(listed.contains(&explicit_id), "{listed:?}");

    // A revoked or unknown lease cannot be used or revoked.
    assert!(matches!(
        client
            .kv()
            .put(
                format!("{p}/late"),
                "v",
                PutOptions::new().with_lease(chosen.id)
            )
            .await,
        Err(Error::LeaseNotFound)
    ));
    assert!(!exists(&client, &format!("{p}/late")).await);
    assert!(matches!(
        lease.revoke(chosen.id).await,
        Err(Error::LeaseNotFound)
    ));
    assert!(matches!(
        lease.revoke(0x0bad_1ea5e).await,
        Err(Error::LeaseNotFound)
    ));

    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_stream_renews_until_revoked() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let lease = client.lease();
    let key = support::unique("kept");

    const TTL: i64 = 3;
    let id = lease.grant(TTL, None).await.unwrap().id;
    let other = lease.grant(60, None).await.unwrap().id;
    client
        .kv()
        .put(key.as_str(), "alive", PutOptions::new().with_lease(id))
        .await
        .unwrap();

    let (sender, mut answers) = lease.keep_alive(id).await.unwrap();
    let first = answer(&mut answers).await;
    assert_eq!(first.id, id);
    assert_eq!(first.ttl, TTL);

    // Renew every ~TTL/3 for twice the TTL: the lease (and its key) must outlive its TTL.
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(2 * TTL as u64) {
        sleep(Duration::from_millis(1000)).await;
        sender.keep_alive(id).await.unwrap();
        let renewed = answer(&mut answers).await;
        assert_eq!((renewed.id, renewed.ttl), (id, TTL));
    }
    let info = lease.time_to_live(id, true).await.unwrap();
    assert!(
        info.ttl >= TTL - 2 && info.ttl <= TTL,
        "ttl {} after renewing",
        info.ttl
    );
    assert_eq!(info.keys, [key.clone().into_bytes()]);
    assert!(exists(&client, &key).await);

    // One stream serves several leases; answers name the lease they are for.
    sender.keep_alive(other).await.unwrap();
    let for_other = answer(&mut answers).await;
    assert_eq!((for_other.id, for_other.ttl), (other, 60));

    // A revoked lease answers with ttl <= 0 and the stream stays usable.
    lease.revoke(id).await.unwrap();
    sender.keep_alive(id).await.unwrap();
    let dead = answer(&mut answers).await;
    assert_eq!(dead.id, id);
    assert!(dead.ttl <= 0, "ttl {} for a revoked lease", dead.ttl);
    assert!(!exists(&client, &key).await);
    sender.keep_alive(other).await.unwrap();
    assert_eq!(answer(&mut answers).await.ttl, 60);

    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_not_kept_alive_expires_with_its_keys() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let lease = client.lease();
    let key = support::unique("expiring");

    let granted = lease.grant(2, None).await.unwrap();
    let began = Instant::now();
    client
        .kv()
        .put(
            key.as_str(),
            "soon gone",
            PutOptions::new().with_lease(granted.id),
        )
        .await
        .unwrap();
    assert!(exists(&client, &key).await);

    // The leader checks expiry every 500 ms and revokes through raft; allow a loaded box 10 s on
    // top of the TTL.
    let limit = Duration::from_secs(granted.ttl as u64 + 10);
    while exists(&client, &key).await {
        assert!(
            began.elapsed() < limit,
            "key still there {:?} after the grant",
            began.elapsed()
        );
        sleep(Duration::from_millis(200)).await;
    }
    let lived = began.elapsed();
    // Not before the TTL (a little slack for clock granularity: etcd counts from its own grant).
    assert!(
        lived >= Duration::from_millis(granted.ttl as u64 * 1000 - 500),
        "expired after only {lived:?}"
    );

    let info = lease.time_to_live(granted.id, false).await.unwrap();
    assert_eq!(info.ttl, -1);
    assert!(matches!(
        client
            .kv()
            .put(
                key.as_str(),
                "again",
                PutOptions::new().with_lease(granted.id)
            )
            .await,
        Err(Error::LeaseNotFound)
    ));
    // Opening a keep-alive stream for the expired lease answers ttl <= 0 at once.
    let (_keeper, mut answers) = lease.keep_alive(granted.id).await.unwrap();
    let first = answer(&mut answers).await;
    assert_eq!(first.id, granted.id);
    assert!(first.ttl <= 0, "ttl {}", first.ttl);

    drop(cluster);
}

/// Issue 9, defect 4: a TTL above etcd's maximum is refused with a typed error by every way
/// of granting one (it would otherwise overflow the keeper's time arithmetic), while the
/// maximum itself is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_above_etcds_maximum_are_refused_with_a_typed_error() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let max = etcd_ha::MAX_LEASE_TTL;
    let too_long = Duration::from_secs(max.unsigned_abs() + 1);
    let refused = |r: &Result<(), Error>| match r {
        Err(Error::LeaseTtlTooLarge { max_secs }) => *max_secs == max,
        _ => false,
    };

    for ttl in [max + 1, i64::MAX] {
        let r = client.lease().grant(ttl, None).await.map(|_| ());
        assert!(refused(&r), "grant {ttl}: {r:?}");
    }
    for ttl in [too_long, Duration::MAX] {
        let r = client.keeper().grant(ttl).await.map(|_| ());
        assert!(refused(&r), "keeper grant {ttl:?}: {r:?}");
        let r = etcd_ha::Session::new(&client, ttl).await.map(|_| ());
        assert!(refused(&r), "session {ttl:?}: {r:?}");
        let r = client.keeper().keep(1, ttl).await.map(|_| ());
        assert!(refused(&r), "keep {ttl:?}: {r:?}");
        let leadership =
            etcd_ha::concurrency::Leadership::new(&client, support::unique("ttl"), "v")
                .with_ttl(ttl);
        let r = leadership.campaign().await.map(|_| ());
        assert!(refused(&r), "leadership {ttl:?}: {r:?}");
    }

    // The maximum itself is etcd's to grant, and the keeper keeps it without trouble.
    let kept = client
        .keeper()
        .grant(Duration::from_secs(max.unsigned_abs()))
        .await
        .expect("etcd grants its maximum TTL");
    assert_eq!(kept.ttl(), Duration::from_secs(max.unsigned_abs()));
    assert!(!kept.is_expired());
    client.lease().revoke(kept.id()).await.unwrap();
}
