//! The managed watch under real faults: while one writer puts unique values under a prefix, a
//! managed prefix watch must deliver exactly the history of that prefix (read at the end with a
//! fresh raw watch from the watch's first revision): no event lost, none repeated, none out of
//! order, across the leader being killed, the watch's member frozen (SIGSTOP) or black-holed,
//! and every member restarted at once.
//!
//! Each test prints how long the watch took to resume:
//! - `resume`: from the fault to the delivery of the first event whose put was sent after the
//!   fault began;
//! - `writes back`: from the fault to the first acknowledgement of a put sent after it began (a
//!   resume cannot come before there is something new to deliver);
//! - `max lag`: the longest time from a put's acknowledgement to its event's delivery, over
//!   the puts sent after the fault began.
//!
//! Run against etcd 3.4 too: `ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test --features testkit
//! --test watch_failover`.

mod support;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use etcd_ha::proto::mvccpb::Event;
use etcd_ha::testkit::{Cluster, FaultProxy, Mode};
use etcd_ha::{Client, Options, PutOptions, WatchBatch, WatchOptions, WatchStream};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

/// Writes before the fault.
const WARMUP: Duration = Duration::from_secs(2);

/// Writes after the fault ended.
const AFTER: Duration = Duration::from_secs(4);

/// How long a member stays frozen or black-holed.
const OUTAGE: Duration = Duration::from_secs(6);

/// The writer's pause between puts (about 50 puts/s, one writer).
const WRITE_PAUSE: Duration = Duration::from_millis(15);

/// An event reduced to what is compared: type, key, value, mod revision.
type Seen = (i32, String, String, i64);

fn seen(event: &Event) -> Seen {
    let kv = event.kv.as_ref().expect("an event carries its kv");
    (
        event.r#type,
        String::from_utf8_lossy(&kv.key).into_owned(),
        String::from_utf8_lossy(&kv.value).into_owned(),
        kv.mod_revision,
    )
}

/// When a put was sent and when its acknowledgement came.
#[derive(Clone, Copy)]
struct Ack {
    sent: Instant,
    acked: Instant,
}

/// The single writer: unique values to a few keys under the prefix, as fast as the cluster
/// takes them; failures (the fault) are skipped. Returns the times of every revision it wrote
/// and had acknowledged.
struct Writer {
    stop: Arc<AtomicBool>,
    task: JoinHandle<HashMap<i64, Ack>>,
}

impl Writer {
    fn start(client: &Client, prefix: &str) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let (client, prefix, flag) = (client.clone(), prefix.to_owned(), stop.clone());
        let task = tokio::spawn(async move {
            let mut acks = HashMap::new();
            let mut i = 0u64;
            while !flag.load(Ordering::Relaxed) {
                i += 1;
                let key = format!("{prefix}k{}", i % 5);
                let kv = client.kv();
                let sent = Instant::now();
                let put = kv.put(key, format!("v{i}"), PutOptions::new());
                match timeout(Duration::from_secs(2), put).await {
                    Ok(Ok(resp)) => {
                        let acked = Instant::now();
                        acks.insert(resp.header.unwrap().revision, Ack { sent, acked });
                    }
                    _ => sleep(Duration::from_millis(50)).await,
                }
                sleep(WRITE_PAUSE).await;
            }
            acks
        });
        Writer { stop, task }
    }

    async fn stop(self) -> HashMap<i64, Ack> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// What the watch delivered: each event with its delivery time, until the end marker.
type Deliveries = Vec<(Instant, Seen)>;

/// Read the managed watch until an event on `end_key` arrives; checks on the way that batches
/// only go forward and that [`WatchStream::revision`] follows them.
fn consume(mut stream: WatchStream, end_key: String) -> JoinHandle<Deliveries> {
    tokio::spawn(async move {
        let mut got = Vec::new();
        let mut last = stream.revision();
        loop {
            let batch = timeout(Duration::from_secs(60), stream.next_batch())
                .await
                .expect("the watch delivers within 60 s")
                .expect("the watch stays open")
                .expect("the watch hides every fault");
            let WatchBatch::Events { revision, events } = batch else {
                panic!("unexpected batch {batch:?}");
            };
            let at = Instant::now();
            let first = events[0].kv.as_ref().unwrap().mod_revision;
            assert!(first > last, "a batch from {first} after {last}");
            last = revision;
            assert_eq!(stream.revision(), revision);
            for event in &events {
                got.push((at, seen(event)));
            }
            if got.iter().any(|(_, s)| s.1 == end_key) {
                return got;
            }
        }
    })
}

/// The prefix's history from `from` through `until`, read with a fresh raw watch (retried on
/// another member if the one it lands on fails).
async fn history(client: &Client, prefix: &str, from: i64, until: i64) -> Vec<Seen> {
    'attempt: for attempt in 0..5 {
        if attempt > 0 {
            sleep(Duration::from_millis(500)).await;
        }
        let options = WatchOptions::new().with_prefix().with_start_revision(from);
        let Ok((_watcher, mut responses)) = client.watch().raw(prefix, options).await else {
            continue;
        };
        let mut events = Vec::new();
        loop {
            match timeout(Duration::from_secs(10), responses.message()).await {
                Ok(Ok(Some(resp))) => {
                    assert!(!resp.canceled, "history watch canceled: {resp:?}");
                    events.extend(resp.events.iter().map(seen));
                    if events.last().is_some_and(|e| e.3 >= until) {
                        return events;
                    }
                }
                _ => continue 'attempt,
            }
        }
    }
    panic!("could not read the history of {prefix}");
}

/// What one run measured.
struct Measured {
    resume: Duration,
    writes_back: Duration,
    max_lag: Duration,
    events: usize,
}

/// Run the writer and a managed prefix watch on `watch_client`, inject `fault` (given the URL
/// of the member whose stream carries the watch; it returns when the fault is over), keep
/// writing for [`AFTER`], then check the delivered events against the history and report.
async fn run<F, Fut>(
    name: &str,
    watch_client: &Client,
    writer_client: &Client,
    fault: F,
) -> Measured
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = ()>,
{
    let prefix = format!("{}/", support::unique(name));
    let end_key = format!("{prefix}end");
    // From "now": pinned at creation, so the history starts right after.
    let stream = watch_client
        .watch()
        .watch(prefix.as_str(), WatchOptions::new().with_prefix())
        .await
        .unwrap();
    let from = stream.revision() + 1;
    // A second watch on the same client, to ask which member carries the shared stream.
    let probe = watch_client
        .watch()
        .watch(format!("{prefix}probe-"), WatchOptions::new())
        .await
        .unwrap();
    let consumer = consume(stream, end_key.clone());
    let writer = Writer::start(writer_client, &prefix);
    sleep(WARMUP).await;

    let on = probe.endpoint().expect("the stream is open");
    let fault_at = Instant::now();
    fault(on.clone()).await;
    let fault_took = fault_at.elapsed();
    sleep(AFTER).await;

    let acks = writer.stop().await;
    let end = loop {
        match writer_client
            .kv()
            .put(end_key.as_str(), "end", PutOptions::new())
            .await
        {
            Ok(resp) => break resp.header.unwrap().revision,
            Err(e) => {
                assert!(
                    fault_at.elapsed() < Duration::from_secs(60),
                    "no write: {e}"
                );
                sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let delivered = timeout(Duration::from_secs(60), consumer)
        .await
        .expect("the watch reaches the end marker")
        .unwrap();

    let truth = history(writer_client, &prefix, from, end).await;
    let got: Vec<Seen> = delivered.iter().map(|(_, s)| s.clone()).collect();
    if got != truth {
        let missing: Vec<_> = truth.iter().filter(|e| !got.contains(e)).collect();
        let extra: Vec<_> = got.iter().filter(|e| !truth.contains(e)).collect();
        panic!(
            "{name}: delivered {} events, history has {}; missing {missing:?}; \
             not in history {extra:?}",
            got.len(),
            truth.len()
        );
    }

    // Measurements, over the puts sent after the fault began.
    let after: Vec<(i64, Ack)> = acks
        .iter()
        .filter(|(_, a)| a.sent >= fault_at)
        .map(|(rev, a)| (*rev, *a))
        .collect();
    let delivered_at: HashMap<i64, Instant> = delivered.iter().map(|(at, s)| (s.3, *at)).collect();
    let resume = after
        .iter()
        .filter_map(|(rev, _)| delivered_at.get(rev))
        .min()
        .map(|at| *at - fault_at)
        .expect("events written after the fault");
    let writes_back = after
        .iter()
        .map(|(_, a)| a.acked - fault_at)
        .min()
        .expect("writes after the fault");
    let max_lag = after
        .iter()
        .filter_map(|(rev, a)| {
            delivered_at
                .get(rev)
                .map(|d| d.saturating_duration_since(a.acked))
        })
        .max()
        .unwrap_or_default();
    eprintln!(
        "{name}: watch on {on}; fault took {fault_took:?}; resume {resume:?}, writes back \
         {writes_back:?}, max lag {max_lag:?}; {} events exactly once, in order; {} watch \
         streams opened",
        got.len(),
        watch_client.watch().streams_opened()
    );
    Measured {
        resume,
        writes_back,
        max_lag,
        events: got.len(),
    }
}

/// The index of the member serving `url` among `urls`.
fn index_of(urls: &[String], url: &str) -> usize {
    urls.iter()
        .position(|u| u.trim_end_matches('/') == url.trim_end_matches('/'))
        .unwrap_or_else(|| panic!("{url} is not one of {urls:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed() {
    let mut cluster = support::cluster3().await;
    let watch_client = support::client(&cluster).await;
    let writer_client = support::client(&cluster).await;
    let leader = cluster.leader(support::READY).await.unwrap();
    let leader_url = cluster.endpoint(leader);
    let cluster_ref = &mut cluster;
    let m = run(
        "wf-leader-kill",
        &watch_client,
        &writer_client,
        |on| async move {
            let on_leader = on.trim_end_matches('/') == leader_url.trim_end_matches('/');
            eprintln!("wf-leader-kill: the watch's stream is on the leader: {on_leader}");
            cluster_ref.kill(leader);
        },
    )
    .await;
    assert!(m.events > 100, "{} events", m.events);
    assert!(
        m.resume < m.writes_back + Duration::from_secs(5),
        "resume {:?}",
        m.resume
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_member_killed() {
    let mut cluster = support::cluster3().await;
    let watch_client = support::client(&cluster).await;
    let writer_client = support::client(&cluster).await;
    let urls = cluster.endpoints();
    let cluster_ref = &mut cluster;
    let m = run(
        "wf-member-kill",
        &watch_client,
        &writer_client,
        |on| async move {
            cluster_ref.kill(index_of(&urls, &on));
        },
    )
    .await;
    // The stream breaks at once (SIGKILL closes the member's sockets).
    assert!(
        m.resume < m.writes_back + Duration::from_secs(2),
        "resume {:?}",
        m.resume
    );
    assert!(
        m.max_lag < Duration::from_secs(2),
        "max lag {:?}",
        m.max_lag
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_member_frozen() {
    let cluster = support::cluster3().await;
    let watch_client = support::client(&cluster).await;
    let writer_client = support::client(&cluster).await;
    let urls = cluster.endpoints();
    let m = run("wf-sigstop", &watch_client, &writer_client, |on| {
        let i = index_of(&urls, &on);
        let cluster = &cluster;
        async move {
            cluster.stop(i);
            sleep(OUTAGE).await;
            cluster.cont(i);
        }
    })
    .await;
    // The stream is left within the silence limit (3 s) or as soon as the probes eject the
    // member; if the frozen member led, writes come back only after an election.
    assert!(
        m.resume < m.writes_back + Duration::from_secs(5),
        "resume {:?}",
        m.resume
    );
    assert!(
        m.max_lag < Duration::from_secs(5),
        "max lag {:?}",
        m.max_lag
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_member_blackholed() {
    let cluster = support::cluster3().await;
    // A proxy in front of every member; the watch client knows only the proxies.
    let proxies: Vec<FaultProxy> = (0..3)
        .map(|i| FaultProxy::start(cluster.client_addr(i)).unwrap())
        .collect();
    let proxied: Vec<String> = proxies.iter().map(|p| p.url("http")).collect();
    // Member sync would swap the proxies for the members' advertised URLs.
    let watch_client = Client::connect(&proxied, Options::new().without_member_sync())
        .await
        .unwrap();
    let writer_client = support::client(&cluster).await;
    let m = run("wf-blackhole", &watch_client, &writer_client, |on| {
        let proxy = &proxies[index_of(&proxied, &on)];
        async move {
            proxy.set_mode(Mode::Blackhole);
            sleep(OUTAGE).await;
            proxy.set_mode(Mode::Pass);
        }
    })
    .await;
    // Writes never stop (the writer talks to the members directly).
    assert!(
        m.writes_back < Duration::from_secs(1),
        "{:?}",
        m.writes_back
    );
    assert!(m.resume < Duration::from_secs(5), "resume {:?}", m.resume);
    assert!(
        m.max_lag < Duration::from_secs(5),
        "max lag {:?}",
        m.max_lag
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_member_restarted_at_once() {
    let mut cluster: Cluster = support::cluster3().await;
    let watch_client = support::client(&cluster).await;
    let writer_client = support::client(&cluster).await;
    let cluster_ref = &mut cluster;
    let m = run(
        "wf-restart-all",
        &watch_client,
        &writer_client,
        |_| async move {
            cluster_ref.kill_all();
            sleep(Duration::from_secs(1)).await;
            cluster_ref
                .start_all()
                .await
                .expect("the cluster comes back");
            cluster_ref
                .leader(support::READY)
                .await
                .expect("a leader again");
        },
    )
    .await;
    assert!(
        m.resume < m.writes_back + Duration::from_secs(5),
        "resume {:?}",
        m.resume
    );
}

/// The watch's member is cut off from its peers but not from the client (network namespaces):
/// it has no leader, so etcd refuses require-leader streams ("no leader") after a few seconds,
/// and the client's probes eject it sooner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_member_partitioned() {
    support::init_tracing();
    let cluster = Cluster::builder()
        .members(3)
        .isolated_network(true)
        .start()
        .await
        .expect("start a 3-member cluster in network namespaces");
    cluster.leader(support::READY).await.unwrap();
    let watch_client = support::client(&cluster).await;
    let writer_client = support::client(&cluster).await;
    let urls = cluster.endpoints();
    let m = run("wf-partition", &watch_client, &writer_client, |on| {
        let i = index_of(&urls, &on);
        let cluster = &cluster;
        async move {
            cluster.partition(i).unwrap();
            sleep(OUTAGE).await;
            cluster.heal(i).unwrap();
        }
    })
    .await;
    assert!(
        m.resume < m.writes_back + Duration::from_secs(5),
        "resume {:?}",
        m.resume
    );
    assert!(
        m.max_lag < Duration::from_secs(5),
        "max lag {:?}",
        m.max_lag
    );
}

/// Issue 18: a quiet managed watch (no progress notify) sees nothing while thousands of writes
/// go elsewhere and the history is compacted to the head; then the member serving its stream
/// is killed and restarted. On a server whose progress answers are sound (3.5.8+: this test
/// pins 3.5.35), the watch kept its place from them, resumes above the compaction, and
/// delivers the next write to its range, where it used to end with `Compacted`. (Before
/// 3.5.8 those answers can overtake events and keep no place; such a watch still ends with a
/// truthful `Compacted`, or reloads with `with_reload_on_compaction`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_watch_survives_a_move_after_compaction_on_a_current_server() {
    support::init_tracing();
    let etcd = support::etcd_of_version("3.5.35");
    let mut cluster = Cluster::builder()
        .members(3)
        .etcd_bin(etcd)
        .start()
        .await
        .expect("start a 3-member etcd 3.5.35");
    cluster.leader(support::READY).await.unwrap();
    assert_eq!(cluster.etcd_version(), "3.5.35");
    let client = Client::connect(cluster.endpoints(), Options::new())
        .await
        .unwrap();
    let writer = Client::connect(cluster.endpoints(), Options::new())
        .await
        .unwrap();
    let quiet = support::unique("quiet");
    let mut watch = client
        .watch()
        .watch(format!("{quiet}/"), WatchOptions::new().with_prefix())
        .await
        .unwrap();
    let elsewhere = support::unique("busy");
    let mut head = 0;
    for i in 0..2000 {
        let resp = writer
            .kv()
            .put(format!("{elsewhere}/{i}"), "v", PutOptions::new())
            .await
            .unwrap();
        head = resp.header.unwrap().revision;
    }
    writer.kv().compact(head, true).await.unwrap();
    // A few of the hub's progress answers (one a second) after the compaction.
    sleep(Duration::from_secs(3)).await;
    let serving = client.watch().stream_endpoint().expect("a watch stream");
    let member = (0..cluster.len())
        .find(|&i| cluster.endpoint(i) == serving)
        .expect("the stream is on a member");
    cluster.kill(member);
    cluster.restart(member).await.unwrap();
    cluster.wait_ready(support::READY).await.unwrap();
    writer
        .kv()
        .put(format!("{quiet}/x"), "after", PutOptions::new())
        .await
        .unwrap();
    let batch = timeout(Duration::from_secs(15), watch.next_batch())
        .await
        .expect("the watch delivers within 15 s")
        .expect("the watch is still open")
        .expect("no error");
    match batch {
        WatchBatch::Events { events, .. } => {
            let keys: Vec<String> = events
                .iter()
                .map(|e| String::from_utf8_lossy(&e.kv.as_ref().unwrap().key).into_owned())
                .collect();
            assert_eq!(keys, vec![format!("{quiet}/x")]);
        }
        other => panic!("expected the write, got {other:?}"),
    }
    // The kill closed the stream's connection: counted as broken, not as a move.
    assert!(client.watch().streams_broken() >= 1);
}
