//! Linearizable reads against the global revision order, which the per-key search cannot see:
//! a read's revision is at least that of every operation that completed before it was invoked
//! (a read stale across keys), and its value is the truth's at that revision. A cache's
//! `Consistent` read is judged as a linearizable get.

use super::keyspace::Keyspace;
use super::report::{Property, Report};
use super::show;
use crate::history::{History, Op, Outcome, Request, Response};

pub fn check(history: &History, truth: &Keyspace, report: &mut Report) {
    // Every acknowledged linearizable operation bounds later reads, reads included: etcd
    // serves a linearizable read only once its member applied everything committed before.
    // A cache read counts too, of either freshness: a cache holds only states the cluster
    // committed, so its revision was committed by the time it answered.
    let mut done: Vec<(&Op, i64)> = history
        .ops
        .iter()
        .filter(|op| {
            !matches!(
                op.request,
                Request::Get {
                    serializable: true,
                    ..
                }
            )
        })
        .filter_map(|op| match &op.outcome {
            Outcome::Ok(resp) => Some((op, resp.revision())),
            _ => None,
        })
        .collect();
    done.sort_by_key(|(op, _)| op.ret);
    let mut highest: Vec<(&Op, i64)> = Vec::with_capacity(done.len());
    for &(op, rev) in &done {
        match highest.last() {
            Some(&best) if best.1 >= rev => highest.push(best),
            _ => highest.push((op, rev)),
        }
    }
    for op in history
        .ops
        .iter()
        .filter(|op| op.request.is_linearizable_read())
    {
        let (
            Request::Get { key, .. } | Request::CacheGet { key, .. },
            Outcome::Ok(Response::Get {
                revision,
                value,
                mod_revision,
            }),
        ) = (&op.request, &op.outcome)
        else {
            continue;
        };
        report.stats.reads_checked += 1;
        let n = done.partition_point(|(a, _)| a.ret < op.invoke);
        if let Some(&(a, rev_a)) = n.checked_sub(1).map(|i| &highest[i])
            && rev_a > *revision
        {
            let detail = show::lines([
                format!("read at revision {revision} after an operation at {rev_a} had returned:"),
                format!("before: {}", show::op(a)),
                format!("read:   {}", show::op(op)),
            ]);
            report.violation(Property::StaleRead, detail);
        }
        if *revision < history.start_revision {
            continue; // Below the truth: nothing to compare with (the stale check above speaks).
        }
        // A revision above the truth's last event is fine: writes outside the prefix (the
        // final tombstone, other tenants) move the revision too.
        if let Err(why) = truth.judge_read(key, *revision, value.as_deref(), *mod_revision) {
            report.violation(Property::ReadValue, show::lines([show::op(op), why]));
        }
    }
}
