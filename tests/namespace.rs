//! Namespaced clients against a real 3-member etcd: two namespaces on one cluster never see each
//! other's keys (prefix, from-key and full-range reads, delete ranges, txns, managed and raw
//! watches, a lease's keys), keys land prefixed in the raw keyspace, recipes with the same name
//! in two namespaces do not interfere, namespaces nest, and an empty prefix is a typed error.

mod support;

use std::time::Duration;

use etcd_ha::concurrency::{Election, Mutex};
use etcd_ha::proto::mvccpb::KeyValue;
use etcd_ha::{
    Client, Compare, CompareOp, DeleteOptions, Error, GetOptions, PutOptions, Session, Txn, TxnOp,
    WatchBatch, WatchOptions,
};

/// Bound on one step that should happen at once.
const PROMPT: Duration = Duration::from_secs(10);

fn keys(kvs: &[KeyValue]) -> Vec<String> {
    kvs.iter()
        .map(|kv| String::from_utf8_lossy(&kv.key).into_owned())
        .collect()
}

async fn put(client: &Client, key: &str, value: &str) {
    client
        .kv()
        .put(key, value, PutOptions::new())
        .await
        .unwrap();
}

async fn get(client: &Client, key: impl Into<Vec<u8>>, options: GetOptions) -> Vec<String> {
    keys(&client.kv().get(key, options).await.unwrap().kvs)
}

/// Two tenants `<base>/tenant-a/` and `<base>/tenant-b/`, with raw keys right next to tenant
/// a's range on both sides (its prefix without the slash, and its prefix's end) that no read of
/// tenant a may reach.
async fn tenants(client: &Client) -> (String, Client, Client) {
    let base = support::unique("ns");
    let a = client.with_namespace(format!("{base}/tenant-a/")).unwrap();
    let b = client.with_namespace(format!("{base}/tenant-b/")).unwrap();
    put(client, &format!("{base}/tenant-a"), "outside").await;
    put(client, &format!("{base}/tenant-a0"), "outside").await;
    put(client, &format!("{base}/tenant-a."), "outside").await;
    for k in ["k1", "k2", "sub/x"] {
        put(&a, k, &format!("a:{k}")).await;
    }
    for k in ["k1", "k3"] {
        put(&b, k, &format!("b:{k}")).await;
    }
    (base, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_deletes_stay_inside_their_namespace() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let (base, a, b) = tenants(&client).await;

    // Prefix reads, the empty prefix included, see only the tenant's keys, stripped.
    assert_eq!(
        get(&a, "", GetOptions::new().with_prefix()).await,
        ["k1", "k2", "sub/x"]
    );
    assert_eq!(
        get(&b, "", GetOptions::new().with_prefix()).await,
        ["k1", "k3"]
    );
    assert_eq!(
        get(&a, "k", GetOptions::new().with_prefix()).await,
        ["k1", "k2"]
    );
    // From-key reads end at the namespace's end: "tenant-a0" (its prefix end) is not reached.
    assert_eq!(
        get(&a, "k2", GetOptions::new().with_from_key()).await,
        ["k2", "sub/x"]
    );
    assert_eq!(
        get(&a, "", GetOptions::new().with_from_key()).await,
        ["k1", "k2", "sub/x"]
    );
    // etcd's "every key" ("\0" to "\0") is every key of the namespace.
    assert_eq!(
        get(&a, vec![0], GetOptions::new().with_from_key()).await,
        ["k1", "k2", "sub/x"]
    );
    // An explicit range end is inside the namespace too.
    assert_eq!(
        get(&a, "a", GetOptions::new().with_range("l")).await,
        ["k1", "k2"]
    );
    // One key: each tenant has its own k1.
    let a1 = a.kv().get("k1", GetOptions::new()).await.unwrap();
    assert_eq!(
        (keys(&a1.kvs), a1.kvs[0].value.clone()),
        (vec!["k1".into()], b"a:k1".to_vec())
    );
    let b1 = b.kv().get("k1", GetOptions::new()).await.unwrap();
    assert_eq!(b1.kvs[0].value, b"b:k1");
    assert_eq!(a.kv().get("k3", GetOptions::new()).await.unwrap().count, 0);
    // Counts and keys-only reads are of the namespace as well.
    let count = a
        .kv()
        .get("", GetOptions::new().with_prefix().with_count_only())
        .await
        .unwrap();
    assert_eq!(count.count, 3);

    // The raw keyspace holds the keys with their prefix.
    assert_eq!(
        get(&client, format!("{base}/"), GetOptions::new().with_prefix()).await,
        [
            format!("{base}/tenant-a"),
            format!("{base}/tenant-a."),
            format!("{base}/tenant-a/k1"),
            format!("{base}/tenant-a/k2"),
            format!("{base}/tenant-a/sub/x"),
            format!("{base}/tenant-a0"),
            format!("{base}/tenant-b/k1"),
            format!("{base}/tenant-b/k3"),
        ]
    );

    // A put's previous value comes back stripped.
    let prev = a
        .kv()
        .put("k1", "a:k1'", PutOptions::new().with_prev_kv())
        .await
        .unwrap();
    assert_eq!(prev.prev_kv.unwrap().key, b"k1");

    // Deleting everything from "" deletes the tenant's keys only, and says which, stripped.
    let gone = a
        .kv()
        .delete("", DeleteOptions::new().with_from_key().with_prev_kv())
        .await
        .unwrap();
    assert_eq!(gone.deleted, 3);
    assert_eq!(keys(&gone.prev_kvs), ["k1", "k2", "sub/x"]);
    assert_eq!(
        get(&b, "", GetOptions::new().with_prefix()).await,
        ["k1", "k3"]
    );
    assert_eq!(
        get(
            &client,
            format!("{base}/tenant-a"),
            GetOptions::new().with_prefix()
        )
        .await,
        [
            format!("{base}/tenant-a"),
            format!("{base}/tenant-a."),
            format!("{base}/tenant-a0")
        ]
    );
    let gone = b
        .kv()
        .delete("", DeleteOptions::new().with_prefix())
        .await
        .unwrap();
    assert_eq!(gone.deleted, 2);
    assert_eq!(
        client
            .kv()
            .get(format!("{base}/"), GetOptions::new().with_prefix())
            .await
            .unwrap()
            .count,
        3,
        "only the raw keys outside both tenants are left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txns_compare_and_act_inside_their_namespace() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let (base, a, b) = tenants(&client).await;

    // k3 exists only in b: a compare on it in a sees an absent key.
    let absent = Txn::new().when([Compare::version("k3", CompareOp::Equal, 0)]);
    assert!(a.kv().txn(absent.clone()).await.unwrap().succeeded);
    assert!(!b.kv().txn(absent).await.unwrap().succeeded);
    // A compare over a range (every key of the namespace) sees the namespace's keys only.
    let all_from_a = Compare::value("", CompareOp::Less, "b:").with_range(vec![0]);
    let prefixed_a = Txn::new().when([all_from_a]);
    assert!(a.kv().txn(prefixed_a.clone()).await.unwrap().succeeded);
    assert!(!b.kv().txn(prefixed_a).await.unwrap().succeeded);

    // Ops at every depth act on the namespace, and their answers are stripped.
    let nested = Txn::new()
        .when([Compare::value("k1", CompareOp::Equal, "a:k1")])
        .and_then([
            TxnOp::delete("k2", DeleteOptions::new().with_prev_kv()),
            TxnOp::get("", GetOptions::new().with_prefix()),
        ]);
    let txn = Txn::new()
        .when([Compare::version("k1", CompareOp::Greater, 0)])
        .and_then([
            TxnOp::put("k4", "a:k4", PutOptions::new().with_prev_kv()),
            TxnOp::txn(nested),
        ]);
    let resp = a.kv().txn(txn).await.unwrap();
    assert!(resp.succeeded);
    use etcd_ha::proto::etcdserverpb::response_op::Response;
    let Some(Response::ResponseTxn(inner)) = &resp.responses[1].response else {
        panic!("a nested txn response: {resp:?}")
    };
    assert!(inner.succeeded);
    let Some(Response::ResponseDeleteRange(d)) = &inner.responses[0].response else {
        panic!("{inner:?}")
    };
    assert_eq!(keys(&d.prev_kvs), ["k2"]);
    let Some(Response::ResponseRange(r)) = &inner.responses[1].response else {
        panic!("{inner:?}")
    };
    assert_eq!(keys(&r.kvs), ["k1", "k4", "sub/x"]);
    assert_eq!(
        get(&b, "", GetOptions::new().with_prefix()).await,
        ["k1", "k3"]
    );
    assert_eq!(
        get(&client, format!("{base}/tenant-a/k4"), GetOptions::new()).await,
        [format!("{base}/tenant-a/k4")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_see_their_namespace_only_with_keys_stripped() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let (base, a, b) = tenants(&client).await;

    let options = WatchOptions::new().with_prefix().with_prev_kv();
    let mut managed = a.watch().watch("", options.clone()).await.unwrap();
    let (_watcher, mut raw) = a.watch().raw("", options.clone()).await.unwrap();
    let mut from_key = a
        .watch()
        .watch("k", WatchOptions::new().with_from_key())
        .await
        .unwrap();
    // Wait for the raw create's answer before writing.
    let created = tokio::time::timeout(PROMPT, raw.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(created.created);

    put(&b, "k1", "b:k1'").await;
    put(&client, &format!("{base}/tenant-a0"), "outside'").await;
    put(&a, "k1", "a:k1'").await;
    a.kv().delete("sub/x", DeleteOptions::new()).await.unwrap();

    let mut seen = Vec::new();
    while seen.len() < 2 {
        let batch = tokio::time::timeout(PROMPT, managed.next_batch())
            .await
            .unwrap()
            .unwrap();
        if let WatchBatch::Events { events, .. } = batch.unwrap() {
            for e in events {
                let prev = e
                    .prev_kv
                    .as_ref()
                    .map(|kv| kv.key.clone())
                    .unwrap_or_default();
                seen.push((
                    String::from_utf8(e.kv.unwrap().key).unwrap(),
                    String::from_utf8(prev).unwrap(),
                ));
            }
        }
    }
    assert_eq!(
        seen,
        [("k1".into(), "k1".into()), ("sub/x".into(), "sub/x".into())]
    );

    let mut seen = Vec::new();
    while seen.len() < 2 {
        let resp = tokio::time::timeout(PROMPT, raw.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        for e in resp.events {
            seen.push(String::from_utf8(e.kv.unwrap().key).unwrap());
            assert!(!e.prev_kv.unwrap().key.starts_with(b"ns/"));
        }
    }
    assert_eq!(seen, ["k1", "sub/x"]);

    // The from-key watch stops at the namespace's end: "tenant-a0" raised no event.
    let batch = tokio::time::timeout(PROMPT, from_key.next_batch())
        .await
        .unwrap()
        .unwrap();
    let WatchBatch::Events { events, .. } = batch.unwrap() else {
        panic!()
    };
    assert_eq!(
        String::from_utf8_lossy(&events[0].kv.as_ref().unwrap().key),
        "k1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lists_the_keys_of_the_namespace_asking() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let base = support::unique("ns");
    let a = client.with_namespace(format!("{base}/a/")).unwrap();
    let b = client.with_namespace(format!("{base}/b/")).unwrap();
    let lease = client.lease().grant(30, None).await.unwrap().id;
    let with_lease = PutOptions::new().with_lease(lease);
    a.kv().put("held", "1", with_lease.clone()).await.unwrap();
    b.kv().put("held", "2", with_lease.clone()).await.unwrap();
    b.kv().put("also", "3", with_lease).await.unwrap();

    let listed = |keys: Vec<Vec<u8>>| {
        let mut keys: Vec<String> = keys
            .into_iter()
            .map(|k| String::from_utf8(k).unwrap())
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(
        listed(a.lease().time_to_live(lease, true).await.unwrap().keys),
        ["held"]
    );
    assert_eq!(
        listed(b.lease().time_to_live(lease, true).await.unwrap().keys),
        ["also", "held"]
    );
    assert_eq!(
        listed(client.lease().time_to_live(lease, true).await.unwrap().keys),
        [
            format!("{base}/a/held"),
            format!("{base}/b/also"),
            format!("{base}/b/held")
        ]
    );
    client.lease().revoke(lease).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipes_with_one_name_in_two_namespaces_do_not_interfere() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let base = support::unique("ns");
    let a = client.with_namespace(format!("{base}/a/")).unwrap();
    let b = client.with_namespace(format!("{base}/b/")).unwrap();
    let ttl = Duration::from_secs(30);
    let (sa, sb) = (
        Session::new(&a, ttl).await.unwrap(),
        Session::new(&b, ttl).await.unwrap(),
    );

    // The same lock name: each namespace's lock is free.
    let guard_a = Mutex::new("locks/db")
        .try_lock(&sa)
        .await
        .unwrap()
        .expect("a's lock is free");
    let guard_b = Mutex::new("locks/db")
        .try_lock(&sb)
        .await
        .unwrap()
        .expect("b's lock is free");
    assert!(
        guard_a.key().starts_with(b"locks/db/"),
        "the holder's key is namespaced: {:?}",
        guard_a.key()
    );
    // Inside one namespace the lock is still exclusive.
    let sa2 = Session::new(&a, ttl).await.unwrap();
    assert!(
        Mutex::new("locks/db")
            .try_lock(&sa2)
            .await
            .unwrap()
            .is_none()
    );
    // And the fence of a's holder guards a's keys.
    let fenced = guard_a.txn(Txn::new().and_then([TxnOp::put("guarded", "a", PutOptions::new())]));
    assert!(a.kv().txn(fenced).await.unwrap().succeeded);
    assert_eq!(get(&a, "guarded", GetOptions::new()).await, ["guarded"]);
    assert!(get(&b, "guarded", GetOptions::new()).await.is_empty());

    // The same election name: both campaigns win at once, each leader is its namespace's.
    let (ea, eb) = (Election::new(&a, "leader"), Election::new(&b, "leader"));
    let la = tokio::time::timeout(PROMPT, ea.campaign(&sa, "node-a"))
        .await
        .unwrap()
        .unwrap();
    let lb = tokio::time::timeout(PROMPT, eb.campaign(&sb, "node-b"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ea.leader().await.unwrap().unwrap().value, b"node-a");
    assert_eq!(eb.leader().await.unwrap().unwrap().value, b"node-b");
    assert!(
        ea.leader()
            .await
            .unwrap()
            .unwrap()
            .key
            .starts_with(b"leader/")
    );
    la.proclaim("node-a'").await.unwrap();
    assert_eq!(eb.leader().await.unwrap().unwrap().value, b"node-b");

    // Raw: every recipe key sits under its namespace.
    let raw = get(
        &client,
        format!("{base}/"),
        GetOptions::new().with_prefix().with_keys_only(),
    )
    .await;
    assert!(
        raw.iter()
            .any(|k| k.starts_with(&format!("{base}/a/locks/db/"))),
        "{raw:?}"
    );
    assert!(
        raw.iter()
            .any(|k| k.starts_with(&format!("{base}/b/leader/"))),
        "{raw:?}"
    );
    assert!(
        raw.iter()
            .all(|k| k.starts_with(&format!("{base}/a/")) || k.starts_with(&format!("{base}/b/")))
    );

    lb.resign().await.unwrap();
    la.resign().await.unwrap();
    guard_a.unlock().await.unwrap();
    guard_b.unlock().await.unwrap();
    for s in [sa, sb, sa2] {
        s.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_nest_and_an_empty_prefix_is_refused() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let base = support::unique("ns");
    let outer = client.with_namespace(format!("{base}/")).unwrap();
    let nested = outer.with_namespace("inner/").unwrap();
    assert_eq!(
        nested.namespace(),
        Some(format!("{base}/inner/").as_bytes())
    );
    put(&nested, "k", "v").await;
    assert_eq!(
        get(&outer, "", GetOptions::new().with_prefix()).await,
        ["inner/k"]
    );
    assert_eq!(
        get(&nested, "", GetOptions::new().with_from_key()).await,
        ["k"]
    );
    let flat = client.with_namespace(format!("{base}/inner/")).unwrap();
    assert_eq!(get(&flat, "k", GetOptions::new()).await, ["k"]);
    assert_eq!(
        get(&client, format!("{base}/inner/k"), GetOptions::new()).await,
        [format!("{base}/inner/k")]
    );

    assert!(matches!(
        client.with_namespace(""),
        Err(Error::InvalidNamespace { .. })
    ));
    assert!(matches!(
        outer.with_namespace(b""),
        Err(Error::InvalidNamespace { .. })
    ));
    assert!(!Error::InvalidNamespace { reason: "x" }.may_have_applied());
}
