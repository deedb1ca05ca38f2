//! Planted bugs for a watch-fed cache's reads (issue 22): a `Consistent` read served stale and
//! an `AtLeast` read served below its token are named; a cache read that the client's guard
//! never heard of does not raise the client's monotonic floor. Planted into the simulated
//! valid history only: the recorded fixture predates the cache workload.

use std::time::Duration;

use super::fixture::valid_history;
use super::report::{Property, Report};
use crate::history::{History, Outcome, Request, Response};

fn run(h: &History) -> Report {
    let report = super::check(h, Duration::from_secs(30));
    println!("{report}");
    report
}

fn caught(h: &History, property: Property) {
    let report = run(h);
    assert!(report.has(property), "{property:?} not reported:\n{report}");
}

/// The index of the first acknowledged cache read of the freshness `at_least` picks, after an
/// operation that returned above the workload's start.
fn cache_read(h: &History, at_least: impl Fn(Option<i64>) -> bool) -> usize {
    (0..h.ops.len())
        .find(|&i| {
            let op = &h.ops[i];
            matches!(op.request, Request::CacheGet { at_least: a, .. } if at_least(a))
                && matches!(op.outcome, Outcome::Ok(Response::Get { revision, .. }) if revision > h.start_revision + 1)
                && h.ops.iter().any(|a| {
                    a.ret < op.invoke
                        && matches!(&a.outcome, Outcome::Ok(r) if r.revision() > h.start_revision)
                })
        })
        .expect("an acknowledged cache read late enough")
}

#[test]
fn the_simulated_history_has_cache_reads_of_both_freshnesses() {
    let h = valid_history();
    let report = run(&h);
    assert!(report.is_ok(), "{report}");
    for kind in ["cache get ok", "cache get at least ok"] {
        assert!(report.stats.ops.get(kind).is_some_and(|n| *n > 0), "{kind}");
    }
}

#[test]
fn a_consistent_cache_read_served_stale_is_caught() {
    let mut h = valid_history();
    let i = cache_read(&h, |a| a.is_none());
    // What a cache that skipped its freshness round answers: the state it loaded at the start.
    h.ops[i].outcome = Outcome::Ok(Response::Get {
        revision: h.start_revision,
        value: None,
        mod_revision: 0,
    });
    caught(&h, Property::StaleRead);
}

#[test]
fn an_at_least_cache_read_below_its_token_is_caught() {
    let mut h = valid_history();
    let i = cache_read(&h, |a| a.is_some());
    let Outcome::Ok(Response::Get { revision, .. }) = &mut h.ops[i].outcome else {
        unreachable!("picked an acknowledged read");
    };
    *revision -= 1;
    caught(&h, Property::CacheAtLeast);
}

#[test]
fn an_at_least_cache_read_with_a_value_not_the_truths_is_caught() {
    let mut h = valid_history();
    let i = cache_read(&h, |a| a.is_some());
    let Outcome::Ok(Response::Get { value, .. }) = &mut h.ops[i].outcome else {
        unreachable!("picked an acknowledged read");
    };
    *value = Some("written by nobody".into());
    caught(&h, Property::CacheAtLeast);
}

#[test]
fn a_cache_read_does_not_raise_its_clients_monotonic_floor() {
    let mut h = valid_history();
    // A serializable read, and a cache read of the same client just before it, far ahead.
    let read = (0..h.ops.len())
        .find(|&i| {
            matches!(
                h.ops[i].request,
                Request::Get {
                    serializable: true,
                    ..
                }
            ) && matches!(h.ops[i].outcome, Outcome::Ok(_))
        })
        .expect("a serializable read");
    let (client, invoke) = (h.ops[read].client, h.ops[read].invoke);
    let mut ahead = h.ops[read].clone();
    ahead.id = h.ops.iter().map(|op| op.id).max().unwrap_or(0) + 1;
    ahead.process = 9_999;
    ahead.client = client;
    ahead.invoke = invoke.saturating_sub(2);
    ahead.ret = invoke.saturating_sub(1);
    ahead.request = Request::CacheGet {
        key: ahead.request.key().to_owned(),
        at_least: Some(0),
    };
    let newest = h.truth.last().map_or(h.start_revision, |e| e.revision);
    let (value, mod_revision) = h
        .truth
        .iter()
        .rev()
        .find(|e| e.key == ahead.request.key())
        .map_or((None, 0), |e| (e.value.clone(), e.revision));
    ahead.outcome = Outcome::Ok(Response::Get {
        revision: newest,
        value,
        mod_revision,
    });
    h.ops.insert(read, ahead);
    let report = run(&h);
    assert!(!report.has(Property::MonotonicRead), "{report}");
}
