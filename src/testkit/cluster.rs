//! A running etcd cluster of real processes: where its members are, who leads, and the faults to inject.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use tempfile::TempDir;
use tonic::transport::ClientTlsConfig;

use super::backend_fs::BackendFs;
use super::member::Member;
use super::netns::Network;
use super::{ClusterBuilder, TestkitError, TlsFiles, probe, wait};

/// How many times a member is started again when its port turned out to be taken (by a
/// connection that grabbed it as an ephemeral port while the member was down).
const BIND_ATTEMPTS: usize = 3;

/// Pause before such a retry, so the transient connection can go away.
const BIND_RETRY_PAUSE: Duration = Duration::from_millis(300);

/// A real etcd cluster on 127.0.0.1 (or, built with
/// [`isolated_network`](ClusterBuilder::isolated_network), with each member in a network
/// namespace of its own), with its own temporary data directories.
///
/// Members are indexed `0..len()` and named "m0", "m1", .... Dropping the cluster SIGKILLs every
/// member and removes its directory, also when the test panics; if the whole test process dies,
/// Linux kills the members too (see the `spawner` module).
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use etcd_ha::testkit::Cluster;
///
/// # async fn demo() {
/// let mut cluster = Cluster::start(3).await.unwrap();
/// let leader = cluster.leader(Duration::from_secs(10)).await.unwrap();
/// cluster.kill(leader);
/// let next = cluster.leader(Duration::from_secs(10)).await.unwrap();
/// assert_ne!(leader, next);
/// # }
/// ```
pub struct Cluster {
    /// The members, running or not. Declared before `dir` so that, even without our `Drop`,
    /// the processes die before their directories are removed.
    pub(crate) members: Vec<Member>,
    /// The members' network namespaces, for clusters built with `isolated_network(true)`.
    /// Declared after `members`: a namespace goes away only once its processes are dead.
    pub(crate) network: Option<Network>,
    /// What `etcd --version` reported, so tests can adapt to 3.4 vs 3.5.
    pub(crate) version: String,
    /// The certificate files, for TLS clusters.
    pub(crate) tls: Option<TlsFiles>,
    /// The client TLS config built from `tls`, used by our own probes.
    pub(crate) client_tls: Option<ClientTlsConfig>,
    /// Root user and password, for clusters with auth enabled.
    pub(crate) auth: Option<(String, String)>,
    /// How long starts and restarts may take before they count as failed.
    pub(crate) ready_timeout: Duration,
    /// Each member's backend filesystem, for clusters built with `freezable_backend(true)`.
    /// Declared after `members` (unmounted once they are dead) and before `dir`.
    pub(crate) backends: Vec<BackendFs>,
    /// Holds every member's data dir and log, and the certificates; removed on drop.
    pub(crate) dir: TempDir,
}

impl std::fmt::Debug for Cluster {
    // The user only: the password, and the client key inside the TLS config, stay out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("endpoints", &self.endpoints())
            .field("version", &self.version)
            .field("tls", &self.tls)
            .field("user", &self.auth.as_ref().map(|(user, _)| user))
            .field("isolated_network", &self.network.is_some())
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Starts a plain-http cluster of `members` members without auth and waits for a leader.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::start(1).await.unwrap();
    /// assert!(cluster.endpoint(0).starts_with("http://127.0.0.1:"));
    /// # }
    /// ```
    pub async fn start(members: usize) -> Result<Cluster, TestkitError> {
        Cluster::builder().members(members).start().await
    }

    /// A builder for TLS, auth, more members or extra etcd flags.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder()
    ///     .members(3)
    ///     .tls(true)
    ///     .client_cert_auth(true)
    ///     .auth("root", "rootpw")
    ///     .start()
    ///     .await
    ///     .unwrap();
    /// assert_eq!(cluster.auth(), Some(("root", "rootpw")));
    /// # }
    /// ```
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    /// The client URLs of all members, in member order.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::start(3).await.unwrap();
    /// assert_eq!(cluster.endpoints().len(), 3);
    /// # }
    /// ```
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// The client URL of member `i`, e.g. "http://127.0.0.1:40123". Panics if `i >= len()`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().tls(true).start().await.unwrap();
    /// assert!(cluster.endpoint(0).starts_with("https://127.0.0.1:"));
    /// # }
    /// ```
    pub fn endpoint(&self, i: usize) -> String {
        self.members[i].client_url.clone()
    }

    /// The unix socket URL member `i` also serves clients on, e.g.
    /// "unix:///tmp/etcd-ha-testkit-X/m0/localhost:2379", when the cluster was built with
    /// [`unix_sockets`](super::ClusterBuilder::unix_sockets); else `None`. Panics if `i >= len()`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().unix_sockets(true).start().await.unwrap();
    /// let client = etcd_ha::Client::connect([cluster.unix_endpoint(0).unwrap()], Default::default())
    ///     .await
    ///     .unwrap();
    /// # }
    /// ```
    pub fn unix_endpoint(&self, i: usize) -> Option<String> {
        self.members[i].unix_url.clone()
    }

    /// The client address of member `i`, e.g. 127.0.0.1:40123, for a [`FaultProxy`] in
    /// front of it. Panics if `i >= len()`.
    ///
    /// [`FaultProxy`]: super::FaultProxy
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// use etcd_ha::testkit::{Cluster, FaultProxy};
    /// let cluster = Cluster::start(1).await.unwrap();
    /// let proxy = FaultProxy::start(cluster.client_addr(0)).unwrap();
    /// # drop(proxy);
    /// # }
    /// ```
    pub fn client_addr(&self, i: usize) -> SocketAddr {
        self.members[i].client_addr
    }

    /// The number of members, running or not.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::start(3).await.unwrap();
    /// assert_eq!(cluster.len(), 3);
    /// # }
    /// ```
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false: a cluster has at least one member. (Here for clippy's `len` convention.)
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// assert!(!etcd_ha::testkit::Cluster::start(1).await.unwrap().is_empty());
    /// # }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The etcd name of member `i`: "m0", "m1", .... Panics if `i >= len()`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::start(3).await.unwrap();
    /// assert_eq!(cluster.member_name(2), "m2");
    /// # }
    /// ```
    pub fn member_name(&self, i: usize) -> &str {
        &self.members[i].name
    }

    /// The pid of member `i`, or `None` while it is killed. Panics if `i >= len()`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let mut cluster = etcd_ha::testkit::Cluster::start(1).await.unwrap();
    /// assert!(cluster.pid(0).is_some());
    /// cluster.kill(0);
    /// assert!(cluster.pid(0).is_none());
    /// # }
    /// ```
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].pid()
    }

    /// Whether every member that was running still runs: the first that exited on its own (a
    /// crash, a panic) since it was started is an error with the end of its log. Members
    /// killed or stopped through the testkit are not counted.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::start(3).await.unwrap();
    /// // ... a workload ...
    /// cluster.check_running().expect("no member crashed");
    /// # }
    /// ```
    pub fn check_running(&self) -> Result<(), TestkitError> {
        for member in &self.members {
            if let Some(status) = member.exited() {
                return Err(member.exited_error(status));
            }
        }
        Ok(())
    }

    /// The raft member id of member `i` (Status `header.member_id`); remembered once learnt, so
    /// it is also known while the member is down.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::start(3).await.unwrap();
    /// assert_ne!(cluster.member_id(0).await.unwrap(), cluster.member_id(1).await.unwrap());
    /// # }
    /// ```
    pub async fn member_id(&self, i: usize) -> Result<u64, TestkitError> {
        let member = &self.members[i];
        if let Some(id) = member.id.get() {
            return Ok(*id);
        }
        if !member.is_live() {
            return Err(TestkitError::MemberNotRunning {
                member: member.name.clone(),
            });
        }
        let response = probe::status(member, self.client_tls.as_ref()).await?;
        Ok(response.header.map_or(0, |h| h.member_id))
    }

    /// The index of the leader, once every live (not killed, not frozen) member reports the same
    /// live leader; polls until then or until `timeout`.
    ///
    /// Partitioned members (see [`partition`](Self::partition)) are not asked: cut off from
    /// their peers, they report no leader, or for a while still themselves. During a partition
    /// this is therefore the leader the majority agrees on.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::start(3).await.unwrap();
    /// let leader = cluster.leader(std::time::Duration::from_secs(10)).await.unwrap();
    /// println!("leader: {}", cluster.member_name(leader));
    /// # }
    /// ```
    pub async fn leader(&self, timeout: Duration) -> Result<usize, TestkitError> {
        wait::agreed_leader_of(
            &self.members,
            self.client_tls.as_ref(),
            "an agreed leader",
            timeout,
        )
        .await
    }

    /// Waits until every live member answers Status and all agree on a leader (partitioned
    /// members excepted, as for [`leader`](Self::leader)).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::start(3).await.unwrap();
    /// cluster.stop(1);
    /// cluster.cont(1);
    /// cluster.wait_ready(std::time::Duration::from_secs(10)).await.unwrap();
    /// # }
    /// ```
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), TestkitError> {
        wait::agreed_leader_of(
            &self.members,
            self.client_tls.as_ref(),
            "cluster ready",
            timeout,
        )
        .await
        .map(drop)
    }

    /// SIGKILLs member `i` and reaps it; a no-op if it is already down. Panics if `i >= len()`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let mut cluster = etcd_ha::testkit::Cluster::start(3).await.unwrap();
    /// cluster.kill(0);
    /// # }
    /// ```
    pub fn kill(&mut self, i: usize) {
        self.members[i].kill();
    }

    /// Stops member `i` gracefully with SIGTERM, as an operator or an orchestrator does (a
    /// leader hands leadership over first), and waits until it has exited (SIGKILL after 10 s).
    /// [`restart`](Self::restart) starts it again. Panics if `i >= len()`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let mut cluster = etcd_ha::testkit::Cluster::start(3).await.unwrap();
    /// cluster.terminate(0).await;
    /// cluster.restart(0).await.unwrap();
    /// # }
    /// ```
    pub async fn terminate(&mut self, i: usize) {
        self.members[i].terminate(TERMINATE_GRACE).await;
    }

    /// Freezes member `i` with SIGSTOP: its sockets stay open but it answers nothing, like a
    /// hung machine. Panics if `i >= len()`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::start(3).await.unwrap();
    /// cluster.stop(0);
    /// // ... requests to member 0 now hang ...
    /// cluster.cont(0);
    /// # }
    /// ```
    pub fn stop(&self, i: usize) {
        self.members[i].stop();
    }

    /// Thaws member `i` with SIGCONT after [`stop`](Self::stop). Panics if `i >= len()`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::start(1).await.unwrap();
    /// cluster.stop(0);
    /// cluster.cont(0);
    /// # }
    /// ```
    pub fn cont(&self, i: usize) {
        self.members[i].cont();
    }

    /// Freezes member `i`'s backend filesystem (`fsfreeze`): its apply stalls on the next
    /// backend commit while its raft log goes on, so its applied index falls behind its
    /// committed one as writes go on, and past 5,000 entries it answers `too many requests`.
    /// Reads of the member wait too. Needs a cluster built with
    /// [`freezable_backend(true)`](super::ClusterBuilder::freezable_backend); a no-op if
    /// already frozen. Panics if `i >= len()`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder()
    ///     .members(3)
    ///     .freezable_backend(true)
    ///     .start()
    ///     .await
    ///     .unwrap();
    /// cluster.freeze_backend(2).unwrap();
    /// cluster.thaw_backend(2).unwrap();
    /// # }
    /// ```
    pub fn freeze_backend(&self, i: usize) -> Result<(), TestkitError> {
        self.backend(i)?.freeze()
    }

    /// Thaws member `i`'s backend after [`freeze_backend`](Self::freeze_backend): the member
    /// applies what it fell behind on and serves again. A no-op if not frozen.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().freezable_backend(true).start().await.unwrap();
    /// cluster.freeze_backend(0).unwrap();
    /// cluster.thaw_backend(0).unwrap();
    /// # }
    /// ```
    pub fn thaw_backend(&self, i: usize) -> Result<(), TestkitError> {
        self.backend(i)?.thaw()
    }

    /// Member `i`'s backend filesystem; panics if `i >= len()`.
    fn backend(&self, i: usize) -> Result<&BackendFs, TestkitError> {
        assert!(
            i < self.members.len(),
            "member {i} of {}",
            self.members.len()
        );
        self.backends
            .get(i)
            .ok_or(TestkitError::BackendNotFreezable)
    }

    /// Kills member `i` if it runs, then starts it again with the same data dir, ports and flags.
    ///
    /// Returns once the member serves clients if a quorum of members is live with it; otherwise
    /// (it cannot serve alone) once its process has bound its ports: start the others, then
    /// call [`wait_ready`](Self::wait_ready).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let mut cluster = etcd_ha::testkit::Cluster::start(3).await.unwrap();
    /// cluster.restart(1).await.unwrap();
    /// assert!(cluster.pid(1).is_some());
    /// # }
    /// ```
    pub async fn restart(&mut self, i: usize) -> Result<(), TestkitError> {
        self.members[i].kill();
        self.launch(i).await?;
        // A partitioned member cannot join its cluster, so it cannot serve either.
        let reachable = |m: &Member| m.is_live() && !m.is_partitioned();
        let live = self.members.iter().filter(|m| reachable(m)).count();
        if !self.members[i].is_partitioned() && live > self.members.len() / 2 {
            let tls = self.client_tls.as_ref();
            wait::serving(&self.members[i], tls, self.ready_timeout).await?;
        }
        Ok(())
    }

    /// SIGKILLs every member and reaps them all.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let mut cluster = etcd_ha::testkit::Cluster::start(3).await.unwrap();
    /// cluster.kill_all();
    /// cluster.start_all().await.unwrap();
    /// # }
    /// ```
    pub fn kill_all(&mut self) {
        for member in &self.members {
            member.kill();
        }
    }

    /// Starts every killed member (all at once, as after a power loss) and waits until the
    /// cluster is ready again.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let mut cluster = etcd_ha::testkit::Cluster::start(3).await.unwrap();
    /// cluster.kill_all();
    /// cluster.start_all().await.unwrap();
    /// cluster.leader(std::time::Duration::from_secs(10)).await.unwrap();
    /// # }
    /// ```
    pub async fn start_all(&mut self) -> Result<(), TestkitError> {
        let down: Vec<usize> = (0..self.len()).filter(|&i| self.pid(i).is_none()).collect();
        // Spawn all before waiting on any: a member blocks until it sees a quorum.
        for &i in &down {
            self.members[i].spawn()?;
        }
        for &i in &down {
            if let Err(e) = wait::bound(&self.members[i], self.ready_timeout).await {
                if !is_port_taken(&e) {
                    return Err(e);
                }
                self.launch(i).await?;
            }
        }
        self.wait_ready(self.ready_timeout).await
    }

    /// Cuts member `i` off from its peers, in a cluster built with
    /// [`isolated_network(true)`](ClusterBuilder::isolated_network): its raft traffic silently
    /// vanishes, while clients still reach it at [`endpoint(i)`](Self::endpoint). Errors with
    /// [`TestkitError::NotIsolated`] on other clusters. Panics if `i >= len()`.
    ///
    /// What follows is etcd's: a partitioned leader steps down after an election timeout
    /// (check-quorum), the majority elects a new leader, and the cut-off member still answers
    /// serializable reads but reports "no leader" to requests that require one.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// use std::time::Duration;
    /// let cluster = etcd_ha::testkit::Cluster::builder()
    ///     .members(3)
    ///     .isolated_network(true)
    ///     .start()
    ///     .await
    ///     .unwrap();
    /// let old = cluster.leader(Duration::from_secs(10)).await.unwrap();
    /// cluster.partition(old).unwrap();
    /// let new = cluster.leader(Duration::from_secs(10)).await.unwrap();
    /// assert_ne!(old, new);
    /// cluster.heal(old).unwrap();
    /// cluster.wait_ready(Duration::from_secs(10)).await.unwrap();
    /// # }
    /// ```
    pub fn partition(&self, i: usize) -> Result<(), TestkitError> {
        let member = &self.members[i];
        let network = self.network.as_ref().ok_or(TestkitError::NotIsolated)?;
        if !member.is_partitioned() {
            network.partition(i)?;
            member.partitioned.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Connects member `i` to its peers again after [`partition`](Self::partition); it then
    /// catches up and rejoins (wait with [`wait_ready`](Self::wait_ready)). A no-op if it is
    /// not partitioned. Panics if `i >= len()`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().members(3).isolated_network(true).start().await.unwrap();
    /// cluster.partition(2).unwrap();
    /// cluster.heal(2).unwrap();
    /// # }
    /// ```
    pub fn heal(&self, i: usize) -> Result<(), TestkitError> {
        let member = &self.members[i];
        let network = self.network.as_ref().ok_or(TestkitError::NotIsolated)?;
        if member.is_partitioned() {
            network.heal(i)?;
            member.partitioned.store(false, Ordering::SeqCst);
        }
        Ok(())
    }

    /// True while member `i` is partitioned. Panics if `i >= len()`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().members(3).isolated_network(true).start().await.unwrap();
    /// cluster.partition(1).unwrap();
    /// assert!(cluster.is_partitioned(1));
    /// # }
    /// ```
    pub fn is_partitioned(&self, i: usize) -> bool {
        self.members[i].is_partitioned()
    }

    /// The network namespace member `i` runs in, e.g. "eha-01a2-4711-m0", for a cluster built
    /// with `isolated_network(true)`; `None` otherwise. Handy with `ip netns exec`.
    /// Panics if `i >= len()`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().isolated_network(true).start().await.unwrap();
    /// println!("ip netns exec {} ss -tn", cluster.netns(0).unwrap());
    /// # }
    /// ```
    pub fn netns(&self, i: usize) -> Option<String> {
        assert!(
            i < self.members.len(),
            "member {i} of {}",
            self.members.len()
        );
        self.network.as_ref().map(|n| n.member_ns(i))
    }

    /// The certificate files, for a cluster built with `tls(true)`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().tls(true).start().await.unwrap();
    /// println!("CA at {}", cluster.tls().unwrap().ca.display());
    /// # }
    /// ```
    pub fn tls(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// The root user and password, for a cluster built with `auth(..)`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().auth("root", "pw").start().await.unwrap();
    /// assert_eq!(cluster.auth(), Some(("root", "pw")));
    /// # }
    /// ```
    pub fn auth(&self) -> Option<(&str, &str)> {
        self.auth.as_ref().map(|(u, p)| (u.as_str(), p.as_str()))
    }

    /// Member `i`'s etcd `--data-dir`. Panics if `i >= len()`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::start(1).await.unwrap();
    /// assert!(cluster.data_dir(0).join("member").exists());
    /// # }
    /// ```
    pub fn data_dir(&self, i: usize) -> &Path {
        &self.members[i].data_dir
    }

    /// Member `i`'s log file (its stdout and stderr, across restarts). Panics if `i >= len()`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::start(1).await.unwrap();
    /// println!("{}", std::fs::read_to_string(cluster.log_path(0)).unwrap());
    /// # }
    /// ```
    pub fn log_path(&self, i: usize) -> &Path {
        &self.members[i].log
    }

    /// The cluster's temporary directory: member dirs, logs and certificates live under it.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::start(1).await.unwrap();
    /// let dir = cluster.dir().to_path_buf();
    /// drop(cluster);
    /// assert!(!dir.exists());
    /// # }
    /// ```
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The etcd version the members run, e.g. "3.5.1" (from `etcd --version`).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::start(1).await.unwrap();
    /// if cluster.etcd_version().starts_with("3.4.") { /* no hashed passwords, ... */ }
    /// # }
    /// ```
    pub fn etcd_version(&self) -> &str {
        &self.version
    }

    /// Spawns member `i` and waits until it has bound its ports, retrying if a port was taken.
    async fn launch(&self, i: usize) -> Result<(), TestkitError> {
        let member = &self.members[i];
        let mut attempt = 1;
        loop {
            member.spawn()?;
            match wait::bound(member, self.ready_timeout).await {
                Err(e) if is_port_taken(&e) && attempt < BIND_ATTEMPTS => {
                    attempt += 1;
                    tokio::time::sleep(BIND_RETRY_PAUSE).await;
                }
                result => return result,
            }
        }
    }
}

/// How long a member may take to stop after SIGTERM before it is killed.
const TERMINATE_GRACE: Duration = Duration::from_secs(10);

/// True if a member exited because one of its ports was in use.
pub(crate) fn is_port_taken(error: &TestkitError) -> bool {
    match error {
        TestkitError::MemberExited { log_tail, .. } => log_tail.contains("address already in use"),
        _ => false,
    }
}

impl Drop for Cluster {
    /// SIGKILL and reap every member before `dir` is removed and before the network (if any)
    /// is deleted; never panics.
    fn drop(&mut self) {
        // A member blocked on a frozen filesystem cannot die until it is thawed.
        for backend in &self.backends {
            let _ = backend.thaw();
        }
        self.kill_all();
    }
}

/// Where the members of a cluster rooted at `dir` keep their files: `<dir>/mN/`.
pub(crate) fn member_dir(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}
