//! Adaptive hedging and suspicion on a real 3-member cluster (issue 12): a stalled follower
//! costs serializable reads a few milliseconds, not the 300 ms attempt timeout; leader-bound
//! writes do not notice it; and on a healthy cluster hedging adds at most 2 % requests and
//! ejects nobody, at 1, 16 and 256 callers.
//!
//! Each test prints its numbers on lines starting with `adaptive:` (run with `--nocapture`).
//! The stall tests run `ETCD_HA_RUNS` times (default 1) on one cluster and print the median and
//! the maximum of the longest gaps.
//! They measure latency, so they run one at a time (see [`SERIAL`]) whatever `--test-threads`
//! says: two clusters and 256 callers at once on two cores would measure the box.

mod support;

use std::sync::Arc;
use std::time::Duration;

use etcd_ha::testkit::{Cluster, FaultProxy, Mode};
use etcd_ha::{CallStats, Client, GetOptions, Options, PutOptions};
use tokio::time::Instant;

/// The application's own deadline per request, as in the measurements.
const DEADLINE: Duration = Duration::from_secs(1);

/// The target for the longest gap between serializable reads through a stalled member
/// is 30 ms (median of runs); one run's assertion leaves room for a loaded 2-core CI box (55 ms
/// was seen there with 9 ms before the fault) and still fails a fixed 300 ms hedge by far.
const GAP_BOUND: Duration = Duration::from_millis(80);

/// What the fault itself may add to the longest gap the box showed before it: when other work
/// shares the box, a healthy cluster already shows gaps of 50 ms (measured), and the stall must
/// not cost more than the target on top of that.
const GAP_TARGET: Duration = Duration::from_millis(30);

/// Traffic before the fault: every member's latency window fills (thousands of reads).
const WARMUP: Duration = Duration::from_millis(1500);

/// How long the fault lasts: past the prober's ejection (interval + timeout, 1.5 s) and a few
/// suspicion holds, so every stage of the stall is measured.
const FAULT: Duration = Duration::from_secs(3);

/// Held by each test for its whole run: one cluster and one workload at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One finished call: when it started (from the run's start) and how long it took.
#[derive(Clone, Copy, Debug)]
struct Sample {
    start: Duration,
    took: Duration,
    ok: bool,
}

fn options() -> Options {
    Options::new().with_request_timeout(DEADLINE)
}

/// The longest time between two successive successes within `[from, to]` (sequential calls:
/// the longest call, or a run of failures).
fn longest_gap(samples: &[Sample], from: Duration, to: Duration) -> Duration {
    let mut last = from;
    let mut gap = Duration::ZERO;
    for s in samples.iter().filter(|s| s.ok) {
        let end = s.start + s.took;
        if end < from || s.start > to {
            continue;
        }
        gap = gap.max(end.saturating_sub(last));
        last = end;
    }
    gap
}

fn quantile(samples: &[Sample], from: Duration, to: Duration, q: f64) -> Duration {
    let mut took: Vec<Duration> = samples
        .iter()
        .filter(|s| s.ok && s.start >= from && s.start < to)
        .map(|s| s.took)
        .collect();
    if took.is_empty() {
        return Duration::ZERO;
    }
    took.sort();
    took[((took.len() - 1) as f64 * q).round() as usize]
}

/// Sequential calls made by `call` until `stop` is set; returns what each did.
async fn sequential<F, Fut>(t0: Instant, stop: Arc<tokio::sync::Notify>, call: F) -> Vec<Sample>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut samples = Vec::new();
    let stopped = stop.notified();
    tokio::pin!(stopped);
    loop {
        let start = Instant::now();
        tokio::select! {
            // The run is over.
            () = &mut stopped => return samples,
            // One call finished.
            ok = call() => samples.push(Sample {
                start: start - t0,
                took: start.elapsed(),
                ok,
            }),
        }
    }
}

/// How many times each stall test runs (`ETCD_HA_RUNS`, default 1).
fn runs() -> usize {
    std::env::var("ETCD_HA_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1)
}

/// Run `one` (a stall test's run, returning its longest gap during the fault) [`runs`] times
/// with the client's endpoints healthy again before each; prints the median and the maximum.
async fn repeated<F, Fut>(name: &str, client: &Client, mut one: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Duration>,
{
    let mut gaps = Vec::new();
    for _ in 0..runs() {
        support::all_healthy(client).await;
        gaps.push(one().await);
    }
    let mut sorted = gaps.clone();
    sorted.sort();
    eprintln!(
        "adaptive: {name}: {} runs, longest gap median {:?}, max {:?} (target {GAP_TARGET:?}): \
         {gaps:?}",
        gaps.len(),
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
    );
}

/// Sequential serializable reads for warm-up + fault + 1 s while `fault` runs after the
/// warm-up; checks the gap and the errors, prints the numbers and returns the gap.
async fn reads_through_a_stall<F, Fut>(name: &str, client: &Client, fault: F) -> Duration
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let key = support::unique(name);
    client
        .kv()
        .put(key.as_str(), "v", PutOptions::new())
        .await
        .unwrap();
    let t0 = Instant::now();
    let stop = Arc::new(tokio::sync::Notify::new());
    let reader = {
        let client = client.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            sequential(t0, stop, || async {
                client
                    .kv()
                    .get(key.as_str(), GetOptions::new().with_serializable())
                    .await
                    .is_ok()
            })
            .await
        })
    };
    tokio::time::sleep(WARMUP).await;
    let before = client.call_stats();
    let fault_at = t0.elapsed();
    fault().await;
    let end = t0.elapsed();
    stop.notify_one();
    let samples = reader.await.unwrap();
    let run = client.call_stats().since(&before);

    let gap_before = longest_gap(&samples, Duration::ZERO, fault_at);
    let gap = longest_gap(&samples, fault_at, end);
    let errors = samples.iter().filter(|s| !s.ok).count();
    let slow: Vec<String> = samples
        .iter()
        .filter(|s| s.start >= fault_at && s.took >= Duration::from_millis(3))
        .map(|s| format!("{:?}@+{:?}", s.took, s.start - fault_at))
        .collect();
    eprintln!(
        "adaptive: {name}: {} reads, longest gap {gap:?} during the fault ({gap_before:?} \
         before), p50 {:?}, {errors} errors, {} hedges ({} early, {} refused), {} suspicions, \
         {} ejections; calls >= 3 ms after the fault: {slow:?}",
        samples.len(),
        quantile(&samples, Duration::ZERO, end, 0.5),
        run.hedges,
        run.early_hedges,
        run.hedges_refused,
        run.suspicions,
        run.ejections,
    );
    assert_eq!(errors, 0, "{name}: serializable reads failed");
    let bound = GAP_BOUND.max(gap_before + GAP_TARGET);
    assert!(
        gap <= bound,
        "{name}: reads stalled for {gap:?} ({gap_before:?} before the fault)"
    );
    gap
}

/// The cluster, its leader and a follower. In memory: these tests bound gaps of a few tens of
/// ms, and on the machine's shared disk a member's fsync alone stalled puts for 290-630 ms on a
/// loaded box, with no fault and the same with or without the client's changes (measured with
/// two background CPU burners; CI failed on one of 389 ms).
async fn cluster() -> (Cluster, usize, usize) {
    let cluster = support::cluster3_in_memory().await;
    let leader = cluster.leader(support::READY).await.unwrap();
    (cluster, leader, (leader + 1) % 3)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serializable_reads_through_a_frozen_follower() {
    let _serial = SERIAL.lock().await;
    let (cluster, _, follower) = cluster().await;
    let client = Client::connect(cluster.endpoints(), options())
        .await
        .unwrap();
    repeated("frozen-follower", &client, || {
        reads_through_a_stall("frozen-follower", &client, || async {
            cluster.stop(follower);
            tokio::time::sleep(FAULT).await;
            cluster.cont(follower);
            tokio::time::sleep(Duration::from_secs(1)).await;
        })
    })
    .await;
}

/// A follower cut off from its peers (network namespaces) but not from the client: it still
/// answers serializable reads at once (from its own, aging, store: etcd's serializable
/// contract), and loses its leader after an election timeout, so the probes mark it
/// leaderless and linearizable calls leave it. Reads see no gap and no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serializable_reads_through_a_partitioned_follower() {
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::builder()
        .members(3)
        .isolated_network(true)
        .start()
        .await
        .expect("start a 3-member cluster in network namespaces");
    let leader = cluster.leader(support::READY).await.unwrap();
    let client = Client::connect(cluster.endpoints(), options())
        .await
        .unwrap();
    repeated("partitioned-follower", &client, || async {
        // Leadership may have moved during the last heal.
        let leader = cluster.leader(support::READY).await.unwrap_or(leader);
        let follower = (leader + 1) % 3;
        reads_through_a_stall("partitioned-follower", &client, || async {
            cluster.partition(follower).unwrap();
            tokio::time::sleep(FAULT).await;
            cluster.heal(follower).unwrap();
            tokio::time::sleep(Duration::from_secs(1)).await;
        })
        .await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serializable_reads_through_a_blackholed_follower() {
    let _serial = SERIAL.lock().await;
    let (cluster, _, follower) = cluster().await;
    let proxies: Vec<FaultProxy> = (0..3)
        .map(|i| FaultProxy::start(cluster.client_addr(i)).unwrap())
        .collect();
    let endpoints: Vec<String> = proxies.iter().map(|p| p.url("http")).collect();
    // Member sync would swap the proxies for the members' advertised URLs.
    let client = Client::connect(&endpoints, options().without_member_sync())
        .await
        .unwrap();
    let proxy = &proxies[follower];
    repeated("blackholed-follower", &client, || {
        reads_through_a_stall("blackholed-follower", &client, || async {
            proxy.set_mode(Mode::Blackhole);
            tokio::time::sleep(FAULT).await;
            proxy.set_mode(Mode::Pass);
            tokio::time::sleep(Duration::from_secs(1)).await;
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_bound_puts_do_not_notice_a_frozen_follower() {
    let _serial = SERIAL.lock().await;
    let (cluster, _, follower) = cluster().await;
    let client = Client::connect(cluster.endpoints(), options())
        .await
        .unwrap();
    support::all_healthy(&client).await;
    let key = support::unique("puts-frozen-follower");
    let t0 = Instant::now();
    let stop = Arc::new(tokio::sync::Notify::new());
    let writer = {
        let client = client.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            sequential(t0, stop, || async {
                client
                    .kv()
                    .put(key.as_str(), "v", PutOptions::new())
                    .await
                    .is_ok()
            })
            .await
        })
    };
    let phase = Duration::from_secs(3);
    tokio::time::sleep(phase).await;
    let fault_at = t0.elapsed();
    cluster.stop(follower);
    tokio::time::sleep(phase).await;
    let end = t0.elapsed();
    stop.notify_one();
    let samples = writer.await.unwrap();
    cluster.cont(follower);

    let count = |from: Duration, to: Duration| {
        samples
            .iter()
            .filter(|s| s.ok && s.start >= from && s.start < to)
            .count() as f64
    };
    let rate_before = count(Duration::ZERO, fault_at) / fault_at.as_secs_f64();
    let rate_during = count(fault_at, end) / (end - fault_at).as_secs_f64();
    let errors = samples.iter().filter(|s| !s.ok).count();
    let (p50_before, p99_before) = (
        quantile(&samples, Duration::ZERO, fault_at, 0.5),
        quantile(&samples, Duration::ZERO, fault_at, 0.99),
    );
    let (p50_during, p99_during) = (
        quantile(&samples, fault_at, end, 0.5),
        quantile(&samples, fault_at, end, 0.99),
    );
    let (gap_before, gap_during) = (
        longest_gap(&samples, Duration::ZERO, fault_at),
        longest_gap(&samples, fault_at, end),
    );
    eprintln!(
        "adaptive: puts-frozen-follower: before {rate_before:.0}/s p50 {p50_before:?} p99 \
         {p99_before:?} max {gap_before:?}; during {rate_during:.0}/s p50 {p50_during:?} p99 \
         {p99_during:?} max {gap_during:?}; {errors} errors"
    );
    assert_eq!(errors, 0);
    // Noise on a shared 2-core box is large; a slowdown of the kind a stall causes (puts
    // waiting on the frozen member: a rate collapse, a p99 of hundreds of milliseconds) is
    // not. The single slowest put is the box's (one of 111 ms was seen in CI with a p99 of
    // 4 ms), so the tail is judged by its p99.
    assert!(
        rate_during >= rate_before * 0.6,
        "{rate_during:.0}/s vs {rate_before:.0}/s"
    );
    assert!(
        p99_during <= p99_before.max(Duration::from_millis(25)) * 2,
        "p99 {p99_during:?} vs {p99_before:?}"
    );
    assert!(
        gap_during < Duration::from_millis(300),
        "a put waited {gap_during:?}: as long as a stall's hedge"
    );
}

/// `callers` concurrent loops of gets (serializable and linearizable in turn) for `run`;
/// returns the calls, errors and the stats over the run.
async fn steady(client: &Client, callers: usize, run: Duration) -> (u64, u64, CallStats) {
    let key = support::unique("steady");
    client
        .kv()
        .put(key.as_str(), "v", PutOptions::new())
        .await
        .unwrap();
    let before = client.call_stats();
    let until = Instant::now() + run;
    let mut tasks = Vec::new();
    for i in 0..callers {
        let client = client.clone();
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            let (mut calls, mut errors) = (0u64, 0u64);
            let mut serializable = i % 2 == 0;
            while Instant::now() < until {
                let options = if serializable {
                    GetOptions::new().with_serializable()
                } else {
                    GetOptions::new()
                };
                serializable = !serializable;
                calls += 1;
                if client.kv().get(key.as_str(), options).await.is_err() {
                    errors += 1;
                }
            }
            (calls, errors)
        }));
    }
    let (mut calls, mut errors) = (0, 0);
    for t in tasks {
        let (c, e) = t.await.unwrap();
        calls += c;
        errors += e;
    }
    let after = client.call_stats();
    let delta = after.since(&before);
    (calls, errors, delta)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_state_hedges_little_and_ejects_nobody() {
    let _serial = SERIAL.lock().await;
    let (cluster, _, _) = cluster().await;
    let client = Client::connect(cluster.endpoints(), Options::new())
        .await
        .unwrap();
    support::all_healthy(&client).await;
    // Fill the latency windows first.
    steady(&client, 4, Duration::from_secs(1)).await;
    for callers in [1, 16, 256] {
        let (calls, errors, s) = steady(&client, callers, Duration::from_secs(3)).await;
        let overhead = s.hedges as f64 / s.calls.max(1) as f64 * 100.0;
        eprintln!(
            "adaptive: steady {callers} callers: {calls} calls ({:.0}/s), {errors} errors, {} \
             attempts, {} hedges = {overhead:.3} % ({} early, {} refused), {} suspicions, {} \
             ejections",
            calls as f64 / 3.0,
            s.attempts,
            s.hedges,
            s.early_hedges,
            s.hedges_refused,
            s.suspicions,
            s.ejections,
        );
        assert_eq!(errors, 0, "{callers} callers");
        assert_eq!(
            s.ejections,
            0,
            "{callers} callers: healthy members ejected: {:?}",
            client.endpoints()
        );
        assert!(
            overhead <= 2.0,
            "{callers} callers: hedges added {overhead:.2} % requests"
        );
    }
}
