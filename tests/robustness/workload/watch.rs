//! Managed watches of three kinds, everything they deliver recorded:
//!
//! * **bookmarked**: the whole workload prefix with previous values and progress
//!   notifications, cancelled every 2-6 s and resumed from the revision it reached;
//! * **quiet**: `<prefix>quiet/`, where a write comes only every few seconds, without progress
//!   notifications, open for the whole run: its place must survive stream moves and
//!   compactions (from the server's sound progress where etcd has it, issue 18);
//! * **from now**: on a client that reads once and then idles (so everything it has seen is
//!   old), a watch of the prefix from "now", 1-3 s long, again and again: it must not replay
//!   what was written before it was asked for.
//!
//! When the workload stops, open watches keep following until they deliver the run's end
//! marker (or the run gives up on them): the liveness check judges that.

use std::future::Future;
use std::time::Duration;

use etcd_ha::proto::mvccpb::event::EventType;
use etcd_ha::{CacheWatchStream, Client, GetOptions, WatchBatch, WatchOptions, WatchStream};

use super::Ctx;
use super::kv::text;
use etcd_ha_check::history::{Batch, Delivery, EventKind, WatchEnd, WatchEvent, WatchLog};

/// The kinds of watch the workload runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Bookmarked,
    Quiet,
    FromNow,
}

/// The prefix the quiet watch follows.
pub fn quiet_prefix(prefix: &str) -> String {
    format!("{prefix}quiet/")
}

/// The key written once after the workload stopped, under every watched prefix.
pub fn end_marker(prefix: &str) -> String {
    format!("{}end", quiet_prefix(prefix))
}

/// Watch until the workload stops, one `WatchLog` per watch made.
pub async fn watcher(ctx: Ctx, client: Client, client_id: u32, kind: Kind) {
    let mut rng = ctx.rng(2000 + u64::from(client_id) * 10 + kind as u64);
    let prefix = match kind {
        Kind::Quiet => quiet_prefix(&ctx.prefix),
        Kind::Bookmarked | Kind::FromNow => ctx.prefix.clone(),
    };
    // Where the next watch starts: 0 (now) for the first one and after a compaction.
    let mut start = 0i64;
    let mut n = 0u32;
    while !ctx.stopped() {
        if kind == Kind::FromNow {
            // One read, then idle: the client's newest revision grows old while others write.
            let _ = client
                .kv()
                .get(ctx.prefix.as_str(), GetOptions::new())
                .await;
            tokio::time::sleep(Duration::from_millis(rng.u64(300..1_500))).await;
            start = 0;
            if ctx.stopped() {
                break;
            }
        }
        let mut options = WatchOptions::new().with_prefix().with_start_revision(start);
        if kind == Kind::Bookmarked {
            options = options.with_prev_kv().with_progress_notify();
        }
        let created_at = ctx.recorder.now();
        let stream = client.watch().watch(prefix.clone(), options).await;
        let mut log = WatchLog {
            id: client_id * 10_000 + kind as u32 * 1_000 + n,
            client: client_id,
            prefix: prefix.clone(),
            prev_kv: kind == Kind::Bookmarked,
            start_revision: start,
            created_revision: None,
            created_at,
            established: false,
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
        log.established = true;
        if start == 0 {
            log.created_revision = Some(stream.revision());
        }
        let lifetime = match kind {
            Kind::Bookmarked => Some(Duration::from_millis(rng.u64(2_000..6_000))),
            Kind::Quiet => None,
            Kind::FromNow => Some(Duration::from_millis(rng.u64(1_000..3_000))),
        };
        start = follow(&ctx, &mut stream, &mut log, lifetime).await;
        ctx.watches.lock().unwrap().push(log);
    }
}

/// A watch whose batches the workload records: a managed server watch, or a cache's local one.
pub trait Batches {
    /// The next batch (`None`: ended).
    fn next(&mut self) -> impl Future<Output = Option<etcd_ha::Result<WatchBatch>>> + Send;
    /// Every event up to this revision was delivered.
    fn revision(&self) -> i64;
}

impl Batches for WatchStream {
    fn next(&mut self) -> impl Future<Output = Option<etcd_ha::Result<WatchBatch>>> + Send {
        self.next_batch()
    }
    fn revision(&self) -> i64 {
        WatchStream::revision(self)
    }
}

impl Batches for CacheWatchStream {
    fn next(&mut self) -> impl Future<Output = Option<etcd_ha::Result<WatchBatch>>> + Send {
        self.next_batch()
    }
    fn revision(&self) -> i64 {
        CacheWatchStream::revision(self)
    }
}

/// Record what `stream` delivers for `lifetime` (`None`: as long as the workload runs), or
/// until the watch ends; once the workload stops, until the end marker is delivered or the run
/// stops waiting. The revision the next watch should start from (0: from now).
pub async fn follow(
    ctx: &Ctx,
    stream: &mut impl Batches,
    log: &mut WatchLog,
    lifetime: Option<Duration>,
) -> i64 {
    let marker = end_marker(&ctx.prefix);
    let until = tokio::time::sleep(lifetime.unwrap_or(Duration::MAX / 4));
    tokio::pin!(until);
    loop {
        // The lifetime counts only while the workload runs: after that, the watch must reach
        // the end marker.
        let running = !ctx.stopped();
        let next = tokio::select! {
            () = &mut until, if running => None,
            () = ctx.until_finished() => None,
            next = stream.next() => Some(next),
        };
        let at = ctx.recorder.now();
        match next {
            None if ctx.stopped() && !ctx.finished() => {}
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
                let batch = convert(batch);
                let at_marker = matches!(&batch, Batch::Events { events, .. }
                    if events.iter().any(|e| e.key == marker));
                log.deliveries.push(Delivery { at, batch });
                if compacted {
                    log.ended = Some(WatchEnd::Error {
                        at,
                        error: "compacted".into(),
                    });
                    return 0;
                }
                if at_marker {
                    return stream.revision() + 1;
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
