//! The KV processes: each runs one operation at a time on a small key set (so operations
//! conflict): puts of unique values, deletes, compare-and-swap txns, linearizable and
//! serializable gets.

use etcd_ha::Client;

use super::Ctx;
use etcd_ha_check::history::{Outcome, Request, Response};

/// How many keys the processes share.
pub const KEYS: usize = 8;

/// The key `n` of the shared set.
pub fn key(prefix: &str, n: usize) -> String {
    format!("{prefix}kv/{n}")
}

/// Run process `process` on `client` until the workload stops.
pub async fn process(ctx: Ctx, client: Client, client_id: u32, process: u32) {
    let mut rng = ctx.rng(1000 + u64::from(process));
    // The last value this process saw per key, for compare-and-swap.
    let mut last: Vec<Option<String>> = vec![None; KEYS];
    let mut seq = 0u64;
    while !ctx.stopped() {
        let n = rng.usize(..KEYS);
        let key = key(&ctx.prefix, n);
        seq += 1;
        let value = format!("p{process}-{seq}");
        let roll = rng.u32(..100);
        let request = if roll < 30 {
            Request::Put {
                key,
                value,
                lease: None,
            }
        } else if roll < 35 {
            Request::Delete { key }
        } else if roll < 55 {
            Request::Cas {
                key,
                expect: last[n].clone(),
                value,
            }
        } else if roll < 85 {
            Request::Get {
                key,
                serializable: false,
            }
        } else {
            Request::Get {
                key,
                serializable: true,
            }
        };
        let outcome = ctx
            .recorder
            .op(process, client_id, request.clone(), run(&client, &request))
            .await;
        if let Outcome::Ok(response) = &outcome {
            match (&request, response) {
                (Request::Get { .. }, Response::Get { value, .. })
                | (
                    Request::Cas { .. },
                    Response::Cas {
                        succeeded: false,
                        value,
                        ..
                    },
                ) => {
                    last[n] = value.clone();
                }
                (Request::Put { value, .. }, _) | (Request::Cas { value, .. }, _) => {
                    last[n] = Some(value.clone());
                }
                (Request::Delete { .. }, _) => last[n] = None,
                _ => {}
            }
        }
        // Paced so a seed records a few thousand ops: enough conflicts, and a history the
        // linearizability search gets through in seconds.
        tokio::time::sleep(std::time::Duration::from_millis(rng.u64(5..15))).await;
    }
}

/// A process that puts a shared key and deletes it again, over and over with hardly a pause:
/// deletes are in flight whenever a fault hits, and each finds the key it just wrote (unless
/// another process got there first), so a delete applied twice (resent after an ambiguous
/// failure) leaves an event in the truth that no delete explains.
pub async fn churn(ctx: Ctx, client: Client, client_id: u32, process: u32) {
    let mut rng = ctx.rng(1500 + u64::from(process));
    let mut seq = 0u64;
    let mut key = String::new();
    while !ctx.stopped() {
        seq += 1;
        let request = if seq.is_multiple_of(2) {
            Request::Delete { key: key.clone() }
        } else {
            key = self::key(&ctx.prefix, rng.usize(..KEYS));
            Request::Put {
                key: key.clone(),
                value: format!("p{process}-{seq}"),
                lease: None,
            }
        };
        ctx.recorder
            .op(process, client_id, request.clone(), run(&client, &request))
            .await;
        tokio::time::sleep(std::time::Duration::from_millis(rng.u64(1..4))).await;
    }
}

/// The process id of the quiet writer (the end marker's write is the harness's `MARKER_PROCESS`).
pub const QUIET_PROCESS: u32 = 300;

/// A put under the quiet prefix every 2-5 s, so the quiet watches see an event now and then
/// and otherwise nothing (while compactions pass the revision they last delivered).
pub async fn quiet_writer(ctx: Ctx, client: Client, client_id: u32) {
    let mut rng = ctx.rng(5000);
    let mut seq = 0u64;
    loop {
        let pause = std::time::Duration::from_millis(rng.u64(2_000..5_000));
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = ctx.until_stopped() => return,
        }
        seq += 1;
        let request = Request::Put {
            key: format!("{}{}", super::watch::quiet_prefix(&ctx.prefix), seq % 2),
            value: format!("q-{seq}"),
            lease: None,
        };
        ctx.recorder
            .op(
                QUIET_PROCESS,
                client_id,
                request.clone(),
                run(&client, &request),
            )
            .await;
    }
}

pub use etcd_ha_check::record::{revision, send as run, text};
