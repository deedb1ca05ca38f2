//! Monotonic reads against a real 3-member etcd with a lagging follower: a follower cut off from
//! its peers (network namespaces) keeps answering serializable reads from its old state while
//! writes go on through the leader. Spread serializable reads of a client with the guard (the
//! default) never go back in revision; a client without it, in the same window, does read from
//! the past, which shows the lag was there to be guarded against.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use etcd_ha::testkit::Cluster;
use etcd_ha::{Candidate, Client, GetOptions, LeaderFirst, Options, PickPolicy, PutOptions, Route};

/// How long the follower lags while the reads run. Its election timeout (below) is longer, so
/// all along it still believes in the old leader and answers Status with it.
const LAG: Duration = Duration::from_secs(3);

/// Between the clients' probes: longer than the whole test, so the follower is probed once, at
/// connect, and stays in rotation for all of [`LAG`]. A probe's linearizable read would fail on
/// the cut-off follower and eject it (after 0.5-1.5 s with the default probes): on a loaded box
/// (CI) that came before any unguarded read had reached it, which left this test nothing to
/// compare. With the follower in rotation throughout, the guard alone keeps the guarded
/// client's reads from going back.
const PROBE_INTERVAL: Duration = Duration::from_secs(60);

/// Spreads serializable reads over the members in turn, the follower included; the rest as the
/// default. The default's power of two choices never picks the slowest of three members, and
/// with probes this rare a member's latency is not refreshed: whether the follower got reads
/// would hang on which member was slowest at connect.
#[derive(Debug, Default)]
struct InTurn(AtomicUsize);

impl PickPolicy for InTurn {
    fn pick(&self, route: Route, candidates: &[Candidate], tried: &[bool]) -> usize {
        if route != Route::Any {
            return LeaderFirst.pick(route, candidates, tried);
        }
        let start = self.0.fetch_add(1, Ordering::Relaxed);
        (0..candidates.len())
            .map(|i| (start + i) % candidates.len())
            .find(|&i| !tried.get(i).copied().unwrap_or(false))
            .unwrap_or(start % candidates.len())
    }
}

/// Raft election timeout of the cluster: well above [`LAG`].
const ELECTION_MS: u64 = 6000;

/// Reader tasks per client.
const READERS: usize = 3;

/// What one client's readers saw.
#[derive(Default)]
struct Tally {
    /// The newest revision any operation of this client returned (the floor of the next read).
    seen: AtomicI64,
    reads: AtomicU64,
    /// Reads answered below the floor at their start.
    went_back: AtomicU64,
    /// The worst such step back, in revisions.
    worst: AtomicI64,
    errors: AtomicU64,
}

impl Tally {
    fn saw(&self, revision: i64) {
        self.seen.fetch_max(revision, Ordering::SeqCst);
    }
}

/// Serializable reads of `key` through `client` until `stop`, each checked against the newest
/// revision the client had returned before it started.
async fn read_until(client: Client, key: String, tally: Arc<Tally>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        let floor = tally.seen.load(Ordering::SeqCst);
        match client
            .kv()
            .get(key.clone(), GetOptions::new().with_serializable())
            .await
        {
            Ok(resp) => {
                let revision = resp.header.expect("a header").revision;
                tally.reads.fetch_add(1, Ordering::SeqCst);
                if revision < floor {
                    tally.went_back.fetch_add(1, Ordering::SeqCst);
                    tally.worst.fetch_max(floor - revision, Ordering::SeqCst);
                }
                tally.saw(revision);
            }
            Err(err) => {
                tracing::warn!(%err, "read failed");
                tally.errors.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serializable_reads_never_go_back_while_a_follower_lags() {
    support::init_tracing();
    let cluster = Cluster::builder()
        .members(3)
        .isolated_network(true)
        .heartbeat_ms(100)
        .election_ms(ELECTION_MS)
        .start()
        .await
        .expect("start a 3-member cluster in network namespaces");
    let leader = cluster.leader(support::READY).await.unwrap();
    let follower = (leader + 1) % cluster.len();
    let options = Options::new()
        .with_request_timeout(Duration::from_secs(5))
        .with_probe(PROBE_INTERVAL, Duration::from_secs(1))
        .with_pick_policy(InTurn::default());
    let guarded = Client::connect(cluster.endpoints(), options.clone())
        .await
        .unwrap();
    let unguarded = Client::connect(cluster.endpoints(), options.with_monotonic_reads(false))
        .await
        .unwrap();
    support::all_healthy(&guarded).await;
    support::all_healthy(&unguarded).await;
    let key = support::unique("monotonic");
    guarded
        .kv()
        .put(key.clone(), "0", PutOptions::new())
        .await
        .unwrap();

    cluster.partition(follower).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (on, off) = (Arc::new(Tally::default()), Arc::new(Tally::default()));
    let mut tasks = Vec::new();
    // Writes through the leader, seen by both clients: every write moves a client's floor on.
    for (client, tally) in [(&guarded, &on), (&unguarded, &off)] {
        for _ in 0..READERS {
            let (client, tally, stop) = (client.clone(), tally.clone(), stop.clone());
            tasks.push(tokio::spawn(read_until(client, key.clone(), tally, stop)));
        }
        let (client, tally, stop, key) = (client.clone(), tally.clone(), stop.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let put = client
                    .kv()
                    .put(key.clone(), n.to_string(), PutOptions::new())
                    .await;
                match put {
                    Ok(resp) => tally.saw(resp.header.expect("a header").revision),
                    Err(err) => panic!("a put through the leader failed: {err}"),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    tokio::time::sleep(LAG).await;
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await.unwrap();
    }
    // The follower really lagged: it is still at an old revision (raw, pinned serializable read).
    let lagging = unguarded
        .kv()
        .with_member(&cluster.endpoint(follower))
        .unwrap()
        .get(key.clone(), GetOptions::new().with_serializable())
        .await
        .unwrap();
    let lag = off.seen.load(Ordering::SeqCst) - lagging.header.unwrap().revision;
    cluster.heal(follower).unwrap();

    let count = |t: &Tally| {
        (
            t.reads.load(Ordering::SeqCst),
            t.went_back.load(Ordering::SeqCst),
            t.worst.load(Ordering::SeqCst),
            t.errors.load(Ordering::SeqCst),
        )
    };
    let (on_reads, on_back, on_worst, on_errors) = count(&on);
    let (off_reads, off_back, off_worst, off_errors) = count(&off);
    println!(
        "follower {follower} lagged {lag} revisions; guarded: {on_reads} reads, \
         {on_back} went back (worst {on_worst}), {on_errors} errors; unguarded: \
         {off_reads} reads, {off_back} went back (worst {off_worst}), {off_errors} errors"
    );
    assert!(lag > 10, "the follower did not lag ({lag} revisions)");
    assert!(
        on_reads > 50 && off_reads > 50,
        "too few reads: {on_reads} / {off_reads}"
    );
    assert_eq!(on_back, 0, "a guarded read went back {on_worst} revisions");
    assert_eq!(on_errors, 0, "guarded reads failed");
    assert!(
        off_back > 0,
        "no unguarded read went back: the lagging follower served none of {off_reads} reads"
    );
}

/// While a leader cut off from its peers is replaced (no leader for about an election
/// timeout), serializable reads stay available with the guard on. The client saw the last
/// writes the old leader committed; the followers learn of those commits only from the next
/// leader, so their answers are below the floor, and a linearizable read waits for that
/// leader. The cut-off leader still has them: the guard's serializable re-reads on the other
/// members find it, and no read fails or goes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serializable_reads_stay_available_while_a_cut_off_leader_is_replaced() {
    support::init_tracing();
    let cluster = Cluster::builder()
        .members(3)
        .isolated_network(true)
        .heartbeat_ms(100)
        .election_ms(1000)
        .start()
        .await
        .expect("start a 3-member cluster in network namespaces");
    let leader = cluster.leader(support::READY).await.unwrap();
    // The reads' deadline is shorter than the election: a read that waited for the next
    // leader would fail.
    let options = Options::new().with_request_timeout(Duration::from_millis(500));
    let client = Client::connect(cluster.endpoints(), options).await.unwrap();
    support::all_healthy(&client).await;
    let key = support::unique("cut-off-leader");
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    // Writes until the cut: the last ones the leader commits and acknowledges may never reach
    // the followers as committed (the commit index travels with the leader's next message,
    // which the partition stops), while the client has seen them. Writes after the cut fail
    // (no quorum); that is not what is judged.
    let writer = {
        let (client, tally, stop, key) = (client.clone(), tally.clone(), stop.clone(), key.clone());
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                if let Ok(resp) = client
                    .kv()
                    .put(key.clone(), n.to_string(), PutOptions::new())
                    .await
                {
                    tally.saw(resp.header.expect("a header").revision);
                }
            }
        })
    };
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let (client, tally, stop) = (client.clone(), tally.clone(), stop.clone());
            tokio::spawn(read_until(client, key.clone(), tally, stop))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.partition(leader).unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    for reader in readers {
        reader.await.unwrap();
    }
    cluster.heal(leader).unwrap();
    let (reads, back, errors) = (
        tally.reads.load(Ordering::SeqCst),
        tally.went_back.load(Ordering::SeqCst),
        tally.errors.load(Ordering::SeqCst),
    );
    println!("cut-off leader: {reads} serializable reads, {back} went back, {errors} errors");
    assert!(reads > 50, "too few reads: {reads}");
    assert_eq!(back, 0, "a guarded read went back");
    assert_eq!(
        errors, 0,
        "serializable reads failed while the leader was replaced"
    );
}
