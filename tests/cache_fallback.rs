//! A [`Cache`] made with `with_etcd_fallback` against a real 3-member cluster: while its
//! stream's member is frozen (a follower, so writes and quorum reads go on), reads it cannot
//! make fresh in time are served by etcd itself and still see every write acknowledged before
//! them; an at-least read of a revision etcd has not reached still fails; a cache made without
//! the option, its own stream's member frozen the same way, fails with `NotFresh` instead of
//! reading etcd.

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

/// What reads through `cache` saw while its stream's member was frozen.
struct Frozen {
    reads: usize,
    refused: usize,
    last: i64,
}

/// Freeze the member that feeds `cache` (made a follower first), then write a key and read it
/// back through the cache, consistently and at least at the write's revision, until `done`
/// or 20 s; every read that answers must see the write. Thaws the member.
async fn reads_while_frozen(
    cluster: &Cluster,
    writer: &Client,
    reader: &Client,
    cache: &Cache,
    prefix: &str,
    done: impl Fn(&Frozen) -> bool,
) -> Frozen {
    let member = stream_member(cluster, cache);
    not_leading(writer, cluster, member).await;
    assert_eq!(stream_member(cluster, cache), member, "the stream stayed");
    // Both clients know the leader: a put must not go to the member about to freeze.
    let leader = cluster.endpoint(cluster.leader(support::READY).await.unwrap());
    for client in [writer, reader] {
        let until = Instant::now() + support::READY;
        while !client
            .endpoints()
            .iter()
            .any(|e| e.is_leader && e.url.trim_end_matches('/') == leader.trim_end_matches('/'))
        {
            assert!(Instant::now() < until, "the client does not see the leader");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    cluster.stop(member);
    let frozen = Instant::now();
    let mut seen = Frozen {
        reads: 0,
        refused: 0,
        last: 0,
    };
    // The client soon finds the frozen member silent and moves the stream, after which the
    // cache is fresh again: what is looked for happens in the first reads or not at all.
    while !done(&seen) && frozen.elapsed() < Duration::from_secs(20) {
        let key = format!("{prefix}{}", seen.reads % 5);
        let value = format!("w{}", seen.reads);
        let put = writer
            .kv()
            .put(key.as_str(), value.as_str(), PutOptions::new())
            .await
            .unwrap();
        seen.last = put.header.unwrap().revision;
        seen.reads += 1;
        match cache.get(&key, Freshness::Consistent).await {
            Ok(read) => {
                assert!(
                    read.revision >= seen.last,
                    "{} < {}",
                    read.revision,
                    seen.last
                );
                assert_eq!(read.value.expect("written").value, value.as_bytes());
            }
            Err(Error::NotFresh { .. }) => {
                seen.refused += 1;
                continue;
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
        match cache.list(Freshness::AtLeast(seen.last)).await {
            Ok(all) => assert!(all.revision >= seen.last && all.value.len() == 5, "{all:?}"),
            Err(Error::NotFresh { .. }) => seen.refused += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    cluster.cont(member);
    seen
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

    // With the option: etcd serves what the cache cannot, and never refuses.
    let cache = Cache::new(
        &reader,
        prefix.clone(),
        options.clone().with_etcd_fallback(),
    )
    .await
    .unwrap();
    let seen = reads_while_frozen(&cluster, &writer, &reader, &cache, &prefix, |_| {
        cache.stats().fallbacks > 0
    })
    .await;
    let stats = cache.stats();
    println!("with the fallback: {} reads; {stats:?}", seen.reads);
    assert!(stats.fallbacks > 0, "no read fell back to etcd: {stats:?}");
    assert_eq!(seen.refused, 0);

    // Without it: the same freeze makes reads fail with NotFresh; none reads etcd.
    let strict = Cache::new(&reader, prefix.clone(), options).await.unwrap();
    let refused = reads_while_frozen(&cluster, &writer, &reader, &strict, &prefix, |s| {
        s.refused > 0
    })
    .await;
    println!(
        "without: {} reads, {} refused",
        refused.reads, refused.refused
    );
    assert!(
        refused.refused > 0,
        "the cache without the option never refused"
    );
    assert_eq!(strict.stats().fallbacks, 0);

    // A token etcd has not reached: etcd's answer would be older than asked, so no fallback;
    // a cache never answers below the token it was given.
    let token = seen.last.max(refused.last) + 1_000_000;
    for cache in [&cache, &strict] {
        let beyond = cache
            .get(format!("{prefix}0"), Freshness::AtLeast(token))
            .await;
        assert!(matches!(beyond, Err(Error::NotFresh { .. })), "{beyond:?}");
    }
}
