//! `Kv::get_stream` against real clusters: on etcd 3.7.3 the rest of the range after the first
//! page comes by `RangeStream`, on etcd 3.5.1 (no `RangeStream`: Unimplemented) by `Range`
//! pages, and either way the pages are one snapshot: equal to a plain `get` at the same
//! revision, blind to writes made while they are read, and ended by `Compacted` when that
//! revision is compacted before the last page.

mod support;

use etcd_ha::proto::mvccpb::KeyValue;
use etcd_ha::testkit::Cluster;
use etcd_ha::{
    Client, DeleteOptions, Error, GetOptions, PutOptions, RangeMethod, RangePages, Txn, TxnOp,
};

/// Keys written under the prefix of a read.
const KEYS: usize = 5_000;

/// Puts per txn while filling (etcd takes 128 operations per txn by default).
const PER_TXN: usize = 100;

/// A 3-member cluster of `etcd` (the testkit's default binary, etcd 3.5.1, when `None`).
async fn cluster_of(etcd: Option<std::path::PathBuf>) -> Cluster {
    support::init_tracing();
    let mut builder = Cluster::builder().members(3);
    if let Some(etcd) = etcd {
        builder = builder.etcd_bin(etcd);
    }
    let cluster = builder.start().await.expect("start the etcd cluster");
    cluster
        .leader(support::READY)
        .await
        .expect("the cluster elects a leader");
    cluster
}

/// Write `KEYS` keys `prefix/k00000`.. with values of `value_len` bytes; the revision after.
async fn fill(client: &Client, prefix: &str, value_len: usize) -> i64 {
    let mut revision = 0;
    for batch in 0..KEYS / PER_TXN {
        let ops = (0..PER_TXN).map(|i| {
            let n = batch * PER_TXN + i;
            let value = format!("{n:0width$}", width = value_len);
            TxnOp::put(key(prefix, n), value, PutOptions::new())
        });
        let resp = client
            .kv()
            .txn(Txn::new().and_then(ops))
            .await
            .expect("fill txn");
        revision = resp.header.expect("txn header").revision;
    }
    revision
}

fn key(prefix: &str, n: usize) -> String {
    format!("{prefix}/k{n:05}")
}

/// Every remaining page of `pages`, and the methods that served them.
async fn rest(pages: &mut RangePages) -> etcd_ha::Result<(Vec<Vec<KeyValue>>, Vec<RangeMethod>)> {
    let mut got = Vec::new();
    let mut methods = Vec::new();
    while let Some(page) = pages.page().await? {
        assert!(!page.is_empty(), "a page without keys");
        got.push(page);
        methods.push(pages.method().expect("a method once a page came"));
    }
    Ok((got, methods))
}

/// Read the prefix with `get_stream`, writing under it after the first page (a new key, a
/// rewritten one, a deleted one): the pages must be the snapshot at the first page's revision,
/// equal to a plain `get` at it. Returns the methods of the pages after the first.
async fn snapshot_read(client: &Client, prefix: &str, options: GetOptions) -> Vec<RangeMethod> {
    let kv = client.kv();
    let mut pages = kv.get_stream(format!("{prefix}/"), options.clone().with_prefix());
    let first = pages.page().await.expect("first page").expect("keys");
    assert_eq!(pages.method(), Some(RangeMethod::Range));
    let revision = pages.revision().expect("the first page pins the revision");

    kv.put(format!("{prefix}/new"), "after", PutOptions::new())
        .await
        .expect("put a new key");
    kv.put(key(prefix, 1), "rewritten", PutOptions::new())
        .await
        .expect("rewrite a key");
    kv.delete(key(prefix, KEYS - 1), DeleteOptions::new())
        .await
        .expect("delete a key");

    let (later, methods) = rest(&mut pages).await.expect("the rest of the pages");
    assert_eq!(
        pages.revision(),
        Some(revision),
        "the revision stays pinned"
    );
    let read: Vec<KeyValue> = std::iter::once(first)
        .chain(later.iter().cloned())
        .flatten()
        .collect();

    let at = kv
        .get(
            format!("{prefix}/"),
            options.with_prefix().with_revision(revision),
        )
        .await
        .expect("plain get at the pinned revision");
    assert_eq!(
        read.len(),
        KEYS,
        "the snapshot has every key and no new one"
    );
    assert!(
        read == at.kvs,
        "get_stream differs from get at revision {revision}"
    );
    // Bounded: the range came in many pages, none of them the whole range.
    assert!(later.len() >= 2, "{} pages after the first", later.len());
    assert!(later.iter().all(|p| p.len() < KEYS));
    // The writes did happen: only the snapshot is blind to them.
    let now = kv
        .get(format!("{prefix}/"), GetOptions::new().with_prefix())
        .await
        .expect("get now");
    assert_eq!(now.count, KEYS as i64);
    assert!(now.kvs.iter().any(|kv| kv.key.ends_with(b"/new")));
    methods
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_etcd_3_7_the_rest_of_the_range_comes_by_range_stream() {
    let cluster = cluster_of(Some(support::etcd_of_version("3.7.3"))).await;
    let client = support::client(&cluster).await;
    let prefix = support::unique("stream37");
    fill(&client, &prefix, 100).await;

    let before = client.call_stats();
    let methods = snapshot_read(&client, &prefix, GetOptions::new()).await;
    assert!(
        methods.iter().all(|m| *m == RangeMethod::RangeStream),
        "{methods:?}"
    );
    // The reads and writes of the check, and exactly two calls for the whole read: the first
    // page and one RangeStream (3 puts/deletes and 2 gets besides).
    let calls = client.call_stats().since(&before).calls;
    assert_eq!(calls, 2 + 3 + 2, "calls made");

    // In a namespace: the keys sent carry its prefix (the stream's next start too), the keys
    // handed out do not.
    let scoped = client
        .with_namespace(format!("{prefix}/"))
        .expect("namespace");
    let mut pages = scoped
        .kv()
        .get_stream("k", GetOptions::new().with_prefix().with_page_size(500));
    let (got, methods) = rest(&mut pages).await.expect("namespaced read");
    let keys: Vec<Vec<u8>> = got.into_iter().flatten().map(|kv| kv.key).collect();
    let expected: Vec<Vec<u8>> = (0..KEYS - 1)
        .map(|n| format!("k{n:05}").into_bytes())
        .collect();
    assert!(
        keys == expected,
        "{} keys, first {:?}",
        keys.len(),
        keys.first()
    );
    assert_eq!(methods.last(), Some(&RangeMethod::RangeStream));

    // Serializable, from any member, the same way.
    let prefix = support::unique("stream37s");
    fill(&client, &prefix, 100).await;
    let methods = snapshot_read(&client, &prefix, GetOptions::new().with_serializable()).await;
    assert!(methods.iter().all(|m| *m == RangeMethod::RangeStream));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_etcd_3_7_it_pages_without_asking_for_range_stream() {
    let cluster = cluster_without_range_stream().await;
    let client = support::client(&cluster).await;
    let prefix = support::unique("paged35");
    fill(&client, &prefix, 100).await;

    let methods = snapshot_read(&client, &prefix, GetOptions::new()).await;
    assert!(
        methods.iter().all(|m| *m == RangeMethod::Range),
        "{methods:?}"
    );

    // Once every member's version is known (3.5.1, from its Status), none is asked for
    // RangeStream: a read's calls are its pages (5 of 1000 keys), nothing more. (A member of
    // unknown version that answers "unknown method" is remembered instead: unit tests in
    // `call/unimplemented.rs`.)
    support::all_healthy(&client).await;
    assert!(client.endpoints().iter().all(|e| e.version.is_some()));
    for read in 0..3 {
        let before = client.call_stats();
        let mut pages = client
            .kv()
            .get_stream(format!("{prefix}/"), GetOptions::new().with_prefix());
        let (got, methods) = rest(&mut pages).await.expect("paged read");
        assert_eq!(got.iter().map(Vec::len).sum::<usize>(), KEYS);
        assert!(methods.iter().all(|m| *m == RangeMethod::Range));
        let extra = client.call_stats().since(&before).calls - got.len() as u64;
        assert_eq!(extra, 0, "read {read}: {extra} calls besides its pages");
    }

    // A page size of its own.
    let mut pages = client.kv().get_stream(
        format!("{prefix}/"),
        GetOptions::new().with_prefix().with_page_size(700),
    );
    let (got, _) = rest(&mut pages).await.expect("paged read");
    assert_eq!(got.len(), KEYS.div_ceil(700));
}

/// The suite's own server, unless it serves RangeStream (the 3.7 leg of CI): then 3.6.
async fn cluster_without_range_stream() -> Cluster {
    let cluster = support::cluster3().await;
    let version: etcd_ha::ServerVersion = cluster.etcd_version().parse().unwrap();
    if !version.serves_range_stream() {
        return cluster;
    }
    drop(cluster);
    cluster_of(Some(support::etcd_of_version("3.6.16"))).await
}

/// Compact past the revision of a read after its first page: the next page fails with the
/// typed error, on either method.
async fn compaction_ends_the_read(client: &Client, prefix: &str) {
    let kv = client.kv();
    let mut pages = kv.get_stream(
        format!("{prefix}/"),
        GetOptions::new().with_prefix().with_page_size(100),
    );
    pages.page().await.expect("first page").expect("keys");
    // One chunk of the rest, on a member with RangeStream: the stream is open when compacted.
    pages.page().await.expect("second page").expect("keys");
    let at = kv
        .put(format!("{prefix}/new"), "after", PutOptions::new())
        .await
        .expect("put")
        .header
        .expect("header")
        .revision;
    kv.compact(at, true).await.expect("compact");
    let error = loop {
        match pages.page().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the read ended although its revision was compacted"),
            Err(error) => break error,
        }
    };
    assert!(matches!(error, Error::Compacted { .. }), "{error:?}");
    // It ended with its error.
    assert!(matches!(pages.page().await, Ok(None)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_revision_ends_the_read_with_compacted() {
    // Paging (a server without RangeStream).
    let cluster = cluster_without_range_stream().await;
    let client = support::client(&cluster).await;
    let prefix = support::unique("compact35");
    fill(&client, &prefix, 100).await;
    compaction_ends_the_read(&client, &prefix).await;
    drop(client);
    drop(cluster);

    // A RangeStream open when the compaction comes (etcd 3.7.3). 2 kB values, 10 MB in all:
    // more than HTTP/2 lets the server send ahead, so most chunks are read after it.
    let cluster = cluster_of(Some(support::etcd_of_version("3.7.3"))).await;
    let client = support::client(&cluster).await;
    let prefix = support::unique("compact37");
    fill(&client, &prefix, 2_000).await;
    compaction_ends_the_read(&client, &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_options_come_as_the_first_item() {
    let cluster = support::cluster1().await;
    let client = support::client(&cluster).await;
    let sorted = GetOptions::new()
        .with_prefix()
        .with_sort(etcd_ha::SortTarget::Mod, etcd_ha::SortOrder::Descend);
    let mut pages = client.kv().get_stream("any/", sorted);
    assert!(matches!(
        pages.page().await,
        Err(Error::InvalidOptions {
            option: "with_sort",
            ..
        })
    ));
    assert!(matches!(pages.page().await, Ok(None)));
    // An empty range is no page at all, and a revision all the same.
    let mut pages = client
        .kv()
        .get_stream(support::unique("empty"), GetOptions::new().with_prefix());
    assert!(matches!(pages.page().await, Ok(None)));
    assert!(pages.revision().is_some_and(|r| r > 0));
}
