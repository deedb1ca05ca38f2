//! Reads that may be old, judged against the truth at the revision they report (etcd's
//! `validate/operations.go`): serializable reads (any member may answer at any revision it
//! has applied, even going backwards after a failover, research (c) 7) and a cache's
//! `AtLeast(token)` reads (any revision from the token on).

use super::keyspace::Keyspace;
use super::report::{Property, Report};
use super::show;
use crate::history::{History, Op, Outcome, Request, Response};

pub fn check(history: &History, truth: &Keyspace, report: &mut Report) {
    for op in &history.ops {
        let Outcome::Ok(Response::Get {
            revision,
            value,
            mod_revision,
        }) = &op.outcome
        else {
            continue;
        };
        let (key, property) = match &op.request {
            Request::Get {
                key,
                serializable: true,
            } => (key, Property::SerializableRead),
            Request::CacheGet {
                key,
                at_least: Some(token),
            } => {
                at_least(op, *token, *revision, report);
                (key, Property::CacheAtLeast)
            }
            _ => continue,
        };
        // A member that lags behind the workload's start answers from before the truth.
        if *revision < history.start_revision {
            continue;
        }
        report.stats.reads_checked += 1;
        // Above the truth's last event is fine: writes outside the prefix move the revision.
        if let Err(why) = truth.judge_read(key, *revision, value.as_deref(), *mod_revision) {
            report.violation(property, show::lines([show::op(op), why]));
        }
    }
}

/// An `AtLeast(token)` read answered below its token.
fn at_least(op: &Op, token: i64, revision: i64, report: &mut Report) {
    if revision < token {
        let detail = show::lines([
            format!("read at revision {revision}, below its token {token}:"),
            show::op(op),
        ]);
        report.violation(Property::CacheAtLeast, detail);
    }
}
