//! The server's own limit on lease renewals: keep-alives pipelined on bare tonic
//! `LeaseKeepAlive` streams (no keeper, no routing), answers counted per second.
//!
//! etcd answers a keep-alive stream one request at a time (`v3rpc/lease.go`: one receive loop
//! per stream, each renewal a round trip to the lessor, forwarded to the leader by a follower),
//! so a stream's rate is bounded by the server, and several streams may add up. Whatever a
//! client does, it cannot keep more than `rate x TTL / 3` leases renewed at a third of their
//! TTL: this measurement is the bound the lease-scale benchmark prints beside every keeper
//! result.
//!
//! ```no_run
//! # async fn demo(endpoint: String) {
//! use std::time::Duration;
//! use etcd_ha_bench::keepalive_limit::{grant_bare, renewals_per_second};
//!
//! let ids = grant_bare(&endpoint, 256, 60).await.unwrap();
//! let rate = renewals_per_second(&endpoint, &ids, 4, 128, Duration::from_secs(3)).await.unwrap();
//! println!("{:.0} renewals/s on 4 streams", rate.total);
//! # }
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_ha::proto::etcdserverpb::lease_client::LeaseClient;
use etcd_ha::proto::etcdserverpb::{LeaseGrantRequest, LeaseKeepAliveRequest};
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::transport::Channel;

/// Answers not counted at the start of a measurement: the streams open and fill their window.
const WARM_UP: Duration = Duration::from_millis(500);

/// What one measurement found.
#[derive(Clone, Debug)]
pub struct Rate {
    /// Streams used at once.
    pub streams: usize,
    /// Keep-alives in flight per stream.
    pub window: usize,
    /// Answers per second, all streams together.
    pub total: f64,
    /// The slowest stream's answers per second.
    pub slowest: f64,
}

/// A plain channel to `endpoint` (an `http://` URL), nothing of etcd-ha's in between.
pub(crate) async fn channel(endpoint: &str) -> Result<Channel, String> {
    Channel::from_shared(endpoint.to_owned())
        .map_err(|e| format!("{endpoint}: {e}"))?
        .connect()
        .await
        .map_err(|e| format!("connect {endpoint}: {e}"))
}

/// Grant `count` leases of `ttl_secs` through a bare channel; their ids.
pub async fn grant_bare(endpoint: &str, count: usize, ttl_secs: i64) -> Result<Vec<i64>, String> {
    let client = LeaseClient::new(channel(endpoint).await?);
    let grants = futures_util::stream::iter(0..count)
        .map(|_| {
            let mut client = client.clone();
            async move {
                client
                    .lease_grant(LeaseGrantRequest {
                        ttl: ttl_secs,
                        id: 0,
                    })
                    .await
                    .map(|r| r.into_inner().id)
                    .map_err(|e| format!("grant: {e}"))
            }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    grants.into_iter().collect()
}

/// Keep-alives as fast as `endpoint` answers them: `streams` bare streams, each with `window`
/// requests in flight (a new one sent per answer), over `ids` in turn, for `measure` after a
/// warm-up.
pub async fn renewals_per_second(
    endpoint: &str,
    ids: &[i64],
    streams: usize,
    window: usize,
    measure: Duration,
) -> Result<Rate, String> {
    if ids.is_empty() || streams == 0 || window == 0 {
        return Err("no lease, stream or window to measure with".into());
    }
    let channel = channel(endpoint).await?;
    let ids: Arc<[i64]> = ids.into();
    let started = Instant::now();
    let counting_from = started + WARM_UP;
    let stop = counting_from + measure;
    let tasks: Vec<_> = (0..streams)
        .map(|s| {
            let mut client = LeaseClient::new(channel.clone());
            let ids = ids.clone();
            let counted = Arc::new(AtomicU64::new(0));
            let task = tokio::spawn({
                let counted = counted.clone();
                async move {
                    let (tx, mut rx) = mpsc::channel::<LeaseKeepAliveRequest>(window);
                    let mut next = s;
                    let mut request = || {
                        let id = ids[next % ids.len()];
                        next += 1;
                        LeaseKeepAliveRequest { id }
                    };
                    for _ in 0..window {
                        tx.try_send(request()).map_err(|e| e.to_string())?;
                    }
                    let outbound = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
                    let mut answers = client
                        .lease_keep_alive(outbound)
                        .await
                        .map_err(|e| format!("open: {e}"))?
                        .into_inner();
                    while let Some(answer) = answers.next().await {
                        answer.map_err(|e| format!("keep-alive: {e}"))?;
                        let now = Instant::now();
                        if now >= stop {
                            break;
                        }
                        if now >= counting_from {
                            counted.fetch_add(1, Ordering::Relaxed);
                        }
                        tx.send(request()).await.map_err(|e| e.to_string())?;
                    }
                    Ok::<(), String>(())
                }
            });
            (task, counted)
        })
        .collect();
    let mut per_stream = Vec::new();
    for (task, counted) in tasks {
        task.await.map_err(|e| e.to_string())??;
        per_stream.push(counted.load(Ordering::Relaxed) as f64 / measure.as_secs_f64());
    }
    Ok(Rate {
        streams,
        window,
        total: per_stream.iter().sum(),
        slowest: per_stream.iter().copied().fold(f64::INFINITY, f64::min),
    })
}

/// How many leases of `ttl` renewals at `rate` per second keep, each renewed every `ttl / 3`.
///
/// ```
/// use std::time::Duration;
/// let n = etcd_ha_bench::keepalive_limit::leases_kept_at(1000.0, Duration::from_secs(6));
/// assert_eq!(n, 2000);
/// ```
pub fn leases_kept_at(rate: f64, ttl: Duration) -> u64 {
    (rate * ttl.as_secs_f64() / 3.0) as u64
}
