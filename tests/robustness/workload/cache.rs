//! Reads through a watch-fed `Cache` of the KV keys, judged as the other reads are:
//! `Consistent` reads as linearizable gets (the per-key search and the stale check), and
//! read-your-writes `AtLeast` reads after a put of the reader's own (at least the put's
//! revision, the truth's value at the revision reported). Each busy client has one cache of
//! the whole workload prefix, read by two processes at once so that their freshness rounds are
//! shared, and followed by local watches (`Cache::watch`) judged by the watch checker as the
//! server watches are: from now first, then from the revision reached; one in two starts
//! late, after the cache's small history has moved past it, and must be reloaded.

use std::sync::Arc;
use std::time::Duration;

use etcd_ha::{Cache, CacheOptions, CacheWatchOptions, Client, Freshness};
use tokio::task::JoinSet;

use super::Ctx;
use super::kv::{self, KEYS, run, text};
use super::watch::follow;
use etcd_ha_check::history::{Outcome, Request, Response, WatchEnd, WatchLog};

/// The first cache reader's process id; each client's readers follow.
pub const CACHE_PROCESS: u32 = 400;

/// Readers of one cache.
pub const READERS_PER_CACHE: u32 = 2;

/// Events the cache keeps for its local watches: small, so that a late watch falls behind.
const HISTORY: usize = 200;

/// The local watches' ids: `client * 10_000 + LOCAL_WATCH_IDS + n` (beside the server
/// watches' kinds, `watch.rs`).
const LOCAL_WATCH_IDS: u32 = 5_000;

/// A cache of the KV keys made on `client`, read by its readers until the workload stops.
pub async fn cache(ctx: Ctx, client: Client, client_id: u32) {
    let Some(cache) = make(&ctx, &client).await else {
        return;
    };
    let cache = Arc::new(cache);
    let mut readers = JoinSet::new();
    for k in 0..READERS_PER_CACHE {
        let process = CACHE_PROCESS + client_id * READERS_PER_CACHE + k;
        let reader = reader(
            ctx.clone(),
            client.clone(),
            cache.clone(),
            client_id,
            process,
        );
        readers.spawn(reader);
    }
    readers.spawn(local_watcher(ctx.clone(), cache.clone(), client_id));
    while readers.join_next().await.is_some() {}
}

/// The cache, made once the cluster lets it load (faults may be on from the start); `None`
/// when the workload stopped first.
async fn make(ctx: &Ctx, client: &Client) -> Option<Cache> {
    let options = CacheOptions::new().with_prefix().with_history(HISTORY);
    loop {
        let made = tokio::select! {
            made = Cache::new(client, ctx.prefix.as_str(), options.clone()) => made,
            () = ctx.until_stopped() => return None,
        };
        match made {
            Ok(cache) => return Some(cache),
            Err(error) => tracing::info!(%error, "cache not made yet; again"),
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
            () = ctx.until_stopped() => return None,
        }
    }
}

/// One reader: mostly `Consistent` gets of a random key; now and then a put of its own
/// followed by an `AtLeast` get of that key with the put's revision as the token.
async fn reader(ctx: Ctx, client: Client, cache: Arc<Cache>, client_id: u32, process: u32) {
    let mut rng = ctx.rng(6000 + u64::from(process));
    let mut seq = 0u64;
    while !ctx.stopped() {
        let key = kv::key(&ctx.prefix, rng.usize(..KEYS));
        let mut token = None;
        if rng.u32(..100) < 25 {
            seq += 1;
            let put = Request::Put {
                key: key.clone(),
                value: format!("c{process}-{seq}"),
                lease: None,
            };
            let outcome = ctx
                .recorder
                .op(process, client_id, put.clone(), run(&client, &put))
                .await;
            // A put that failed leaves a `Consistent` read to make.
            if let Outcome::Ok(Response::Put { revision }) = outcome {
                token = Some(revision);
            }
        }
        let request = Request::CacheGet {
            key: key.clone(),
            at_least: token,
        };
        let freshness = token.map_or(Freshness::Consistent, Freshness::AtLeast);
        ctx.recorder
            .op(process, client_id, request, get(&cache, &key, freshness))
            .await;
        // Paced as the KV processes are: a history the linearizability search gets through.
        tokio::time::sleep(Duration::from_millis(rng.u64(5..15))).await;
    }
}

/// Local watches of the whole prefix with previous values and progress, 2-6 s each, until the
/// workload stops; each from the revision the last one reached (the first, and one after an
/// error, from now). One in two waits 1-2.5 s before its first read.
async fn local_watcher(ctx: Ctx, cache: Arc<Cache>, client_id: u32) {
    let mut rng = ctx.rng(7000 + u64::from(client_id));
    let mut start = 0i64;
    let mut n = 0u32;
    while !ctx.stopped() {
        let options = CacheWatchOptions::new()
            .with_prefix()
            .with_prev_kv()
            .with_progress_notify()
            .with_reload_on_lag()
            .with_start_revision(start);
        let created_at = ctx.recorder.now();
        let made = cache.watch(ctx.prefix.as_str(), options).await;
        let mut log = WatchLog {
            id: client_id * 10_000 + LOCAL_WATCH_IDS + n,
            client: client_id,
            prefix: ctx.prefix.clone(),
            prev_kv: true,
            start_revision: start,
            created_revision: None,
            created_at,
            established: false,
            deliveries: Vec::new(),
            ended: None,
        };
        n += 1;
        let mut stream = match made {
            Ok(stream) => stream,
            Err(e) => {
                // Not fresh in time (a fault): a typed error the caller retries, from now.
                log.ended = Some(WatchEnd::Error {
                    at: ctx.recorder.now(),
                    error: e.to_string(),
                });
                ctx.watches.lock().unwrap().push(log);
                start = 0;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        log.established = true;
        if start == 0 {
            log.created_revision = Some(stream.revision());
        }
        if rng.bool() {
            tokio::time::sleep(Duration::from_millis(rng.u64(1_000..2_500))).await;
        }
        let lifetime = Duration::from_millis(rng.u64(2_000..6_000));
        start = follow(&ctx, &mut stream, &mut log, Some(lifetime)).await;
        ctx.watches.lock().unwrap().push(log);
    }
}

/// One cache read, as the history records a get's answer.
async fn get(cache: &Cache, key: &str, freshness: Freshness) -> etcd_ha::Result<Response> {
    let read = cache.get(key, freshness).await?;
    Ok(Response::Get {
        revision: read.revision,
        value: read.value.as_ref().map(|kv| text(&kv.value)),
        mod_revision: read.value.as_ref().map_or(0, |kv| kv.mod_revision),
    })
}
