//! Presents the results: one table per scenario on stdout, and every number in
//! `target/failover-report.json`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::clients::tuned_description;
use crate::json::Json;
use crate::metrics::LoopMetrics;
use crate::run::{ClientResult, ScenarioResult, WARMUP};
use crate::scenario::FAULT_WINDOW;
use crate::verify::Correctness;
use crate::workload::{CALL_DEADLINE, PACE};

/// Milliseconds, rounded.
fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// The table of one scenario, with a line on each client's read-back and its error kinds.
pub fn table(result: &ScenarioResult) -> String {
    let mut out = String::new();
    let reelection = match (result.rule, result.reelection) {
        (None, _) => "n/a".to_string(),
        (Some(_), None) => "none in window".to_string(),
        (Some(_), Some(d)) => ms(d).to_string(),
    };
    out.push_str(&format!(
        "\n== {} ({}): fault on {}, leader before: {}, etcd {}\n",
        result.scenario.name(),
        result.scenario.describe(),
        result.target,
        result.old_leader,
        result.etcd_version
    ));
    if let Some(rule) = result.rule {
        out.push_str(&format!(
            "   cluster re-election: {reelection} ms ({})\n",
            rule.describe()
        ));
    }
    if let Some(note) = result.note {
        out.push_str(&format!("   note: {note}\n"));
    }
    if let Some(error) = &result.fault_error {
        out.push_str(&format!("   FAULT SCRIPT FAILED: {error}\n"));
    }
    out.push_str(&format!(
        "{:<18} {:<17} {:>8} {:>12} {:>11} {:>9} {:>7} {:>11}\n",
        "client", "loop", "ok/s bef", "1st ok [ms]", "gap [ms]", "dur/bef", "errors", "re-el [ms]"
    ));
    for client in &result.clients {
        for l in &client.loops {
            let m = &l.metrics;
            out.push_str(&format!(
                "{:<18} {:<17} {:>8.1} {:>12} {:>11} {:>9} {:>7} {:>11}\n",
                client.client.name(),
                l.kind.name(),
                m.ok_per_s_before,
                m.first_success_after_fault
                    .map_or_else(|| "never".to_string(), |d| ms(d).to_string()),
                ms(m.longest_gap),
                m.during_over_before_pct
                    .map_or_else(|| "n/a".to_string(), |p| format!("{p:.0}%")),
                m.errors,
                reelection,
            ));
        }
    }
    for client in &result.clients {
        out.push_str(&format!(
            "   {:<18} read-back: {}\n",
            client.client.name(),
            correctness_line(&client.correctness)
        ));
        for l in &client.loops {
            if !l.metrics.error_kinds.is_empty() {
                let kinds: Vec<String> = l
                    .metrics
                    .error_kinds
                    .iter()
                    .map(|(kind, n)| format!("{kind} x{n}"))
                    .collect();
                out.push_str(&format!(
                    "   {:<18} {} errors: {}\n",
                    client.client.name(),
                    l.kind.name(),
                    kinds.join(", ")
                ));
            }
        }
    }
    out
}

/// The read-back in one line.
fn correctness_line(c: &Correctness) -> String {
    if let Some(error) = &c.read_error {
        return format!("FAILED to read back: {error}");
    }
    format!(
        "{} ({} ok puts, {} missing, {} wrong value; {} errored puts of which {} applied anyway; \
         {} applied twice, {} duplicate values, {} unexpected keys)",
        if c.is_clean() { "OK" } else { "VIOLATION" },
        c.ok_puts,
        c.ok_missing,
        c.wrong_value,
        c.errored_puts,
        c.errored_but_applied,
        c.applied_twice,
        c.duplicate_values,
        c.unexpected_keys
    )
}

/// The legend printed once before the tables.
pub fn legend() -> String {
    format!(
        "failover bench: each scenario runs on a fresh 3-member etcd cluster; three clients run \
         side by side\n\
         (etcd-ha: Options::default(); etcd-client: defaults; etcd-client-tuned: {}).\n\
         Per client: sequential put / linearizable get / serializable get loops, one call per \
         {} ms at most, each call bounded by a {} s caller deadline (counted as an error).\n\
         ok/s bef: successes/s in the {} s warm-up. 1st ok: fault -> end of the first successful \
         call started after it. gap: longest time in the {} s fault window without a success.\n\
         dur/bef: throughput in the fault window / before. errors: errors that reached the \
         caller over the whole run (a client that fails fast can make one per {} ms). re-el: the \
         cluster's own re-election time.\n",
        tuned_description(),
        PACE.as_millis(),
        CALL_DEADLINE.as_secs(),
        WARMUP.as_secs(),
        FAULT_WINDOW.as_secs(),
        PACE.as_millis(),
    )
}

/// Where the JSON report goes: `$CARGO_TARGET_DIR` or the crate's `target/`.
pub fn json_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    target.join("failover-report.json")
}

/// Every number of every scenario as one JSON document.
pub fn json(results: &[ScenarioResult]) -> Json {
    Json::obj([
        (
            "settings",
            Json::obj([
                ("members", Json::Int(3)),
                ("warmup_ms", Json::Int(ms(WARMUP) as u64)),
                ("fault_window_ms", Json::Int(ms(FAULT_WINDOW) as u64)),
                ("call_deadline_ms", Json::Int(ms(CALL_DEADLINE) as u64)),
                ("pace_ms", Json::Int(ms(PACE) as u64)),
                ("etcd_ha_options", Json::str("Options::default()")),
                ("etcd_client_options", Json::str("defaults (None)")),
                ("etcd_client_tuned_options", Json::str(tuned_description())),
            ]),
        ),
        (
            "scenarios",
            Json::Arr(results.iter().map(scenario_json).collect()),
        ),
    ])
}

fn scenario_json(r: &ScenarioResult) -> Json {
    Json::obj([
        ("scenario", Json::str(r.scenario.name())),
        ("description", Json::str(r.scenario.describe())),
        ("etcd_version", Json::str(&r.etcd_version)),
        ("faulted_member", Json::str(&r.target)),
        ("leader_before", Json::str(&r.old_leader)),
        ("fault_at_ms", Json::Int(ms(r.phases.fault_at) as u64)),
        ("window_ms", Json::Int(ms(r.phases.window()) as u64)),
        (
            "reelection_rule",
            Json::opt(r.rule, |rule| Json::str(rule.describe())),
        ),
        (
            "reelection_ms",
            Json::opt(r.reelection, |d| Json::Int(ms(d) as u64)),
        ),
        ("note", Json::opt(r.note, Json::str)),
        ("fault_error", Json::opt(r.fault_error.clone(), Json::Str)),
        (
            "clients",
            Json::Arr(r.clients.iter().map(client_json).collect()),
        ),
    ])
}

fn client_json(c: &ClientResult) -> Json {
    let loops = c
        .loops
        .iter()
        .map(|l| loop_json(l.kind.name(), &l.metrics))
        .collect();
    Json::obj([
        ("client", Json::str(c.client.name())),
        ("loops", Json::Arr(loops)),
        ("read_back", correctness_json(&c.correctness)),
    ])
}

fn loop_json(name: &str, m: &LoopMetrics) -> Json {
    let kinds = m
        .error_kinds
        .iter()
        .map(|(kind, n)| (kind.clone(), Json::Int(*n)));
    Json::obj([
        ("loop", Json::str(name)),
        ("calls", Json::Int(m.calls)),
        ("ok_per_s_before", Json::Num(m.ok_per_s_before)),
        ("ok_per_s_during", Json::Num(m.ok_per_s_during)),
        (
            "first_success_after_fault_ms",
            Json::opt(m.first_success_after_fault, |d| Json::Int(ms(d) as u64)),
        ),
        ("longest_gap_ms", Json::Int(ms(m.longest_gap) as u64)),
        (
            "during_over_before_pct",
            Json::opt(m.during_over_before_pct, Json::Num),
        ),
        ("errors", Json::Int(m.errors)),
        ("errors_before_fault", Json::Int(m.errors_before)),
        ("errors_in_window", Json::Int(m.errors_during)),
        ("errors_after_window", Json::Int(m.errors_after)),
        ("error_kinds", Json::obj(kinds)),
        (
            "slowest_success_in_window_ms",
            Json::opt(m.slowest_success_during, |d| Json::Int(ms(d) as u64)),
        ),
    ])
}

fn correctness_json(c: &Correctness) -> Json {
    Json::obj([
        ("clean", Json::Bool(c.is_clean())),
        ("ok_puts", Json::Int(c.ok_puts)),
        ("ok_puts_missing", Json::Int(c.ok_missing)),
        ("wrong_value", Json::Int(c.wrong_value)),
        ("errored_puts", Json::Int(c.errored_puts)),
        ("errored_but_applied", Json::Int(c.errored_but_applied)),
        ("applied_twice", Json::Int(c.applied_twice)),
        ("duplicate_values", Json::Int(c.duplicate_values)),
        ("unexpected_keys", Json::Int(c.unexpected_keys)),
        ("read_error", Json::opt(c.read_error.clone(), Json::Str)),
    ])
}
