//! cache-bench's fan-out stage: N local watches of one key of a [`Cache`] (`Cache::watch`)
//! next to one server watch of the same key, while the writer's 1,000 writes/s go to the
//! other keys of the prefix (every one of them wakes every subscriber, which finds nothing for
//! itself). A probe puts the key every 50 ms; each delivery's delay is counted from the
//! probe's send, so the server watch's delay (etcd's commit and watch path) is the baseline and
//! the difference is what the fan-out adds. Memory per subscriber from the process's resident
//! set before and after the subscribers are made.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_ha::{Cache, CacheWatchOptions, Client, PutOptions, WatchBatch, WatchOptions};
use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::metrics::latency_histogram;
use crate::process::status_kb;

/// What one stage measured.
pub struct Fanout {
    /// Subscribers.
    pub subscribers: usize,
    /// Delay from the probe's send to each local delivery (us).
    pub local: Histogram<u64>,
    /// The same for the server watch (us).
    pub server: Histogram<u64>,
    /// Probes sent.
    pub probes: u64,
    /// Local deliveries expected (probes x subscribers) but not received by the stage's end.
    pub missing: u64,
    /// Resident bytes per subscriber (its task and stream), by the resident set's growth.
    pub bytes_per_subscriber: f64,
}

/// When each probe value was sent.
type Sent = Arc<Mutex<HashMap<String, Instant>>>;

fn record(h: &Mutex<Histogram<u64>>, sent: &Sent, value: &[u8]) -> bool {
    let Ok(value) = std::str::from_utf8(value) else {
        return false;
    };
    let Some(at) = sent.lock().unwrap().get(value).copied() else {
        return false;
    };
    let us = at.elapsed().as_micros() as u64;
    let _ = h.lock().unwrap().record(us.max(1));
    true
}

/// One stage: `subscribers` local watches of `key` (in the cache's range) for `length`.
pub async fn stage(
    client: &Client,
    cache: &Cache,
    key: &str,
    subscribers: usize,
    length: Duration,
) -> Fanout {
    let sent: Sent = Arc::default();
    let local = Arc::new(Mutex::new(latency_histogram()));
    let server = Arc::new(Mutex::new(latency_histogram()));
    let delivered = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // One consistent start for all: a watch from now waits for a fresh read, and 10,000 of
    // them one after another would measure that instead.
    let now = cache
        .get(key, etcd_ha::Freshness::Consistent)
        .await
        .expect("a consistent read")
        .revision;
    let from = CacheWatchOptions::new().with_start_revision(now + 1);
    let rss_before = status_kb("VmRSS").unwrap_or(0);
    let mut tasks = Vec::new();
    for _ in 0..subscribers {
        let mut w = cache.watch(key, from.clone()).await.expect("a local watch");
        let (sent, local, delivered) = (sent.clone(), local.clone(), delivered.clone());
        tasks.push(tokio::spawn(async move {
            while let Some(Ok(batch)) = w.next_batch().await {
                let WatchBatch::Events { events, .. } = batch else {
                    continue;
                };
                for kv in events.iter().filter_map(|e| e.kv.as_ref()) {
                    if record(&local, &sent, &kv.value) {
                        delivered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    let rss_after = status_kb("VmRSS").unwrap_or(0);
    let mut w = client
        .watch()
        .watch(key, WatchOptions::new())
        .await
        .expect("a server watch");
    let (sent_s, server_s) = (sent.clone(), server.clone());
    tasks.push(tokio::spawn(async move {
        while let Some(Ok(batch)) = w.next_batch().await {
            if let WatchBatch::Events { events, .. } = batch {
                for kv in events.iter().filter_map(|e| e.kv.as_ref()) {
                    record(&server_s, &sent_s, &kv.value);
                }
            }
        }
    }));
    let end = Instant::now() + length;
    let mut probes = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    while Instant::now() < end {
        tick.tick().await;
        let value = format!("probe-{subscribers}-{probes}");
        sent.lock().unwrap().insert(value.clone(), Instant::now());
        if client.kv().put(key, value, PutOptions::new()).await.is_ok() {
            probes += 1;
        }
    }
    // The last probe's deliveries get a moment to land.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for t in &tasks {
        t.abort();
    }
    let expected = probes * subscribers as u64;
    let got = delivered.load(std::sync::atomic::Ordering::Relaxed);
    let take = |h: Arc<Mutex<Histogram<u64>>>| h.lock().unwrap().clone();
    Fanout {
        subscribers,
        local: take(local),
        server: take(server),
        probes,
        missing: expected.saturating_sub(got),
        bytes_per_subscriber: rss_after.saturating_sub(rss_before) as f64 * 1024.0
            / subscribers.max(1) as f64,
    }
}
