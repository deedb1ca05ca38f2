//! One seed, start to end, on the companion crate's harness: a 3-member cluster in its own
//! network namespaces behind fault proxies, three clients through the proxies (two busy, one
//! idle but for its watches "from now"), the ground-truth collectors, the workload and the
//! fault schedule; then everything healed, the workload stopped, an end marker written that
//! every open watch must deliver, and the truth and the members' hashes collected.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_ha_check::faults::Fault;
use etcd_ha_check::{Harness, HarnessConfig, HarnessError, History};

use crate::workload::{self, Ctx};

/// How one seed runs.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub seed: u64,
    /// How long faults are injected under the workload.
    pub duration: Duration,
    /// How many faults are injected at least, past `duration` if need be.
    pub min_faults: usize,
}

impl Config {
    /// Auth (with a 2 s token TTL) on every third seed.
    pub fn auth(&self) -> bool {
        self.seed % 3 == 2
    }
}

/// The faults this run draws from: every one, or those `ROBUSTNESS_FAULTS` names (comma
/// separated, as they print), for a run aimed at one kind of bug (a mutant's run). A name no
/// fault has stops the run.
fn faults_from_env() -> Vec<Fault> {
    let Ok(names) = std::env::var("ROBUSTNESS_FAULTS") else {
        return Fault::ALL.to_vec();
    };
    names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|name| {
            Fault::from_name(name)
                .unwrap_or_else(|| panic!("ROBUSTNESS_FAULTS: no fault is called {name:?}"))
        })
        .collect()
}

/// Run one seed; the recorded history, or why the run itself broke down.
pub async fn run(config: Config) -> Result<History, HarnessError> {
    let setup = |what: &str, e: etcd_ha::Error| HarnessError::Setup(format!("{what}: {e}"));
    let harness_config = HarnessConfig::new(config.seed)
        .with_auth(config.auth())
        .with_faults(faults_from_env())
        .with_min_faults(config.min_faults);
    let mut harness = Harness::start(harness_config).await?;
    let prefix = harness.prefix().to_owned();
    let mut clients = Vec::new();
    for _ in 0..2 {
        clients.push(harness.client().await.map_err(|e| setup("client", e))?);
    }
    let idle = harness
        .client()
        .await
        .map_err(|e| setup("idle client", e))?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (finish, finished) = tokio::sync::watch::channel(false);
    let ctx = Ctx {
        seed: config.seed,
        prefix: prefix.clone(),
        recorder: harness.recorder(),
        stop: stopped,
        finish: finished,
        watches: Arc::new(Mutex::new(Vec::new())),
        leases: Arc::new(Mutex::new(Vec::new())),
        holds: Arc::new(Mutex::new(Vec::new())),
        abandoned: Arc::new(Mutex::new(Vec::new())),
    };
    let mut tasks = workload::start(&ctx, &clients, &idle);
    let faults = harness.inject_faults(config.duration).await;
    let end = harness.recorder().now();
    let _ = stop.send(true);
    // The end marker, under every watched prefix: the open watches follow until they deliver
    // it, for at most WATCH_DRAIN (the liveness check judges the ones that did not).
    let end_marker = workload::watch::end_marker(&prefix);
    harness.write_end_marker(&end_marker).await?;
    let drained = tokio::time::timeout(WATCH_DRAIN, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        let _ = finish.send(true);
    }
    let joined = tokio::time::timeout(Duration::from_secs(30), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if joined.is_err() {
        tasks.abort_all();
        return Err(HarnessError::Broken(
            "the workload did not stop within 30 s of being told to".into(),
        ));
    }
    harness
        .finish(History {
            watches: take(&ctx.watches),
            leases: take(&ctx.leases),
            holds: take(&ctx.holds),
            abandoned: take(&ctx.abandoned),
            faults,
            end,
            end_marker: Some(end_marker),
            ..History::default()
        })
        .await
}

/// How long open watches get to deliver the end marker once it is written (a healthy
/// cluster, after a second of calm: a live watch needs milliseconds).
const WATCH_DRAIN: Duration = Duration::from_secs(10);

/// What a workload log holds, taken out of it.
fn take<T>(logs: &Mutex<Vec<T>>) -> Vec<T> {
    std::mem::take(&mut *logs.lock().unwrap())
}
