//! Lease grant and revoke are sent at most once (issue 8, defect 4): a slow grant is not hedged
//! to another member, so it never leaves an orphan lease behind.
//!
//! The leader sits behind a TCP proxy that delays every chunk both ways, so a grant's round trip
//! through it takes far longer than the hedge delay. Were the grant hedged, the hedge (through a
//! follower) and the delayed original would each grant a lease, and the caller would learn of
//! one only.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use etcd_ha::testkit::{FaultProxy, Mode};
use etcd_ha::{Candidate, Client, LeaderFirst, Options, PickPolicy, Route};
use tokio::time::{Instant, sleep};

/// Delay of each chunk through the proxy: a round trip takes at least twice this, well past the
/// attempt timeout below, and a probe (Status then a read, 4 x this) stays within its 1 s.
const LATENCY: Duration = Duration::from_millis(150);

/// The hedge delay: a repeatable call waiting this long on one member is also sent to another.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(50);

/// Leader-bound calls to the leader, always: never the detour around its slow link (the
/// default pick takes it once probes confirm the link is slow, and a grant forwarded by a
/// follower would not cross the proxy this test needs it to cross), and a hedge, were there
/// one, to the leader again, where it would grant a second lease just the same.
#[derive(Debug)]
struct LeaderAlways;

impl PickPolicy for LeaderAlways {
    fn pick(&self, route: Route, candidates: &[Candidate], tried: &[bool]) -> usize {
        match candidates.iter().position(Candidate::is_leader) {
            Some(leader) if route.is_leader_bound() => leader,
            _ => LeaderFirst.pick(route, candidates, tried),
        }
    }
}

/// The ids of every lease the cluster holds.
async fn lease_ids(client: &Client) -> HashSet<i64> {
    client
        .lease()
        .leases()
        .await
        .expect("list leases")
        .leases
        .iter()
        .map(|l| l.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_grant_is_not_hedged_and_leaves_no_orphan_lease() {
    let cluster = support::cluster3().await;
    let leader = cluster.leader(support::READY).await.unwrap();
    let proxy = FaultProxy::start(cluster.client_addr(leader)).unwrap();
    let endpoints: Vec<String> = support::through_proxy(&cluster, leader, &proxy);
    // Member sync would swap the proxy for the leader's advertised URL: keep the list as given.
    let options = Options::new()
        .without_member_sync()
        .with_attempt_timeout(ATTEMPT_TIMEOUT)
        .with_request_timeout(Duration::from_secs(10))
        .with_pick_policy(LeaderAlways);
    let client = Client::connect(&endpoints, options).await.unwrap();
    // Lease calls go to the leader: make sure the client knows it leads through the proxy.
    let until = Instant::now() + Duration::from_secs(10);
    while !client
        .endpoints()
        .iter()
        .any(|e| e.is_leader && e.url == proxy.url("http"))
    {
        assert!(Instant::now() < until, "the proxied leader is never known");
        sleep(Duration::from_millis(50)).await;
    }
    // A second client, straight to the members, to count leases.
    let observer = support::client(&cluster).await;
    let before = lease_ids(&observer).await;

    proxy.set_mode(Mode::Latency(LATENCY));
    let mut granted = HashSet::new();
    let mut fastest = Duration::MAX;
    for _ in 0..3 {
        let started = Instant::now();
        let lease = client.lease().grant(60, None).await.expect("grant");
        fastest = fastest.min(started.elapsed());
        granted.insert(lease.id);
    }
    // Revoke through the same slow link: one answer, the right one.
    let revoked = *granted.iter().next().unwrap();
    client.lease().revoke(revoked).await.expect("revoke");
    proxy.set_mode(Mode::Pass);
    // The delayed original of a hedged grant lands within a round trip or two.
    sleep(LATENCY * 8).await;

    let after = lease_ids(&observer).await;
    let new: HashSet<i64> = after.difference(&before).copied().collect();
    let mut expected = granted.clone();
    expected.remove(&revoked);
    assert_eq!(
        new, expected,
        "leases the cluster holds now that it did not before, vs the ones granted and not \
         revoked: an extra lease is an orphan of a hedged grant"
    );
    // Each grant went through the slow leader link, and only there (else this test proves
    // nothing): a round trip through the proxy takes twice its latency.
    assert!(
        fastest >= LATENCY * 2,
        "a grant took {fastest:?}: not (only) through the proxied leader"
    );
}
