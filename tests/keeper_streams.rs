//! The keeper over several keep-alive streams (`Options::with_keep_alive_streams`) against a
//! real 3-member cluster: leases fill one stream's share before the next stream opens, every
//! stream sits on the leader, all of them move through a leader kill with no lease lost, and a
//! stream whose last lease goes stops while the others keep theirs, and is the next to fill.
//!
//! Each stream's share is set to one renewal a second, so that a lease of TTL 3 s (renewed
//! every second) fills a stream: the rule is the same at 40,000 a second, the default.

mod support;

use std::time::Duration;

use etcd_ha::testkit::Cluster;
use etcd_ha::{Client, HealthState, KeptLease, PutOptions};
use tokio::time::{Instant, sleep, timeout};

/// Renewed every second: one fills a stream whose share is one renewal a second.
const TTL: Duration = Duration::from_secs(3);

/// A client whose keeper opens up to 3 streams, one per renewal a second.
async fn client(cluster: &Cluster) -> Client {
    let options = etcd_ha_check::harness::options_for(cluster).with_keep_alive_streams(3, 1);
    Client::connect(cluster.endpoints(), options)
        .await
        .expect("connect to the test cluster")
}

/// Wait until the client knows which endpoint leads and finds every one healthy, so that the
/// leader-routed streams open there.
async fn leader_known(client: &Client) {
    timeout(support::READY, async {
        loop {
            let endpoints = client.endpoints();
            if endpoints
                .iter()
                .all(|e| e.member_id.is_some() && e.health == HealthState::Healthy)
                && endpoints.iter().any(|e| e.is_leader)
            {
                return;
            }
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the client learns the leader");
}

/// Wait until every open stream of `client`'s keeper is on `url`, and `open` of them are.
async fn streams_on(client: &Client, url: &str, open: usize) {
    let keeper = client.keeper();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let endpoints = keeper.stream_endpoints();
        let on: Vec<_> = endpoints.iter().flatten().collect();
        if on.len() == open && on.iter().all(|e| *e == url) {
            return;
        }
        assert!(
            Instant::now() < until,
            "streams {endpoints:?}, wanted {open} on {url}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

/// Wait until `lease` has been renewed at least `n` times.
async fn renewed(lease: &KeptLease, n: u64) {
    timeout(Duration::from_secs(10), async {
        while lease.renewals() < n {
            sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the keeper renews the lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_spread_over_streams_on_the_leader_and_survive_its_kill() {
    support::init_tracing();
    let mut cluster = support::cluster3_in_memory().await;
    let client = client(&cluster).await;
    leader_known(&client).await;
    let keeper = client.keeper();
    let leader = cluster.leader(support::READY).await.unwrap();

    // One lease fills a stream: three leases, three streams, every one on the leader.
    let mut leases = Vec::new();
    for _ in 0..3 {
        leases.push(keeper.grant(TTL).await.unwrap());
    }
    streams_on(&client, &cluster.endpoint(leader), 3).await;
    assert_eq!(keeper.streams_opened(), 3);
    // Past every stream's share a lease joins the least loaded stream: no fourth stream.
    leases.push(keeper.grant(TTL).await.unwrap());
    let key = support::unique("keeper-streams");
    client
        .kv()
        .put(
            key.as_str(),
            "v",
            PutOptions::new().with_lease(leases[3].id()),
        )
        .await
        .unwrap();
    for lease in &leases {
        renewed(lease, 2).await;
    }
    assert_eq!(
        keeper.stream_endpoints().iter().flatten().count(),
        3,
        "at most 3 streams"
    );
    assert_eq!(keeper.streams_opened(), 3);

    // The leader goes: every stream moves to the next leader, no lease is lost.
    let renewals: Vec<u64> = leases.iter().map(KeptLease::renewals).collect();
    cluster.kill(leader);
    let next = cluster.leader(support::READY).await.unwrap();
    streams_on(&client, &cluster.endpoint(next), 3).await;
    // Two TTLs: a lease left unrenewed would be gone by then.
    sleep(TTL * 2).await;
    for (lease, before) in leases.iter().zip(renewals) {
        assert!(!lease.is_expired(), "{lease:?} lost through the kill");
        assert!(lease.renewals() > before + 2, "{lease:?} not renewed");
        let ttl = client
            .lease()
            .time_to_live(lease.id(), false)
            .await
            .unwrap()
            .ttl;
        assert!(ttl >= 1, "{lease:?}: server ttl {ttl}");
    }
    assert!(keeper.streams_opened() >= 6, "each stream reopened");
    assert!(
        !client
            .kv()
            .get(key.as_str(), etcd_ha::GetOptions::new())
            .await
            .unwrap()
            .kvs
            .is_empty()
    );

    // The second stream's only lease goes (the fourth joined the first stream): its task
    // stops with it, the others keep theirs, and the next lease fills that stream again.
    let second = leases.remove(1);
    let second_id = second.id();
    drop(second);
    timeout(Duration::from_secs(10), async {
        while keeper.stream_endpoints()[1].is_some() {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the emptied stream closes");
    let opened = keeper.streams_opened();
    let again = keeper.grant(TTL).await.unwrap();
    renewed(&again, 2).await;
    assert_eq!(keeper.streams_opened(), opened + 1);
    assert!(
        keeper.stream_endpoints()[1].is_some(),
        "the second slot again"
    );
    for lease in &leases {
        assert!(!lease.is_expired());
    }
    let until = Instant::now() + TTL + Duration::from_secs(5);
    while client
        .lease()
        .time_to_live(second_id, false)
        .await
        .unwrap()
        .ttl
        != -1
    {
        assert!(Instant::now() < until, "a dropped lease was still renewed");
        sleep(Duration::from_millis(100)).await;
    }

    drop(cluster);
}
