//! Monotonic reads per client: etcd-ha's guard (on by default) promises that a read never
//! reports a revision below one the same client has already returned to its caller. A
//! serializable read may go to any member, and a member that lags (restarted, partitioned,
//! frozen) answers from its own older state; the guard must ask again elsewhere or fail, never
//! hand that answer back. Linearizable reads are judged across clients by `stale.rs`.
//!
//! Only answers the checker saw count: an operation of the client that returned before the
//! read was invoked. The client also learns revisions from watch events and other calls, so
//! its real floor is higher; judging against the lower one is sound, never stricter.

use std::collections::HashMap;

use super::report::{Property, Report};
use super::show;
use crate::history::{History, Op, Outcome, Request, Response};

pub fn check(history: &History, report: &mut Report) {
    // Each client's acknowledged operations, by return time, with the highest revision
    // returned up to each.
    // A cache read is answered by the cache, which the client's guard never hears of: it does
    // not raise the client's floor.
    let mut by_client: HashMap<u32, Vec<(&Op, i64)>> = HashMap::new();
    for op in &history.ops {
        if matches!(op.request, Request::CacheGet { .. }) {
            continue;
        }
        if let Outcome::Ok(response) = &op.outcome {
            by_client
                .entry(op.client)
                .or_default()
                .push((op, response.revision()));
        }
    }
    let highest: HashMap<u32, Vec<(&Op, i64)>> = by_client
        .into_iter()
        .map(|(client, mut done)| {
            done.sort_by_key(|(op, _)| op.ret);
            let mut best: Vec<(&Op, i64)> = Vec::with_capacity(done.len());
            for (op, revision) in done {
                match best.last() {
                    Some(&(b, r)) if r >= revision => best.push((b, r)),
                    _ => best.push((op, revision)),
                }
            }
            (client, best)
        })
        .collect();
    for op in &history.ops {
        let (
            Request::Get {
                serializable: true, ..
            },
            Outcome::Ok(Response::Get { revision, .. }),
        ) = (&op.request, &op.outcome)
        else {
            continue;
        };
        report.stats.monotonic_reads += 1;
        let Some(done) = highest.get(&op.client) else {
            continue;
        };
        let n = done.partition_point(|(a, _)| a.ret < op.invoke);
        if let Some(&(before, seen)) = n.checked_sub(1).map(|i| &done[i])
            && seen > *revision
        {
            let detail = show::lines([
                format!(
                    "client {} read at revision {revision} after it had returned {seen}:",
                    op.client
                ),
                format!("before: {}", show::op(before)),
                format!("read:   {}", show::op(op)),
            ]);
            report.violation(Property::MonotonicRead, detail);
        }
    }
}
