//! Behaviour of the Watch service against a real 3-member cluster. The raw stream: events and
//! their order, watch options and filters, several watches on one stream, cancel, progress,
//! history replay, compaction, and fragmented large revisions. The managed watch (on a healthy
//! cluster): order and pinning, compaction surfaced or reloaded, fragments reassembled, many
//! watches on one stream, a slow consumer paused alone, progress only when true.
//!
//! Run against etcd 3.4 too: `ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test --features testkit --test watch`.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use etcd_ha::proto::etcdserverpb::WatchResponse;
use etcd_ha::proto::mvccpb::{Event, event::EventType};
use etcd_ha::{
    Client, DeleteOptions, GetOptions, PutOptions, ResponseStream, WatchBatch, WatchOptions,
    WatchStream,
};
use tokio::time::timeout;

/// How long a watch response may take on a loaded 2-core box.
const RESPONSE: Duration = Duration::from_secs(10);

/// The next response on a watch stream, failing the test if none comes in time.
async fn next(stream: &mut ResponseStream<WatchResponse>) -> WatchResponse {
    timeout(RESPONSE, stream.message())
        .await
        .expect("a watch response in time")
        .expect("the watch stream stays healthy")
        .expect("the watch stream stays open")
}

/// The next response, which must be the `created` answer to a create request; its watch id.
async fn created(stream: &mut ResponseStream<WatchResponse>) -> i64 {
    let resp = next(stream).await;
    assert!(resp.created, "expected a created response, got {resp:?}");
    assert!(!resp.canceled, "{resp:?}");
    assert!(resp.events.is_empty());
    resp.watch_id
}

/// Put and return the revision of the write.
async fn put(client: &Client, key: &str, value: &str) -> i64 {
    let resp = client
        .kv()
        .put(key, value, PutOptions::new())
        .await
        .expect("put");
    resp.header.expect("header").revision
}

/// Delete (a prefix when `prefix`) and return the revision of the write.
async fn delete(client: &Client, key: &str, prefix: bool) -> i64 {
    let options = if prefix {
        DeleteOptions::new().with_prefix()
    } else {
        DeleteOptions::new()
    };
    let resp = client.kv().delete(key, options).await.expect("delete");
    resp.header.expect("header").revision
}

/// An event reduced to what the tests compare: type, key, value, mod revision, previous value.
#[derive(Debug, PartialEq)]
struct Seen {
    kind: EventType,
    key: String,
    value: String,
    mod_revision: i64,
    prev: Option<String>,
}

fn seen(event: &Event) -> Seen {
    let kv = event.kv.as_ref().expect("an event carries its kv");
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).expect("utf-8");
    Seen {
        kind: event.r#type(),
        key: text(&kv.key),
        value: text(&kv.value),
        mod_revision: kv.mod_revision,
        prev: event.prev_kv.as_ref().map(|p| text(&p.value)),
    }
}

fn ev(kind: EventType, key: &str, value: &str, mod_revision: i64, prev: Option<&str>) -> Seen {
    Seen {
        kind,
        key: key.to_owned(),
        value: value.to_owned(),
        mod_revision,
        prev: prev.map(str::to_owned),
    }
}

/// Read responses until every watch in `want` has that many events; events per watch id.
/// Fails on any canceled response or on events for a watch id not in `want`.
async fn events_by_watch(
    stream: &mut ResponseStream<WatchResponse>,
    want: &HashMap<i64, usize>,
) -> HashMap<i64, Vec<Seen>> {
    let mut got: HashMap<i64, Vec<Seen>> = HashMap::new();
    let done = |got: &HashMap<i64, Vec<Seen>>| {
        want.iter()
            .all(|(id, n)| got.get(id).map_or(0, Vec::len) >= *n)
    };
    while !done(&got) {
        let resp = next(stream).await;
        assert!(!resp.canceled, "unexpected cancel: {resp:?}");
        assert!(
            want.contains_key(&resp.watch_id),
            "events for unexpected watch {}: {resp:?}",
            resp.watch_id
        );
        got.entry(resp.watch_id)
            .or_default()
            .extend(resp.events.iter().map(seen));
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_filters_and_several_watches_on_one_stream() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let p = format!("{}/", support::unique("watch"));
    let k = format!("{p}k");
    let other = format!("{p}other");

    // One stream, four watches: the key alone, the prefix with prev_kv, and the prefix with each
    // filter. Created responses come back in request order.
    let (watcher, mut stream) = client
        .watch()
        .raw(k.as_str(), WatchOptions::new())
        .await
        .unwrap();
    let key_watch = created(&mut stream).await;
    watcher
        .watch(p.as_str(), WatchOptions::new().with_prefix().with_prev_kv())
        .await
        .unwrap();
    let prev_watch = created(&mut stream).await;
    watcher
        .watch(p.as_str(), WatchOptions::new().with_prefix().without_puts())
        .await
        .unwrap();
    let deletes_watch = created(&mut stream).await;
    watcher
        .watch(
            p.as_str(),
            WatchOptions::new().with_prefix().without_deletes(),
        )
        .await
        .unwrap();
    let puts_watch = created(&mut stream).await;
    // An id of our choosing (etcd 3.4+).
    watcher
        .watch(k.as_str(), WatchOptions::new().with_watch_id(4242))
        .await
        .unwrap();
    let chosen_watch = created(&mut stream).await;
    assert_eq!(chosen_watch, 4242);
    let mut ids = vec![
        key_watch,
        prev_watch,
        deletes_watch,
        puts_watch,
        chosen_watch,
    ];
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 5, "watch ids are distinct on one stream");

    let r1 = put(&client, &k, "v1").await;
    let r2 = put(&client, &k, "v2").await;
    let r3 = put(&client, &other, "o").await;
    let r4 = delete(&client, &k, false).await;
    let r5 = delete(&client, &p, true).await;

    use EventType::{Delete, Put};
    let want = HashMap::from([
        (key_watch, 3),
        (prev_watch, 5),
        (deletes_watch, 2),
        (puts_watch, 3),
        (chosen_watch, 3),
    ]);
    let got = events_by_watch(&mut stream, &want).await;
    let key_events = vec![
        ev(Put, &k, "v1", r1, None),
        ev(Put, &k, "v2", r2, None),
        // A delete event's kv has the key and the deletion revision, no value.
        ev(Delete, &k, "", r4, None),
    ];
    assert_eq!(got[&key_watch], key_events);
    assert_eq!(got[&chosen_watch], key_events);
    assert_eq!(
        got[&prev_watch],
        [
            ev(Put, &k, "v1", r1, None),
            ev(Put, &k, "v2", r2, Some("v1")),
            ev(Put, &other, "o", r3, None),
            ev(Delete, &k, "", r4, Some("v2")),
            ev(Delete, &other, "", r5, Some("o")),
        ]
    );
    assert_eq!(
        got[&deletes_watch],
        [
            ev(Delete, &k, "", r4, None),
            ev(Delete, &other, "", r5, None)
        ]
    );
    assert_eq!(
        got[&puts_watch],
        [
            ev(Put, &k, "v1", r1, None),
            ev(Put, &k, "v2", r2, None),
            ev(Put, &other, "o", r3, None),
        ]
    );

    // Cancel: the server confirms, and the canceled watch hears nothing more.
    watcher.cancel(key_watch).await.unwrap();
    let canceled = next(&mut stream).await;
    assert!(canceled.canceled, "{canceled:?}");
    assert_eq!(canceled.watch_id, key_watch);
    assert!(canceled.events.is_empty());
    let r6 = put(&client, &k, "after cancel").await;
    let want = HashMap::from([(prev_watch, 1), (puts_watch, 1), (chosen_watch, 1)]);
    let got = events_by_watch(&mut stream, &want).await;
    assert_eq!(got[&prev_watch], [ev(Put, &k, "after cancel", r6, None)]);
    assert_eq!(got[&chosen_watch], [ev(Put, &k, "after cancel", r6, None)]);

    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_revision_replays_history_and_progress_is_reported() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let p = format!("{}/", support::unique("history"));

    let r1 = put(&client, &format!("{p}a"), "1").await;
    let r2 = put(&client, &format!("{p}b"), "2").await;
    let r3 = put(&client, &format!("{p}a"), "3").await;
    let r4 = delete(&client, &format!("{p}b"), false).await;

    // From r2 (inclusive): everything after the first write, in revision order.
    let (watcher, mut stream) = client
        .watch()
        .raw(
            p.as_str(),
            WatchOptions::new()
                .with_prefix()
                .with_start_revision(r2)
                .with_prev_kv(),
        )
        .await
        .unwrap();
    let id = created(&mut stream).await;
    let got = events_by_watch(&mut stream, &HashMap::from([(id, 3)])).await;
    use EventType::{Delete, Put};
    assert_eq!(
        got[&id],
        [
            ev(Put, &format!("{p}b"), "2", r2, None),
            ev(Put, &format!("{p}a"), "3", r3, Some("1")),
            ev(Delete, &format!("{p}b"), "", r4, Some("2")),
        ]
    );
    // A second replay on the same stream, of one key from the very first write.
    watcher
        .watch(format!("{p}a"), WatchOptions::new().with_start_revision(r1))
        .await
        .unwrap();
    let from_r1 = created(&mut stream).await;
    let got = events_by_watch(&mut stream, &HashMap::from([(from_r1, 2)])).await;
    assert_eq!(
        got[&from_r1],
        [
            ev(Put, &format!("{p}a"), "1", r1, None),
            ev(Put, &format!("{p}a"), "3", r3, None),
        ]
    );
    // A revision 0 watch on the same stream starts now: it sees only new writes.
    watcher
        .watch(format!("{p}a"), WatchOptions::new())
        .await
        .unwrap();
    let live = created(&mut stream).await;
    let r5 = put(&client, &format!("{p}a"), "5").await;
    let got = events_by_watch(
        &mut stream,
        &HashMap::from([(id, 1), (live, 1), (from_r1, 1)]),
    )
    .await;
    assert_eq!(got[&from_r1], [ev(Put, &format!("{p}a"), "5", r5, None)]);
    assert_eq!(got[&live], [ev(Put, &format!("{p}a"), "5", r5, None)]);
    assert_eq!(got[&id], [ev(Put, &format!("{p}a"), "5", r5, Some("3"))]);

    // Progress: a response with no events at the member's current revision, not tied to any
    // one watch (id -1); 3.4.23 and 3.5.1 answer alike. Those versions answer at once rather
    // than after the watches catch up, so the request goes out only once every event above has
    // arrived. The watch's member may be a follower that has not yet applied the write the
    // leader just acknowledged, so a progress may report less than it; never less than what
    // was delivered, never more than was written, and it reaches the write soon.
    let unrelated = put(&client, "elsewhere", "x").await;
    let deadline = tokio::time::Instant::now() + RESPONSE;
    loop {
        watcher.request_progress().await.unwrap();
        let progress = next(&mut stream).await;
        assert!(progress.events.is_empty(), "{progress:?}");
        assert!(!progress.created && !progress.canceled, "{progress:?}");
        assert_eq!(progress.watch_id, -1, "{progress:?}");
        let revision = progress.header.as_ref().unwrap().revision;
        assert!((r5..=unrelated).contains(&revision), "{progress:?}");
        if revision == unrelated {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "progress stuck at {revision}, below {unrelated}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_a_compacted_revision_is_canceled() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let key = support::unique("compacted");

    let old = put(&client, &key, "1").await;
    put(&client, &key, "2").await;
    let compacted = put(&client, &key, "3").await;
    client.kv().compact(compacted, true).await.unwrap();

    let (_watcher, mut stream) = client
        .watch()
        .raw(key.as_str(), WatchOptions::new().with_start_revision(old))
        .await
        .unwrap();
    // The create is accepted, then the watch is canceled with the compaction revision, so the
    // caller knows where it can resume from.
    let id = created(&mut stream).await;
    let canceled = next(&mut stream).await;
    assert!(canceled.canceled, "{canceled:?}");
    assert_eq!(canceled.watch_id, id);
    assert_eq!(canceled.compact_revision, compacted);
    assert!(canceled.events.is_empty());

    // From the compaction revision itself the history is still there.
    let (_watcher, mut stream) = client
        .watch()
        .raw(
            key.as_str(),
            WatchOptions::new().with_start_revision(compacted),
        )
        .await
        .unwrap();
    let id = created(&mut stream).await;
    let got = events_by_watch(&mut stream, &HashMap::from([(id, 1)])).await;
    assert_eq!(got[&id], [ev(EventType::Put, &key, "3", compacted, None)]);

    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_revision_arrives_in_fragments() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let p = format!("{}/", support::unique("fragment"));

    // 30 keys of 100 KiB: deleting them at once is one revision whose events, with prev_kv,
    // weigh ~3 MiB. etcd splits a response that allows fragments once it passes
    // max-request-bytes plus its 512 KiB gRPC allowance (2 MiB by default; 20 such keys, at
    // 1.95 MiB, still arrive whole).
    const KEYS: usize = 30;
    let value = "f".repeat(100 * 1024);
    let mut last = 0;
    for i in 0..KEYS {
        last = put(&client, &format!("{p}{i:02}"), &value).await;
    }

    // From the revision after the puts, explicitly: a watch "from now" starts at the current
    // revision of the member serving it, and a follower may not have applied the last put yet.
    let (watcher, mut stream) = client
        .watch()
        .raw(
            p.as_str(),
            WatchOptions::new()
                .with_prefix()
                .with_prev_kv()
                .with_fragment()
                .with_start_revision(last + 1),
        )
        .await
        .unwrap();
    let fragmented = created(&mut stream).await;
    // The same watch without fragments, for contrast: one response for the whole revision.
    watcher
        .watch(
            p.as_str(),
            WatchOptions::new()
                .with_prefix()
                .with_prev_kv()
                .with_start_revision(last + 1),
        )
        .await
        .unwrap();
    let whole = created(&mut stream).await;

    let revision = delete(&client, &p, true).await;

    let mut fragments = Vec::new();
    let mut whole_responses = Vec::new();
    let mut fragmented_done = false;
    while !fragmented_done || whole_responses.is_empty() {
        let resp = next(&mut stream).await;
        assert!(!resp.canceled, "{resp:?}");
        if resp.watch_id == fragmented {
            fragmented_done = !resp.fragment;
            fragments.push(resp);
        } else {
            assert_eq!(resp.watch_id, whole);
            whole_responses.push(resp);
        }
    }

    // Every response but the last says "more follows"; together they hold every event once.
    assert!(fragments.len() >= 2, "{} responses", fragments.len());
    let flags: Vec<bool> = fragments.iter().map(|f| f.fragment).collect();
    assert!(flags[..flags.len() - 1].iter().all(|f| *f), "{flags:?}");
    assert!(!flags[flags.len() - 1]);
    let events: Vec<&Event> = fragments.iter().flat_map(|f| &f.events).collect();
    assert_eq!(events.len(), KEYS);
    let keys: Vec<String> = events
        .iter()
        .map(|e| String::from_utf8(e.kv.as_ref().unwrap().key.clone()).unwrap())
        .collect();
    let expected: Vec<String> = (0..KEYS).map(|i| format!("{p}{i:02}")).collect();
    assert_eq!(keys, expected);
    for event in &events {
        assert_eq!(event.r#type(), EventType::Delete);
        assert_eq!(event.kv.as_ref().unwrap().mod_revision, revision);
        assert_eq!(event.prev_kv.as_ref().unwrap().value.len(), value.len());
    }

    // Without the option the revision arrives as one response.
    assert_eq!(whole_responses.len(), 1);
    assert!(!whole_responses[0].fragment);
    assert_eq!(whole_responses[0].events.len(), KEYS);

    drop(cluster);
}

// ---------------------------------------------------------------------------------------------
// The managed watch (`Watch::watch`) on a healthy cluster. Its behaviour under faults is in
// tests/watch_failover.rs.
// ---------------------------------------------------------------------------------------------

/// The next batch of a managed watch, failing the test if none comes in time or it ends.
async fn batch(stream: &mut WatchStream) -> WatchBatch {
    timeout(RESPONSE, stream.next_batch())
        .await
        .expect("a batch in time")
        .expect("the watch stays open")
        .expect("the watch stays healthy")
}

/// Events of a managed watch until `n` arrived; fails on any other kind of batch, on
/// revisions that do not grow, and on a batch whose revision is not its last event's.
async fn managed_events(stream: &mut WatchStream, n: usize) -> Vec<Seen> {
    let mut got = Vec::new();
    let mut last = stream.revision();
    while got.len() < n {
        match batch(stream).await {
            WatchBatch::Events { revision, events } => {
                assert!(!events.is_empty());
                let first = events[0].kv.as_ref().unwrap().mod_revision;
                assert!(first > last, "batch from {first} after {last}");
                assert_eq!(
                    revision,
                    events.last().unwrap().kv.as_ref().unwrap().mod_revision
                );
                last = revision;
                assert_eq!(stream.revision(), revision);
                got.extend(events.iter().map(seen));
            }
            other => panic!("expected events, got {other:?}"),
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_watch_delivers_in_order_from_now_or_from_history() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let p = format!("{}/", support::unique("managed"));
    let (a, b) = (format!("{p}a"), format!("{p}b"));

    let before = put(&client, &a, "before").await;
    // From "now": returns once created, pinned to the revision it was created at, so the
    // writes below are all seen and the one before is not.
    let mut live = client
        .watch()
        .watch(p.as_str(), WatchOptions::new().with_prefix())
        .await
        .unwrap();
    assert!(live.revision() >= before, "{} < {before}", live.revision());
    assert!(live.endpoint().is_some());
    let r1 = put(&client, &a, "1").await;
    let r2 = put(&client, &b, "2").await;
    let r3 = delete(&client, &a, false).await;
    use EventType::{Delete, Put};
    assert_eq!(
        managed_events(&mut live, 3).await,
        [
            ev(Put, &a, "1", r1, None),
            ev(Put, &b, "2", r2, None),
            ev(Delete, &a, "", r3, None),
        ]
    );
    assert_eq!(live.revision(), r3);

    // From history, with prev_kv and a filter, on the same shared stream.
    let mut replay = client
        .watch()
        .watch(
            p.as_str(),
            WatchOptions::new()
                .with_prefix()
                .with_start_revision(before)
                .with_prev_kv()
                .without_deletes(),
        )
        .await
        .unwrap();
    assert_eq!(replay.revision(), before - 1);
    assert_eq!(
        managed_events(&mut replay, 3).await,
        [
            ev(Put, &a, "before", before, None),
            ev(Put, &a, "1", r1, Some("before")),
            ev(Put, &b, "2", r2, None),
        ]
    );
    assert_eq!(client.watch().streams_opened(), 1);

    // A single key; and cancel: a canceled watch is gone, the others go on.
    let mut single = client
        .watch()
        .watch(b.as_str(), WatchOptions::new())
        .await
        .unwrap();
    replay.cancel();
    let r4 = put(&client, &b, "4").await;
    assert_eq!(
        managed_events(&mut single, 1).await,
        [ev(Put, &b, "4", r4, None)]
    );
    assert_eq!(
        managed_events(&mut live, 1).await,
        [ev(Put, &b, "4", r4, None)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_watch_surfaces_compaction_or_reloads() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let p = format!("{}/", support::unique("mcompact"));
    let (a, b) = (format!("{p}a"), format!("{p}b"));

    let old = put(&client, &a, "1").await;
    put(&client, &b, "2").await;
    delete(&client, &b, false).await;
    let compacted = put(&client, &a, "3").await;
    client.kv().compact(compacted, true).await.unwrap();

    // Without reload: the typed batch with the compaction revision, then the end.
    let mut plain = client
        .watch()
        .watch(
            p.as_str(),
            WatchOptions::new().with_prefix().with_start_revision(old),
        )
        .await
        .unwrap();
    assert_eq!(
        batch(&mut plain).await,
        WatchBatch::Compacted {
            compact_revision: compacted
        }
    );
    assert!(
        timeout(RESPONSE, plain.next_batch())
            .await
            .unwrap()
            .is_none()
    );

    // With reload: the current state at some revision, then events after it.
    let mut reloading = client
        .watch()
        .watch(
            p.as_str(),
            WatchOptions::new()
                .with_prefix()
                .with_start_revision(old)
                .with_reload_on_compaction(),
        )
        .await
        .unwrap();
    let WatchBatch::Reloaded { revision, kvs } = batch(&mut reloading).await else {
        panic!("expected a reload");
    };
    assert!(revision >= compacted, "{revision} < {compacted}");
    let state: Vec<(String, String)> = kvs
        .iter()
        .map(|kv| {
            (
                String::from_utf8(kv.key.clone()).unwrap(),
                String::from_utf8(kv.value.clone()).unwrap(),
            )
        })
        .collect();
    assert_eq!(state, [(a.clone(), "3".to_owned())]);
    assert_eq!(reloading.revision(), revision);
    let r = put(&client, &b, "after").await;
    assert_eq!(
        managed_events(&mut reloading, 1).await,
        [ev(EventType::Put, &b, "after", r, None)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_watch_reassembles_fragments() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let p = format!("{}/", support::unique("mfragment"));

    // As in large_revision_arrives_in_fragments: one revision of ~3 MiB, sent in fragments.
    const KEYS: usize = 30;
    let value = "f".repeat(100 * 1024);
    for i in 0..KEYS {
        put(&client, &format!("{p}{i:02}"), &value).await;
    }
    let mut stream = client
        .watch()
        .watch(p.as_str(), WatchOptions::new().with_prefix().with_prev_kv())
        .await
        .unwrap();
    let revision = delete(&client, &p, true).await;
    let after = put(&client, &format!("{p}after"), "x").await;

    // One batch for the whole revision, every event once, then the next revision.
    let WatchBatch::Events {
        revision: got,
        events,
    } = batch(&mut stream).await
    else {
        panic!("expected events");
    };
    assert_eq!(got, revision);
    assert_eq!(events.len(), KEYS);
    for (i, event) in events.iter().enumerate() {
        let kv = event.kv.as_ref().unwrap();
        assert_eq!(kv.key, format!("{p}{i:02}").into_bytes());
        assert_eq!(kv.mod_revision, revision);
        assert_eq!(event.prev_kv.as_ref().unwrap().value.len(), value.len());
    }
    let next = managed_events(&mut stream, 1).await;
    assert_eq!(next[0].mod_revision, after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_managed_watches_share_one_stream() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let p = format!("{}/", support::unique("mshare"));

    const WATCHES: usize = 50;
    let mut streams = Vec::new();
    for i in 0..WATCHES {
        let stream = client
            .watch()
            .watch(format!("{p}{i}"), WatchOptions::new())
            .await
            .unwrap();
        streams.push(stream);
    }
    assert_eq!(client.watch().streams_opened(), 1);
    let endpoint = streams[0].endpoint();
    assert!(streams.iter().all(|s| s.endpoint() == endpoint));

    let mut revisions = Vec::new();
    for i in 0..WATCHES {
        revisions.push(put(&client, &format!("{p}{i}"), &format!("v{i}")).await);
    }
    for (i, stream) in streams.iter_mut().enumerate() {
        let got = managed_events(stream, 1).await;
        assert_eq!(
            got,
            [ev(
                EventType::Put,
                &format!("{p}{i}"),
                &format!("v{i}"),
                revisions[i],
                None
            )]
        );
    }
    assert_eq!(client.watch().streams_opened(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_is_paused_without_holding_up_the_others() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let p = format!("{}/", support::unique("mslow"));

    let options = || WatchOptions::new().with_prefix();
    let mut fast = client.watch().watch(p.as_str(), options()).await.unwrap();
    let mut slow = client.watch().watch(p.as_str(), options()).await.unwrap();

    // Many more revisions than a watch's buffer holds (128 batches), while `slow` reads
    // nothing: the fast watch on the same stream must keep getting them as they happen.
    const WRITES: usize = 400;
    let writer = {
        let client = client.clone();
        let p = p.clone();
        tokio::spawn(async move {
            let mut revisions = Vec::new();
            for i in 0..WRITES {
                revisions.push(put(&client, &format!("{p}{}", i % 7), &format!("v{i}")).await);
            }
            revisions
        })
    };
    let fast_events = managed_events(&mut fast, WRITES).await;
    let revisions = writer.await.unwrap();
    assert_eq!(
        fast_events
            .iter()
            .map(|e| e.mod_revision)
            .collect::<Vec<_>>(),
        revisions
    );

    // The slow consumer gets every event once, in order, once it reads: its watch was
    // paused at a full buffer and resumed from where the buffer ended.
    let slow_events = managed_events(&mut slow, WRITES).await;
    assert_eq!(slow_events, fast_events);
    assert_eq!(client.watch().streams_opened(), 1);
    // Nothing more is owed.
    let last = put(&client, &format!("{p}last"), "x").await;
    assert_eq!(managed_events(&mut slow, 1).await[0].mod_revision, last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_is_reported_only_when_it_is_true() {
    // Server-side per-watch progress notifications every second (etcd's default is 10 min).
    let cluster = etcd_ha::testkit::Cluster::builder()
        .members(3)
        .watch_progress_notify_interval(Duration::from_secs(1))
        .start()
        .await
        .expect("start a 3-member etcd cluster");
    cluster.leader(support::READY).await.unwrap();
    let client = support::client(&cluster).await;
    let p = format!("{}/", support::unique("mprogress"));
    let elsewhere = support::unique("mprogress-elsewhere");

    let mut stream = client
        .watch()
        .watch(
            p.as_str(),
            WatchOptions::new().with_prefix().with_progress_notify(),
        )
        .await
        .unwrap();
    let created = stream.revision();
    // Writes in and out of the range for 4 s; collect whatever arrives meanwhile.
    let writer = {
        let client = client.clone();
        let (p, elsewhere) = (p.clone(), elsewhere.clone());
        tokio::spawn(async move {
            let mut inside = Vec::new();
            let until = tokio::time::Instant::now() + Duration::from_secs(4);
            let mut i = 0;
            while tokio::time::Instant::now() < until {
                if i % 4 == 0 {
                    inside.push(put(&client, &format!("{p}k"), &format!("v{i}")).await);
                } else {
                    put(&client, &elsewhere, &format!("v{i}")).await;
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // Idle range, busy store: progress must run ahead of the last event.
            let mut last = 0;
            for j in 0..20 {
                last = put(&client, &elsewhere, &format!("idle{j}")).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (inside, last)
        })
    };
    let mut events = Vec::new();
    let mut progress = Vec::new();
    let (inside, last_elsewhere) = loop {
        match timeout(Duration::from_millis(200), stream.next_batch()).await {
            Ok(Some(Ok(WatchBatch::Events { events: evs, .. }))) => {
                for e in &evs {
                    let r = e.kv.as_ref().unwrap().mod_revision;
                    // Progress promised every event up to its revision: none may come later.
                    assert!(
                        progress.iter().all(|p| r > *p),
                        "event at {r} after progress {progress:?}"
                    );
                    events.push(r);
                }
            }
            Ok(Some(Ok(WatchBatch::Progress { revision }))) => {
                assert_eq!(stream.revision(), revision);
                assert!(
                    progress.iter().all(|p| revision > *p),
                    "{progress:?} then {revision}"
                );
                progress.push(revision);
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(_) if writer.is_finished() => break writer.await.unwrap(),
            Err(_) => {}
        }
    };
    // Drain what is still on the way, then wait for a progress past the idle writes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while progress.last().is_none_or(|p| *p < last_elsewhere) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no progress past {last_elsewhere}: {progress:?}"
        );
        match batch(&mut stream).await {
            WatchBatch::Events { events: evs, .. } => {
                for e in &evs {
                    let r = e.kv.as_ref().unwrap().mod_revision;
                    assert!(progress.iter().all(|p| r > *p));
                    events.push(r);
                }
            }
            WatchBatch::Progress { revision } => progress.push(revision),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(events, inside, "every event once, in order");
    assert!(progress[0] > created);
    assert_eq!(stream.revision(), *progress.last().unwrap());
    eprintln!(
        "progress reports: {} (last {}), {} events",
        progress.len(),
        progress.last().unwrap(),
        events.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_watch_fails_alone_with_a_typed_error() {
    support::init_tracing();
    let cluster = etcd_ha::testkit::Cluster::builder()
        .members(1)
        .auth("root", "root-pw")
        .arg("--bcrypt-cost=4")
        .start()
        .await
        .expect("start an etcd with auth");
    cluster.leader(support::READY).await.unwrap();
    let root = support::client(&cluster).await;
    let admin = root.auth();
    admin.user_add("reader", "reader-pw").await.unwrap();
    admin.role_add("pub-reader").await.unwrap();
    admin
        .role_grant_permission(
            "pub-reader",
            etcd_ha::PermissionType::Read,
            "pub/",
            Some(etcd_ha::prefix_end(b"pub/")),
        )
        .await
        .unwrap();
    admin.user_grant_role("reader", "pub-reader").await.unwrap();

    let reader = Client::connect(
        cluster.endpoints(),
        etcd_ha::Options::new()
            .with_user("reader", "reader-pw")
            .with_plaintext_credentials(),
    )
    .await
    .unwrap();
    let mut allowed = reader
        .watch()
        .watch("pub/", WatchOptions::new().with_prefix())
        .await
        .unwrap();
    // The server refuses this create on the shared stream: the call fails, typed.
    let refused = reader
        .watch()
        .watch("private/", WatchOptions::new().with_prefix())
        .await;
    assert!(
        matches!(refused, Err(etcd_ha::Error::PermissionDenied)),
        "{refused:?}"
    );
    // The other watch on the stream goes on.
    let r = put(&root, "pub/a", "1").await;
    assert_eq!(
        managed_events(&mut allowed, 1).await,
        [ev(EventType::Put, "pub/a", "1", r, None)]
    );
    assert_eq!(reader.watch().streams_opened(), 1);
}

/// Issue 9, defect 2: a compaction reload, or a response in fragments, larger than the client's
/// largest response ends that watch alone with `Error::WatchTooLarge`, without reading it all
/// into memory; another watch on the same stream goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_or_fragments_over_the_cap_end_that_watch_only() {
    // 2 MiB: every message fits (a range page of 1000 keys of 1 KiB, or one of etcd's 1.5 MiB
    // fragments), but not 3000 keys of 1 KiB at once.
    const CAP: usize = 2 << 20;
    const KEYS: usize = 3000;
    let cluster = support::cluster3().await;
    let client = Client::connect(
        cluster.endpoints(),
        support::options_for(&cluster).with_max_response_bytes(CAP),
    )
    .await
    .unwrap();
    let p = format!("{}/", support::unique("mcap"));
    let other = support::unique("mcap-other");
    let mut bystander = client
        .watch()
        .watch(other.as_str(), WatchOptions::new())
        .await
        .unwrap();
    let too_large = |r: &Result<WatchBatch, etcd_ha::Error>| match r {
        Err(etcd_ha::Error::WatchTooLarge { limit }) => *limit == CAP,
        _ => false,
    };

    let old = put(&client, &format!("{p}first"), "x").await;
    let value = "v".repeat(1024);
    for chunk in 0..KEYS / 100 {
        let puts = (0..100).map(|i| {
            etcd_ha::TxnOp::put(
                format!("{p}{:05}", chunk * 100 + i),
                value.as_str(),
                PutOptions::new(),
            )
        });
        client
            .kv()
            .txn(etcd_ha::Txn::new().and_then(puts))
            .await
            .unwrap();
    }
    let compacted = put(&client, &format!("{p}last"), "x").await;
    client.kv().compact(compacted, true).await.unwrap();

    // The reload of ~3 MiB.
    let reloading = client
        .watch()
        .watch(
            p.as_str(),
            WatchOptions::new()
                .with_prefix()
                .with_start_revision(old)
                .with_reload_on_compaction(),
        )
        .await;
    match reloading {
        Err(e) => assert!(too_large(&Err(e))),
        Ok(mut stream) => {
            let last = timeout(RESPONSE, stream.next_batch())
                .await
                .expect("the reload ends in time")
                .expect("an item before the end");
            assert!(too_large(&last), "{last:?}");
            assert!(
                timeout(RESPONSE, stream.next_batch())
                    .await
                    .unwrap()
                    .is_none()
            );
        }
    }

    // One revision deleting every key, with previous values: ~3 MiB in fragments.
    let mut fragmented = client
        .watch()
        .watch(p.as_str(), WatchOptions::new().with_prefix().with_prev_kv())
        .await
        .unwrap();
    delete(&client, &p, true).await;
    let last = timeout(RESPONSE, fragmented.next_batch())
        .await
        .expect("the watch ends in time")
        .expect("an item before the end");
    assert!(too_large(&last), "{last:?}");

    // The other watch, on the same stream, still delivers, and new watches work.
    let r = put(&client, &other, "still here").await;
    assert_eq!(
        managed_events(&mut bystander, 1).await,
        [ev(EventType::Put, &other, "still here", r, None)]
    );
    let mut fresh = client
        .watch()
        .watch(p.as_str(), WatchOptions::new().with_prefix())
        .await
        .unwrap();
    let r = put(&client, &format!("{p}again"), "y").await;
    assert_eq!(managed_events(&mut fresh, 1).await.len(), 1);
    assert_eq!(fresh.revision(), r);
    // Broken, not opened: on a loaded box (the whole suite's clusters on 2 cores) the pace
    // rule may move the stream off a member slow to send 3 MiB of fragments; a move is the
    // client's choice and loses nothing, a break would be the cap ending the stream.
    assert_eq!(client.watch().streams_broken(), 0, "the stream never broke");
}

/// Issue 18: a watch from "now" delivers nothing written before `watch` was called, however
/// old this client's last answer is, and does not end on a compaction of that old history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_now_does_not_replay_what_others_wrote_since_our_last_answer() {
    let cluster = support::cluster3().await;
    let reader = support::client(&cluster).await;
    let writer = support::client(&cluster).await;
    let key = support::unique("from-now");
    // The reader's last KV answer is old: 300 writes by someone else come after it.
    reader
        .kv()
        .get(key.as_str(), GetOptions::new())
        .await
        .unwrap();
    for i in 0..300 {
        put(&writer, &key, &format!("old{i}")).await;
    }
    let mut fresh = reader
        .watch()
        .watch(key.as_str(), WatchOptions::new())
        .await
        .unwrap();
    put(&writer, &key, "last").await;
    let batch = timeout(Duration::from_secs(10), fresh.next_batch())
        .await
        .expect("an event")
        .expect("the watch is open")
        .unwrap();
    let WatchBatch::Events { events, .. } = batch else {
        panic!("expected the new write, got {batch:?}");
    };
    let values: Vec<String> = events
        .iter()
        .map(|e| String::from_utf8_lossy(&e.kv.as_ref().unwrap().value).into_owned())
        .collect();
    assert_eq!(
        values,
        vec!["last".to_string()],
        "only what came after watch()"
    );

    // The same after the history the old answer points into is compacted away.
    let head = put(&writer, &key, "before-compaction").await;
    writer.kv().compact(head, true).await.unwrap();
    let mut after_compaction = reader
        .watch()
        .watch(key.as_str(), WatchOptions::new())
        .await
        .unwrap();
    put(&writer, &key, "after").await;
    let batch = timeout(Duration::from_secs(10), after_compaction.next_batch())
        .await
        .expect("an event")
        .expect("the watch is open")
        .unwrap();
    match batch {
        WatchBatch::Events { events, .. } => {
            assert_eq!(events.len(), 1);
            assert_eq!(events[0].kv.as_ref().unwrap().value, b"after");
        }
        other => panic!("expected the new write, got {other:?}"),
    }
}

/// Issue 18, found by the robustness suite's from-now check: a watch from "now" served by a
/// follower cut off from its peers started at that follower's stale "now", and once the
/// follower caught up it replayed writes acknowledged before `watch` was called. "Now" is the
/// cluster's: while the member cannot tell it (no quorum), `watch` fails instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_now_on_a_lagging_member_does_not_replay_acknowledged_writes() {
    let cluster = etcd_ha::testkit::Cluster::builder()
        .members(3)
        .isolated_network(true)
        .start()
        .await
        .expect("start a 3-member cluster in network namespaces");
    let leader = cluster.leader(support::READY).await.unwrap();
    let follower = (leader + 1) % cluster.len();
    let writer = support::client(&cluster).await;
    // A client that reaches only the follower.
    let options = support::options_for(&cluster)
        .with_request_timeout(Duration::from_secs(2))
        .without_member_sync();
    let lagging = Client::connect(vec![cluster.endpoint(follower)], options)
        .await
        .unwrap();
    let key = support::unique("from-now-lagging");
    let before = put(&writer, &key, "before").await;
    // The follower has applied it before it is cut off.
    timeout(RESPONSE, async {
        loop {
            let r = lagging
                .kv()
                .get(key.as_str(), GetOptions::new().with_serializable())
                .await;
            if r.is_ok_and(|r| r.header.is_some_and(|h| h.revision >= before)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the follower applies the first write");

    cluster.partition(follower).unwrap();
    for i in 0..50 {
        put(&writer, &key, &format!("acked{i}")).await;
    }
    let during = timeout(
        Duration::from_secs(5),
        lagging.watch().watch(key.as_str(), WatchOptions::new()),
    )
    .await;
    cluster.heal(follower).unwrap();
    let mut stream = match during {
        Ok(Ok(stream)) => stream,
        // No quorum behind the follower: "now" cannot be known, and saying so is right.
        _ => timeout(Duration::from_secs(30), async {
            loop {
                match lagging
                    .watch()
                    .watch(key.as_str(), WatchOptions::new())
                    .await
                {
                    Ok(stream) => break stream,
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        })
        .await
        .expect("a watch once the follower is back"),
    };
    put(&writer, &key, "last").await;
    let mut values = Vec::new();
    while !values.iter().any(|v| v == "last") {
        let batch = timeout(RESPONSE, stream.next_batch())
            .await
            .expect("the write after watch() arrives")
            .expect("the watch is open")
            .unwrap();
        if let WatchBatch::Events { events, .. } = batch {
            values.extend(
                events
                    .iter()
                    .map(|e| String::from_utf8_lossy(&e.kv.as_ref().unwrap().value).into_owned()),
            );
        }
    }
    assert_eq!(
        values,
        vec!["last".to_string()],
        "only what came after watch()"
    );
}

/// A watch on a stream of its own answers a progress request at once, and the answer (on
/// members that order it after pending events) brings the watch to the cluster's revision
/// though its key is quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_watch_gets_progress_on_demand() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let key = support::unique("watch-progress");
    let own = client.watch().isolated();
    let mut watch = own
        .watch(key.as_str(), WatchOptions::new().with_progress_notify())
        .await
        .unwrap();
    let elsewhere = put(&client, &support::unique("watch-elsewhere"), "x").await;
    let proves = watch.request_progress().await.unwrap();
    let ordered = cluster
        .etcd_version()
        .parse::<etcd_ha::ServerVersion>()
        .is_ok_and(etcd_ha::ServerVersion::orders_progress);
    if !ordered {
        assert!(
            !proves,
            "members before 3.4.25 / 3.5.8 prove nothing by progress"
        );
        return;
    }
    // The member's version may not be known the moment the stream opened: ask until it is.
    let mut proves = proves;
    for _ in 0..50 {
        if proves {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        proves = watch.request_progress().await.unwrap();
    }
    assert!(proves, "an ordering member's answers prove progress");
    let batch = timeout(Duration::from_secs(5), watch.next_batch())
        .await
        .expect("the progress answer comes at once")
        .expect("the watch goes on")
        .unwrap();
    match batch {
        WatchBatch::Progress { revision } => assert!(revision >= elsewhere, "{revision}"),
        other => panic!("expected progress, got {other:?}"),
    }
    assert_eq!(
        client.watch().streams_opened(),
        0,
        "the client's own stream was not used"
    );
}
