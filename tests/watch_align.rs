//! Many managed watches moved at once resume from one start revision (`src/watch/align.rs`):
//! still exactly once, and a compaction between that common start and a watch's own start does
//! not end a watch whose own history is whole.
//!
//! 600 watches (more than etcd syncs in one pass, so the move aligns them) each get an event at
//! its own revision, so their starts spread; the watching client's link to the stream's member
//! is black-holed at once, before a progress answer evens the starts out (the cluster itself
//! stays whole, so no election delays the rest), and the history is compacted in the middle of
//! the spread. Every watch then gets its next event exactly once, except those whose own start the
//! compaction did reach, which end with `Compacted`.

mod support;

use std::time::Duration;

use etcd_ha::testkit::{FaultProxy, Mode};
use etcd_ha::{Client, Options, PutOptions, WatchBatch, WatchOptions, WatchStream};
use futures_util::future::join_all;
use tokio::time::timeout;

/// Above etcd's 512 watchers a sync pass, so the move aligns them.
const WATCHES: usize = 600;

/// Time for one watch's next item after the writes.
const NEXT: Duration = Duration::from_secs(30);

/// Put `value` at every key, 64 at a time; returns each key's revision.
async fn put_all(client: &Client, keys: &[String], value: &str) -> Vec<i64> {
    let mut revisions = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(64) {
        let puts = chunk.iter().map(|k| async move {
            let r = client.kv().put(k.as_str(), value, PutOptions::new()).await;
            r.expect("put").header.expect("header").revision
        });
        revisions.extend(join_all(puts).await);
    }
    revisions
}

/// The next non-progress item of `w`.
async fn next(w: &mut WatchStream) -> WatchBatch {
    loop {
        match timeout(NEXT, w.next_batch()).await {
            Ok(Some(Ok(WatchBatch::Progress { .. }))) => continue,
            Ok(Some(Ok(batch))) => return batch,
            other => panic!("expected a batch, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_watches_moved_at_once_resume_exactly_once_through_a_compaction() {
    support::init_tracing();
    let cluster = support::cluster3().await;
    // A proxy in front of every member; the watching client knows only the proxies (member
    // sync would swap them for the members' advertised URLs).
    let proxies: Vec<FaultProxy> = (0..cluster.len())
        .map(|i| FaultProxy::start(cluster.client_addr(i)).unwrap())
        .collect();
    let proxied: Vec<String> = proxies.iter().map(|p| p.url("http")).collect();
    let watcher = Client::connect(&proxied, Options::new().without_member_sync())
        .await
        .unwrap();
    let writer = support::client(&cluster).await;
    let prefix = support::unique("align");
    let keys: Vec<String> = (0..WATCHES).map(|i| format!("{prefix}/{i:04}")).collect();
    let mut watches = Vec::with_capacity(WATCHES);
    for k in &keys {
        watches.push(
            watcher
                .watch()
                .watch(k.as_str(), WatchOptions::new())
                .await
                .expect("watch"),
        );
    }

    // One event each, at revisions spread over 600: each watch stands at its own.
    let first = put_all(&writer, &keys, "1").await;
    for (w, rev) in watches.iter_mut().zip(&first) {
        match next(w).await {
            WatchBatch::Events { revision, .. } => assert_eq!(revision, *rev),
            other => panic!("expected the first put, got {other:?}"),
        }
    }
    // Cut off at once: a progress answer (one a second) would even the starts out first.
    let serving = watcher.watch().stream_endpoint().expect("a stream");
    let proxy = proxied
        .iter()
        .position(|u| u.trim_end_matches('/') == serving.trim_end_matches('/'))
        .expect("the stream is on a proxy");
    proxies[proxy].set_mode(Mode::Blackhole);
    let own: Vec<i64> = watches.iter().map(WatchStream::revision).collect();
    let (lowest, highest) = (*own.iter().min().unwrap(), *own.iter().max().unwrap());
    // In the middle of the spread: the watches below it lose their history, the others not.
    let compact = lowest + (highest - lowest) / 2 + 1;
    writer.kv().compact(compact, true).await.expect("compact");
    let second = put_all(&writer, &keys, "2").await;

    let mut compacted = 0;
    for (i, w) in watches.iter_mut().enumerate() {
        match next(w).await {
            WatchBatch::Events { revision, events } => {
                assert_eq!(events.len(), 1, "watch {i}: {events:?}");
                assert_eq!(revision, second[i], "watch {i}: the second put, once");
            }
            WatchBatch::Compacted { compact_revision } => {
                // Only a watch whose own start the compaction reached.
                assert!(
                    own[i] + 1 < compact_revision,
                    "watch {i} at {} ended as compacted at {compact_revision}",
                    own[i]
                );
                compacted += 1;
            }
            other => panic!("watch {i}: {other:?}"),
        }
    }
    proxies[proxy].set_mode(Mode::Pass);
    eprintln!(
        "watch-align: {WATCHES} watches at {lowest}..={highest}, compacted at {compact}: \
         {compacted} ended as compacted, {} resumed exactly once; {} streams opened",
        WATCHES - compacted,
        watcher.watch().streams_opened()
    );
    assert!(
        compacted < WATCHES / 2 + 2,
        "the watches above the compaction resumed"
    );
}
