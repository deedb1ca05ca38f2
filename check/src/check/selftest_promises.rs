//! Planted bugs for the checkers of issue 18's promises (monotonic reads, deletes applied
//! twice, watches from now, true compactions, watch endings, liveness to the end marker): each
//! planted into the simulated valid history and into the real recorded one, and named.

use std::time::Duration;

use super::fixture::valid_history;
use super::report::{Property, Report};
use crate::history::{Batch, Delivery, History, Outcome, Request, Response, WatchEnd};

fn recorded() -> History {
    let text = include_str!("../fixtures/recorded.json");
    serde_json::from_str(text).expect("the recorded fixture is a history")
}

fn valids() -> [(&'static str, History); 2] {
    [("simulated", valid_history()), ("recorded", recorded())]
}

fn caught(h: &History, property: Property) -> Report {
    let report = super::check(h, Duration::from_secs(30));
    println!("{report}");
    assert!(report.has(property), "{property:?} not reported:\n{report}");
    report
}

#[test]
fn a_read_below_what_its_client_was_answered_is_caught() {
    for (source, mut h) in valids() {
        println!("planted into the {source} history");
        // A serializable read answered from before the client's previous answer.
        let (client, invoke) = h
            .ops
            .iter()
            .filter(|op| {
                matches!(
                    op.request,
                    Request::Get {
                        serializable: true,
                        ..
                    }
                )
            })
            .filter(|op| matches!(op.outcome, Outcome::Ok(_)))
            .map(|op| (op.client, op.invoke))
            .nth(3)
            .expect("serializable reads");
        let seen = h
            .ops
            .iter()
            .filter(|op| op.client == client && op.ret < invoke)
            .filter_map(|op| match &op.outcome {
                Outcome::Ok(r) => Some(r.revision()),
                _ => None,
            })
            .max()
            .expect("an earlier answer of the same client");
        let op = h
            .ops
            .iter_mut()
            .find(|op| op.client == client && op.invoke == invoke)
            .unwrap();
        if let Outcome::Ok(Response::Get { revision, .. }) = &mut op.outcome {
            *revision = seen - 1;
        }
        caught(&h, Property::MonotonicRead);
    }
}

#[test]
fn a_delete_applied_twice_is_caught() {
    for (source, mut h) in valids() {
        println!("planted into the {source} history");
        // The client answers a resent delete: the first application's event has no delete.
        let kv = format!("{}kv/", h.prefix);
        let i = h
            .ops
            .iter()
            .position(|op| {
                matches!(&op.request, Request::Delete { key } if key.starts_with(&kv))
                    && matches!(op.outcome, Outcome::Ok(Response::Delete { deleted: 1, .. }))
            })
            .expect("an acknowledged delete");
        if let Outcome::Ok(Response::Delete { revision, deleted }) = &mut h.ops[i].outcome {
            *revision += 1_000_000;
            *deleted = 0;
        }
        caught(&h, Property::DeleteUnexplained);
    }
}

#[test]
fn a_watch_from_now_that_replays_is_caught() {
    for (source, mut h) in valids() {
        println!("planted into the {source} history");
        // Asked for at the end of the run, it delivered what came before.
        let end = h.ops.iter().map(|op| op.ret).max().unwrap();
        let w = h
            .watches
            .iter_mut()
            .find(|w| {
                w.start_revision == 0
                    && w.deliveries.iter().any(
                        |d| matches!(&d.batch, Batch::Events { events, .. } if !events.is_empty()),
                    )
            })
            .expect("a watch from now with events");
        w.created_at = end + 1;
        caught(&h, Property::WatchFromNow);
    }
}

#[test]
fn a_compaction_the_watch_did_not_need_is_caught() {
    for (source, mut h) in valids() {
        println!("planted into the {source} history");
        // Compacted at the revision it had already delivered: no compaction passed it.
        h.faults.retain(|f| f.kind != "Compact");
        let w = h
            .watches
            .iter_mut()
            .find(|w| w.deliveries.len() > 2 && w.ended.is_some())
            .expect("a watch that ended");
        let at = w.deliveries.last().unwrap().at;
        w.deliveries.push(crate::history::Delivery {
            at,
            batch: Batch::Compacted {
                compact_revision: 2,
            },
        });
        w.ended = Some(WatchEnd::Error {
            at,
            error: "compacted".into(),
        });
        caught(&h, Property::WatchFalseCompaction);
    }
}

#[test]
fn a_watch_that_ends_with_an_error_is_caught() {
    for (source, mut h) in valids() {
        println!("planted into the {source} history");
        let w = h
            .watches
            .iter_mut()
            .find(|w| w.established && !w.deliveries.is_empty())
            .expect("an established watch");
        let at = w.deliveries.last().unwrap().at;
        w.ended = Some(WatchEnd::Error {
            at,
            error: "stream ended".into(),
        });
        caught(&h, Property::WatchEnded);
    }
}

#[test]
fn a_watch_that_stopped_before_the_end_marker_is_caught() {
    // Only the recorded history has an end marker (the simulation has no end).
    let mut h = recorded();
    let marker = h
        .end_marker
        .clone()
        .expect("the recorded history has an end marker");
    let w = h
        .watches
        .iter_mut()
        .find(|w| w.ended.is_none() && marker.starts_with(&w.prefix) && w.deliveries.len() > 2)
        .expect("a watch open at the end");
    // It fell silent a few deliveries before the end.
    let keep = w.deliveries.len() - 2;
    w.deliveries.truncate(keep);
    caught(&h, Property::WatchLive);
}

/// A watch reloaded at or past the end marker's revision (a local cache watch that fell
/// behind its history as the run ended) reached the end: the reload holds the marker. One
/// reloaded before it still owes the marker's event.
#[test]
fn a_watch_reloaded_past_the_end_marker_reached_it() {
    let mut h = recorded();
    let marker = h
        .end_marker
        .clone()
        .expect("the recorded history has an end marker");
    let end = h
        .truth
        .iter()
        .find(|t| t.key == marker)
        .map(|t| t.revision)
        .expect("the marker is in the truth");
    let i = h
        .watches
        .iter()
        .position(|w| w.ended.is_none() && marker.starts_with(&w.prefix) && w.deliveries.len() > 2)
        .expect("a watch open at the end");
    let truth = super::keyspace::Keyspace::new(&h);
    let reload = |revision: i64| {
        let keys = truth
            .live_under(&h.watches[i].prefix, revision)
            .iter()
            .map(|(k, e)| (k.to_string(), e.value.clone().unwrap_or_default()))
            .collect();
        Batch::Reloaded { revision, keys }
    };
    let (past, before) = (reload(end), reload(end - 1));
    let w = &mut h.watches[i];
    let keep = w.deliveries.len() - 2;
    w.deliveries.truncate(keep);
    let at = w.deliveries.last().unwrap().at;
    w.deliveries.push(Delivery { at, batch: past });
    let report = super::check(&h, Duration::from_secs(30));
    assert!(!report.has(Property::WatchLive), "{report}");
    h.watches[i].deliveries.last_mut().unwrap().batch = before;
    caught(&h, Property::WatchLive);
}

/// A watch from now asked for while the end marker was being written: its "now" may come
/// before or after the marker (both orders are linearizable). After it, the marker is not
/// owed; before it, it is.
#[test]
fn a_watch_from_now_owes_the_end_marker_only_when_its_now_came_before_it() {
    let mut h = recorded();
    let marker = h
        .end_marker
        .clone()
        .expect("the recorded history has an end marker");
    let end = h
        .truth
        .iter()
        .find(|t| t.key == marker)
        .map(|t| (t.revision, t.seen_at))
        .expect("the marker is in the truth");
    let w = h
        .watches
        .iter_mut()
        .find(|w| w.ended.is_none() && marker.starts_with(&w.prefix))
        .expect("a watch open at the end");
    w.start_revision = 0;
    w.created_at = end.1 - 1;
    w.deliveries.clear();
    // "Now" was the marker's own revision: the watch starts after it and owes nothing.
    w.created_revision = Some(end.0);
    let report = super::check(&h, Duration::from_secs(30));
    assert!(!report.has(Property::WatchLive), "{report}");
    // "Now" came before the marker: the marker is owed, and never came.
    let w = h
        .watches
        .iter_mut()
        .find(|w| w.ended.is_none() && marker.starts_with(&w.prefix))
        .unwrap();
    w.created_revision = Some(end.0 - 1);
    caught(&h, Property::WatchLive);
}
