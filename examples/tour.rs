//! A tour of etcd-ha on a local 3-member etcd cluster that the example starts itself.
//!
//! Shows put / get / txn / watch, and for every answer which member served it (from the
//! response header's member id). Run with:
//!
//! ```text
//! cargo run --example tour --features testkit
//! ```

use std::collections::HashMap;
use std::time::Duration;

use etcd_ha::proto::etcdserverpb::ResponseHeader;
use etcd_ha::testkit::Cluster;
use etcd_ha::{
    Client, Compare, CompareOp, GetOptions, Options, PutOptions, Txn, TxnOp, WatchBatch,
    WatchOptions,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    eprintln!("starting a local 3-member etcd cluster ...");
    let cluster = Cluster::start(3).await?;
    let leader = cluster.leader(Duration::from_secs(30)).await?;
    println!(
        "etcd {} with members {:?}; leader is {}",
        cluster.etcd_version(),
        cluster.endpoints(),
        cluster.member_name(leader)
    );

    let client = Client::connect(cluster.endpoints(), Options::default()).await?;

    // Member id -> "name (url)", to say who answered each request.
    let members: HashMap<u64, String> = client
        .cluster()
        .member_list()
        .await?
        .members
        .into_iter()
        .map(|m| (m.id, format!("{} ({})", m.name, m.client_ur_ls.join(","))))
        .collect();
    let who = |header: Option<ResponseHeader>| {
        let id = header.map(|h| h.member_id).unwrap_or_default();
        members
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("{id:x}"))
    };

    // A watch first, so it sees the writes below: it returns once created. It is a managed
    // watch: should its member fail, it resumes on another without losing an event.
    let mut events = client
        .watch()
        .watch("tour/", WatchOptions::new().with_prefix())
        .await?;
    println!(
        "watch created at revision {}, served by {}",
        events.revision(),
        events.endpoint().unwrap_or_default()
    );

    let kv = client.kv();
    let put = kv.put("tour/color", "blue", PutOptions::new()).await?;
    println!(
        "put tour/color=blue      -> answered by {}",
        who(put.header)
    );

    let got = kv.get("tour/color", GetOptions::new()).await?;
    let value = String::from_utf8_lossy(&got.kvs[0].value).into_owned();
    println!(
        "get tour/color = {value:<8} -> answered by {}",
        who(got.header)
    );

    let serial = kv
        .get("tour/", GetOptions::new().with_prefix().with_serializable())
        .await?;
    println!(
        "serializable get: {} keys -> answered by {}",
        serial.count,
        who(serial.header)
    );

    let txn = Txn::new()
        .when([Compare::value("tour/color", CompareOp::Equal, "blue")])
        .and_then([TxnOp::put("tour/color", "green", PutOptions::new())])
        .or_else([TxnOp::get("tour/color", GetOptions::new())]);
    let txn = kv.txn(txn).await?;
    println!(
        "txn blue->green succeeded={} -> answered by {}",
        txn.succeeded,
        who(txn.header)
    );

    for _ in 0..2 {
        let batch = tokio::time::timeout(Duration::from_secs(5), events.next_batch())
            .await?
            .ok_or("watch closed")??;
        let WatchBatch::Events { events: batch, .. } = batch else {
            continue;
        };
        for event in batch {
            let kind = event.r#type();
            let kv = event.kv.unwrap_or_default();
            println!(
                "watch event {:?} {}={} at revision {}",
                kind,
                String::from_utf8_lossy(&kv.key),
                String::from_utf8_lossy(&kv.value),
                kv.mod_revision
            );
        }
    }

    for url in client.endpoint_urls() {
        let status = client.maintenance().on(&url)?.status().await?;
        let id = status.header.map(|h| h.member_id).unwrap_or_default();
        println!(
            "{url}: member {id:x}, raft term {}, leader: {}",
            status.raft_term,
            id == status.leader
        );
    }
    println!("done; the cluster is torn down on exit");
    Ok(())
}
