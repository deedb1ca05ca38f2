//! Serializable reads: any member may answer at any revision it has applied, so the revision
//! may be old (even going backwards after a failover, research (c) 7), but the value and mod
//! revision must be exactly the truth's at the revision the read reports (etcd's
//! `validate/operations.go`).

use super::keyspace::Keyspace;
use super::report::{Property, Report};
use super::show;
use crate::history::{History, Outcome, Request, Response};

pub fn check(history: &History, truth: &Keyspace, report: &mut Report) {
    for op in &history.ops {
        let (
            Request::Get {
                key,
                serializable: true,
            },
            Outcome::Ok(Response::Get {
                revision,
                value,
                mod_revision,
            }),
        ) = (&op.request, &op.outcome)
        else {
            continue;
        };
        // A member that lags behind the workload's start answers from before the truth.
        if *revision < history.start_revision {
            continue;
        }
        report.stats.reads_checked += 1;
        // Above the truth's last event is fine: writes outside the prefix move the revision.
        if let Err(why) = truth.judge_read(key, *revision, value.as_deref(), *mod_revision) {
            report.violation(Property::SerializableRead, show::lines([show::op(op), why]));
        }
    }
}
