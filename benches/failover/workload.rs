//! The workload: one sequential, paced, bounded loop of puts or gets through one client,
//! recording when each call started and ended and what reached the caller.

use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use crate::clients::{BenchClient, ErrorKind};

/// The caller's deadline on every call: 1 s, what a latency-sensitive service allows a
/// configuration read or write. A call that has not returned by then is dropped and counts as
/// an error ("deadline 1s"), whatever the client would have done later.
pub const CALL_DEADLINE: Duration = Duration::from_secs(1);

/// Least time between the starts of two calls of one loop: 10 ms, so at most 100 calls/s per
/// loop and 900/s for the nine loops. Unpaced, nine loops would keep the 2-core box busy enough
/// to delay etcd's own heartbeats and cause elections that are not part of the fault; a
/// client that fails fast would also spin.
pub const PACE: Duration = Duration::from_millis(10);

/// What one loop does on every call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// One call: its sequence number in the loop, when it started and ended (since the loop's
/// common start), and the error that reached the caller, if any.
#[derive(Debug, Clone)]
pub struct Sample {
    /// 0, 1, 2, ...; for puts also the key's suffix and the value's.
    pub seq: u64,
    /// When the call was made, relative to the scenario's start.
    pub started: Duration,
    /// When it returned (or hit the deadline), relative to the scenario's start.
    pub finished: Duration,
    /// `None` on success.
    pub error: Option<ErrorKind>,
}

/// The key of put number `seq` under `prefix`; zero-padded so keys sort in put order.
pub fn put_key(prefix: &str, seq: u64) -> String {
    format!("{prefix}put/{seq:08}")
}

/// The value of put number `seq` of `client`: unique across clients and puts.
pub fn put_value(client: &str, seq: u64) -> String {
    format!("{client}/{seq}")
}

/// Everything a loop needs to know; one per spawned task.
pub struct LoopPlan {
    /// What to do on each call.
    pub kind: LoopKind,
    /// Through which client (a clone of its own).
    pub client: BenchClient,
    /// The client's name, used in put values.
    pub client_name: &'static str,
    /// The client's key prefix, e.g. `failover/etcd-ha/`.
    pub prefix: String,
    /// Sample times are measured from here.
    pub start: Instant,
    /// No call starts at or after this instant.
    pub stop_at: Instant,
}

/// Runs the loop until `stop_at`: at most one call in flight, one call per [`PACE`] at most,
/// each bounded by [`CALL_DEADLINE`]. Returns every call's sample.
pub async fn run(plan: LoopPlan) -> Vec<Sample> {
    let LoopPlan {
        kind,
        mut client,
        client_name,
        prefix,
        start,
        stop_at,
    } = plan;
    let marker = format!("{prefix}marker").into_bytes();
    let mut samples = Vec::new();
    let mut pace = tokio::time::interval(PACE);
    // After a slow call, wait a full PACE again rather than bursting to catch up.
    pace.set_missed_tick_behavior(MissedTickBehavior::Delay);
    for seq in 0.. {
        pace.tick().await;
        let started = Instant::now();
        if started >= stop_at {
            break;
        }
        let call = async {
            match kind {
                LoopKind::Put => {
                    let key = put_key(&prefix, seq).into_bytes();
                    let value = put_value(client_name, seq).into_bytes();
                    client.put(key, value).await
                }
                LoopKind::LinearizableGet => client.get(marker.clone(), false).await,
                LoopKind::SerializableGet => client.get(marker.clone(), true).await,
            }
        };
        let error = match tokio::time::timeout(CALL_DEADLINE, call).await {
            Ok(Ok(())) => None,
            Ok(Err(kind)) => Some(kind),
            Err(_elapsed) => Some(format!("deadline {}s", CALL_DEADLINE.as_secs())),
        };
        samples.push(Sample {
            seq,
            started: started - start,
            finished: Instant::now() - start,
            error,
        });
    }
    samples
}
