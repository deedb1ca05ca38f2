//! Writes against the ground truth (research b.3): every acknowledged write applied exactly
//! once at the revision it reported, nothing reported as not applied applied, no value applied
//! twice (a re-sent write: Jepsen's jetcd bug), revisions that respect real time, and deletes
//! whose `deleted` count matches the truth, and no delete applied that no delete explains.
//!
//! Cheaper than linearizability and it names the guilty operation, so it runs first.

use std::collections::HashSet;

use super::keyspace::Keyspace;
use super::report::{Property, Report};
use super::show;
use crate::history::{EventKind, History, Op, Outcome, Request, Response, TruthEvent};

pub fn check(history: &History, truth: &Keyspace, report: &mut Report) {
    report.stats.truth_events = history.truth.len();
    let mut applied = Vec::new();
    for op in &history.ops {
        report.count_op(&kind(op));
        if let Some(value) = op.request.written_value()
            && let Some(revision) = unique_write(op, value, truth, report)
        {
            applied.push((op, revision));
        }
        if let (Request::Delete { key }, Outcome::Ok(Response::Delete { revision, deleted })) =
            (&op.request, &op.outcome)
        {
            delete(op, key, *revision, *deleted, truth, report);
        }
    }
    real_time(&applied, report);
    deletes_once(history, report);
    deletes_explained(history, report);
}

/// "put ok", "get unknown", ...: the stats' key for an operation.
fn kind(op: &Op) -> String {
    let request = match &op.request {
        Request::Put { .. } => "put",
        Request::Delete { .. } => "delete",
        Request::Get {
            serializable: false,
            ..
        } => "get",
        Request::Get {
            serializable: true, ..
        } => "serializable get",
        Request::Cas { .. } => "cas",
        Request::FencedPut { .. } => "fenced put",
        Request::CacheGet { at_least: None, .. } => "cache get",
        Request::CacheGet {
            at_least: Some(_), ..
        } => "cache get at least",
    };
    let outcome = match &op.outcome {
        Outcome::Ok(_) => "ok",
        Outcome::Fail { .. } => "fail",
        Outcome::Unknown { .. } => "unknown",
    };
    format!("{request} {outcome}")
}

/// Judges one write of a unique value; returns the revision it applied at, if it did.
fn unique_write(op: &Op, value: &str, truth: &Keyspace, report: &mut Report) -> Option<i64> {
    let found = truth.with_value(value);
    if found.len() > 1 {
        let mut lines = vec![
            format!("value {value:?} applied {} times:", found.len()),
            show::op(op),
        ];
        lines.extend(found.iter().map(|e| show::event(e)));
        report.violation(Property::DuplicateWrite, show::lines(lines));
    }
    let first = found.first().copied();
    let reported_applied = match &op.outcome {
        Outcome::Ok(Response::Put { .. }) => Some(true),
        Outcome::Ok(Response::Cas { succeeded, .. } | Response::Fenced { succeeded, .. }) => {
            Some(*succeeded)
        }
        Outcome::Ok(_) => return None, // Reported by the well-formedness check.
        Outcome::Fail { .. } => Some(false),
        Outcome::Unknown { .. } => {
            report.stats.unknown_writes += 1;
            report.stats.unknown_applied += usize::from(first.is_some());
            None
        }
    };
    let Some(e) = first else {
        if reported_applied == Some(true) {
            report.violation(
                Property::LostWrite,
                format!("acknowledged, absent from the truth:\n{}", show::op(op)),
            );
        }
        return None;
    };
    if reported_applied == Some(false) {
        let detail = show::lines([
            "reported not applied, yet applied:".to_string(),
            show::op(op),
            show::event(e),
        ]);
        report.violation(Property::FailedWriteApplied, detail);
        return Some(e.revision);
    }
    let lease = match &op.request {
        Request::Put { lease, .. } => lease.unwrap_or(0),
        _ => 0,
    };
    let revision_ok = match &op.outcome {
        Outcome::Ok(resp) => resp.revision() == e.revision,
        _ => true,
    };
    if !revision_ok || e.key != op.request.key() || e.kind != EventKind::Put || e.lease != lease {
        let detail = show::lines([
            "applied, not as reported (revision, key or lease):".to_string(),
            show::op(op),
            show::event(e),
        ]);
        report.violation(Property::WriteRevision, detail);
    }
    if e.seen_at < op.invoke {
        let detail = show::lines([
            "the truth saw it before it was invoked:".to_string(),
            show::op(op),
            show::event(e),
        ]);
        report.violation(Property::TruthWellFormed, detail);
    }
    Some(e.revision)
}

/// If write A returned before write B was invoked, B's revision is above A's. Only
/// acknowledged writes have a return time that bounds them; an applied `Unknown` write can
/// still be the later one.
fn real_time(applied: &[(&Op, i64)], report: &mut Report) {
    let mut done: Vec<(&Op, i64)> = applied
        .iter()
        .filter(|(op, _)| matches!(op.outcome, Outcome::Ok(_)))
        .copied()
        .collect();
    done.sort_by_key(|(op, _)| op.ret);
    // highest[i]: the write with the highest revision among done[..=i].
    let mut highest: Vec<(&Op, i64)> = Vec::with_capacity(done.len());
    for &(op, rev) in &done {
        let best = match highest.last() {
            Some(&(_, r)) if r >= rev => *highest.last().unwrap(),
            _ => (op, rev),
        };
        highest.push(best);
    }
    for &(b, rev_b) in applied {
        let n = done.partition_point(|(a, _)| a.ret < b.invoke);
        if let Some(&(a, rev_a)) = n.checked_sub(1).map(|i| &highest[i])
            && rev_a >= rev_b
        {
            let detail = show::lines([
                format!("B started after A returned, yet rev(B) {rev_b} <= rev(A) {rev_a}:"),
                format!("A: {}", show::op(a)),
                format!("B: {}", show::op(b)),
            ]);
            report.violation(Property::WriteRealTime, detail);
        }
    }
}

/// `deleted = 1`: a truth delete of the key at the revision. `deleted = 0`: the key absent at
/// the revision (the revision may still hold someone else's delete of it: two racing deletes).
fn delete(op: &Op, key: &str, revision: i64, deleted: i64, truth: &Keyspace, report: &mut Report) {
    let last = truth.last_at(key, revision);
    let ok = match deleted {
        0 => last.is_none_or(|e| e.kind == EventKind::Delete),
        1 => last.is_some_and(|e| e.kind == EventKind::Delete && e.revision == revision),
        _ => false,
    };
    if !ok {
        let mut lines = vec![show::op(op)];
        lines.push(last.map_or(format!("truth: {key} absent at {revision}"), show::event));
        report.violation(Property::DeleteRevision, show::lines(lines));
    }
}

/// One truth delete is one acknowledged delete at most.
fn deletes_once(history: &History, report: &mut Report) {
    let mut seen = HashSet::new();
    for op in &history.ops {
        if let (
            Request::Delete { key },
            Outcome::Ok(Response::Delete {
                revision,
                deleted: 1,
            }),
        ) = (&op.request, &op.outcome)
            && !seen.insert((key, *revision))
        {
            report.violation(
                Property::DeleteRevision,
                format!("a second delete claims the same event:\n{}", show::op(op)),
            );
        }
    }
}

/// Every truth delete of a KV key is one delete of the workload: an acknowledged one at that
/// revision, or one with an unknown outcome invoked before the delete was seen, each used
/// once. A delete applied twice (resent after an ambiguous failure) leaves a second event, or
/// an event before the one its answer reports, that nothing explains. Deletes carry no value,
/// so without this a resent delete would hide behind the linearizability search's patching.
///
/// The unknown-outcome deletes may take effect at any time after their invoke, so matching the
/// events in time order to the earliest free one invoked before each is as good as any other
/// matching.
fn deletes_explained(history: &History, report: &mut Report) {
    let kv = format!("{}kv/", history.prefix);
    let mut acknowledged = HashSet::new();
    let mut unknown: Vec<&Op> = Vec::new();
    for op in &history.ops {
        match (&op.request, &op.outcome) {
            (Request::Delete { key }, Outcome::Ok(Response::Delete { revision, .. })) => {
                acknowledged.insert((key.as_str(), *revision));
            }
            (Request::Delete { .. }, Outcome::Unknown { .. }) => unknown.push(op),
            _ => {}
        }
    }
    unknown.sort_by_key(|op| op.invoke);
    let mut used = vec![false; unknown.len()];
    let mut events: Vec<&TruthEvent> = history
        .truth
        .iter()
        .filter(|e| e.kind == EventKind::Delete && e.key.starts_with(&kv))
        .collect();
    events.sort_by_key(|e| e.seen_at);
    for e in events {
        if acknowledged.contains(&(e.key.as_str(), e.revision)) {
            report.stats.deletes_explained += 1;
            continue;
        }
        let free = unknown
            .iter()
            .enumerate()
            .position(|(i, op)| !used[i] && op.request.key() == e.key && op.invoke <= e.seen_at);
        match free {
            Some(i) => {
                used[i] = true;
                report.stats.deletes_explained += 1;
            }
            None => report.violation(
                Property::DeleteUnexplained,
                show::lines([
                    "a delete no delete of the workload explains (applied twice?):".into(),
                    show::event(e),
                ]),
            ),
        }
    }
}
