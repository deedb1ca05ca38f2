//! One run, start to end, around your workload: a 3-member cluster in its own network
//! namespaces, fault proxies in front of it, the ground-truth collectors, clients through the
//! proxies; then everything healed, the truth collected up to a final write, and the members'
//! hashes of the keyspace compared: a [`History`] to [`check`](crate::check()).

use std::sync::Arc;
use std::time::Duration;

use etcd_ha::testkit::{Cluster, FaultProxy, TlsFiles};
use etcd_ha::{Client, GetOptions, Options, PutOptions, TlsOptions};

use crate::faults::{self, Fault, Target};
use crate::history::{FaultLog, History, Outcome, Request};
use crate::record::Recorder;
use crate::truth::Collectors;

/// How a run is set up.
///
/// ```
/// use etcd_ha_check::faults::Fault;
/// use etcd_ha_check::harness::HarnessConfig;
/// let config = HarnessConfig::new(7)
///     .with_auth(true)
///     .with_faults(vec![Fault::KillLeader, Fault::FreezeLeader]);
/// assert_eq!(config.seed(), 7);
/// ```
#[derive(Clone, Debug)]
pub struct HarnessConfig {
    seed: u64,
    auth: bool,
    faults: Vec<Fault>,
    min_faults: usize,
}

impl HarnessConfig {
    /// A run drawn from `seed` (the fault schedule; your workload may draw from it too): no
    /// auth, every fault of [`Fault::ALL`].
    ///
    /// ```
    /// let config = etcd_ha_check::HarnessConfig::new(1);
    /// ```
    pub fn new(seed: u64) -> HarnessConfig {
        HarnessConfig {
            seed,
            auth: false,
            faults: Fault::ALL.to_vec(),
            min_faults: 0,
        }
    }

    /// Turn auth on (user `root`, a 2 s token TTL, so tokens expire under the workload); the
    /// clients log in with it. Needed for [`Fault::InvalidateTokens`], left out otherwise.
    ///
    /// ```
    /// let config = etcd_ha_check::HarnessConfig::new(1).with_auth(true);
    /// ```
    pub fn with_auth(mut self, on: bool) -> HarnessConfig {
        self.auth = on;
        self
    }

    /// The faults to draw from (empty: the workload runs without faults, as long).
    ///
    /// ```
    /// use etcd_ha_check::faults::Fault;
    /// let config = etcd_ha_check::HarnessConfig::new(1).with_faults(vec![Fault::PartitionLeader]);
    /// ```
    pub fn with_faults(mut self, faults: Vec<Fault>) -> HarnessConfig {
        self.faults = faults;
        self
    }

    /// Inject at least `count` faults, past the run's duration if need be. A run aimed at one
    /// kind of bug (a planted one the suite must catch) needs a given number of chances
    /// whatever the machine's speed: on a slow machine the waits for the cluster to be ready
    /// again leave room for fewer faults in the same time.
    ///
    /// ```
    /// let config = etcd_ha_check::HarnessConfig::new(1).with_min_faults(4);
    /// ```
    pub fn with_min_faults(mut self, count: usize) -> HarnessConfig {
        self.min_faults = count;
        self
    }

    /// The seed.
    ///
    /// ```
    /// assert_eq!(etcd_ha_check::HarnessConfig::new(3).seed(), 3);
    /// ```
    pub fn seed(&self) -> u64 {
        self.seed
    }
}

/// Why a run could not produce a history to judge.
///
/// ```
/// let e = etcd_ha_check::HarnessError::Broken("the final write failed".into());
/// assert!(e.to_string().contains("final write"));
/// ```
#[derive(Debug)]
pub enum HarnessError {
    /// The cluster, a proxy or a client could not be set up.
    Setup(String),
    /// The cluster itself lost consistency through etcd's own bug (3.5.0-3.5.2 after a
    /// SIGKILL, etcd issue 13766): the client cannot be judged against it.
    EtcdDiverged(String),
    /// The run broke down at its end: the truth is incomplete, the final write failed, or the
    /// members disagree on the keyspace.
    Broken(String),
}

impl std::fmt::Display for HarnessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HarnessError::Setup(e) => write!(f, "setting the run up failed: {e}"),
            HarnessError::EtcdDiverged(e) => write!(
                f,
                "etcd diverged (etcd's own bug in 3.5.0-3.5.2, etcd issue 13766: a member \
                 SIGKILLed under load can apply entries again after its restart; fixed in \
                 3.5.3): {e}"
            ),
            HarnessError::Broken(e) => write!(f, "the run broke down: {e}"),
        }
    }
}

impl std::error::Error for HarnessError {}

/// A running cluster with everything a run records around it.
///
/// Needs a multi-thread Tokio runtime (a [`Fault::PauseClients`] holds every worker).
/// Dropping it stops the cluster.
///
/// ```no_run
/// # async fn demo() -> Result<(), etcd_ha_check::HarnessError> {
/// let harness = etcd_ha_check::Harness::start(etcd_ha_check::HarnessConfig::new(1)).await?;
/// println!("keys under {}", harness.prefix());
/// # Ok(())
/// # }
/// ```
pub struct Harness {
    config: HarnessConfig,
    cluster: Cluster,
    proxies: Vec<FaultProxy>,
    options: Options,
    admin: Client,
    prefix: String,
    start_revision: i64,
    recorder: Arc<Recorder>,
    collectors: Collectors,
    rng: fastrand::Rng,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("seed", &self.config.seed)
            .field("prefix", &self.prefix)
            .field("endpoints", &self.proxied_endpoints())
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// Start the cluster (3 members, each in network namespaces of its own and with its
    /// backend on a filesystem of its own that [`Fault::ApplyLagFollower`] freezes, progress
    /// notifications every second), a fault proxy in front of each member, an admin client on
    /// the members directly and the truth collectors from the current revision. Needs root,
    /// `ip` (iproute2), `mkfs.ext4` and `fsfreeze`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), etcd_ha_check::HarnessError> {
    /// let harness = etcd_ha_check::Harness::start(etcd_ha_check::HarnessConfig::new(1)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn start(config: HarnessConfig) -> Result<Harness, HarnessError> {
        let setup =
            |what: &str, e: &dyn std::fmt::Display| HarnessError::Setup(format!("{what}: {e}"));
        let mut builder = Cluster::builder()
            .members(3)
            .isolated_network(true)
            .freezable_backend(true)
            .watch_progress_notify_interval(Duration::from_secs(1));
        if config.auth {
            builder = builder.auth("root", "robust").arg("--auth-token-ttl=2");
        }
        let cluster = builder.start().await.map_err(|e| setup("start", &e))?;
        let mut proxies = Vec::new();
        for i in 0..cluster.len() {
            let proxy =
                FaultProxy::start(cluster.client_addr(i)).map_err(|e| setup("a proxy", &e))?;
            proxies.push(proxy);
        }
        let options = options_for(&cluster);
        let admin = Client::connect(cluster.endpoints(), options.clone())
            .await
            .map_err(|e| setup("admin client", &e))?;
        let prefix = format!("rb/{}/", config.seed);
        let start_revision = admin
            .kv()
            .get(prefix.as_str(), GetOptions::new())
            .await
            .map_err(|e| setup("start revision", &e))?
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
        Ok(Harness {
            rng: fastrand::Rng::with_seed(config.seed),
            config,
            cluster,
            proxies,
            options,
            admin,
            prefix,
            start_revision,
            recorder,
            collectors,
        })
    }

    /// The seed of this run.
    ///
    /// ```no_run
    /// # fn demo(harness: etcd_ha_check::Harness) {
    /// println!("rerun with seed {}", harness.seed());
    /// # }
    /// ```
    pub fn seed(&self) -> u64 {
        self.config.seed
    }

    /// The prefix every recorded key lives under: the truth is collected under it.
    ///
    /// ```no_run
    /// # fn demo(harness: etcd_ha_check::Harness) {
    /// assert!(harness.prefix().ends_with('/'));
    /// # }
    /// ```
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Where the keys of recorded KV operations live (`<prefix>kv/`): deletes there are
    /// judged one by one (a delete applied twice is caught), while deletes elsewhere under the
    /// prefix may come from leases and recipes.
    ///
    /// ```no_run
    /// # fn demo(harness: etcd_ha_check::Harness) {
    /// let key = format!("{}user-1", harness.kv_prefix());
    /// # }
    /// ```
    pub fn kv_prefix(&self) -> String {
        format!("{}kv/", self.prefix)
    }

    /// The recorder to run your calls through; its clock is the run's.
    ///
    /// ```no_run
    /// # fn demo(harness: etcd_ha_check::Harness) {
    /// let recorder = harness.recorder();
    /// println!("{} ns into the run", recorder.now());
    /// # }
    /// ```
    pub fn recorder(&self) -> Arc<Recorder> {
        self.recorder.clone()
    }

    /// The members' URLs through the fault proxies.
    ///
    /// ```no_run
    /// # fn demo(harness: etcd_ha_check::Harness) {
    /// assert_eq!(harness.proxied_endpoints().len(), 3);
    /// # }
    /// ```
    pub fn proxied_endpoints(&self) -> Vec<String> {
        let scheme = if self.cluster.tls().is_some() {
            "https"
        } else {
            "http"
        };
        self.proxies.iter().map(|p| p.url(scheme)).collect()
    }

    /// Options that reach this cluster (its credentials when auth is on), with member sync
    /// off so that a client stays on the proxies; add your own on top.
    ///
    /// ```no_run
    /// # async fn demo(harness: etcd_ha_check::Harness) -> etcd_ha::Result<()> {
    /// let options = harness.options().with_request_timeout(std::time::Duration::from_secs(2));
    /// let client = etcd_ha::Client::connect(harness.proxied_endpoints(), options).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn options(&self) -> Options {
        self.options.clone().without_member_sync()
    }

    /// A client under test: through the fault proxies, with [`options`](Self::options).
    ///
    /// ```no_run
    /// # async fn demo(harness: etcd_ha_check::Harness) -> etcd_ha::Result<()> {
    /// let client = harness.client().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn client(&self) -> etcd_ha::Result<Client> {
        Client::connect(self.proxied_endpoints(), self.options()).await
    }

    /// A client on the members directly, never faulted by the proxies (the members' own
    /// faults still reach it): for setup and the end of the run.
    ///
    /// ```no_run
    /// # async fn demo(harness: etcd_ha_check::Harness) -> etcd_ha::Result<()> {
    /// harness.admin().kv().put("setup", "done", etcd_ha::PutOptions::new()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn admin(&self) -> &Client {
        &self.admin
    }

    /// The cluster, for faults of your own.
    ///
    /// ```no_run
    /// # fn demo(harness: etcd_ha_check::Harness) {
    /// println!("etcd {}", harness.cluster().etcd_version());
    /// # }
    /// ```
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Inject faults drawn from the seed for `duration` (and on until the configured minimum
    /// count, [`HarnessConfig::with_min_faults`]), each healed before the next; then
    /// heal everything, wait for a ready cluster and a second of calm, so the workload's last
    /// operations see a healthy cluster. The log of what was done.
    ///
    /// ```no_run
    /// # async fn demo(mut harness: etcd_ha_check::Harness) {
    /// let faults = harness.inject_faults(std::time::Duration::from_secs(8)).await;
    /// println!("{} faults", faults.len());
    /// # }
    /// ```
    pub async fn inject_faults(&mut self, duration: Duration) -> Vec<FaultLog> {
        let auth = self
            .cluster
            .auth()
            .map(|(u, p)| (u.to_owned(), p.to_owned()));
        let log = {
            let mut target = Target {
                cluster: &mut self.cluster,
                proxies: &self.proxies,
                admin: &self.admin,
                collectors: &self.collectors,
                recorder: &self.recorder,
                auth,
            };
            faults::run(
                &mut target,
                &mut self.rng,
                &self.config.faults,
                duration,
                self.config.min_faults,
            )
            .await
        };
        faults::heal_all(&mut self.cluster, &self.proxies).await;
        let _ = self.cluster.wait_ready(Duration::from_secs(30)).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        log
    }

    /// Put `key` through the admin client as a recorded operation (so the checkers know its
    /// value), again with a new value if a try fails, for up to 30 s: an end marker every
    /// watch still open must deliver (set [`History::end_marker`] to it).
    ///
    /// ```no_run
    /// # use etcd_ha_check::{Harness, HarnessError};
    /// # async fn demo(harness: Harness) -> Result<(), HarnessError> {
    /// let marker = format!("{}end", harness.prefix());
    /// harness.write_end_marker(&marker).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn write_end_marker(&self, key: &str) -> Result<(), HarnessError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        for attempt in 1.. {
            let request = Request::Put {
                key: key.to_owned(),
                value: format!("end-{attempt}"),
                lease: None,
            };
            let outcome = self
                .recorder
                .kv(&self.admin, MARKER_PROCESS, ADMIN_CLIENT, request)
                .await;
            match outcome {
                Outcome::Ok(_) => return Ok(()),
                other if tokio::time::Instant::now() > deadline => {
                    return Err(HarnessError::Broken(format!(
                        "the end marker could not be written: {other:?}"
                    )));
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        unreachable!("the loop returns")
    }

    /// End the run: a final write outside the prefix pins the last revision, the truth is
    /// collected up to it, and every member must have the same keyspace hash there. `logged`
    /// is what your workload logged (watches, leases, holds, abandoned campaigns, the faults
    /// and the end); the harness fills in the rest (seed, version, prefix, ops, truth).
    ///
    /// ```no_run
    /// # use etcd_ha_check::{Harness, HarnessError};
    /// # async fn demo(harness: Harness) -> Result<(), HarnessError> {
    /// let end = harness.recorder().now();
    /// let history = harness.finish(etcd_ha_check::History { end, ..Default::default() }).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn finish(self, logged: History) -> Result<History, HarnessError> {
        let faults = &logged.faults;
        let broken = |e: String| HarnessError::Broken(format!("{e}\nfaults: {faults:?}"));
        let tombstone = write_tombstone(&self.admin, &self.prefix)
            .await
            .map_err(broken)?;
        let truth = self
            .collectors
            .finish(tombstone, Duration::from_secs(30))
            .await;
        let hashes = hashes_agree(&self.cluster, &self.admin, tombstone).await;
        if let Err(e) = truth.as_ref().and(hashes.as_ref())
            && known_etcd_divergence(self.cluster.etcd_version(), faults)
            && e.contains("disagree")
        {
            return Err(HarnessError::EtcdDiverged(format!(
                "{e}\nfaults: {faults:?}"
            )));
        }
        let truth = truth.map_err(broken)?;
        hashes.map_err(broken)?;
        Ok(History {
            seed: self.config.seed,
            etcd_version: self.cluster.etcd_version().to_owned(),
            prefix: self.prefix.clone(),
            ops: self.recorder.take_ops(),
            truth,
            start_revision: self.start_revision,
            ..logged
        })
    }
}

/// The process id of the end marker's write.
pub const MARKER_PROCESS: u32 = 301;

/// The client id the admin client's recorded operations carry.
pub const ADMIN_CLIENT: u32 = 99;

/// Options that reach `cluster`: its CA and client certificate when it runs TLS, its root
/// user when auth is on (in plain text on a loopback cluster without TLS, on purpose).
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let cluster = etcd_ha::testkit::Cluster::builder().auth("root", "pw").start().await?;
/// let options = etcd_ha_check::harness::options_for(&cluster);
/// let client = etcd_ha::Client::connect(cluster.endpoints(), options).await?;
/// # Ok(())
/// # }
/// ```
pub fn options_for(cluster: &Cluster) -> Options {
    let mut options = Options::new();
    if let Some(tls) = cluster.tls() {
        options = options.with_tls(tls_options(tls));
    }
    if let Some((user, password)) = cluster.auth() {
        options = options.with_user(user, password);
        if cluster.tls().is_none() {
            options = options.with_plaintext_credentials();
        }
    }
    options
}

fn tls_options(tls: &TlsFiles) -> TlsOptions {
    TlsOptions::new()
        .with_ca_file(&tls.ca)
        .with_client_cert(&tls.client_cert, &tls.client_key)
}

/// Whether members disagreeing is etcd's known bug rather than anything a client did: etcd
/// 3.5.0 to 3.5.2 may not persist its consistent index with the data it applied, so a member
/// killed while applying re-applies entries when it restarts and its revisions drift from its
/// peers'. Only after a SIGKILL (a member killed, or every member). Elsewhere, members that
/// disagree fail the run.
fn known_etcd_divergence(version: &str, faults: &[FaultLog]) -> bool {
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
