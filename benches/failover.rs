//! The failover benchmark: etcd-ha against the `etcd-client` crate (default and tuned), side by
//! side on real 3-member etcd clusters, under the faults that failover exists for.
//!
//! ```text
//! scripts/failover-bench                  # every scenario, ~3 min (protoc from scripts/protoc-path)
//! scripts/failover-bench leader-kill      # only scenarios named so
//! cargo bench --bench failover --features baseline -- leader-kill  # the same, by hand
//! ```
//!
//! Prints one table per scenario and writes every number to `target/failover-report.json`.
//!
//! # Layout
//!
//! ```text
//! failover/scenario.rs  the faults: whom they hit, the script, how re-election is judged
//! failover/run.rs       one scenario end to end: cluster, clients, loops, fault, read-back
//! failover/clients.rs   the three clients behind one put/get interface
//! failover/workload.rs  one paced, bounded loop of calls, with per-call samples
//! failover/election.rs  the cluster's own re-election time, from Status polls
//! failover/metrics.rs   samples -> throughput, first success, longest gap, errors
//! failover/verify.rs    read-back of every put: lost, ambiguous, applied twice
//! failover/report.rs    the tables and the JSON document
//! failover/json.rs      a minimal JSON writer
//! ```
//!
//! The last two scenarios need the testkit's `FaultProxy` (client-link blackhole) and network
//! namespaces (partition; root and `ip` needed). A scenario that cannot be set up is reported as
//! such and the others still run.

#[path = "failover/clients.rs"]
mod clients;
#[path = "failover/election.rs"]
mod election;
#[path = "failover/json.rs"]
mod json;
#[path = "failover/metrics.rs"]
mod metrics;
#[path = "failover/report.rs"]
mod report;
#[path = "failover/run.rs"]
mod run;
#[path = "failover/scenario.rs"]
mod scenario;
#[path = "failover/verify.rs"]
mod verify;
#[path = "failover/workload.rs"]
mod workload;

use scenario::Scenario;

/// Worker threads of the runtime: the box has 2 cores, shared with three etcd processes.
const WORKER_THREADS: usize = 2;

fn main() {
    // `cargo bench` passes `--bench`; any other argument selects scenarios by name.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let selected: Vec<Scenario> = Scenario::ALL
        .into_iter()
        .filter(|s| filters.is_empty() || filters.iter().any(|f| s.name().contains(f.as_str())))
        .collect();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKER_THREADS)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    print!("{}", report::legend());
    let mut results = Vec::new();
    for scenario in selected {
        match runtime.block_on(run::run(scenario)) {
            Ok(result) => {
                print!("{}", report::table(&result));
                results.push(result);
            }
            Err(e) => println!("\n== {}: could not run: {e}", scenario.name()),
        }
    }

    let path = report::json_path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("creating the target directory");
    }
    std::fs::write(&path, report::json(&results).render()).expect("writing the JSON report");
    println!("\nreport: {}", path.display());
}
