//! How many leases one etcd-ha client keeps, next to what the server itself can renew: the
//! server's limit first (keep-alives pipelined on bare `LeaseKeepAlive` streams, no keeper),
//! then etcd-ha's keeper holding 1,000 to 100,000 leases on a fresh 3-member cluster each, with
//! no fault and through a SIGKILL of the member serving its keep-alive stream (issue 20).
//!
//! ```text
//! PROTOC=$(scripts/protoc-path) cargo run --release -p etcd-ha-bench --bin lease-scale-bench  # ~3 min
//! ... --bin lease-scale-bench -- --counts 1000,10000,30000 --ttl 30 --data-dir /dev/shm
//! ```
//!
//! For each count: the leases are granted 64 at a time through `Keeper::grant`; then for two
//! TTLs with no fault, and two TTLs after the kill, it reports leases lost (`KeptLease::lost`'s
//! verdict: local expiry or the server's word), the most at risk at once
//! (`Keeper::leases_at_risk`), renewals answered per second against those due (a third of the
//! TTL each), this process's CPU time per renewal (`getrusage`; the members are other
//! processes) and resident memory per lease. A sample of the leases the client still holds is
//! asked of the server (`LeaseTimeToLive`): each must be alive there.

use std::time::Duration;

use clap::Parser;
use etcd_ha::testkit::Cluster;
use etcd_ha::{Client, KeptLease, Options};
use etcd_ha_bench::keepalive_limit::{self, Rate};
use futures_util::StreamExt;
use tokio::time::{Instant, sleep};

/// The command line.
#[derive(Parser, Debug)]
#[command(about = "etcd-ha's lease keeper at scale, next to the server's own renewal limit")]
struct Args {
    /// Leases kept by one client, one run each.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    counts: Vec<usize>,
    /// The TTL of every lease, in seconds.
    #[arg(long, default_value_t = 10)]
    ttl: u64,
    /// Bare streams at once for the server's limit.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    streams: Vec<usize>,
    /// Keep-alives in flight per bare stream.
    #[arg(long, default_value_t = 64)]
    window: usize,
    /// Leave out the SIGKILL of the keep-alive stream's member.
    #[arg(long)]
    no_fault: bool,
    /// Where the members keep their data (/dev/shm: a tmpfs, no fsync stalls).
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// The etcd release of the local clusters (default: ETCD_BIN, else 3.6's latest).
    #[arg(long)]
    etcd_version: Option<String>,
}

/// One count's results.
struct Kept {
    count: usize,
    grant: Duration,
    grant_errors: usize,
    quiet: Phase,
    fault: Option<Phase>,
    cpu_per_renewal_us: f64,
    kib_per_lease: f64,
    /// (alive on the server, asked) of a sample the client believes alive.
    server_sample: (usize, usize),
}

/// What a phase of two TTLs saw.
struct Phase {
    lost: usize,
    most_at_risk: usize,
    renewals_per_s: f64,
}

/// User plus system CPU time of this process so far.
fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct it is given, which is plain data.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// This process's resident memory in kB.
fn rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse().ok())
        .unwrap_or(0)
}

/// A fresh 3-member cluster with a leader; the leader's index.
async fn cluster(args: &Args, binary: &std::path::Path) -> (Cluster, usize) {
    let mut builder = Cluster::builder().members(3).etcd_bin(binary);
    if let Some(dir) = &args.data_dir {
        builder = builder.data_dir_in(dir);
    }
    let cluster = builder.start().await.expect("a 3-member etcd cluster");
    let leader = cluster
        .leader(Duration::from_secs(30))
        .await
        .expect("a leader");
    (cluster, leader)
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

/// Sample the keeper every 100 ms for `hold`: (lost at the end, most at risk at once,
/// renewals answered in that time).
async fn hold(client: &Client, leases: &[KeptLease], hold: Duration) -> (usize, usize, u64) {
    let renewals = |leases: &[KeptLease]| leases.iter().map(KeptLease::renewals).sum::<u64>();
    let before = renewals(leases);
    let end = Instant::now() + hold;
    let mut most_at_risk = 0;
    while Instant::now() < end {
        most_at_risk = most_at_risk.max(client.keeper().leases_at_risk());
        sleep(Duration::from_millis(100)).await;
    }
    let lost = leases.iter().filter(|l| l.is_expired()).count();
    (lost, most_at_risk, renewals(leases) - before)
}

/// One count on a fresh cluster.
async fn keep(args: &Args, binary: &std::path::Path, count: usize) -> Kept {
    let (mut cluster, _) = cluster(args, binary).await;
    let ttl = Duration::from_secs(args.ttl);
    let client = Client::connect(cluster.endpoints(), Options::default())
        .await
        .expect("etcd-ha connects");
    // Let the probes find the leader: the stream opens there.
    sleep(Duration::from_secs(1)).await;
    let rss_before = rss_kb();
    let started = Instant::now();
    let keeper = client.keeper();
    let granted: Vec<_> = futures_util::stream::iter(0..count)
        .map(|_| {
            let keeper = keeper.clone();
            async move { keeper.grant(ttl).await }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let grant = started.elapsed();
    let grant_errors = granted.iter().filter(|g| g.is_err()).count();
    let leases: Vec<KeptLease> = granted.into_iter().filter_map(Result::ok).collect();
    let kib_per_lease = rss_kb().saturating_sub(rss_before) as f64 / count.max(1) as f64;

    let cpu = cpu_time();
    let (lost, most_at_risk, renewals) = hold(&client, &leases, 2 * ttl).await;
    let cpu_per_renewal_us =
        cpu_time().saturating_sub(cpu).as_secs_f64() * 1e6 / renewals.max(1) as f64;
    let quiet = Phase {
        lost,
        most_at_risk,
        renewals_per_s: renewals as f64 / (2 * ttl).as_secs_f64(),
    };

    let fault = if args.no_fault {
        None
    } else {
        let url = keeper.stream_endpoint();
        let member = (0..cluster.len()).find(|&i| url.as_deref() == Some(&cluster.endpoint(i)));
        let member = member.expect("the keep-alive stream's member is one of the cluster's");
        let leader = cluster.leader(Duration::from_secs(5)).await.ok();
        println!(
            "  {count} leases: SIGKILL of member {member} (serving the keep-alive stream{})",
            if leader == Some(member) {
                ", the leader"
            } else {
                ""
            }
        );
        cluster.kill(member);
        let (lost, most_at_risk, renewals) = hold(&client, &leases, 2 * ttl).await;
        cluster.restart(member).await.expect("the member restarts");
        Some(Phase {
            lost,
            most_at_risk,
            renewals_per_s: renewals as f64 / (2 * ttl).as_secs_f64(),
        })
    };

    // The client's word against the server's, on a sample it believes alive.
    let alive: Vec<&KeptLease> = leases.iter().filter(|l| !l.is_expired()).collect();
    let step = (alive.len() / 200).max(1);
    let mut asked = 0;
    let mut on_server = 0;
    for lease in alive.iter().step_by(step) {
        asked += 1;
        if let Ok(info) = client.lease().time_to_live(lease.id(), false).await
            && info.ttl > 0
        {
            on_server += 1;
        }
    }
    Kept {
        count,
        grant,
        grant_errors,
        quiet,
        fault,
        cpu_per_renewal_us,
        kib_per_lease,
        server_sample: (on_server, asked),
    }
}

async fn run(args: Args) {
    let binary = match &args.etcd_version {
        Some(v) => {
            etcd_ha_bench::server::resolve(v)
                .expect("the etcd server")
                .binary
        }
        None => match std::env::var_os("ETCD_BIN") {
            Some(bin) => bin.into(),
            None => {
                etcd_ha_bench::server::resolve(etcd_ha_bench::server::DEFAULT_VERSION)
                    .expect("the etcd server")
                    .binary
            }
        },
    };
    let version = std::process::Command::new(&binary)
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_owned()
        })
        .unwrap_or_default();
    let ttl = Duration::from_secs(args.ttl);
    println!(
        "{version}; 3 members on 127.0.0.1; data in {:?}",
        args.data_dir
    );
    println!("the server's limit (bare LeaseKeepAlive streams, no keeper):");
    let limit = server_limit(&args, &binary).await;
    let best = limit.iter().map(|(_, r)| r.total).fold(0.0_f64, f64::max);
    println!(
        "  at TTL {} s (a renewal every TTL/3) the best of these keeps at most {} leases",
        args.ttl,
        keepalive_limit::leases_kept_at(best, ttl)
    );
    let mut rows = Vec::new();
    for &count in &args.counts {
        let kept = keep(&args, &binary, count).await;
        rows.push(kept);
    }
    let due = |count: usize| count as f64 * 3.0 / ttl.as_secs_f64();
    println!();
    println!(
        "etcd-ha keeper, TTL {} s, two TTLs each; server limit {:.0} renewals/s (keeps {} at \
         this TTL)",
        args.ttl,
        best,
        keepalive_limit::leases_kept_at(best, ttl)
    );
    println!(
        "{:>7} {:>9} {:>10} {:>11} {:>10} {:>11} {:>10} {:>10} {:>11} {:>10} {:>9}",
        "leases",
        "grant [s]",
        "lost quiet",
        "renewals/s",
        "due/s",
        "at risk max",
        "cpu/renew",
        "KiB/lease",
        "lost killed",
        "at risk",
        "on server"
    );
    for k in &rows {
        let (lost_killed, risk_killed) = k
            .fault
            .as_ref()
            .map_or(("-".to_owned(), "-".to_owned()), |f| {
                (f.lost.to_string(), f.most_at_risk.to_string())
            });
        println!(
            "{:>7} {:>9.1} {:>10} {:>11.0} {:>10.0} {:>11} {:>8.1}us {:>10.2} {:>11} {:>10} {:>9}",
            k.count,
            k.grant.as_secs_f64(),
            k.quiet.lost,
            k.quiet.renewals_per_s,
            due(k.count),
            k.quiet.most_at_risk,
            k.cpu_per_renewal_us,
            k.kib_per_lease,
            lost_killed,
            risk_killed,
            format!("{}/{}", k.server_sample.0, k.server_sample.1),
        );
        if k.grant_errors > 0 {
            println!("  {} of {} grants failed", k.grant_errors, k.count);
        }
        if let Some(f) = &k.fault {
            println!(
                "  {} leases after the kill: {:.0} renewals/s",
                k.count, f.renewals_per_s
            );
        }
    }
}

fn main() {
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(run(args));
}
