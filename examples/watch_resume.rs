//! The managed watch resuming across a member failure and a compaction, on a local 3-member
//! etcd cluster that the example starts itself.
//!
//! A writer puts `orders/0`, `orders/1`, ... every 20 ms. A managed watch follows the prefix;
//! halfway through, the member that carries the watch is killed. The watch moves to another
//! member and resumes where it left off: every order arrives exactly once, in order. Then the
//! history is compacted under a watch that starts in the past, which, made with
//! `with_reload_on_compaction`, hands over the current state instead of failing. Run with:
//!
//! ```text
//! cargo run --example watch_resume --features testkit
//! ```

use std::time::Duration;

use etcd_ha::testkit::Cluster;
use etcd_ha::{Client, GetOptions, Options, PutOptions, WatchBatch, WatchOptions};

/// Orders the writer puts.
const ORDERS: usize = 150;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    eprintln!("starting a local 3-member etcd cluster ...");
    let mut cluster = Cluster::start(3).await?;
    cluster.leader(Duration::from_secs(30)).await?;
    let client = Client::connect(cluster.endpoints(), Options::default()).await?;

    // Watch from the current revision on, then start writing.
    let start = client
        .kv()
        .get("orders/", GetOptions::new().with_prefix().with_count_only())
        .await?
        .header
        .map_or(0, |h| h.revision);
    let mut orders = client
        .watch()
        .watch(
            "orders/",
            WatchOptions::new()
                .with_prefix()
                .with_start_revision(start + 1),
        )
        .await?;
    let writer = {
        let client = client.clone();
        tokio::spawn(async move {
            for i in 0..ORDERS {
                // A put can fail while the cluster elects a new leader; try again.
                while client
                    .kv()
                    .put(
                        format!("orders/{i:04}"),
                        format!("order {i}"),
                        PutOptions::new(),
                    )
                    .await
                    .is_err()
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    let mut seen = Vec::new();
    let mut killed = false;
    while seen.len() < ORDERS {
        let batch = tokio::time::timeout(Duration::from_secs(20), orders.next_batch())
            .await?
            .ok_or("the watch ended")??;
        if let WatchBatch::Events { revision, events } = batch {
            for event in events {
                let key = event.kv.map(|kv| kv.key).unwrap_or_default();
                seen.push(String::from_utf8_lossy(&key).into_owned());
            }
            if !killed && seen.len() >= ORDERS / 2 {
                // Kill the member our watch stream is on.
                let url = orders.endpoint().ok_or("no watch stream")?;
                let member = (0..cluster.len())
                    .find(|&i| cluster.endpoint(i) == url)
                    .ok_or("the watch is on an unknown member")?;
                println!(
                    "after {} orders (revision {revision}) killing {}, which carries the watch",
                    seen.len(),
                    cluster.member_name(member)
                );
                cluster.kill(member);
                killed = true;
            }
        }
    }
    writer.await?;
    let expected: Vec<String> = (0..ORDERS).map(|i| format!("orders/{i:04}")).collect();
    assert_eq!(seen, expected, "every order exactly once, in order");
    println!(
        "all {ORDERS} orders arrived exactly once and in order; the watch now runs on {:?}",
        orders.endpoint()
    );

    // Compaction: a watch that needs history that is gone gets the current state instead.
    let now = client
        .kv()
        .get("orders/", GetOptions::new().with_prefix().with_count_only())
        .await?;
    let compact_at = now.header.map_or(0, |h| h.revision);
    client.kv().compact(compact_at, true).await?;
    let mut late = client
        .watch()
        .watch(
            "orders/",
            WatchOptions::new()
                .with_prefix()
                .with_start_revision(start + 1)
                .with_reload_on_compaction(),
        )
        .await?;
    match late.next_batch().await.ok_or("the watch ended")?? {
        WatchBatch::Reloaded { revision, kvs } => println!(
            "history before {compact_at} is compacted: the late watch reloaded {} keys at revision {revision}, and goes on from there",
            kvs.len()
        ),
        other => println!("unexpected first batch: {other:?}"),
    }
    Ok(())
}
