//! How many leases one client keeps, next to what the server itself can renew: the server's
//! limit first (keep-alives pipelined on bare `LeaseKeepAlive` streams, no keeper), then
//! etcd-ha's keeper holding 1,000 to 100,000 leases on a fresh 3-member cluster each, with no
//! fault and through faults of the member serving the keep-alive stream (issue 20). With
//! `--clients`, also the etcd-client crate (`etcd-client`: a keep-alive task per lease, as its
//! docs show) and Go's clientv3 3.6 (`go-clientv3`: one Go process, each lease kept by
//! clientv3's own `KeepAlive` as a Go service does; see `etcd_ha_bench::golease`; it needs Go,
//! and the first build fetches clientv3 from the Go module proxy).
//!
//! ```text
//! PROTOC=$(scripts/protoc-path) cargo run --release -p etcd-ha-bench --bin lease-scale-bench  # ~3 min
//! ... --bin lease-scale-bench -- --counts 10000,30000 --ttl 30 --faults kill,freeze,kill-follower \
//!     --clients etcd-ha,etcd-client,go-clientv3 --load 256 --data-dir /dev/shm
//! ```
//!
//! For each client and count: the leases are granted 64 at a time; then two TTLs with no
//! fault, two TTLs per fault, then one TTL after the member is healed (a thawed leader, a
//! restarted member catching up).
//! Each phase reports the leases lost so far (etcd-ha: `KeptLease::lost`'s verdict; etcd-client:
//! no answered renewal for a TTL, or the server's "gone"; go-clientv3: the keep-alive channel
//! closed, or no renewal answered for a TTL), the most at risk at once (less than a third of
//! the TTL left), renewals answered per second against those due (a third of the TTL each),
//! and, with `--load`, the puts per second of callers sharing the client. Then the keeping
//! process's CPU time per renewal in the quiet phase (`getrusage`; the members are other
//! processes; for go-clientv3 the Go process's, not this one's), its resident memory per lease,
//! and a sample of the leases the client still holds, asked of the server (`LeaseTimeToLive`,
//! through the client itself): each must be alive there.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use etcd_ha::testkit::Cluster;
use etcd_ha::{Client, KeptLease, Options, PutOptions};
use etcd_ha_bench::goclient::{self, Driver};
use etcd_ha_bench::golease::GoLeases;
use etcd_ha_bench::keepalive_limit::{self, Rate};
use etcd_ha_bench::process::{cpu_time, status_kb};
use etcd_ha_bench::scale_plot::{Panel, Series, curves};
use futures_util::StreamExt;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

/// The command line.
#[derive(Parser, Debug)]
#[command(about = "Leases kept by one client at scale, next to the server's own renewal limit")]
struct Args {
    /// Leases kept by one client, one run each.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    counts: Vec<usize>,
    /// The TTL of every lease, in seconds.
    #[arg(long, default_value_t = 10)]
    ttl: u64,
    /// The clients measured, each on fresh clusters.
    #[arg(long, value_delimiter = ',', default_value = "etcd-ha")]
    clients: Vec<Who>,
    /// The faults, in turn after the quiet phase, two TTLs each.
    #[arg(long, value_delimiter = ',', default_value = "kill")]
    faults: Vec<Fault>,
    /// Callers putting 256-byte values through the same client all along (0: none).
    #[arg(long, default_value_t = 0)]
    load: usize,
    /// Bare streams at once for the server's limit.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    streams: Vec<usize>,
    /// Keep-alives in flight per bare stream.
    #[arg(long, default_value_t = 64)]
    window: usize,
    /// The most keep-alive streams etcd-ha's keeper opens (`Options::with_keep_alive_streams`;
    /// default: the library's).
    #[arg(long, default_value_t = etcd_ha::DEFAULT_KEEP_ALIVE_STREAMS)]
    keep_alive_streams: usize,
    /// The renewals a second one of its streams is given before the next opens (default: the
    /// library's).
    #[arg(long, default_value_t = etcd_ha::DEFAULT_KEEP_ALIVE_STREAM_RATE)]
    keep_alive_stream_rate: u32,
    /// Where the members keep their data (/dev/shm: a tmpfs, no fsync stalls).
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// The etcd release of the local clusters (default: ETCD_BIN, else 3.6's latest).
    #[arg(long)]
    etcd_version: Option<String>,
    /// Where the curves go (SVG): CPU and memory per lease against the number of leases, a
    /// line per client.
    #[arg(long, default_value = "target/lease-scale-bench/lease-scale.svg")]
    svg: std::path::PathBuf,
}

/// A client measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Who {
    /// etcd-ha's `Keeper`: leases over one keep-alive stream on the leader, or several when
    /// their renewals need them (`--keep-alive-streams`).
    EtcdHa,
    /// The etcd-client crate: `lease_keep_alive` per lease, each renewed every TTL/3 by a task
    /// of its own, reopened on error (what a careful application writes).
    EtcdClient,
    /// Go's clientv3 3.6 in a driver process of its own: `KeepAlive` per lease, every lease on
    /// clientv3's one keep-alive stream (placed by gRPC's round-robin balancer).
    #[value(name = "go-clientv3")]
    GoClientv3,
}

/// A fault of the phase after the quiet one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Fault {
    /// SIGKILL of the member serving the keep-alive stream (etcd-client: the leader;
    /// go-clientv3: its stream's member, as the driver saw the stream open).
    Kill,
    /// SIGSTOP of that member for the phase.
    Freeze,
    /// SIGKILL of a member that serves no keep-alive stream (a follower).
    KillFollower,
}

/// What a phase of two TTLs saw.
struct Phase {
    name: String,
    /// Lost so far (not only in this phase).
    lost: usize,
    most_at_risk: usize,
    renewals_per_s: f64,
    puts_per_s: f64,
}

/// One client and count's results.
struct Row {
    who: Who,
    count: usize,
    grant: Duration,
    grant_errors: usize,
    phases: Vec<Phase>,
    cpu_per_renewal_us: f64,
    /// The same less the client's own background (etcd-ha: its probes and pings, measured
    /// with no lease kept), so that counts compare by what each renewal costs.
    net_cpu_per_renewal_us: f64,
    kib_per_lease: f64,
    /// (alive on the server, asked) of a sample the client believes alive.
    server_sample: (usize, usize),
}

/// The leases one client keeps, as the bench sees them.
enum Leases {
    /// With the client's background CPU per second of wall time, with no lease kept.
    Ha(Client, Vec<KeptLease>, f64),
    /// Boxed: etcd-client's client is large.
    Ec(Box<EcLeases>),
    /// Kept in a Go process, which counts them.
    Go(GoLeases),
}

/// etcd-client's leases: for each, when the send of its last answered renewal was (ms since
/// `epoch`) and whether the server said it is gone; the tasks renewing them.
struct EcLeases {
    client: etcd_client::Client,
    epoch: Instant,
    ttl: Duration,
    ids: Vec<i64>,
    last_ok_ms: Arc<Vec<AtomicU64>>,
    gone: Arc<Vec<AtomicBool>>,
    renewals: Arc<AtomicU64>,
    tasks: Vec<JoinHandle<()>>,
}

impl Leases {
    async fn renewals(&self) -> u64 {
        match self {
            Leases::Ha(_, leases, _) => leases.iter().map(KeptLease::renewals).sum(),
            Leases::Ec(ec) => ec.renewals.load(Ordering::Relaxed),
            // A driver that is gone renews nothing: 0, which the phases subtract saturating.
            Leases::Go(go) => go.status().await.map_or(0, |s| s.renewals),
        }
    }

    /// At risk now. Sampled every 100 ms, so for etcd-ha it reads the keeper's count rather
    /// than every lease's expiry: at 150,000 leases that walk was a fifth of the process's
    /// CPU, charged to the keeper's CPU per renewal.
    async fn at_risk(&self) -> usize {
        match self {
            Leases::Ha(client, _, _) => client.keeper().leases_at_risk(),
            _ => self.lost_and_at_risk().await.1,
        }
    }

    /// (lost, at risk) now.
    async fn lost_and_at_risk(&self) -> (usize, usize) {
        match self {
            // A driver that is gone keeps none of its leases.
            Leases::Go(go) => go
                .status()
                .await
                .map_or((go.granted(), 0), |s| (s.lost, s.at_risk)),
            Leases::Ha(client, leases, _) => (
                leases.iter().filter(|l| l.is_expired()).count(),
                client.keeper().leases_at_risk(),
            ),
            Leases::Ec(ec) => {
                let now = ec.epoch.elapsed();
                let (mut lost, mut at_risk) = (0, 0);
                for (i, last) in ec.last_ok_ms.iter().enumerate() {
                    let left = (Duration::from_millis(last.load(Ordering::Relaxed)) + ec.ttl)
                        .saturating_sub(now);
                    if ec.gone[i].load(Ordering::Relaxed) || left.is_zero() {
                        lost += 1;
                    } else if left < ec.ttl / 3 {
                        at_risk += 1;
                    }
                }
                (lost, at_risk)
            }
        }
    }

    /// The keeping process's CPU time and resident memory in KiB: this process for the
    /// in-process clients, the driver for go-clientv3 (`None` once it is gone).
    async fn usage(&self) -> Option<(Duration, u64)> {
        match self {
            Leases::Go(go) => go.usage().await.ok().map(|u| (u.cpu, u.rss_kb)),
            Leases::Ha(..) | Leases::Ec(_) => Some((cpu_time(), status_kb("VmRSS").unwrap_or(0))),
        }
    }

    /// Up to 200 leases the client believes alive, asked of the server: (alive there, asked).
    async fn server_sample(&self) -> (usize, usize) {
        if let Leases::Go(go) = self {
            // The driver picks the sample (a walk of its leases) and asks through clientv3.
            let Ok(ids) = go.sample(200).await else {
                return (0, 0);
            };
            let mut on_server = 0;
            for &id in &ids {
                if go.time_to_live(id).await.is_ok_and(|t| t > 0) {
                    on_server += 1;
                }
            }
            return (on_server, ids.len());
        }
        let alive: Vec<i64> = match self {
            Leases::Ha(_, leases, _) => leases
                .iter()
                .filter(|l| !l.is_expired())
                .map(KeptLease::id)
                .collect(),
            Leases::Ec(ec) => {
                let now = ec.epoch.elapsed();
                (0..ec.ids.len())
                    .filter(|&i| {
                        let last = Duration::from_millis(ec.last_ok_ms[i].load(Ordering::Relaxed));
                        !ec.gone[i].load(Ordering::Relaxed) && last + ec.ttl > now
                    })
                    .map(|i| ec.ids[i])
                    .collect()
            }
            // Asked above.
            Leases::Go(_) => Vec::new(),
        };
        let step = (alive.len() / 200).max(1);
        let (mut on_server, mut asked) = (0, 0);
        for &id in alive.iter().step_by(step) {
            asked += 1;
            let ttl = match self {
                Leases::Ha(client, _, _) => client
                    .lease()
                    .time_to_live(id, false)
                    .await
                    .map(|i| i.ttl)
                    .ok(),
                Leases::Ec(ec) => ec
                    .client
                    .lease_client()
                    .time_to_live(id, None)
                    .await
                    .map(|r| r.ttl())
                    .ok(),
                // Asked above.
                Leases::Go(_) => None,
            };
            if ttl.is_some_and(|t| t > 0) {
                on_server += 1;
            }
        }
        (on_server, asked)
    }

    /// The member whose faults hit the keep-alive streams: etcd-ha's stream member, clientv3's
    /// one stream's member (as the driver saw it open), or for etcd-client (streams spread
    /// round-robin) the leader.
    async fn stream_member(&self, cluster: &Cluster) -> usize {
        let leader = cluster
            .leader(Duration::from_secs(30))
            .await
            .expect("a leader");
        match self {
            Leases::Ha(client, _, _) => {
                let url = client.keeper().stream_endpoint();
                (0..cluster.len())
                    .find(|&i| url.as_deref() == Some(&cluster.endpoint(i)))
                    .unwrap_or(leader)
            }
            Leases::Go(go) => {
                let stream = go.status().await.ok().and_then(|s| s.stream);
                // The driver sees the member's address; the cluster names it by its URL.
                let address = |url: String| url.split_once("://").map(|(_, a)| a.to_owned());
                (0..cluster.len())
                    .find(|&i| stream.is_some() && address(cluster.endpoint(i)) == stream)
                    .unwrap_or(leader)
            }
            Leases::Ec(_) => leader,
        }
    }
}

impl Drop for EcLeases {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A fresh 3-member cluster with a leader; the leader's index.
async fn cluster(args: &Args, binary: &std::path::Path) -> (Cluster, usize) {
    etcd_ha_bench::server::three_members(binary, args.data_dir.as_deref()).await
}

/// The server's limit: bare streams to the leader and to a follower.
async fn server_limit(args: &Args, binary: &std::path::Path) -> Vec<(String, Rate)> {
    let (cluster, leader) = cluster(args, binary).await;
    let follower = (leader + 1) % cluster.len();
    let ids = keepalive_limit::grant_bare(&cluster.endpoint(leader), 1024, 600)
        .await
        .expect("grants for the limit");
    let mut rates = Vec::new();
    for (role, member) in [("leader", leader), ("follower", follower)] {
        for &streams in &args.streams {
            let rate = keepalive_limit::renewals_per_second(
                &cluster.endpoint(member),
                &ids,
                streams,
                args.window,
                Duration::from_secs(3),
            )
            .await
            .expect("a bare keep-alive measurement");
            println!(
                "  {role:<8} {streams:>3} stream(s) x {} in flight: {:>8.0} renewals/s (slowest \
                 stream {:.0}/s)",
                args.window, rate.total, rate.slowest
            );
            rates.push((role.to_owned(), rate));
        }
    }
    rates
}

/// Grant `count` leases with etcd-ha's keeper, 64 at a time.
async fn grant_ha(
    cluster: &Cluster,
    count: usize,
    ttl: Duration,
    (streams, per_stream): (usize, u32),
) -> (Leases, usize) {
    let options = Options::default().with_keep_alive_streams(streams, per_stream);
    let client = Client::connect(cluster.endpoints(), options)
        .await
        .expect("etcd-ha connects");
    // Let the probes find the leader: the stream opens there.
    sleep(Duration::from_secs(1)).await;
    // What the client does with nothing to keep (probes, pings), per second of wall time.
    let (cpu, wall) = (cpu_time(), Instant::now());
    sleep(Duration::from_secs(3)).await;
    let background = cpu_time().saturating_sub(cpu).as_secs_f64() / wall.elapsed().as_secs_f64();
    let keeper = client.keeper();
    let granted: Vec<_> = futures_util::stream::iter(0..count)
        .map(|_| {
            let keeper = keeper.clone();
            async move { keeper.grant(ttl).await }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let errors = granted.iter().filter(|g| g.is_err()).count();
    let leases = granted.into_iter().filter_map(Result::ok).collect();
    (Leases::Ha(client, leases, background), errors)
}

/// Grant `count` leases with etcd-client, 64 at a time, and start a keep-alive task for each.
async fn grant_ec(cluster: &Cluster, count: usize, ttl: Duration) -> (Leases, usize) {
    let client = etcd_client::Client::connect(cluster.endpoints(), None)
        .await
        .expect("etcd-client connects");
    let epoch = Instant::now();
    let granted: Vec<_> = futures_util::stream::iter(0..count)
        .map(|_| {
            let mut lease = client.lease_client();
            async move {
                let sent = epoch.elapsed();
                lease
                    .grant(ttl.as_secs() as i64, None)
                    .await
                    .map(|g| (g.id(), sent))
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let errors = granted.iter().filter(|g| g.is_err()).count();
    let granted: Vec<(i64, Duration)> = granted.into_iter().filter_map(Result::ok).collect();
    let last_ok_ms: Arc<Vec<AtomicU64>> = Arc::new(
        granted
            .iter()
            .map(|(_, sent)| AtomicU64::new(sent.as_millis() as u64))
            .collect(),
    );
    let gone: Arc<Vec<AtomicBool>> =
        Arc::new(granted.iter().map(|_| AtomicBool::new(false)).collect());
    let renewals = Arc::new(AtomicU64::new(0));
    let tasks = granted
        .iter()
        .enumerate()
        .map(|(i, &(id, _))| {
            let lease = client.lease_client();
            let (last_ok_ms, gone, renewals) = (last_ok_ms.clone(), gone.clone(), renewals.clone());
            tokio::spawn(keep_ec(
                lease,
                id,
                ttl,
                epoch,
                move |outcome| match outcome {
                    Some(sent) => {
                        last_ok_ms[i].store(sent.as_millis() as u64, Ordering::Relaxed);
                        renewals.fetch_add(1, Ordering::Relaxed);
                    }
                    None => gone[i].store(true, Ordering::Relaxed),
                },
            ))
        })
        .collect();
    let ids = granted.iter().map(|(id, _)| *id).collect();
    let leases = EcLeases {
        client,
        epoch,
        ttl,
        ids,
        last_ok_ms,
        gone,
        renewals,
        tasks,
    };
    (Leases::Ec(Box::new(leases)), errors)
}

/// Grant `count` leases with Go's clientv3 in a driver process, 64 at a time, each kept by
/// clientv3's `KeepAlive` from its grant on; why not, if the driver cannot run.
async fn grant_go(
    cluster: &Cluster,
    count: usize,
    ttl: Duration,
) -> Result<(Leases, usize), String> {
    let (leases, failed) = GoLeases::grant(&cluster.endpoints(), count, ttl).await?;
    Ok((Leases::Go(leases), failed))
}

/// One etcd-client lease kept by a task of its own: a keep-alive stream, a renewal every TTL/3
/// (each answer awaited at most TTL/3), the stream opened again after an error, with backoff.
/// `answered(Some(sent))` on each renewal (its send time since `epoch`), `answered(None)` once
/// the server says the lease is gone.
async fn keep_ec(
    mut client: etcd_client::LeaseClient,
    id: i64,
    ttl: Duration,
    epoch: Instant,
    answered: impl Fn(Option<Duration>),
) {
    let period = ttl / 3;
    let mut backoff = Duration::from_millis(100);
    loop {
        if let Ok((mut keeper, mut stream)) = client.keep_alive(id).await {
            loop {
                sleep(period).await;
                let sent = epoch.elapsed();
                let renew = async {
                    keeper.keep_alive().await?;
                    stream.message().await
                };
                match tokio::time::timeout(period, renew).await {
                    Ok(Ok(Some(r))) if r.ttl() > 0 => {
                        answered(Some(sent));
                        backoff = Duration::from_millis(100);
                    }
                    Ok(Ok(Some(_))) => return answered(None),
                    _ => break,
                }
            }
        }
        sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// Callers putting through the client of `leases` until dropped; counts the puts.
struct Load {
    puts: Arc<AtomicU64>,
    tasks: Vec<JoinHandle<()>>,
}

impl Load {
    fn start(leases: &Leases, callers: usize) -> Load {
        let puts = Arc::new(AtomicU64::new(0));
        let value = vec![b'v'; 256];
        let tasks = (0..callers)
            .map(|c| {
                let (puts, value) = (puts.clone(), value.clone());
                let key = format!("load/{c}");
                match leases {
                    Leases::Ha(client, _, _) => {
                        let kv = client.kv();
                        tokio::spawn(async move {
                            loop {
                                if kv
                                    .put(key.as_str(), value.clone(), PutOptions::new())
                                    .await
                                    .is_ok()
                                {
                                    puts.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        })
                    }
                    Leases::Ec(ec) => {
                        let mut kv = ec.client.kv_client();
                        tokio::spawn(async move {
                            loop {
                                if kv.put(key.as_str(), value.clone(), None).await.is_ok() {
                                    puts.fetch_add(1, Ordering::Relaxed);
                                } else {
                                    sleep(Duration::from_millis(10)).await;
                                }
                            }
                        })
                    }
                    Leases::Go(go) => {
                        let client = go.client().clone();
                        tokio::spawn(async move {
                            loop {
                                if client.put(key.as_bytes(), &value).await.is_ok() {
                                    puts.fetch_add(1, Ordering::Relaxed);
                                } else {
                                    sleep(Duration::from_millis(10)).await;
                                }
                            }
                        })
                    }
                }
            })
            .collect();
        Load { puts, tasks }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Sample `leases` every 100 ms for `hold`; prints the phase as it ends (a long run that is
/// stopped keeps what it measured).
async fn hold(name: String, leases: &Leases, load: &Load, hold: Duration) -> Phase {
    let phase = measure(name, leases, load, hold).await;
    println!(
        "    {}: lost {}, at risk {} at most, {:.0} renewals/s, {:.0} puts/s",
        phase.name, phase.lost, phase.most_at_risk, phase.renewals_per_s, phase.puts_per_s
    );
    phase
}

/// What `hold` measures.
async fn measure(name: String, leases: &Leases, load: &Load, hold: Duration) -> Phase {
    let (renewals, puts) = (leases.renewals().await, load.puts.load(Ordering::Relaxed));
    let end = Instant::now() + hold;
    let mut most_at_risk = 0;
    while Instant::now() < end {
        most_at_risk = most_at_risk.max(leases.at_risk().await);
        sleep(Duration::from_millis(100)).await;
    }
    let secs = hold.as_secs_f64();
    Phase {
        name,
        lost: leases.lost_and_at_risk().await.0,
        most_at_risk,
        renewals_per_s: leases.renewals().await.saturating_sub(renewals) as f64 / secs,
        puts_per_s: (load.puts.load(Ordering::Relaxed) - puts) as f64 / secs,
    }
}

/// The fault's name on the command line.
fn fault_name(fault: Fault) -> String {
    fault
        .to_possible_value()
        .map_or_else(|| format!("{fault:?}"), |v| v.get_name().to_owned())
}

/// One client and count on a fresh cluster; why not, if the client cannot run.
async fn keep(
    args: &Args,
    binary: &std::path::Path,
    who: Who,
    count: usize,
) -> Result<Row, String> {
    let (mut cluster, _) = cluster(args, binary).await;
    let ttl = Duration::from_secs(args.ttl);
    let rss_before = status_kb("VmRSS").unwrap_or(0);
    let started = Instant::now();
    let (leases, grant_errors) = match who {
        Who::EtcdHa => {
            let streams = (args.keep_alive_streams, args.keep_alive_stream_rate);
            grant_ha(&cluster, count, ttl, streams).await
        }
        Who::EtcdClient => grant_ec(&cluster, count, ttl).await,
        Who::GoClientv3 => grant_go(&cluster, count, ttl).await?,
    };
    let grant = started.elapsed();
    // The Go driver's memory counts from its own start, before it granted.
    let rss_before = match &leases {
        Leases::Go(go) => go.rss_at_start_kb(),
        Leases::Ha(..) | Leases::Ec(_) => rss_before,
    };
    let rss_after = leases.usage().await.map_or(0, |(_, kb)| kb);
    let kib_per_lease = rss_after.saturating_sub(rss_before) as f64 / count.max(1) as f64;
    let load = Load::start(&leases, args.load);

    let cpu = leases.usage().await;
    let renewals = leases.renewals().await;
    let quiet_started = Instant::now();
    let quiet = hold("no fault".into(), &leases, &load, 2 * ttl).await;
    let quiet_secs = quiet_started.elapsed().as_secs_f64();
    let renewed = leases.renewals().await.saturating_sub(renewals);
    let cpu_secs = match (cpu, leases.usage().await) {
        // Fewer renewals than leases (each is due ~6 times in the phase): the CPU spent is
        // not the renewals' (the Go driver printed 163,100 us "per renewal" with ~0).
        _ if renewed < count as u64 => f64::NAN,
        (Some((before, _)), Some((after, _))) => after.saturating_sub(before).as_secs_f64(),
        // The Go driver is gone: no figure rather than a wrong one.
        _ => f64::NAN,
    };
    let per_renewal_us = |secs: f64| secs * 1e6 / renewed.max(1) as f64;
    let cpu_per_renewal_us = per_renewal_us(cpu_secs);
    let background = match &leases {
        Leases::Ha(_, _, background) => *background,
        // etcd-client and clientv3 run no background work of their own.
        Leases::Ec(_) | Leases::Go(_) => 0.0,
    };
    let net_cpu_per_renewal_us = per_renewal_us(cpu_secs - background * quiet_secs);
    let mut phases = vec![quiet];
    for &fault in &args.faults {
        let stream = leases.stream_member(&cluster).await;
        let leader = cluster.leader(Duration::from_secs(30)).await.ok();
        let role = |i: usize| {
            if leader == Some(i) {
                "the leader"
            } else {
                "a follower"
            }
        };
        let (member, name) = match fault {
            Fault::Kill => (
                stream,
                format!("SIGKILL of the stream's member ({})", role(stream)),
            ),
            Fault::Freeze => (
                stream,
                format!("SIGSTOP of the stream's member ({})", role(stream)),
            ),
            Fault::KillFollower => {
                let other = (0..cluster.len())
                    .find(|&i| i != stream && Some(i) != leader)
                    .expect("a member serving no stream");
                (
                    other,
                    format!("SIGKILL of {} serving no stream", role(other)),
                )
            }
        };
        match fault {
            Fault::Freeze => cluster.stop(member),
            Fault::Kill | Fault::KillFollower => cluster.kill(member),
        }
        phases.push(hold(name, &leases, &load, 2 * ttl).await);
        match fault {
            Fault::Freeze => cluster.cont(member),
            Fault::Kill | Fault::KillFollower => {
                cluster.restart(member).await.expect("the member restarts")
            }
        }
        // What the heal itself does (a thawed leader, a member catching up), apart from
        // the next fault.
        let healed = format!("{} healed", fault_name(fault));
        phases.push(hold(healed, &leases, &load, ttl).await);
    }
    drop(load);
    let server_sample = leases.server_sample().await;
    Ok(Row {
        who,
        count,
        grant,
        grant_errors,
        phases,
        cpu_per_renewal_us,
        net_cpu_per_renewal_us,
        kib_per_lease,
        server_sample,
    })
}

/// The etcd binary of the run and its version line.
fn server(args: &Args) -> (std::path::PathBuf, String) {
    etcd_ha_bench::server::local(args.etcd_version.as_deref())
        .unwrap_or_else(|e| panic!("the etcd server: {e}"))
}

async fn run(args: Args) {
    let (binary, version) = server(&args);
    let ttl = Duration::from_secs(args.ttl);
    println!(
        "{version}; 3 members on 127.0.0.1; data in {:?}",
        args.data_dir
    );
    println!("the server's limit (bare LeaseKeepAlive streams, no keeper):");
    let limit = server_limit(&args, &binary).await;
    let best = limit.iter().map(|(_, r)| r.total).fold(0.0_f64, f64::max);
    let keeps = keepalive_limit::leases_kept_at(best, ttl);
    println!(
        "  at TTL {} s (a renewal every TTL/3) the best of these keeps at most {keeps} leases",
        args.ttl
    );
    let mut rows = Vec::new();
    for &who in &args.clients {
        for &count in &args.counts {
            println!("  {who:?}: {count} leases ...");
            match keep(&args, &binary, who, count).await {
                Ok(row) => rows.push(row),
                Err(why) => println!("  {who:?}: {count} leases NOT MEASURED: {why}"),
            }
        }
    }
    println!();
    println!(
        "TTL {} s, two TTLs a phase, {} callers putting; server limit {best:.0} renewals/s (keeps \
         {keeps} at this TTL); lost counts from the start",
        args.ttl, args.load
    );
    println!(
        "{:<12} {:>7} {:<44} {:>6} {:>8} {:>11} {:>7} {:>7}",
        "client", "leases", "phase", "lost", "at risk", "renewals/s", "due/s", "puts/s"
    );
    for row in &rows {
        let due = row.count as f64 * 3.0 / ttl.as_secs_f64();
        for p in &row.phases {
            println!(
                "{:<12} {:>7} {:<44} {:>6} {:>8} {:>11.0} {:>7.0} {:>7.0}",
                format!("{:?}", row.who),
                row.count,
                p.name,
                p.lost,
                p.most_at_risk,
                p.renewals_per_s,
                due,
                p.puts_per_s
            );
        }
        println!(
            "{:<12} {:>7} granted in {:.1} s ({} failed); {} us CPU per renewal (no fault; {} \
             less the client's background); {:.2} KiB per lease; alive on the server: {}/{} of \
             a sample",
            format!("{:?}", row.who),
            row.count,
            row.grant.as_secs_f64(),
            row.grant_errors,
            us(row.cpu_per_renewal_us),
            us(row.net_cpu_per_renewal_us),
            row.kib_per_lease,
            row.server_sample.0,
            row.server_sample.1
        );
    }
    let caption = format!(
        "Leases kept by one client, TTL {} s ({})",
        args.ttl,
        version.replace("Version: ", "")
    );
    match plot(&args.svg, &caption, &rows) {
        Ok(()) => println!("curves: {}", args.svg.display()),
        Err(e) => println!("curves not drawn: {e}"),
    }
}

/// The curves of `rows` into `path`: CPU per renewal (with and, where measured, without the
/// client's background) and memory per lease, a line per client.
fn plot(
    path: &std::path::Path,
    caption: &str,
    rows: &[Row],
) -> Result<(), Box<dyn std::error::Error>> {
    let mut clients: Vec<Who> = Vec::new();
    for row in rows {
        if !clients.contains(&row.who) {
            clients.push(row.who);
        }
    }
    let line = |who: Who, figure: fn(&Row) -> f64| {
        rows.iter()
            .filter(|r| r.who == who)
            .map(|r| (r.count as f64, figure(r)))
            .collect::<Vec<_>>()
    };
    let mut cpu = Panel::new("CPU per renewal, no fault", "us");
    let mut memory = Panel::new("Memory per lease", "KiB");
    for &who in &clients {
        let name = who
            .to_possible_value()
            .map_or_else(|| format!("{who:?}"), |v| v.get_name().to_owned());
        cpu = cpu
            .with(Series::new(
                name.clone(),
                line(who, |r| r.cpu_per_renewal_us),
            ))
            .with(Series::new(
                format!("{name}, less its background"),
                line(who, |r| r.net_cpu_per_renewal_us),
            ));
        memory = memory.with(Series::new(name, line(who, |r| r.kib_per_lease)));
    }
    curves(path, caption, "leases", &[cpu, memory])
}

/// Microseconds with one decimal, or "-" for no figure.
fn us(value: f64) -> String {
    if value.is_nan() {
        "-".to_string()
    } else {
        format!("{value:.1}")
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Silent unless RUST_LOG asks (the keeper's log lines explain a lost lease).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    // Go's clientv3 is built here, once, before any cluster starts; named and not buildable
    // (no Go, no module proxy), it stops the run with the reason.
    if args.clients.contains(&Who::GoClientv3) {
        match goclient::prepare(Driver::Current) {
            Ok(()) => {
                let version = goclient::version(Driver::Current).unwrap_or_default();
                eprintln!("go-clientv3: clientv3 {version}");
            }
            Err(why) => {
                eprintln!("lease-scale-bench: go-clientv3 cannot run: {why}");
                return ExitCode::from(2);
            }
        }
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(run(args));
    ExitCode::SUCCESS
}
