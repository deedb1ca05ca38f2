//! Repeated trials into one summary per client and loop: median / p90 / max over the trials of
//! each metric, latency percentiles over every call of every trial (merged histograms), and
//! each client's time to first success as a ratio to the cluster's own re-election.

use serde::Serialize;

use crate::clients::ClientKind;
use crate::leadership::LeadershipMetrics;
use crate::lease::LeaseMetrics;
use crate::metrics::{self, LatencySummary, LoopMetrics, PhaseLatency};
use crate::trial::TrialRecord;
use crate::watch::WatchMetrics;
use crate::workload::LoopKind;

/// Median, 90th percentile and maximum of one metric over the trials that have it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spread {
    /// Middle value (the mean of the two middle ones for an even count).
    pub median: f64,
    /// Nearest-rank 90th percentile (the maximum for fewer than ten trials).
    pub p90: f64,
    /// Largest value.
    pub max: f64,
    /// Trials with a value.
    pub n: usize,
}

impl Spread {
    /// The spread of `values`; `None` if there are none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Some(Spread {
            median: if v.len() % 2 == 1 {
                v[v.len() / 2]
            } else {
                (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
            },
            p90: rank(0.9),
            max: v[v.len() - 1],
            n: v.len(),
        })
    }
}

/// One client's loop over all trials.
#[derive(Debug, Clone, Serialize)]
pub struct LoopSummary {
    /// Which client.
    pub client: ClientKind,
    /// Which loop.
    #[serde(rename = "loop")]
    pub kind: LoopKind,
    /// Trials in which the loop ran.
    pub trials: usize,
    /// Time to the first success after the fault, over the trials that had one.
    pub first_success_ms: Option<Spread>,
    /// Trials in which no call started after the fault succeeded.
    pub first_success_never: usize,
    /// Longest gap without a success in the fault window.
    pub longest_gap_ms: Option<Spread>,
    /// Throughput in the fault window over the warm-up's.
    pub during_over_before: Option<Spread>,
    /// Errors that reached the caller.
    pub errors: Option<Spread>,
    /// Time back to 95 % of the warm-up throughput, over the trials that got there.
    pub back_to_95_ms: Option<Spread>,
    /// Trials that never got back to 95 % within the window.
    pub back_to_95_never: usize,
    /// Latency of every successful call of every trial, by phase.
    pub latency: PhaseLatency,
    /// Time to first success / the cluster's re-election time, per trial.
    pub over_reelection: Option<Spread>,
}

/// One client's watch over all trials.
#[derive(Debug, Clone, Serialize)]
pub struct WatchSummary {
    /// Which client.
    pub client: ClientKind,
    /// Trials in which it watched.
    pub trials: usize,
    /// Fault -> first event of a write started after it, over the trials that had one.
    pub first_event_ms: Option<Spread>,
    /// Trials in which no such event arrived.
    pub first_event_never: usize,
    /// Acknowledged writes never delivered.
    pub lost: Option<Spread>,
    /// Events delivered more than once, or out of order.
    pub repeated_or_reordered: Option<Spread>,
    /// Trials in which the watch ended for good before the probe did.
    pub ended: usize,
}

/// One client's kept lease over all trials.
#[derive(Debug, Clone, Serialize)]
pub struct LeaseSummary {
    /// Which client.
    pub client: ClientKind,
    /// Trials in which it kept a lease.
    pub trials: usize,
    /// Fault -> answer of the first renewal sent after it, over the trials that had one.
    pub first_renewal_ms: Option<Spread>,
    /// Trials without such a renewal.
    pub first_renewal_never: usize,
    /// Trials whose lease no longer existed at the end.
    pub lost: usize,
}

/// One client's leadership over all trials.
#[derive(Debug, Clone, Serialize)]
pub struct LeadershipSummary {
    /// Which client.
    pub client: ClientKind,
    /// Trials in which it held a leadership.
    pub trials: usize,
    /// Trials in which it held the leadership at the fault (on a saturated machine the first
    /// campaign may not have won by then).
    pub held_at_fault: usize,
    /// Trials in which it held at the fault and never lost it.
    pub kept: usize,
    /// Fault -> the first loss after it, over the trials that lost it.
    pub lost_after_ms: Option<Spread>,
    /// Fault -> the next holder, over the trials that lost it (or did not hold at the fault)
    /// and found one.
    pub new_holder_ms: Option<Spread>,
    /// Trials not kept in which no new holder came within the window.
    pub new_holder_never: usize,
}

/// The summary of one fault under one load.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioSummary {
    /// The cluster's own re-election time: the floor no client can beat.
    pub reelection_ms: Option<Spread>,
    /// Trials without a re-election in the window (of those where one was expected).
    pub reelection_never: usize,
    /// One entry per client and loop.
    pub loops: Vec<LoopSummary>,
    /// One entry per client: its watch of the probe's writes.
    pub watches: Vec<WatchSummary>,
    /// One entry per client: its kept lease.
    pub leases: Vec<LeaseSummary>,
    /// One entry per client: its leadership.
    pub leaderships: Vec<LeadershipSummary>,
}

/// Summarizes `trials` for `clients`.
pub fn summarize(trials: &[TrialRecord], clients: &[ClientKind]) -> ScenarioSummary {
    let reelections = trials.iter().filter(|t| t.rule.is_some());
    let reelection_never = reelections
        .clone()
        .filter(|t| t.reelection_ms.is_none())
        .count();
    let mut loops = Vec::new();
    for &client in clients {
        for kind in LoopKind::ALL {
            // (the trial, the loop's metrics, its samples) for every trial where it ran.
            let runs: Vec<_> = trials
                .iter()
                .filter_map(|t| {
                    let c = t.clients.iter().find(|c| c.client == client)?;
                    let l = c.loops.iter().find(|l| l.kind == kind)?;
                    Some((t, &l.metrics, &l.samples))
                })
                .collect();
            if runs.is_empty() {
                // A loop this client does not run (etcd-ha-alone runs only puts).
                continue;
            }
            let metric = |f: fn(&LoopMetrics) -> Option<f64>| {
                Spread::of(runs.iter().filter_map(|(_, m, _)| f(m)))
            };
            let mut histograms = [
                metrics::latency_histogram(),
                metrics::latency_histogram(),
                metrics::latency_histogram(),
            ];
            for (trial, _, samples) in &runs {
                let per_trial = metrics::phase_histograms(samples, &trial.phases);
                for (total, h) in histograms.iter_mut().zip(per_trial) {
                    total.add(&h).expect("histograms with the same bounds");
                }
            }
            let [before, during, after] = histograms;
            loops.push(LoopSummary {
                client,
                kind,
                trials: runs.len(),
                first_success_ms: metric(|m| m.first_success_ms),
                first_success_never: runs
                    .iter()
                    .filter(|(_, m, _)| m.first_success_ms.is_none())
                    .count(),
                longest_gap_ms: metric(|m| Some(m.longest_gap_ms)),
                during_over_before: metric(|m| m.during_over_before),
                errors: metric(|m| Some(m.errors as f64)),
                back_to_95_ms: metric(|m| m.back_to_95_ms),
                back_to_95_never: runs
                    .iter()
                    .filter(|(_, m, _)| m.back_to_95_ms.is_none())
                    .count(),
                latency: PhaseLatency {
                    before: LatencySummary::of(&before),
                    during: LatencySummary::of(&during),
                    after: LatencySummary::of(&after),
                },
                over_reelection: Spread::of(runs.iter().filter_map(|(t, m, _)| {
                    Some(m.first_success_ms? / t.reelection_ms.filter(|&r| r > 0.0)?)
                })),
            });
        }
    }
    let watches = clients
        .iter()
        .map(|&client| {
            let runs: Vec<&WatchMetrics> = trials
                .iter()
                .filter_map(|t| {
                    t.clients
                        .iter()
                        .find(|c| c.client == client)?
                        .watch
                        .as_ref()
                })
                .collect();
            WatchSummary {
                client,
                trials: runs.len(),
                first_event_ms: Spread::of(
                    runs.iter().filter_map(|w| w.first_event_after_fault_ms),
                ),
                first_event_never: runs
                    .iter()
                    .filter(|w| w.first_event_after_fault_ms.is_none())
                    .count(),
                lost: Spread::of(runs.iter().map(|w| w.lost as f64)),
                repeated_or_reordered: Spread::of(
                    runs.iter().map(|w| (w.repeated + w.out_of_order) as f64),
                ),
                ended: runs.iter().filter(|w| w.ended.is_some()).count(),
            }
        })
        .collect();
    let leases = clients
        .iter()
        .map(|&client| {
            let runs: Vec<&LeaseMetrics> = trials
                .iter()
                .filter_map(|t| {
                    t.clients
                        .iter()
                        .find(|c| c.client == client)?
                        .lease
                        .as_ref()
                })
                .collect();
            let first = runs.iter().filter_map(|l| l.first_renewal_after_fault_ms);
            LeaseSummary {
                client,
                trials: runs.len(),
                first_renewal_ms: Spread::of(first),
                first_renewal_never: runs
                    .iter()
                    .filter(|l| l.first_renewal_after_fault_ms.is_none())
                    .count(),
                lost: runs.iter().filter(|l| l.lost == Some(true)).count(),
            }
        })
        .collect();
    let leaderships = clients
        .iter()
        .map(|&client| {
            let runs: Vec<&LeadershipMetrics> = trials
                .iter()
                .filter_map(|t| {
                    t.clients
                        .iter()
                        .find(|c| c.client == client)?
                        .leadership
                        .as_ref()
                })
                .collect();
            LeadershipSummary {
                client,
                trials: runs.len(),
                held_at_fault: runs.iter().filter(|l| l.held_at_fault).count(),
                kept: runs.iter().filter(|l| l.kept).count(),
                lost_after_ms: Spread::of(runs.iter().filter_map(|l| l.lost_after_fault_ms)),
                new_holder_ms: Spread::of(runs.iter().filter_map(|l| l.new_holder_after_fault_ms)),
                new_holder_never: runs
                    .iter()
                    .filter(|l| !l.kept && l.new_holder_after_fault_ms.is_none())
                    .count(),
            }
        })
        .collect();
    ScenarioSummary {
        leaderships,
        reelection_ms: Spread::of(trials.iter().filter_map(|t| t.reelection_ms)),
        reelection_never,
        loops,
        watches,
        leases,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_three_trials() {
        let s = Spread::of([300.0, 100.0, 200.0]).expect("values");
        assert_eq!((s.median, s.p90, s.max, s.n), (200.0, 300.0, 300.0, 3));
        assert!(Spread::of([]).is_none());
    }

    #[test]
    fn p90_of_ten_trials_is_the_ninth() {
        let s = Spread::of((1..=10).map(f64::from)).expect("values");
        assert_eq!(s.p90, 9.0);
        assert_eq!(s.median, 5.5);
    }
}
