//! How each watch began and ended, beyond what its events say (`watch.rs`):
//!
//! * **from now**: a watch asked for "from now" delivers nothing written before the call: no
//!   event at or below a revision any operation had returned before `watch()` was invoked.
//! * **compacted only when it was**: a `Compacted` batch needs a compaction of the cluster at
//!   or above its revision, and the revision the watch had reached (its last event, progress or
//!   reload, else its start) must be below it: etcd answers compacted only for a start below
//!   the compaction, so a watch that resumed where it stood was compacted truly.
//! * **no other ending**: a watch that got its stream ends only when cancelled or truly
//!   compacted; a managed watch rides out every fault, so any other error is a broken promise.
//! * **live to the end**: after the workload stops, the run writes an end marker under every
//!   watched prefix and waits for the open watches; each must have delivered every truth event
//!   of its prefix from where it stood to the marker. A watch that silently stopped (the
//!   14-minute election of the incident behind etcd-ha) fails here even if it delivered
//!   nothing wrong.

use std::collections::HashSet;

use super::keyspace::Keyspace;
use super::report::{Property, Report};
use super::show;
use crate::history::{Batch, History, Outcome, WatchEnd, WatchLog};

pub fn check(history: &History, truth: &Keyspace, report: &mut Report) {
    let compactions = compactions(history);
    let acknowledged = acknowledged(history);
    for w in &history.watches {
        if w.start_revision == 0 {
            from_now(w, &acknowledged, report);
        }
        compacted_truly(w, &compactions, report);
        ended(w, report);
        if let Some(marker) = &history.end_marker {
            live(w, marker, truth, report);
        }
    }
}

fn header(w: &WatchLog) -> String {
    format!(
        "watch {} of client {} on {} (start {}, created {:?} at {}):",
        w.id,
        w.client,
        w.prefix,
        w.start_revision,
        w.created_revision,
        show::at(w.created_at)
    )
}

/// The revisions the cluster may have been compacted at (the faults' details say "at
/// <revision>: <error>"; one that failed ambiguously may still have been applied).
fn compactions(history: &History) -> Vec<i64> {
    history
        .faults
        .iter()
        .filter(|f| f.kind == "Compact")
        .filter_map(|f| {
            f.detail
                .strip_prefix("at ")?
                .split(':')
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// Every acknowledged operation's (return time, revision), by return time, with the highest
/// revision returned so far.
fn acknowledged(history: &History) -> Vec<(u64, i64)> {
    let mut done: Vec<(u64, i64)> = history
        .ops
        .iter()
        .filter_map(|op| match &op.outcome {
            Outcome::Ok(r) => Some((op.ret, r.revision())),
            _ => None,
        })
        .collect();
    done.sort();
    let mut highest = 0;
    for d in &mut done {
        highest = highest.max(d.1);
        d.1 = highest;
    }
    done
}

fn from_now(w: &WatchLog, acknowledged: &[(u64, i64)], report: &mut Report) {
    report.stats.from_now_watches += 1;
    let n = acknowledged.partition_point(|(ret, _)| *ret < w.created_at);
    let Some(&(_, before)) = n.checked_sub(1).map(|i| &acknowledged[i]) else {
        return;
    };
    for (i, d) in w.deliveries.iter().enumerate() {
        let Batch::Events { events, .. } = &d.batch else {
            continue;
        };
        if let Some(e) = events.iter().find(|e| e.revision <= before) {
            let detail = show::lines([
                header(w),
                format!("revision {before} had been returned before watch() was called, yet:"),
                show::watch_event(e),
                show::delivery(i, d),
            ]);
            report.violation(Property::WatchFromNow, detail);
            return;
        }
    }
}

fn compacted_truly(w: &WatchLog, compactions: &[i64], report: &mut Report) {
    let mut reached = match (w.start_revision, w.created_revision) {
        (s, _) if s > 0 => s - 1,
        (_, Some(created)) => created,
        _ => 0,
    };
    for (i, d) in w.deliveries.iter().enumerate() {
        match &d.batch {
            Batch::Events { events, .. } => {
                reached = events.iter().map(|e| e.revision).fold(reached, i64::max);
            }
            Batch::Progress { revision } | Batch::Reloaded { revision, .. } => {
                reached = reached.max(*revision);
            }
            Batch::Compacted { compact_revision } => {
                report.stats.compacted_watches += 1;
                let compacted = compactions.iter().any(|c| c >= compact_revision);
                if !compacted || reached + 1 >= *compact_revision {
                    let detail = show::lines([
                        header(w),
                        format!(
                            "compacted at {compact_revision} after reaching {reached}; the \
                             cluster's compactions: {compactions:?}"
                        ),
                        show::delivery(i, d),
                    ]);
                    report.violation(Property::WatchFalseCompaction, detail);
                }
                return;
            }
        }
    }
}

fn ended(w: &WatchLog, report: &mut Report) {
    if !w.established {
        return;
    }
    let compacted = w
        .deliveries
        .last()
        .is_some_and(|d| matches!(d.batch, Batch::Compacted { .. }));
    if let Some(WatchEnd::Error { at, error }) = &w.ended
        && !compacted
    {
        let detail = show::lines([
            header(w),
            format!(
                "ended at {} with \"{error}\" after {} deliveries",
                show::at(*at),
                w.deliveries.len()
            ),
        ]);
        report.violation(Property::WatchEnded, detail);
    }
}

fn live(w: &WatchLog, marker: &str, truth: &Keyspace, report: &mut Report) {
    if w.ended.is_some() || !marker.starts_with(&w.prefix) {
        return;
    }
    // The marker as the truth has it: events after it (holders letting go as the workload
    // stops) are not waited for, and a watch made after it was written owes nothing.
    let Some(end) = truth.key_events(marker).into_iter().next() else {
        report.violation(
            Property::WatchLive,
            format!("the end marker {marker} is not in the truth"),
        );
        return;
    };
    if w.created_at >= end.seen_at {
        return;
    }
    // A watch from now whose call overlapped the marker's write and whose "now" came after
    // it starts past the marker: both orders are linearizable, and whether its start was
    // fair is the from-now check's to judge (CI, etcd 3.6.16: a watch asked for 48 ms
    // before the marker was seen, whose quorum read already returned the marker's revision).
    if w.start_revision == 0 && w.created_revision.is_some_and(|now| end.revision <= now) {
        return;
    }
    report.stats.live_watches += 1;
    // The last segment: after the last reload, else from the start.
    let mut from = match (w.start_revision, w.created_revision) {
        (s, _) if s > 0 => Some(s),
        (_, Some(created)) => Some(created + 1),
        _ => None,
    };
    let mut delivered = HashSet::new();
    for d in &w.deliveries {
        match &d.batch {
            Batch::Events { events, .. } => {
                for e in events {
                    from.get_or_insert(e.revision);
                    delivered.insert((e.revision, e.key.as_str()));
                }
            }
            Batch::Reloaded { revision, .. } => {
                from = Some(revision + 1);
                delivered.clear();
            }
            Batch::Progress { .. } | Batch::Compacted { .. } => {}
        }
    }
    // Reloaded past the marker (a cache watch that fell behind as the run ended): the reload
    // brought it to the end; whether its state was the truth's there is the compaction
    // check's to judge.
    if from.is_some_and(|f| f > end.revision) {
        return;
    }
    let under = truth.under(&w.prefix);
    let missing: Vec<_> = under
        .iter()
        .filter(|t| t.revision <= end.revision)
        .filter(|t| from.is_none_or(|f| t.revision >= f) || t.key == marker)
        .filter(|t| !delivered.contains(&(t.revision, t.key.as_str())))
        .collect();
    if let Some(first) = missing.first() {
        let last = w.deliveries.last().map(|d| show::at(d.at));
        let detail = show::lines([
            header(w),
            format!(
                "open at the end, {} truth event(s) from {from:?} to the end marker never \
                 delivered (last delivery at {}), first:",
                missing.len(),
                last.unwrap_or_else(|| "never".into())
            ),
            show::event(first),
        ]);
        report.violation(Property::WatchLive, detail);
    }
}
