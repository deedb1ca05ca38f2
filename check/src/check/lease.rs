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

/// How long after a frozen leader thaws its stale revokes can still be committed.
///
/// etcd before 3.5.11 and 3.4.28 (3.5.1 and 3.4.23 are tested here) lets a leader that was
/// stalled revoke leases by its own clock once it runs again: its lessor still thinks it is
/// the primary, so it proposes the revoke of every lease that ran out *in its view* (no renewal
/// reached it while it was frozen), and raft, now a follower, forwards the proposal to the new
/// leader, which commits it (etcd-io/etcd issues 12528 and 15247, fixed by pull request 16822).
/// The keeper's renewals meanwhile went to the new leader, which granted them: its belief was
/// right, and the server broke its own lease. The revoke goes out at the lessor's next check,
/// at most 500 ms after the thaw, plus a commit: 1 s covers it on a loaded box.
const STALE_LEADER_REVOKE: Nanos = 1_000_000_000;

pub fn check(history: &History, truth: &Keyspace, report: &mut Report) {
    for lease in &history.leases {
        report.stats.leases += 1;
        if let Some(t) = vanished(history, truth, lease) {
            report.stats.lease_keys_dropped += 1;
            if stale_leader_revoke(history, t.0) {
                report.stats.stale_leader_revokes += 1;
                continue;
            }
            judge(lease, t, report);
        }
    }
}

/// Whether a lease key that vanished at `t` is etcd's own bug: a leader frozen until shortly
/// before `t` revoked it by its stale clock (see [`STALE_LEADER_REVOKE`]), on a version that
/// has the bug.
fn stale_leader_revoke(history: &History, t: Nanos) -> bool {
    revokes_when_stale(&history.etcd_version)
        && history
            .faults
            .iter()
            .filter(|f| {
                // Two at once may freeze the leader too (the detail says which member).
                f.kind == "FreezeLeader" || (f.kind == "TwoAtOnce" && f.detail.contains("frozen"))
            })
            .any(|f| f.end <= t && t - f.end <= STALE_LEADER_REVOKE)
}

/// Versions with etcd's stale-leader revoke: 3.5 before 3.5.11, 3.4 before 3.4.28, and older.
fn revokes_when_stale(version: &str) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u64>().ok());
    let (Some(Some(major)), Some(Some(minor)), Some(Some(patch))) =
        (parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    match (major, minor) {
        (3, 5) => patch < 11,
        (3, 4) => patch < 28,
        (3, m) => m < 4,
        (m, _) => m < 3,
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

#[test]
fn versions_with_the_stale_leader_revoke() {
    for version in ["3.5.1", "3.5.10", "3.4.23", "3.4.27", "3.3.25", "2.3.8"] {
        assert!(revokes_when_stale(version), "{version}");
    }
    for version in [
        "3.5.11", "3.5.17", "3.4.28", "3.6.0", "4.0.0", "sim", "", "3.5",
    ] {
        assert!(!revokes_when_stale(version), "{version}");
    }
}
