//! The quick table on the terminal: one block per scenario and load, a row per client and
//! loop, each cell the median / p90 / max over the trials.

use std::fmt::Write;

use crate::lease::LEASE_TTL;
use crate::metrics::{LatencySummary, RECOVERED_SHARE};
use crate::plan::ScenarioRun;
use crate::report::{Report, ms_or_dash};
use crate::stats::{LoopSummary, Spread};
use crate::watch::WRITE_PACE;

/// `median/p90/max` of `spread` with `decimals`, plus " +N never" for trials without a value.
pub fn triple(spread: Option<Spread>, decimals: usize, never: usize) -> String {
    let mut out = match spread {
        Some(s) => format!("{:.d$}/{:.d$}/{:.d$}", s.median, s.p90, s.max, d = decimals),
        None => "-".to_string(),
    };
    if never > 0 {
        let _ = write!(out, " +{never}never");
    }
    out
}

/// p99 latency of the three phases: "1/540/2" (ms).
pub fn p99s(before: &LatencySummary, during: &LatencySummary, after: &LatencySummary) -> String {
    format!(
        "{}/{}/{}",
        ms_or_dash(before.p99_ms),
        ms_or_dash(during.p99_ms),
        ms_or_dash(after.p99_ms)
    )
}

/// The legend printed once above the tables.
pub fn legend(report: &Report) -> String {
    let t = &report.settings.timing;
    let mut out = format!(
        "failover-bench: {} trial(s) per scenario; clients side by side; per client a put, a \
         linearizable get and a serializable get loop; each call bounded by a {:.0} ms deadline.\n\
         warm-up {:.1} s, fault window {:.1} s, faults that are undone held {:.1} s.\n\
         Cells are median/p90/max over the trials (+N never: trials without a value).\n\
         1st ok: fault -> first success of a call started after it. gap: longest time without a \
         success in the window. dur/bef: throughput in the window / before. errors: reaching the \
         caller. back{:.0}: heal (or fault, if it stays) -> throughput back to {:.0} %. p99: \
         latency before/during/after [ms]. x re-el: 1st ok / the cluster's re-election.\n\
         watch: each client watches the puts of a neutral writer (an etcd-ha client, one per {} \
         ms); 1st event: fault -> first event of a write started after it; lost: acknowledged \
         writes never delivered (from the first the watch saw: the ones before predate it); \
         ended: trials whose watch stopped for good.\n\
         lease: each client keeps a lease; 1st renewal: fault -> answer of the first renewal \
         sent after it; lost: trials whose lease was gone at the end.\n\
         leadership: each client holds a leadership (etcd-ha's Leadership; etcd-client's \
         election API on a kept lease) and campaigns again when it loses it; kept: trials in \
         which it never lost it, of those in which it held it at the fault (+N late: its first \
         campaign had not won by then); lost after: fault -> the loss; new holder: fault -> \
         leading again.\n",
        report.settings.trials,
        t.deadline.as_secs_f64() * 1000.0,
        t.warmup.as_secs_f64(),
        t.window.as_secs_f64(),
        t.hold.as_secs_f64(),
        RECOVERED_SHARE * 100.0,
        RECOVERED_SHARE * 100.0,
        WRITE_PACE.as_millis(),
    );
    for c in &report.settings.clients {
        let _ = writeln!(out, "  {}: {}", c.client.name(), c.options);
    }
    for gone in &report.settings.left_out {
        let _ = writeln!(out, "  {}: left out: {}", gone.client.name(), gone.reason);
    }
    if let Some(etcd) = &report.settings.etcd {
        let _ = writeln!(
            out,
            "etcd {} (--etcd-version): {}",
            etcd.version,
            etcd.binary.display()
        );
    }
    out
}

/// The table of one scenario under one load.
pub fn block(run: &ScenarioRun) -> String {
    let mut out = String::new();
    let first = run.trials.first();
    let _ = writeln!(
        out,
        "\n== {} ({}), {}, {} trial(s){}",
        run.scenario,
        run.description,
        run.load.label(),
        run.trials.len(),
        first.map_or(String::new(), |t| format!(", etcd {}", t.etcd_version)),
    );
    for skipped in &run.skipped {
        let _ = writeln!(out, "   could not run: {skipped}");
    }
    if run.trials.is_empty() {
        return out;
    }
    if let Some(rule) = first.and_then(|t| t.rule) {
        let _ = writeln!(
            out,
            "   cluster re-election [ms]: {} ({})",
            triple(run.summary.reelection_ms, 0, run.summary.reelection_never),
            rule.describe()
        );
    }
    for t in &run.trials {
        if let Some(e) = &t.fault_error {
            let _ = writeln!(out, "   trial {}: FAULT SCRIPT FAILED: {e}", t.trial);
        }
        for c in &t.clients {
            if let Some(e) = &c.error {
                let _ = writeln!(
                    out,
                    "   trial {}: {} did not run: {e}",
                    t.trial,
                    c.client.name()
                );
            } else if !c.read_back.is_clean() {
                let _ = writeln!(
                    out,
                    "   trial {}: {} read-back VIOLATION: {:?}",
                    t.trial,
                    c.client.name(),
                    c.read_back
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "{:<24} {:<17} {:>18} {:>18} {:>15} {:>9} {:>18} {:>14} {:>14}",
        "client",
        "loop",
        "1st ok [ms]",
        "gap [ms]",
        "dur/bef",
        "errors",
        format!("back{:.0} [ms]", RECOVERED_SHARE * 100.0),
        "p99 [ms]",
        "x re-el"
    );
    for l in &run.summary.loops {
        let _ = writeln!(out, "{}", row(l));
    }
    let _ = writeln!(
        out,
        "{:<24} {:<17} {:>18} {:>18} {:>15} {:>9}",
        "watch of a neutral writer", "", "1st event [ms]", "lost", "repeat/reorder", "ended"
    );
    for w in run.summary.watches.iter().filter(|w| w.trials > 0) {
        let _ = writeln!(
            out,
            "{:<24} {:<17} {:>18} {:>18} {:>15} {:>9}",
            w.client.name(),
            "watch",
            triple(w.first_event_ms, 0, w.first_event_never),
            triple(w.lost, 0, 0),
            triple(w.repeated_or_reordered, 0, 0),
            format!("{}/{}", w.ended, w.trials),
        );
    }
    let _ = writeln!(
        out,
        "{:<24} {:<17} {:>18} {:>18}",
        format!("lease kept (TTL {} s)", LEASE_TTL.as_secs()),
        "",
        "1st renewal [ms]",
        "lost"
    );
    for l in run.summary.leases.iter().filter(|l| l.trials > 0) {
        let _ = writeln!(
            out,
            "{:<24} {:<17} {:>18} {:>18}",
            l.client.name(),
            "lease",
            triple(l.first_renewal_ms, 0, l.first_renewal_never),
            format!("{}/{}", l.lost, l.trials),
        );
    }
    let _ = writeln!(
        out,
        "{:<24} {:<17} {:>18} {:>18} {:>15}",
        format!("leadership (TTL {} s)", LEASE_TTL.as_secs()),
        "",
        "kept",
        "lost after [ms]",
        "new holder [ms]"
    );
    for l in run.summary.leaderships.iter().filter(|l| l.trials > 0) {
        let _ = writeln!(
            out,
            "{:<24} {:<17} {:>18} {:>18} {:>15}",
            l.client.name(),
            "leadership",
            kept(l),
            triple(l.lost_after_ms, 0, 0),
            triple(l.new_holder_ms, 0, l.new_holder_never),
        );
    }
    out
}

/// "kept/held at the fault", with " +N late" for trials whose holder had not won by the fault.
pub fn kept(l: &crate::stats::LeadershipSummary) -> String {
    let late = l.trials - l.held_at_fault;
    if late > 0 {
        format!("{}/{} +{late}late", l.kept, l.held_at_fault)
    } else {
        format!("{}/{}", l.kept, l.held_at_fault)
    }
}

/// One row of [`block`].
fn row(l: &LoopSummary) -> String {
    format!(
        "{:<24} {:<17} {:>18} {:>18} {:>15} {:>9} {:>18} {:>14} {:>14}",
        l.client.name(),
        l.kind.name(),
        triple(l.first_success_ms, 0, l.first_success_never),
        triple(l.longest_gap_ms, 0, 0),
        triple(l.during_over_before, 2, 0),
        triple(l.errors, 0, 0),
        triple(l.back_to_95_ms, 0, l.back_to_95_never),
        p99s(&l.latency.before, &l.latency.during, &l.latency.after),
        triple(l.over_reelection, 1, 0),
    )
}
