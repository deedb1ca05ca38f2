//! Elections, mutexes and leaderships (research b.5): holds of one name never overlap in
//! belief; a fenced write applies only while its holder's key owns the name in the truth; a
//! hold is acquired only with a key the truth shows alive.
//!
//! Who owns a name at a revision, from the truth: for an election or a mutex, the live key with
//! the smallest create revision under `<name>/` (the queue of etcd's recipes); for a leadership,
//! the single key the hold names. Ownership is judged "just before" a fenced write's revision,
//! so the write cannot vouch for itself.

use std::collections::BTreeMap;

use super::keyspace::Keyspace;
use super::report::{Property, Report};
use super::show;
use crate::history::{EventKind, History, HoldKind, HoldLog, Outcome, Request, Response};

pub fn check(history: &History, truth: &Keyspace, report: &mut Report) {
    report.stats.holds += history.holds.len();
    overlaps(history, report);
    for (i, hold) in history.holds.iter().enumerate() {
        acquired(i, hold, truth, report);
    }
    fenced(history, truth, report);
}

fn hold_line(i: usize, h: &HoldLog, end: u64) -> String {
    format!(
        "hold {i}: {:?} {} by contender {} with {} (create {}), believed [{} .. {}] {:?}",
        h.kind,
        h.name,
        h.contender,
        h.key,
        h.create_revision,
        show::at(h.acquired_at),
        show::at(h.released_at.unwrap_or(end)),
        h.release
    )
}

/// Belief intervals `[acquired_at, released_at or end]` of one name are disjoint.
fn overlaps(history: &History, report: &mut Report) {
    let mut by_name: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, h) in history.holds.iter().enumerate() {
        by_name.entry(&h.name).or_default().push(i);
    }
    let end = |h: &HoldLog| h.released_at.unwrap_or(history.end);
    for holds in by_name.values_mut() {
        holds.sort_by_key(|&i| history.holds[i].acquired_at);
        for (n, &a) in holds.iter().enumerate() {
            for &b in &holds[n + 1..] {
                let (ha, hb) = (&history.holds[a], &history.holds[b]);
                if hb.acquired_at >= end(ha) {
                    break;
                }
                let detail = show::lines([
                    "two holders at once:".to_string(),
                    hold_line(a, ha, history.end),
                    hold_line(b, hb, history.end),
                ]);
                report.violation(Property::HoldOverlap, detail);
            }
        }
    }
}

/// The hold's key was created at its create revision and not seen deleted before acquiring.
fn acquired(i: usize, hold: &HoldLog, truth: &Keyspace, report: &mut Report) {
    let events = truth.key_events(&hold.key);
    let created = events.iter().position(|e| {
        e.kind == EventKind::Put
            && e.revision == hold.create_revision
            && e.create_revision == e.revision
    });
    let why = match created {
        None => Some("its key was never created at that revision".to_string()),
        Some(c) => events[c + 1..]
            .iter()
            .find(|e| e.kind == EventKind::Delete)
            .filter(|d| d.seen_at < hold.acquired_at)
            .map(|d| format!("its key was deleted before it acquired: {}", show::event(d))),
    };
    if let Some(why) = why {
        report.violation(
            Property::HoldAcquire,
            show::lines([hold_line(i, hold, u64::MAX), why]),
        );
    }
}

/// Whether `hold`'s key exists at `revision` with the create revision it won with.
fn fence_holds(hold: &HoldLog, truth: &Keyspace, revision: i64) -> bool {
    truth
        .live_at(&hold.key, revision)
        .is_some_and(|e| e.create_revision == hold.create_revision)
}

/// The key that owns `hold`'s name at `revision`, with its create revision.
fn owner(hold: &HoldLog, truth: &Keyspace, revision: i64) -> Option<(String, i64)> {
    if hold.kind == HoldKind::Leadership {
        let e = truth.live_at(&hold.key, revision)?;
        return Some((hold.key.clone(), e.create_revision));
    }
    let queue = match hold.name.ends_with('/') {
        true => hold.name.clone(),
        false => format!("{}/", hold.name),
    };
    let live = truth.live_under(&queue, revision);
    let (key, e) = live.iter().min_by_key(|(_, e)| e.create_revision)?;
    Some((key.to_string(), e.create_revision))
}

/// An applied fenced write was made by the owner; a refused one had its fence broken.
fn fenced(history: &History, truth: &Keyspace, report: &mut Report) {
    for op in &history.ops {
        let Request::FencedPut { value, hold: h, .. } = &op.request else {
            continue;
        };
        let Some(hold) = history.holds.get(*h) else {
            continue;
        }; // Well-formedness says it.
        report.stats.fenced_puts += 1;
        let applied = truth.with_value(value).first().copied();
        if let Some(e) = applied {
            let before = e.revision - 1;
            let owner = owner(hold, truth, before);
            if owner.as_ref() != Some(&(hold.key.clone(), hold.create_revision)) {
                let detail = show::lines([
                    format!(
                        "applied at {} while the name's owner was {owner:?}:",
                        e.revision
                    ),
                    show::op(op),
                    hold_line(*h, hold, history.end),
                    show::event(e),
                ]);
                report.violation(Property::FencedWrite, detail);
            }
        }
        if let Outcome::Ok(Response::Fenced {
            succeeded: false,
            revision,
        }) = &op.outcome
            && fence_holds(hold, truth, *revision)
        {
            let detail = show::lines([
                format!(
                    "refused, yet the holder's key still had its create revision at {revision}:"
                ),
                show::op(op),
                hold_line(*h, hold, history.end),
            ]);
            report.violation(Property::FencedWrite, detail);
        }
    }
}
