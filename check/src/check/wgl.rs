//! The linearizability search: Wing & Gong's depth-first search over the order of operations,
//! with Lowe's memo of (linearized set, model state), as porcupine does (research b.2). No IO,
//! generic over the model, so its tiny classic histories are tested alone.
//!
//! # How it works
//!
//! Call and return entries sit in one list sorted by time (a call before a return at the same
//! instant: touching intervals count as concurrent, the permissive side). Walking the list, a
//! call whose step the model accepts is linearized: its two entries are lifted out and the walk
//! restarts from the head. Reaching a return entry means that operation was not linearized
//! before it returned: undo the last choice and try the next call instead. A (set, state) pair
//! seen before cannot lead anywhere new, so it is skipped: that memo is what makes a few
//! hundred concurrent operations tractable.
//!
//! An operation with no return (`ret: None`, returned "at +infinity") has no return entry: it
//! may take effect any time after its call. One that `must` apply has to be linearized before
//! the search succeeds; one that need not (an `Unknown` delete) may also never take effect, so
//! the search succeeds once every `must` operation is in.

use std::collections::HashSet;
use std::hash::Hash;
use std::time::Instant;

use crate::history::Nanos;

/// One operation given to the search.
#[derive(Clone, Debug)]
pub struct Call<I> {
    pub call: Nanos,
    /// `None`: never returned (it may take effect any time after `call`).
    pub ret: Option<Nanos>,
    /// Whether it must take effect. Only an operation with `ret: None` may be optional.
    pub must: bool,
    pub input: I,
}

/// How the search ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    /// No order works; `longest` is the longest partial linearization found (indices into the
    /// calls, in order).
    Illegal {
        longest: Vec<usize>,
    },
    /// The time or state budget ran out first.
    Timeout,
}

/// The verdict and the work it took.
#[derive(Clone, Debug)]
pub struct Search {
    pub verdict: Verdict,
    pub states: u64,
}

/// The budget of one search.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    pub deadline: Instant,
    /// Memoized states at most (each costs a bitset and a model state).
    pub max_states: usize,
}

/// One entry of the time-ordered list: the call or the return of an operation.
struct Node {
    op: usize,
    is_call: bool,
    /// For a call: the index of its return node, if any.
    ret: Option<usize>,
    prev: usize,
    next: usize,
}

/// Index of the list's sentinel (head and tail at once).
const SENTINEL: usize = 0;

/// Searches a linearization of `calls` from `init` through the model's `step` (which returns
/// the state after the operation, or `None` if the model cannot take it in that state).
pub fn search<S, I>(
    calls: &[Call<I>],
    init: S,
    step: impl Fn(&S, &I) -> Option<S>,
    budget: Budget,
) -> Search
where
    S: Clone + Eq + Hash,
{
    debug_assert!(calls.iter().all(|c| c.must || c.ret.is_none()));
    let mut nodes = build_list(calls);
    let mut linearized = vec![0u64; calls.len().div_ceil(64)];
    let mut memo: HashSet<(Vec<u64>, S)> = HashSet::new();
    let mut must_left = calls.iter().filter(|c| c.must).count();
    let mut stack: Vec<(usize, S)> = Vec::new();
    let mut longest: Vec<usize> = Vec::new();
    let mut state = init;
    let mut entry = nodes[SENTINEL].next;
    let mut steps = 0u64;
    loop {
        if must_left == 0 {
            return Search {
                verdict: Verdict::Linearizable,
                states: memo.len() as u64,
            };
        }
        steps += 1;
        if (steps.is_multiple_of(1024) && Instant::now() > budget.deadline)
            || memo.len() > budget.max_states
        {
            return Search {
                verdict: Verdict::Timeout,
                states: memo.len() as u64,
            };
        }
        if entry != SENTINEL && nodes[entry].is_call {
            let op = nodes[entry].op;
            if let Some(next) = step(&state, &calls[op].input) {
                linearized[op / 64] |= 1 << (op % 64);
                if memo.insert((linearized.clone(), next.clone())) {
                    stack.push((entry, std::mem::replace(&mut state, next)));
                    must_left -= usize::from(calls[op].must);
                    lift(&mut nodes, entry);
                    if stack.len() > longest.len() {
                        longest = stack.iter().map(|&(n, _)| nodes[n].op).collect();
                    }
                    entry = nodes[SENTINEL].next;
                    continue;
                }
                linearized[op / 64] &= !(1 << (op % 64));
            }
            entry = nodes[entry].next;
            continue;
        }
        // A return entry (an operation returned unlinearized) or the end: backtrack.
        let Some((node, before)) = stack.pop() else {
            return Search {
                verdict: Verdict::Illegal { longest },
                states: memo.len() as u64,
            };
        };
        let op = nodes[node].op;
        state = before;
        linearized[op / 64] &= !(1 << (op % 64));
        must_left += usize::from(calls[op].must);
        unlift(&mut nodes, node);
        entry = nodes[node].next;
    }
}

/// The doubly linked list of call and return entries, sorted by time, calls first on ties.
fn build_list<I>(calls: &[Call<I>]) -> Vec<Node> {
    let mut order: Vec<(Nanos, bool, usize)> = Vec::with_capacity(calls.len() * 2);
    for (i, c) in calls.iter().enumerate() {
        order.push((c.call, false, i));
        if let Some(ret) = c.ret {
            order.push((ret.max(c.call), true, i));
        }
    }
    // (time, is_return): false < true puts calls before returns at one instant.
    order.sort();
    let mut nodes = vec![Node {
        op: usize::MAX,
        is_call: false,
        ret: None,
        prev: 0,
        next: 0,
    }];
    let mut call_node = vec![0; calls.len()];
    for &(_, is_return, op) in &order {
        let index = nodes.len();
        let prev = index - 1;
        nodes[prev].next = index;
        nodes.push(Node {
            op,
            is_call: !is_return,
            ret: None,
            prev,
            next: SENTINEL,
        });
        if is_return {
            nodes[call_node[op]].ret = Some(index);
        } else {
            call_node[op] = index;
        }
    }
    let last = nodes.len() - 1;
    nodes[SENTINEL].prev = last;
    nodes
}

fn unlink(nodes: &mut [Node], i: usize) {
    let (prev, next) = (nodes[i].prev, nodes[i].next);
    nodes[prev].next = next;
    nodes[next].prev = prev;
}

fn relink(nodes: &mut [Node], i: usize) {
    let (prev, next) = (nodes[i].prev, nodes[i].next);
    nodes[prev].next = i;
    nodes[next].prev = i;
}

/// Takes a call and its return out of the list.
fn lift(nodes: &mut [Node], call: usize) {
    unlink(nodes, call);
    if let Some(ret) = nodes[call].ret {
        unlink(nodes, ret);
    }
}

/// Puts them back, in the reverse order (removals are undone last-in first-out).
fn unlift(nodes: &mut [Node], call: usize) {
    if let Some(ret) = nodes[call].ret {
        relink(nodes, ret);
    }
    relink(nodes, call);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A register of small integers: write(v), read(v) (None: absent), cas(from, to).
    #[derive(Clone, Copy, Debug)]
    enum Reg {
        Write(u8),
        Read(Option<u8>),
        Cas(Option<u8>, u8),
    }

    fn step(s: &Option<u8>, i: &Reg) -> Option<Option<u8>> {
        match *i {
            Reg::Write(v) => Some(Some(v)),
            Reg::Read(v) => (*s == v).then_some(*s),
            Reg::Cas(from, to) => (*s == from).then_some(Some(to)),
        }
    }

    fn op(call: Nanos, ret: Option<Nanos>, input: Reg) -> Call<Reg> {
        Call {
            call,
            ret,
            must: true,
            input,
        }
    }

    fn run(calls: &[Call<Reg>]) -> Verdict {
        let budget = Budget {
            deadline: Instant::now() + Duration::from_secs(5),
            max_states: 1 << 20,
        };
        search(calls, None, step, budget).verdict
    }

    #[test]
    fn concurrent_writes_and_reads_linearize() {
        let calls = [
            op(0, Some(10), Reg::Write(1)),
            op(5, Some(15), Reg::Write(2)),
            op(11, Some(12), Reg::Read(Some(1))),
            op(16, Some(20), Reg::Read(Some(2))),
        ];
        // w1 [0,10], w2 [5,15], read 1 at [11,12] then read 2 at [16,20]: w1, r, w2, r'.
        assert_eq!(run(&calls), Verdict::Linearizable);
    }

    #[test]
    fn a_read_of_an_overwritten_value_is_illegal() {
        let calls = [
            op(0, Some(1), Reg::Write(1)),
            op(2, Some(3), Reg::Write(2)),
            op(4, Some(5), Reg::Read(Some(1))),
        ];
        let Verdict::Illegal { longest } = run(&calls) else {
            panic!("expected illegal")
        };
        assert_eq!(longest, vec![0, 1]);
    }

    #[test]
    fn a_read_before_any_write_sees_absent() {
        let calls = [
            op(0, Some(1), Reg::Read(Some(1))),
            op(2, Some(3), Reg::Write(1)),
        ];
        assert!(matches!(run(&calls), Verdict::Illegal { .. }));
    }

    #[test]
    fn an_unknown_write_that_must_apply_may_apply_late() {
        // The write timed out at 2 but applied: the read at [10, 11] may see it, and the read
        // at [3, 4] may still see nothing.
        let calls = [
            op(0, None, Reg::Write(7)),
            op(3, Some(4), Reg::Read(None)),
            op(10, Some(11), Reg::Read(Some(7))),
        ];
        assert_eq!(run(&calls), Verdict::Linearizable);
        // It must apply: with nothing reading it, it still has to fit somewhere.
        let after = [
            op(0, None, Reg::Write(7)),
            op(3, Some(4), Reg::Read(Some(7))),
            op(10, Some(11), Reg::Read(None)),
        ];
        assert!(matches!(run(&after), Verdict::Illegal { .. }));
    }

    #[test]
    fn an_optional_write_may_never_apply() {
        // A create that timed out: it can go neither before the other create nor after it.
        let mut calls = vec![
            op(0, None, Reg::Cas(None, 7)),
            op(3, Some(4), Reg::Cas(None, 1)),
            op(10, Some(11), Reg::Read(Some(1))),
        ];
        assert!(
            matches!(run(&calls), Verdict::Illegal { .. }),
            "a must-apply write has to fit"
        );
        calls[0].must = false;
        assert_eq!(run(&calls), Verdict::Linearizable);
    }

    #[test]
    fn the_state_budget_is_a_timeout_not_a_pass() {
        let calls: Vec<_> = (0..12).map(|i| op(0, Some(100), Reg::Write(i))).collect();
        let budget = Budget {
            deadline: Instant::now() + Duration::from_secs(5),
            max_states: 3,
        };
        let mut with_read = calls.clone();
        with_read.push(op(200, Some(201), Reg::Read(Some(99))));
        assert_eq!(
            search(&with_read, None, step, budget).verdict,
            Verdict::Timeout
        );
    }
}
