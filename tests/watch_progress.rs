//! Progress on a shared watch stream after a watch on it replayed history, against a real
//! etcd. etcd answers a progress request only when every watch on the stream has caught up,
//! and *drops* one that arrives while a watch replays (3.4.25+, 3.5.8+, 3.6+: it is not held
//! back): the client must go on asking, or its quiet watches never learn their progress again
//! on that stream and a caller's `request_progress` never goes out.

mod support;

use std::time::Duration;

use etcd_ha::{Client, PutOptions, WatchBatch, WatchOptions, WatchStream};
use futures_util::StreamExt;
use tokio::time::{Instant, timeout};

/// Revisions of history the replaying watch reads: etcd hands a replaying watch at most 1,000
/// revisions a pass, a pass every 100 ms, so this keeps it replaying for about a second.
const HISTORY: usize = 10_000;

/// How long a progress answer or a batch may take on a loaded 2-core box.
const ANSWER: Duration = Duration::from_secs(10);

/// Put `HISTORY` revisions on `key`, 64 at a time.
async fn history(client: &Client, key: &str) -> i64 {
    let revisions: Vec<i64> = futures_util::stream::iter(0..HISTORY)
        .map(|i| async move {
            client
                .kv()
                .put(key, i.to_string(), PutOptions::new())
                .await
                .expect("put")
                .header
                .unwrap()
                .revision
        })
        .buffer_unordered(64)
        .collect()
        .await;
    revisions.into_iter().max().unwrap()
}

/// Read `watch`'s batches until it has seen revision `last`.
async fn read_until(watch: &mut WatchStream, last: i64) {
    let deadline = Instant::now() + ANSWER * 3;
    loop {
        let batch = timeout(deadline - Instant::now(), watch.next_batch())
            .await
            .expect("the replay ends in time")
            .expect("the replaying watch goes on")
            .expect("no error");
        if let WatchBatch::Events { revision, .. } = batch
            && revision >= last
        {
            return;
        }
    }
}

/// The next progress batch of `watch` at or above `revision`.
async fn progress_at_least(watch: &mut WatchStream, revision: i64) -> i64 {
    let deadline = Instant::now() + ANSWER;
    loop {
        let batch = timeout(deadline - Instant::now(), watch.next_batch())
            .await
            .expect("a progress answer in time")
            .expect("the quiet watch goes on")
            .expect("no error");
        match batch {
            WatchBatch::Progress { revision: r } if r >= revision => return r,
            WatchBatch::Progress { .. } => {}
            other => panic!("the quiet watch saw {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_goes_on_after_a_request_made_during_a_replay() {
    let cluster = support::cluster1().await;
    let client = support::client(&cluster).await;
    let ordered = cluster
        .etcd_version()
        .parse::<etcd_ha::ServerVersion>()
        .is_ok_and(etcd_ha::ServerVersion::orders_progress);
    let quiet_key = support::unique("progress-quiet");
    let mut quiet = client
        .watch()
        .watch(
            quiet_key.as_str(),
            WatchOptions::new().with_progress_notify(),
        )
        .await
        .unwrap();
    // The member's version is asked once the stream opens; wait until its answers prove.
    let mut proves = quiet.request_progress().await.unwrap();
    for _ in 0..50 {
        if proves || !ordered {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        proves = quiet.request_progress().await.unwrap();
    }
    assert_eq!(proves, ordered, "ordering members' answers prove progress");

    let busy = support::unique("progress-history");
    let first = history(&client, &busy).await - HISTORY as i64 + 1;
    let last = first + HISTORY as i64 - 1;
    let mut replaying = client
        .watch()
        .watch(
            busy.as_str(),
            WatchOptions::new().with_start_revision(first),
        )
        .await
        .unwrap();
    // While it replays: etcd 3.4.25+ / 3.5.8+ / 3.6+ drop this request.
    timeout(ANSWER, quiet.request_progress())
        .await
        .expect("a progress request goes out during the replay")
        .unwrap();
    let replay = Instant::now();
    read_until(&mut replaying, last).await;
    println!(
        "MEASURE replay of {HISTORY} revisions ended {:?} after the request",
        replay.elapsed()
    );

    // Caught up: a new request goes out and, on an ordering member, is answered.
    let elsewhere = client
        .kv()
        .put(
            support::unique("progress-elsewhere"),
            "x",
            PutOptions::new(),
        )
        .await
        .unwrap()
        .header
        .unwrap()
        .revision;
    timeout(ANSWER, quiet.request_progress())
        .await
        .expect("a progress request goes out after the replay")
        .unwrap();
    if ordered {
        let at = progress_at_least(&mut quiet, elsewhere).await;
        println!("MEASURE the quiet watch's progress: {at} (wrote {elsewhere})");
    }
}
