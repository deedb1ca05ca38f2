//! What the watch-fed [`Cache`] saves: consistent reads of a prefix and of single keys served
//! by the cache against linearizable `Range`s to etcd, while a writer changes the prefix, on
//! one 3-member cluster the bench starts itself (data in /dev/shm where there is one).
//!
//! ```text
//! PROTOC=$(scripts/protoc-path) cargo run --release -p etcd-ha-bench --bin cache-bench  # ~3 min
//! ```
//!
//! For each read (a prefix of `--keys` keys of `--value-bytes`, or one key of it) and each
//! number of readers (1, 16, 256 sharing one client), the cache and the direct read take turns
//! for `--rounds` rounds of `--round-secs`. Reported: median calls/s over the rounds, the ratio
//! cache / direct, p50 and p99 (hdrhistogram), and the etcd members' CPU (user + system, from
//! /proc) per 1,000 reads above what the writes alone cost (measured first, in a round without
//! readers). The cache's consistent read latency is its freshness wait: reading the memory is
//! microseconds. Curves as SVG (`--svg`).
//!
//! Then the fan-out (`--subscribers`): that many local watches of one key of the cache, next
//! to one server watch of it, while the writes go on (`fanout.rs`): each delivery's delay from
//! the probe put's send, and resident memory per subscriber.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use clap::Parser;
use etcd_ha::testkit::Cluster;
use etcd_ha::{Cache, CacheOptions, Client, Freshness, GetOptions, Options, PutOptions};
use etcd_ha_bench::metrics::latency_histogram;
use etcd_ha_bench::process::status_kb;
use hdrhistogram::Histogram;
use plotters::prelude::*;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// The command line.
#[derive(Parser, Debug)]
#[command(about = "Consistent reads from etcd-ha's watch-fed cache against linearizable Range")]
struct Args {
    /// Keys in the prefix.
    #[arg(long, default_value_t = 10_000)]
    keys: usize,
    /// Bytes per value.
    #[arg(long, default_value_t = 1024)]
    value_bytes: usize,
    /// Writes per second into the prefix while reading.
    #[arg(long, default_value_t = 1000)]
    writes_per_sec: u32,
    /// Seconds per round.
    #[arg(long, default_value_t = 2)]
    round_secs: u64,
    /// Rounds per read, readers and way of reading.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Numbers of readers, comma-separated.
    #[arg(long, default_value = "1,16,256", value_delimiter = ',')]
    readers: Vec<usize>,
    /// Numbers of local watches in the fan-out stages, comma-separated (empty: none).
    #[arg(long, default_value = "1,100,10000", value_delimiter = ',')]
    subscribers: Vec<usize>,
    /// Where the SVG of the results goes.
    #[arg(long, default_value = "target/cache-bench/cache-bench.svg")]
    svg: PathBuf,
}

const PREFIX: &str = "cache-bench/";

/// What is read, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    PrefixRange,
    PrefixCache,
    KeyRange,
    KeyCache,
}

impl Read {
    const ALL: [Read; 4] = [
        Read::PrefixRange,
        Read::PrefixCache,
        Read::KeyRange,
        Read::KeyCache,
    ];

    fn name(self) -> &'static str {
        match self {
            Read::PrefixRange => "prefix: linearizable Range",
            Read::PrefixCache => "prefix: Cache Consistent",
            Read::KeyRange => "key: linearizable get",
            Read::KeyCache => "key: Cache Consistent",
        }
    }
}

/// What one read at one number of readers measured over its rounds.
struct Tally {
    rates: Vec<f64>,
    latency: Histogram<u64>,
    reads: u64,
    errors: u64,
    /// etcd CPU in the rounds, less the writes' own share.
    etcd_cpu: Duration,
}

impl Tally {
    fn new() -> Self {
        Tally {
            rates: Vec::new(),
            latency: latency_histogram(),
            reads: 0,
            errors: 0,
            etcd_cpu: Duration::ZERO,
        }
    }

    fn median_rate(&self) -> f64 {
        let mut r = self.rates.clone();
        r.sort_by(f64::total_cmp);
        r.get(r.len() / 2).copied().unwrap_or(0.0)
    }

    fn cpu_ms_per_1000(&self) -> f64 {
        self.etcd_cpu.as_secs_f64() * 1e3 / (self.reads.max(1) as f64 / 1000.0)
    }
}

/// CPU time (user + system) of the cluster's members so far, from /proc.
fn etcd_cpu(cluster: &Cluster) -> Duration {
    // SAFETY: sysconf only reads a constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (0..cluster.len())
        .filter_map(|i| cluster.pid(i))
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .map(|stat| {
            // Fields after the command (which may hold spaces): utime is the 12th, stime 13th.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let f: Vec<&str> = rest.split_whitespace().collect();
            let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            Duration::from_secs_f64((t(11) + t(12)) / ticks)
        })
        .sum()
}

/// Puts `rate` writes per second to random keys of the prefix until `stop`.
fn start_writer(
    client: Client,
    keys: usize,
    value: Arc<Vec<u8>>,
    rate: u32,
    stop: Arc<AtomicBool>,
) {
    tokio::spawn(async move {
        let inflight = Arc::new(Semaphore::new(64));
        let mut tick = tokio::time::interval(Duration::from_secs(1) / rate.max(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            let Ok(permit) = inflight.clone().acquire_owned().await else {
                return;
            };
            let kv = client.kv();
            let key = format!("{PREFIX}{:06}", fastrand::usize(..keys));
            let value = value.clone();
            tokio::spawn(async move {
                let _ = kv
                    .put(key, value.as_slice().to_vec(), PutOptions::new())
                    .await;
                drop(permit);
            });
        }
    });
}

/// One round of `readers` readers doing `read` for `length`; adds to `tally`.
async fn round(
    read: Read,
    readers: usize,
    length: Duration,
    client: &Client,
    cache: &Arc<Cache>,
    keys: usize,
    tally: &mut Tally,
) {
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + length;
    let mut tasks = Vec::new();
    for _ in 0..readers {
        let (kv, cache, done, errors) = (client.kv(), cache.clone(), done.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut h = latency_histogram();
            while Instant::now() < end {
                let key = format!("{PREFIX}{:06}", fastrand::usize(..keys));
                let start = Instant::now();
                let ok = match read {
                    Read::PrefixRange => kv
                        .get(PREFIX, GetOptions::new().with_prefix())
                        .await
                        .is_ok(),
                    Read::PrefixCache => cache.list(Freshness::Consistent).await.is_ok(),
                    Read::KeyRange => kv.get(key, GetOptions::new()).await.is_ok(),
                    Read::KeyCache => cache.get(key, Freshness::Consistent).await.is_ok(),
                };
                let us = start.elapsed().as_micros() as u64;
                if ok {
                    let _ = h.record(us.max(1));
                    done.fetch_add(1, Ordering::Relaxed);
                } else {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            h
        }));
    }
    let started = Instant::now();
    for task in tasks {
        if let Ok(h) = task.await {
            let _ = tally.latency.add(h);
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed);
    tally.rates.push(n as f64 / elapsed);
    tally.reads += n;
    tally.errors += errors.load(Ordering::Relaxed);
}

async fn run(args: Args) {
    let shm = std::path::Path::new("/dev/shm");
    let mut builder = Cluster::builder().members(3);
    if shm.is_dir() {
        builder = builder.data_dir_in(shm);
    }
    let cluster = builder.start().await.expect("a 3-member etcd cluster");
    cluster
        .leader(Duration::from_secs(30))
        .await
        .expect("a leader");
    let options = Options::default().with_max_response_bytes(1 << 30);
    let client = Client::connect(cluster.endpoints(), options)
        .await
        .expect("etcd-ha connects");
    let value = Arc::new(vec![b'v'; args.value_bytes]);

    // The prefix, 64 puts at a time.
    let loading = Instant::now();
    let inflight = Arc::new(Semaphore::new(64));
    let mut puts = Vec::new();
    for i in 0..args.keys {
        let permit = inflight.clone().acquire_owned().await.expect("open");
        let (kv, value) = (client.kv(), value.clone());
        puts.push(tokio::spawn(async move {
            kv.put(
                format!("{PREFIX}{i:06}"),
                value.as_slice().to_vec(),
                PutOptions::new(),
            )
            .await
            .expect("preload put");
            drop(permit);
        }));
    }
    for p in puts {
        p.await.expect("preload");
    }
    println!(
        "{} keys of {} B put in {:.1} s",
        args.keys,
        args.value_bytes,
        loading.elapsed().as_secs_f64()
    );

    let made = Instant::now();
    let cache_options = CacheOptions::new()
        .with_prefix()
        .with_read_timeout(Duration::from_secs(10));
    let cache = Arc::new(
        Cache::new(&client, PREFIX, cache_options)
            .await
            .expect("the cache loads"),
    );
    let rss = status_kb("VmRSS").unwrap_or(0);
    let stats = cache.stats();
    println!(
        "cache loaded in {:.2} s: {} keys, {:.1} MiB by its estimate; this process {} MiB resident",
        made.elapsed().as_secs_f64(),
        stats.keys,
        stats.bytes as f64 / (1 << 20) as f64,
        rss / 1024
    );

    let stop = Arc::new(AtomicBool::new(false));
    start_writer(
        client.clone(),
        args.keys,
        value.clone(),
        args.writes_per_sec,
        stop.clone(),
    );
    let length = Duration::from_secs(args.round_secs);
    tokio::time::sleep(Duration::from_secs(1)).await;
    // What the writes alone cost the members.
    let before = etcd_cpu(&cluster);
    let idle = Instant::now();
    tokio::time::sleep(length * 2).await;
    let writes_cpu_per_s =
        (etcd_cpu(&cluster) - before).as_secs_f64() / idle.elapsed().as_secs_f64();
    println!(
        "etcd {} (3 members), {} writes/s into the prefix: the members spend {:.0} ms CPU/s on them",
        cluster.etcd_version(),
        args.writes_per_sec,
        writes_cpu_per_s * 1e3
    );

    let mut results: Vec<(Read, usize, Tally)> = Vec::new();
    println!(
        "{:<28} {:>7} {:>10} {:>8} {:>10} {:>10} {:>14} {:>6}",
        "read", "readers", "calls/s", "x direct", "p50 [us]", "p99 [us]", "etcd ms/1000", "errors"
    );
    for &readers in &args.readers {
        let mut tallies: Vec<Tally> = Read::ALL.iter().map(|_| Tally::new()).collect();
        for r in 0..args.rounds {
            for i in 0..Read::ALL.len() {
                let which = (i + r) % Read::ALL.len();
                let cpu = etcd_cpu(&cluster);
                let t0 = Instant::now();
                round(
                    Read::ALL[which],
                    readers,
                    length,
                    &client,
                    &cache,
                    args.keys,
                    &mut tallies[which],
                )
                .await;
                let spent = (etcd_cpu(&cluster) - cpu).as_secs_f64()
                    - writes_cpu_per_s * t0.elapsed().as_secs_f64();
                tallies[which].etcd_cpu += Duration::from_secs_f64(spent.max(0.0));
            }
        }
        for (read, tally) in Read::ALL.iter().zip(tallies) {
            let direct = match read {
                Read::PrefixCache => Some(Read::PrefixRange),
                Read::KeyCache => Some(Read::KeyRange),
                _ => None,
            };
            let ratio = direct
                .and_then(|d| results.iter().find(|(r, n, _)| *r == d && *n == readers))
                .map(|(_, _, t)| tally.median_rate() / t.median_rate().max(1e-9));
            println!(
                "{:<28} {:>7} {:>10.0} {:>8} {:>10} {:>10} {:>14.1} {:>6}",
                read.name(),
                readers,
                tally.median_rate(),
                ratio.map_or("".into(), |r| format!("{r:.1}")),
                tally.latency.value_at_quantile(0.5),
                tally.latency.value_at_quantile(0.99),
                tally.cpu_ms_per_1000(),
                tally.errors
            );
            results.push((*read, readers, tally));
        }
    }
    if !args.subscribers.is_empty() {
        println!(
            "{:<12} {:>8} {:>14} {:>14} {:>14} {:>14} {:>9} {:>12}",
            "subscribers",
            "probes",
            "local p50 [us]",
            "local p99 [us]",
            "server p50",
            "server p99",
            "missing",
            "B/subscriber"
        );
    }
    for &n in &args.subscribers {
        let key = format!("{PREFIX}fanout");
        let f = etcd_ha_bench::fanout::stage(&client, &cache, &key, n, length * 2).await;
        println!(
            "{:<12} {:>8} {:>14} {:>14} {:>14} {:>14} {:>9} {:>12.0}",
            f.subscribers,
            f.probes,
            f.local.value_at_quantile(0.5),
            f.local.value_at_quantile(0.99),
            f.server.value_at_quantile(0.5),
            f.server.value_at_quantile(0.99),
            f.missing,
            f.bytes_per_subscriber
        );
    }
    stop.store(true, Ordering::Relaxed);
    let s = cache.stats();
    println!(
        "cache: {} rounds of fresh reads, {} quorum reads ({} of the range), {} progress requests, {} events, {} loads, {} reloads",
        s.rounds, s.quorum_reads, s.range_proofs, s.progress_requests, s.events, s.loads, s.reloads
    );
    match plot(&args.svg, &results) {
        Ok(()) => println!("curves: {}", args.svg.display()),
        Err(e) => println!("no curves: {e}"),
    }
}

/// Calls/s (log scale) against readers, one curve per read.
fn plot(
    path: &std::path::Path,
    results: &[(Read, usize, Tally)],
) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let max_readers = results.iter().map(|r| r.1).max().unwrap_or(1).max(2) as f64;
    let max_rate = results
        .iter()
        .map(|r| r.2.median_rate())
        .fold(1.0, f64::max)
        * 2.0;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Consistent reads: watch-fed cache vs linearizable Range",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((1.0..max_readers).log_scale(), (1.0..max_rate).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("readers")
        .y_desc("calls/s")
        .draw()?;
    let colors = [RED, BLUE, MAGENTA, GREEN];
    for (read, color) in Read::ALL.iter().zip(colors) {
        let points: Vec<(f64, f64)> = results
            .iter()
            .filter(|r| r.0 == *read)
            .map(|r| (r.1 as f64, r.2.median_rate().max(1.0)))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(read.name())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    root.present()?;
    Ok(())
}

fn main() {
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(run(args));
}
