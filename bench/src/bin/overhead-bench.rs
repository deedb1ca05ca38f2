//! What etcd-ha's routing costs, or saves, when nothing fails: calls per second, latency
//! percentiles and CPU time per call of etcd-ha (its typed API, and etcd's generated client
//! over its `BalancedChannel`) against the `etcd-client` crate and a bare tonic channel to the
//! leader (the limit no client can beat), on one healthy 3-member etcd cluster, in the same
//! process.
//!
//! ```text
//! PROTOC=$(scripts/protoc-path) cargo run --release -p etcd-ha-bench --bin overhead-bench  # ~4 min
//! ... --bin overhead-bench -- --etcd-version 3.5.1 --data-dir /dev/shm
//! ... --bin overhead-bench -- --concurrency 1,16,256,1024 --calls put,txn  # ~6 min
//! ```
//!
//! For each call (put, linearizable get, serializable get, txn; `--calls`) and each
//! concurrency (1, 16 and 256 callers sharing one client by default; `--concurrency`), every client runs for [`ROUND`] at a time, [`ROUNDS`] times,
//! the clients taking turns in a rotating order so that drift of the machine hits them alike.
//! Reported: the median of the rounds' calls per second and its ratio to etcd-client's, p50
//! and p99 latency over all rounds (hdrhistogram) and the p99's ratio to the bare channel's,
//! and this process's CPU time (user + system, `getrusage`) per call. The etcd members are
//! other processes, so that is the client's own cost. Resident memory is the process's, all
//! clients together, printed at the end. After each call and concurrency, etcd-ha's hedges
//! (extra requests over attempts), suspicions and ejections in that block: on a healthy
//! cluster the hedge budget must hold and no member may be ejected.
//!
//! What differs by design: etcd-client spreads every call round-robin over the members, so
//! two thirds of its writes and linearizable reads reach a follower, which forwards them to the
//! leader; etcd-ha sends those to the leader and spreads serializable reads by latency.

use std::time::Duration;

use clap::Parser;
use etcd_ha::proto::etcdserverpb::{PutRequest, RangeRequest, kv_client::KvClient};
use etcd_ha_bench::access::Access;
use etcd_ha_bench::clients::{BenchClient, ClientKind};
use etcd_ha_bench::metrics::latency_histogram;
use etcd_ha_bench::process::{cpu_time, status_kb};
use hdrhistogram::Histogram;
use tokio::time::Instant;
use tonic::transport::Channel;

/// The command line.
#[derive(Parser, Debug)]
#[command(
    about = "Steady-state calls/s, latency and CPU per call: etcd-ha against etcd-client \
    and a bare channel"
)]
struct Args {
    /// The etcd release of the cluster (default: ETCD_BIN, else 3.6's latest).
    #[arg(long)]
    etcd_version: Option<String>,
    /// Where the members keep their data (/dev/shm: a tmpfs, no fsync stalls).
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// Callers at once, comma-separated: one, a busy service, a heavily loaded one (add 1024
    /// for a crowd; each level adds ~1.5 min with every call).
    #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
    concurrency: Vec<usize>,
    /// Calls, comma-separated (put, get-linearizable, get-serializable, txn).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "put,get-linearizable,get-serializable,txn",
        value_parser = Call::parse
    )]
    calls: Vec<Call>,
}

/// How long one client runs one call at one concurrency in one round.
const ROUND: Duration = Duration::from_secs(2);

/// Rounds per client, call and concurrency.
const ROUNDS: usize = 3;

/// Bytes of every value put: a typical configuration entry.
const VALUE_BYTES: usize = 256;

/// A call that takes longer than this counts as an error (nothing should, on a healthy cluster).
const CALL_DEADLINE: Duration = Duration::from_secs(1);

/// The clients compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    /// etcd-ha's typed KV API.
    Ha,
    /// etcd's generated KV client over etcd-ha's `BalancedChannel`.
    HaChannel,
    /// The etcd-client crate with its defaults.
    Baseline,
    /// etcd's generated KV client on one plain tonic channel to the leader: no routing, no
    /// health, no retry; the limit.
    Bare,
}

impl Who {
    /// Every client, in the table's order.
    const ALL: [Who; 4] = [Who::Ha, Who::HaChannel, Who::Baseline, Who::Bare];

    /// The name in the table.
    fn name(self) -> &'static str {
        match self {
            Who::Ha => "etcd-ha",
            Who::HaChannel => "etcd-ha BalancedChannel",
            Who::Baseline => "etcd-client",
            Who::Bare => "bare channel to leader",
        }
    }
}

/// The call made in a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Put,
    LinearizableGet,
    SerializableGet,
    /// If the key exists, put it again, else read it ([`etcd_ha_bench::txn`]).
    Txn,
}

impl Call {
    const ALL: [Call; 4] = [
        Call::Put,
        Call::LinearizableGet,
        Call::SerializableGet,
        Call::Txn,
    ];

    fn name(self) -> &'static str {
        match self {
            Call::Put => "put",
            Call::LinearizableGet => "get-linearizable",
            Call::SerializableGet => "get-serializable",
            Call::Txn => "txn",
        }
    }

    /// The call named `name` on the command line.
    fn parse(name: &str) -> Result<Call, String> {
        Call::ALL
            .into_iter()
            .find(|c| c.name() == name)
            .ok_or_else(|| {
                format!("no call {name:?} (put, get-linearizable, get-serializable, txn)")
            })
    }
}

/// One connected client of any kind; cheap to clone (clones share connections).
#[derive(Clone)]
enum Caller {
    /// etcd-ha's typed API or etcd-client.
    Bench(BenchClient),
    /// The generated client over etcd-ha's balancer.
    Channel(KvClient<etcd_ha::BalancedChannel>),
    /// The generated client over a plain channel to the leader.
    Bare(KvClient<Channel>),
}

/// One call through a generated KV client (of either channel type).
macro_rules! generated_call {
    ($kv:expr, $call:expr, $key:expr) => {
        match $call {
            Call::Put => $kv
                .put(PutRequest {
                    key: $key,
                    value: vec![b'v'; VALUE_BYTES],
                    ..Default::default()
                })
                .await
                .map(drop),
            Call::LinearizableGet | Call::SerializableGet => $kv
                .range(RangeRequest {
                    key: $key,
                    serializable: $call == Call::SerializableGet,
                    ..Default::default()
                })
                .await
                .map(drop),
            Call::Txn => $kv
                .txn(etcd_ha_bench::txn::raw(&$key, &[b'v'; VALUE_BYTES]))
                .await
                .map(drop),
        }
        .map_err(|s| format!("grpc {:?}", s.code()))
    };
}

impl Caller {
    /// Makes one `call` on `key`.
    async fn call(&mut self, call: Call, key: &str) -> Result<(), String> {
        let key = key.as_bytes().to_vec();
        match self {
            Caller::Bench(client) => match (call, client) {
                (Call::Txn, BenchClient::Ha(kv)) => {
                    let value = vec![b'v'; VALUE_BYTES];
                    etcd_ha_bench::txn::ha(kv, key, value)
                        .await
                        .map_err(|e| e.to_string())
                }
                (Call::Txn, BenchClient::Baseline(kv)) => {
                    let value = vec![b'v'; VALUE_BYTES];
                    etcd_ha_bench::txn::ec(kv, key, value)
                        .await
                        .map_err(|e| e.to_string())
                }
                (Call::Txn, _) => Err("no txn for this client here".to_owned()),
                (Call::Put, client) => client.put(key, vec![b'v'; VALUE_BYTES]).await,
                (Call::LinearizableGet, client) => client.get(key, false).await,
                (Call::SerializableGet, client) => client.get(key, true).await,
            },
            Caller::Channel(kv) => generated_call!(kv, call, key),
            Caller::Bare(kv) => generated_call!(kv, call, key),
        }
    }
}

/// What one client did over all rounds of one call and concurrency.
struct Tally {
    /// Calls per second of each round.
    rates: Vec<f64>,
    /// Latency of every successful call, in microseconds.
    latencies: Histogram<u64>,
    /// Calls that failed or outlived [`CALL_DEADLINE`].
    errors: usize,
    /// This process's CPU time over the rounds.
    cpu: Duration,
    /// Calls made over the rounds.
    calls: u64,
}

impl Tally {
    /// An empty tally.
    fn new() -> Self {
        Tally {
            rates: Vec::new(),
            latencies: latency_histogram(),
            errors: 0,
            cpu: Duration::ZERO,
            calls: 0,
        }
    }

    /// The median of the rounds' calls per second.
    fn median_rate(&self) -> f64 {
        let mut r = self.rates.clone();
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    }

    /// Latency at quantile `q`, in microseconds.
    fn percentile(&self, q: f64) -> u64 {
        self.latencies.value_at_quantile(q)
    }

    /// CPU time per call, in microseconds.
    fn cpu_per_call_us(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.calls.max(1) as f64
    }
}

/// Run `callers` copies of `caller` making `call` for one round; add the result to `tally`.
async fn round(caller: &Caller, call: Call, callers: usize, key: &str, tally: &mut Tally) {
    let began = Instant::now();
    let cpu_before = cpu_time();
    let stop = began + ROUND;
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let mut caller = caller.clone();
            let key = key.to_owned();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut errors = 0;
                while Instant::now() < stop {
                    let t = Instant::now();
                    match tokio::time::timeout(CALL_DEADLINE, caller.call(call, &key)).await {
                        Ok(Ok(())) => latencies.push(t.elapsed()),
                        _ => errors += 1,
                    }
                }
                (latencies, errors)
            })
        })
        .collect();
    let mut done = 0;
    for task in tasks {
        let (latencies, errors) = task.await.expect("a caller task");
        done += latencies.len();
        for latency in latencies {
            let micros = latency.as_micros().max(1) as u64;
            tally.latencies.saturating_record(micros);
        }
        tally.errors += errors;
        tally.calls += errors as u64;
    }
    tally.calls += done as u64;
    tally.cpu += cpu_time().saturating_sub(cpu_before);
    tally
        .rates
        .push(done as f64 / began.elapsed().as_secs_f64());
}

/// Starts the cluster and the clients, then times every call x concurrency x client.
async fn run(args: Args) {
    let (binary, _) = etcd_ha_bench::server::local(args.etcd_version.as_deref())
        .unwrap_or_else(|e| panic!("the etcd server: {e}"));
    let (cluster, leader) =
        etcd_ha_bench::server::three_members(&binary, args.data_dir.as_deref()).await;
    let endpoints = cluster.endpoints();
    let ha = etcd_ha::Client::connect(&endpoints, etcd_ha::Options::default())
        .await
        .expect("etcd-ha connects");
    let bare = Channel::from_shared(cluster.endpoint(leader))
        .expect("a valid URL")
        .connect()
        .await
        .expect("a channel to the leader");
    let callers = [
        Caller::Bench(BenchClient::Ha(ha.kv())),
        Caller::Channel(KvClient::new(ha.balanced_channel())),
        Caller::Bench(
            BenchClient::connect(
                ClientKind::EtcdClientDefault,
                &endpoints,
                &Access::none(),
                "overhead/etcd-client/",
                CALL_DEADLINE,
            )
            .await
            .expect("etcd-client connects")
            .client,
        ),
        Caller::Bare(KvClient::new(bare)),
    ];
    // Let the probes find the leader before anything is timed.
    tokio::time::sleep(Duration::from_secs(2)).await;

    println!(
        "etcd {} ({} members), {} s rounds x {ROUNDS} per client, value {VALUE_BYTES} B; \
         rate = median calls/s of the rounds, ratio = rate / etcd-client's, p99/bare = p99 / the \
         bare channel's, cpu = this process's CPU time per call",
        cluster.etcd_version(),
        cluster.len(),
        ROUND.as_secs()
    );
    println!(
        "{:<18} {:>5}  {:<24} {:>9} {:>7} {:>9} {:>9} {:>8} {:>9} {:>6}",
        "call",
        "conc",
        "client",
        "rate",
        "ratio",
        "p50 [us]",
        "p99 [us]",
        "p99/bare",
        "cpu [us]",
        "errors"
    );
    for &call in &args.calls {
        for &concurrency in &args.concurrency {
            let key = format!("overhead/{}/{concurrency}", call.name());
            let mut tallies: Vec<Tally> = Who::ALL.iter().map(|_| Tally::new()).collect();
            let stats_before = ha.call_stats();
            for r in 0..ROUNDS {
                for i in 0..Who::ALL.len() {
                    let who = (i + r) % Who::ALL.len();
                    round(&callers[who], call, concurrency, &key, &mut tallies[who]).await;
                }
            }
            let index = |w: Who| Who::ALL.iter().position(|&x| x == w).expect("listed");
            let baseline = tallies[index(Who::Baseline)].median_rate();
            let bare_p99 = tallies[index(Who::Bare)].percentile(0.99).max(1) as f64;
            for (who, tally) in Who::ALL.iter().zip(&tallies) {
                println!(
                    "{:<18} {:>5}  {:<24} {:>9.0} {:>7.2} {:>9} {:>9} {:>8.2} {:>9.1} {:>6}",
                    call.name(),
                    concurrency,
                    who.name(),
                    tally.median_rate(),
                    tally.median_rate() / baseline,
                    tally.percentile(0.5),
                    tally.percentile(0.99),
                    tally.percentile(0.99) as f64 / bare_p99,
                    tally.cpu_per_call_us(),
                    tally.errors
                );
            }
            // What etcd-ha's adaptive hedging cost in this block (typed API and balanced
            // channel share the client): extra requests, and whether a healthy member was
            // ever suspected or ejected.
            let s = ha.call_stats().since(&stats_before);
            println!(
                "{:<18} {:>5}  etcd-ha hedges: {} of {} attempts ({:.3} % extra; {} early, {} \
                 refused by the budget), {} suspicions, {} ejections",
                call.name(),
                concurrency,
                s.hedges,
                s.attempts,
                100.0 * s.hedges as f64 / s.attempts.saturating_sub(s.hedges).max(1) as f64,
                s.early_hedges,
                s.hedges_refused,
                s.suspicions,
                s.ejections
            );
        }
    }
    println!(
        "resident memory of this process (all four clients, runtime and the callers' tasks): {} kB now, \
         {} kB peak",
        status_kb("VmRSS").map_or("?".into(), |kb| kb.to_string()),
        status_kb("VmHWM").map_or("?".into(), |kb| kb.to_string())
    );
}

fn main() {
    // As many worker threads as cores, as the failover benchmark.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(run(Args::parse()));
}
