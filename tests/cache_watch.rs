//! Local watches of a [`Cache`] against a real 3-member cluster: hundreds of subscribers on one
//! server watch each get exactly the events a server watch of the same keys gets (with the
//! same previous values), through a kill of the cache's stream member; a watch from now sees
//! no write completed before it and every one after; a start revision replays the history;
//! a subscriber that fell behind the history is reloaded with the range as etcd has it.

mod support;

use std::time::Duration;

use etcd_ha::proto::mvccpb::Event;
use etcd_ha::{
    Cache, CacheOptions, CacheWatchOptions, CacheWatchStream, Client, GetOptions, PutOptions,
    WatchBatch, WatchOptions,
};
use tokio::time::Instant;

/// `(revision, key, value, previous value)` of one event.
type Seen = (i64, String, String, Option<String>);

fn seen(events: &[Event]) -> Vec<Seen> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    events
        .iter()
        .filter_map(|e| {
            let kv = e.kv.as_ref()?;
            let prev = e.prev_kv.as_ref().map(|p| text(&p.value));
            Some((kv.mod_revision, text(&kv.key), text(&kv.value), prev))
        })
        .collect()
}

/// Every event `w` delivers until one of `marker`, within `limit`.
async fn until_marker(w: &mut CacheWatchStream, marker: &str, limit: Duration) -> Vec<Seen> {
    let mut out: Vec<Seen> = Vec::new();
    let deadline = Instant::now() + limit;
    while !out.iter().any(|s| s.1 == marker) {
        let batch = tokio::time::timeout_at(deadline, w.next_batch())
            .await
            .expect("the marker in time")
            .expect("the watch goes on")
            .expect("no error");
        match batch {
            WatchBatch::Events { events, .. } => out.extend(seen(&events)),
            other => panic!("only events expected: {other:?}"),
        }
    }
    out
}

/// Put `{prefix}{i % 20}` = `v{i}` for `count` writes; the revision of the last.
async fn write(client: &Client, prefix: &str, count: usize) -> i64 {
    let mut revision = 0;
    for i in 0..count {
        let key = format!("{prefix}{}", i % 20);
        let put = client
            .kv()
            .put(key, format!("v{i}"), PutOptions::new())
            .await
            .unwrap();
        revision = put.header.unwrap().revision;
    }
    revision
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_local_watches_get_what_a_server_watch_gets_through_a_kill() {
    let mut cluster = support::cluster3().await;
    let writer = support::client(&cluster).await;
    let reader = support::client(&cluster).await;
    let prefix = format!("{}/", support::unique("cache-watch"));
    write(&writer, &prefix, 20).await;
    let cache = Cache::new(&reader, prefix.clone(), CacheOptions::new().with_prefix())
        .await
        .unwrap();
    let start = cache.revision() + 1;
    let options = CacheWatchOptions::new()
        .with_prefix()
        .with_prev_kv()
        .with_start_revision(start);
    let mut locals = Vec::new();
    for _ in 0..300 {
        locals.push(cache.watch(prefix.clone(), options.clone()).await.unwrap());
    }
    // The reference: a server watch of the same keys from the same revision.
    let server = writer
        .watch()
        .watch(
            prefix.clone(),
            WatchOptions::new()
                .with_prefix()
                .with_prev_kv()
                .with_start_revision(start),
        )
        .await
        .unwrap();
    let url = cache.stream_endpoint().expect("a stream feeds the cache");
    let member = (0..cluster.len())
        .find(|&i| cluster.endpoint(i) == url)
        .expect("the stream's member");
    let started = Instant::now();
    let mut written = 0;
    let mut killed = false;
    while started.elapsed() < Duration::from_secs(6) {
        if !killed && started.elapsed() > Duration::from_secs(2) {
            cluster.kill(member);
            killed = true;
        }
        let key = format!("{prefix}{}", written % 20);
        // A put whose answer is lost may have applied: both watches must agree on it anyway.
        if writer
            .kv()
            .put(key, format!("w{written}"), PutOptions::new())
            .await
            .is_ok()
        {
            written += 1;
        }
    }
    let marker = format!("{prefix}end");
    writer
        .kv()
        .put(marker.as_str(), "", PutOptions::new())
        .await
        .unwrap();

    let mut server = server;
    let mut want: Vec<Seen> = Vec::new();
    while !want.iter().any(|s| s.1 == marker) {
        let batch = tokio::time::timeout(Duration::from_secs(20), server.next_batch())
            .await
            .expect("the server watch delivers the marker")
            .expect("goes on")
            .expect("no error");
        if let WatchBatch::Events { events, .. } = batch {
            want.extend(seen(&events));
        }
    }
    assert!(
        want.len() > written / 2,
        "{} events for {written} writes",
        want.len()
    );
    for (i, local) in locals.iter_mut().enumerate() {
        let got = until_marker(local, &marker, Duration::from_secs(20)).await;
        assert_eq!(got, want, "local watch {i} differs from the server's");
    }
    println!(
        "{} subscribers, {written} writes, {} events each, {:?}",
        locals.len(),
        want.len(),
        cache.stats()
    );
    assert!(killed);
    assert_ne!(cache.stream_endpoint(), Some(url), "the stream moved");
    cluster.restart(member).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_now_sees_nothing_before_and_everything_after() {
    let cluster = support::cluster3().await;
    let writer = support::client(&cluster).await;
    let reader = support::client(&cluster).await;
    let prefix = format!("{}/", support::unique("cache-now"));
    let cache = Cache::new(&reader, prefix.clone(), CacheOptions::new().with_prefix())
        .await
        .unwrap();
    for round in 0..20 {
        // A write by another client completes, then the watch is asked for: it must not
        // deliver that write (the cache may not have applied it yet when asked).
        let before = write(&writer, &prefix, 1 + round % 3).await;
        let mut w = cache
            .watch(prefix.clone(), CacheWatchOptions::new().with_prefix())
            .await
            .unwrap();
        assert!(w.revision() >= before, "{} < {before}", w.revision());
        let key = format!("{prefix}after");
        let after = writer
            .kv()
            .put(key.as_str(), format!("r{round}"), PutOptions::new())
            .await
            .unwrap()
            .header
            .unwrap()
            .revision;
        let got = until_marker(&mut w, &key, Duration::from_secs(10)).await;
        assert_eq!(got.len(), 1, "round {round}: only the write after: {got:?}");
        assert_eq!(got[0].0, after);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_revision_replays_and_a_subscriber_behind_the_history_is_reloaded() {
    let cluster = support::cluster3().await;
    let writer = support::client(&cluster).await;
    let reader = support::client(&cluster).await;
    let prefix = format!("{}/", support::unique("cache-lag"));
    let options = CacheOptions::new().with_prefix().with_history(30);
    let cache = Cache::new(&reader, prefix.clone(), options).await.unwrap();
    let first = cache.revision() + 1;
    let watch_from = |start: i64| {
        CacheWatchOptions::new()
            .with_prefix()
            .with_start_revision(start)
            .with_reload_on_lag()
    };
    let mut early = cache
        .watch(prefix.clone(), watch_from(first))
        .await
        .unwrap();
    let last = write(&writer, &prefix, 20).await;
    // Replayed from the history, in a watch made after the writes.
    let late = cache
        .get(format!("{prefix}0"), etcd_ha::Freshness::AtLeast(last))
        .await;
    assert!(late.is_ok(), "{late:?}");
    let mut replay = cache
        .watch(prefix.clone(), watch_from(first))
        .await
        .unwrap();
    let marker = format!("{prefix}19");
    let got = until_marker(&mut replay, &marker, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 20);
    assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "in order");
    // `early` read nothing while 40 more writes went by: the history (30 events) left it
    // behind. It is reloaded with the range as etcd has it, then follows again.
    let last = write(&writer, &prefix, 40).await;
    let fresh = cache
        .get(format!("{prefix}0"), etcd_ha::Freshness::AtLeast(last))
        .await;
    assert!(fresh.is_ok(), "{fresh:?}");
    let batch = tokio::time::timeout(Duration::from_secs(10), early.next_batch())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let WatchBatch::Reloaded { revision, kvs } = batch else {
        panic!("a reload expected: {batch:?}")
    };
    let etcd = writer
        .kv()
        .get(
            prefix.as_str(),
            GetOptions::new().with_prefix().with_revision(revision),
        )
        .await
        .unwrap();
    assert_eq!(kvs, etcd.kvs, "the reload is the range at its revision");
    writer
        .kv()
        .put(format!("{prefix}next"), "n", PutOptions::new())
        .await
        .unwrap();
    let got = until_marker(
        &mut early,
        &format!("{prefix}next"),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(got.len(), 1);
    assert!(cache.stats().history <= 30, "{:?}", cache.stats());
}
