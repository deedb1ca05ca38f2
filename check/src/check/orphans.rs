//! Campaigns and locks given up in flight leave no key behind (issue 18): while their session
//! lives on, an orphan key would block every other candidate for the session's whole life.
//! The client withdraws the key in the background, so by the time the idle session is used
//! again (0.5-1.5 s later) the truth must show it gone. A fault in that window can hold the
//! withdrawal up legitimately (no member to delete it on): such windows are not judged.

use super::keyspace::Keyspace;
use super::report::{Property, Report};
use super::show;
use crate::history::{EventKind, History};

pub fn check(history: &History, truth: &Keyspace, report: &mut Report) {
    for a in &history.abandoned {
        let events = truth.key_events(&a.key);
        if !events.is_empty() {
            report.stats.abandoned_put += 1;
        }
        let faulted = history
            .faults
            .iter()
            .any(|f| f.start <= a.checked_at && f.end >= a.at);
        if faulted {
            continue;
        }
        report.stats.abandoned_judged += 1;
        let then = events.iter().rev().find(|e| e.seen_at <= a.checked_at);
        if let Some(put) = then.filter(|e| e.kind == EventKind::Put) {
            let detail = show::lines([
                format!(
                    "contender {} gave up at {}; its key was still there at {}:",
                    a.contender,
                    show::at(a.at),
                    show::at(a.checked_at)
                ),
                show::event(put),
            ]);
            report.violation(Property::OrphanKey, detail);
        }
    }
}
