//! The fault scheduler: random faults drawn from the seed, each healed before the next:
//! SIGKILL + restart, SIGTERM (a graceful stop) + restart, SIGSTOP/SIGCONT, client-link
//! blackhole, reset, latency and loss (the fault proxy), peer partition (network
//! namespaces), restart of every member, compaction, defragment, apply lag (a follower's
//! backend frozen until it answers `too many requests`), MoveLeader, member
//! add/remove, auth token invalidation, the NOSPACE alarm (the quota), a pause of the whole
//! client process longer than a lease's TTL, and two at once (one member's client link and
//! another member's process or peer links).

use std::time::Duration;

use etcd_ha::proto::etcdserverpb::AlarmType;
use etcd_ha::testkit::{Cluster, FaultProxy, Mode};
use etcd_ha::{Client, PutOptions};

use crate::harness::options_for;
use crate::history::FaultLog;
use crate::record::Recorder;
use crate::truth::Collectors;

/// One kind of fault; each is held for 0.3-2 s (drawn from the seed) and healed.
///
/// ```
/// use etcd_ha_check::faults::Fault;
/// assert_eq!(Fault::from_name("KillLeader"), Some(Fault::KillLeader));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL of the leader, then a restart.
    KillLeader,
    /// SIGKILL of a follower, then a restart.
    KillFollower,
    /// SIGTERM (a graceful stop) of the leader, then a restart.
    TerminateLeader,
    /// SIGTERM of a follower, then a restart.
    TerminateFollower,
    /// SIGSTOP of the leader, then SIGCONT.
    FreezeLeader,
    /// SIGSTOP of a follower, then SIGCONT.
    FreezeFollower,
    /// The leader's client link drops every byte (a half-open connection).
    BlackholeLeaderLink,
    /// The leader's client link resets every connection.
    ResetLeaderLink,
    /// A follower's client link drops every byte.
    BlackholeFollowerLink,
    /// 50-400 ms each way on the leader's client link.
    SlowLeaderLink,
    /// 50-400 ms each way on a follower's client link.
    SlowFollowerLink,
    /// The leader's client link lossy: 5-20 % of its chunks held back by a retransmission
    /// timeout of 200-1,000 ms, everything behind them waiting (TCP's in-order delivery).
    LossyLeaderLink,
    /// Every client link slow, then reset: answers of applied writes are lost.
    CutSlowLinks,
    /// The leader cut off from its peers (network namespaces).
    PartitionLeader,
    /// A follower cut off from its peers.
    PartitionFollower,
    /// Every member killed and restarted at once.
    RestartAll,
    /// Compaction up to what every truth collector has received.
    Compact,
    /// Defragmentation of a member.
    Defragment,
    /// A follower's backend filesystem frozen (a disk that stops answering) while writes go
    /// on: its apply stalls while raft does not, and once its commit runs 5,000 entries ahead
    /// it refuses every request with `too many requests` until it has caught up.
    ApplyLagFollower,
    /// Leadership moved to a follower.
    MoveLeader,
    /// A learner added and removed.
    AddRemoveMember,
    /// Every auth token invalidated (a user's password changed; auth runs only).
    InvalidateTokens,
    /// One member's client link bad while another member is killed, frozen or cut off.
    TwoAtOnce,
    /// The NOSPACE alarm (the quota) raised, then cleared.
    NoSpace,
    /// The whole client process paused (every runtime worker held) for 3-5 s, longer than a
    /// lease's TTL, while the cluster's clock runs on.
    PauseClients,
}

impl Fault {
    /// Every fault.
    ///
    /// ```
    /// assert!(etcd_ha_check::faults::Fault::ALL.len() > 20);
    /// ```
    pub const ALL: [Fault; 25] = [
        Fault::KillLeader,
        Fault::KillFollower,
        Fault::TerminateLeader,
        Fault::TerminateFollower,
        Fault::FreezeLeader,
        Fault::FreezeFollower,
        Fault::BlackholeLeaderLink,
        Fault::ResetLeaderLink,
        Fault::BlackholeFollowerLink,
        Fault::SlowLeaderLink,
        Fault::SlowFollowerLink,
        Fault::LossyLeaderLink,
        Fault::CutSlowLinks,
        Fault::PartitionLeader,
        Fault::PartitionFollower,
        Fault::RestartAll,
        Fault::Compact,
        Fault::Defragment,
        Fault::ApplyLagFollower,
        Fault::MoveLeader,
        Fault::AddRemoveMember,
        Fault::InvalidateTokens,
        Fault::TwoAtOnce,
        Fault::NoSpace,
        Fault::PauseClients,
    ];

    /// The fault called `name`, as it prints (`KillLeader`).
    ///
    /// ```
    /// use etcd_ha_check::faults::Fault;
    /// assert_eq!(Fault::from_name("PauseClients"), Some(Fault::PauseClients));
    /// assert_eq!(Fault::from_name("Meteor"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| format!("{f:?}") == name)
    }
}

/// What the scheduler acts on.
pub(crate) struct Target<'a> {
    pub cluster: &'a mut Cluster,
    pub proxies: &'a [FaultProxy],
    /// Connected to the members directly (not through the proxies).
    pub admin: &'a Client,
    pub collectors: &'a Collectors,
    pub recorder: &'a Recorder,
    /// Root user and password when auth is on.
    pub auth: Option<(String, String)>,
}

/// Inject random faults drawn from `allowed` for `duration`, and on until at least
/// `min_faults` were; the log of what was done.
pub(crate) async fn run(
    target: &mut Target<'_>,
    rng: &mut fastrand::Rng,
    allowed: &[Fault],
    duration: Duration,
    min_faults: usize,
) -> Vec<FaultLog> {
    let until = tokio::time::Instant::now() + duration;
    let mut log = Vec::new();
    // Let the workload reach a steady state first.
    tokio::time::sleep(Duration::from_millis(rng.u64(500..1_500))).await;
    // Token invalidation needs auth (on every third seed).
    let allowed: Vec<Fault> = allowed
        .iter()
        .copied()
        .filter(|f| *f != Fault::InvalidateTokens || target.auth.is_some())
        .collect();
    if allowed.is_empty() {
        // A run without faults (ROBUSTNESS_FAULTS empty): the workload alone, as long.
        tokio::time::sleep_until(until).await;
    }
    while (tokio::time::Instant::now() < until || log.len() < min_faults) && !allowed.is_empty() {
        let fault = allowed[rng.usize(..allowed.len())];
        let hold = Duration::from_millis(rng.u64(300..2_000));
        let start = target.recorder.now();
        let (member, detail) = inject(target, rng, fault, hold).await;
        log.push(FaultLog {
            kind: format!("{fault:?}"),
            member,
            start,
            end: target.recorder.now(),
            detail,
        });
        if let Err(e) = target.cluster.wait_ready(Duration::from_secs(30)).await {
            log.last_mut().unwrap().detail += &format!("; not ready after it: {e}");
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(200..1_200))).await;
    }
    log
}

/// Do `fault` for `hold` and heal it; the member it hit and what else is worth printing.
async fn inject(
    target: &mut Target<'_>,
    rng: &mut fastrand::Rng,
    fault: Fault,
    hold: Duration,
) -> (Option<usize>, String) {
    let n = target.cluster.len();
    let leader = target
        .cluster
        .leader(Duration::from_secs(10))
        .await
        .unwrap_or(0);
    let follower = (leader + 1 + rng.usize(..n - 1)) % n;
    let cluster = &mut *target.cluster;
    match fault {
        Fault::KillLeader | Fault::KillFollower => {
            let i = if fault == Fault::KillLeader {
                leader
            } else {
                follower
            };
            cluster.kill(i);
            tokio::time::sleep(hold).await;
            let restarted = cluster.restart(i).await;
            (
                Some(i),
                restarted.err().map(|e| e.to_string()).unwrap_or_default(),
            )
        }
        Fault::TerminateLeader | Fault::TerminateFollower => {
            // A graceful stop: the member hands leadership over and closes its streams (or,
            // on etcd 3.5.35+, holds the stop open while other clients' streams are open).
            let i = if fault == Fault::TerminateLeader {
                leader
            } else {
                follower
            };
            cluster.terminate(i).await;
            tokio::time::sleep(hold).await;
            let restarted = cluster.restart(i).await;
            (
                Some(i),
                restarted.err().map(|e| e.to_string()).unwrap_or_default(),
            )
        }
        Fault::SlowLeaderLink | Fault::SlowFollowerLink => {
            let i = if fault == Fault::SlowLeaderLink {
                leader
            } else {
                follower
            };
            let delay = Duration::from_millis(rng.u64(50..400));
            target.proxies[i].set_mode(Mode::Latency(delay));
            tokio::time::sleep(hold).await;
            target.proxies[i].set_mode(Mode::Pass);
            (Some(i), format!("{delay:?} each way"))
        }
        Fault::LossyLeaderLink => {
            let percent = rng.u8(5..=20);
            let retransmit = Duration::from_millis(rng.u64(200..1_000));
            target.proxies[leader].set_mode(Mode::Loss {
                percent,
                retransmit,
            });
            tokio::time::sleep(hold).await;
            target.proxies[leader].set_mode(Mode::Pass);
            (
                Some(leader),
                format!("{percent} % of chunks held {retransmit:?}"),
            )
        }
        Fault::CutSlowLinks => {
            // Every client link degrades, then dies: requests reach the members and are
            // applied while their answers wait in the slow links (nowhere faster to turn to),
            // and the reset loses those answers. Writes in flight then have an ambiguous
            // outcome, and many of them were applied.
            let delay = Duration::from_millis(rng.u64(100..300));
            for proxy in target.proxies {
                proxy.set_mode(Mode::Latency(delay));
            }
            tokio::time::sleep(hold.max(delay * 4)).await;
            for proxy in target.proxies {
                proxy.set_mode(Mode::Reset);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            for proxy in target.proxies {
                proxy.set_mode(Mode::Pass);
            }
            (None, format!("{delay:?} each way, then reset"))
        }
        Fault::NoSpace => {
            // The quota alarm, raised by hand: every member refuses writes, txns and lease
            // grants with "database space exceeded" until it is cleared.
            let r = match cluster.member_id(leader).await {
                Ok(id) => {
                    let m = target.admin.maintenance();
                    let on = m.alarm_activate(id, AlarmType::Nospace).await.err();
                    tokio::time::sleep(hold).await;
                    let mut off = m.alarm_deactivate(id, AlarmType::Nospace).await.err();
                    for _ in 0..50 {
                        if off.is_none() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        off = m.alarm_deactivate(id, AlarmType::Nospace).await.err();
                    }
                    format!("on {on:?}, off {off:?}")
                }
                Err(e) => e.to_string(),
            };
            (Some(leader), r)
        }
        Fault::PauseClients => {
            // The whole client process stops (a long GC pause, a frozen VM), longer than a
            // lease's TTL: both runtime workers are held, so every client, the workload and
            // the proxies stand still while the cluster's clock runs on.
            let pause = Duration::from_millis(rng.u64(3_000..5_000));
            let workers = tokio::runtime::Handle::current().metrics().num_workers();
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(workers));
            let sleepers: Vec<_> = (0..workers)
                .map(|_| {
                    let barrier = barrier.clone();
                    tokio::spawn(async move {
                        // Each sleeper holds a worker until all are held, then all sleep.
                        barrier.wait();
                        std::thread::sleep(pause);
                    })
                })
                .collect();
            for sleeper in sleepers {
                let _ = sleeper.await;
            }
            (None, format!("{pause:?}"))
        }
        Fault::TwoAtOnce => {
            // One member's client link goes bad while another member is killed, frozen or
            // cut off from its peers: a quorum stays, but not where the clients look first.
            let link = rng.usize(..n);
            let other = (link + 1 + rng.usize(..n - 1)) % n;
            let mode = match rng.usize(..3) {
                0 => Mode::Blackhole,
                1 => Mode::Reset,
                _ => Mode::Latency(Duration::from_millis(rng.u64(50..400))),
            };
            target.proxies[link].set_mode(mode);
            let what = match rng.usize(..3) {
                0 => {
                    cluster.kill(other);
                    tokio::time::sleep(hold).await;
                    format!("killed: {:?}", cluster.restart(other).await.err())
                }
                1 => {
                    cluster.stop(other);
                    tokio::time::sleep(hold).await;
                    cluster.cont(other);
                    "frozen".to_string()
                }
                _ => {
                    let done = cluster.partition(other);
                    tokio::time::sleep(hold).await;
                    format!(
                        "partitioned: {:?} {:?}",
                        done.err(),
                        cluster.heal(other).err()
                    )
                }
            };
            target.proxies[link].set_mode(Mode::Pass);
            (
                Some(other),
                format!("member {link}'s client link {mode:?}; member {other} {what}"),
            )
        }
        Fault::FreezeLeader | Fault::FreezeFollower => {
            let i = if fault == Fault::FreezeLeader {
                leader
            } else {
                follower
            };
            cluster.stop(i);
            tokio::time::sleep(hold).await;
            cluster.cont(i);
            (Some(i), String::new())
        }
        Fault::BlackholeLeaderLink | Fault::ResetLeaderLink | Fault::BlackholeFollowerLink => {
            let (i, mode) = match fault {
                Fault::BlackholeLeaderLink => (leader, Mode::Blackhole),
                Fault::ResetLeaderLink => (leader, Mode::Reset),
                _ => (follower, Mode::Blackhole),
            };
            target.proxies[i].set_mode(mode);
            tokio::time::sleep(hold).await;
            target.proxies[i].set_mode(Mode::Pass);
            (Some(i), String::new())
        }
        Fault::PartitionLeader | Fault::PartitionFollower => {
            let i = if fault == Fault::PartitionLeader {
                leader
            } else {
                follower
            };
            let done = cluster.partition(i);
            tokio::time::sleep(hold).await;
            let healed = cluster.heal(i);
            (Some(i), format!("{:?} {:?}", done.err(), healed.err()))
        }
        Fault::RestartAll => {
            cluster.kill_all();
            tokio::time::sleep(hold / 2).await;
            let started = cluster.start_all().await;
            (
                None,
                started.err().map(|e| e.to_string()).unwrap_or_default(),
            )
        }
        Fault::Compact => {
            // Only what every collector has: the ground truth must stay complete.
            let revision = target.collectors.received_by_all();
            let r = target.admin.kv().compact(revision, false).await;
            (None, format!("at {revision}: {:?}", r.err()))
        }
        Fault::Defragment => {
            let i = rng.usize(..n);
            let r = match target.admin.maintenance().on(&cluster.endpoint(i)) {
                Ok(m) => m.defragment().await.err(),
                Err(e) => Some(e),
            };
            (Some(i), format!("{r:?}"))
        }
        Fault::ApplyLagFollower => {
            let detail = apply_lag(cluster, leader, follower, hold).await;
            (Some(follower), detail)
        }
        Fault::MoveLeader => {
            let r = match (
                cluster.member_id(follower).await,
                target.admin.maintenance().on(&cluster.endpoint(leader)),
            ) {
                (Ok(id), Ok(m)) => m.move_leader(id).await.err().map(|e| e.to_string()),
                (Err(e), _) => Some(e.to_string()),
                (_, Err(e)) => Some(e.to_string()),
            };
            (Some(follower), format!("{r:?}"))
        }
        Fault::AddRemoveMember => {
            // A learner that never starts: a membership change through raft and member
            // lists that change under the clients, without touching the quorum.
            // etcd refuses changes for 5 s after a member (re)connects: retried while it says so.
            let admin = target.admin;
            let peer = peer_url();
            let members = admin.cluster();
            let add = settled(|| members.member_add_as_learner([peer.clone()]));
            let added = match tokio::time::timeout(Duration::from_secs(8), add).await {
                Ok(added) => added,
                Err(_) => return (None, "add: refused as unhealthy for 8 s".into()),
            };
            let detail = match added {
                Ok(r) => {
                    tokio::time::sleep(hold).await;
                    let id = r.member.map_or(0, |m| m.id);
                    let removed = settled(|| members.member_remove(id)).await;
                    format!("learner {id:x}: removed {:?}", removed.err())
                }
                Err(e) => format!("add: {e}"),
            };
            (None, detail)
        }
        Fault::InvalidateTokens => {
            // etcd drops every token of a user whose password changes (to the same one here):
            // all clients must log in again at once.
            let (user, password) = target.auth.clone().expect("only with auth");
            let r = target
                .admin
                .auth()
                .user_change_password(user, password)
                .await;
            tokio::time::sleep(hold).await;
            (None, format!("{:?}", r.err()))
        }
    }
}

/// Freezes `follower`'s backend, then writes outside the workload's keys through the leader
/// until the follower refuses with `too many requests` (its commit 5,000 entries ahead of its
/// apply); holds that for `hold` and thaws. What happened, for the log.
async fn apply_lag(cluster: &Cluster, leader: usize, follower: usize, hold: Duration) -> String {
    let pinned = |i: usize| {
        // One member each, so that the burst and the probe go where they are meant to.
        let options = options_for(cluster)
            .without_member_sync()
            .with_request_timeout(Duration::from_secs(2))
            .with_retry(Duration::from_millis(10), 0.0, 1);
        Client::connect(vec![cluster.endpoint(i)], options)
    };
    // Connected first: a connect asks for Status, which waits on a frozen backend too.
    let (to_leader, to_follower) = match (pinned(leader).await, pinned(follower).await) {
        (Ok(l), Ok(f)) => (l, f),
        (Err(e), _) | (_, Err(e)) => return format!("connect: {e}"),
    };
    if let Err(e) = cluster.freeze_backend(follower) {
        return format!("freeze: {e}");
    }
    let mut written = 0;
    let mut detail = None;
    while written < LAG_WRITES_MAX && detail.is_none() {
        let mut burst = tokio::task::JoinSet::new();
        for t in 0..LAG_IN_FLIGHT {
            let kv = to_leader.kv();
            burst.spawn(async move {
                for n in 0..LAG_BURST / LAG_IN_FLIGHT {
                    let _ = kv
                        .put(format!("rb-lag/{t}"), n.to_string(), PutOptions::new())
                        .await;
                }
            });
        }
        while burst.join_next().await.is_some() {}
        written += LAG_BURST;
        if written <= LAG_LIMIT {
            continue;
        }
        // Below the limit the probe is proposed and waits for an apply that cannot come.
        let kv = to_follower.kv();
        let probe = kv.put("rb-lag/probe", "x", PutOptions::new()).await;
        if let Err(etcd_ha::Error::TooManyRequests) = probe {
            detail = Some(format!(
                "refused with too many requests after {written} writes"
            ));
        }
    }
    let detail = detail.unwrap_or_else(|| format!("no refusal after {written} writes"));
    tokio::time::sleep(hold).await;
    match cluster.thaw_backend(follower) {
        Ok(()) => detail,
        Err(e) => format!("{detail}; thaw: {e}"),
    }
}

/// etcd's `maxGapBetweenApplyAndCommitIndex`: no refusal is possible before this many.
const LAG_LIMIT: usize = 5_000;
/// The apply lag's writes: in bursts of this many, so many at a time, up to this many.
const LAG_BURST: usize = 1_000;
const LAG_IN_FLIGHT: usize = 50;
const LAG_WRITES_MAX: usize = 15_000;

/// Undo every fault that could still be in place (after a failed heal).
pub(crate) async fn heal_all(cluster: &mut Cluster, proxies: &[FaultProxy]) {
    for proxy in proxies {
        proxy.set_mode(Mode::Pass);
    }
    for i in 0..cluster.len() {
        let _ = cluster.thaw_backend(i);
        cluster.cont(i);
        let _ = cluster.heal(i);
        if cluster.pid(i).is_none() {
            let _ = cluster.restart(i).await;
        }
    }
}

/// A peer URL on 127.0.0.1 nothing listens on: for a learner that is added and removed, never
/// started.
fn peer_url() -> String {
    let port = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map_or(1, |a| a.port());
    format!("http://127.0.0.1:{port}")
}

/// How long etcd may refuse a membership change as "unhealthy cluster": it does so until the
/// member has been connected to every voting peer for 5 s (its `HealthInterval`); generous for
/// a loaded 2-core box.
const PEERS_SETTLE: Duration = Duration::from_secs(30);

/// Runs a membership change until etcd stops refusing it as "unhealthy cluster" (nothing was
/// applied then, so sending it again is safe), for up to 30 s.
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client, id: u64) -> etcd_ha::Result<()> {
/// let members = client.cluster();
/// etcd_ha_check::faults::settled(|| members.member_remove(id)).await?;
/// # Ok(())
/// # }
/// ```
pub async fn settled<T, F, Fut>(mut change: F) -> etcd_ha::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = etcd_ha::Result<T>>,
{
    let deadline = tokio::time::Instant::now() + PEERS_SETTLE;
    loop {
        match change().await {
            Err(etcd_ha::Error::Unavailable(status))
                if status.message() == "etcdserver: unhealthy cluster"
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => return other,
        }
    }
}
