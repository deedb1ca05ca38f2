//! The planned-maintenance table: for every planned scenario (a handover, a graceful stop, a
//! rolling restart), load and client, the errors that reached the caller and the longest gap
//! without a success, each as median / max over the trials. Issue 11's target is 0 errors and
//! a gap of 100 ms or less in every one of them, at 1, 16 and 256 calls in flight.

use std::fmt::Write;

use serde::Serialize;

use crate::clients::ClientKind;
use crate::plan::ScenarioRun;
use crate::report::Report;
use crate::stats::Spread;
use crate::workload::{Load, LoopKind};

/// One row: a client under one planned scenario and load.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedRow {
    /// The scenario's name.
    pub scenario: &'static str,
    /// How the loops drove calls.
    pub load: Load,
    /// Which client.
    pub client: ClientKind,
    /// Errors that reached the caller in the fault window, all three loops together, per
    /// trial.
    pub errors: Option<Spread>,
    /// Of those, the puts', per trial.
    pub put_errors: Option<Spread>,
    /// Errors that reached the caller in the warm-up, before any fault: what the load alone
    /// costs on this machine (a saturated box misses deadlines with no fault at all).
    pub warmup_errors: Option<Spread>,
    /// The longest gap without a success of the client's worst loop, per trial, in ms.
    pub longest_gap_ms: Option<Spread>,
    /// The same measure in the warm-up, before any fault, per trial, in ms: the gaps the load
    /// alone makes on this machine, the floor the fault window's gap is to be read against.
    pub warmup_gap_ms: Option<Spread>,
    /// From the event to the cluster's new leader, per trial, in ms (the re-election poller,
    /// the same for every client of a trial): the handover no client can shorten. `None` for
    /// the rolling restarts, which move the leader only in their last step.
    pub handover_ms: Option<Spread>,
    /// Trials in which its leadership holder kept the leadership, of those in which it held
    /// it at the fault ((0, 0) for a client without the probe).
    pub leadership_kept: (usize, usize),
    /// Trials in which its holder had not won its first campaign by the fault.
    pub leadership_not_held: usize,
}

/// The rows of every planned scenario of `report`, in run order.
pub fn rows(report: &Report) -> Vec<PlannedRow> {
    let mut out = Vec::new();
    for run in report.scenarios.iter().filter(|r| r.planned) {
        for client in report.settings.clients.iter().map(|c| c.client) {
            out.push(row(run, client));
        }
    }
    out
}

/// The row of `client` in `run`.
fn row(run: &ScenarioRun, client: ClientKind) -> PlannedRow {
    let trials: Vec<_> = run
        .trials
        .iter()
        .filter_map(|t| Some((t, t.clients.iter().find(|c| c.client == client)?)))
        .filter(|(_, c)| c.error.is_none())
        .map(|(t, c)| (t.phases.fault(), &c.loops))
        .collect();
    let loops: Vec<_> = trials.iter().map(|(_, ls)| *ls).collect();
    let errors = loops
        .iter()
        .map(|ls| ls.iter().map(|l| l.metrics.errors_in_window).sum::<u64>() as f64);
    let put_errors = loops.iter().map(|ls| {
        ls.iter()
            .filter(|l| l.kind == LoopKind::Put)
            .map(|l| l.metrics.errors_in_window)
            .sum::<u64>() as f64
    });
    let warmup_errors = trials.iter().map(|(fault, ls)| {
        ls.iter()
            .flat_map(|l| &l.samples)
            .filter(|s| s.error.is_some() && s.finished() < *fault)
            .count() as f64
    });
    let gaps = loops.iter().map(|ls| {
        ls.iter()
            .map(|l| l.metrics.longest_gap_ms)
            .fold(0.0, f64::max)
    });
    let warmup_gaps = loops.iter().filter_map(|ls| {
        ls.iter()
            .filter_map(|l| l.metrics.warmup_gap_ms)
            .reduce(f64::max)
    });
    PlannedRow {
        scenario: run.scenario,
        load: run.load,
        client,
        errors: Spread::of(errors),
        put_errors: Spread::of(put_errors),
        warmup_errors: Spread::of(warmup_errors),
        longest_gap_ms: Spread::of(gaps),
        warmup_gap_ms: Spread::of(warmup_gaps),
        handover_ms: Spread::of(run.trials.iter().filter_map(|t| t.reelection_ms)),
        leadership_kept: run
            .summary
            .leaderships
            .iter()
            .find(|l| l.client == client)
            .map_or((0, 0), |l| (l.kept, l.held_at_fault)),
        leadership_not_held: run
            .summary
            .leaderships
            .iter()
            .find(|l| l.client == client)
            .map_or(0, |l| l.trials - l.held_at_fault),
    }
}

/// `median/max` of `spread`, "-" for none.
fn median_max(spread: Option<Spread>) -> String {
    spread.map_or_else(
        || "-".to_string(),
        |s| format!("{:.0}/{:.0}", s.median, s.max),
    )
}

/// "kept/held at the fault", "+N late" for trials whose holder had not won by the fault, "-"
/// for a client without the probe.
fn kept(row: &PlannedRow) -> String {
    let (kept, held) = row.leadership_kept;
    let mut out = if held + row.leadership_not_held == 0 {
        "-".to_string()
    } else {
        format!("{kept}/{held}")
    };
    if row.leadership_not_held > 0 {
        out.push_str(&format!(" +{}late", row.leadership_not_held));
    }
    out
}

/// The legend under both renderings.
const LEGEND: &str = "Cells are median/max over the trials. errors: calls whose error reached \
the caller in the fault window, the put, linearizable get and serializable get loops together \
(puts: the put loop's share); warm-up: the same before the fault, what the load alone costs on \
this machine; gap: the longest time without a success in the fault window, of the client's worst loop (warm-up gap: the same before the fault, the load's own floor; handover: from the event to \
the cluster's new leader, what no client can shorten, \"-\" for the rolling restarts); \
holder kept: trials whose leadership holder kept it through the whole event, of those in which \
it held it at the fault (+N late: trials whose first campaign had not won by then). In rolling-drain only etcd-ha drains; the etcd-client clients see the same SIGTERMs unwarned.";

/// The table on the terminal; empty when the run had no planned scenario.
pub fn text(report: &Report) -> String {
    let rows = rows(report);
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n== planned maintenance\n");
    let _ = writeln!(out, "{LEGEND}");
    let _ = writeln!(
        out,
        "{:<16} {:>12} {:<24} {:>12} {:>12} {:>12} {:>14} {:>14} {:>14} {:>12}",
        "scenario",
        "in flight",
        "client",
        "errors",
        "puts",
        "warm-up",
        "gap [ms]",
        "warm-up gap",
        "handover [ms]",
        "holder kept"
    );
    for r in &rows {
        let _ = writeln!(
            out,
            "{:<16} {:>12} {:<24} {:>12} {:>12} {:>12} {:>14} {:>14} {:>14} {:>12}",
            r.scenario,
            r.load.label(),
            r.client.name(),
            median_max(r.errors),
            median_max(r.put_errors),
            median_max(r.warmup_errors),
            median_max(r.longest_gap_ms),
            median_max(r.warmup_gap_ms),
            median_max(r.handover_ms),
            kept(r),
        );
    }
    out
}

/// The table in Markdown; empty when the run had no planned scenario.
pub fn markdown(report: &Report) -> String {
    let rows = rows(report);
    if rows.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n## Planned maintenance\n\n{LEGEND}\n\n\
         | scenario | load | client | errors | of which puts | warm-up errors | longest gap [ms] | \
         warm-up gap [ms] | handover [ms] | holder kept |\n|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for r in &rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.scenario,
            r.load.label(),
            r.client.name(),
            median_max(r.errors),
            median_max(r.put_errors),
            median_max(r.warmup_errors),
            median_max(r.longest_gap_ms),
            median_max(r.warmup_gap_ms),
            median_max(r.handover_ms),
            kept(r),
        );
    }
    out
}
