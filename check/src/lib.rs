//! Run your own workload on etcd-ha under faults and get a verdict: a local 3-member etcd
//! cluster behind fault proxies, a recorder for what your clients did, the ground truth of
//! what the cluster did, and the checkers of etcd-ha's own robustness suite.
//!
//! What a run proves is what the checkers judge of the recorded [`History`]: every recorded
//! KV operation linearizable (per key) and true to the cluster's own event log (nothing lost,
//! applied twice, or applied though the client said it was not), no client reading below a
//! revision it had already returned, etcd's watch guarantees on every watch you logged (no gap,
//! no duplicate, ordered, `Compacted` only when history really was compacted past the resume
//! point, every watch still open at the end delivering everything), no belief in a lease the
//! server dropped, and at most one holder of an election, lock or leadership at any time.
//!
//! # Layout
//!
//! * [`harness`]: the cluster, its fault proxies, the truth collectors, clients through the
//!   proxies, and the end of a run (heal, end marker, truth, hashes) into a [`History`].
//! * [`faults`]: the faults, drawn from the seed, each healed before the next.
//! * [`record`]: the [`Recorder`] your workload runs its calls through.
//! * [`history`]: what is recorded; it serializes to JSON, so a failing run can be kept and
//!   checked again.
//! * [`check()`]: the verdict, a [`Report`].
//!
//! # Example
//!
//! Needs an etcd binary, as etcd-ha's testkit finds or provisions one (`ETCD_BIN`, the
//! `PATH`, or its cache), and root for the network namespaces of peer partitions.
//!
//! ```no_run
//! use std::time::Duration;
//! use etcd_ha_check::harness::{Harness, HarnessConfig};
//! use etcd_ha_check::history::{History, Request};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let mut harness = Harness::start(HarnessConfig::new(42)).await?;
//! let client = harness.client().await?;
//! let recorder = harness.recorder();
//! let key = format!("{}a", harness.kv_prefix());
//! let workload = tokio::spawn(async move {
//!     for n in 0..100 {
//!         // Every put writes a value no other put writes: the truth tells them apart.
//!         let put = Request::Put { key: key.clone(), value: format!("v{n}"), lease: None };
//!         recorder.kv(&client, 0, 0, put).await;
//!         let get = Request::Get { key: key.clone(), serializable: false };
//!         recorder.kv(&client, 0, 0, get).await;
//!     }
//! });
//! let faults = harness.inject_faults(Duration::from_secs(10)).await;
//! workload.await?;
//! let end = harness.recorder().now();
//! let history = harness.finish(History { faults, end, ..History::default() }).await?;
//! let report = etcd_ha_check::check(&history, Duration::from_secs(60));
//! assert!(report.is_ok(), "{report}");
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod faults;
pub mod harness;
pub mod history;
pub mod record;
pub mod truth;

mod check;

pub use check::{Property, Report, Stats, Violation, check};
pub use harness::{Harness, HarnessConfig, HarnessError};
pub use history::History;
pub use record::Recorder;
