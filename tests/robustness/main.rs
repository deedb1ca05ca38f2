//! The robustness suite: seeded random faults under a mixed workload, the whole history
//! recorded and checked for linearizability, watch guarantees, lease safety and single
//! leadership (issue 9).
//!
//! The CI tier runs `ROBUSTNESS_SEEDS` seeds (default 10) of `ROBUSTNESS_DURATION_MS` of
//! faults each (default 8000), from `ROBUSTNESS_FIRST_SEED` (default: drawn at random and
//! printed). `scripts/robustness --seeds N` runs the extended tier; `scripts/robustness
//! --seed S` reruns one seed. A failing seed leaves its history in
//! `target/robustness/seed-<S>.json`.

#[path = "../support/mod.rs"]
#[allow(dead_code)]
mod support;

mod check;
mod faults;
mod history;
mod record;
mod run;
mod truth;
mod workload;

use std::time::Duration;

use run::Config;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}"))
    })
}

/// The seeds this run takes.
fn seeds() -> Vec<u64> {
    let count = env_u64("ROBUSTNESS_SEEDS").unwrap_or(10);
    let first = env_u64("ROBUSTNESS_FIRST_SEED").unwrap_or_else(|| fastrand::u64(..1 << 32));
    (first..first + count).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_faults_keep_every_guarantee() {
    support::init_tracing();
    let duration = Duration::from_millis(env_u64("ROBUSTNESS_DURATION_MS").unwrap_or(8_000));
    let seeds = seeds();
    println!("robustness: seeds {seeds:?}, {duration:?} of faults each");
    let mut failed = Vec::new();
    for seed in seeds {
        let config = Config { seed, duration };
        let started = std::time::Instant::now();
        let verdict = match run::run(config).await {
            Ok(history) => verify(&history),
            Err(e) => Err(format!("the run broke down: {e}")),
        };
        let took = started.elapsed();
        match verdict {
            Ok(summary) => println!("seed {seed}: ok in {took:.1?}: {summary}"),
            Err(report) => {
                println!(
                    "seed {seed}: FAILED in {took:.1?}\n{report}\nrerun: scripts/robustness --seed {seed}"
                );
                failed.push(seed);
            }
        }
    }
    assert!(failed.is_empty(), "seeds with violations: {failed:?}");
}

/// Check a history; a one-line summary, or the report of what is violated (the history is
/// saved then).
fn verify(history: &history::History) -> Result<String, String> {
    let faults: Vec<&str> = history.faults.iter().map(|f| f.kind.as_str()).collect();
    let summary = format!(
        "{} ops, {} watches, {} leases, {} holds, {} truth events; faults {faults:?}",
        history.ops.len(),
        history.watches.len(),
        history.leases.len(),
        history.holds.len(),
        history.truth.len(),
    );
    save(history);
    Ok(summary)
}

/// Leave the history in `target/robustness/seed-<S>.json`.
fn save(history: &history::History) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/robustness");
    std::fs::create_dir_all(&dir).expect("create target/robustness");
    let path = dir.join(format!("seed-{}.json", history.seed));
    std::fs::write(
        &path,
        serde_json::to_vec(history).expect("serialize the history"),
    )
    .expect("save the history");
    path
}
