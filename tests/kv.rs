//! Behaviour of the KV service against a real 3-member cluster: every get/put/delete option, txn
//! compares and branches (nested too), compaction, and the size and validity limits.
//!
//! Run against etcd 3.4 too: `ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test --features testkit --test kv`.

mod support;

use etcd_ha::proto::etcdserverpb::{RangeResponse, ResponseOp, TxnResponse, response_op::Response};
use etcd_ha::{
    Client, Compare, CompareOp, DeleteOptions, Error, GetOptions, PutOptions, SortOrder,
    SortTarget, Txn, TxnOp,
};

/// The keys of a range answer with `prefix` cut off, in the order the server sent them.
fn names(resp: &RangeResponse, prefix: &str) -> Vec<String> {
    resp.kvs
        .iter()
        .map(|kv| {
            let key = String::from_utf8(kv.key.clone()).expect("utf-8 key");
            key.strip_prefix(prefix)
                .expect("key under prefix")
                .to_owned()
        })
        .collect()
}

/// The revision a response was served at.
fn revision(header: &Option<etcd_ha::proto::etcdserverpb::ResponseHeader>) -> i64 {
    header.as_ref().expect("response header").revision
}

/// Put `key = value` and return the revision of that write.
async fn put(client: &Client, key: &str, value: &str) -> i64 {
    revision(
        &client
            .kv()
            .put(key, value, PutOptions::new())
            .await
            .expect("put")
            .header,
    )
}

/// The value of one key, or `None` when it does not exist.
async fn value_of(client: &Client, key: &str) -> Option<Vec<u8>> {
    let resp = client.kv().get(key, GetOptions::new()).await.expect("get");
    resp.kvs.into_iter().next().map(|kv| kv.value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_options_select_sort_and_shape_the_range() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let kv = client.kv();
    let p = format!("{}/", support::unique("get"));
    let k = |name: &str| format!("{p}{name}");

    // Creation order c, a, e, b, d; then `a` is rewritten, so key, create, mod and value orders
    // all differ and each sort target is told apart from the others.
    let rev_c = put(&client, &k("c"), "z").await;
    let rev_a = put(&client, &k("a"), "w").await;
    let rev_e = put(&client, &k("e"), "q").await;
    let rev_b = put(&client, &k("b"), "m").await;
    let rev_d = put(&client, &k("d"), "a").await;
    let rev_a2 = put(&client, &k("a"), "x").await;
    assert!(rev_c < rev_a && rev_a < rev_e && rev_e < rev_b && rev_b < rev_d && rev_d < rev_a2);

    // Prefix: every key under p, in key order by default.
    let all = kv
        .get(p.as_str(), GetOptions::new().with_prefix())
        .await
        .unwrap();
    assert_eq!(names(&all, &p), ["a", "b", "c", "d", "e"]);
    assert_eq!(all.count, 5);
    assert!(!all.more);
    assert_eq!(revision(&all.header), rev_a2);
    let a = &all.kvs[0];
    assert_eq!(
        (a.create_revision, a.mod_revision, a.version),
        (rev_a, rev_a2, 2)
    );
    assert_eq!(a.value, b"x");

    // Explicit range end: half-open [b, d).
    let range = kv
        .get(k("b"), GetOptions::new().with_range(k("d")))
        .await
        .unwrap();
    assert_eq!(names(&range, &p), ["b", "c"]);

    // From key: every key >= c (this cluster holds no keys but ours).
    let from = kv
        .get(k("c"), GetOptions::new().with_from_key())
        .await
        .unwrap();
    assert_eq!(names(&from, &p), ["c", "d", "e"]);

    // Limit: the first two, `more` set, and `count` still the size of the whole range.
    let limited = kv
        .get(p.as_str(), GetOptions::new().with_prefix().with_limit(2))
        .await
        .unwrap();
    assert_eq!(names(&limited, &p), ["a", "b"]);
    assert!(limited.more);
    assert_eq!(limited.count, 5);

    // Revision: the past as it was.
    let old_a = kv
        .get(k("a"), GetOptions::new().with_revision(rev_a))
        .await
        .unwrap();
    assert_eq!(old_a.kvs[0].value, b"w");
    assert_eq!(old_a.kvs[0].mod_revision, rev_a);
    let old_all = kv
        .get(
            p.as_str(),
            GetOptions::new().with_prefix().with_revision(rev_a),
        )
        .await
        .unwrap();
    assert_eq!(names(&old_all, &p), ["a", "c"]);

    // Sort by each target, both ways.
    let sorted = |target, order| {
        let kv = kv.clone();
        let p = p.clone();
        async move {
            let resp = kv
                .get(
                    p.as_str(),
                    GetOptions::new().with_prefix().with_sort(target, order),
                )
                .await
                .unwrap();
            names(&resp, &p)
        }
    };
    assert_eq!(
        sorted(SortTarget::Key, SortOrder::Ascend).await,
        ["a", "b", "c", "d", "e"]
    );
    assert_eq!(
        sorted(SortTarget::Key, SortOrder::Descend).await,
        ["e", "d", "c", "b", "a"]
    );
    assert_eq!(
        sorted(SortTarget::Create, SortOrder::Ascend).await,
        ["c", "a", "e", "b", "d"]
    );
    assert_eq!(
        sorted(SortTarget::Create, SortOrder::Descend).await,
        ["d", "b", "e", "a", "c"]
    );
    assert_eq!(
        sorted(SortTarget::Mod, SortOrder::Ascend).await,
        ["c", "e", "b", "d", "a"]
    );
    assert_eq!(
        sorted(SortTarget::Mod, SortOrder::Descend).await,
        ["a", "d", "b", "e", "c"]
    );
    assert_eq!(
        sorted(SortTarget::Value, SortOrder::Ascend).await,
        ["d", "b", "e", "a", "c"]
    );
    assert_eq!(
        sorted(SortTarget::Value, SortOrder::Descend).await,
        ["c", "a", "e", "b", "d"]
    );
    assert_eq!(
        sorted(SortTarget::Version, SortOrder::Descend).await[0],
        "a"
    );

    // Sorting happens before the limit: the two most recently modified keys.
    let newest = kv
        .get(
            p.as_str(),
            GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Mod, SortOrder::Descend)
                .with_limit(2),
        )
        .await
        .unwrap();
    assert_eq!(names(&newest, &p), ["a", "d"]);
    assert!(newest.more);

    // Serializable: served by the member the client talks to, which applied our writes before
    // acknowledging them, so it sees the same data.
    let local = kv
        .get(
            p.as_str(),
            GetOptions::new().with_prefix().with_serializable(),
        )
        .await
        .unwrap();
    assert_eq!(local.kvs, all.kvs);

    // Keys only: keys and metadata, no values.
    let keys = kv
        .get(p.as_str(), GetOptions::new().with_prefix().with_keys_only())
        .await
        .unwrap();
    assert_eq!(names(&keys, &p), ["a", "b", "c", "d", "e"]);
    assert!(keys.kvs.iter().all(|kv| kv.value.is_empty()));
    assert_eq!(keys.kvs[0].mod_revision, rev_a2);

    // Count only: no kvs at all, just the count.
    let counted = kv
        .get(
            p.as_str(),
            GetOptions::new().with_prefix().with_count_only(),
        )
        .await
        .unwrap();
    assert!(counted.kvs.is_empty());
    assert_eq!(counted.count, 5);

    // Mod and create revision bounds (inclusive).
    let filtered = |options: GetOptions| {
        let kv = kv.clone();
        let p = p.clone();
        async move {
            let resp = kv
                .get(
                    p.as_str(),
                    options
                        .with_prefix()
                        .with_sort(SortTarget::Key, SortOrder::Ascend),
                )
                .await
                .unwrap();
            names(&resp, &p)
        }
    };
    assert_eq!(
        filtered(GetOptions::new().with_min_mod_revision(rev_b)).await,
        ["a", "b", "d"]
    );
    assert_eq!(
        filtered(GetOptions::new().with_max_mod_revision(rev_b)).await,
        ["b", "c", "e"]
    );
    assert_eq!(
        filtered(GetOptions::new().with_min_create_revision(rev_e)).await,
        ["b", "d", "e"]
    );
    assert_eq!(
        filtered(GetOptions::new().with_max_create_revision(rev_a)).await,
        ["a", "c"]
    );
    assert_eq!(
        filtered(
            GetOptions::new()
                .with_min_create_revision(rev_a)
                .with_max_create_revision(rev_b)
        )
        .await,
        ["a", "b", "e"]
    );

    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_and_delete_options() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let kv = client.kv();
    let p = format!("{}/", support::unique("put"));
    let key = format!("{p}k");

    let first = client.lease().grant(60, None).await.unwrap().id;
    let second = client.lease().grant(60, None).await.unwrap().id;

    // A first put with prev_kv: there is nothing before it.
    let created = kv
        .put(
            key.as_str(),
            "v1",
            PutOptions::new().with_lease(first).with_prev_kv(),
        )
        .await
        .unwrap();
    assert_eq!(created.prev_kv, None);
    let stored = kv
        .get(key.as_str(), GetOptions::new())
        .await
        .unwrap()
        .kvs
        .remove(0);
    assert_eq!((stored.value.as_slice(), stored.lease), (&b"v1"[..], first));
    let keys = client.lease().time_to_live(first, true).await.unwrap().keys;
    assert_eq!(keys, [key.as_bytes().to_vec()]);

    // prev_kv returns the pair as it was; a put without it returns none. A plain put also
    // detaches the key from its lease.
    let replaced = kv
        .put(key.as_str(), "v2", PutOptions::new().with_prev_kv())
        .await
        .unwrap();
    let prev = replaced.prev_kv.expect("prev_kv");
    assert_eq!(
        (prev.value.as_slice(), prev.lease, prev.version),
        (&b"v1"[..], first, 1)
    );
    let plain = kv.put(key.as_str(), "v3", PutOptions::new()).await.unwrap();
    assert_eq!(plain.prev_kv, None);
    let stored = kv
        .get(key.as_str(), GetOptions::new())
        .await
        .unwrap()
        .kvs
        .remove(0);
    assert_eq!(
        (stored.value.as_slice(), stored.lease, stored.version),
        (&b"v3"[..], 0, 3)
    );

    // ignore_value: only the lease changes.
    kv.put(
        key.as_str(),
        "",
        PutOptions::new().with_ignore_value().with_lease(second),
    )
    .await
    .unwrap();
    let stored = kv
        .get(key.as_str(), GetOptions::new())
        .await
        .unwrap()
        .kvs
        .remove(0);
    assert_eq!(
        (stored.value.as_slice(), stored.lease),
        (&b"v3"[..], second)
    );

    // ignore_lease: only the value changes; the key stays on `second`.
    kv.put(key.as_str(), "v4", PutOptions::new().with_ignore_lease())
        .await
        .unwrap();
    let stored = kv
        .get(key.as_str(), GetOptions::new())
        .await
        .unwrap()
        .kvs
        .remove(0);
    assert_eq!(
        (stored.value.as_slice(), stored.lease),
        (&b"v4"[..], second)
    );

    // Both need an existing key: etcd answers "key not found" as InvalidArgument.
    let missing = format!("{p}missing");
    for options in [
        PutOptions::new().with_ignore_value(),
        PutOptions::new().with_ignore_lease(),
    ] {
        match kv.put(missing.as_str(), "", options).await {
            Err(Error::InvalidRequest(status)) => {
                assert!(status.message().contains("key not found"), "{status:?}")
            }
            other => panic!("put with ignore_* on a missing key: {other:?}"),
        }
    }
    assert_eq!(value_of(&client, &missing).await, None);

    // Deletes: a range with prev_kv returns the deleted pairs; a prefix without it only counts.
    for name in ["a", "b", "c", "d"] {
        put(&client, &format!("{p}r/{name}"), &format!("val-{name}")).await;
    }
    let deleted = kv
        .delete(
            format!("{p}r/b"),
            DeleteOptions::new()
                .with_range(format!("{p}r/d"))
                .with_prev_kv(),
        )
        .await
        .unwrap();
    assert_eq!(deleted.deleted, 2);
    let gone: Vec<(Vec<u8>, Vec<u8>)> = deleted
        .prev_kvs
        .into_iter()
        .map(|kv| (kv.key, kv.value))
        .collect();
    assert_eq!(
        gone,
        [
            (format!("{p}r/b").into_bytes(), b"val-b".to_vec()),
            (format!("{p}r/c").into_bytes(), b"val-c".to_vec()),
        ]
    );
    let rest = kv
        .get(format!("{p}r/"), GetOptions::new().with_prefix())
        .await
        .unwrap();
    assert_eq!(names(&rest, &format!("{p}r/")), ["a", "d"]);

    let by_prefix = kv
        .delete(format!("{p}r/"), DeleteOptions::new().with_prefix())
        .await
        .unwrap();
    assert_eq!(by_prefix.deleted, 2);
    assert!(by_prefix.prev_kvs.is_empty());
    let nothing = kv
        .delete(format!("{p}r/a"), DeleteOptions::new().with_prev_kv())
        .await
        .unwrap();
    assert_eq!(nothing.deleted, 0);
    assert!(nothing.prev_kvs.is_empty());

    // A single-key delete leaves its neighbours alone.
    let single = kv
        .delete(key.as_str(), DeleteOptions::new().with_prev_kv())
        .await
        .unwrap();
    assert_eq!(single.deleted, 1);
    assert_eq!(single.prev_kvs[0].value, b"v4");
    assert_eq!(value_of(&client, &key).await, None);

    drop(cluster);
}

/// The response of one operation of a txn branch.
fn op(responses: &[ResponseOp], i: usize) -> &Response {
    responses[i]
        .response
        .as_ref()
        .expect("a response for every op")
}

fn range_values(resp: &Response) -> Vec<Vec<u8>> {
    match resp {
        Response::ResponseRange(r) => r.kvs.iter().map(|kv| kv.value.clone()).collect(),
        other => panic!("expected a range response, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txn_compares_branches_and_nesting() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let kv = client.kv();
    let p = format!("{}/", support::unique("txn"));
    let k = |name: &str| format!("{p}{name}");

    let lease = client.lease().grant(60, None).await.unwrap().id;
    let created = put(&client, &k("x"), "one").await;
    let modified = put(&client, &k("x"), "two").await;
    kv.put(k("leased"), "l", PutOptions::new().with_lease(lease))
        .await
        .unwrap();
    for name in ["j/1", "j/2", "j/3"] {
        put(&client, &k(name), "same").await;
    }

    // Every compare target holds: the success branch runs its put, get and delete in order.
    put(&client, &k("doomed"), "d").await;
    let ok: TxnResponse = kv
        .txn(
            Txn::new()
                .when([
                    Compare::value(k("x"), CompareOp::Equal, "two"),
                    Compare::value(k("x"), CompareOp::Greater, "one"),
                    Compare::version(k("x"), CompareOp::Equal, 2),
                    Compare::create_revision(k("x"), CompareOp::Equal, created),
                    Compare::mod_revision(k("x"), CompareOp::Equal, modified),
                    Compare::mod_revision(k("x"), CompareOp::Greater, created),
                    Compare::lease(k("leased"), CompareOp::Equal, lease),
                    Compare::lease(k("x"), CompareOp::Equal, 0),
                    Compare::version(k("absent"), CompareOp::Equal, 0),
                ])
                .and_then([
                    TxnOp::put(k("x"), "three", PutOptions::new().with_prev_kv()),
                    TxnOp::get(k("x"), GetOptions::new()),
                    TxnOp::delete(k("doomed"), DeleteOptions::new()),
                ])
                .or_else([TxnOp::put(k("else-ran"), "yes", PutOptions::new())]),
        )
        .await
        .unwrap();
    assert!(ok.succeeded);
    assert_eq!(ok.responses.len(), 3);
    match op(&ok.responses, 0) {
        Response::ResponsePut(put) => assert_eq!(put.prev_kv.as_ref().unwrap().value, b"two"),
        other => panic!("expected a put response, got {other:?}"),
    }
    // A get after a put in the same branch sees the put.
    assert_eq!(range_values(op(&ok.responses, 1)), [b"three".to_vec()]);
    assert!(matches!(op(&ok.responses, 2), Response::ResponseDeleteRange(d) if d.deleted == 1));
    assert_eq!(value_of(&client, &k("doomed")).await, None);
    assert_eq!(value_of(&client, &k("else-ran")).await, None);
    // The whole txn is one revision.
    let txn_rev = revision(&ok.header);
    let x = kv
        .get(k("x"), GetOptions::new())
        .await
        .unwrap()
        .kvs
        .remove(0);
    assert_eq!(x.mod_revision, txn_rev);

    // One failing compare among holding ones: the else branch runs, the then branch does not.
    let failed = kv
        .txn(
            Txn::new()
                .when([
                    Compare::version(k("x"), CompareOp::Greater, 0),
                    Compare::lease(k("leased"), CompareOp::NotEqual, lease),
                ])
                .and_then([TxnOp::put(k("then-ran"), "yes", PutOptions::new())])
                .or_else([
                    TxnOp::put(k("else-ran"), "yes", PutOptions::new()),
                    TxnOp::get(k("x"), GetOptions::new()),
                    TxnOp::delete(k("leased"), DeleteOptions::new().with_prev_kv()),
                ]),
        )
        .await
        .unwrap();
    assert!(!failed.succeeded);
    assert_eq!(failed.responses.len(), 3);
    assert!(matches!(op(&failed.responses, 0), Response::ResponsePut(_)));
    assert_eq!(range_values(op(&failed.responses, 1)), [b"three".to_vec()]);
    match op(&failed.responses, 2) {
        Response::ResponseDeleteRange(d) => {
            assert_eq!(d.deleted, 1);
            assert_eq!(d.prev_kvs[0].lease, lease);
        }
        other => panic!("expected a delete response, got {other:?}"),
    }
    assert_eq!(value_of(&client, &k("then-ran")).await, None);
    assert_eq!(
        value_of(&client, &k("else-ran")).await,
        Some(b"yes".to_vec())
    );

    // Range and prefix compares hold only when they hold for every key in the range.
    let all_same = Compare::value(k("j/"), CompareOp::Equal, "same").with_prefix();
    let ranged = Compare::version(k("j/1"), CompareOp::Equal, 1).with_range(k("j/3"));
    let holds = kv
        .txn(Txn::new().when([all_same.clone(), ranged]))
        .await
        .unwrap();
    assert!(holds.succeeded);
    put(&client, &k("j/2"), "different").await;
    let broken = kv.txn(Txn::new().when([all_same])).await.unwrap();
    assert!(!broken.succeeded);
    // j/2 was rewritten after the txn: it breaks a range that holds it, not one that does not.
    let ranged = Compare::mod_revision(k("j/1"), CompareOp::Less, txn_rev).with_range(k("j/3"));
    assert!(!kv.txn(Txn::new().when([ranged])).await.unwrap().succeeded);
    let only_one = Compare::mod_revision(k("j/1"), CompareOp::Less, txn_rev).with_range(k("j/2"));
    assert!(kv.txn(Txn::new().when([only_one])).await.unwrap().succeeded);

    // Nested txns: the inner answers are reachable through the outer responses.
    let inner_ok = Txn::new()
        .when([Compare::value(k("x"), CompareOp::Equal, "three")])
        .and_then([
            TxnOp::put(k("inner"), "in", PutOptions::new()),
            TxnOp::get(k("inner"), GetOptions::new()),
        ]);
    let inner_fail = Txn::new()
        .when([Compare::version(k("x"), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(k("never"), "no", PutOptions::new())])
        .or_else([TxnOp::get(k("x"), GetOptions::new().with_keys_only())]);
    let nested = kv
        .txn(
            Txn::new()
                .when([Compare::version(k("x"), CompareOp::Greater, 0)])
                .and_then([
                    TxnOp::txn(inner_ok),
                    TxnOp::txn(inner_fail),
                    TxnOp::get(k("inner"), GetOptions::new().with_count_only()),
                ]),
        )
        .await
        .unwrap();
    assert!(nested.succeeded);
    let Response::ResponseTxn(first) = op(&nested.responses, 0) else {
        panic!("expected a txn response");
    };
    assert!(first.succeeded);
    assert!(matches!(op(&first.responses, 0), Response::ResponsePut(_)));
    assert_eq!(range_values(op(&first.responses, 1)), [b"in".to_vec()]);
    let Response::ResponseTxn(second) = op(&nested.responses, 1) else {
        panic!("expected a txn response");
    };
    assert!(!second.succeeded);
    match op(&second.responses, 0) {
        Response::ResponseRange(r) => {
            assert_eq!(r.kvs[0].key, k("x").into_bytes());
            assert!(r.kvs[0].value.is_empty(), "keys_only inside a nested txn");
        }
        other => panic!("expected a range response, got {other:?}"),
    }
    // Later ops of the outer branch see the inner writes.
    assert!(matches!(op(&nested.responses, 2), Response::ResponseRange(r) if r.count == 1));
    assert_eq!(value_of(&client, &k("never")).await, None);

    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_future_revisions_and_request_limits() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let kv = client.kv();
    let key = support::unique("compact");

    let old = put(&client, &key, "old").await;
    let middle = put(&client, &key, "middle").await;
    let newest = put(&client, &key, "new").await;

    // Before compaction the history is readable.
    let read = kv
        .get(key.as_str(), GetOptions::new().with_revision(old))
        .await
        .unwrap();
    assert_eq!(read.kvs[0].value, b"old");

    kv.compact(middle, true).await.unwrap();
    match kv
        .get(key.as_str(), GetOptions::new().with_revision(old))
        .await
    {
        Err(Error::Compacted { .. }) => {}
        other => panic!("get below the compaction revision: {other:?}"),
    }
    // The compaction revision itself stays readable.
    let at = kv
        .get(key.as_str(), GetOptions::new().with_revision(middle))
        .await
        .unwrap();
    assert_eq!(at.kvs[0].value, b"middle");
    // Compacting again at or below the same revision is refused the same way.
    assert!(matches!(
        kv.compact(old, false).await,
        Err(Error::Compacted { .. })
    ));

    match kv
        .get(key.as_str(), GetOptions::new().with_revision(newest + 1000))
        .await
    {
        Err(Error::FutureRevision) => {}
        other => panic!("get at a future revision: {other:?}"),
    }
    assert!(matches!(
        kv.compact(newest + 1000, false).await,
        Err(Error::FutureRevision)
    ));

    // Just over etcd's default 1.5 MiB request limit: the client refuses before sending.
    let big = vec![b'x'; 1536 * 1024 + 1024];
    assert!(matches!(
        kv.put(key.as_str(), big.clone(), PutOptions::new()).await,
        Err(Error::RequestTooLarge)
    ));
    // A txn counts as a whole, even when each op is small enough.
    let half = vec![b'y'; 800 * 1024];
    let txn = Txn::new().and_then([
        TxnOp::put(format!("{key}/1"), half.clone(), PutOptions::new()),
        TxnOp::put(format!("{key}/2"), half, PutOptions::new()),
    ]);
    assert!(matches!(kv.txn(txn).await, Err(Error::RequestTooLarge)));

    // With the local limit raised, the server itself refuses: etcd's own check ("request is too
    // large") for a value just over 1.5 MiB, and gRPC's receive limit (1.5 MiB + 512 KiB of
    // overhead) for a larger one. Both arrive as the same variant.
    let generous = Client::connect(
        cluster.endpoints(),
        support::options_for(&cluster).with_max_request_bytes(8 << 20),
    )
    .await
    .unwrap();
    match generous
        .kv()
        .put(key.as_str(), big, PutOptions::new())
        .await
    {
        Err(Error::RequestTooLarge) => {}
        other => panic!("server-side size check: {other:?}"),
    }
    match generous
        .kv()
        .put(key.as_str(), vec![b'z'; 3 << 20], PutOptions::new())
        .await
    {
        Err(Error::RequestTooLarge) => {}
        other => panic!("server-side gRPC receive limit: {other:?}"),
    }
    // Nothing of the refused writes landed.
    assert_eq!(value_of(&client, &key).await, Some(b"new".to_vec()));

    // An empty key is malformed by etcd's rules, for reads and writes alike.
    assert!(matches!(
        kv.put("", "v", PutOptions::new()).await,
        Err(Error::InvalidRequest(_))
    ));
    assert!(matches!(
        kv.get("", GetOptions::new()).await,
        Err(Error::InvalidRequest(_))
    ));
    assert!(matches!(
        kv.delete("", DeleteOptions::new()).await,
        Err(Error::InvalidRequest(_))
    ));

    drop(cluster);
}
