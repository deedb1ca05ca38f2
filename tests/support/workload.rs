//! A steady stream of puts, linearizable gets and serializable gets, recorded for failover checks.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_ha::{Client, GetOptions, PutOptions};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What one loop does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A put of a unique value under its own key.
    Put,
    /// A linearizable get.
    Get,
    /// A serializable get.
    SerializableGet,
}

/// One finished request.
#[derive(Clone, Debug)]
pub struct Op {
    pub kind: Kind,
    /// Start and end, from the workload's start.
    pub start: Duration,
    pub end: Duration,
    /// The error the caller saw, if any.
    pub error: Option<String>,
    /// For puts: the key written (value = key).
    pub key: Option<String>,
}

/// Pause between requests of one loop: keeps a 2-core box responsive while giving ~100+ ops/s.
const PACE: Duration = Duration::from_millis(5);

/// The running loops.
pub struct Workload {
    t0: Instant,
    stop: CancellationToken,
    ops: Arc<Mutex<Vec<Op>>>,
    tasks: Vec<JoinHandle<()>>,
    prefix: String,
}

impl Workload {
    /// Start one loop of each kind against `client`, keys under `prefix`.
    pub fn start(client: &Client, prefix: &str) -> Workload {
        let t0 = Instant::now();
        let stop = CancellationToken::new();
        let ops = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for kind in [Kind::Put, Kind::Get, Kind::SerializableGet] {
            let client = client.clone();
            let stop = stop.clone();
            let ops = ops.clone();
            let prefix = prefix.to_owned();
            tasks.push(tokio::spawn(async move {
                let mut seq = 0u64;
                while !stop.is_cancelled() {
                    seq += 1;
                    let start = t0.elapsed();
                    let (key, result) = match kind {
                        Kind::Put => {
                            let key = format!("{prefix}/w/{seq:08}");
                            let r = client
                                .kv()
                                .put(key.as_str(), key.as_str(), PutOptions::new())
                                .await
                                .map(|_| ());
                            (Some(key), r)
                        }
                        Kind::Get => (
                            None,
                            client
                                .kv()
                                .get(format!("{prefix}/r"), GetOptions::new())
                                .await
                                .map(|_| ()),
                        ),
                        Kind::SerializableGet => (
                            None,
                            client
                                .kv()
                                .get(format!("{prefix}/r"), GetOptions::new().with_serializable())
                                .await
                                .map(|_| ()),
                        ),
                    };
                    let op = Op {
                        kind,
                        start,
                        end: t0.elapsed(),
                        error: result.err().map(|e| e.to_string()),
                        key,
                    };
                    ops.lock().unwrap().push(op);
                    tokio::time::sleep(PACE).await;
                }
            }));
        }
        Workload {
            t0,
            stop,
            ops,
            tasks,
            prefix: prefix.to_owned(),
        }
    }

    /// Time since the workload started.
    pub fn now(&self) -> Duration {
        self.t0.elapsed()
    }

    /// Stop the loops and return what they recorded.
    pub async fn stop(self) -> Record {
        self.stop.cancel();
        for t in self.tasks {
            // A request may still be waiting on its deadline.
            let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
        }
        let ops = std::mem::take(&mut *self.ops.lock().unwrap());
        Record {
            ops,
            prefix: self.prefix,
        }
    }
}

/// Everything the loops did.
pub struct Record {
    pub ops: Vec<Op>,
    pub prefix: String,
}

impl Record {
    fn of(&self, kind: Kind) -> impl Iterator<Item = &Op> {
        self.ops.iter().filter(move |o| o.kind == kind)
    }

    /// Successful requests of `kind` per second in `[from, to)`.
    pub fn rate(&self, kind: Kind, from: Duration, to: Duration) -> f64 {
        let n = self
            .of(kind)
            .filter(|o| o.error.is_none() && o.end >= from && o.end < to)
            .count();
        n as f64 / (to - from).as_secs_f64()
    }

    /// Time from `fault` to the first success of `kind` that *started* after it (a request
    /// already in flight at the fault proves nothing about recovery).
    pub fn first_success_after(&self, kind: Kind, fault: Duration) -> Option<Duration> {
        self.of(kind)
            .filter(|o| o.error.is_none() && o.start >= fault)
            .map(|o| o.end - fault)
            .min()
    }

    /// The longest time in `[from, to]` without a success of `kind` completing.
    pub fn longest_gap(&self, kind: Kind, from: Duration, to: Duration) -> Duration {
        let mut ends: Vec<Duration> = self
            .of(kind)
            .filter(|o| o.error.is_none() && o.end >= from && o.end <= to)
            .map(|o| o.end)
            .collect();
        ends.sort();
        let mut last = from;
        let mut gap = Duration::ZERO;
        for e in ends {
            gap = gap.max(e - last);
            last = e;
        }
        gap.max(to - last)
    }

    /// Errors of `kind` that reached the caller.
    pub fn errors(&self, kind: Kind) -> Vec<&Op> {
        self.of(kind).filter(|o| o.error.is_some()).collect()
    }

    /// Keys of acknowledged puts.
    pub fn acknowledged(&self) -> Vec<&str> {
        self.of(Kind::Put)
            .filter(|o| o.error.is_none())
            .filter_map(|o| o.key.as_deref())
            .collect()
    }

    /// Check the final state read through `client`: every acknowledged put is there with its
    /// value, and no put was applied twice (each key is written once, so version must be 1).
    /// Returns the number of puts that failed for the caller but were applied anyway.
    pub async fn check_puts(&self, client: &Client) -> usize {
        let got = client
            .kv()
            .get(
                format!("{}/w/", self.prefix),
                GetOptions::new().with_prefix(),
            )
            .await
            .expect("read the final state");
        let state: HashMap<String, (Vec<u8>, i64)> = got
            .kvs
            .into_iter()
            .map(|kv| (String::from_utf8(kv.key).unwrap(), (kv.value, kv.version)))
            .collect();
        for key in self.acknowledged() {
            let (value, _) = state
                .get(key)
                .unwrap_or_else(|| panic!("acknowledged put {key} is missing"));
            assert_eq!(
                value,
                key.as_bytes(),
                "acknowledged put {key} has another value"
            );
        }
        for (key, (_, version)) in &state {
            assert_eq!(*version, 1, "put {key} was applied {version} times");
        }
        self.errors(Kind::Put)
            .iter()
            .filter(|o| o.key.as_deref().is_some_and(|k| state.contains_key(k)))
            .count()
    }

    /// A one-line summary for the test log.
    pub fn summary(
        &self,
        kind: Kind,
        warmup: (Duration, Duration),
        fault: Duration,
        end: Duration,
    ) -> String {
        let before = self.rate(kind, warmup.0, warmup.1);
        let during = self.rate(kind, fault, end);
        format!(
            "{kind:?}: {before:.0} ok/s before, first success after fault {:?}, longest gap {:?}, \
             during/before {:.0}%, errors {}",
            self.first_success_after(kind, fault),
            self.longest_gap(kind, fault, end),
            if before > 0.0 {
                100.0 * during / before
            } else {
                0.0
            },
            self.errors(kind).len()
        )
    }
}
