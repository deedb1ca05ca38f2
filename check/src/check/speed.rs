//! The linearizability search on histories of the size a robustness run records (10 keys,
//! 8 processes, 3,000 operations, 20% of writes `Unknown`), timed.
//!
//! Measured (debug build, as `cargo test` runs it, on 2 cores shared with other builds): about
//! 2,400 of the 3,000 operations reach the search (failed ones and serializable reads do not);
//! it takes 13-28 ms and memoizes 2,600-3,000 states, whole check 22-50 ms, with 0%, 5% or 20%
//! of operations stalled 0.1-2 s through a fault. Refuting one bad read in the middle of a key
//! (every order up to it exhausted) takes the same 14 ms and 2,500 states. Giving applied
//! `Unknown` writes a return at +infinity instead of their `seen_at` changed nothing measurable
//! (15-18 ms). Unique values and frequent reads pin the register, so the memo stays near one
//! state per operation; the budget is there for a pathological history, not for these.

use std::time::{Duration, Instant};

use super::report::Property;
use super::sim::{MS, Shape, Sim, workload};
use crate::history::{History, Outcome, Response};

/// `stall`: the share of operations that hang through a fault (0.1 to 2 s).
fn realistic(seed: u64, stall: f64) -> History {
    let mut sim = Sim::new("/rb/", 1_000);
    let shape = Shape {
        seed,
        keys: 10,
        processes: 8,
        ops: 3_000,
        unknown_writes: 0.2,
        think: 2 * MS,
        stall,
        from: 0,
    };
    sim.run(workload(shape, "/rb/"));
    let end = sim.h.ops.iter().map(|op| op.ret).max().unwrap_or(0);
    sim.finish(end)
}

#[test]
fn realistic_history_is_checked_in_budget() {
    for (seed, stall) in [(1, 0.0), (2, 0.0), (3, 0.05), (4, 0.05), (5, 0.2)] {
        let h = realistic(seed, stall);
        let started = Instant::now();
        let report = super::check(&h, Duration::from_secs(60));
        let s = &report.stats;
        println!(
            "seed {seed}, stalled {stall}: {} ops, {} searched on {} keys: search {:?} ({} \
             states), whole check {:?}",
            h.ops.len(),
            s.linearizable_ops,
            s.linearizable_keys,
            s.search_time,
            s.states_explored,
            started.elapsed()
        );
        assert!(report.is_ok(), "{report}");
    }
}

#[test]
fn realistic_history_with_one_bad_read_is_refuted_in_budget() {
    for (seed, stall) in [(6, 0.05), (7, 0.2)] {
        refuted(seed, stall);
    }
}

fn refuted(seed: u64, stall: f64) {
    let mut h = realistic(seed, stall);
    // A refused cas in the middle reads a value nobody wrote: the search must exhaust every
    // order of the key's operations up to it.
    let refused: Vec<usize> = (0..h.ops.len())
        .filter(|&i| {
            matches!(
                h.ops[i].outcome,
                Outcome::Ok(Response::Cas {
                    succeeded: false,
                    ..
                })
            )
        })
        .collect();
    let op = &mut h.ops[refused[refused.len() / 2]];
    if let Outcome::Ok(Response::Cas { value, .. }) = &mut op.outcome {
        *value = Some("from nowhere".into());
    }
    let report = super::check(&h, Duration::from_secs(60));
    println!(
        "seed {seed}, stalled {stall}: refuted in {:?} ({} states)\n{report}",
        report.stats.search_time, report.stats.states_explored
    );
    assert!(report.has(Property::Linearizability));
    assert!(!report.has(Property::LinearizabilityTimeout));
}
