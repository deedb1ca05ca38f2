//! A distributed lock on a local 3-member etcd cluster that the example starts itself.
//!
//! Three workers each add 1 to a shared counter five times, each time under the lock, with the
//! write fenced by the lock: the counter ends at 15. Then `try_lock` on a held lock, and a
//! holder whose session is lost (its renewals stop, as when its process hangs): the next worker
//! gets the lock after the TTL, and the stale holder's fenced write is refused. Run with:
//!
//! ```text
//! cargo run --example lock --features testkit
//! ```

use std::time::Duration;

use etcd_ha::concurrency::Mutex;
use etcd_ha::testkit::Cluster;
use etcd_ha::{Client, GetOptions, Options, PutOptions, Session, Txn, TxnOp};
use tokio::time::Instant;

const COUNTER: &str = "example/counter";

/// Read the counter and write it back plus one, under the lock.
async fn increment(
    client: &Client,
    guard: &etcd_ha::concurrency::MutexGuard,
) -> etcd_ha::Result<bool> {
    let current = client.kv().get(COUNTER, GetOptions::new()).await?;
    let n: u64 = current
        .kvs
        .first()
        .and_then(|kv| std::str::from_utf8(&kv.value).ok()?.parse().ok())
        .unwrap_or(0);
    let write = guard.txn(Txn::new().and_then([TxnOp::put(
        COUNTER,
        (n + 1).to_string(),
        PutOptions::new(),
    )]));
    Ok(client.kv().txn(write).await?.succeeded)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    eprintln!("starting a local 3-member etcd cluster ...");
    let cluster = Cluster::start(3).await?;
    cluster.leader(Duration::from_secs(30)).await?;
    let mutex = Mutex::new("example/counter-lock");

    let mut workers = Vec::new();
    for w in 0..3 {
        let client = Client::connect(cluster.endpoints(), Options::default()).await?;
        let mutex = mutex.clone();
        workers.push(tokio::spawn(async move {
            let session = Session::new(&client, Duration::from_secs(10)).await?;
            for _ in 0..5 {
                let guard = mutex.lock(&session).await?;
                assert!(increment(&client, &guard).await?, "we hold the lock");
                guard.unlock().await?;
            }
            println!("worker {w} done");
            session.close().await
        }));
    }
    for worker in workers {
        worker.await??;
    }
    let client = Client::connect(cluster.endpoints(), Options::default()).await?;
    let counter = client.kv().get(COUNTER, GetOptions::new()).await?;
    println!(
        "counter = {}",
        String::from_utf8_lossy(&counter.kvs[0].value)
    );

    // try_lock while somebody holds the lock.
    let holder = Session::new(&client, Duration::from_secs(2)).await?;
    let guard = mutex.lock(&holder).await?;
    let other = Session::new(&client, Duration::from_secs(10)).await?;
    println!(
        "try_lock while held: {:?}",
        mutex.try_lock(&other).await?.map(|g| g.create_revision())
    );

    // The holder's session is lost: nothing renews its lease any more.
    holder.lease().stop();
    let began = Instant::now();
    let next = mutex.lock(&other).await?;
    println!(
        "the next worker got the lock {:?} after the holder stopped renewing",
        began.elapsed()
    );
    println!(
        "stale holder's fenced write applied: {}",
        increment(&client, &guard).await?
    );
    println!(
        "new holder's fenced write applied: {}",
        increment(&client, &next).await?
    );
    next.unlock().await?;
    drop(guard);
    Ok(())
}
