//! Linearizability of each key's operations: one register per key (its value, or absent),
//! searched by [`wgl`](super::wgl) after patching the history with the ground truth.
//!
//! # Why per key, and what it misses
//!
//! A register per key is P-compositional, so ten keys are ten small searches instead of one
//! huge one. What it cannot see is the global revision order (research b.2 warns of it): a
//! read that is linearizable on its key but stale across keys. [`stale`](super::stale) checks
//! that separately against the truth, so the pair covers what etcd's one-model checker covers.
//!
//! # Patching with the truth (etcd's `patch_history.go`, with watch events for the WAL)
//!
//! * An `Unknown` write whose unique value never appears in the truth is dropped; one that
//!   appears must be linearized, between its call and the moment a collector saw it (`seen_at`:
//!   it happened by then; tighter than +infinity, and as sound).
//! * A fenced put applied iff its value is in the truth: no fence to model.
//! * `Fail` operations, failed reads and serializable reads are dropped (reads.rs judges the
//!   latter).
//! * Every truth event no acknowledged operation explains (a lease expiry, the delete of an
//!   `Unknown` delete, an applied `Fail`) becomes a server-side operation that must be
//!   linearized before its `seen_at`, from the state the truth had before it. `Unknown` deletes
//!   are dropped: if one applied, its event is such a server-side operation.
//!
//! # Speed (debug build, 2 shared cores; measured by `speed.rs`)
//!
//! 10 keys, 8 processes, 3,000 ops, 20% of writes `Unknown`, up to 20% of operations stalled
//! 0.1-2 s: 13-28 ms of search and under 3,000 memoized states for the whole history, passing
//! or refuted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use super::keyspace::Keyspace;
use super::report::{Property, Report};
use super::show;
use super::wgl::{self, Budget, Call, Verdict};
use crate::history::{EventKind, History, Nanos, Outcome, Request, Response};

/// Memoized states per key at most: each is a bitset of the key's operations plus a value, so a
/// million is on the order of 100 MB for 300 operations, the most a shared CI box should give.
const MAX_STATES: usize = 1_000_000;

/// What an operation needs of the register, and what it leaves there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Require {
    Any,
    Is(Option<u32>),
    Present,
    Never,
}

#[derive(Clone, Copy, Debug)]
struct RegOp {
    require: Require,
    /// `Some(new)`: the register becomes `new`.
    set: Option<Option<u32>>,
}

fn step(state: &Option<u32>, op: &RegOp) -> Option<Option<u32>> {
    let ok = match op.require {
        Require::Any => true,
        Require::Is(v) => *state == v,
        Require::Present => state.is_some(),
        Require::Never => false,
    };
    ok.then(|| op.set.unwrap_or(*state))
}

/// Where a searched operation came from: an operation, or a truth event nobody explains.
#[derive(Clone, Copy, Debug)]
enum Source {
    Op(usize),
    Truth(usize),
}

/// One key's search input.
#[derive(Default)]
struct Partition {
    calls: Vec<Call<RegOp>>,
    sources: Vec<Source>,
}

impl Partition {
    fn push(
        &mut self,
        source: Source,
        call: Nanos,
        ret: Option<Nanos>,
        require: Require,
        set: Option<Option<u32>>,
    ) {
        self.calls.push(Call {
            call,
            ret,
            must: true,
            input: RegOp { require, set },
        });
        self.sources.push(source);
    }
}

/// Values as small integers: the model state is then a cheap `Option<u32>`.
#[derive(Default)]
struct Values<'h>(HashMap<&'h str, u32>);

impl<'h> Values<'h> {
    fn id(&mut self, v: Option<&'h str>) -> Option<u32> {
        let n = self.0.len() as u32;
        v.map(|v| *self.0.entry(v).or_insert(n))
    }

    /// The values, indexed by id.
    fn names(&self) -> Vec<&'h str> {
        let mut names = vec![""; self.0.len()];
        for (v, &id) in &self.0 {
            names[id as usize] = v;
        }
        names
    }
}

pub fn check(history: &History, truth: &Keyspace, budget: Duration, report: &mut Report) {
    let started = Instant::now();
    let deadline = started + budget;
    let (partitions, names) = partition(history, truth);
    for (key, p) in &partitions {
        report.stats.linearizable_keys += 1;
        report.stats.linearizable_ops += p.calls.len();
        let search = wgl::search(
            &p.calls,
            None,
            step,
            Budget {
                deadline,
                max_states: MAX_STATES,
            },
        );
        report.stats.states_explored += search.states;
        match search.verdict {
            Verdict::Linearizable => {}
            Verdict::Illegal { longest } => {
                report.violation(
                    Property::Linearizability,
                    explain(history, key, p, &names, &longest),
                );
            }
            Verdict::Timeout => {
                let detail = format!(
                    "key {key}: {} ops, gave up after {} states, {:?} into a {budget:?} budget \
                     (not a pass)",
                    p.calls.len(),
                    search.states,
                    started.elapsed()
                );
                report.violation(Property::LinearizabilityTimeout, detail);
            }
        }
    }
    report.stats.search_time = started.elapsed();
}

/// The patched operations of every key that has operations.
/// Also returns the values by id, for reports.
fn partition<'h>(
    history: &'h History,
    truth: &Keyspace<'h>,
) -> (BTreeMap<&'h str, Partition>, Vec<&'h str>) {
    let mut values = Values::default();
    let mut parts: BTreeMap<&str, Partition> = BTreeMap::new();
    let mut explained: HashSet<usize> = HashSet::new();
    let mut deleted: HashSet<(&str, i64)> = HashSet::new();
    for (i, op) in history.ops.iter().enumerate() {
        let key = op.request.key();
        let src = Source::Op(i);
        let applied = op
            .request
            .written_value()
            .and_then(|v| truth.value_indices(v).first().copied());
        let p = parts.entry(key).or_default();
        let (call, ret) = (op.invoke, Some(op.ret));
        match (&op.request, &op.outcome) {
            (
                Request::Get {
                    serializable: true, ..
                }
                | Request::CacheGet {
                    at_least: Some(_), ..
                },
                _,
            ) => {}
            (
                Request::Get { .. } | Request::CacheGet { .. },
                Outcome::Ok(Response::Get { value, .. }),
            ) => {
                p.push(
                    src,
                    call,
                    ret,
                    Require::Is(values.id(value.as_deref())),
                    None,
                );
            }
            (Request::Put { value, .. }, Outcome::Ok(_))
            | (
                Request::FencedPut { value, .. },
                Outcome::Ok(Response::Fenced {
                    succeeded: true, ..
                }),
            ) => {
                explained.extend(applied);
                p.push(src, call, ret, Require::Any, Some(values.id(Some(value))));
            }
            (
                Request::Cas { expect, value, .. },
                Outcome::Ok(Response::Cas {
                    succeeded: true, ..
                }),
            ) => {
                explained.extend(applied);
                let require = Require::Is(values.id(expect.as_deref()));
                p.push(src, call, ret, require, Some(values.id(Some(value))));
            }
            (
                Request::Cas { expect, .. },
                Outcome::Ok(Response::Cas {
                    succeeded: false,
                    value,
                    ..
                }),
            ) => {
                let require = match expect == value {
                    true => Require::Never, // The compare held, yet the txn took its else branch.
                    false => Require::Is(values.id(value.as_deref())),
                };
                p.push(src, call, ret, require, None);
            }
            (
                Request::Put { value, .. } | Request::FencedPut { value, .. },
                Outcome::Unknown { .. },
            ) => {
                if let Some(e) = applied {
                    explained.insert(e);
                    let seen = Some(truth.events[e].seen_at.max(call));
                    p.push(src, call, seen, Require::Any, Some(values.id(Some(value))));
                }
            }
            (Request::Cas { expect, value, .. }, Outcome::Unknown { .. }) => {
                if let Some(e) = applied {
                    explained.insert(e);
                    let seen = Some(truth.events[e].seen_at.max(call));
                    let require = Require::Is(values.id(expect.as_deref()));
                    p.push(src, call, seen, require, Some(values.id(Some(value))));
                }
            }
            (
                Request::Delete { key },
                Outcome::Ok(Response::Delete {
                    deleted: n,
                    revision,
                }),
            ) => {
                let require = if *n > 0 {
                    Require::Present
                } else {
                    Require::Is(None)
                };
                if *n > 0 {
                    deleted.insert((key, *revision));
                }
                p.push(src, call, ret, require, (*n > 0).then_some(None));
            }
            // Fail, Unknown deletes and reads, refused fenced puts: no effect to model.
            _ => {}
        }
    }
    server_side(history, &explained, &deleted, &mut values, &mut parts);
    parts.retain(|_, p| !p.calls.is_empty());
    (parts, values.names())
}

/// Adds, to keys that have operations, the truth events no acknowledged operation explains.
fn server_side<'h>(
    history: &'h History,
    explained: &HashSet<usize>,
    deleted: &HashSet<(&str, i64)>,
    values: &mut Values<'h>,
    parts: &mut BTreeMap<&'h str, Partition>,
) {
    // It happened after the key's previous event, so after the call of the op that wrote that.
    let invoked: HashMap<&str, Nanos> = history
        .ops
        .iter()
        .filter_map(|op| Some((op.request.written_value()?, op.invoke)))
        .collect();
    let mut last: HashMap<&str, (Option<&str>, Nanos)> = HashMap::new();
    for (i, e) in history.truth.iter().enumerate() {
        let (before, after) = last.get(e.key.as_str()).copied().unwrap_or((None, 0));
        let value = e.value.as_deref();
        let next_after = value.and_then(|v| invoked.get(v).copied()).unwrap_or(0);
        last.insert(&e.key, (value, next_after));
        let is_explained = match e.kind {
            EventKind::Put => explained.contains(&i),
            EventKind::Delete => deleted.contains(&(e.key.as_str(), e.revision)),
        };
        if is_explained {
            continue;
        }
        if let Some(p) = parts.get_mut(e.key.as_str()) {
            let require = Require::Is(values.id(before));
            let set = Some(values.id(value));
            p.push(
                Source::Truth(i),
                after.min(e.seen_at),
                Some(e.seen_at),
                require,
                set,
            );
        }
    }
}

/// The report of a key with no linearization: the end of the longest partial one, the state
/// it left, and the operation that could not be placed before it returned, with its rivals.
fn explain(
    history: &History,
    key: &str,
    p: &Partition,
    names: &[&str],
    longest: &[usize],
) -> String {
    let render = |i: usize| match p.sources[i] {
        Source::Op(o) => show::op(&history.ops[o]),
        Source::Truth(t) => format!("server-side: {}", show::event(&history.truth[t])),
    };
    let mut state: Option<u32> = None;
    for &i in longest {
        state = step(&state, &p.calls[i].input).unwrap_or(state);
    }
    let value_of = |id: Option<u32>| match id {
        Some(id) => format!("{:?}", names[id as usize]),
        None => "absent".to_string(),
    };
    let done: HashSet<usize> = longest.iter().copied().collect();
    let mut lines = vec![format!(
        "key {key}: {} ops, no linearization; the longest partial one has {} ops, ending:",
        p.calls.len(),
        longest.len()
    )];
    let tail = longest.len().saturating_sub(6);
    lines.extend(longest[tail..].iter().map(|&i| format!("  {}", render(i))));
    lines.push(format!("state then: {}", value_of(state)));
    let stuck = (0..p.calls.len())
        .filter(|i| !done.contains(i))
        .filter_map(|i| Some((p.calls[i].ret?, i)))
        .min();
    if let Some((ret, x)) = stuck {
        lines.push("stuck: this returned before any order could place it:".to_string());
        lines.push(format!("  {}", render(x)));
        lines.push("pending with it (it could not go after any of these either):".to_string());
        let mut rivals: Vec<usize> = (0..p.calls.len())
            .filter(|&i| i != x && !done.contains(&i) && p.calls[i].call <= ret)
            .collect();
        rivals.sort_by_key(|&i| p.calls[i].call);
        lines.extend(rivals.iter().take(8).map(|&i| format!("  {}", render(i))));
        if rivals.is_empty() {
            lines.push("  (none: it contradicts the state every order leaves)".to_string());
        }
    }
    lines.join("\n")
}
