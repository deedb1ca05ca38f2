//! What a run does and in which order: every fault x every load x N trials, one after the
//! other, with the timings every trial shares.

use std::time::Duration;

use serde::{Serialize, Serializer};

use crate::clients::ClientKind;
use crate::progress::Progress;
use crate::site::Fault;
use crate::stats::{self, ScenarioSummary};
use crate::trial::{self, TrialRecord, TrialSpec};
use crate::workload::Load;

/// The warm-up before the fault: 2 s, 200 calls per task at full pace, enough for a stable
/// "before" throughput and latency.
const WARMUP: Duration = Duration::from_secs(2);

/// Time kept after the heal to watch the clients come back: 3 s, room for the 1 s sliding
/// window that judges "back to 95 %" after a recovery of up to 2 s.
const AFTER_HEAL: Duration = Duration::from_secs(3);

/// Shortest hold of a fault that is undone: 1 s, about an etcd election timeout.
const MIN_HOLD: Duration = Duration::from_secs(1);

/// The timings every trial of a run shares.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Timing {
    /// Traffic before the fault.
    #[serde(rename = "warmup_ms", serialize_with = "as_ms")]
    pub warmup: Duration,
    /// From the fault to the end of the loops (`--window`).
    #[serde(rename = "window_ms", serialize_with = "as_ms")]
    pub window: Duration,
    /// How long a fault that is undone lasts: the window less the time kept after the heal.
    #[serde(rename = "hold_ms", serialize_with = "as_ms")]
    pub hold: Duration,
    /// The caller's bound on each call (`--deadline`).
    #[serde(rename = "deadline_ms", serialize_with = "as_ms")]
    pub deadline: Duration,
}

impl Timing {
    /// The timings for a fault window of `window` and a per-call `deadline`.
    pub fn new(window: Duration, deadline: Duration) -> Self {
        Timing {
            warmup: WARMUP,
            window,
            hold: window.saturating_sub(AFTER_HEAL).max(MIN_HOLD).min(window),
            deadline,
        }
    }
}

/// Serializes a duration as milliseconds.
pub fn as_ms<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

/// Everything a run is asked to do.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The faults, in order.
    pub faults: Vec<Fault>,
    /// The clients, side by side in every trial.
    pub clients: Vec<ClientKind>,
    /// The loads, each run for every fault.
    pub loads: Vec<Load>,
    /// Trials per fault and load.
    pub trials: usize,
    /// The shared timings.
    pub timing: Timing,
    /// Where local clusters keep their data; `None`: the system's temp dir.
    pub data_dir: Option<std::path::PathBuf>,
    /// The etcd server of the local clusters (`--etcd-version`); `None`: the testkit's choice
    /// (`ETCD_BIN`, `PATH`, its 3.5.1).
    pub etcd: Option<EtcdServer>,
}

/// The etcd server a run asked for by version, and the binary that provides it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EtcdServer {
    /// The version asked for (`--etcd-version`), which the binary was checked to report.
    pub version: String,
    /// The binary.
    pub binary: std::path::PathBuf,
}

impl Plan {
    /// How many trials the run makes at most.
    pub fn total_trials(&self) -> usize {
        self.faults.len() * self.loads.len() * self.trials
    }
}

/// The trials of one fault under one load, and their summary.
#[derive(Debug, Serialize)]
pub struct ScenarioRun {
    /// The fault's name ("leader-kill", "your-cluster").
    pub scenario: &'static str,
    /// What the fault does.
    pub description: String,
    /// How the loops drove calls.
    pub load: Load,
    /// True for planned maintenance (a handover, a graceful stop).
    pub planned: bool,
    /// Why trials could not run, if any did not.
    pub skipped: Vec<String>,
    /// Median / p90 / max over the trials.
    pub summary: ScenarioSummary,
    /// Every trial, raw samples included.
    pub trials: Vec<TrialRecord>,
}

/// Runs `plan`, one trial at a time. A fault whose site cannot be prepared (no root for a
/// partition, say) is skipped after its first failure, and the rest still run.
pub async fn execute(plan: &Plan, progress: &Progress) -> Vec<ScenarioRun> {
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut runs = Vec::new();
    for fault in &plan.faults {
        for &load in &plan.loads {
            let mut trials = Vec::new();
            let mut skipped = Vec::new();
            for n in 1..=plan.trials {
                if !skipped.is_empty() {
                    progress.trial_done();
                    continue;
                }
                let label = format!(
                    "{}, {}, trial {n}/{}",
                    fault.name(),
                    load.label(),
                    plan.trials
                );
                progress.start_trial(&label);
                let key_root = match fault {
                    Fault::Local(_) => "failover/".to_string(),
                    Fault::External(_) => {
                        format!("etcd-ha-bench/{run_id}/{}/{n}/", load.slug())
                    }
                };
                let spec = TrialSpec {
                    fault,
                    clients: &plan.clients,
                    load,
                    timing: plan.timing,
                    data_dir: plan.data_dir.as_deref(),
                    etcd_bin: plan.etcd.as_ref().map(|e| e.binary.as_path()),
                    trial: n,
                    key_root,
                };
                match trial::run(spec, progress).await {
                    Ok(record) => trials.push(record),
                    Err(e) => {
                        progress.note(&format!("{label}: could not run: {e}"));
                        skipped.push(format!("trial {n}: {e}"));
                    }
                }
                progress.trial_done();
            }
            runs.push(ScenarioRun {
                scenario: fault.name(),
                description: describe(fault, plan.timing),
                load,
                planned: fault.is_planned(),
                skipped,
                summary: stats::summarize(&trials, &plan.clients),
                trials,
            });
        }
    }
    runs
}

/// What `fault` does, in words, with its own window when it needs a longer one than the run's.
fn describe(fault: &Fault, timing: Timing) -> String {
    let window = fault.window(timing.window);
    if window == timing.window {
        fault.describe(timing.hold)
    } else {
        let own = Timing::new(window, timing.deadline);
        format!(
            "{}; fault window {:.0} s for its script",
            fault.describe(own.hold),
            window.as_secs_f64()
        )
    }
}
