//! The CSV: one row per scenario, load, trial, client and loop, with every per-trial metric,
//! for spreadsheets and scripts (the raw calls are in the JSON). The client's watch, lease and
//! leadership probes are per client, not per loop: every row of a client repeats them, so a
//! row stands alone in a filter.

use std::fmt::Write;

use crate::report::Report;

/// The header line.
const HEADER: &str = "scenario,load,trial,etcd_version,reelection_ms,client,loop,calls,\
ok_per_s_before,ok_per_s_during,during_over_before,first_success_ms,longest_gap_ms,\
warmup_gap_ms,back_to_95_ms,errors,errors_in_window,error_kinds,\
p50_before_ms,p99_before_ms,max_before_ms,p50_during_ms,p99_during_ms,max_during_ms,\
p50_after_ms,p99_after_ms,max_after_ms,read_back_clean,errored_but_applied,\
watch_first_event_ms,watch_delivered,watch_lost,watch_repeated,watch_out_of_order,\
watch_recreated,watch_ended,lease_first_renewal_ms,lease_renewals,lease_lost,lease_reopened,\
lease_ended,leadership_held_at_fault,leadership_kept,leadership_lost_after_ms,\
leadership_new_holder_ms,leadership_holds,leadership_last_problem";

/// An optional number, empty when absent.
fn opt(v: Option<f64>) -> String {
    v.map_or_else(String::new, |v| format!("{v:.3}"))
}

/// A text field, quoted when it holds a comma or a quote.
fn text(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Renders the CSV of `report`.
pub fn render(report: &Report) -> String {
    let mut out = String::from(HEADER);
    out.push('\n');
    for run in &report.scenarios {
        for t in &run.trials {
            for c in &t.clients {
                for l in &c.loops {
                    let m = &l.metrics;
                    let kinds: Vec<String> = m
                        .error_kinds
                        .iter()
                        .map(|(k, n)| format!("{k}={n}"))
                        .collect();
                    let lat = &m.latency;
                    let _ = write!(
                        out,
                        "{},{},{},{},{},{},{},{},{:.3},{:.3},{},{},{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                        text(run.scenario),
                        text(&run.load.label()),
                        t.trial,
                        text(&t.etcd_version),
                        opt(t.reelection_ms),
                        c.client.name(),
                        l.kind.name(),
                        m.calls,
                        m.ok_per_s_before,
                        m.ok_per_s_during,
                        opt(m.during_over_before),
                        opt(m.first_success_ms),
                        m.longest_gap_ms,
                        opt(m.warmup_gap_ms),
                        opt(m.back_to_95_ms),
                        m.errors,
                        m.errors_in_window,
                        text(&kinds.join(";")),
                        opt(lat.before.p50_ms),
                        opt(lat.before.p99_ms),
                        opt(lat.before.max_ms),
                        opt(lat.during.p50_ms),
                        opt(lat.during.p99_ms),
                        opt(lat.during.max_ms),
                        opt(lat.after.p50_ms),
                        opt(lat.after.p99_ms),
                        opt(lat.after.max_ms),
                        c.read_back.is_clean(),
                        c.read_back.errored_but_applied,
                    );
                    out.push_str(&probes(c));
                    out.push('\n');
                }
            }
        }
    }
    out
}

/// The watch and lease columns of client trial `c` (empty fields when it ran no probe).
fn probes(c: &crate::trial::ClientTrial) -> String {
    let watch = c.watch.as_ref().map_or_else(
        || ",,,,,,".to_string(),
        |w| {
            format!(
                "{},{},{},{},{},{},{}",
                opt(w.first_event_after_fault_ms),
                w.delivered,
                w.lost,
                w.repeated,
                w.out_of_order,
                w.recreated,
                text(w.ended.as_deref().unwrap_or("")),
            )
        },
    );
    let lease = c.lease.as_ref().map_or_else(
        || ",,,,".to_string(),
        |l| {
            format!(
                "{},{},{},{},{}",
                opt(l.first_renewal_after_fault_ms),
                l.renewals,
                l.lost.map_or_else(String::new, |lost| lost.to_string()),
                l.reopened,
                text(l.ended.as_deref().unwrap_or("")),
            )
        },
    );
    let leadership = c.leadership.as_ref().map_or_else(
        || ",,,,,".to_string(),
        |l| {
            format!(
                "{},{},{},{},{},{}",
                l.held_at_fault,
                l.kept,
                opt(l.lost_after_fault_ms),
                opt(l.new_holder_after_fault_ms),
                l.holds,
                text(l.last_problem.as_deref().unwrap_or("")),
            )
        },
    );
    format!(",{watch},{lease},{leadership}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_with_commas_are_quoted() {
        assert_eq!(text("a,b"), "\"a,b\"");
        assert_eq!(text("say \"hi\", x"), "\"say \"\"hi\"\", x\"");
        assert_eq!(text("plain"), "plain");
    }

    #[test]
    fn header_and_rows_have_the_same_width() {
        let fields = HEADER.split(',').count();
        assert_eq!(fields, 47);
        // The probe columns: 7 for the watch, 5 for the lease, 6 for the leadership, each row
        // with a leading comma.
        let mut client = crate::trial::ClientTrial {
            client: crate::clients::ClientKind::EtcdHa,
            error: None,
            loops: Vec::new(),
            read_back: Default::default(),
            watch: None,
            lease: None,
            leadership: None,
        };
        assert_eq!(probes(&client).split(',').count() - 1, 18);
        client.watch = Some(crate::watch::WatchMetrics {
            first_event_after_fault_ms: Some(1.5),
            delivered: 10,
            lost: 0,
            repeated: 0,
            out_of_order: 0,
            ended: Some("stream closed, then a comma".into()),
            recreated: 1,
        });
        let row = probes(&client);
        assert!(
            row.starts_with(",1.500,10,0,0,0,1,\"stream closed, then a comma\","),
            "{row}"
        );
    }
}
