//! The KV processes: each runs one operation at a time on a small key set (so operations
//! conflict): puts of unique values, deletes, compare-and-swap txns, linearizable and
//! serializable gets.

use etcd_ha::proto::etcdserverpb::response_op::Response as OpResponse;
use etcd_ha::{Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp};

use super::Ctx;
use crate::history::{Outcome, Request, Response};

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

/// The process id of the quiet writer and of the end marker's write.
pub const QUIET_PROCESS: u32 = 300;
pub const MARKER_PROCESS: u32 = 301;

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

/// Send one request.
pub async fn run(client: &Client, request: &Request) -> etcd_ha::Result<Response> {
    let kv = client.kv();
    match request {
        Request::Put { key, value, lease } => {
            let mut options = PutOptions::new();
            if let Some(lease) = lease {
                options = options.with_lease(*lease);
            }
            let r = kv.put(key.as_str(), value.as_str(), options).await?;
            Ok(Response::Put {
                revision: revision(&r.header),
            })
        }
        Request::Delete { key } => {
            let r = kv.delete(key.as_str(), DeleteOptions::new()).await?;
            Ok(Response::Delete {
                revision: revision(&r.header),
                deleted: r.deleted,
            })
        }
        Request::Get { key, serializable } => {
            let mut options = GetOptions::new();
            if *serializable {
                options = options.with_serializable();
            }
            let r = kv.get(key.as_str(), options).await?;
            let kv = r.kvs.first();
            Ok(Response::Get {
                revision: revision(&r.header),
                value: kv.map(|kv| text(&kv.value)),
                mod_revision: kv.map_or(0, |kv| kv.mod_revision),
            })
        }
        Request::Cas { key, expect, value } => {
            let compare = match expect {
                Some(expect) => Compare::value(key.as_str(), CompareOp::Equal, expect.as_str()),
                None => Compare::create_revision(key.as_str(), CompareOp::Equal, 0),
            };
            let txn = Txn::new()
                .when([compare])
                .and_then([TxnOp::put(key.as_str(), value.as_str(), PutOptions::new())])
                .or_else([TxnOp::get(key.as_str(), GetOptions::new())]);
            let r = kv.txn(txn).await?;
            let value = r.responses.first().and_then(|op| match &op.response {
                Some(OpResponse::ResponseRange(range)) => {
                    range.kvs.first().map(|kv| text(&kv.value))
                }
                _ => None,
            });
            Ok(Response::Cas {
                revision: revision(&r.header),
                succeeded: r.succeeded,
                value: if r.succeeded { None } else { value },
            })
        }
        Request::FencedPut { .. } => unreachable!("fenced puts are made by holders"),
    }
}

pub fn revision(header: &Option<etcd_ha::proto::etcdserverpb::ResponseHeader>) -> i64 {
    header.as_ref().map_or(0, |h| h.revision)
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
