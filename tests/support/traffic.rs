//! An application's whole traffic for planned-maintenance tests, and the checks that it never
//! noticed the maintenance: writers putting unique keys, linearizable and serializable readers,
//! a managed watch on the writers' prefix, a kept lease and a `Leadership` holder.
//!
//! Every put writes a key of its own, so each acknowledged put has one revision to find again:
//! in the store exactly once (version 1: a put sent twice would be version 2) and in the watch's
//! events exactly once.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_ha::concurrency::{Leadership, LeadershipHeld};
use etcd_ha::{Client, GetOptions, KeptLease, PutOptions, WatchBatch, WatchOptions};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The application's own deadline on every call.
const DEADLINE: Duration = Duration::from_secs(1);

/// Pause between reads of one reader: reads are not what the gaps measure, and a 2-core box
/// must keep room for the members.
const READ_PACE: Duration = Duration::from_millis(5);

/// How long the watch may take to deliver the last acknowledged put after the writers stop.
const WATCH_CATCH_UP: Duration = Duration::from_secs(10);

/// What one writer saw.
#[derive(Debug, Default)]
pub struct Seen {
    pub ok: u32,
    /// Each error that reached the writer.
    pub errors: Vec<WriteError>,
    /// The acknowledged puts: key and revision.
    pub acked: Vec<(String, i64)>,
    /// When each put was acknowledged, in order.
    pub acked_at: Vec<Instant>,
    /// The keys of puts that failed: each may or may not have been applied.
    pub failed: Vec<String>,
}

/// A put that failed: when it was sent, when its error came, and the error (`Debug` form, to
/// classify it).
#[derive(Debug)]
pub struct WriteError {
    pub sent: Instant,
    pub came: Instant,
    pub error: String,
}

impl Seen {
    /// The longest time between two successes.
    pub fn longest_gap(&self) -> Duration {
        self.acked_at
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// The longest time between two successes that overlaps `from..to`, and when it began.
    pub fn longest_gap_in(&self, from: Instant, to: Instant) -> (Duration, Instant) {
        self.acked_at
            .windows(2)
            .filter(|w| w[1] > from && w[0] < to)
            .map(|w| (w[1] - w[0], w[0]))
            .max()
            .unwrap_or((Duration::ZERO, from))
    }

    /// The longest time writes stood still within `from..to`: a gap that began before `from`
    /// counts from `from` only (it was not caused by what began then).
    pub fn longest_stall_in(&self, from: Instant, to: Instant) -> Duration {
        self.acked_at
            .windows(2)
            .filter(|w| w[1] > from && w[0] < to)
            .map(|w| w[1] - w[0].max(from))
            .max()
            .unwrap_or(Duration::ZERO)
    }
}

/// What the readers saw.
#[derive(Debug, Default)]
pub struct Reads {
    pub linearizable: u32,
    pub serializable: u32,
    /// Each error that reached a reader, with when its call began.
    pub errors: Vec<(Instant, String)>,
}

/// Everything the traffic saw, for the checks.
pub struct Report {
    pub writers: Vec<Seen>,
    pub reads: Reads,
    /// Problems of the watch, the lease and the leadership holder (empty when all is well).
    pub streams: Vec<String>,
    /// Problems of the acknowledged puts in the store and in the watch's events.
    pub history: Vec<String>,
    /// Failed puts that were applied anyway (ambiguous failures that did reach etcd).
    pub failed_but_applied: usize,
    /// When the traffic was told to stop: errors are printed relative to it, so a failure
    /// shows which step of the test it followed.
    pub stopped_at: Instant,
}

impl Report {
    /// Every error that reached a writer.
    pub fn write_errors(&self) -> Vec<&WriteError> {
        self.writers.iter().flat_map(|s| &s.errors).collect()
    }

    /// The longest gap any writer saw.
    pub fn longest_gap(&self) -> Duration {
        self.writers.iter().map(Seen::longest_gap).max().unwrap()
    }

    /// Print what was seen (as `MEASURE` lines).
    pub fn print(&self, scenario: &str) {
        let ok: u32 = self.writers.iter().map(|s| s.ok).sum();
        println!(
            "MEASURE {scenario}: {ok} puts acknowledged, {} write errors, longest write gap {:?}; \
             {} linearizable and {} serializable reads, {} read errors; streams: {:?}; \
             history: {:?}; failed but applied: {}",
            self.write_errors().len(),
            self.longest_gap(),
            self.reads.linearizable,
            self.reads.serializable,
            self.reads.errors.len(),
            self.streams,
            self.history,
            self.failed_but_applied,
        );
        // Seconds from the stop (negative: before it).
        let since_stop = |at: &Instant| {
            if *at >= self.stopped_at {
                (*at - self.stopped_at).as_secs_f64()
            } else {
                -(self.stopped_at - *at).as_secs_f64()
            }
        };
        for e in self.write_errors() {
            println!(
                "MEASURE {scenario}: write error {}, came at {:+.3} s from the stop",
                e.error,
                since_stop(&e.came)
            );
        }
        for (at, e) in &self.reads.errors {
            println!(
                "MEASURE {scenario}: read error {e}, its call began at {:+.3} s from the stop",
                since_stop(at)
            );
        }
    }

    /// Reads, the watch, the lease and the leadership holder never noticed anything, and the
    /// store and the watch hold every acknowledged put exactly once.
    pub fn assert_all_but_writes_clean(&self) {
        assert!(
            self.writers.iter().all(|s| s.ok > 20),
            "the writers made progress"
        );
        assert!(
            self.reads.linearizable > 20 && self.reads.serializable > 20,
            "the readers made progress: {:?}",
            self.reads
        );
        assert!(
            self.reads.errors.is_empty(),
            "read errors reached the caller: {:?}",
            self.reads.errors.iter().map(|(_, e)| e).collect::<Vec<_>>()
        );
        assert!(self.streams.is_empty(), "{:?}", self.streams);
        assert!(self.history.is_empty(), "{:?}", self.history);
    }

    /// Nothing at all reached the application.
    pub fn assert_clean(&self) {
        self.assert_all_but_writes_clean();
        let errors = self.write_errors();
        assert!(
            errors.is_empty(),
            "write errors reached the caller: {errors:?}"
        );
    }
}

/// The running traffic; [`Traffic::finish`] stops it and checks what it left behind.
pub struct Traffic {
    client: Client,
    /// Every key of this traffic is under it.
    prefix: String,
    stop: Arc<AtomicBool>,
    writers: Vec<JoinHandle<Seen>>,
    readers: Vec<JoinHandle<Reads>>,
    /// (key, mod revision) of every put event the watch delivered, in delivery order.
    events: Arc<Mutex<Vec<(String, i64)>>>,
    /// The watch's error, if it ended with one.
    watch_error: Arc<Mutex<Option<String>>>,
    watch: JoinHandle<()>,
    lease: KeptLease,
    held: Arc<LeadershipHeld>,
    /// Why the leadership was lost, if it was.
    lost: Arc<Mutex<Option<String>>>,
    lost_task: JoinHandle<()>,
}

impl Traffic {
    /// Start `writers` writers, a linearizable and a serializable reader, a managed watch on
    /// the writers' keys, a kept lease and a leadership holder, all on `client`.
    pub async fn start(client: &Client, name: &str, writers: usize) -> Traffic {
        let prefix = super::unique(name);
        let start = client
            .kv()
            .get(format!("{prefix}/none"), GetOptions::new())
            .await
            .expect("the cluster answers before the traffic starts")
            .header
            .unwrap()
            .revision;
        let events = Arc::new(Mutex::new(Vec::new()));
        let watch_error = Arc::new(Mutex::new(None));
        let watch = spawn_watch(client, &prefix, start + 1, &events, &watch_error).await;
        let lease = client
            .keeper()
            .grant(Duration::from_secs(5))
            .await
            .expect("kept lease");
        let held = Leadership::new(client, format!("{prefix}/leader"), "holder")
            .acquire()
            .await
            .expect("leadership");
        let held = Arc::new(held);
        let lost = Arc::new(Mutex::new(None));
        let lost_task = {
            let (held, lost) = (held.clone(), lost.clone());
            tokio::spawn(async move {
                let reason = held.lost().await;
                *lost.lock().unwrap() = Some(reason.to_string());
            })
        };
        let stop = Arc::new(AtomicBool::new(false));
        let writers = (0..writers)
            .map(|w| spawn_writer(client, format!("{prefix}/w/{w}"), stop.clone()))
            .collect();
        let readers = [false, true]
            .into_iter()
            .map(|serializable| spawn_reader(client, &prefix, serializable, stop.clone()))
            .collect();
        Traffic {
            client: client.clone(),
            prefix,
            stop,
            writers,
            readers,
            events,
            watch_error,
            watch,
            lease,
            held,
            lost,
            lost_task,
        }
    }

    /// Stop the traffic, let the watch catch up, and check the store, the watch's events, the
    /// lease and the leadership against what was acknowledged.
    pub async fn finish(self) -> Report {
        let stopped_at = Instant::now();
        self.stop.store(true, Ordering::Relaxed);
        let mut writers = Vec::new();
        for task in self.writers {
            writers.push(task.await.expect("writer task"));
        }
        let mut reads = Reads::default();
        for task in self.readers {
            let r = task.await.expect("reader task");
            reads.linearizable += r.linearizable;
            reads.serializable += r.serializable;
            reads.errors.extend(r.errors);
        }
        let mut streams = Vec::new();
        if let Some(reason) = self.lost.lock().unwrap().clone() {
            streams.push(format!("the leadership was lost: {reason}"));
        }
        if self.held.is_lost() {
            streams.push("the leadership holder says it is lost".into());
        }
        if self.lease.is_expired() {
            streams.push("the kept lease expired".into());
        }
        match self
            .client
            .lease()
            .time_to_live(self.lease.id(), false)
            .await
        {
            Ok(r) if r.ttl > 0 => {}
            other => streams.push(format!("the kept lease is gone in etcd: {other:?}")),
        }
        let acked: HashMap<String, i64> = writers.iter().flat_map(|s| s.acked.clone()).collect();
        let failed: HashSet<String> = writers.iter().flat_map(|s| s.failed.clone()).collect();
        let last = acked.values().copied().max().unwrap_or(0);
        let until = Instant::now() + WATCH_CATCH_UP;
        while self.events.lock().unwrap().last().map_or(0, |e| e.1) < last
            && Instant::now() < until
            && !self.watch.is_finished()
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if let Some(e) = self.watch_error.lock().unwrap().clone() {
            streams.push(format!("the managed watch failed: {e}"));
        } else if self.watch.is_finished() {
            streams.push("the managed watch ended".into());
        }
        self.watch.abort();
        self.lost_task.abort();
        let events = self.events.lock().unwrap().clone();
        let stored = self
            .client
            .kv()
            .get(
                format!("{}/w/", self.prefix),
                GetOptions::new().with_prefix(),
            )
            .await
            .expect("read back the writers' keys");
        let mut history = Vec::new();
        let mut failed_but_applied = 0;
        let mut in_store = HashSet::new();
        for kv in &stored.kvs {
            let key = String::from_utf8_lossy(&kv.key).into_owned();
            match acked.get(&key) {
                Some(&rev) if rev == kv.mod_revision && kv.version == 1 => {}
                Some(&rev) => history.push(format!(
                    "{key}: acknowledged at {rev}, stored at {} version {}",
                    kv.mod_revision, kv.version
                )),
                None if failed.contains(&key) && kv.version == 1 => failed_but_applied += 1,
                None => history.push(format!("{key}: stored, never acknowledged or failed")),
            }
            in_store.insert(key);
        }
        let missing = acked.keys().filter(|k| !in_store.contains(*k)).count();
        if missing > 0 {
            history.push(format!(
                "{missing} acknowledged puts missing from the store"
            ));
        }
        let mut delivered: HashMap<&str, u32> = HashMap::new();
        for (i, (key, rev)) in events.iter().enumerate() {
            *delivered.entry(key.as_str()).or_default() += 1;
            if i > 0 && *rev < events[i - 1].1 {
                history.push(format!(
                    "watch event {key}@{rev} after revision {}",
                    events[i - 1].1
                ));
            }
            match acked.get(key) {
                Some(r) if r == rev => {}
                Some(r) => history.push(format!("watch saw {key}@{rev}, acknowledged at {r}")),
                None if failed.contains(key) => {}
                None => history.push(format!("watch saw {key}@{rev}, never written")),
            }
        }
        let repeated = delivered.values().filter(|&&n| n > 1).count();
        if repeated > 0 {
            history.push(format!("{repeated} watch events delivered more than once"));
        }
        let lost = acked
            .keys()
            .filter(|k| !delivered.contains_key(k.as_str()))
            .count();
        if lost > 0 {
            history.push(format!("{lost} acknowledged puts never seen by the watch"));
        }
        Report {
            writers,
            reads,
            streams,
            history,
            failed_but_applied,
            stopped_at,
        }
    }
}

/// A writer: puts `{keys}/{n}` = the key itself, without pause, until stopped.
fn spawn_writer(client: &Client, keys: String, stop: Arc<AtomicBool>) -> JoinHandle<Seen> {
    let kv = client.kv().with_timeout(DEADLINE);
    tokio::spawn(async move {
        let mut seen = Seen::default();
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            let key = format!("{keys}/{n:08}");
            let sent = Instant::now();
            match kv.put(key.as_str(), key.as_str(), PutOptions::new()).await {
                Ok(r) => {
                    seen.ok += 1;
                    seen.acked.push((key, r.header.unwrap().revision));
                    seen.acked_at.push(Instant::now());
                }
                Err(e) => {
                    seen.errors.push(WriteError {
                        sent,
                        came: Instant::now(),
                        error: format!("{e:?}"),
                    });
                    seen.failed.push(key);
                }
            }
        }
        seen
    })
}

/// A reader: gets one key, linearizable or serializable, every [`READ_PACE`] until stopped;
/// a linearizable reader also checks that revisions never go back.
fn spawn_reader(
    client: &Client,
    prefix: &str,
    serializable: bool,
    stop: Arc<AtomicBool>,
) -> JoinHandle<Reads> {
    let kv = client.kv().with_timeout(DEADLINE);
    let key = format!("{prefix}/leader");
    tokio::spawn(async move {
        let mut reads = Reads::default();
        let mut newest = 0;
        while !stop.load(Ordering::Relaxed) {
            let options = if serializable {
                GetOptions::new().with_serializable()
            } else {
                GetOptions::new()
            };
            let began = Instant::now();
            match kv.get(key.as_str(), options).await {
                Ok(r) if serializable => {
                    drop(r);
                    reads.serializable += 1;
                }
                Ok(r) => {
                    let revision = r.header.unwrap().revision;
                    if revision < newest {
                        reads.errors.push((
                            began,
                            format!("linearizable read at {revision} after {newest}"),
                        ));
                    }
                    newest = newest.max(revision);
                    reads.linearizable += 1;
                }
                Err(e) => reads.errors.push((began, format!("{e:?}"))),
            }
            tokio::time::sleep(READ_PACE).await;
        }
        reads
    })
}

/// A managed watch of the writers' keys from `start`: records every put event, and its error
/// if it ends with one.
async fn spawn_watch(
    client: &Client,
    prefix: &str,
    start: i64,
    events: &Arc<Mutex<Vec<(String, i64)>>>,
    error: &Arc<Mutex<Option<String>>>,
) -> JoinHandle<()> {
    let mut stream = client
        .watch()
        .watch(
            format!("{prefix}/w/"),
            WatchOptions::new().with_prefix().with_start_revision(start),
        )
        .await
        .expect("managed watch");
    let (events, error) = (events.clone(), error.clone());
    tokio::spawn(async move {
        while let Some(batch) = stream.next_batch().await {
            match batch {
                Ok(WatchBatch::Events { events: batch, .. }) => {
                    let mut seen = events.lock().unwrap();
                    for event in batch {
                        let kv = event.kv.unwrap();
                        seen.push((
                            String::from_utf8_lossy(&kv.key).into_owned(),
                            kv.mod_revision,
                        ));
                    }
                }
                Ok(other) => {
                    *error.lock().unwrap() = Some(format!("unexpected batch {other:?}"));
                    return;
                }
                Err(e) => {
                    *error.lock().unwrap() = Some(format!("{e:?}"));
                    return;
                }
            }
        }
    })
}
