//! Turns one loop's samples into the numbers the report shows: throughput before the fault,
//! time to the first success after it, the longest gap, throughput during it, errors.
//!
//! The timeline of a scenario, relative to the moment the loops start:
//!
//! ```text
//! 0 ........ fault_at ..................... window_end ... (in-flight calls finish)
//!   warm-up          fault window: the fault and the recovery from it
//! ```
//!
//! A success counts where it *finished*; "first success after the fault" only counts calls that
//! also *started* after the fault, so a call that was already on a healthy member does not hide
//! the failover.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::workload::Sample;

/// Where the phases of a scenario begin and end, relative to the loops' start.
#[derive(Debug, Clone, Copy)]
pub struct Phases {
    /// When the fault was injected; the warm-up window is `0..fault_at`.
    pub fault_at: Duration,
    /// When the fault window ends; loops start no call after it.
    pub window_end: Duration,
}

impl Phases {
    /// Length of the warm-up window.
    pub fn warmup(&self) -> Duration {
        self.fault_at
    }

    /// Length of the fault window.
    pub fn window(&self) -> Duration {
        self.window_end - self.fault_at
    }
}

/// The numbers of one loop of one client in one scenario.
#[derive(Debug, Clone)]
pub struct LoopMetrics {
    /// Calls made, successful or not.
    pub calls: u64,
    /// Successes per second in the warm-up window.
    pub ok_per_s_before: f64,
    /// Successes per second in the fault window.
    pub ok_per_s_during: f64,
    /// From the fault to the end of the first successful call started after it; `None` if no
    /// call started after the fault succeeded.
    pub first_success_after_fault: Option<Duration>,
    /// Longest time inside the fault window without a success finishing (the window's ends
    /// count as boundaries, so a client that never recovers shows the whole window).
    pub longest_gap: Duration,
    /// `ok_per_s_during / ok_per_s_before` in percent; `None` if nothing succeeded before.
    pub during_over_before_pct: Option<f64>,
    /// Errors that reached the caller, deadline expiries included, over the whole run.
    pub errors: u64,
    /// Of those, the ones that finished in the warm-up window.
    pub errors_before: u64,
    /// Of those, the ones that finished in the fault window.
    pub errors_during: u64,
    /// Of those, the ones that finished after the window (calls in flight at its end).
    pub errors_after: u64,
    /// Errors by kind ("deadline 1s", "grpc Unavailable", "NoLeader", ...).
    pub error_kinds: BTreeMap<String, u64>,
    /// Longest successful call in the fault window, a hint of hidden retries or hangs.
    pub slowest_success_during: Option<Duration>,
}

/// Computes the metrics of one loop from its samples.
pub fn summarize(samples: &[Sample], phases: Phases) -> LoopMetrics {
    let in_warmup = |t: Duration| t < phases.fault_at;
    let in_window = |t: Duration| t >= phases.fault_at && t < phases.window_end;

    let ok: Vec<&Sample> = samples.iter().filter(|s| s.error.is_none()).collect();
    let ok_before = ok.iter().filter(|s| in_warmup(s.finished)).count();
    let ok_during: Vec<Duration> = ok
        .iter()
        .map(|s| s.finished)
        .filter(|&t| in_window(t))
        .collect();
    let ok_per_s_before = per_second(ok_before, phases.warmup());
    let ok_per_s_during = per_second(ok_during.len(), phases.window());

    let first_success_after_fault = ok
        .iter()
        .filter(|s| s.started >= phases.fault_at)
        .map(|s| s.finished - phases.fault_at)
        .min();

    let mut marks = Vec::with_capacity(ok_during.len() + 2);
    marks.push(phases.fault_at);
    marks.extend(ok_during.iter().copied());
    marks.push(phases.window_end);
    marks.sort();
    let longest_gap = marks
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .max()
        .unwrap_or_default();

    let slowest_success_during = ok
        .iter()
        .filter(|s| in_window(s.finished))
        .map(|s| s.finished - s.started)
        .max();

    let mut error_kinds = BTreeMap::new();
    let (mut errors_before, mut errors_during, mut errors_after) = (0, 0, 0);
    for sample in samples {
        let Some(kind) = &sample.error else { continue };
        *error_kinds.entry(kind.clone()).or_insert(0) += 1;
        if in_warmup(sample.finished) {
            errors_before += 1;
        } else if in_window(sample.finished) {
            errors_during += 1;
        } else {
            errors_after += 1;
        }
    }

    LoopMetrics {
        calls: samples.len() as u64,
        ok_per_s_before,
        ok_per_s_during,
        first_success_after_fault,
        longest_gap,
        during_over_before_pct: (ok_per_s_before > 0.0)
            .then(|| 100.0 * ok_per_s_during / ok_per_s_before),
        errors: errors_before + errors_during + errors_after,
        errors_before,
        errors_during,
        errors_after,
        error_kinds,
        slowest_success_during,
    }
}

/// `count` events over `span`, per second (0 for an empty span).
fn per_second(count: usize, span: Duration) -> f64 {
    if span.is_zero() {
        0.0
    } else {
        count as f64 / span.as_secs_f64()
    }
}
