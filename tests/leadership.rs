//! PD-style Leadership against real 3-member clusters, under the faults it exists for: every
//! member restarting at once (the incident), the holder's member frozen, the holder cut off, a
//! deleted leader key compacted away; plus the campaign guard, fencing and the lost reasons.
//!
//! Candidates run the usual loop (`acquire` -> hold until `lost` -> `acquire` again) in tasks
//! of their own, each with its own client as separate processes would, and report when they
//! won and lost. The tests print their measurements (run with `--nocapture` to see them).
//!
//! Run against etcd 3.4 too: `ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test --features testkit --test leadership`.

mod support;

use std::time::Duration;

use etcd_ha::concurrency::{Campaign, Leadership, LostReason};
use etcd_ha::testkit::{Cluster, FaultProxy, Mode};
use etcd_ha::{Client, DeleteOptions, Error, HealthState, Options, PutOptions, Txn, TxnOp};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The holder's lease TTL in the fault tests (the incident's "short TTL").
const TTL: Duration = Duration::from_secs(3);

/// etcd's default election timeout (the testkit does not change it).
const ELECTION: Duration = Duration::from_secs(1);

/// How long etcd may be unavailable before the incident test's holder steps down.
const INCIDENT_UNAVAILABLE_BOUND: Duration = Duration::from_secs(1);

/// How long the members stay down in the incident test's runs that are shorter than the TTL:
/// longer than [`INCIDENT_UNAVAILABLE_BOUND`], shorter than [`TTL`].
const BRIEF_OUTAGE: Duration = Duration::from_millis(1500);

/// Leadership must be held again this soon after the cluster has a leader again.
const REACQUIRE_BOUND: Duration = Duration::from_secs(2);

/// Generous bound on waiting for something that the assertions then bound tightly, so a slow
/// run reports its number instead of hanging.
const PATIENCE: Duration = Duration::from_secs(30);

/// What a candidate reports.
#[derive(Clone, Debug)]
enum Report {
    /// `who` won, with this create revision.
    Held {
        who: usize,
        at: Instant,
        revision: i64,
    },
    /// `who` lost, for this reason.
    Lost {
        who: usize,
        at: Instant,
        reason: String,
    },
}

/// A candidate running the usual loop until aborted.
fn candidate(
    who: usize,
    leadership: Leadership,
    reports: mpsc::UnboundedSender<Report>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match leadership.acquire().await {
                Ok(held) => {
                    let _ = reports.send(Report::Held {
                        who,
                        at: Instant::now(),
                        revision: held.create_revision(),
                    });
                    let reason = held.lost().await;
                    // From its local expiry on, the holder knows (`is_lost()`) without waiting
                    // for any task to wake up: that is when it stops acting as leader.
                    let _ = reports.send(Report::Lost {
                        who,
                        at: Instant::now().min(held.expires_at()),
                        reason: reason.to_string(),
                    });
                }
                Err(e) => {
                    eprintln!("candidate {who}: acquire failed: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    })
}

/// Candidates and what they reported, in order.
struct Candidates {
    tasks: Vec<JoinHandle<()>>,
    reports: mpsc::UnboundedReceiver<Report>,
}

impl Candidates {
    /// One candidate per client, for the leader key `key`.
    fn start(clients: &[Client], key: &str) -> Candidates {
        Candidates::start_with(clients, key, |l| l)
    }

    /// [`Candidates::start`] with each candidate's [`Leadership`] adjusted by `adjust`.
    fn start_with(
        clients: &[Client],
        key: &str,
        adjust: impl Fn(Leadership) -> Leadership,
    ) -> Candidates {
        let (tx, reports) = mpsc::unbounded_channel();
        let tasks = clients
            .iter()
            .enumerate()
            .map(|(who, client)| candidate(who, adjust(leadership(client, key, who)), tx.clone()))
            .collect();
        Candidates { tasks, reports }
    }

    /// The next report, within [`PATIENCE`].
    async fn next(&mut self) -> Report {
        tokio::time::timeout(PATIENCE, self.reports.recv())
            .await
            .expect("a candidate reports within the patience bound")
            .expect("candidates run")
    }

    /// Wait for a win; returns who won, when, and the losses reported before it.
    async fn next_held(&mut self) -> (usize, Instant, i64, Vec<(usize, Instant, String)>) {
        let mut lost = Vec::new();
        loop {
            match self.next().await {
                Report::Held { who, at, revision } => return (who, at, revision, lost),
                Report::Lost { who, at, reason } => lost.push((who, at, reason)),
            }
        }
    }
}

impl Drop for Candidates {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The leadership candidate `who` runs: short TTL, no campaign limit (the tests win often).
fn leadership(client: &Client, key: &str, who: usize) -> Leadership {
    Leadership::new(client, key, format!("candidate-{who}"))
        .with_ttl(TTL)
        .without_campaign_limit()
}

/// Median and max of `samples`, for the report.
fn stats(samples: &[Duration]) -> (Duration, Duration) {
    let mut sorted = samples.to_vec();
    sorted.sort();
    (sorted[sorted.len() / 2], *sorted.last().unwrap())
}

/// Waits until `client` has a healthy endpoint again (after a fault on its only one).
async fn until_healthy(client: &Client) {
    tokio::time::timeout(PATIENCE, async {
        while !client
            .endpoints()
            .iter()
            .any(|e| e.health == HealthState::Healthy)
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the client recovers");
}

/// A client that talks to `url` only, as a candidate pinned to one member.
async fn pinned_client(url: String) -> Client {
    Client::connect([url], Options::new().without_member_sync())
        .await
        .expect("connect")
}

/// The incident: every member restarts at once while a leader holds a 3 s lease. In every run
/// the holder's `lost` must fire, and leadership must be held again (by any candidate) within
/// 2 s of the cluster having a leader again. That needs the old holder to revoke its lease as
/// soon as etcd is back: etcd keeps leases across a restart and extends them by TTL + election
/// timeout.
///
/// Five runs keep the members down for longer than the TTL (lost by local expiry, or by the
/// unavailability bound, whichever comes first). Two runs keep them down for less than the TTL
/// but longer than the unavailability bound, so that what must notice the outage is the
/// bound, well before the lease could run out. The bound is 1 s here, as for an application
/// that wants to step down as soon as etcd is gone (the incident's own fix). A restart quicker
/// than the bound (etcd back with a leader and the lease renewed within it) leaves the holder
/// its leadership, rightly: nobody else could have led meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_is_lost_and_held_again_after_all_members_restart() {
    let mut cluster = support::cluster3().await;
    let key = support::unique("leadership/incident");
    let admin = support::client(&cluster).await;
    let clients = [
        support::client(&cluster).await,
        support::client(&cluster).await,
        support::client(&cluster).await,
    ];
    let mut candidates = Candidates::start_with(&clients, &key, |l| {
        l.with_unavailable_bound(INCIDENT_UNAVAILABLE_BOUND)
    });
    let (mut holder, _, mut revision, _) = candidates.next_held().await;

    let mut reacquired_after = Vec::new();
    let mut between_runs = 0;
    for run in 0..7 {
        // Nothing should happen between runs; if something did, follow it and say so.
        while let Ok(report) = candidates.reports.try_recv() {
            eprintln!("run {run}: before the kill: {report:?}");
            between_runs += 1;
            if let Report::Held {
                who, revision: r, ..
            } = report
            {
                (holder, revision) = (who, r);
            }
        }
        let down_longer_than_ttl = run < 5;
        let killed = Instant::now();
        cluster.kill_all();
        tokio::time::sleep(if down_longer_than_ttl {
            TTL + Duration::from_secs(1)
        } else {
            BRIEF_OUTAGE
        })
        .await;
        cluster.start_all().await.expect("restart every member");
        cluster.leader(support::READY).await.expect("a leader");
        let back = Instant::now();

        let (who, held_at, new_revision, lost) = candidates.next_held().await;
        let (_, lost_at, reason) = lost.iter().find(|(w, _, _)| *w == holder).unwrap_or_else(
            || {
                panic!(
                    "run {run}: the holder {holder} reported no loss before {who} won ({lost:?})"
                )
            },
        );
        if !down_longer_than_ttl {
            assert!(
                reason.contains("unavailable") && lost_at.duration_since(killed) < TTL,
                "run {run}: a brief outage is noticed by the unavailability bound, before the TTL: \
                 {reason} after {:?}",
                lost_at.duration_since(killed)
            );
        }
        let reacquired = held_at.saturating_duration_since(back);
        eprintln!(
            "run {run} (members down {}): holder {holder} lost {:?} after the kill ({reason}); \
             quorum back {:?} after the kill; \
             candidate {who} held again {reacquired:?} after quorum was back",
            if down_longer_than_ttl {
                "longer than the TTL"
            } else {
                "shorter than the TTL"
            },
            lost_at.saturating_duration_since(killed),
            back.duration_since(killed),
        );
        assert!(new_revision > revision, "a new leader key");
        let current = Leadership::new(&admin, key.as_str(), "admin")
            .current()
            .await
            .unwrap();
        assert_eq!(
            current.map(|c| c.kv().create_revision),
            Some(new_revision),
            "run {run}: etcd's leader key is the winner's"
        );
        assert!(
            reacquired <= REACQUIRE_BOUND,
            "run {run}: held again {reacquired:?} after quorum was back, \
             more than {REACQUIRE_BOUND:?}"
        );
        reacquired_after.push((down_longer_than_ttl, reacquired));
        (holder, revision) = (who, new_revision);
    }
    eprintln!("reports between runs (a leadership lost without a fault): {between_runs}");
    for (long, what) in [
        (true, "down longer than the TTL"),
        (false, "down shorter than the TTL"),
    ] {
        let samples: Vec<Duration> = reacquired_after
            .iter()
            .filter(|(l, _)| *l == long)
            .map(|(_, d)| *d)
            .collect();
        let (median, max) = stats(&samples);
        eprintln!(
            "MEASURE all members {what}: leadership held again after quorum back: \
             median {median:?}, max {max:?} over {} runs",
            samples.len()
        );
    }
}

/// No two leaders, when the holder's member freezes (SIGSTOP): each candidate's client talks to
/// one member only, so the holder loses etcd entirely. The holder's `lost` must fire before
/// another candidate wins (t1 <= t2), and the next leader must take over within TTL + election
/// timeout + 1 s of the fault. Five runs.
///
/// The holder's member is made a raft follower first: when the raft leader itself freezes, the
/// new raft leader extends every lease by an election timeout from its election (etcd's
/// `lessor.Promote`), which adds one to two more election timeouts to the takeover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_two_leaders_when_the_holders_member_freezes() {
    let cluster = support::cluster3().await;
    let key = support::unique("leadership/freeze");
    let admin = support::client(&cluster).await;
    let mut clients = Vec::new();
    for i in 0..3 {
        clients.push(pinned_client(cluster.endpoint(i)).await);
    }
    let mut candidates = Candidates::start(&clients, &key);
    let (mut holder, _, _, _) = candidates.next_held().await;

    let mut takeovers = Vec::new();
    let mut gaps = Vec::new();
    for run in 0..5 {
        // Make sure the holder's member is a raft follower.
        let raft_leader = cluster.leader(support::READY).await.unwrap();
        if raft_leader == holder {
            let target = cluster.member_id((holder + 1) % 3).await.unwrap();
            admin.maintenance().move_leader(target).await.unwrap();
            while cluster.leader(support::READY).await.unwrap() == holder {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // The new raft leader extended every lease by an election timeout; let that
            // extension run out (renewals keep the holder's lease alive meanwhile).
            tokio::time::sleep(TTL + ELECTION).await;
        }
        let fault = Instant::now();
        cluster.stop(holder);
        let (who, t2, _, lost) = candidates.next_held().await;
        let (_, t1, reason) = lost
            .iter()
            .find(|(w, _, _)| *w == holder)
            .cloned()
            .unwrap_or_else(|| {
                panic!("run {run}: the frozen holder {holder} reported no loss before {who} won")
            });
        cluster.cont(holder);
        let takeover = t2.duration_since(fault);
        eprintln!(
            "freeze run {run}: holder {holder} lost {:?} after the fault ({reason}); \
             candidate {who} won {takeover:?} after it, {:?} after the loss",
            t1.duration_since(fault),
            t2.saturating_duration_since(t1),
        );
        assert!(
            t1 <= t2,
            "run {run}: the holder lost at {t1:?}, after the new leader won at {t2:?}"
        );
        assert!(
            takeover <= TTL + ELECTION + Duration::from_secs(1),
            "run {run}: takeover took {takeover:?}"
        );
        takeovers.push(takeover);
        gaps.push(t2.duration_since(t1));
        until_healthy(&clients[holder]).await;
        holder = who;
    }
    let (median, max) = stats(&takeovers);
    eprintln!(
        "MEASURE holder's member frozen: follower took over after the fault: \
         median {median:?}, max {max:?} over {} runs",
        takeovers.len()
    );
    let (median, max) = stats(&gaps);
    eprintln!(
        "MEASURE holder's member frozen: from the holder's loss to the new leader: \
         median {median:?}, max {max:?}"
    );
}

/// No two leaders, when the holder's connection is cut (a black hole in front of its member;
/// the cluster itself is fine). Five runs: the takeover time is the report's "follower notices a
/// lost leader and takes over".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_two_leaders_when_the_holder_is_cut_off() {
    let cluster = support::cluster3().await;
    let key = support::unique("leadership/blackhole");
    let proxies: Vec<FaultProxy> = (0..3)
        .map(|i| FaultProxy::start(cluster.client_addr(i)).unwrap())
        .collect();
    let mut clients = Vec::new();
    for proxy in &proxies {
        clients.push(pinned_client(proxy.url("http")).await);
    }
    let mut candidates = Candidates::start(&clients, &key);
    let (mut holder, _, _, _) = candidates.next_held().await;

    let mut takeovers = Vec::new();
    let mut gaps = Vec::new();
    for run in 0..5 {
        let fault = Instant::now();
        proxies[holder].set_mode(Mode::Blackhole);
        let (who, t2, _, lost) = candidates.next_held().await;
        let (_, t1, reason) = lost
            .iter()
            .find(|(w, _, _)| *w == holder)
            .cloned()
            .unwrap_or_else(|| {
                panic!("run {run}: the cut-off holder {holder} reported no loss before {who} won")
            });
        proxies[holder].set_mode(Mode::Pass);
        let takeover = t2.duration_since(fault);
        eprintln!(
            "cut-off run {run}: holder {holder} lost {:?} after the fault ({reason}); \
             candidate {who} won {takeover:?} after it, {:?} after the loss",
            t1.duration_since(fault),
            t2.saturating_duration_since(t1),
        );
        assert!(
            t1 <= t2,
            "run {run}: the holder lost at {t1:?}, after the new leader won at {t2:?}"
        );
        assert!(
            takeover <= TTL + ELECTION + Duration::from_secs(1),
            "run {run}: takeover took {takeover:?}"
        );
        takeovers.push(takeover);
        gaps.push(t2.duration_since(t1));
        until_healthy(&clients[holder]).await;
        holder = who;
    }
    let (median, max) = stats(&takeovers);
    eprintln!(
        "MEASURE holder cut off: follower took over after the fault: \
         median {median:?}, max {max:?} over {} runs",
        takeovers.len()
    );
    let (median, max) = stats(&gaps);
    eprintln!(
        "MEASURE holder cut off: from the holder's loss to the new leader: \
         median {median:?}, max {max:?}"
    );
}

/// A follower's watch of a leader key that was deleted before a compaction still ends: the
/// delete event is gone, so the watch must find out from the key's current state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follower_watch_ends_when_the_delete_was_compacted_away() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let key = support::unique("leadership/compacted");
    let leader = Leadership::new(&client, key.as_str(), "leader");
    let follower = Leadership::new(&client, key.as_str(), "follower");
    let Campaign::Won(held) = leader.campaign().await.unwrap() else {
        panic!("an uncontested campaign wins");
    };
    let Campaign::Lost(current) = follower.campaign().await.unwrap() else {
        panic!("the key is taken");
    };
    assert_eq!(current.value(), b"leader");

    // The leader resigns; more writes; the history is compacted past the delete.
    held.resign().await.unwrap();
    let mut last = 0;
    for i in 0..5 {
        last = client
            .kv()
            .put(
                support::unique("leadership/compacted-noise"),
                format!("{i}"),
                PutOptions::new(),
            )
            .await
            .unwrap()
            .header
            .unwrap()
            .revision;
    }
    client.kv().compact(last, true).await.unwrap();

    // The follower's watch starts from the revision it read the leader at, which is compacted.
    let reason = tokio::time::timeout(Duration::from_secs(5), follower.watch(&current))
        .await
        .expect("the watch ends")
        .unwrap();
    assert!(matches!(reason, LostReason::KeyDeleted), "{reason:?}");

    // Same with the watch already running when the key goes and the history is compacted.
    let Campaign::Won(held) = leader.campaign().await.unwrap() else {
        panic!("an uncontested campaign wins");
    };
    let current = follower.current().await.unwrap().unwrap();
    let watching = {
        let (follower, current) = (follower.clone(), current.clone());
        tokio::spawn(async move { follower.watch(&current).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.resign().await.unwrap();
    let rev = client
        .kv()
        .put(
            support::unique("leadership/compacted-noise"),
            "x",
            PutOptions::new(),
        )
        .await
        .unwrap()
        .header
        .unwrap()
        .revision;
    client.kv().compact(rev, true).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), watching)
        .await
        .expect("the watch ends")
        .unwrap()
        .unwrap();
    assert!(matches!(reason, LostReason::KeyDeleted), "{reason:?}");
}

/// The lost reasons and fencing: a deleted key ends the leadership at once, the ex-leader's
/// fenced writes fail, a follower takes over, and a leader cut off from etcd steps down after the
/// unavailability bound, long before its lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_on_key_delete_and_on_unavailability_and_fences_writes() {
    let cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let key = support::unique("leadership/reasons");
    let state = support::unique("leadership/reasons-state");
    let a = Leadership::new(&client, key.as_str(), "a");
    let held = a.acquire().await.unwrap();
    assert!(!held.is_lost());
    let fenced_put = |value: &'static str| {
        Txn::new().and_then([TxnOp::put(state.as_str(), value, PutOptions::new())])
    };
    assert!(
        client
            .kv()
            .txn(held.txn(fenced_put("a")))
            .await
            .unwrap()
            .succeeded
    );

    // Someone deletes the leader key.
    let began = Instant::now();
    client
        .kv()
        .delete(key.as_str(), DeleteOptions::new())
        .await
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(3), held.lost())
        .await
        .expect("lost fires");
    eprintln!(
        "lost {:?} after the key was deleted: {reason}",
        began.elapsed()
    );
    assert!(matches!(reason, LostReason::KeyDeleted), "{reason:?}");
    assert!(held.is_lost());
    let b = Leadership::new(&client, key.as_str(), "b")
        .acquire()
        .await
        .unwrap();
    assert!(b.create_revision() > held.create_revision());
    assert!(
        !client
            .kv()
            .txn(held.txn(fenced_put("late a")))
            .await
            .unwrap()
            .succeeded
    );
    assert!(
        client
            .kv()
            .txn(b.txn(fenced_put("b")))
            .await
            .unwrap()
            .succeeded
    );
    drop(held);
    b.resign().await.unwrap();

    // A leader whose only endpoint goes silent steps down after the bound (1 s here), before
    // its 10 s lease could run out on the server.
    let proxy = FaultProxy::start(cluster.client_addr(0)).unwrap();
    let cut = pinned_client(proxy.url("http")).await;
    let c = Leadership::new(&cut, key.as_str(), "c")
        .with_ttl(Duration::from_secs(10))
        .with_unavailable_bound(Duration::from_secs(1));
    let held = c.acquire().await.unwrap();
    let began = Instant::now();
    proxy.set_mode(Mode::Blackhole);
    let reason = tokio::time::timeout(Duration::from_secs(6), held.lost())
        .await
        .expect("lost fires");
    eprintln!(
        "lost {:?} after the connection was cut: {reason}",
        began.elapsed()
    );
    assert!(
        matches!(reason, LostReason::EtcdUnavailable { .. }),
        "{reason:?}"
    );
}

/// The campaign guard: a candidate that won 3 times within the window is refused, with the time
/// until it may campaign again; clones share the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_guard_refuses_a_flapping_candidate() {
    let cluster = Cluster::start(1).await.unwrap();
    let client = support::client(&cluster).await;
    let key = support::unique("leadership/guard");
    let window = Duration::from_secs(60);
    let leadership =
        Leadership::new(&client, key.as_str(), "flappy").with_campaign_limit(3, window);
    for _ in 0..3 {
        let Campaign::Won(held) = leadership.clone().campaign().await.unwrap() else {
            panic!("an uncontested campaign wins");
        };
        held.resign().await.unwrap();
    }
    match leadership.campaign().await {
        Err(Error::CampaignTooFrequent {
            max,
            window: w,
            retry_after,
        }) => {
            assert_eq!((max, w), (3, window));
            assert!(
                retry_after > Duration::ZERO && retry_after <= window,
                "{retry_after:?}"
            );
        }
        other => panic!("expected CampaignTooFrequent, got {other:?}"),
    }
    // Another candidate is not affected.
    let other = Leadership::new(&client, key.as_str(), "steady");
    assert!(matches!(other.campaign().await.unwrap(), Campaign::Won(_)));
}

/// A campaign whose txn is answered only after its lease's local expiry (a link so slow that
/// the round trips of the grant and the txn together outlast the TTL; a stalled process does
/// the same) is not reported won: by then the lease may have run out on the server and the key
/// be gone, and a leader that believes it holds a deleted key is a second leader waiting to
/// happen. The campaign fails with `Timeout`, and its key does not outlive it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_answered_after_its_lease_expired_is_not_won() {
    let cluster = Cluster::start(1).await.unwrap();
    let proxy = FaultProxy::start(cluster.client_addr(0)).unwrap();
    // Probes and calls patient enough for the slow link: what ends the campaign must be the
    // lease's expiry, not a timeout of the call.
    let options = Options::new()
        .without_member_sync()
        .with_request_timeout(Duration::from_secs(10))
        .with_probe(Duration::from_millis(500), Duration::from_secs(10));
    let client = Client::connect([proxy.url("http")], options)
        .await
        .expect("connect through the proxy");
    let observer = support::client(&cluster).await;
    let key = support::unique("leadership/late");
    let ttl = Duration::from_secs(2);
    let leadership = Leadership::new(&client, key.as_str(), "late")
        .with_ttl(ttl)
        .without_campaign_limit();
    // 700 ms each way: a grant is answered 1.4 s after it was sent (0.6 s of its 2 s left, so
    // the campaign's fresh-lease rule grants again until it gives up and takes the last one),
    // and the txn sent then is answered 1.4 s later, 0.8 s after the lease's local expiry, yet
    // applied on the server 0.6 s before the server's own.
    proxy.set_mode(Mode::Latency(Duration::from_millis(700)));
    let began = Instant::now();
    let outcome = tokio::time::timeout(PATIENCE, leadership.campaign())
        .await
        .expect("the campaign ends");
    println!(
        "campaign through a 700 ms link: {outcome:?} after {:?}",
        began.elapsed()
    );
    assert!(
        matches!(outcome, Err(Error::Timeout)),
        "a campaign answered after its lease's local expiry must fail with Timeout: {outcome:?}"
    );
    proxy.set_mode(Mode::Pass);
    // The key is gone: the lease ran out on the server or the campaign revoked it.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let resp = observer
            .kv()
            .get(key.clone(), etcd_ha::GetOptions::new())
            .await
            .unwrap();
        if resp.kvs.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the abandoned campaign's key is still there"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
