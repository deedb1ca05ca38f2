//! The checkers: each judges one property of a recorded [`History`](super::history::History).
//!
//! # Layout
//!
//! * `report.rs`: [`Report`], [`Violation`], [`Property`] and how a verdict prints.
//! * `keyspace.rs`: the ground truth indexed (a key's state at any revision).
//! * `wellformed.rs`: the history is what the harness promises, the truth self-consistent.
//! * `truth.rs`: writes against the truth (lost, duplicated, failed-but-applied, real time).
//! * `wgl.rs` + `linearizable.rs`: per-key linearizability (Wing & Gong / Lowe).
//! * `stale.rs`: linearizable reads against the global revision order.
//! * `reads.rs`: serializable reads and a cache's `AtLeast` reads against the truth at their
//!   revision (and the token).
//! * `monotonic.rs`: no client reads below a revision it has already returned.
//! * `watch.rs`: etcd's watch guarantees on each user-visible stream.
//! * `watch_life.rs`: how each watch began and ended (from now, compacted truly, no other
//!   error, live to the end of the run).
//! * `lease.rs`: no belief in, nor late `lost()` for, a lease the server dropped.
//! * `leadership.rs`: disjoint holds, fenced writes only by the owner.
//! * `orphans.rs`: campaigns and locks given up in flight leave no key behind.
//! * `show.rs`: one-line renderings for the report.
//! * tests only: `sim.rs` (a tiny etcd that records consistent histories), `fixture.rs`
//!   (a valid history), `selftest.rs`, `selftest_promises.rs` and `selftest_cache.rs`
//!   (planted bugs), `speed.rs`
//!   (the search on a realistic history).

mod keyspace;
mod leadership;
mod lease;
mod linearizable;
mod monotonic;
mod orphans;
mod reads;
mod report;
mod show;
mod stale;
mod truth;
mod watch;
mod watch_life;
mod wellformed;
mod wgl;

#[cfg(test)]
mod fixture;
#[cfg(test)]
mod selftest;
#[cfg(test)]
mod selftest_cache;
#[cfg(test)]
mod selftest_promises;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod speed;

use std::time::Duration;

use crate::history::History;

// The harness's API; the self-tests use only part of it.
#[allow(unused_imports)]
pub use report::{Property, Report, Stats, Violation};

/// Judges `history`: every property, with `budget` for the linearizability search (running
/// out of it is a violation, never a pass).
pub fn check(history: &History, budget: Duration) -> Report {
    let mut report = Report {
        seed: history.seed,
        ..Report::default()
    };
    let truth = keyspace::Keyspace::new(history);
    wellformed::check(history, &mut report);
    truth::check(history, &truth, &mut report);
    stale::check(history, &truth, &mut report);
    reads::check(history, &truth, &mut report);
    monotonic::check(history, &mut report);
    watch::check(history, &truth, &mut report);
    watch_life::check(history, &truth, &mut report);
    lease::check(history, &truth, &mut report);
    leadership::check(history, &truth, &mut report);
    orphans::check(history, &truth, &mut report);
    // Last: the slowest, and the one the cheaper checks above usually explain.
    linearizable::check(history, &truth, budget, &mut report);
    report
}
