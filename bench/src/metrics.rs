//! Turns one loop's samples from one trial into the numbers the report shows: throughput before
//! and during the fault, time to the first success, the longest gap, errors, time back to 95 %
//! of throughput, and latency percentiles before, during and after the fault.
//!
//! The timeline of a trial, relative to the moment the loops start:
//!
//! ```text
//! 0 ...... fault ............ heal (or fault + hold) ........ window end ... (in-flight calls end)
//!   before          during                       after
//!                   |<------------------ fault window ------------------>|
//! ```
//!
//! A success counts where it *finished*; "first success after the fault" only counts calls that
//! also *started* after the fault, so a call that was already on a healthy member does not hide
//! the failover.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::workload::Sample;

/// Width of the sliding window that judges "back to 95 %": 1 s, about 100 calls of one paced
/// task, so one slow call does not decide it and a real dip is not averaged away.
const RECOVERY_WINDOW: Duration = Duration::from_secs(1);

/// Step of that sliding window: 50 ms, finer than any recovery worth telling apart.
const RECOVERY_STEP: Duration = Duration::from_millis(50);

/// The share of the warm-up throughput that counts as recovered: 95 %.
pub const RECOVERED_SHARE: f64 = 0.95;

/// Where the phases of a trial begin and end, in microseconds since the loops' start.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Phases {
    /// When the fault took effect; the warm-up is `0..fault`.
    pub fault_us: u64,
    /// When the fault was undone (thaw, heal, restart done); `None` if it stays (a kill).
    pub heal_us: Option<u64>,
    /// The fault plus the hold: where "during" ends for a fault that stays.
    pub hold_end_us: u64,
    /// When the fault window ends; loops start no call after it.
    pub window_end_us: u64,
}

impl Phases {
    /// When the fault took effect.
    pub fn fault(&self) -> Duration {
        Duration::from_micros(self.fault_us)
    }

    /// Where "during" ends and "after" begins: the heal, else the end of the hold.
    pub fn during_end(&self) -> Duration {
        Duration::from_micros(
            self.heal_us
                .unwrap_or(self.hold_end_us)
                .min(self.window_end_us),
        )
    }

    /// From where "back to 95 %" is measured: the heal, or the fault if it stays.
    pub fn recovery_from(&self) -> Duration {
        Duration::from_micros(self.heal_us.unwrap_or(self.fault_us))
    }

    /// When the fault window ends.
    pub fn window_end(&self) -> Duration {
        Duration::from_micros(self.window_end_us)
    }
}

/// Latency percentiles of the successful calls of one phase, in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LatencySummary {
    /// Successful calls in the phase.
    pub count: u64,
    /// Median latency.
    pub p50_ms: Option<f64>,
    /// 99th percentile.
    pub p99_ms: Option<f64>,
    /// Slowest call.
    pub max_ms: Option<f64>,
}

impl LatencySummary {
    /// Percentiles of a histogram of microseconds; all `None` when it is empty.
    pub fn of(histogram: &Histogram<u64>) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        let count = histogram.len();
        let some = |v: u64| (count > 0).then(|| ms(v));
        LatencySummary {
            count,
            p50_ms: some(histogram.value_at_quantile(0.5)),
            p99_ms: some(histogram.value_at_quantile(0.99)),
            max_ms: some(histogram.max()),
        }
    }
}

/// An empty histogram of call latencies in microseconds, 1 us to 10 min, 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// The latency of successful calls, by the phase in which they finished.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PhaseLatency {
    /// In the warm-up.
    pub before: LatencySummary,
    /// Between the fault and the heal (or the end of the hold).
    pub during: LatencySummary,
    /// From the heal to the end of the window.
    pub after: LatencySummary,
}

/// Which phase a moment belongs to, `None` past the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The warm-up.
    Before,
    /// Fault to heal.
    During,
    /// Heal to window end.
    After,
}

impl Phase {
    /// The phase of `t` under `phases`.
    pub fn of(t: Duration, phases: &Phases) -> Option<Phase> {
        if t < phases.fault() {
            Some(Phase::Before)
        } else if t < phases.during_end() {
            Some(Phase::During)
        } else if t < phases.window_end() {
            Some(Phase::After)
        } else {
            None
        }
    }
}

/// Histograms of successful call latency, one per phase, from `samples`.
pub fn phase_histograms(samples: &[Sample], phases: &Phases) -> [Histogram<u64>; 3] {
    let mut histograms = [
        latency_histogram(),
        latency_histogram(),
        latency_histogram(),
    ];
    for sample in samples.iter().filter(|s| s.error.is_none()) {
        let index = match Phase::of(sample.finished(), phases) {
            Some(Phase::Before) => 0,
            Some(Phase::During) => 1,
            Some(Phase::After) => 2,
            None => continue,
        };
        let micros = sample.latency().as_micros().max(1) as u64;
        histograms[index].saturating_record(micros);
    }
    histograms
}

/// The numbers of one loop of one client in one trial (times in milliseconds).
#[derive(Debug, Clone, Serialize)]
pub struct LoopMetrics {
    /// Calls made, successful or not.
    pub calls: u64,
    /// Successes per second in the warm-up.
    pub ok_per_s_before: f64,
    /// Successes per second in the fault window.
    pub ok_per_s_during: f64,
    /// `ok_per_s_during / ok_per_s_before`; `None` if nothing succeeded before.
    pub during_over_before: Option<f64>,
    /// From the fault to the end of the first successful call started after it; `None` if no
    /// call started after the fault succeeded.
    pub first_success_ms: Option<f64>,
    /// Longest time inside the fault window without a success finishing (the window's ends
    /// count as boundaries, so a client that never recovers shows the whole window).
    pub longest_gap_ms: f64,
    /// Longest time in the warm-up between two successes finishing, the same measure with no
    /// fault: what the load alone costs on this machine (a saturated box has gaps of its own).
    /// `None` with fewer than two successes before the fault.
    pub warmup_gap_ms: Option<f64>,
    /// From the heal (the fault, if it stays) until the throughput over the next second is
    /// back to 95 % of the warm-up's; `None` if it never is within the window.
    pub back_to_95_ms: Option<f64>,
    /// Errors that reached the caller, deadline expiries included, over the whole trial.
    pub errors: u64,
    /// Of those, the ones that finished in the fault window.
    pub errors_in_window: u64,
    /// Errors by kind ("deadline 1000 ms", "grpc Unavailable", "NoLeader", ...).
    pub error_kinds: BTreeMap<String, u64>,
    /// Latency of successful calls before, during and after the fault.
    pub latency: PhaseLatency,
}

/// Computes the metrics of one loop from its samples.
pub fn summarize(samples: &[Sample], phases: &Phases) -> LoopMetrics {
    let fault = phases.fault();
    let window_end = phases.window_end();
    let in_window = |t: Duration| t >= fault && t < window_end;

    let ok_ends: Vec<Duration> = samples
        .iter()
        .filter(|s| s.error.is_none())
        .map(Sample::finished)
        .collect();
    let ok_before = ok_ends.iter().filter(|&&t| t < fault).count();
    let ok_during: Vec<Duration> = ok_ends.iter().copied().filter(|&t| in_window(t)).collect();
    let ok_per_s_before = per_second(ok_before, fault);
    let ok_per_s_during = per_second(ok_during.len(), window_end - fault);

    let first_success = samples
        .iter()
        .filter(|s| s.error.is_none() && s.started() >= fault)
        .map(|s| s.finished() - fault)
        .min();

    let mut marks = Vec::with_capacity(ok_during.len() + 2);
    marks.push(fault);
    marks.extend(ok_during.iter().copied());
    marks.push(window_end);
    marks.sort();
    let longest_gap = marks
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .max()
        .unwrap_or_default();

    let mut warmup: Vec<Duration> = ok_ends.iter().copied().filter(|&t| t < fault).collect();
    warmup.sort();
    let warmup_gap = warmup.windows(2).map(|pair| pair[1] - pair[0]).max();

    let mut error_kinds = BTreeMap::new();
    let mut errors_in_window = 0;
    for sample in samples {
        let Some(kind) = &sample.error else { continue };
        *error_kinds.entry(kind.clone()).or_insert(0) += 1;
        if in_window(sample.finished()) {
            errors_in_window += 1;
        }
    }
    let [before, during, after] = phase_histograms(samples, phases);

    LoopMetrics {
        calls: samples.len() as u64,
        ok_per_s_before,
        ok_per_s_during,
        during_over_before: (ok_per_s_before > 0.0).then(|| ok_per_s_during / ok_per_s_before),
        first_success_ms: first_success.map(ms),
        longest_gap_ms: ms(longest_gap),
        warmup_gap_ms: warmup_gap.map(ms),
        back_to_95_ms: back_to_share(&ok_ends, phases, ok_per_s_before).map(ms),
        errors: error_kinds.values().sum(),
        errors_in_window,
        error_kinds,
        latency: PhaseLatency {
            before: LatencySummary::of(&before),
            during: LatencySummary::of(&during),
            after: LatencySummary::of(&after),
        },
    }
}

/// From [`Phases::recovery_from`], the first start of a [`RECOVERY_WINDOW`] whose successes
/// reach [`RECOVERED_SHARE`] of `rate_before`, as a delay; `None` if no window within the fault
/// window does.
fn back_to_share(ok_ends: &[Duration], phases: &Phases, rate_before: f64) -> Option<Duration> {
    if rate_before <= 0.0 {
        return None;
    }
    let needed = RECOVERED_SHARE * rate_before * RECOVERY_WINDOW.as_secs_f64();
    let from = phases.recovery_from();
    let mut start = from;
    while start + RECOVERY_WINDOW <= phases.window_end() {
        let end = start + RECOVERY_WINDOW;
        let count = ok_ends.iter().filter(|&&t| t >= start && t < end).count();
        if count as f64 >= needed {
            return Some(start - from);
        }
        start += RECOVERY_STEP;
    }
    None
}

/// A duration in milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `count` events over `span`, per second (0 for an empty span).
fn per_second(count: usize, span: Duration) -> f64 {
    if span.is_zero() {
        0.0
    } else {
        count as f64 / span.as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(start_ms: u64, end_ms: u64) -> Sample {
        Sample {
            seq: start_ms,
            start_us: start_ms * 1000,
            end_us: end_ms * 1000,
            error: None,
        }
    }

    #[test]
    fn a_gap_after_a_kill_is_measured_from_the_fault() {
        let phases = Phases {
            fault_us: 1_000_000,
            heal_us: None,
            hold_end_us: 2_000_000,
            window_end_us: 4_000_000,
        };
        // 100/s before, nothing for 500 ms after the fault, then 100/s again.
        let samples: Vec<Sample> = (0..400)
            .map(|i| i * 10)
            .filter(|&t| !(1000..1500).contains(&t))
            .map(|t| ok(t, t + 1))
            .collect();
        let m = summarize(&samples, &phases);
        assert!((m.ok_per_s_before - 100.0).abs() < 1.0);
        assert_eq!(m.first_success_ms.map(f64::round), Some(501.0));
        assert!((m.longest_gap_ms - 501.0).abs() < 1.0);
        // The first 1 s window from 1450 ms holds 95 calls: 95 % of the warm-up rate.
        assert_eq!(m.back_to_95_ms.map(f64::round), Some(450.0));
        assert_eq!(m.latency.before.count, 100);
        // Calls every 10 ms, each taking 1 ms: 10 ms between successes in the warm-up.
        assert_eq!(m.warmup_gap_ms.map(f64::round), Some(10.0));
    }

    #[test]
    fn the_warm_up_gap_is_the_loads_own() {
        let phases = Phases {
            fault_us: 1_000_000,
            heal_us: None,
            hold_end_us: 2_000_000,
            window_end_us: 3_000_000,
        };
        // A 200 ms stall in the warm-up (the box, not a fault), none after.
        let samples: Vec<Sample> = (0..300)
            .map(|i| i * 10)
            .filter(|&t| !(400..600).contains(&t))
            .map(|t| ok(t, t + 1))
            .collect();
        let m = summarize(&samples, &phases);
        assert_eq!(m.warmup_gap_ms.map(f64::round), Some(210.0));
        assert!(m.longest_gap_ms < 15.0, "{}", m.longest_gap_ms);
        // One success before the fault: no gap to speak of.
        let m = summarize(&[ok(0, 1), ok(1500, 1501)], &phases);
        assert_eq!(m.warmup_gap_ms, None);
    }
}
