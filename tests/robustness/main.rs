//! The robustness suite: seeded random faults under a mixed workload, the whole history
//! recorded and checked for linearizability, watch guarantees, lease safety and single
//! leadership (issue 9). `scripts/robustness --seeds N` runs the extended tier.

#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

mod check;
mod history;
