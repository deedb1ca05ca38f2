//! The cache's inconsistency detector against a real 3-member cluster: a cache that lost a key
//! (as a lost event would leave it) is found by its periodic check and loads its range again,
//! its local watches reloaded with it; checks made while writes go on never report a false
//! divergence (both sides are read at one revision).

mod support;

use std::time::Duration;

use etcd_ha::{Cache, CacheOptions, CacheWatchOptions, Freshness, PutOptions, WatchBatch};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_that_lost_a_key_is_found_and_reloads() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let prefix = format!("{}/", support::unique("cache-check"));
    for i in 0..50 {
        let key = format!("{prefix}{i:02}");
        client.kv().put(key, "v", PutOptions::new()).await.unwrap();
    }
    let options = CacheOptions::new()
        .with_prefix()
        .with_check_interval(Some(Duration::from_millis(300)));
    let cache = Cache::new(&client, prefix.clone(), options).await.unwrap();
    let found = cache.check().await.unwrap();
    assert!(found.consistent, "{found:?}");
    assert_eq!((found.cached, found.etcd), (50, 50));
    let watch = CacheWatchOptions::new().with_prefix().with_reload_on_lag();
    let mut w = cache.watch(prefix.clone(), watch).await.unwrap();

    let lost = format!("{prefix}07");
    assert!(cache.testkit_forget(&lost));
    assert!(
        cache
            .get(&lost, Freshness::Cached)
            .await
            .unwrap()
            .value
            .is_none()
    );
    let started = Instant::now();
    while cache.stats().loads < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no reload: {:?}",
            cache.stats()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = cache.stats();
    assert!(s.mismatches >= 1 && s.checks >= 2, "{s:?}");
    println!("found and reloaded in {:?}: {s:?}", started.elapsed());
    let read = cache.get(&lost, Freshness::Consistent).await.unwrap();
    assert_eq!(read.value.expect("back after the reload").value, b"v");
    assert!(cache.check().await.unwrap().consistent);
    // The local watch's place is gone with the old history: it gets the range again.
    let batch = tokio::time::timeout(Duration::from_secs(5), w.next_batch())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let WatchBatch::Reloaded { kvs, .. } = batch else {
        panic!("a reload expected: {batch:?}")
    };
    assert_eq!(kvs.len(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_during_writes_find_no_false_divergence() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let writer = support::client(&cluster).await;
    let prefix = format!("{}/", support::unique("cache-check-busy"));
    let options = CacheOptions::new().with_prefix().with_check_interval(None);
    let cache = Cache::new(&client, prefix.clone(), options).await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let writing = {
        let (prefix, stop) = (prefix.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.is_cancelled() {
                let key = format!("{prefix}{}", n % 40);
                if n % 7 == 3 {
                    let _ = writer.kv().delete(key, Default::default()).await;
                } else {
                    let _ = writer
                        .kv()
                        .put(key, format!("{n}"), PutOptions::new())
                        .await;
                }
                n += 1;
            }
            n
        })
    };
    let mut checked = 0;
    for _ in 0..30 {
        let found = cache.check().await.unwrap();
        assert!(found.consistent, "a false divergence: {found:?}");
        checked += 1;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    stop.cancel();
    let writes = writing.await.unwrap();
    let s = cache.stats();
    println!("{checked} checks during {writes} writes: {s:?}");
    assert_eq!((s.checks, s.mismatches, s.loads), (30, 0, 1));
}
