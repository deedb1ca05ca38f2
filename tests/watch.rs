//! Behaviour of the raw Watch stream against a real 3-member cluster: events and their order,
//! watch options and filters, several watches on one stream, cancel, progress, history replay,
//! compaction, and fragmented large revisions.
//!
//! Run against etcd 3.4 too: `ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test --features testkit --test watch`.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use etcd_ha::proto::etcdserverpb::WatchResponse;
use etcd_ha::proto::mvccpb::{Event, event::EventType};
use etcd_ha::{Client, DeleteOptions, PutOptions, ResponseStream, WatchOptions};
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
        .watch(k.as_str(), WatchOptions::new())
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
        .watch(
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

    // Progress: a response with no events at the current revision, not tied to any one watch
    // (id -1); 3.4.23 and 3.5.1 answer alike. Those versions answer at once rather than after
    // the watches catch up, so the request goes out only once every event above has arrived.
    let unrelated = put(&client, "elsewhere", "x").await;
    watcher.request_progress().await.unwrap();
    let progress = next(&mut stream).await;
    assert!(progress.events.is_empty(), "{progress:?}");
    assert!(!progress.created && !progress.canceled, "{progress:?}");
    assert_eq!(progress.watch_id, -1, "{progress:?}");
    assert_eq!(progress.header.as_ref().unwrap().revision, unrelated);

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
        .watch(key.as_str(), WatchOptions::new().with_start_revision(old))
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
        .watch(
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
    for i in 0..KEYS {
        put(&client, &format!("{p}{i:02}"), &value).await;
    }

    let (watcher, mut stream) = client
        .watch()
        .watch(
            p.as_str(),
            WatchOptions::new()
                .with_prefix()
                .with_prev_kv()
                .with_fragment(),
        )
        .await
        .unwrap();
    let fragmented = created(&mut stream).await;
    // The same watch without fragments, for contrast: one response for the whole revision.
    watcher
        .watch(p.as_str(), WatchOptions::new().with_prefix().with_prev_kv())
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
