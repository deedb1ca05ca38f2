//! A [`Cache`] made with `with_etcd_fallback` against a real 3-member cluster: while its
//! stream's member is frozen (a follower, so writes and quorum reads go on), reads it cannot
//! make fresh in time are served by etcd itself and still see every write acknowledged before
//! them; an at-least read of a revision etcd has not reached still fails; a cache made without
//! the option fails with `NotFresh` instead of reading etcd.

mod support;

use std::time::Duration;

use etcd_ha::testkit::Cluster;
use etcd_ha::{Cache, CacheOptions, Client, Error, Freshness, PutOptions};
use tokio::time::Instant;

/// How long a fresh read waits before it falls back (or fails): well under the ~250 ms the
/// client takes to find the frozen member silent and move the caches' streams (after which
/// they are fresh again and the fallback has nothing to do).
const READ_TIMEOUT: Duration = Duration::from_millis(50);

/// The index of the member whose stream feeds `cache`.
fn stream_member(cluster: &Cluster, cache: &Cache) -> usize {
    let url = cache.stream_endpoint().expect("a stream feeds the cache");
    (0..cluster.len())
        .find(|&i| cluster.endpoint(i) == url)
        .unwrap_or_else(|| panic!("{url} is not in {:?}", cluster.endpoints()))
}

/// Move leadership off `member` if it leads, so that freezing it stops no write.
async fn not_leading(client: &Client, cluster: &Cluster, member: usize) {
    if cluster.leader(support::READY).await.unwrap() != member {
        return;
    }
    let target = client
        .endpoints()
        .iter()
        .find(|e| e.url.trim_end_matches('/') != cluster.endpoint(member).trim_end_matches('/'))
        .and_then(|e| e.member_id)
        .expect("another member with a known id");
    client.maintenance().move_leader(target).await.unwrap();
    let until = Instant::now() + support::READY;
    while cluster.leader(support::READY).await.unwrap() == member {
        assert!(Instant::now() < until, "leadership did not move");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    support::all_healthy(client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_that_cannot_be_made_fresh_reads_etcd_only_when_asked() {
    let cluster = support::cluster3().await;
    let writer = support::client(&cluster).await;
    let reader = support::client(&cluster).await;
    let prefix = format!("{}/", support::unique("cache-fallback"));
    for i in 0..5 {
        let key = format!("{prefix}{i}");
        writer.kv().put(key, "v", PutOptions::new()).await.unwrap();
    }
    let options = CacheOptions::new()
        .with_prefix()
        .with_read_timeout(READ_TIMEOUT);
    let cache = Cache::new(
        &reader,
        prefix.clone(),
        options.clone().with_etcd_fallback(),
    )
    .await
    .unwrap();
    // A second cache fed by the same member, without the option; that member a follower.
    let mut pair = None;
    for _ in 0..30 {
        let member = stream_member(&cluster, &cache);
        not_leading(&writer, &cluster, member).await;
        let strict = Cache::new(&reader, prefix.clone(), options.clone())
            .await
            .unwrap();
        let leader = cluster.leader(support::READY).await.unwrap();
        if stream_member(&cluster, &strict) == member
            && stream_member(&cluster, &cache) == member
            && leader != member
        {
            pair = Some((strict, member));
            break;
        }
    }
    let (strict, member) = pair.expect("two caches fed by one follower");

    // Both clients know the leader now: a put must not go to the member about to freeze.
    let leader = cluster.endpoint(cluster.leader(support::READY).await.unwrap());
    for client in [&writer, &reader] {
        let until = Instant::now() + support::READY;
        while !client
            .endpoints()
            .iter()
            .any(|e| e.is_leader && e.url.trim_end_matches('/') == leader.trim_end_matches('/'))
        {
            assert!(
                Instant::now() < until,
                "the client does not see the new leader"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    cluster.stop(member);
    let frozen = Instant::now();
    let (mut reads, mut refused, mut last) = (0, 0, 0);
    // Until etcd served a read: the managed watch leaves the frozen member in time, after
    // which the cache is fresh again and serves reads itself.
    while cache.stats().fallbacks == 0 && frozen.elapsed() < Duration::from_secs(20) {
        let key = format!("{prefix}{}", reads % 5);
        let value = format!("w{reads}");
        let put = writer
            .kv()
            .put(key.as_str(), value.as_str(), PutOptions::new())
            .await
            .unwrap();
        last = put.header.unwrap().revision;
        // Both at once, while the frozen member still feeds both caches (the client soon
        // finds it dead and moves their streams, after which both are fresh again).
        let (read, other) = tokio::join!(
            cache.get(&key, Freshness::Consistent),
            strict.get(&key, Freshness::Consistent)
        );
        let read = read.unwrap();
        assert!(read.revision >= last, "{} below {last}", read.revision);
        assert_eq!(read.value.expect("written").value, value.as_bytes());
        match other {
            Err(Error::NotFresh { .. }) => refused += 1,
            Ok(read) => assert_eq!(read.value.expect("written").value, value.as_bytes()),
            Err(e) => panic!("unexpected error: {e}"),
        }
        let all = cache.list(Freshness::AtLeast(last)).await.unwrap();
        assert!(all.revision >= last && all.value.len() == 5, "{all:?}");
        reads += 1;
    }
    cluster.cont(member);
    let stats = cache.stats();
    println!("{reads} reads, {refused} refused without the option; {stats:?}");
    assert!(stats.fallbacks > 0, "no read fell back to etcd: {stats:?}");
    assert!(
        refused > 0,
        "the cache without the option never refused a read"
    );
    assert_eq!(strict.stats().fallbacks, 0);

    // A token etcd has not reached: etcd's answer would be older than asked, so no fallback;
    // a cache never answers below the token it was given.
    for cache in [&cache, &strict] {
        let beyond = cache
            .get(format!("{prefix}0"), Freshness::AtLeast(last + 1_000_000))
            .await;
        assert!(matches!(beyond, Err(Error::NotFresh { .. })), "{beyond:?}");
    }
}
