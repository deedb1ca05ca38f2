//! What etcd-ha's routing costs, or saves, when nothing fails: calls per second and latency
//! percentiles of etcd-ha (its typed API, and etcd's generated client over its
//! `BalancedChannel`) against the `etcd-client` crate, on one healthy 3-member etcd cluster,
//! in the same process.
//!
//! ```text
//! PROTOC=$(scripts/protoc-path) cargo run --release -p etcd-ha-bench --bin overhead-bench  # ~2 min
//! ```
//!
//! For each call (put, linearizable get, serializable get) and each concurrency (1 and 16
//! callers), every client runs for [`ROUND`] at a time, [`ROUNDS`] times, the clients taking
//! turns in a rotating order so that drift of the machine hits them alike. Reported: the
//! median of the rounds' calls per second, p50 and p99 latency over all rounds, and calls per
//! second as a ratio to etcd-client's in the same run.
//!
//! What differs by design: etcd-client spreads every call round-robin over the members, so
//! two thirds of its writes and linearizable reads reach a follower, which forwards them to the
//! leader; etcd-ha sends those to the leader and spreads serializable reads by latency.

use std::time::Duration;

use etcd_ha::proto::etcdserverpb::{PutRequest, RangeRequest, kv_client::KvClient};
use etcd_ha::testkit::Cluster;
use etcd_ha_bench::clients::{BenchClient, ClientKind};
use tokio::time::Instant;

/// How long one client runs one call at one concurrency in one round.
const ROUND: Duration = Duration::from_secs(2);

/// Rounds per client, call and concurrency.
const ROUNDS: usize = 3;

/// Callers at once.
const CONCURRENCY: [usize; 2] = [1, 16];

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
}

impl Who {
    const ALL: [Who; 3] = [Who::Ha, Who::HaChannel, Who::Baseline];

    fn name(self) -> &'static str {
        match self {
            Who::Ha => "etcd-ha",
            Who::HaChannel => "etcd-ha BalancedChannel",
            Who::Baseline => "etcd-client",
        }
    }
}

/// The call made in a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Put,
    LinearizableGet,
    SerializableGet,
}

impl Call {
    const ALL: [Call; 3] = [Call::Put, Call::LinearizableGet, Call::SerializableGet];

    fn name(self) -> &'static str {
        match self {
            Call::Put => "put",
            Call::LinearizableGet => "get-linearizable",
            Call::SerializableGet => "get-serializable",
        }
    }
}

/// One connected client of any kind; cheap to clone (clones share connections).
#[derive(Clone)]
enum Caller {
    Bench(BenchClient),
    Channel(KvClient<etcd_ha::BalancedChannel>),
}

impl Caller {
    async fn call(&mut self, call: Call, key: &str) -> Result<(), String> {
        let key = key.as_bytes().to_vec();
        match self {
            Caller::Bench(client) => match call {
                Call::Put => client.put(key, vec![b'v'; VALUE_BYTES]).await,
                Call::LinearizableGet => client.get(key, false).await,
                Call::SerializableGet => client.get(key, true).await,
            },
            Caller::Channel(kv) => {
                let result = match call {
                    Call::Put => kv
                        .put(PutRequest {
                            key,
                            value: vec![b'v'; VALUE_BYTES],
                            ..Default::default()
                        })
                        .await
                        .map(drop),
                    Call::LinearizableGet | Call::SerializableGet => kv
                        .range(RangeRequest {
                            key,
                            serializable: call == Call::SerializableGet,
                            ..Default::default()
                        })
                        .await
                        .map(drop),
                };
                result.map_err(|s| format!("grpc {:?}", s.code()))
            }
        }
    }
}

/// What one client did over all rounds of one call and concurrency.
#[derive(Default)]
struct Tally {
    /// Calls per second of each round.
    rates: Vec<f64>,
    /// Latency of every successful call.
    latencies: Vec<Duration>,
    errors: usize,
}

impl Tally {
    fn median_rate(&self) -> f64 {
        let mut r = self.rates.clone();
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    }

    fn percentile(&self, p: f64) -> Duration {
        let mut l = self.latencies.clone();
        l.sort();
        l.get(((l.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or_default()
    }
}

/// Run `callers` copies of `caller` making `call` for one round; add the result to `tally`.
async fn round(caller: &Caller, call: Call, callers: usize, key: &str, tally: &mut Tally) {
    let began = Instant::now();
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
        tally.latencies.extend(latencies);
        tally.errors += errors;
    }
    tally
        .rates
        .push(done as f64 / began.elapsed().as_secs_f64());
}

async fn run() {
    let cluster = Cluster::start(3).await.expect("a 3-member etcd cluster");
    cluster
        .leader(Duration::from_secs(30))
        .await
        .expect("a leader");
    let endpoints = cluster.endpoints();
    let ha = etcd_ha::Client::connect(&endpoints, etcd_ha::Options::default())
        .await
        .expect("etcd-ha connects");
    let callers = [
        Caller::Bench(BenchClient::Ha(ha.kv())),
        Caller::Channel(KvClient::new(ha.balanced_channel())),
        Caller::Bench(
            BenchClient::connect(
                ClientKind::EtcdClientDefault,
                &endpoints,
                "overhead/etcd-client/",
                CALL_DEADLINE,
            )
            .await
            .expect("etcd-client connects"),
        ),
    ];
    // Let the probes find the leader before anything is timed.
    tokio::time::sleep(Duration::from_secs(2)).await;

    println!(
        "etcd {} ({} members), {} s rounds x {ROUNDS} per client, value {VALUE_BYTES} B; \
         rate = median calls/s of the rounds, ratio = rate / etcd-client's",
        cluster.etcd_version(),
        cluster.len(),
        ROUND.as_secs()
    );
    println!(
        "{:<18} {:>5}  {:<24} {:>9} {:>7} {:>9} {:>9} {:>6}",
        "call", "conc", "client", "rate", "ratio", "p50 [us]", "p99 [us]", "errors"
    );
    for call in Call::ALL {
        for concurrency in CONCURRENCY {
            let key = format!("overhead/{}/{concurrency}", call.name());
            let mut tallies: Vec<Tally> = Who::ALL.iter().map(|_| Tally::default()).collect();
            for r in 0..ROUNDS {
                for i in 0..Who::ALL.len() {
                    let who = (i + r) % Who::ALL.len();
                    round(&callers[who], call, concurrency, &key, &mut tallies[who]).await;
                }
            }
            let baseline = tallies[2].median_rate();
            for (who, tally) in Who::ALL.iter().zip(&tallies) {
                println!(
                    "{:<18} {:>5}  {:<24} {:>9.0} {:>7.2} {:>9} {:>9} {:>6}",
                    call.name(),
                    concurrency,
                    who.name(),
                    tally.median_rate(),
                    tally.median_rate() / baseline,
                    tally.percentile(0.5).as_micros(),
                    tally.percentile(0.99).as_micros(),
                    tally.errors
                );
            }
        }
    }
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(run());
}
