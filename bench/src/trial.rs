//! One trial end to end: a prepared site, the chosen clients side by side, their loops, the
//! fault, the cluster's re-election clock, and the read-back of every put.
//!
//! ```text
//! prepare site (fresh cluster, + proxy) -> connect clients -> loops start (clients x 3 loops)
//!   | warm-up
//!   inject fault -> re-election poller starts -> follow-up script (thaw, heal, restart)
//!   | fault window
//! loops stop starting calls -> in-flight calls end (<= deadline) -> settle -> read back
//! (all along: the watch probe's writer, each client's watch of its writes, each client's
//! kept lease, whose existence is checked at the read-back, and each client's leadership)
//! ```

use std::time::Duration;

use futures_util::future::join_all;
use serde::Serialize;
use tokio::time::Instant;

use crate::clients::{BenchClient, ClientKind};
use crate::election::{self, Rule};
use crate::leadership::LeadershipMetrics;
use crate::lease::LeaseMetrics;
use crate::metrics::{self, LoopMetrics, Phases};
use crate::plan::Timing;
use crate::progress::Progress;
use crate::site::{Fault, Site};
use crate::verify::{self, Correctness};
use crate::watch::WatchMetrics;
use crate::workload::{self, Load, LoopKind, LoopPlan, Sample};

/// Wait between the end of the loops and the read-back, so that puts abandoned at their
/// deadline but already in raft's pipeline are applied and show up as "errored but applied".
const SETTLE: Duration = Duration::from_millis(500);

/// How long the watchers go on after the writer stopped: 1 s, for the events of the last
/// writes to arrive (a healthy watch delivers in milliseconds).
const WATCH_DRAIN: Duration = Duration::from_secs(1);

/// What one loop of one client did in one trial.
#[derive(Debug, Serialize)]
pub struct LoopTrial {
    /// Which loop.
    #[serde(rename = "loop")]
    pub kind: LoopKind,
    /// Its numbers.
    pub metrics: LoopMetrics,
    /// Every call it made.
    pub samples: Vec<Sample>,
}

/// What one client did in one trial.
#[derive(Debug, Serialize)]
pub struct ClientTrial {
    /// Which client.
    pub client: ClientKind,
    /// Set if it could not connect or make its first put; then it has no loops.
    pub error: Option<String>,
    /// Its loops, in [`LoopKind::ALL`] order.
    pub loops: Vec<LoopTrial>,
    /// The read-back of its puts.
    pub read_back: Correctness,
    /// What its watch of the probe's writes saw.
    pub watch: Option<WatchMetrics>,
    /// How it kept its lease.
    pub lease: Option<LeaseMetrics>,
    /// How it held its leadership.
    pub leadership: Option<LeadershipMetrics>,
}

/// Everything one trial measured.
#[derive(Debug, Serialize)]
pub struct TrialRecord {
    /// 1, 2, 3, ...
    pub trial: usize,
    /// The etcd version the cluster ran.
    pub etcd_version: String,
    /// The member the fault hit.
    pub target: String,
    /// The leader before the fault.
    pub old_leader: String,
    /// The leader the re-election poller saw after it, if any.
    pub new_leader: Option<String>,
    /// When the fault started, was undone, and when the window ended.
    pub phases: Phases,
    /// How the re-election was judged; `None` when the leader does not move.
    pub rule: Option<Rule>,
    /// The cluster's re-election time in ms; `None` if not measured or not within the window.
    pub reelection_ms: Option<f64>,
    /// Set if the fault or its follow-up (thaw, heal, restart, a hook) failed.
    pub fault_error: Option<String>,
    /// One entry per client, in the order asked for.
    pub clients: Vec<ClientTrial>,
}

/// What a trial is asked to do.
pub struct TrialSpec<'a> {
    /// The fault and where.
    pub fault: &'a Fault,
    /// The clients, side by side.
    pub clients: &'a [ClientKind],
    /// How the loops drive calls.
    pub load: Load,
    /// Warm-up, window, hold, deadline.
    pub timing: Timing,
    /// Where a local cluster keeps its data; `None`: the system's temp dir.
    pub data_dir: Option<&'a std::path::Path>,
    /// The etcd binary of a local cluster (`--etcd-version`); `None`: the testkit's.
    pub etcd_bin: Option<&'a std::path::Path>,
    /// Its number, 1-based.
    pub trial: usize,
    /// Where its keys go: `<root><client>/` (unique per trial on a user's cluster).
    pub key_root: String,
}

/// Runs one trial; errors if its site cannot be prepared.
pub async fn run(spec: TrialSpec<'_>, progress: &Progress) -> Result<TrialRecord, String> {
    // A scripted fault may need a longer window than the run's (a rolling restart).
    let asked = spec.timing;
    let window = spec.fault.window(asked.window);
    let timing = if window == asked.window {
        asked
    } else {
        Timing::new(window, asked.deadline)
    };
    progress.phase("preparing the cluster");
    let mut site = Site::prepare(spec.fault, spec.data_dir, spec.etcd_bin).await?;
    let prefix = |kind: ClientKind| format!("{}{}/", spec.key_root, kind.name());

    progress.phase("connecting the clients");
    let connected =
        join_all(
            spec.clients.iter().map(|&kind| {
                let (endpoints, access) = (&site.client_endpoints, &site.access);
                let prefix = prefix(kind);
                async move {
                    BenchClient::connect(kind, endpoints, access, &prefix, timing.deadline).await
                }
            }),
        )
        .await;

    // The watch probe's neutral writer: an etcd-ha client of its own, so that no client under
    // test writes what the watchers are judged on.
    let writer = etcd_ha::Client::connect(&site.client_endpoints, site.access.ha_options())
        .await
        .map_err(|e| format!("the watch probe's writer could not connect: {e}"))?;

    let start = Instant::now();
    let fault_at = start + timing.warmup;
    let window_end = fault_at + timing.window;
    let watch_prefix = format!("{}watch/", spec.key_root);
    let watch_until = window_end + WATCH_DRAIN;
    let mut watchers = Vec::new();
    let mut keepers = Vec::new();
    let mut holders = Vec::new();
    let mut loops = Vec::new();
    for (&kind, connected) in spec.clients.iter().zip(&connected) {
        let Ok(connected) = connected else { continue };
        // One entry per connected client in each list, `None` where it runs no such probe.
        watchers.push(
            connected
                .watch
                .clone()
                .map(|watch| tokio::spawn(watch.watch(watch_prefix.clone(), start, watch_until))),
        );
        keepers.push(
            connected
                .lease
                .clone()
                .map(|lease| tokio::spawn(lease.keep(start, window_end))),
        );
        let election = format!("{}leader/{}", spec.key_root, kind.name());
        holders.push(
            connected
                .leadership
                .clone()
                .map(|holder| tokio::spawn(holder.hold(election, start, window_end))),
        );
        let client = &connected.client;
        for &loop_kind in kind.loops() {
            let plan = LoopPlan {
                kind: loop_kind,
                client: client.clone(),
                client_name: kind.name(),
                prefix: prefix(kind),
                start,
                stop_at: window_end,
                load: spec.load,
                deadline: timing.deadline,
            };
            loops.push(tokio::spawn(workload::run(plan)));
        }
    }

    let writes = tokio::spawn(crate::watch::write(
        writer.kv(),
        watch_prefix,
        start,
        window_end,
    ));

    progress.phase("warm-up");
    tokio::time::sleep_until(fault_at).await;
    progress.phase("fault");
    let injected_ok = site.inject().await;
    // The clocks start once the fault is in effect (a kill has reaped the process, a hook has
    // exited), so that no call that slipped in just before counts as a success "after" it.
    let injected = Instant::now();
    let poller = site.rule.map(|rule| {
        let (access, watched) = (site.access.clone(), site.watched.clone());
        tokio::spawn(election::measure(
            access, watched, rule, injected, window_end,
        ))
    });
    let follow_up = match injected_ok {
        Ok(()) => {
            // The etcd-ha client under test, for the scenarios that drain with it.
            let drainer = connected
                .iter()
                .find_map(|c| c.as_ref().ok().and_then(|c| c.ha.as_ref()));
            site.follow_up(injected, timing.hold, drainer).await
        }
        Err(e) => Err(e),
    };
    let (healed, fault_error) = match follow_up {
        Ok(healed) => (healed, None),
        Err(e) => (None, Some(e)),
    };
    progress.phase("recovery");
    tokio::time::sleep_until(window_end).await;

    progress.phase("draining calls in flight");
    let mut samples = Vec::new();
    for task in loops {
        samples.push(task.await.expect("a workload loop panicked"));
    }
    let writes = writes.await.expect("the watch probe's writer panicked");
    let mut watched = Vec::new();
    for task in watchers {
        watched.push(match task {
            Some(task) => Some(task.await.expect("a watcher panicked")),
            None => None,
        });
    }
    drop(writer);
    let mut kept = Vec::new();
    for task in keepers {
        kept.push(match task {
            Some(task) => Some(task.await.expect("a lease keeper panicked")),
            None => None,
        });
    }
    let mut holds = Vec::new();
    for task in holders {
        holds.push(match task {
            Some(task) => Some(task.await.expect("a leadership holder panicked")),
            None => None,
        });
    }
    let reelection = match poller {
        Some(task) => task.await.expect("the re-election poller panicked"),
        None => None,
    };
    let connect_errors: Vec<Option<String>> = connected.into_iter().map(|c| c.err()).collect();
    tokio::time::sleep(SETTLE).await;

    progress.phase("reading back");
    let micros = |t: Instant| (t - start).as_micros() as u64;
    let phases = Phases {
        fault_us: micros(injected),
        heal_us: healed.map(micros),
        hold_end_us: micros(injected + timing.hold),
        window_end_us: micros(window_end),
    };
    let mut clients = Vec::new();
    let mut samples = samples.into_iter();
    let mut watched = watched.into_iter();
    let mut kept = kept.into_iter();
    let mut holds = holds.into_iter();
    for (&kind, error) in spec.clients.iter().zip(connect_errors) {
        let mut loops = Vec::new();
        let mut read_back = Correctness::default();
        let mut watch = None;
        let mut lease = None;
        let mut leadership = None;
        if error.is_none() {
            let held = holds.next().expect("one holder entry per connected client");
            leadership = held.map(|held| crate::leadership::evaluate(held, phases.fault_us));
            let keeper = kept.next().expect("one keeper entry per connected client");
            if let Some(keeper) = keeper {
                let gone = match keeper.lease_id {
                    Some(id) => crate::lease::is_gone(&site.access, &site.endpoints, id).await,
                    None => None,
                };
                lease = Some(crate::lease::evaluate(keeper, phases.fault_us, gone));
            }
            let seen = watched
                .next()
                .expect("one watcher entry per connected client");
            watch = seen.map(|seen| crate::watch::evaluate(&writes, seen, phases.fault_us));
            for &kind in kind.loops() {
                let samples = samples.next().expect("one sample set per loop");
                let metrics = metrics::summarize(&samples, &phases);
                loops.push(LoopTrial {
                    kind,
                    metrics,
                    samples,
                });
            }
            let puts = loops.iter().find(|l| l.kind == LoopKind::Put);
            let puts = &puts.expect("a put loop").samples;
            let (access, endpoints) = (&site.access, &site.endpoints);
            read_back = verify::check(access, endpoints, &prefix(kind), kind.name(), puts).await;
        }
        clients.push(ClientTrial {
            client: kind,
            error,
            loops,
            read_back,
            watch,
            lease,
            leadership,
        });
    }
    if site.is_external() {
        verify::delete_prefix(&site.access, &site.endpoints, &spec.key_root).await;
    }
    Ok(TrialRecord {
        trial: spec.trial,
        etcd_version: site.etcd_version.clone(),
        target: site.target.clone(),
        old_leader: site.old_leader.clone(),
        new_leader: reelection.map(|r| site.member_name(r.leader)),
        phases,
        rule: site.rule,
        reelection_ms: reelection.map(|r| metrics::ms(r.after)),
        fault_error,
        clients,
    })
}
