//! One seed, start to end: a 3-member cluster in its own network namespaces, fault proxies
//! in front of it, three clients through the proxies (two busy, one idle but for its watches
//! "from now"), the ground-truth collectors, the workload and the fault scheduler; then
//! everything healed, the workload stopped, an end marker written that every open watch must
//! deliver, a final write pins the last revision, and the members' hashes of the keyspace must
//! agree.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_ha::testkit::{Cluster, FaultProxy};
use etcd_ha::{Client, GetOptions, PutOptions};

use crate::faults::{self, Target};
use crate::history::History;
use crate::record::Recorder;
use crate::support::options_for;
use crate::truth::Collectors;
use crate::workload::{self, Ctx};

/// How one seed runs.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub seed: u64,
    /// How long faults are injected under the workload.
    pub duration: Duration,
}

impl Config {
    /// Auth (with a 2 s token TTL) on every third seed.
    pub fn auth(&self) -> bool {
        self.seed % 3 == 2
    }
}

/// Run one seed; the recorded history, or why the run itself broke down.
pub async fn run(config: Config) -> Result<History, String> {
    let mut builder = Cluster::builder()
        .members(3)
        .isolated_network(true)
        .watch_progress_notify_interval(std::time::Duration::from_secs(1));
    if config.auth() {
        builder = builder.auth("root", "robust").arg("--auth-token-ttl=2");
    }
    let mut cluster = builder.start().await.map_err(|e| format!("start: {e}"))?;
    let proxies: Vec<FaultProxy> = (0..cluster.len())
        .map(|i| FaultProxy::start(cluster.client_addr(i)).expect("start a fault proxy"))
        .collect();
    let options = options_for(&cluster);
    let admin = Client::connect(cluster.endpoints(), options.clone())
        .await
        .map_err(|e| format!("admin client: {e}"))?;
    let prefix = format!("rb/{}/", config.seed);
    let start_revision = admin
        .kv()
        .get("rb/", GetOptions::new())
        .await
        .map_err(|e| format!("start revision: {e}"))?
        .header
        .map_or(0, |h| h.revision);

    let recorder = Arc::new(Recorder::new());
    let collectors = Collectors::start(
        &cluster.endpoints(),
        &options,
        &prefix,
        start_revision,
        recorder.clone(),
    );
    // The clients under test reach the members only through the proxies (so member sync,
    // which would learn the direct URLs, is off).
    let proxied: Vec<String> = proxies.iter().map(|p| p.url("http")).collect();
    let mut clients = Vec::new();
    for _ in 0..2 {
        let client = Client::connect(proxied.clone(), options.clone().without_member_sync())
            .await
            .map_err(|e| format!("client: {e}"))?;
        clients.push(client);
    }
    let idle = Client::connect(proxied.clone(), options.clone().without_member_sync())
        .await
        .map_err(|e| format!("idle client: {e}"))?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (finish, finished) = tokio::sync::watch::channel(false);
    let ctx = Ctx {
        seed: config.seed,
        prefix: prefix.clone(),
        recorder: recorder.clone(),
        stop: stopped,
        finish: finished,
        watches: Arc::new(Mutex::new(Vec::new())),
        leases: Arc::new(Mutex::new(Vec::new())),
        holds: Arc::new(Mutex::new(Vec::new())),
        abandoned: Arc::new(Mutex::new(Vec::new())),
    };
    let mut tasks = workload::start(&ctx, &clients, &idle);

    let mut rng = fastrand::Rng::with_seed(config.seed);
    let auth = cluster.auth().map(|(u, p)| (u.to_owned(), p.to_owned()));
    let faults = {
        let mut target = Target {
            cluster: &mut cluster,
            proxies: &proxies,
            admin: &admin,
            collectors: &collectors,
            recorder: &recorder,
            auth,
        };
        faults::run(&mut target, &mut rng, config.duration).await
    };
    faults::heal_all(&mut cluster, &proxies).await;
    let _ = cluster.wait_ready(Duration::from_secs(30)).await;
    // A last second of calm, so the workload's last operations see a healthy cluster.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let end = recorder.now();
    let _ = stop.send(true);
    // The end marker, under every watched prefix: the open watches follow until they deliver
    // it, for at most WATCH_DRAIN (the liveness check judges the ones that did not).
    let end_marker = workload::watch::end_marker(&prefix);
    write_end_marker(&ctx, &admin, &end_marker).await?;
    let drained = tokio::time::timeout(WATCH_DRAIN, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        let _ = finish.send(true);
    }
    let joined = tokio::time::timeout(Duration::from_secs(30), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if joined.is_err() {
        tasks.abort_all();
        return Err("the workload did not stop within 30 s of being told to".into());
    }

    // The final write outside the prefix pins the last revision the truth must reach.
    let with_faults = |e: String| format!("{e}\nfaults: {faults:?}");
    let tombstone = write_tombstone(&admin, &prefix)
        .await
        .map_err(with_faults)?;
    let truth = collectors.finish(tombstone, Duration::from_secs(30)).await;
    let hashes = hashes_agree(&cluster, &admin, tombstone).await;
    if let Err(e) = truth.as_ref().and(hashes.as_ref())
        && known_etcd_divergence(cluster.etcd_version(), &faults)
        && e.contains("disagree")
    {
        return Err(format!("{ETCD_13766}: {e}\nfaults: {faults:?}"));
    }
    let truth = truth.map_err(with_faults)?;
    hashes.map_err(with_faults)?;

    Ok(History {
        seed: config.seed,
        etcd_version: cluster.etcd_version().to_owned(),
        prefix,
        ops: recorder.take_ops(),
        watches: std::mem::take(&mut *ctx.watches.lock().unwrap()),
        leases: std::mem::take(&mut *ctx.leases.lock().unwrap()),
        holds: std::mem::take(&mut *ctx.holds.lock().unwrap()),
        abandoned: std::mem::take(&mut *ctx.abandoned.lock().unwrap()),
        truth,
        start_revision,
        faults,
        end,
        end_marker: Some(end_marker),
    })
}

/// How long open watches get to deliver the end marker once it is written (a healthy
/// cluster, after a second of calm: a live watch needs milliseconds).
const WATCH_DRAIN: Duration = Duration::from_secs(10);

/// Put the end marker (a recorded operation, so the truth checks know its value), again
/// with a new value if a try fails.
async fn write_end_marker(ctx: &Ctx, admin: &Client, key: &str) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for attempt in 1.. {
        let request = crate::history::Request::Put {
            key: key.to_owned(),
            value: format!("end-{attempt}"),
            lease: None,
        };
        let put = workload::kv::run(admin, &request);
        let outcome = ctx
            .recorder
            .op(
                workload::kv::MARKER_PROCESS,
                ADMIN_CLIENT,
                request.clone(),
                put,
            )
            .await;
        match outcome {
            crate::history::Outcome::Ok(_) => return Ok(()),
            other if tokio::time::Instant::now() > deadline => {
                return Err(format!("the end marker could not be written: {other:?}"));
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    unreachable!("the loop returns")
}

/// The client id the admin client's recorded operations carry.
const ADMIN_CLIENT: u32 = 99;

/// How a run that met etcd's own data-inconsistency bug reports itself.
pub const ETCD_13766: &str = "etcd diverged (etcd's own bug in 3.5.0-3.5.2, etcd issue 13766: a \
member SIGKILLed under load can apply entries again after its restart; fixed in 3.5.3)";

/// Whether members disagreeing is etcd's known bug rather than anything a client did: etcd
/// 3.5.0 to 3.5.2 may not persist its consistent index with the data it applied, so a member
/// killed while applying re-applies entries when it restarts and its revisions drift from its
/// peers'. Only after a SIGKILL (a member killed, or every member). Elsewhere, members that
/// disagree fail the seed.
fn known_etcd_divergence(version: &str, faults: &[crate::history::FaultLog]) -> bool {
    let affected = ["3.5.0", "3.5.1", "3.5.2"].contains(&version);
    let killed = faults.iter().any(|f| {
        matches!(
            f.kind.as_str(),
            "KillLeader" | "KillFollower" | "RestartAll"
        ) || (f.kind == "TwoAtOnce" && f.detail.contains("killed"))
    });
    affected && killed
}

async fn write_tombstone(admin: &Client, prefix: &str) -> Result<i64, String> {
    let key = format!("{}.tombstone", prefix.trim_end_matches('/'));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match admin.kv().put(key.as_str(), "end", PutOptions::new()).await {
            Ok(r) => return Ok(r.header.map_or(0, |h| h.revision)),
            Err(e) if tokio::time::Instant::now() > deadline => {
                return Err(format!("the final write failed: {e}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Every member has the same keyspace hash at `revision` (etcd's own end-of-run check).
async fn hashes_agree(cluster: &Cluster, admin: &Client, revision: i64) -> Result<(), String> {
    let mut hashes = Vec::new();
    for i in 0..cluster.len() {
        let member = admin
            .maintenance()
            .on(&cluster.endpoint(i))
            .map_err(|e| e.to_string())?;
        let mut tries = 0;
        let hash = loop {
            match member.hash_kv(revision).await {
                Ok(r) => break (r.hash, r.compact_revision),
                Err(e) if tries >= 50 => return Err(format!("hash of member {i}: {e}")),
                Err(_) => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        hashes.push(hash);
    }
    if hashes.windows(2).any(|w| w[0] != w[1]) {
        return Err(format!(
            "members disagree on the keyspace at revision {revision}: {hashes:?}"
        ));
    }
    Ok(())
}
