//! One-line renderings of operations, events and deliveries for violation reports: enough
//! (times, revisions, values) to follow a failing seed from CI output alone.

use crate::history::{
    Batch, Delivery, Nanos, Op, Outcome, Request, Response, TruthEvent, WatchEvent,
};

/// A time as seconds since the run started, to the microsecond.
pub fn at(t: Nanos) -> String {
    if t == Nanos::MAX {
        return "+inf".to_string();
    }
    format!("{}.{:06}s", t / 1_000_000_000, (t % 1_000_000_000) / 1_000)
}

/// An operation: id, process, interval, request and outcome.
pub fn op(op: &Op) -> String {
    format!(
        "op {} p{} [{} .. {}] {} -> {}",
        op.id,
        op.process,
        at(op.invoke),
        at(op.ret),
        request(&op.request),
        outcome(&op.outcome)
    )
}

pub fn request(r: &Request) -> String {
    match r {
        Request::Put { key, value, lease } => match lease {
            Some(l) => format!("put {key}={value} lease {l}"),
            None => format!("put {key}={value}"),
        },
        Request::Delete { key } => format!("delete {key}"),
        Request::Get { key, serializable } => {
            let how = if *serializable {
                "serializable"
            } else {
                "linearizable"
            };
            format!("get {key} ({how})")
        }
        Request::Cas { key, expect, value } => {
            format!("cas {key} if {} then ={value}", opt(expect.as_deref()))
        }
        Request::FencedPut { key, value, hold } => {
            format!("fenced put {key}={value} as hold {hold}")
        }
        Request::CacheGet { key, at_least } => match at_least {
            Some(token) => format!("cache get {key} (at least {token})"),
            None => format!("cache get {key} (consistent)"),
        },
    }
}

fn outcome(o: &Outcome) -> String {
    match o {
        Outcome::Ok(r) => response(r),
        Outcome::Fail { error } => format!("FAIL ({error})"),
        Outcome::Unknown { error } => format!("UNKNOWN ({error})"),
    }
}

fn response(r: &Response) -> String {
    match r {
        Response::Put { revision } => format!("ok rev {revision}"),
        Response::Delete { revision, deleted } => format!("ok rev {revision} deleted {deleted}"),
        Response::Get {
            revision,
            value,
            mod_revision,
        } => format!(
            "ok rev {revision} {} (mod {mod_revision})",
            opt(value.as_deref())
        ),
        Response::Cas {
            revision,
            succeeded,
            value,
        } => format!(
            "ok rev {revision} succeeded {succeeded} read {}",
            opt(value.as_deref())
        ),
        Response::Fenced {
            revision,
            succeeded,
        } => format!("ok rev {revision} succeeded {succeeded}"),
    }
}

/// A value or "absent".
pub fn opt(v: Option<&str>) -> String {
    v.map_or_else(|| "absent".to_string(), |v| format!("{v:?}"))
}

/// A ground-truth event.
pub fn event(e: &TruthEvent) -> String {
    format!(
        "truth rev {} {:?} {} {} (create {}, version {}, lease {}) seen {}",
        e.revision,
        e.kind,
        e.key,
        opt(e.value.as_deref()),
        e.create_revision,
        e.version,
        e.lease,
        at(e.seen_at)
    )
}

/// A delivered watch event.
pub fn watch_event(e: &WatchEvent) -> String {
    format!(
        "rev {} {:?} {} {} (create {}, version {}, prev {})",
        e.revision,
        e.kind,
        e.key,
        opt(e.value.as_deref()),
        e.create_revision,
        e.version,
        opt(e.prev_value.as_deref())
    )
}

/// A delivery, its events one a line.
pub fn delivery(i: usize, d: &Delivery) -> String {
    match &d.batch {
        Batch::Events { revision, events } => {
            let mut s = format!("delivery {i} at {}: events up to {revision}", at(d.at));
            for e in events {
                s.push_str("\n  ");
                s.push_str(&watch_event(e));
            }
            s
        }
        Batch::Progress { revision } => {
            format!("delivery {i} at {}: progress {revision}", at(d.at))
        }
        Batch::Compacted { compact_revision } => {
            format!(
                "delivery {i} at {}: compacted at {compact_revision}",
                at(d.at)
            )
        }
        Batch::Reloaded { revision, keys } => {
            format!(
                "delivery {i} at {}: reloaded at {revision}, {} keys",
                at(d.at),
                keys.len()
            )
        }
    }
}

/// Lines joined, for a violation's detail.
pub fn lines<I: IntoIterator<Item = String>>(lines: I) -> String {
    lines.into_iter().collect::<Vec<_>>().join("\n")
}
