//! The watch-fed [`Cache`] against a real 3-member cluster: what it holds equals the range,
//! a consistent read sees every write that completed before it (made by another client),
//! waiting readers share quorum reads, a compaction past its resume point reloads, and the
//! cache follows its range through a kill of its stream's member. On servers whose progress
//! answers prove nothing (before 3.4.25 / 3.5.8) the quiet-cache proof is the range's own
//! quorum read; the tests check which proof the server got.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_ha::testkit::Cluster;
use etcd_ha::{
    Cache, CacheOptions, Client, Error, Freshness, GetOptions, PutOptions, ServerVersion,
};
use tokio::time::Instant;

/// `(key, value, mod revision)` of every key, as etcd or the cache holds it.
type Snapshot = BTreeMap<Vec<u8>, (Vec<u8>, i64)>;

async fn etcd_range(client: &Client, prefix: &str) -> (Snapshot, i64) {
    let answer = client
        .kv()
        .get(prefix, GetOptions::new().with_prefix())
        .await
        .expect("linearizable range");
    let kvs = answer
        .kvs
        .into_iter()
        .map(|kv| (kv.key, (kv.value, kv.mod_revision)))
        .collect();
    (kvs, answer.header.map_or(0, |h| h.revision))
}

async fn cached(cache: &Cache) -> (Snapshot, i64) {
    let read = cache
        .list(Freshness::Consistent)
        .await
        .expect("consistent list");
    let kvs = read
        .value
        .iter()
        .map(|kv| (kv.key.clone(), (kv.value.clone(), kv.mod_revision)))
        .collect();
    (kvs, read.revision)
}

/// Put `value` at `{prefix}{i}` for every `i` in `keys`.
async fn fill(client: &Client, prefix: &str, keys: std::ops::Range<usize>, value: &str) {
    for i in keys {
        client
            .kv()
            .put(format!("{prefix}{i}"), value, PutOptions::new())
            .await
            .unwrap();
    }
}

/// The URL and index of the member whose stream feeds `cache`.
fn stream_member(cluster: &Cluster, cache: &Cache) -> (String, usize) {
    let url = cache.stream_endpoint().expect("a stream feeds the cache");
    let member = (0..cluster.len())
        .find(|&i| cluster.endpoint(i) == url)
        .unwrap_or_else(|| panic!("{url} is not in {:?}", cluster.endpoints()));
    (url, member)
}

/// `op` until it does not fail with a lost answer (for idempotent steps through a fault).
async fn again<T, F: std::future::Future<Output = etcd_ha::Result<T>>>(
    mut op: impl FnMut() -> F,
) -> etcd_ha::Result<T> {
    loop {
        match op().await {
            Err(e) if e.class() == etcd_ha::ErrorClass::Interrupted => continue,
            other => return other,
        }
    }
}

/// Whether the cluster's members order progress answers after pending events.
fn orders_progress(cluster: &Cluster) -> bool {
    cluster
        .etcd_version()
        .parse::<ServerVersion>()
        .is_ok_and(ServerVersion::orders_progress)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_reads_see_every_write_another_client_completed() {
    let cluster = support::cluster3().await;
    let writer = support::client(&cluster).await;
    let reader = support::client(&cluster).await;
    let prefix = format!("{}/", support::unique("cache-rw"));
    for i in 0..200 {
        writer
            .kv()
            .put(
                format!("{prefix}{i:03}"),
                format!("v{i}"),
                PutOptions::new(),
            )
            .await
            .unwrap();
    }
    let cache = Cache::new(
        &reader,
        prefix.clone(),
        CacheOptions::new().with_prefix().with_page_size(64),
    )
    .await
    .expect("the cache loads");
    assert_eq!(cache.stats().loads, 1);
    let (theirs, _) = etcd_range(&writer, &prefix).await;
    assert_eq!(
        cached(&cache).await.0,
        theirs,
        "loaded: the range as etcd holds it"
    );

    // Every write the writer completed is seen by the next consistent read of the other
    // client's cache, and by a read at least at its revision.
    for i in 0..100 {
        let key = format!("{prefix}{:03}", i % 250);
        let value = format!("w{i}");
        let put = writer
            .kv()
            .put(key.as_str(), value.as_str(), PutOptions::new())
            .await
            .unwrap();
        let revision = put.header.unwrap().revision;
        let read = if i % 2 == 0 {
            cache.get(&key, Freshness::Consistent).await
        } else {
            cache.get(&key, Freshness::AtLeast(revision)).await
        }
        .expect("a fresh read");
        assert!(
            read.revision >= revision,
            "read at {} < write at {revision}",
            read.revision
        );
        assert_eq!(
            read.value.expect("the key is there").value,
            value.as_bytes()
        );
        if i % 10 == 0 {
            writer
                .kv()
                .delete(key.as_str(), Default::default())
                .await
                .unwrap();
            let gone = cache.get(&key, Freshness::Consistent).await.unwrap();
            assert!(gone.value.is_none(), "a delete is seen too");
        }
    }

    // Writes elsewhere only: the cache's range is quiet, and a consistent read must still
    // prove it is current (by a progress answer or by the range's own proof).
    let before = cache.stats();
    let mut last = 0;
    for i in 0..20 {
        let put = writer
            .kv()
            .put(format!("elsewhere/{prefix}{i}"), "x", PutOptions::new())
            .await
            .unwrap();
        last = put.header.unwrap().revision;
        let read = cache
            .list(Freshness::Consistent)
            .await
            .expect("a quiet range is fresh");
        assert_eq!(read.value.len(), cache.stats().keys);
        assert!(
            cache.revision() >= last || before.range_proofs < cache.stats().range_proofs,
            "a quiet read proved freshness"
        );
    }
    let after = cache.stats();
    if orders_progress(&cluster) {
        assert_eq!(
            after.range_proofs, 0,
            "progress answers prove freshness here: {after:?}"
        );
        assert!(
            cache.revision() >= last,
            "progress moved the cache: {after:?}"
        );
    } else {
        assert!(
            after.range_proofs > before.range_proofs,
            "the range's own proof: {after:?}"
        );
    }
    assert_eq!(cached(&cache).await.0, etcd_range(&writer, &prefix).await.0);
    // Cached reads answer at once with what the cache holds.
    let now = cache.list(Freshness::Cached).await.unwrap();
    assert_eq!(now.value.len(), after.keys);
    println!("stats: {after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_waiting_together_share_quorum_reads() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let prefix = format!("{}/", support::unique("cache-share"));
    client
        .kv()
        .put(format!("{prefix}a"), "1", PutOptions::new())
        .await
        .unwrap();
    let cache = Arc::new(
        Cache::new(&client, prefix.clone(), CacheOptions::new().with_prefix())
            .await
            .unwrap(),
    );
    let readers = 256;
    let mut tasks = Vec::new();
    for _ in 0..readers {
        let cache = cache.clone();
        let key = format!("{prefix}a");
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                cache
                    .get(&key, Freshness::Consistent)
                    .await
                    .expect("a fresh read");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let stats = cache.stats();
    println!("{} consistent reads: {stats:?}", readers * 4);
    assert!(
        stats.rounds <= (readers * 4 / 4) as u64,
        "rounds shared by the readers waiting together: {stats:?}"
    );
    assert!(stats.quorum_reads <= 2 * stats.rounds + 8, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_bad_input_are_typed_errors() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let prefix = format!("{}/", support::unique("cache-limit"));
    fill(&client, &prefix, 0..5, "v").await;
    let too_small = Cache::new(
        &client,
        prefix.clone(),
        CacheOptions::new().with_prefix().with_max_keys(4),
    )
    .await;
    assert!(
        matches!(
            too_small,
            Err(Error::CacheLimit {
                what: "keys",
                limit: 4
            })
        ),
        "{too_small:?}"
    );
    let bad = Cache::new(
        &client,
        prefix.clone(),
        CacheOptions::new().with_prefix().with_from_key(),
    )
    .await;
    assert!(matches!(bad, Err(Error::InvalidOptions { .. })), "{bad:?}");

    let cache = Cache::new(
        &client,
        prefix.clone(),
        CacheOptions::new().with_prefix().with_max_keys(8),
    )
    .await
    .unwrap();
    let outside = cache.get("elsewhere", Freshness::Cached).await;
    assert!(
        matches!(outside, Err(Error::InvalidOptions { .. })),
        "{outside:?}"
    );
    fill(&client, &prefix, 5..10, "v").await;
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match cache.list(Freshness::Cached).await {
            Err(Error::CacheLimit {
                what: "keys",
                limit: 8,
            }) => break,
            other => assert!(Instant::now() < until, "no limit error: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let consistent = cache.get(format!("{prefix}1"), Freshness::Consistent).await;
    assert!(
        matches!(consistent, Err(Error::CacheLimit { .. })),
        "{consistent:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_past_the_resume_point_reloads_the_range() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let prefix = format!("{}/", support::unique("cache-compact"));
    fill(&client, &prefix, 0..20, "old").await;
    // The cache's client knows the followers only: its stream's member can be frozen without
    // holding up the writes, which all end (compaction included) before the stream is found
    // silent (3 s) and reopened elsewhere, from a revision that is gone by then.
    let leader = cluster.leader(support::READY).await.unwrap();
    let followers: Vec<String> = (0..cluster.len())
        .filter(|&i| i != leader)
        .map(|i| cluster.endpoint(i))
        .collect();
    let options = support::options_for(&cluster).without_member_sync();
    let reader = Client::connect(followers, options).await.unwrap();
    let cache = Cache::new(&reader, prefix.clone(), CacheOptions::new().with_prefix())
        .await
        .unwrap();
    let (url, member) = stream_member(&cluster, &cache);
    assert_ne!(member, leader);
    cluster.stop(member);
    // Idempotent steps, sent again when an attempt was lost with the frozen member (a write
    // in flight to a frozen leader times out).
    let kv = client.kv();
    let writes = async {
        for i in 0..10 {
            again(|| kv.put(format!("{prefix}{i}"), "new", PutOptions::new())).await?;
        }
        for i in 15..20 {
            again(|| kv.delete(format!("{prefix}{i}"), Default::default())).await?;
        }
        let last = again(|| kv.put(format!("elsewhere/{prefix}"), "x", PutOptions::new())).await?;
        again(|| kv.compact(last.header.unwrap().revision, true)).await
    };
    let written = tokio::time::timeout(Duration::from_secs(30), writes).await;
    // Thawed only once the stream left it: a thawed member would deliver the events itself.
    let until = Instant::now() + Duration::from_secs(30);
    while cache.stream_endpoint().is_none_or(|now| now == url) && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.cont(member);
    written
        .expect("writes in time")
        .expect("writes and compaction");
    let (theirs, _) = etcd_range(&client, &prefix).await;
    let (ours, _) = cached(&cache).await;
    assert_eq!(ours, theirs, "after the reload: the range as etcd holds it");
    let stats = cache.stats();
    assert!(
        stats.reloads + stats.loads >= 2,
        "the history was gone, so it read the range again: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_follows_its_range_through_a_kill_of_its_stream_member() {
    let mut cluster = support::cluster3().await;
    let writer = support::client(&cluster).await;
    let reader = support::client(&cluster).await;
    let prefix = format!("{}/", support::unique("cache-kill"));
    let cache = Cache::new(&reader, prefix.clone(), CacheOptions::new().with_prefix())
        .await
        .unwrap();
    let (url, member) = stream_member(&cluster, &cache);
    let mut written = 0;
    let mut checked = 0;
    let started = Instant::now();
    let mut killed = false;
    while started.elapsed() < Duration::from_secs(8) {
        if !killed && started.elapsed() > Duration::from_secs(2) {
            cluster.kill(member);
            killed = true;
        }
        let key = format!("{prefix}{}", written % 50);
        let value = format!("v{written}");
        let Ok(put) = writer
            .kv()
            .put(key.as_str(), value.as_str(), PutOptions::new())
            .await
        else {
            continue;
        };
        written += 1;
        let revision = put.header.unwrap().revision;
        // A consistent read after an acknowledged write sees it, through the failover.
        match cache.get(&key, Freshness::Consistent).await {
            Ok(read) => {
                assert!(read.revision >= revision);
                assert_eq!(read.value.expect("written").value, value.as_bytes());
                checked += 1;
            }
            Err(Error::NotFresh { .. }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert!(killed);
    println!(
        "{written} writes, {checked} consistent reads checked; {:?}",
        cache.stats()
    );
    assert!(
        checked * 2 > written,
        "most reads were served: {checked} of {written}"
    );
    assert_ne!(
        cache.stream_endpoint(),
        Some(url),
        "the stream moved off the killed member"
    );
    assert_eq!(cached(&cache).await.0, etcd_range(&writer, &prefix).await.0);
    cluster.restart(member).await.unwrap();
}
