//! What one call costs the calling process, counted, not timed: instructions per call
//! (valgrind's callgrind, repeatable on a noisy machine) and allocations per call (a counting
//! allocator), for etcd-ha's typed API, etcd's generated client over etcd-ha's
//! `BalancedChannel`, the etcd-client crate, and the generated client on a bare tonic channel to
//! the leader (the limit), on one healthy 3-member etcd cluster. `bare-keepalive` is that
//! channel with the HTTP/2 keepalive etcd-ha sets (10 s / 3 s, not while idle): hyper then
//! reads the clock on every frame and polls its ping timer on every turn of the connection,
//! a cost of keeping connections checked that is not etcd-ha's own layer.
//!
//! ```text
//! PROTOC=$(scripts/protoc-path) cargo run --release -p etcd-ha-bench --bin call-cost  # ~6 min
//! ```
//!
//! The run starts a cluster, then runs this binary again under `valgrind --tool=callgrind` once
//! per client and call (put, linearizable get, serializable get, txn). Each such run connects,
//! warms up, and then, on a current-thread tokio runtime (so no idle worker spins into the
//! counts), counts three stretches: `--idle-secs` with no call at all (the client's background
//! work: probes, keepalives), then `--calls` calls one after another, then `--idle-secs` with no
//! call again. A call's cost is the calls' stretch less the background rate (of the two quiet
//! stretches together) over its wall time, divided by the calls: valgrind
//! slows the process some 50 times, and the background work goes by the clock, so without the
//! subtraction it would be charged to the calls. Allocations are counted the same way.
//!
//! Printed: instructions and allocations per call, and instructions as a ratio to the bare
//! channel's; the background's instructions per second; the callgrind dumps stay under
//! `target/call-cost/` for `callgrind_annotate`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use etcd_ha::proto::etcdserverpb::{PutRequest, RangeRequest, kv_client::KvClient};
use etcd_ha::testkit::Cluster;
use etcd_ha_bench::callgrind::{self, Counting};
use tokio::time::Instant;
use tonic::transport::Channel;

#[global_allocator]
static ALLOC: Counting = Counting::new();

/// Bytes of every value put: a typical configuration entry (as overhead-bench).
const VALUE_BYTES: usize = 256;

/// The command line: the run, or (`--measure`) one client and call under callgrind.
#[derive(Parser, Debug)]
#[command(
    about = "Instructions and allocations per call: etcd-ha against etcd-client and a bare channel"
)]
struct Args {
    /// Calls counted per client and call.
    #[arg(long, default_value_t = 1000)]
    calls: u32,
    /// Calls made before counting (connections, caches, the leader known).
    #[arg(long, default_value_t = 200)]
    warmup: u32,
    /// Seconds of the background stretch (no calls).
    #[arg(long, default_value_t = 3)]
    idle_secs: u64,
    /// The etcd release of the cluster (default: ETCD_BIN, else 3.6's latest).
    #[arg(long)]
    etcd_version: Option<String>,
    /// Clients, comma-separated (etcd-ha, balanced-channel, etcd-client, bare, bare-keepalive).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "etcd-ha,balanced-channel,etcd-client,bare,bare-keepalive"
    )]
    clients: Vec<String>,
    /// Calls, comma-separated (put, get-linearizable, get-serializable, txn).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "put,get-linearizable,get-serializable,txn"
    )]
    ops: Vec<String>,
    /// Internal: count one client and call (the run passes the rest below).
    #[arg(long, hide = true)]
    measure: bool,
    /// Internal: the cluster's endpoints.
    #[arg(long, hide = true, value_delimiter = ',')]
    endpoints: Vec<String>,
    /// Internal: the leader's endpoint (the bare channel's).
    #[arg(long, hide = true)]
    leader: Option<String>,
}

/// The call made in a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Put,
    LinearizableGet,
    SerializableGet,
    Txn,
}

impl Op {
    fn parse(name: &str) -> Result<Op, String> {
        Ok(match name {
            "put" => Op::Put,
            "get-linearizable" => Op::LinearizableGet,
            "get-serializable" => Op::SerializableGet,
            "txn" => Op::Txn,
            other => return Err(format!("unknown call {other:?}")),
        })
    }

    fn key(self) -> Vec<u8> {
        format!("call-cost/{self:?}").into_bytes()
    }
}

/// One connected client.
enum Caller {
    /// The typed API, and its client (dropping a client stops its background tasks).
    Ha {
        kv: etcd_ha::Kv,
        _client: etcd_ha::Client,
    },
    Channel {
        kv: KvClient<etcd_ha::BalancedChannel>,
        _client: etcd_ha::Client,
    },
    Baseline(Box<etcd_client::KvClient>),
    Bare(KvClient<Channel>),
}

/// One call through a generated KV client (of either channel type).
macro_rules! generated_call {
    ($kv:expr, $op:expr, $key:expr) => {
        match $op {
            Op::Put => $kv
                .put(PutRequest {
                    key: $key,
                    value: vec![b'v'; VALUE_BYTES],
                    ..Default::default()
                })
                .await
                .map(drop),
            Op::LinearizableGet | Op::SerializableGet => $kv
                .range(RangeRequest {
                    key: $key,
                    serializable: $op == Op::SerializableGet,
                    ..Default::default()
                })
                .await
                .map(drop),
            Op::Txn => $kv
                .txn(etcd_ha_bench::txn::raw(&$key, &[b'v'; VALUE_BYTES]))
                .await
                .map(drop),
        }
        .map_err(|s| format!("grpc {:?}: {}", s.code(), s.message()))
    };
}

impl Caller {
    async fn connect(name: &str, endpoints: &[String], leader: &str) -> Result<Caller, String> {
        let ha = || async {
            etcd_ha::Client::connect(endpoints, etcd_ha::Options::default())
                .await
                .map_err(|e| format!("etcd-ha connects: {e}"))
        };
        Ok(match name {
            "etcd-ha" => {
                let client = ha().await?;
                Caller::Ha {
                    kv: client.kv(),
                    _client: client,
                }
            }
            "balanced-channel" => {
                let client = ha().await?;
                Caller::Channel {
                    kv: KvClient::new(client.balanced_channel()),
                    _client: client,
                }
            }
            "etcd-client" => Caller::Baseline(Box::new(
                etcd_client::Client::connect(endpoints, None)
                    .await
                    .map_err(|e| format!("etcd-client connects: {e}"))?
                    .kv_client(),
            )),
            "bare" | "bare-keepalive" => {
                let mut channel =
                    Channel::from_shared(leader.to_string()).map_err(|e| e.to_string())?;
                if name == "bare-keepalive" {
                    channel = channel
                        .http2_keep_alive_interval(etcd_ha::DEFAULT_KEEPALIVE_INTERVAL)
                        .keep_alive_timeout(etcd_ha::DEFAULT_KEEPALIVE_TIMEOUT)
                        .keep_alive_while_idle(false);
                }
                Caller::Bare(KvClient::new(
                    channel
                        .connect()
                        .await
                        .map_err(|e| format!("a channel to the leader: {e}"))?,
                ))
            }
            other => return Err(format!("unknown client {other:?}")),
        })
    }

    /// Makes one `op` call.
    async fn call(&mut self, op: Op) -> Result<(), String> {
        let key = op.key();
        match self {
            Caller::Ha { kv, .. } => {
                let done = match op {
                    Op::Put => kv
                        .put(key, vec![b'v'; VALUE_BYTES], etcd_ha::PutOptions::new())
                        .await
                        .map(drop),
                    Op::LinearizableGet => kv.get(key, etcd_ha::GetOptions::new()).await.map(drop),
                    Op::SerializableGet => kv
                        .get(key, etcd_ha::GetOptions::new().with_serializable())
                        .await
                        .map(drop),
                    Op::Txn => etcd_ha_bench::txn::ha(kv, key, vec![b'v'; VALUE_BYTES]).await,
                };
                done.map_err(|e| e.to_string())
            }
            Caller::Channel { kv, .. } => generated_call!(kv, op, key),
            Caller::Bare(kv) => generated_call!(kv, op, key),
            Caller::Baseline(kv) => {
                let done = match op {
                    Op::Put => kv.put(key, vec![b'v'; VALUE_BYTES], None).await.map(drop),
                    Op::LinearizableGet => kv.get(key, None).await.map(drop),
                    Op::SerializableGet => {
                        let options = etcd_client::GetOptions::new().with_serializable();
                        kv.get(key, Some(options)).await.map(drop)
                    }
                    Op::Txn => etcd_ha_bench::txn::ec(kv, key, vec![b'v'; VALUE_BYTES]).await,
                };
                done.map_err(|e| e.to_string())
            }
        }
    }
}

/// What one stretch counted: wall time and allocations (instructions are in its dump).
struct Stretch {
    wall: Duration,
    allocs: u64,
    bytes: u64,
}

/// Counts `f`'s stretch: zero callgrind's counters, run it, dump them.
async fn stretch<F: std::future::Future<Output = Result<(), String>>>(
    f: F,
) -> Result<Stretch, String> {
    let before = ALLOC.snapshot();
    let started = Instant::now();
    callgrind::zero_stats();
    f.await?;
    callgrind::dump_stats();
    let wall = started.elapsed();
    let (allocs, bytes) = ALLOC.snapshot().since(before);
    Ok(Stretch {
        wall,
        allocs,
        bytes,
    })
}

/// `--measure`: under callgrind, one client's background stretch, its calls, and a second
/// background stretch. Prints one line the run reads: wall ms, allocations and bytes of each
/// stretch in that order.
async fn measure(args: &Args, client: &str, op: Op) -> Result<(), String> {
    if !callgrind::running_on_valgrind() {
        return Err("--measure counts instructions only under valgrind --tool=callgrind".into());
    }
    let leader = args.leader.as_deref().ok_or("--measure needs --leader")?;
    let mut caller = Caller::connect(client, &args.endpoints, leader).await?;
    for _ in 0..args.warmup {
        caller.call(op).await?;
    }
    // Let what the warm-up started (probes it woke, connections it opened) settle.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = || {
        stretch(async {
            tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
            Ok(())
        })
    };
    let before = idle().await?;
    let calls = stretch(async {
        for _ in 0..args.calls {
            caller.call(op).await?;
        }
        Ok(())
    })
    .await?;
    // The background on both sides of the calls: its rate, read from one stretch alone, moved
    // a call's count by ~1,000 between runs (a probe more or less in 3 s is ~5 % of the rate).
    let after = idle().await?;
    let line: Vec<String> = [before, calls, after]
        .iter()
        .flat_map(|s| [s.wall.as_millis() as u64, s.allocs, s.bytes])
        .map(|n| n.to_string())
        .collect();
    println!("{}", line.join(" "));
    Ok(())
}

/// One client and call, counted.
struct Cost {
    instructions: f64,
    allocs: f64,
    bytes: f64,
    background_per_sec: f64,
}

/// Runs this binary under callgrind for `client` and `op`; reads its line and its two dumps.
fn count(
    args: &Args,
    dir: &Path,
    client: &str,
    op: &str,
    endpoints: &str,
    leader: &str,
) -> Result<Cost, String> {
    let out = dir.join(format!("{client}.{op}"));
    // callgrind names the dumps <out-file>.1, .2, .3 in their order (the one at exit: .4).
    let dump = |i: u32| PathBuf::from(format!("{}.{i}", out.display()));
    for n in 1..=4 {
        let _ = std::fs::remove_file(dump(n));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let output = std::process::Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(exe)
        .args(["--measure", "--clients", client, "--ops", op])
        .args(["--endpoints", endpoints, "--leader", leader])
        .arg(format!("--calls={}", args.calls))
        .arg(format!("--warmup={}", args.warmup))
        .arg(format!("--idle-secs={}", args.idle_secs))
        .output()
        .map_err(|e| format!("valgrind: {e} (install it: apt-get install valgrind)"))?;
    if !output.status.success() {
        return Err(format!(
            "{client} {op} under callgrind failed: {}",
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .rev()
                .take(8)
                .collect::<Vec<_>>()
                .join(" | ")
        ));
    }
    let line = String::from_utf8_lossy(&output.stdout);
    let n: Vec<f64> = line
        .split_whitespace()
        .map(|x| x.parse::<f64>().map_err(|e| format!("{line:?}: {e}")))
        .collect::<Result<_, _>>()?;
    let [
        before_ms,
        before_allocs,
        before_bytes,
        calls_ms,
        calls_allocs,
        calls_bytes,
        after_ms,
        after_allocs,
        after_bytes,
    ] = n[..]
    else {
        return Err(format!("{client} {op}: unexpected line {line:?}"));
    };
    // The background stretches before and after the calls, as one.
    let idle_ms = before_ms + after_ms;
    let idle_allocs = before_allocs + after_allocs;
    let idle_bytes = before_bytes + after_bytes;
    let idle_ir = (callgrind::totals(&dump(1))? + callgrind::totals(&dump(3))?) as f64;
    let calls_ir = callgrind::totals(&dump(2))? as f64;
    let calls = f64::from(args.calls);
    let share = calls_ms / idle_ms.max(1.0);
    Ok(Cost {
        instructions: (calls_ir - idle_ir * share).max(0.0) / calls,
        allocs: (calls_allocs - idle_allocs * share).max(0.0) / calls,
        bytes: (calls_bytes - idle_bytes * share).max(0.0) / calls,
        background_per_sec: idle_ir / (idle_ms / 1000.0).max(0.001),
    })
}

async fn run(args: Args) -> Result<(), String> {
    let binary = match (&args.etcd_version, std::env::var_os("ETCD_BIN")) {
        (Some(v), _) => etcd_ha_bench::server::resolve(v)?.binary,
        (None, Some(bin)) => bin.into(),
        (None, None) => {
            etcd_ha_bench::server::resolve(etcd_ha_bench::server::DEFAULT_VERSION)?.binary
        }
    };
    let shm = Path::new("/dev/shm");
    let mut builder = Cluster::builder().members(3).etcd_bin(binary);
    if shm.is_dir() {
        builder = builder.data_dir_in(shm);
    }
    let cluster = builder.start().await.map_err(|e| e.to_string())?;
    let leader = cluster
        .leader(Duration::from_secs(30))
        .await
        .map_err(|e| e.to_string())?;
    let endpoints = cluster.endpoints().join(",");
    let leader = cluster.endpoint(leader);
    let dir = PathBuf::from("target/call-cost");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    println!(
        "etcd {} (3 members), {} calls per client and call after {} warm-up calls, one caller, \
         value {VALUE_BYTES} B; per call, the background (twice {} s without calls, around them) subtracted",
        cluster.etcd_version(),
        args.calls,
        args.warmup,
        args.idle_secs
    );
    println!(
        "{:<18} {:<18} {:>13} {:>8} {:>9} {:>12} {:>11} {:>16}",
        "call",
        "client",
        "instructions",
        "/bare",
        "/bare+ka",
        "allocations",
        "bytes",
        "background Ir/s"
    );
    for op in &args.ops {
        Op::parse(op)?;
        let mut costs = Vec::new();
        for client in &args.clients {
            costs.push((client, count(&args, &dir, client, op, &endpoints, &leader)?));
        }
        let of = |name: &str| {
            costs
                .iter()
                .find(|(c, _)| c.as_str() == name)
                .map(|(_, cost)| cost.instructions)
        };
        let (bare, kept) = (of("bare"), of("bare-keepalive"));
        for (client, cost) in &costs {
            let ratio = |base: Option<f64>| {
                base.map_or("-".to_string(), |b| format!("{:.2}", cost.instructions / b))
            };
            println!(
                "{:<18} {:<18} {:>13.0} {:>8} {:>9} {:>12.1} {:>11.0} {:>16.0}",
                op,
                client,
                cost.instructions,
                ratio(bare),
                ratio(kept),
                cost.allocs,
                cost.bytes,
                cost.background_per_sec
            );
        }
    }
    println!(
        "callgrind dumps: {}/<client>.<call>.2 (callgrind_annotate)",
        dir.display()
    );
    Ok(())
}

fn main() {
    let args = Args::parse();
    let result = if args.measure {
        // One thread: no idle worker's spinning in the counts, and the calls' own work only.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let client = args.clients.first().cloned().unwrap_or_default();
        match args.ops.first().map(|o| Op::parse(o)) {
            Some(Ok(op)) => runtime.block_on(measure(&args, &client, op)),
            Some(Err(e)) => Err(e),
            None => Err("--measure needs one call in --ops".into()),
        }
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
            .block_on(run(args))
    };
    if let Err(e) = result {
        eprintln!("call-cost: {e}");
        std::process::exit(1);
    }
}
