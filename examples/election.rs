//! Elections on a local 3-member etcd cluster that the example starts itself.
//!
//! Part 1, the queued `Election` (etcd's client-side recipe): three candidates campaign, an
//! observer prints every leader, each leader does one fenced write and resigns, handing over
//! in campaign order; the ex-leader's late write is refused by its fence.
//!
//! Part 2, PD-style `Leadership`: three candidates run the usual loop (acquire, hold until
//! lost, acquire again) with a 3 s lease; every etcd member is killed for 5 s and restarted.
//! The holder learns it lost the leadership before its lease could run out, and a leader is
//! back right after the cluster is. Run with:
//!
//! ```text
//! cargo run --example election --features testkit
//! ```

use std::time::Duration;

use etcd_ha::concurrency::{Election, Leadership};
use etcd_ha::testkit::Cluster;
use etcd_ha::{Client, Options, PutOptions, Session, Txn, TxnOp};
use futures_util::StreamExt;
use tokio::time::Instant;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    eprintln!("starting a local 3-member etcd cluster ...");
    let mut cluster = Cluster::start(3).await?;
    cluster.leader(Duration::from_secs(30)).await?;
    let client = Client::connect(cluster.endpoints(), Options::default()).await?;

    // Part 1: the queued election.
    let election = Election::new(&client, "example/scheduler");
    let mut leaders = election.observe();
    let observer = tokio::spawn(async move {
        while let Some(Ok(leader)) = leaders.next().await {
            println!(
                "  observed leader: {}",
                String::from_utf8_lossy(&leader.value)
            );
        }
    });
    let mut campaigns = Vec::new();
    for name in ["alpha", "beta", "gamma"] {
        let session = Session::new(&client, Duration::from_secs(10)).await?;
        let election = election.clone();
        campaigns.push(tokio::spawn(async move {
            let leader = election.campaign(&session, name).await?;
            println!(
                "{name} leads (create revision {})",
                leader.create_revision()
            );
            let fence = leader.fence();
            let write = leader.txn(Txn::new().and_then([TxnOp::put(
                "example/scheduler-state",
                format!("written by {name}"),
                PutOptions::new(),
            )]));
            session.client().kv().txn(write).await?;
            tokio::time::sleep(Duration::from_millis(500)).await;
            leader.resign().await?;
            Ok::<_, etcd_ha::Error>((name, fence))
        }));
        // Queue in this order.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut fences = Vec::new();
    for campaign in campaigns {
        fences.push(campaign.await??);
    }
    let (name, fence) = &fences[0];
    let late = fence.guard(Txn::new().and_then([TxnOp::put(
        "example/scheduler-state",
        "late write",
        PutOptions::new(),
    )]));
    let applied = client.kv().txn(late).await?.succeeded;
    println!("{name}'s late write after resigning applied: {applied}");
    observer.abort();

    // Part 2: PD-style leadership through a restart of every member.
    println!();
    let mut candidates = Vec::new();
    let (tx, mut reports) = tokio::sync::mpsc::unbounded_channel();
    for name in ["pd-1", "pd-2", "pd-3"] {
        let client = Client::connect(cluster.endpoints(), Options::default()).await?;
        let leadership =
            Leadership::new(&client, "example/pd-leader", name).with_ttl(Duration::from_secs(3));
        let tx = tx.clone();
        candidates.push(tokio::spawn(async move {
            loop {
                let held = match leadership.acquire().await {
                    Ok(held) => held,
                    Err(e) => {
                        eprintln!("{name}: {e}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                };
                let _ = tx.send((Instant::now(), format!("{name} holds the leadership")));
                let reason = held.lost().await;
                let _ = tx.send((
                    Instant::now(),
                    format!("{name} lost the leadership: {reason}"),
                ));
            }
        }));
    }
    println!("{}", reports.recv().await.ok_or("no candidate")?.1);
    let killed = Instant::now();
    cluster.kill_all();
    println!("killed every etcd member");
    tokio::time::sleep(Duration::from_secs(5)).await;
    cluster.start_all().await?;
    cluster.leader(Duration::from_secs(30)).await?;
    let back = Instant::now();
    println!("cluster back {:?} after the kill", back - killed);
    loop {
        let (at, report) = reports.recv().await.ok_or("no candidate")?;
        println!("{:>8.2?} after the kill: {report}", at - killed);
        if report.ends_with("holds the leadership") {
            println!(
                "leadership held again {:?} after the cluster was back",
                at.saturating_duration_since(back)
            );
            break;
        }
    }
    for candidate in candidates {
        candidate.abort();
    }
    Ok(())
}
