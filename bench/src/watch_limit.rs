//! The server's own pace with many watches: one bare tonic `Watch` stream (no managed watch, no
//! routing) that creates one watcher per key, then the events of one put per key, timed.
//!
//! etcd serves a stream's watchers from one `watchStream`: creates are answered one by one in
//! the order sent, and the events of synced watchers go out as the store applies the writes.
//! What a single bare stream achieves here bounds what a client's managed watches can: the
//! watch-scale benchmark prints it beside every managed result.
//!
//! ```no_run
//! # async fn demo(endpoint: String) {
//! use etcd_ha_bench::watch_limit::bare_stream;
//!
//! let pace = bare_stream(&endpoint, 10_000, 256).await.unwrap();
//! println!("{} watchers made in {:?}", pace.watchers, pace.create);
//! # }
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_ha::proto::etcdserverpb::kv_client::KvClient;
use etcd_ha::proto::etcdserverpb::watch_client::WatchClient;
use etcd_ha::proto::etcdserverpb::watch_request::RequestUnion;
use etcd_ha::proto::etcdserverpb::{PutRequest, RangeRequest, WatchCreateRequest, WatchRequest};
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};
use tokio_stream::wrappers::ReceiverStream;

use crate::keepalive_limit::channel;

/// How long the bare stream may take for its creates or its events before the measurement
/// gives up (and says so).
const PATIENCE: Duration = Duration::from_secs(120);

/// What one bare stream did.
#[derive(Clone, Debug)]
pub struct Pace {
    /// Watchers created on the stream.
    pub watchers: usize,
    /// From the first create sent to the last created answer.
    pub create: Duration,
    /// The puts, one per key, `window` in flight.
    pub puts: Duration,
    /// From the last put's answer to the last event's arrival.
    pub last_event_after_last_put: Duration,
    /// Events received (one per watcher is expected).
    pub events: usize,
    /// The revision of each key's put.
    pub revisions: Vec<i64>,
}

/// The key of watcher `i` of a measurement.
type KeyOf = fn(usize) -> Vec<u8>;

/// The key of watcher `i` of the bare measurement (apart from the managed watches' keys).
fn key(i: usize) -> Vec<u8> {
    format!("bare/{i:06}").into_bytes()
}

/// The store's revision now, as the member behind `kv` answers.
async fn revision(kv: &mut KvClient<tonic::transport::Channel>) -> Result<i64, String> {
    let answer = kv
        .range(RangeRequest {
            key: b"bare/".to_vec(),
            count_only: true,
            ..RangeRequest::default()
        })
        .await
        .map_err(|e| format!("range: {e}"))?;
    Ok(answer.into_inner().header.map_or(0, |h| h.revision))
}

/// Put `key` once; the revision of the put.
async fn put(
    kv: &mut KvClient<tonic::transport::Channel>,
    key: Vec<u8>,
) -> Result<i64, tonic::Status> {
    let answer = kv
        .put(PutRequest {
            key,
            value: b"v".to_vec(),
            ..PutRequest::default()
        })
        .await?;
    Ok(answer.into_inner().header.map_or(0, |h| h.revision))
}

/// The `q` quantile (0.0 to 1.0) of `sorted` by nearest rank; zero when it is empty.
///
/// ```
/// use std::time::Duration;
/// let ms = |n| Duration::from_millis(n);
/// let sorted = [ms(1), ms(2), ms(3), ms(4)];
/// assert_eq!(etcd_ha_bench::watch_limit::quantile(&sorted, 0.5), ms(3));
/// assert_eq!(etcd_ha_bench::watch_limit::quantile(&sorted, 1.0), ms(4));
/// assert_eq!(etcd_ha_bench::watch_limit::quantile(&[], 0.99), Duration::ZERO);
/// ```
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let rank = (sorted.len() as f64 * q) as usize;
    sorted
        .get(rank.min(sorted.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

/// A task that sends a create for key `i` from `starts[i]`, for each `i`, and keeps the
/// request side open (dropping it would end the stream).
fn send_creates(
    tx: mpsc::Sender<WatchRequest>,
    key: KeyOf,
    starts: Vec<i64>,
) -> tokio::task::JoinHandle<Option<mpsc::Sender<WatchRequest>>> {
    tokio::spawn(async move {
        for (i, start_revision) in starts.into_iter().enumerate() {
            let create = WatchCreateRequest {
                key: key(i),
                start_revision,
                ..WatchCreateRequest::default()
            };
            let request = WatchRequest {
                request_union: Some(RequestUnion::CreateRequest(create)),
            };
            if tx.send(request).await.is_err() {
                return None;
            }
        }
        Some(tx)
    })
}

/// Create `count` watchers on one bare stream to `endpoint` (each on its own key, from the
/// revision after now), then put each key once (`window` puts in flight) and time the events.
pub async fn bare_stream(endpoint: &str, count: usize, window: usize) -> Result<Pace, String> {
    let channel = channel(endpoint).await?;
    let mut kv = KvClient::new(channel.clone());
    let now = revision(&mut kv).await?;
    let (tx, rx) = mpsc::channel(1024);
    let started = Instant::now();
    let sender = send_creates(tx, key, vec![now + 1; count]);
    // etcd sends the stream's headers with its first answer, so the call returns only once
    // the creates are on their way.
    let mut answers = WatchClient::new(channel.clone())
        .watch(ReceiverStream::new(rx))
        .await
        .map_err(|e| format!("watch: {e}"))?
        .into_inner();
    let (mut created, mut events) = (0, 0);
    let create = timeout(PATIENCE, async {
        while created < count {
            match answers.message().await {
                Ok(Some(answer)) => {
                    created += usize::from(answer.created);
                    events += answer.events.len();
                }
                Ok(None) => return Err("the bare stream ended".to_owned()),
                Err(e) => return Err(format!("the bare stream: {e}")),
            }
        }
        Ok(started.elapsed())
    })
    .await
    .map_err(|_| format!("{created} of {count} watchers created in {PATIENCE:?}"))??;
    let _open = sender.await.map_err(|e| e.to_string())?;

    let put_started = Instant::now();
    let puts = futures_util::stream::iter(0..count)
        .map(|i| {
            let mut kv = kv.clone();
            async move { (i, put(&mut kv, key(i)).await) }
        })
        .buffer_unordered(window);
    let mut revisions = vec![0; count];
    let reading = async {
        while events < count {
            match answers.message().await {
                Ok(Some(answer)) => events += answer.events.len(),
                Ok(None) | Err(_) => break,
            }
        }
        Instant::now()
    };
    let putting = async {
        let failed = puts
            .filter_map(|(i, r)| {
                std::future::ready(match r {
                    Ok(revision) => {
                        revisions[i] = revision;
                        None
                    }
                    Err(e) => Some(e),
                })
            })
            .count()
            .await;
        (Instant::now(), failed)
    };
    let ((last_put, failed), last_event) =
        timeout(PATIENCE, async { tokio::join!(putting, reading) })
            .await
            .map_err(|_| format!("{events} of {count} bare events in {PATIENCE:?}"))?;
    if failed > 0 {
        return Err(format!("{failed} of {count} bare puts failed"));
    }
    Ok(Pace {
        watchers: count,
        create,
        puts: last_put - put_started,
        last_event_after_last_put: last_event.saturating_duration_since(last_put),
        events,
        revisions,
    })
}

/// What one bare stream did when it resumed many watchers at once.
#[derive(Clone, Debug)]
pub struct Resume {
    /// Watchers created at a past revision while the puts ran.
    pub watchers: usize,
    /// From the first create to the last event.
    pub last_event: Duration,
    /// Each watcher's delay from its put's answer to its event: median, p99, largest.
    pub delays: [Duration; 3],
    /// Events received (one per watcher is expected).
    pub events: usize,
}

/// Where the watchers of a bare resume start.
#[derive(Clone, Copy, Debug)]
pub enum ResumeFrom<'a> {
    /// Every one from the revision before the puts (keys of their own): only the concurrent
    /// puts lie behind that start, so this is a shallow resume.
    Before,
    /// Every one from one revision as many writes back as there are watchers (keys of their
    /// own, never written before): a whole round of writes lies behind the start, as behind
    /// the last events of watches whose keys were each written once a round.
    RoundBehind,
    /// Watcher `i` on the key of [`bare_stream`]'s watcher `i`, from after its put there (the
    /// revision in [`Pace::revisions`]): as a client resumes watches whose last events are
    /// spread over that many revisions.
    Own(&'a [i64]),
}

/// The floor of a resume: create `count` watchers on one bare stream to `endpoint`, each from
/// a past revision (as a client resumes its watches after losing their stream), while one put
/// per key runs (`window` in flight). etcd syncs watchers whose start revision is past in
/// batches of 512, each reading the history from the batch's oldest revision, so this is what
/// any client's resume of that many watches meets under that write load.
pub async fn bare_resume(
    endpoint: &str,
    count: usize,
    from: ResumeFrom<'_>,
    window: usize,
) -> Result<Resume, String> {
    if count == 0 {
        return Err("no watchers to resume".to_owned());
    }
    let channel = channel(endpoint).await?;
    let mut kv = KvClient::new(channel.clone());
    let now = revision(&mut kv).await?;
    fn resume_key(i: usize) -> Vec<u8> {
        format!("resume/{i:06}").into_bytes()
    }
    fn behind_key(i: usize) -> Vec<u8> {
        format!("behind/{i:06}").into_bytes()
    }
    let (key, starts): (KeyOf, Vec<i64>) = match from {
        ResumeFrom::Before => (resume_key, vec![now + 1; count]),
        ResumeFrom::RoundBehind => {
            let back = i64::try_from(count).unwrap_or(i64::MAX);
            (
                behind_key,
                vec![(now + 1).saturating_sub(back).max(1); count],
            )
        }
        ResumeFrom::Own(revisions) if revisions.len() == count => {
            (key, revisions.iter().map(|r| r + 1).collect())
        }
        ResumeFrom::Own(revisions) => {
            return Err(format!(
                "{} revisions for {count} watchers",
                revisions.len()
            ));
        }
    };
    let epoch = Instant::now();
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..count).map(|_| Default::default()).collect());
    let putting = {
        let acked = acked.clone();
        tokio::spawn(async move {
            futures_util::stream::iter(0..count)
                .map(|i| {
                    let (mut kv, acked) = (kv.clone(), acked.clone());
                    async move {
                        let put = put(&mut kv, key(i)).await;
                        let us = epoch.elapsed().as_micros() as u64;
                        acked[i].store(us, Ordering::Relaxed);
                        put.is_err()
                    }
                })
                .buffer_unordered(window)
                .filter(|failed| std::future::ready(*failed))
                .count()
                .await
        })
    };
    let (tx, rx) = mpsc::channel(1024);
    let sender = send_creates(tx, key, starts);
    let mut answers = WatchClient::new(channel)
        .watch(ReceiverStream::new(rx))
        .await
        .map_err(|e| format!("watch: {e}"))?
        .into_inner();
    let mut seen = vec![0u64; count];
    let mut events = 0;
    timeout(PATIENCE, async {
        while events < count {
            match answers.message().await {
                Ok(Some(answer)) => {
                    let us = epoch.elapsed().as_micros() as u64;
                    for event in answer.events {
                        let i = event.kv.and_then(|kv| {
                            let name = std::str::from_utf8(&kv.key).ok()?;
                            name.rsplit('/').next()?.parse().ok()
                        });
                        if let Some(i) = i.filter(|&i: &usize| i < count && seen[i] == 0) {
                            seen[i] = us;
                            events += 1;
                        }
                    }
                }
                Ok(None) => return Err("the bare stream ended".to_owned()),
                Err(e) => return Err(format!("the bare stream: {e}")),
            }
        }
        Ok(())
    })
    .await
    .map_err(|_| format!("{events} of {count} resumed events in {PATIENCE:?}"))??;
    let last_event = epoch.elapsed();
    let failed = putting.await.map_err(|e| e.to_string())?;
    let _open = sender.await.map_err(|e| e.to_string())?;
    if failed > 0 {
        return Err(format!("{failed} of {count} puts failed"));
    }
    let mut delays: Vec<Duration> = seen
        .iter()
        .zip(acked.iter())
        .map(|(e, a)| Duration::from_micros(e.saturating_sub(a.load(Ordering::Relaxed))))
        .collect();
    delays.sort_unstable();
    Ok(Resume {
        watchers: count,
        last_event,
        delays: [
            quantile(&delays, 0.5),
            quantile(&delays, 0.99),
            quantile(&delays, 1.0),
        ],
        events,
    })
}
