//! The workload: one loop of puts or gets through one client, closed (N tasks, each with one
//! call in flight) or open (calls started at a fixed rate whatever happens to earlier ones),
//! recording when each call started and ended and what reached the caller.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::time::{Instant, MissedTickBehavior};

use crate::clients::{BenchClient, ErrorKind};

/// Least time between the starts of two calls of one task of a closed loop: 10 ms, so at most
/// 100 calls/s per task. Unpaced, a dozen loops would keep a 2-core box busy enough to delay
/// etcd's own heartbeats and cause elections that are not part of the fault; a client that
/// fails fast would also spin.
pub const PACE: Duration = Duration::from_millis(10);

/// How the calls of a loop are driven.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum Load {
    /// `concurrency` tasks share one client; each starts its next call when the last returns
    /// (at most one per [`PACE`]).
    Closed {
        /// Tasks, so calls in flight at most.
        concurrency: usize,
    },
    /// One call started every `1 / rate` s, each in a task of its own.
    Open {
        /// Calls started per second per loop.
        rate: f64,
    },
}

impl Load {
    /// A short label: "1 in flight", "16 in flight", "open 200/s".
    pub fn label(self) -> String {
        match self {
            Load::Closed { concurrency } => format!("{concurrency} in flight"),
            Load::Open { rate } => format!("open {rate}/s"),
        }
    }

    /// The label as a file-name part: "c1", "c16", "r200".
    pub fn slug(self) -> String {
        match self {
            Load::Closed { concurrency } => format!("c{concurrency}"),
            Load::Open { rate } => format!("r{rate}"),
        }
    }
}

/// What one loop does on every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoopKind {
    /// Put a new key `<prefix>put/<seq>` with the value `<client>/<seq>`.
    Put,
    /// Linearizable get of the client's marker key (needs a leader and a quorum).
    LinearizableGet,
    /// Serializable get of the marker key (any live member answers from its own state).
    SerializableGet,
}

impl LoopKind {
    /// Every loop, in the order the report lists them.
    pub const ALL: [LoopKind; 3] = [
        LoopKind::Put,
        LoopKind::LinearizableGet,
        LoopKind::SerializableGet,
    ];

    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            LoopKind::Put => "put",
            LoopKind::LinearizableGet => "get-linearizable",
            LoopKind::SerializableGet => "get-serializable",
        }
    }
}

/// One call: its sequence number in the loop, when it started and ended (microseconds since
/// the loop's common start), and the error that reached the caller, if any.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// 0, 1, 2, ... in start order across the loop's tasks; for puts also the key's suffix.
    pub seq: u64,
    /// When the call was made, in microseconds since the trial's start.
    pub start_us: u64,
    /// When it returned (or hit the deadline), in microseconds since the trial's start.
    pub end_us: u64,
    /// `None` on success.
    pub error: Option<ErrorKind>,
}

impl Sample {
    /// When the call was made, relative to the trial's start.
    pub fn started(&self) -> Duration {
        Duration::from_micros(self.start_us)
    }

    /// When it returned, relative to the trial's start.
    pub fn finished(&self) -> Duration {
        Duration::from_micros(self.end_us)
    }

    /// How long the call took.
    pub fn latency(&self) -> Duration {
        self.finished().saturating_sub(self.started())
    }
}

/// The key of put number `seq` under `prefix`; zero-padded so keys sort in put order.
pub fn put_key(prefix: &str, seq: u64) -> String {
    format!("{prefix}put/{seq:08}")
}

/// The value of put number `seq` of `client`: unique across clients and puts.
pub fn put_value(client: &str, seq: u64) -> String {
    format!("{client}/{seq}")
}

/// Everything a loop needs to know.
#[derive(Clone)]
pub struct LoopPlan {
    /// What to do on each call.
    pub kind: LoopKind,
    /// Through which client (every task gets a clone of it).
    pub client: BenchClient,
    /// The client's name, used in put values.
    pub client_name: &'static str,
    /// The client's key prefix, e.g. `failover/etcd-ha/`.
    pub prefix: String,
    /// Sample times are measured from here.
    pub start: Instant,
    /// No call starts at or after this instant.
    pub stop_at: Instant,
    /// How calls are driven.
    pub load: Load,
    /// The caller's bound on every call; a call still running then counts as an error.
    pub deadline: Duration,
}

/// Runs the loop until `stop_at` and returns every call's sample, in start order.
pub async fn run(plan: LoopPlan) -> Vec<Sample> {
    let seq = Arc::new(AtomicU64::new(0));
    let mut samples = match plan.load {
        Load::Closed { concurrency } => {
            let tasks: Vec<_> = (0..concurrency.max(1))
                .map(|_| tokio::spawn(closed_task(plan.clone(), seq.clone())))
                .collect();
            let mut samples = Vec::new();
            for task in tasks {
                samples.extend(task.await.expect("a workload task panicked"));
            }
            samples
        }
        Load::Open { rate } => open_loop(plan, rate, seq).await,
    };
    samples.sort_by_key(|s| (s.start_us, s.seq));
    samples
}

/// One task of a closed loop: one call at a time, at most one per [`PACE`].
async fn closed_task(plan: LoopPlan, seq: Arc<AtomicU64>) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut pace = tokio::time::interval(PACE);
    // After a slow call, wait a full PACE again rather than bursting to catch up.
    pace.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut client = plan.client.clone();
    loop {
        pace.tick().await;
        if Instant::now() >= plan.stop_at {
            break;
        }
        let n = seq.fetch_add(1, Ordering::Relaxed);
        samples.push(call(&plan, &mut client, n).await);
    }
    samples
}

/// An open loop: a call started every `1 / rate` s in a task of its own, however many earlier
/// calls are still in flight (at most `rate x deadline`).
async fn open_loop(plan: LoopPlan, rate: f64, seq: Arc<AtomicU64>) -> Vec<Sample> {
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.001)));
    // Open loop: calls missed while the runtime was busy are started at once, as a real
    // arrival process would not wait either.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let mut calls = tokio::task::JoinSet::new();
    loop {
        ticks.tick().await;
        if Instant::now() >= plan.stop_at {
            break;
        }
        let n = seq.fetch_add(1, Ordering::Relaxed);
        let (plan, mut client) = (plan.clone(), plan.client.clone());
        calls.spawn(async move { call(&plan, &mut client, n).await });
    }
    let mut samples = Vec::with_capacity(calls.len());
    while let Some(sample) = calls.join_next().await {
        samples.push(sample.expect("a call task panicked"));
    }
    samples
}

/// Makes call number `n` of the loop, bounded by the caller's deadline.
async fn call(plan: &LoopPlan, client: &mut BenchClient, n: u64) -> Sample {
    let started = Instant::now();
    let marker = format!("{}marker", plan.prefix).into_bytes();
    let work = async {
        match plan.kind {
            LoopKind::Put => {
                let key = put_key(&plan.prefix, n).into_bytes();
                let value = put_value(plan.client_name, n).into_bytes();
                client.put(key, value).await
            }
            LoopKind::LinearizableGet => client.get(marker, false).await,
            LoopKind::SerializableGet => client.get(marker, true).await,
        }
    };
    let error = match tokio::time::timeout(plan.deadline, work).await {
        Ok(Ok(())) => None,
        Ok(Err(kind)) => Some(kind),
        Err(_elapsed) => Some(format!("deadline {} ms", plan.deadline.as_millis())),
    };
    let micros = |t: Instant| (t - plan.start).as_micros() as u64;
    Sample {
        seq: n,
        start_us: micros(started),
        end_us: micros(Instant::now()),
        error,
    }
}
