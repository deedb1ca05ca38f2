//! The benchmarks of etcd-ha, as a crate of their own so that none of their dependencies (the
//! etcd-client baseline, clap, serde, hdrhistogram, indicatif, plotters) reaches the library's
//! users. Five binaries: `failover-bench` (the main job), `overhead-bench` (steady state),
//! `lease-scale-bench` (leases kept by one client, next to the server's renewal limit),
//! `cache-bench` (consistent reads from the cache) and `call-cost` (instructions and
//! allocations per call).
//!
//! ```text
//! scripts/failover-bench                      # the default scenarios, 3 trials, ~5 min on 2 cores
//! scripts/failover-bench leader-kill --trials 5 --concurrency 1,16,256
//! scripts/failover-bench leader-move leader-sigterm rolling-sigterm rolling-drain \
//!     --concurrency 1,16,256                   # planned maintenance (also in --all)
//! scripts/failover-bench --endpoints http://a:2379,http://b:2379,http://c:2379 \
//!     --fault-cmd 'ssh a systemctl kill etcd' --heal-cmd 'ssh a systemctl start etcd'
//! scripts/failover-bench leader-kill --etcd-version 3.6.16   # another etcd server
//! ETCD_HA_BENCH_PASSWORD=... scripts/failover-bench --endpoints https://a:2379,https://b:2379 \
//!     --cacert ca.pem --cert client.pem --key client-key.pem --user app
//! ```
//!
//! # Layout
//!
//! ```text
//! cli.rs          the command line (clap) and the plan it asks for
//! access.rs       a user's cluster: TLS files and user, for every client and the bench's own calls
//! server.rs       --etcd-version: the etcd binary of the local clusters, found or built
//! plan.rs         timings, and the run: every fault x load x trial, in order
//! site.rs         where a trial runs: a fresh local cluster, or the user's with shell hooks
//! scenario.rs     the local faults: whom they hit, the script, how re-election is judged
//! trial.rs        one trial end to end: clients, loops, fault, re-election clock, read-back
//! clients.rs      the clients behind one put/get/watch/lease interface
//! goclient.rs     etcd's Go client (clientv3 3.6; 3.4 when named) through a driver (bench/go/)
//! golease.rs      Go's clientv3 keeping many leases in its driver (lease-scale-bench)
//! retry.rs        the retry loop a careful application writes around etcd-client
//! workload.rs     one loop of calls, closed (N tasks) or open (a fixed rate), with samples
//! election.rs     the cluster's own re-election time, from Status polls
//! fanout.rs       cache-bench's local watches: delivery delay next to a server watch's, memory
//! leadership.rs   the leadership probe: each client holds a leadership through the fault
//! lease.rs        the lease probe: each client keeps a lease through the fault
//! keepalive_limit.rs  the server's own renewal rate on bare keep-alive streams (lease-scale-bench)
//! watch_limit.rs  the server's pace with many watchers on one bare Watch stream (watch-scale-bench)
//! maintenance.rs  the planned-maintenance scripts: MoveLeader(s), graceful rolling restarts, drain
//! metrics.rs      one loop's samples -> throughput, gaps, errors, recovery, latency
//! stats.rs        repeated trials -> median / p90 / max, merged latency histograms
//! verify.rs       read-back of every put: lost, ambiguous, applied twice
//! watch.rs        the watch probe: a neutral writer, each client's watch through the fault
//! progress.rs     indicatif on a terminal, plain phase lines otherwise
//! txn.rs          the txn of call-cost and overhead-bench, one shape for every client
//! process.rs      this process's CPU time and resident memory (overhead-bench, lease-scale-bench)
//! callgrind.rs    instructions (callgrind's client requests) and allocations counted (call-cost)
//! report/         the JSON (serde), CSV, SVG timelines (plotters), Markdown and tables
//! bin/            failover-bench, overhead-bench, lease-scale-bench, watch-scale-bench, cache-bench
//!                 and call-cost
//! ```
//!
//! The partition scenario needs network namespaces (root and `ip`); the blackhole scenario
//! needs the testkit's `FaultProxy`. A scenario that cannot be set up is reported as such and
//! the others still run.

#![warn(missing_docs)]

pub mod access;
pub mod callgrind;
pub mod cli;
pub mod clients;
pub mod election;
pub mod fanout;
pub mod goclient;
pub mod golease;
pub mod keepalive_limit;
pub mod leadership;
pub mod lease;
pub mod maintenance;
pub mod metrics;
pub mod plan;
pub mod process;
pub mod progress;
pub mod report;
pub mod retry;
pub mod scale_plot;
pub mod scenario;
pub mod server;
pub mod site;
pub mod stats;
pub mod trial;
pub mod txn;
pub mod verify;
pub mod watch;
pub mod watch_limit;
pub mod workload;
