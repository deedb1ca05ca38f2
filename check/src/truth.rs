//! The ground truth: one watch collector per member, connected to it directly (not through
//! the fault proxies), watching the workload's prefix from the run's start revision and
//! resuming after every break; the collectors must agree where they overlap.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_ha::proto::etcdserverpb::WatchResponse;
use etcd_ha::proto::mvccpb::event::EventType;
use etcd_ha::{Client, Options, WatchOptions};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::history::{EventKind, Nanos, TruthEvent};
use crate::record::Recorder;

/// What one collector saw: events by revision, and how far it got.
///
/// Progress notifications say how far the member's history goes, but etcd before 3.5.8 and
/// 3.4.24 (etcd issue 15220) can send one before the events it vouches for: so progress only
/// tells when to stop waiting, never which events to skip, and a collector resumes after the
/// last *event* it received.
#[derive(Default)]
struct Seen {
    /// revision -> the events of that revision, in the order the member sent them.
    events: BTreeMap<i64, Vec<TruthEvent>>,
    /// The highest revision of an event received (or the start).
    last_event: i64,
    /// The highest revision a progress notification reported.
    progress: i64,
}

impl Seen {
    fn reached(&self) -> i64 {
        self.last_event.max(self.progress)
    }
}

/// One collector per member.
pub struct Collectors {
    seen: Vec<Arc<Mutex<Seen>>>,
    tasks: Vec<JoinHandle<()>>,
    stop: watch::Sender<bool>,
}

impl Collectors {
    /// Start a collector on each of `endpoints` (direct member URLs), from `start + 1`.
    pub fn start(
        endpoints: &[String],
        options: &Options,
        prefix: &str,
        start: i64,
        recorder: Arc<Recorder>,
    ) -> Collectors {
        let (stop, stopped) = watch::channel(false);
        let mut seen = Vec::new();
        let mut tasks = Vec::new();
        for endpoint in endpoints {
            let state = Arc::new(Mutex::new(Seen {
                last_event: start,
                ..Seen::default()
            }));
            seen.push(state.clone());
            tasks.push(tokio::spawn(collect(
                endpoint.clone(),
                options.clone().without_member_sync(),
                prefix.to_owned(),
                state,
                recorder.clone(),
                stopped.clone(),
            )));
        }
        Collectors { seen, tasks, stop }
    }

    /// The lowest revision every collector has received the events of (what compaction may
    /// remove without breaking a collector's resume).
    pub fn received_by_all(&self) -> i64 {
        self.seen
            .iter()
            .map(|s| s.lock().unwrap().last_event)
            .min()
            .unwrap_or(0)
    }

    fn reached_by_all(&self) -> i64 {
        self.seen
            .iter()
            .map(|s| s.lock().unwrap().reached())
            .min()
            .unwrap_or(0)
    }

    /// Wait until every collector reached `revision` (or `timeout` passed), stop them, and
    /// return the merged truth; an error names where two collectors disagree.
    pub async fn finish(self, revision: i64, timeout: Duration) -> Result<Vec<TruthEvent>, String> {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.reached_by_all() < revision && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Events a premature progress notification ran ahead of (see `Seen`) trail it by far
        // less than this.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        let reached: Vec<i64> = self
            .seen
            .iter()
            .map(|s| s.lock().unwrap().reached())
            .collect();
        if reached.iter().all(|&r| r < revision) {
            return Err(format!(
                "no collector reached revision {revision} (reached {reached:?})"
            ));
        }
        merge(&self.seen, revision)
    }
}

/// The union of what the collectors saw up to `revision`, checking that they agree.
fn merge(seen: &[Arc<Mutex<Seen>>], revision: i64) -> Result<Vec<TruthEvent>, String> {
    let mut merged: BTreeMap<i64, Vec<TruthEvent>> = BTreeMap::new();
    for (i, s) in seen.iter().enumerate() {
        let s = s.lock().unwrap();
        for (&rev, events) in s.events.range(..=revision) {
            match merged.get_mut(&rev) {
                None => {
                    merged.insert(rev, events.clone());
                }
                Some(known) => {
                    let same = known.len() == events.len()
                        && known.iter().zip(events).all(|(a, b)| {
                            TruthEvent {
                                seen_at: 0,
                                ..a.clone()
                            } == TruthEvent {
                                seen_at: 0,
                                ..b.clone()
                            }
                        });
                    if !same {
                        return Err(format!(
                            "collectors disagree at revision {rev}: {known:?} vs member {i}: \
                             {events:?}"
                        ));
                    }
                    for (a, b) in known.iter_mut().zip(events) {
                        a.seen_at = a.seen_at.min(b.seen_at);
                    }
                }
            }
        }
    }
    Ok(merged.into_values().flatten().collect())
}

/// One collector: watch `prefix` on one member, resume from the next revision after every
/// break, ask for progress every 200 ms so `reached` moves while nothing changes.
async fn collect(
    endpoint: String,
    options: Options,
    prefix: String,
    state: Arc<Mutex<Seen>>,
    recorder: Arc<Recorder>,
    mut stopped: watch::Receiver<bool>,
) {
    while !*stopped.borrow() {
        let client = match Client::connect([endpoint.as_str()], options.clone()).await {
            Ok(client) => client,
            Err(_) => {
                pause(&mut stopped).await;
                continue;
            }
        };
        // A unary call first: with auth on it renews the token the stream opens with.
        let _ = client.maintenance().status().await;
        let from = state.lock().unwrap().last_event + 1;
        let opened = client
            .watch()
            .raw(
                prefix.clone(),
                WatchOptions::new().with_prefix().with_start_revision(from),
            )
            .await;
        let Ok((watcher, mut responses)) = opened else {
            pause(&mut stopped).await;
            continue;
        };
        let mut ticker = tokio::time::interval(Duration::from_millis(200));
        loop {
            let next = tokio::select! {
                changed = stopped.changed() => Next::Stopped(changed.is_err() || *stopped.borrow()),
                _ = ticker.tick() => Next::Tick,
                next = responses.message() => Next::Response(next),
            };
            let response = match next {
                Next::Stopped(true) => return,
                Next::Stopped(false) => continue,
                Next::Tick => {
                    let _ = watcher.request_progress().await;
                    continue;
                }
                Next::Response(Ok(Some(response))) => response,
                Next::Response(_) => break,
            };
            if response.canceled || response.compact_revision > 0 {
                break;
            }
            let at = recorder.now();
            let revision = response.header.as_ref().map_or(0, |h| h.revision);
            let mut s = state.lock().unwrap();
            if response.events.is_empty() {
                if !response.created {
                    s.progress = s.progress.max(revision);
                }
                continue;
            }
            // Events arrive whole per revision (no fragment asked), in revision order; a
            // revision received before (on an earlier stream) is not taken twice.
            let mut fresh: BTreeMap<i64, Vec<TruthEvent>> = BTreeMap::new();
            for event in &response.events {
                let Some(kv) = event.kv.as_ref() else {
                    continue;
                };
                if kv.mod_revision <= s.last_event {
                    continue;
                }
                fresh
                    .entry(kv.mod_revision)
                    .or_default()
                    .push(truth_event(event.r#type(), kv, at));
            }
            if let Some(&last) = fresh.keys().last() {
                s.last_event = last;
            }
            s.events.extend(fresh);
        }
        pause(&mut stopped).await;
    }
}

fn truth_event(kind: EventType, kv: &etcd_ha::proto::mvccpb::KeyValue, at: Nanos) -> TruthEvent {
    let put = kind == EventType::Put;
    TruthEvent {
        revision: kv.mod_revision,
        key: String::from_utf8_lossy(&kv.key).into_owned(),
        kind: if put {
            EventKind::Put
        } else {
            EventKind::Delete
        },
        value: put.then(|| String::from_utf8_lossy(&kv.value).into_owned()),
        create_revision: if put { kv.create_revision } else { 0 },
        version: if put { kv.version } else { 0 },
        lease: if put { kv.lease } else { 0 },
        seen_at: at,
    }
}

/// What woke a collector up.
enum Next {
    /// The stop signal changed (true: stop now).
    Stopped(bool),
    /// Time to ask for progress.
    Tick,
    Response(etcd_ha::Result<Option<WatchResponse>>),
}

/// 100 ms, or less if the collectors are being stopped.
async fn pause(stopped: &mut watch::Receiver<bool>) {
    let _ = tokio::time::timeout(Duration::from_millis(100), stopped.changed()).await;
}
