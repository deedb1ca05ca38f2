//! Whether the history is what the harness promises (unique ids and values, sequential
//! processes, responses of the request's kind) and the truth is self-consistent (revision
//! order, create revision and version of each key): a harness or collector bug would otherwise
//! surface as a confusing violation elsewhere.

use std::collections::{HashMap, HashSet};

use super::report::{Property, Report};
use super::show;
use crate::history::{EventKind, History, Outcome, Request, Response, TruthEvent};

pub fn check(history: &History, report: &mut Report) {
    ops(history, report);
    truth(history, report);
}

fn ops(history: &History, report: &mut Report) {
    let mut ids = HashSet::new();
    let mut values: HashMap<&str, &crate::history::Op> = HashMap::new();
    let mut last_of_process: HashMap<u32, &crate::history::Op> = HashMap::new();
    for op in &history.ops {
        if !ids.insert(op.id) {
            report.violation(
                Property::HistoryWellFormed,
                format!("id used twice: {}", show::op(op)),
            );
        }
        if op.ret < op.invoke {
            report.violation(
                Property::HistoryWellFormed,
                format!("returns before invoked: {}", show::op(op)),
            );
        }
        if let Some(v) = op.request.written_value()
            && let Some(other) = values.insert(v, op)
        {
            let detail = show::lines([
                "two operations write one value:".to_string(),
                show::op(other),
                show::op(op),
            ]);
            report.violation(Property::HistoryWellFormed, detail);
        }
        // Ops are in invoke order, so the previous op of a process must have returned.
        if let Some(prev) = last_of_process.insert(op.process, op)
            && prev.ret > op.invoke
        {
            let detail = show::lines([
                "one process runs two operations at once:".to_string(),
                show::op(prev),
                show::op(op),
            ]);
            report.violation(Property::HistoryWellFormed, detail);
        }
        if let Outcome::Ok(resp) = &op.outcome
            && !kind_matches(&op.request, resp)
        {
            report.violation(
                Property::HistoryWellFormed,
                format!("response of another kind: {}", show::op(op)),
            );
        }
        if let Request::FencedPut { hold, .. } = op.request
            && hold >= history.holds.len()
        {
            report.violation(
                Property::HistoryWellFormed,
                format!("no such hold: {}", show::op(op)),
            );
        }
    }
}

fn kind_matches(request: &Request, response: &Response) -> bool {
    matches!(
        (request, response),
        (Request::Put { .. }, Response::Put { .. })
            | (Request::Delete { .. }, Response::Delete { .. })
            | (Request::Get { .. }, Response::Get { .. })
            | (Request::CacheGet { .. }, Response::Get { .. })
            | (Request::Cas { .. }, Response::Cas { .. })
            | (Request::FencedPut { .. }, Response::Fenced { .. })
    )
}

fn truth(history: &History, report: &mut Report) {
    let mut prev_revision = history.start_revision;
    let mut last: HashMap<&str, &TruthEvent> = HashMap::new();
    let mut at_revision: HashSet<(&str, i64)> = HashSet::new();
    for e in &history.truth {
        if e.revision < prev_revision || e.revision <= history.start_revision {
            let detail = format!(
                "revision goes backwards (after {prev_revision}, start {}): {}",
                history.start_revision,
                show::event(e)
            );
            report.violation(Property::TruthWellFormed, detail);
        }
        prev_revision = prev_revision.max(e.revision);
        if !at_revision.insert((&e.key, e.revision)) {
            report.violation(
                Property::TruthWellFormed,
                format!("key changed twice in one revision: {}", show::event(e)),
            );
        }
        let before = last.insert(&e.key, e);
        if let Err(why) = follows(before, e) {
            let mut lines = vec![why];
            lines.extend(before.map(show::event));
            lines.push(show::event(e));
            report.violation(Property::TruthWellFormed, show::lines(lines));
        }
    }
}

/// Whether `e` is a consistent next event of its key after `before` (`None`: its first one in
/// the truth, which must be a creation: the prefix starts empty).
fn follows(before: Option<&TruthEvent>, e: &TruthEvent) -> Result<(), String> {
    let live = before.filter(|b| b.kind == EventKind::Put);
    match (e.kind, live) {
        (EventKind::Put, None) if e.create_revision != e.revision || e.version != 1 => Err(
            "a creation must have create revision = revision and version 1 (keys start absent)"
                .into(),
        ),
        (EventKind::Put, Some(b))
            if e.create_revision != b.create_revision || e.version != b.version + 1 =>
        {
            Err("an update must keep the create revision and add 1 to the version".into())
        }
        (EventKind::Put, _) if e.value.is_none() => Err("a put without a value".into()),
        (EventKind::Delete, None) => Err("a delete of an absent key".into()),
        (EventKind::Delete, Some(_))
            if e.value.is_some() || e.version != 0 || e.create_revision != 0 =>
        {
            Err("a delete must carry no value, version 0, create revision 0".into())
        }
        _ => Ok(()),
    }
}
