//! The Markdown report: settings, then per scenario and load the summary table, a latency
//! table, the trials' re-election times, and the SVG timeline embedded.

use std::fmt::Write;

use crate::lease::LEASE_TTL;
use crate::metrics::RECOVERED_SHARE;
use crate::report::table::{p99s, triple};
use crate::report::{Report, ms_or_dash};
use crate::watch::WRITE_PACE;
use crate::workload::Load;

/// Renders the report; `svgs` are (scenario, load, file name relative to the report).
pub fn render(report: &Report, svgs: &[(&str, Load, String)]) -> String {
    let s = &report.settings;
    let t = &s.timing;
    let mut out = String::from("# Failover benchmark report\n\n");
    let _ = writeln!(out, "Command: `{}`\n", s.command);
    let _ = writeln!(
        out,
        "{} trial(s) per scenario and load; warm-up {:.1} s, fault window {:.1} s, faults that \
         are undone held {:.1} s, every call bounded by a {:.0} ms deadline; closed loops start \
         at most one call per {:.0} ms per task. Cells are median / p90 / max over the trials \
         (+N never: trials without a value).\n",
        s.trials,
        t.warmup.as_secs_f64(),
        t.window.as_secs_f64(),
        t.hold.as_secs_f64(),
        t.deadline.as_secs_f64() * 1000.0,
        s.closed_loop_pace_ms
    );
    if let Some(etcd) = &s.etcd {
        let _ = writeln!(
            out,
            "etcd {} (`--etcd-version`, `{}`).\n",
            etcd.version,
            etcd.binary.display()
        );
    }
    out.push_str("| client | options |\n|---|---|\n");
    for c in &s.clients {
        let _ = writeln!(out, "| {} | {} |", c.client.name(), c.options);
    }
    for gone in &s.left_out {
        let _ = writeln!(
            out,
            "| {} | left out: {} |",
            gone.client.name(),
            gone.reason
        );
    }
    out.push_str(&crate::report::planned::markdown(report));
    for run in &report.scenarios {
        let _ = writeln!(
            out,
            "\n## {}, {}\n\n{}.",
            run.scenario,
            run.load.label(),
            run.description
        );
        for skipped in &run.skipped {
            let _ = writeln!(out, "\nCould not run: {skipped}");
        }
        if run.trials.is_empty() {
            continue;
        }
        let reelections: Vec<String> = run
            .trials
            .iter()
            .map(|t| {
                format!(
                    "trial {}: {} -> {} in {} ms",
                    t.trial,
                    t.old_leader,
                    t.new_leader.as_deref().unwrap_or("(no new leader)"),
                    ms_or_dash(t.reelection_ms)
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "\netcd {}. Cluster re-election [ms]: {} ({}).\n",
            run.trials[0].etcd_version,
            triple(run.summary.reelection_ms, 0, run.summary.reelection_never),
            reelections.join("; ")
        );
        let _ = writeln!(
            out,
            "| client | loop | 1st ok [ms] | gap [ms] | during / before | errors | back to {:.0} % [ms] | 1st ok / re-election |\n|---|---|---|---|---|---|---|---|",
            RECOVERED_SHARE * 100.0
        );
        for l in &run.summary.loops {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                l.client.name(),
                l.kind.name(),
                triple(l.first_success_ms, 0, l.first_success_never),
                triple(l.longest_gap_ms, 0, 0),
                triple(l.during_over_before, 2, 0),
                triple(l.errors, 0, 0),
                triple(l.back_to_95_ms, 0, l.back_to_95_never),
                triple(l.over_reelection, 1, 0),
            );
        }
        out.push_str(
            "\nLatency of successful calls over all trials [ms], p50 / p99 / max:\n\n\
             | client | loop | before | during | after | p99 before/during/after |\n|---|---|---|---|---|---|\n",
        );
        for l in &run.summary.loops {
            let lat = &l.latency;
            let cell = |p: &crate::metrics::LatencySummary| {
                format!(
                    "{} / {} / {}",
                    ms_or_dash(p.p50_ms),
                    ms_or_dash(p.p99_ms),
                    ms_or_dash(p.max_ms)
                )
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                l.client.name(),
                l.kind.name(),
                cell(&lat.before),
                cell(&lat.during),
                cell(&lat.after),
                p99s(&lat.before, &lat.during, &lat.after)
            );
        }
        let _ = write!(
            out,
            "\nWatch of a neutral writer's puts (an etcd-ha client, one per {} ms): fault -> \
             first event of a write started after it; lost: acknowledged writes never \
             delivered; ended: trials whose watch stopped for good.\n\n\
             | client | 1st event [ms] | lost | repeated or reordered | ended |\n|---|---|---|---|---|\n",
            WRITE_PACE.as_millis()
        );
        for w in run.summary.watches.iter().filter(|w| w.trials > 0) {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {}/{} |",
                w.client.name(),
                triple(w.first_event_ms, 0, w.first_event_never),
                triple(w.lost, 0, 0),
                triple(w.repeated_or_reordered, 0, 0),
                w.ended,
                w.trials
            );
        }
        let _ = write!(
            out,
            "\nKept lease (TTL {} s): fault -> answer of the first renewal sent after it; lost: \
             trials whose lease no longer existed at the end.\n\n\
             | client | 1st renewal [ms] | lost |\n|---|---|---|\n",
            LEASE_TTL.as_secs()
        );
        for l in run.summary.leases.iter().filter(|l| l.trials > 0) {
            let _ = writeln!(
                out,
                "| {} | {} | {}/{} |",
                l.client.name(),
                triple(l.first_renewal_ms, 0, l.first_renewal_never),
                l.lost,
                l.trials
            );
        }
        let _ = write!(
            out,
            "\nLeadership (TTL {} s; etcd-ha's `Leadership`, etcd-client's election API on a kept \
             lease; campaigns again after a loss): kept: trials in which it never lost it, of \
             those in which it held it at the fault (+N late: its first campaign had not won by \
             then); lost after: fault -> the loss; new holder: fault -> leading \
             again.\n\n\
             | client | kept | lost after [ms] | new holder [ms] |\n|---|---|---|---|\n",
            LEASE_TTL.as_secs()
        );
        for l in run.summary.leaderships.iter().filter(|l| l.trials > 0) {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                l.client.name(),
                crate::report::table::kept(l),
                triple(l.lost_after_ms, 0, 0),
                triple(l.new_holder_ms, 0, l.new_holder_never),
            );
        }
        if let Some((_, _, name)) = svgs
            .iter()
            .find(|(scenario, load, _)| *scenario == run.scenario && *load == run.load)
        {
            let _ = writeln!(out, "\n![{} timeline, trial 1]({name})", run.scenario);
        }
    }
    out
}
