//! Runs one scenario end to end: a fresh 3-member cluster, the three clients side by side, the
//! fault, the cluster's re-election clock, and the read-back.
//!
//! ```text
//! start cluster (+ proxy) -> connect clients -> loops start (9 tasks: 3 clients x put/get/get)
//!   | warm-up 3 s
//!   inject fault -> re-election poller starts -> follow-up script (thaw, restart)
//!   | fault window 12 s
//! loops stop starting calls -> in-flight calls end (<= 1 s) -> settle 1 s -> read back
//! ```

use std::time::Duration;

use etcd_ha::testkit::FaultProxy;
use futures_util::future::join_all;
use tokio::time::Instant;

use crate::clients::{BenchClient, ClientKind};
use crate::election::{self, Rule};
use crate::metrics::{self, LoopMetrics, Phases};
use crate::scenario::{FAULT_WINDOW, Rig, Scenario};
use crate::verify::{self, Correctness};
use crate::workload::{self, LoopKind, LoopPlan, Sample};

/// The warm-up window before the fault: 3 s, 300 calls per loop at full pace, enough for a
/// stable "before" throughput.
pub const WARMUP: Duration = Duration::from_secs(3);

/// Wait between the end of the loops and the read-back, so that puts abandoned at their
/// deadline but already in raft's pipeline are applied and show up as "errored but applied".
const SETTLE: Duration = Duration::from_secs(1);

/// How long the fresh cluster may take to agree on a leader.
const LEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// What one loop of one client did.
#[derive(Debug)]
pub struct LoopResult {
    /// Which loop.
    pub kind: LoopKind,
    /// Its numbers.
    pub metrics: LoopMetrics,
}

/// What one client did in a scenario.
#[derive(Debug)]
pub struct ClientResult {
    /// Which client.
    pub client: ClientKind,
    /// Its three loops, in [`LoopKind::ALL`] order.
    pub loops: Vec<LoopResult>,
    /// The read-back of its puts.
    pub correctness: Correctness,
}

/// Everything one scenario measured.
#[derive(Debug)]
pub struct ScenarioResult {
    /// Which scenario.
    pub scenario: Scenario,
    /// The etcd version the cluster ran.
    pub etcd_version: String,
    /// The name of the member the fault hit ("m1"), or "all".
    pub target: String,
    /// The name of the leader before the fault.
    pub old_leader: String,
    /// When the fault started and the window ended, relative to the loops' start.
    pub phases: Phases,
    /// How the re-election was judged; `None` when the leader does not move.
    pub rule: Option<Rule>,
    /// The cluster's re-election time; `None` if not measured or not within the window.
    pub reelection: Option<Duration>,
    /// A note when the scenario departs from the common setup.
    pub note: Option<&'static str>,
    /// Set if the fault or its follow-up (thaw, heal, restart) failed.
    pub fault_error: Option<String>,
    /// One entry per client, in [`ClientKind::ALL`] order.
    pub clients: Vec<ClientResult>,
}

/// The key prefix of `client`'s loops; distinct per client, so the read-back of one client
/// never sees another's keys.
fn prefix(client: ClientKind) -> String {
    format!("failover/{}/", client.name())
}

/// A cluster ready for a scenario: who leads, whom the fault hits, where the clients connect.
struct Setup {
    /// The cluster and its proxy.
    rig: Rig,
    /// Index of the leader before the fault.
    leader: usize,
    /// Its raft member id.
    leader_id: u64,
    /// The member the fault hits; `None` for all of them.
    target: Option<usize>,
    /// The members' own URLs, for the re-election poller and the read-back.
    endpoints: Vec<String>,
    /// What the clients are given: the same, except the proxy's URL for a proxied target.
    client_endpoints: Vec<String>,
}

/// Starts a fresh cluster for `scenario`, finds the leader and puts a proxy in front of the
/// target if the scenario needs one.
async fn set_up(scenario: Scenario) -> Result<Setup, String> {
    let cluster = scenario
        .builder()
        .start()
        .await
        .map_err(|e| e.to_string())?;
    let leader = cluster
        .leader(LEADER_TIMEOUT)
        .await
        .map_err(|e| e.to_string())?;
    let leader_id = cluster.member_id(leader).await.map_err(|e| e.to_string())?;
    let target = scenario.target(leader, cluster.len());
    let endpoints = cluster.endpoints();
    let mut client_endpoints = endpoints.clone();
    let proxy = match target.filter(|_| scenario.needs_proxy()) {
        Some(i) => {
            let proxy = FaultProxy::start(cluster.client_addr(i))
                .map_err(|e| format!("starting the fault proxy: {e}"))?;
            client_endpoints[i] = proxy.url("http");
            Some(proxy)
        }
        None => None,
    };
    Ok(Setup {
        rig: Rig { cluster, proxy },
        leader,
        leader_id,
        target,
        endpoints,
        client_endpoints,
    })
}

/// Runs `scenario` on a fresh cluster; errors if the cluster (or its proxy) cannot be set up.
pub async fn run(scenario: Scenario) -> Result<ScenarioResult, String> {
    let Setup {
        mut rig,
        leader,
        leader_id,
        target,
        endpoints,
        client_endpoints,
    } = set_up(scenario).await?;

    let ha_options = scenario.ha_options();
    let clients = join_all(ClientKind::ALL.map(|kind| {
        let (endpoints, options) = (&client_endpoints, ha_options.clone());
        async move { BenchClient::connect(kind, endpoints, &prefix(kind), options).await }
    }))
    .await;

    let start = Instant::now();
    let fault_at = start + WARMUP;
    let window_end = fault_at + FAULT_WINDOW;
    let mut loops = Vec::new();
    for (kind, client) in ClientKind::ALL.into_iter().zip(&clients) {
        for loop_kind in LoopKind::ALL {
            let plan = LoopPlan {
                kind: loop_kind,
                client: client.clone(),
                client_name: kind.name(),
                prefix: prefix(kind),
                start,
                stop_at: window_end,
            };
            loops.push(tokio::spawn(workload::run(plan)));
        }
    }

    tokio::time::sleep_until(fault_at).await;
    let injected_ok = scenario.inject(&mut rig, target);
    // The clocks start once the fault is in effect (a kill has reaped the process), so that no
    // call that slipped in just before counts as a success "after" it.
    let injected = Instant::now();
    let watched: Vec<String> = (0..endpoints.len())
        .filter(|&i| Some(i) != target)
        .map(|i| endpoints[i].clone())
        .collect();
    let rule = scenario.rule(leader_id);
    let poller =
        rule.map(|rule| tokio::spawn(election::measure(watched, rule, injected, window_end)));
    let fault_error = match injected_ok {
        Ok(()) => scenario.follow_up(&mut rig, target, injected).await,
        Err(e) => Err(e),
    }
    .err()
    .map(|e| e.to_string());
    tokio::time::sleep_until(window_end).await;

    let mut samples: Vec<Vec<Sample>> = Vec::new();
    for task in loops {
        samples.push(task.await.expect("a workload loop panicked"));
    }
    let reelection = match poller {
        Some(task) => task.await.expect("the re-election poller panicked"),
        None => None,
    };
    drop(clients);
    tokio::time::sleep(SETTLE).await;

    let phases = Phases {
        fault_at: injected - start,
        window_end: window_end - start,
    };
    let clients = evaluate(&samples, phases, &endpoints).await;
    let cluster = &rig.cluster;
    Ok(ScenarioResult {
        scenario,
        etcd_version: cluster.etcd_version().to_string(),
        target: target.map_or_else(|| "all".to_string(), |i| cluster.member_name(i).to_string()),
        old_leader: cluster.member_name(leader).to_string(),
        note: scenario.note(),
        phases,
        rule,
        reelection,
        fault_error,
        clients,
    })
}

/// Metrics of every loop and the read-back of every client, from the loops' samples (in
/// client-major order: [`ClientKind::ALL`] x [`LoopKind::ALL`]).
async fn evaluate(
    samples: &[Vec<Sample>],
    phases: Phases,
    endpoints: &[String],
) -> Vec<ClientResult> {
    let put_loop = LoopKind::ALL.iter().position(|&k| k == LoopKind::Put);
    let put_loop = put_loop.expect("a put loop");
    let mut results = Vec::new();
    for (kind, client_samples) in ClientKind::ALL
        .into_iter()
        .zip(samples.chunks(LoopKind::ALL.len()))
    {
        let loops = LoopKind::ALL
            .into_iter()
            .zip(client_samples)
            .map(|(loop_kind, s)| LoopResult {
                kind: loop_kind,
                metrics: metrics::summarize(s, phases),
            })
            .collect();
        let puts = &client_samples[put_loop];
        let correctness = verify::check(endpoints, &prefix(kind), kind.name(), puts).await;
        results.push(ClientResult {
            client: kind,
            loops,
            correctness,
        });
    }
    results
}
