//! Your own workload under faults, with a verdict: two clients of a service keep counters by
//! compare-and-swap, read them back (linearizable and serializable) and reset them, through the
//! harness's fault proxies, while faults drawn from the seed hit the 3-member cluster. The
//! history is checked at the end: per-key linearizability, nothing lost or applied twice,
//! monotonic reads per client.
//!
//! ```sh
//! cargo run -p etcd-ha-check --example own_workload            # seed 1, 8 s of faults
//! cargo run -p etcd-ha-check --example own_workload -- 42 20   # seed 42, 20 s
//! ```
//!
//! Needs root (the peer partitions use network namespaces) and an etcd binary as the testkit
//! finds one (`ETCD_BIN`, the `PATH`, or its cache, provisioned on first use).

use std::sync::Arc;
use std::time::Duration;

use etcd_ha::Client;
use etcd_ha_check::history::{History, Outcome, Request, Response};
use etcd_ha_check::{Harness, HarnessConfig, Recorder, check};

/// Counters the clients share: few, so their operations conflict.
const COUNTERS: usize = 3;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let seed: u64 = args.next().map_or(Ok(1), |s| s.parse())?;
    let seconds: u64 = args.next().map_or(Ok(8), |s| s.parse())?;

    let mut harness = Harness::start(HarnessConfig::new(seed)).await?;
    println!("seed {seed}: etcd {}", harness.cluster().etcd_version());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut workers = Vec::new();
    for client_id in 0..2u32 {
        let client = harness.client().await?;
        // Two logical processes per client, each one operation at a time.
        for process in [client_id * 10, client_id * 10 + 1] {
            workers.push(tokio::spawn(counter_process(
                client.clone(),
                client_id,
                process,
                harness.recorder(),
                harness.kv_prefix(),
                stopped.clone(),
                seed,
            )));
        }
    }
    let faults = harness.inject_faults(Duration::from_secs(seconds)).await;
    let end = harness.recorder().now();
    stop.send(true)?;
    for worker in workers {
        worker.await?;
    }
    for fault in &faults {
        println!(
            "fault {} on {:?}: {}",
            fault.kind, fault.member, fault.detail
        );
    }
    let history = harness
        .finish(History {
            faults,
            end,
            ..History::default()
        })
        .await?;
    let report = check(&history, Duration::from_secs(60));
    println!(
        "{} operations checked against {} events of the cluster",
        history.ops.len(),
        history.truth.len()
    );
    if report.is_ok() {
        println!("verdict: ok");
        Ok(())
    } else {
        // Keep the history: `report` names each violation with the operations involved.
        std::fs::write(
            format!("own-workload-{seed}.json"),
            serde_json::to_vec(&history)?,
        )?;
        Err(format!("verdict: FAILED\n{report}").into())
    }
}

/// One process of the service: increments a counter by compare-and-swap, reads one, and now
/// and then resets one, until told to stop.
async fn counter_process(
    client: Client,
    client_id: u32,
    process: u32,
    recorder: Arc<Recorder>,
    prefix: String,
    stopped: tokio::sync::watch::Receiver<bool>,
    seed: u64,
) {
    let mut rng = fastrand::Rng::with_seed(seed ^ u64::from(process));
    let mut written = 0u64;
    while !*stopped.borrow() {
        let key = format!("{prefix}counter-{}", rng.usize(..COUNTERS));
        let request = match rng.u8(..10) {
            0..=4 => {
                // Read, then swap in the next value: every value written is unique (the
                // process and a sequence number), as the checkers need.
                let read = Request::Get {
                    key: key.clone(),
                    serializable: false,
                };
                let current = match recorder.kv(&client, process, client_id, read).await {
                    Outcome::Ok(Response::Get { value, .. }) => value,
                    _ => continue,
                };
                written += 1;
                Request::Cas {
                    key,
                    expect: current,
                    value: format!("p{process}-{written}"),
                }
            }
            5..=7 => Request::Get {
                key,
                serializable: rng.bool(),
            },
            _ => Request::Delete { key },
        };
        recorder.kv(&client, process, client_id, request).await;
        tokio::time::sleep(Duration::from_millis(rng.u64(5..30))).await;
    }
}
