//! etcd's server-side Election and Lock services against a real 3-member etcd: leadership
//! hand-over, observation, blocking waiters, release by unlock and by lease revocation.
//!
//! Run against etcd 3.4 too: `ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test --features testkit --test election_lock`.

mod support;

use std::future::Future;
use std::time::Duration;

use etcd_ha::{Client, Error, GetOptions};
use tokio::task::JoinHandle;

/// Bound on a campaign or lock that should succeed at once (they have no client deadline).
const PROMPT: Duration = Duration::from_secs(10);

/// How long a waiter is watched to show that it really waits.
const STILL_WAITING: Duration = Duration::from_secs(1);

/// Lease TTL for candidates and lock holders: long enough to outlive the test, so only an
/// explicit resign, unlock or revoke ends their hold.
const TTL: i64 = 60;

async fn grant(client: &Client) -> i64 {
    client.lease().grant(TTL, None).await.unwrap().id
}

/// Awaits `f`, which must finish within [`PROMPT`].
async fn prompt<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(PROMPT, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {PROMPT:?}"))
}

/// Checks that `waiter` is still blocked after [`STILL_WAITING`].
async fn assert_waiting<T>(what: &str, waiter: &JoinHandle<T>) {
    tokio::time::sleep(STILL_WAITING).await;
    assert!(!waiter.is_finished(), "{what} should still be waiting");
}

/// The lease a key is attached to, read back through the KV service.
async fn lease_of(client: &Client, key: &[u8]) -> i64 {
    let got = client.kv().get(key, GetOptions::new()).await.unwrap();
    assert_eq!(
        got.kvs.len(),
        1,
        "{:?} exists",
        String::from_utf8_lossy(key)
    );
    got.kvs[0].lease
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_campaign_proclaim_observe_and_hand_over() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let election = client.election();
    let name = support::unique("election/hand-over");

    let first_lease = grant(&client).await;
    let won = prompt(
        "an uncontested campaign",
        election.campaign(name.as_str(), first_lease, "a"),
    )
    .await
    .unwrap();
    let first = won.leader.expect("a leader key");
    assert_eq!(first.name, name.as_bytes());
    assert!(first.key.starts_with(format!("{name}/").as_bytes()));
    assert_eq!(first.lease, first_lease);
    assert!(first.rev > 0);
    assert_eq!(lease_of(&client, &first.key).await, first_lease);

    let leader = election.leader(name.as_str()).await.unwrap().kv.unwrap();
    assert_eq!(leader.key, first.key);
    assert_eq!(leader.value, b"a");
    assert_eq!(leader.create_revision, first.rev);
    assert_eq!(leader.lease, first_lease);

    // Observe starts with the current value, then follows every change.
    let mut observed = election.observe(name.as_str()).await.unwrap();
    let seen = prompt("the first observation", observed.message())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen.kv.unwrap().value, b"a");

    election.proclaim(first.clone(), "b").await.unwrap();
    let leader = election.leader(name.as_str()).await.unwrap().kv.unwrap();
    assert_eq!(leader.value, b"b");
    assert_eq!(leader.create_revision, first.rev, "same leader, new value");
    let seen = prompt("the proclaimed value", observed.message())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen.kv.unwrap().value, b"b");

    // A second candidate waits on the server for as long as the first leads.
    let second_lease = grant(&client).await;
    let contender = {
        let election = election.clone();
        let name = name.clone();
        tokio::spawn(async move { election.campaign(name, second_lease, "c").await })
    };
    assert_waiting("the second campaign", &contender).await;
    assert_eq!(
        election
            .leader(name.as_str())
            .await
            .unwrap()
            .kv
            .unwrap()
            .value,
        b"b",
        "the first candidate still leads"
    );

    election.resign(first.clone()).await.unwrap();
    let second = prompt("the second campaign after the resignation", contender)
        .await
        .unwrap()
        .unwrap()
        .leader
        .unwrap();
    assert_eq!(second.lease, second_lease);
    assert_ne!(second.key, first.key);
    assert!(second.rev > first.rev);
    let leader = election.leader(name.as_str()).await.unwrap().kv.unwrap();
    assert_eq!(leader.key, second.key);
    assert_eq!(leader.value, b"c");
    let seen = prompt("the new leader's value", observed.message())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen.kv.unwrap().value, b"c");

    // The first candidate's key is gone, and its lease lives on (resign only deletes the key).
    let gone = client
        .kv()
        .get(first.key.clone(), GetOptions::new())
        .await
        .unwrap();
    assert_eq!(gone.count, 0);
    assert!(
        client
            .lease()
            .time_to_live(first_lease, false)
            .await
            .unwrap()
            .ttl
            > 0
    );
}

/// The Election service's own failures ("election: no leader", "election: not leader") have
/// variants of their own: mapping them to `NoLeader` / `NotLeader` would be wrong, those mean a
/// raft condition that a retry on another member can fix.
fn assert_election_error(result: etcd_ha::Result<impl std::fmt::Debug>, message: &str) {
    match (result, message) {
        (Err(Error::ElectionNoLeader), "election: no leader") => {}
        (Err(Error::ElectionNotLeader), "election: not leader") => {}
        (other, _) => panic!("expected {message:?}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_failures_are_reported() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let election = client.election();
    let name = support::unique("election/failures");

    assert_election_error(election.leader(name.as_str()).await, "election: no leader");

    // A candidate's key must live on a lease that exists.
    let revoked = grant(&client).await;
    client.lease().revoke(revoked).await.unwrap();
    let campaign = election.campaign(name.as_str(), revoked, "x");
    assert!(matches!(
        prompt("a campaign with a revoked lease", campaign).await,
        Err(Error::LeaseNotFound)
    ));
    assert_election_error(election.leader(name.as_str()).await, "election: no leader");

    // Once resigned, a leader key is worthless: proclaiming with it fails, resigning again is a
    // no-op, and the election is empty again.
    let lease = grant(&client).await;
    let campaign = election.campaign(name.as_str(), lease, "x");
    let key = prompt("a campaign", campaign)
        .await
        .unwrap()
        .leader
        .unwrap();
    election.resign(key.clone()).await.unwrap();
    assert_election_error(
        election.proclaim(key.clone(), "y").await,
        "election: not leader",
    );
    election.resign(key).await.unwrap();
    assert_election_error(election.leader(name.as_str()).await, "election: no leader");

    // With lease 0 the server makes a lease of its own: 60 s, and nobody keeps it alive.
    let campaign = election.campaign(name.as_str(), 0, "z");
    let key = prompt("a campaign without a lease", campaign)
        .await
        .unwrap()
        .leader
        .unwrap();
    assert_ne!(key.lease, 0);
    let lease = client.lease().time_to_live(key.lease, false).await.unwrap();
    assert_eq!(lease.granted_ttl, 60);
    assert_eq!(lease_of(&client, &key.key).await, key.lease);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_waiters_queue_until_unlock_or_lease_revocation() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let lock = client.lock();
    let name = support::unique("lock/queue");

    // The ownership key is `<name>/<lease id in hex>`, attached to the lease.
    let first_lease = grant(&client).await;
    let first = prompt("an uncontested lock", lock.lock(name.as_str(), first_lease))
        .await
        .unwrap()
        .key;
    assert_eq!(first, format!("{name}/{first_lease:x}").into_bytes());
    assert_eq!(lease_of(&client, &first).await, first_lease);

    // A second locker waits until the holder unlocks.
    let second_lease = grant(&client).await;
    let second = {
        let lock = lock.clone();
        let name = name.clone();
        tokio::spawn(async move { lock.lock(name, second_lease).await })
    };
    assert_waiting("the second lock", &second).await;
    lock.unlock(first.clone()).await.unwrap();
    let second = prompt("the second lock after the unlock", second)
        .await
        .unwrap()
        .unwrap()
        .key;
    assert_eq!(second, format!("{name}/{second_lease:x}").into_bytes());
    let gone = client
        .kv()
        .get(first.clone(), GetOptions::new())
        .await
        .unwrap();
    assert_eq!(gone.count, 0);

    // A third waits until the second holder's lease is revoked, as when its owner dies and the
    // lease expires.
    let third_lease = grant(&client).await;
    let third = {
        let lock = lock.clone();
        let name = name.clone();
        tokio::spawn(async move { lock.lock(name, third_lease).await })
    };
    assert_waiting("the third lock", &third).await;
    client.lease().revoke(second_lease).await.unwrap();
    let third = prompt("the third lock after the revocation", third)
        .await
        .unwrap()
        .unwrap()
        .key;
    assert_eq!(lease_of(&client, &third).await, third_lease);
    let gone = client.kv().get(second, GetOptions::new()).await.unwrap();
    assert_eq!(gone.count, 0);

    // Unlock is a plain delete: a key that holds nothing (released, or never a lock at all) is
    // fine and writes nothing.
    let unlocked = lock.unlock(third).await.unwrap();
    let revision = unlocked.header.unwrap().revision;
    let again = lock.unlock(first).await.unwrap();
    assert_eq!(again.header.unwrap().revision, revision);
    let unknown = lock.unlock(format!("{name}/unknown")).await.unwrap();
    assert_eq!(unknown.header.unwrap().revision, revision);

    // A lock needs a lease that exists; with lease 0 the server makes its own, of 60 s, that
    // nobody keeps alive: such a lock goes away by itself after a minute.
    let revoked = grant(&client).await;
    client.lease().revoke(revoked).await.unwrap();
    assert!(matches!(
        prompt(
            "a lock with a revoked lease",
            lock.lock(name.as_str(), revoked)
        )
        .await,
        Err(Error::LeaseNotFound)
    ));
    let held = prompt("a lock without a lease", lock.lock(name.as_str(), 0))
        .await
        .unwrap()
        .key;
    let lease = lease_of(&client, &held).await;
    assert_ne!(lease, 0);
    let ttl = client.lease().time_to_live(lease, false).await.unwrap();
    assert_eq!(ttl.granted_ttl, 60);
    assert!(ttl.ttl <= 60);
}
