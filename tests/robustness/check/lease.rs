//! Lease safety (research b.5): when the server dropped a lease's key, its holder no longer
//! believed the lease alive, and `lost()` had fired.
//!
//! A key of the lease *vanished* at `T` when the truth deletes it, right after a put of it under
//! this lease, with no workload delete that could explain it and no revoke started before
//! (`seen_at` of the delete is `T`: the server dropped the lease at or before `T`).
//!
//! # Why no belief may outlive `T`, and why `lost()` gets 250 ms
//!
//! The keeper's deadline counts from the *send* time of the last answered renewal, and the
//! server renews when it receives it, later; a leader change only extends leases. So the
//! believed deadline is never after the server's expiry, which is before `T`: a sample taken
//! before `T` that believes in a time after `T` is a client bug, with no slack needed.
//! `lost()` is that same deadline firing, but through a timer, a task wake-up and the
//! harness's recording task on two shared cores: 250 ms covers those scheduling delays (a CI
//! box stalls a task for 100 ms and more under load), while a keeper that missed the deadline
//! altogether (or counted from the receive time, which is late by a whole round trip plus the
//! TTL granted) is still caught: the server's lessor already adds up to 500 ms of its own
//! before revoking, all of it on the side of `T`.

use super::keyspace::Keyspace;
use super::report::{Property, Report};
use super::show;
use crate::history::{EventKind, History, LeaseLog, Nanos, Outcome, Request, Response};

/// How late `lost()` may fire after the server dropped the lease (see the module doc).
pub const LOST_SLACK: Nanos = 250_000_000;

pub fn check(history: &History, truth: &Keyspace, report: &mut Report) {
    for lease in &history.leases {
        report.stats.leases += 1;
        if let Some(t) = vanished(history, truth, lease) {
            report.stats.lease_keys_dropped += 1;
            judge(lease, t, report);
        }
    }
}

/// The first time a key of `lease` vanished, and a line saying how.
fn vanished(history: &History, truth: &Keyspace, lease: &LeaseLog) -> Option<(Nanos, String)> {
    let mut first: Option<(Nanos, String)> = None;
    for key in &lease.keys {
        let events = truth.key_events(key);
        for pair in events.windows(2) {
            let (put, delete) = (pair[0], pair[1]);
            if put.kind != EventKind::Put
                || put.lease != lease.lease
                || delete.kind != EventKind::Delete
            {
                continue;
            }
            let t = delete.seen_at;
            if lease.revoked_at.is_some_and(|r| r <= t)
                || explained(history, key, delete.revision, t)
            {
                continue;
            }
            if first.as_ref().is_none_or(|(f, _)| t < *f) {
                first = Some((t, show::lines([show::event(put), show::event(delete)])));
            }
        }
    }
    first
}

/// Whether a workload delete may have removed `key` at `revision` (seen at `t`).
fn explained(history: &History, key: &str, revision: i64, t: Nanos) -> bool {
    history
        .ops
        .iter()
        .any(|op| match (&op.request, &op.outcome) {
            (
                Request::Delete { key: k },
                Outcome::Ok(Response::Delete {
                    revision: r,
                    deleted,
                }),
            ) => k == key && *r == revision && *deleted > 0,
            (Request::Delete { key: k }, Outcome::Unknown { .. }) => k == key && op.invoke <= t,
            _ => false,
        })
}

fn judge(lease: &LeaseLog, (t, how): (Nanos, String), report: &mut Report) {
    let header = format!(
        "lease {} (ttl {} ms, granted {}, lost {}) dropped by the server by {}:",
        lease.lease,
        lease.ttl_ms,
        show::at(lease.granted_at),
        lease.lost_at.map_or("never".into(), show::at),
        show::at(t)
    );
    if let Some(b) = lease.beliefs.iter().find(|b| b.at < t && b.until > t) {
        let detail = show::lines([
            header.clone(),
            how.clone(),
            format!(
                "yet at {} the holder believed it alive until {}",
                show::at(b.at),
                show::at(b.until)
            ),
        ]);
        report.violation(Property::LeaseBelief, detail);
    }
    if lease.lost_at.is_none_or(|lost| lost > t + LOST_SLACK) {
        let detail = show::lines([
            header,
            how,
            format!(
                "lost() must fire by {} (slack {} ms)",
                show::at(t + LOST_SLACK),
                LOST_SLACK / 1_000_000
            ),
        ]);
        report.violation(Property::LeaseLost, detail);
    }
}
