//! A managed watch on the whole workload prefix (with previous values and progress
//! notifications), restarted from the revision it reached every few seconds so resumption is
//! exercised too; everything it delivers is recorded.

use std::time::Duration;

use etcd_ha::proto::mvccpb::event::EventType;
use etcd_ha::{Client, WatchBatch, WatchOptions, WatchStream};

use super::Ctx;
use super::kv::text;
use crate::history::{Batch, Delivery, EventKind, WatchEnd, WatchEvent, WatchLog};

/// Watch until the workload stops, one `WatchLog` per watch made.
pub async fn watcher(ctx: Ctx, client: Client, client_id: u32) {
    let mut rng = ctx.rng(2000 + u64::from(client_id));
    // Where the next watch starts: 0 (now) for the first one and after a compaction.
    let mut start = 0i64;
    let mut n = 0u32;
    while !ctx.stopped() {
        let options = WatchOptions::new()
            .with_prefix()
            .with_prev_kv()
            .with_progress_notify()
            .with_start_revision(start);
        let created_at = ctx.recorder.now();
        let stream = client.watch().watch(ctx.prefix.clone(), options).await;
        let mut log = WatchLog {
            id: client_id * 10_000 + n,
            client: client_id,
            prefix: ctx.prefix.clone(),
            prev_kv: true,
            start_revision: start,
            created_revision: None,
            created_at,
            deliveries: Vec::new(),
            ended: None,
        };
        n += 1;
        let mut stream = match stream {
            Ok(stream) => stream,
            Err(e) => {
                log.ended = Some(WatchEnd::Error {
                    at: ctx.recorder.now(),
                    error: e.to_string(),
                });
                ctx.watches.lock().unwrap().push(log);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if start == 0 {
            log.created_revision = Some(stream.revision());
        }
        let lifetime = Duration::from_millis(rng.u64(2_000..6_000));
        start = follow(&ctx, &mut stream, &mut log, lifetime).await;
        ctx.watches.lock().unwrap().push(log);
    }
}

/// Record what `stream` delivers for `lifetime` (or until the workload stops or the watch
/// ends); the revision the next watch should start from (0: from now).
async fn follow(
    ctx: &Ctx,
    stream: &mut WatchStream,
    log: &mut WatchLog,
    lifetime: Duration,
) -> i64 {
    let until = tokio::time::sleep(lifetime);
    tokio::pin!(until);
    loop {
        let next = tokio::select! {
            () = &mut until => None,
            () = ctx.until_stopped() => None,
            next = stream.next_batch() => Some(next),
        };
        let at = ctx.recorder.now();
        match next {
            None => {
                if !ctx.stopped() {
                    log.ended = Some(WatchEnd::Cancelled { at });
                }
                return stream.revision() + 1;
            }
            Some(None) => {
                log.ended = Some(WatchEnd::Error {
                    at,
                    error: "stream ended".into(),
                });
                return stream.revision() + 1;
            }
            Some(Some(Err(e))) => {
                log.ended = Some(WatchEnd::Error {
                    at,
                    error: e.to_string(),
                });
                return stream.revision() + 1;
            }
            Some(Some(Ok(batch))) => {
                let compacted = matches!(batch, WatchBatch::Compacted { .. });
                log.deliveries.push(Delivery {
                    at,
                    batch: convert(batch),
                });
                if compacted {
                    log.ended = Some(WatchEnd::Error {
                        at,
                        error: "compacted".into(),
                    });
                    return 0;
                }
            }
        }
    }
}

fn convert(batch: WatchBatch) -> Batch {
    match batch {
        WatchBatch::Events { revision, events } => Batch::Events {
            revision,
            events: events
                .iter()
                .filter_map(|e| {
                    let kv = e.kv.as_ref()?;
                    let put = e.r#type() == EventType::Put;
                    Some(WatchEvent {
                        revision: kv.mod_revision,
                        key: text(&kv.key),
                        kind: if put {
                            EventKind::Put
                        } else {
                            EventKind::Delete
                        },
                        value: put.then(|| text(&kv.value)),
                        create_revision: if put { kv.create_revision } else { 0 },
                        version: if put { kv.version } else { 0 },
                        prev_value: e.prev_kv.as_ref().map(|p| text(&p.value)),
                    })
                })
                .collect(),
        },
        WatchBatch::Progress { revision } => Batch::Progress { revision },
        WatchBatch::Compacted { compact_revision } => Batch::Compacted { compact_revision },
        WatchBatch::Reloaded { revision, kvs } => Batch::Reloaded {
            revision,
            keys: kvs
                .iter()
                .map(|kv| (text(&kv.key), text(&kv.value)))
                .collect(),
        },
        other => panic!("a watch batch the harness does not know: {other:?}"),
    }
}
