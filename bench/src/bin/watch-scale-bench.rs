//! How many managed watches one client holds, next to what one bare stream does on the same
//! server: for each count (1,000 to 100,000 watches, one key each, on a fresh 3-member
//! cluster), the time to make them, the memory and CPU they cost, and whether every one of them
//! gets its next event, exactly once and soon, with no fault and through faults of the member
//! serving their stream (issue 20).
//!
//! ```text
//! PROTOC=$(scripts/protoc-path) cargo run --release -p etcd-ha-bench --bin watch-scale-bench  # ~3 min
//! ... --bin watch-scale-bench -- --counts 10000,100000 --faults kill,freeze --data-dir /dev/shm
//! ```
//!
//! For each count: first the server's pace (one bare tonic `Watch` stream to the leader that
//! creates a watcher per key, then one put per key), and its pace resuming that many watchers
//! while a put per key runs: all from the revision just before those puts (a shallow resume),
//! all from one revision a round of writes back, and each from its own last event (spread over
//! as many revisions, as a client's watches are after a burst of writes). etcd catches resumed
//! watchers up 512 a pass, each pass reading the history from the oldest start among them, so
//! the depth of history behind the starts sets the pace. Then one etcd-ha client makes the
//! managed watches (`Watch::watch`, from now, 256 at a time) and a task per watch reads it, as
//! an application would. A second client puts every key once per round (256 in flight; a failed
//! put is sent again until it is acknowledged):
//!
//! - round 0 puts keys nobody watches, to measure the writer's own CPU;
//! - round 1, no fault: CPU per event is this process's CPU of the round minus round 0's;
//! - then one round per fault, started right after the fault hits the member serving the
//!   watches' stream, healed after the round.
//!
//! A round reports the watches that had no event (lost), events delivered twice (the same
//! revision again: repeated), and each watch's delay from its put's acknowledgement to its
//! event (no watch can see a write before it commits, so the acknowledgement is the floor):
//! median, p99, the largest, and how many came more than a second after their floor.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use etcd_ha::testkit::Cluster;
use etcd_ha::{Client, Options, PutOptions, WatchBatch, WatchOptions, WatchStream};
use etcd_ha_bench::process::{status_kb, threads_cpu_time};
use etcd_ha_bench::scale_plot::{Panel, Series, curves};
use etcd_ha_bench::watch_limit::{self, Pace, Resume, ResumeFrom, quantile};
use futures_util::StreamExt;
use tokio::time::{Instant, sleep};

/// The command line.
#[derive(Parser, Debug)]
#[command(about = "Managed watches held by one client at scale, next to one bare stream's pace")]
struct Args {
    /// Watches held by one client, one run each.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    counts: Vec<usize>,
    /// The faults, a round each after the quiet one.
    #[arg(long, value_delimiter = ',', default_value = "kill")]
    faults: Vec<Fault>,
    /// Watches made, and puts sent, at once.
    #[arg(long, default_value_t = 256)]
    window: usize,
    /// The watch streams the client spreads its managed watches over.
    #[arg(long, default_value_t = 1)]
    watch_streams: usize,
    /// How long a round waits for its last event after its last put.
    #[arg(long, default_value_t = 60)]
    patience_secs: u64,
    /// The quiet after a faulted member is back and the cluster ready, before the next
    /// round. With several streams, 15 lets a stream that moved onto a sibling's member
    /// spread back to the restarted one (healthy for 5 s, then checked once a 5 s window).
    #[arg(long, default_value_t = 2)]
    settle_secs: u64,
    /// Where the members keep their data (/dev/shm: a tmpfs, no fsync stalls).
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
    /// The etcd release of the local clusters (default: ETCD_BIN, else 3.6's latest).
    #[arg(long)]
    etcd_version: Option<String>,
    /// Where the curves go (SVG): CPU and memory per watch, and the resume after each fault,
    /// against the number of watches.
    #[arg(long, default_value = "target/watch-scale-bench/watch-scale.svg")]
    svg: std::path::PathBuf,
    /// Leave out the bare stream's pace and resumes (the managed watches only: a faster run
    /// when only they changed).
    #[arg(long)]
    no_bare: bool,
}

/// A fault of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Fault {
    /// SIGKILL of the member serving the watches' stream, restarted after the round.
    Kill,
    /// SIGSTOP of that member for the round, SIGCONT after it.
    Freeze,
}

/// What one watch's reader saw, shared with the bench.
#[derive(Default)]
struct Slot {
    /// Events delivered (each a new revision).
    events: AtomicU32,
    /// Events whose revision had been delivered already.
    repeats: AtomicU32,
    /// The newest revision delivered.
    revision: AtomicI64,
    /// When the newest event arrived, in microseconds since the epoch.
    event_us: AtomicU64,
    /// When the put of this round for the watch's key was acknowledged.
    acked_us: AtomicU64,
}

/// The watches' readers and what they saw.
struct Watches {
    epoch: Instant,
    slots: Arc<Vec<Slot>>,
    /// Batches other than events, and errors (each ends its watch).
    unexpected: Arc<AtomicU64>,
}

/// One round's verdict.
struct Round {
    name: String,
    put_errors: usize,
    puts: Duration,
    lost: usize,
    repeated: u64,
    /// Delays from each put's acknowledgement to its event: median, p99, largest.
    delays: [Duration; 3],
    later_than_1s: usize,
    /// From the last acknowledgement to the last event.
    last_event: Duration,
}

/// One count's results.
struct Row {
    count: usize,
    bare: Result<Pace, String>,
    /// From the revision before the puts, from one revision a round of writes back, and from
    /// each watcher's own last event.
    bare_resume: [Result<Resume, String>; 3],
    create: Duration,
    create_errors: usize,
    kib_per_watch: f64,
    /// The watching client's CPU in the no-fault round.
    round_cpu: Duration,
    rounds: Vec<Round>,
    streams_opened: u64,
}

fn key(i: usize) -> String {
    format!("w/{i:06}")
}

impl Watches {
    fn start(streams: Vec<WatchStream>, runtime: &tokio::runtime::Handle) -> Self {
        let epoch = Instant::now();
        let slots: Arc<Vec<Slot>> = Arc::new((0..streams.len()).map(|_| Slot::default()).collect());
        let unexpected = Arc::new(AtomicU64::new(0));
        for (i, mut stream) in streams.into_iter().enumerate() {
            let (slots, unexpected) = (slots.clone(), unexpected.clone());
            runtime.spawn(async move {
                while let Some(batch) = stream.next_batch().await {
                    let Ok(WatchBatch::Events { events, .. }) = batch else {
                        unexpected.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    let slot = &slots[i];
                    for event in events {
                        let revision = event.kv.map_or(0, |kv| kv.mod_revision);
                        if revision <= slot.revision.load(Ordering::Relaxed) {
                            slot.repeats.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        slot.revision.store(revision, Ordering::Relaxed);
                        let us = epoch.elapsed().as_micros() as u64;
                        slot.event_us.store(us, Ordering::Relaxed);
                        slot.events.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        Watches {
            epoch,
            slots,
            unexpected,
        }
    }

    fn events(&self) -> Vec<u32> {
        self.slots
            .iter()
            .map(|s| s.events.load(Ordering::Relaxed))
            .collect()
    }

    fn repeats(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| u64::from(s.repeats.load(Ordering::Relaxed)))
            .sum()
    }

    /// Put every watched key once (or, with `watched` false, as many keys nobody watches),
    /// each sent again until acknowledged; then wait for the events. The verdict of the round.
    async fn round(
        &self,
        writer: &Client,
        name: &str,
        watched: bool,
        window: usize,
        patience: Duration,
    ) -> Round {
        eprintln!("    round: {name} ...");
        let before = self.events();
        let repeats_before = self.repeats();
        let started = Instant::now();
        let errors: usize = futures_util::stream::iter(0..self.slots.len())
            .map(|i| async move {
                let key = if watched { key(i) } else { format!("u/{i:06}") };
                let mut errors = 0;
                while let Err(_e) = writer
                    .kv()
                    .put(key.as_bytes(), name.as_bytes(), PutOptions::new())
                    .await
                {
                    errors += 1;
                    sleep(Duration::from_millis(50)).await;
                }
                if watched {
                    let us = self.epoch.elapsed().as_micros() as u64;
                    self.slots[i].acked_us.store(us, Ordering::Relaxed);
                }
                errors
            })
            .buffer_unordered(window)
            .fold(0, |sum, e| std::future::ready(sum + e))
            .await;
        let puts = started.elapsed();
        let last_put = Instant::now();
        let pending = |slots: &[Slot]| {
            slots
                .iter()
                .zip(&before)
                .filter(|(s, b)| s.events.load(Ordering::Relaxed) == **b)
                .count()
        };
        if watched {
            while pending(&self.slots) > 0 && last_put.elapsed() < patience {
                sleep(Duration::from_millis(5)).await;
            }
        }
        let lost = if watched { pending(&self.slots) } else { 0 };
        let mut delays: Vec<Duration> = self
            .slots
            .iter()
            .zip(&before)
            .filter(|(s, b)| watched && s.events.load(Ordering::Relaxed) > **b)
            .map(|(s, _)| {
                let event = s.event_us.load(Ordering::Relaxed);
                Duration::from_micros(event.saturating_sub(s.acked_us.load(Ordering::Relaxed)))
            })
            .collect();
        delays.sort_unstable();
        let last_ack = self
            .slots
            .iter()
            .map(|s| s.acked_us.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        let last_event = self
            .slots
            .iter()
            .map(|s| s.event_us.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        Round {
            name: name.to_owned(),
            put_errors: errors,
            puts,
            lost,
            repeated: self.repeats() - repeats_before,
            delays: [
                quantile(&delays, 0.5),
                quantile(&delays, 0.99),
                quantile(&delays, 1.0),
            ],
            later_than_1s: delays
                .iter()
                .filter(|d| **d > Duration::from_secs(1))
                .count(),
            last_event: if watched {
                Duration::from_micros(last_event.saturating_sub(last_ack))
            } else {
                Duration::ZERO
            },
        }
    }
}

/// A fresh 3-member cluster with a leader; the leader's index.
async fn cluster(args: &Args, binary: &std::path::Path) -> (Cluster, usize) {
    etcd_ha_bench::server::three_members(binary, args.data_dir.as_deref()).await
}

/// The member serving the client's managed watches (the leader if it cannot be told).
async fn stream_member(client: &Client, cluster: &Cluster) -> usize {
    let url = client.watch().stream_endpoint();
    match (0..cluster.len()).find(|&i| url.as_deref() == Some(&cluster.endpoint(i))) {
        Some(i) => i,
        None => cluster
            .leader(Duration::from_secs(30))
            .await
            .expect("a leader"),
    }
}

/// One bare stream's pace on `endpoint`, and its resumes from three depths.
async fn bare(
    endpoint: &str,
    count: usize,
    window: usize,
) -> (
    Result<watch_limit::Pace, String>,
    [Result<watch_limit::Resume, String>; 3],
) {
    eprintln!("    the bare stream ...");
    let bare = watch_limit::bare_stream(endpoint, count, window).await;
    let resume = [
        watch_limit::bare_resume(endpoint, count, ResumeFrom::Before, window).await,
        watch_limit::bare_resume(endpoint, count, ResumeFrom::RoundBehind, window).await,
        match &bare {
            Ok(pace) => {
                let from = ResumeFrom::Own(&pace.revisions);
                watch_limit::bare_resume(endpoint, count, from, window).await
            }
            Err(e) => Err(e.clone()),
        },
    ];
    (bare, resume)
}

/// The name of the watching client's runtime threads: their CPU is the client's (and its
/// readers'), apart from the writer's and the bench's.
const WATCHING: &str = "ha-watches";

async fn hold(args: &Args, binary: &std::path::Path, count: usize) -> Row {
    let (mut cluster, leader) = cluster(args, binary).await;
    let (bare, bare_resume) = if args.no_bare {
        const LEFT_OUT: &str = "left out (--no-bare)";
        let resume = || Err(LEFT_OUT.to_owned());
        (Err(LEFT_OUT.to_owned()), [resume(), resume(), resume()])
    } else {
        bare(&cluster.endpoint(leader), count, args.window).await
    };
    eprintln!("    the managed watches ...");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name(WATCHING)
        .enable_all()
        .build()
        .expect("a runtime for the watching client");
    let endpoints = cluster.endpoints();
    let options = Options::default().with_watch_streams(args.watch_streams);
    let client = runtime
        .spawn(async move { Client::connect(endpoints, options).await })
        .await
        .expect("the connect task")
        .expect("etcd-ha connects");
    let writer = Client::connect(cluster.endpoints(), Options::default())
        .await
        .expect("etcd-ha connects");
    // Let the probes find the leader, as an application that has run a while.
    sleep(Duration::from_secs(1)).await;
    let rss_before = status_kb("VmRSS").unwrap_or(0);
    let started = Instant::now();
    let watch = client.watch();
    let window = args.window;
    let made: Vec<_> = runtime
        .spawn(async move {
            futures_util::stream::iter(0..count)
                .map(|i| {
                    let watch = watch.clone();
                    async move { watch.watch(key(i), WatchOptions::new()).await }
                })
                .buffered(window)
                .collect()
                .await
        })
        .await
        .expect("the watches' task");
    let create = started.elapsed();
    eprintln!("    made in {} ms; rounds ...", ms(create));
    let create_errors = made
        .iter()
        .filter(|m: &&etcd_ha::Result<WatchStream>| m.is_err())
        .count();
    let watches = Watches::start(
        made.into_iter().filter_map(Result::ok).collect(),
        runtime.handle(),
    );
    sleep(Duration::from_millis(500)).await;
    let rss_after = status_kb("VmRSS").unwrap_or(0);
    let kib_per_watch = rss_after.saturating_sub(rss_before) as f64 / count as f64;

    let patience = Duration::from_secs(args.patience_secs);
    let mut rounds = Vec::new();
    rounds.push(
        watches
            .round(&writer, "unwatched", false, args.window, patience)
            .await,
    );
    let cpu = threads_cpu_time(WATCHING);
    rounds.push(
        watches
            .round(&writer, "no fault", true, args.window, patience)
            .await,
    );
    let round_cpu = threads_cpu_time(WATCHING) - cpu;

    for &fault in &args.faults {
        let member = stream_member(&client, &cluster).await;
        eprintln!(
            "    watch streams on {:?}",
            client.watch().stream_endpoints()
        );
        // The leader of now: a kill in an earlier round may have moved it.
        let leader = cluster
            .leader(Duration::from_secs(30))
            .await
            .unwrap_or(leader);
        let role = if member == leader {
            "leader"
        } else {
            "follower"
        };
        let name = match fault {
            Fault::Kill => {
                cluster.kill(member);
                format!("SIGKILL of the stream's member ({role})")
            }
            Fault::Freeze => {
                cluster.stop(member);
                format!("SIGSTOP of the stream's member ({role})")
            }
        };
        rounds.push(
            watches
                .round(&writer, &name, true, args.window, patience)
                .await,
        );
        match fault {
            Fault::Kill => cluster.restart(member).await.expect("the member restarts"),
            Fault::Freeze => cluster.cont(member),
        }
        cluster
            .wait_ready(Duration::from_secs(30))
            .await
            .expect("the cluster heals");
        sleep(Duration::from_secs(args.settle_secs)).await;
    }
    if !args.faults.is_empty() {
        eprintln!(
            "    watch streams at the end on {:?}",
            client.watch().stream_endpoints()
        );
    }
    let streams_opened = client.watch().streams_opened();
    let unexpected = watches.unexpected.load(Ordering::Relaxed);
    if unexpected > 0 {
        println!("    {unexpected} batches were not events (errors end a watch)");
    }
    drop(client);
    runtime.shutdown_background();
    Row {
        count,
        bare,
        bare_resume,
        create,
        create_errors,
        kib_per_watch,
        round_cpu,
        rounds,
        streams_opened,
    }
}

/// CPU per event, unless the round's CPU is too small to divide.
fn per_event(cpu: Duration, events: usize) -> String {
    match per_event_us(cpu, events) {
        Some(us) => format!("{us:.1} us"),
        None => format!("{} ms in all, too little to divide", ms(cpu)),
    }
}

/// CPU per event in microseconds, when the round's CPU is enough to divide: the threads' time
/// on a CPU is counted in nanoseconds (`process::threads_cpu_time`), so 1 ms will do (it was
/// 100 ms of 10 ms clock ticks before, which left 1,000 and 10,000 watches unmeasured).
fn per_event_us(cpu: Duration, events: usize) -> Option<f64> {
    (cpu >= Duration::from_millis(1)).then(|| cpu.as_secs_f64() * 1e6 / events.max(1) as f64)
}

/// The curves of `rows` into `path`: CPU and memory per watch, and the p99 delay from a put to
/// its watch's event in each round with a fault, next to the bare stream's resumes.
fn plot(
    path: &std::path::Path,
    version: &str,
    rows: &[Row],
) -> Result<(), Box<dyn std::error::Error>> {
    let x = |row: &Row| row.count as f64;
    let cost = Panel::new("CPU per event, no fault", "us").with(Series::new(
        "etcd-ha",
        rows.iter()
            .filter_map(|r| per_event_us(r.round_cpu, r.count).map(|us| (x(r), us)))
            .collect(),
    ));
    let memory = Panel::new("Memory per watch", "KiB").with(Series::new(
        "etcd-ha",
        rows.iter().map(|r| (x(r), r.kib_per_watch)).collect(),
    ));
    let mut resume = Panel::new("p99 delay from put to event", "ms");
    let names: Vec<&str> = rows
        .first()
        .map(|r| r.rounds.iter().map(|r| r.name.as_str()).collect())
        .unwrap_or_default();
    // A round's name ends with the member's role, which may differ from count to count.
    let fault = |name: &str| name.split(" (").next().unwrap_or(name).to_owned();
    let mut faults: Vec<String> = Vec::new();
    for name in names
        .iter()
        .filter(|n| **n != "unwatched")
        .map(|n| fault(n))
    {
        if !faults.contains(&name) {
            faults.push(name);
        }
    }
    for name in &faults {
        let points = rows
            .iter()
            .filter_map(|r| {
                let round = r.rounds.iter().find(|round| fault(&round.name) == *name)?;
                Some((x(r), round.delays[1].as_secs_f64() * 1e3))
            })
            .collect();
        resume = resume.with(Series::new(format!("etcd-ha, {name}"), points));
    }
    for (i, from) in BARE_FROM.iter().enumerate() {
        let points = rows
            .iter()
            .filter_map(|r| {
                r.bare_resume[i]
                    .as_ref()
                    .ok()
                    .map(|b| (x(r), b.delays[1].as_secs_f64() * 1e3))
            })
            .collect();
        resume = resume.with(Series::new(format!("bare stream, from {from}"), points));
    }
    let caption = format!(
        "Managed watches on one client ({})",
        version.replace("Version: ", "")
    );
    curves(path, &caption, "watches", &[cost, memory, resume])
}

/// Where the bare resumes start, in the order of `Row::bare_resume`.
const BARE_FROM: [&str; 3] = [
    "the revision before the puts",
    "one revision a round back",
    "each one's last event",
];

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1000.0)
}

async fn run(args: Args) {
    let (binary, version) = etcd_ha_bench::server::local(args.etcd_version.as_deref())
        .unwrap_or_else(|e| panic!("the etcd server: {e}"));
    println!(
        "{version}; 3 members on 127.0.0.1; data in {:?}; {} watches made and puts sent at once",
        args.data_dir, args.window
    );
    let mut rows = Vec::new();
    for &count in &args.counts {
        println!("  {count} watches ...");
        rows.push(hold(&args, &binary, count).await);
    }
    println!();
    println!("the server's pace: one bare Watch stream to the leader, a watcher per key");
    println!(
        "{:>8} {:>10} {:>9} {:>22}",
        "watches", "made (ms)", "puts (ms)", "last event (ms after)"
    );
    for row in &rows {
        match &row.bare {
            Ok(p) => println!(
                "{:>8} {:>10} {:>9} {:>22}",
                row.count,
                ms(p.create),
                ms(p.puts),
                ms(p.last_event_after_last_put)
            ),
            Err(e) => println!("{:>8} failed: {e}", row.count),
        }
    }
    println!();
    println!(
        "the server's pace resuming: a watcher per key created at a past revision on one bare \
         stream to the leader while a put per key runs"
    );
    println!(
        "{:>8} {:<28} {:>16} {:>11} {:>9} {:>9}",
        "watches", "from", "last event (ms)", "median (ms)", "p99 (ms)", "max (ms)"
    );
    for row in &rows {
        for (from, resume) in BARE_FROM.iter().zip(&row.bare_resume) {
            match resume {
                Ok(r) => println!(
                    "{:>8} {:<28} {:>16} {:>11} {:>9} {:>9}",
                    r.watchers,
                    from,
                    ms(r.last_event),
                    ms(r.delays[0]),
                    ms(r.delays[1]),
                    ms(r.delays[2])
                ),
                Err(e) => println!("{:>8} {:<28} failed: {e}", row.count, from),
            }
        }
    }
    println!();
    println!("etcd-ha's managed watches, one client, a reader task per watch:");
    for row in &rows {
        println!(
            "{:>8} watches made in {} ms ({} failed); {:.2} KiB per watch; CPU per event (no \
             fault): {}; streams opened: {}",
            row.count,
            ms(row.create),
            row.create_errors,
            row.kib_per_watch,
            per_event(row.round_cpu, row.count),
            row.streams_opened
        );
    }
    println!();
    println!(
        "{:>8} {:<40} {:>9} {:>10} {:>6} {:>8} {:>11} {:>9} {:>9} {:>8} {:>14}",
        "watches",
        "round",
        "puts (ms)",
        "put errors",
        "lost",
        "repeated",
        "median (ms)",
        "p99 (ms)",
        "max (ms)",
        "over 1 s",
        "last event (ms)"
    );
    for row in &rows {
        for r in row.rounds.iter().filter(|r| r.name != "unwatched") {
            println!(
                "{:>8} {:<40} {:>9} {:>10} {:>6} {:>8} {:>11} {:>9} {:>9} {:>8} {:>14}",
                row.count,
                r.name,
                ms(r.puts),
                r.put_errors,
                r.lost,
                r.repeated,
                ms(r.delays[0]),
                ms(r.delays[1]),
                ms(r.delays[2]),
                r.later_than_1s,
                ms(r.last_event)
            );
        }
    }
    println!(
        "(delays from each put's acknowledgement to its watch's event; lost: no event {} s after \
         the last put)",
        args.patience_secs
    );
    match plot(&args.svg, &version, &rows) {
        Ok(()) => println!("curves: {}", args.svg.display()),
        Err(e) => println!("curves not drawn: {e}"),
    }
}

fn main() {
    // RUST_LOG=etcd_ha::watch=debug shows the watch stream's moves and resumes.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(run(args));
}
