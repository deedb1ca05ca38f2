//! Options for a test cluster, and the start sequence: binary, directories, ports, flags, boot, auth.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tonic::transport::ClientTlsConfig;

use super::backend_fs::BackendFs;
use super::cluster::{is_port_taken, member_dir};
use super::member::Member;
use super::netns::{self, Network};
use super::tls::DEFAULT_CLIENT_CN;

/// A member's unix socket (`ClusterBuilder::unix_sockets`), as etcd 3.5 wants it named: host
/// and port, the file of that name in the member's directory.
const UNIX_SOCKET_NAME: &str = "localhost:2379";
use super::{Cluster, TestkitError, TlsFiles, auth, binary, ports, wait};

/// How many times a cluster start is tried with fresh ports when a member could not bind one
/// (another process took a port between our probe and etcd's bind).
const START_ATTEMPTS: usize = 3;

/// Default time a start or restart may take. A 3-member cluster is usually ready in 1–2 s; the
/// margin covers a loaded CI machine and etcd 3.4's slower first election.
const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Options for [`Cluster`]; defaults: 1 member, plain http, no auth, etcd's own timings.
///
/// # Example
///
/// ```no_run
/// use etcd_ha::testkit::Cluster;
///
/// # async fn demo() {
/// let cluster = Cluster::builder()
///     .members(3)
///     .heartbeat_ms(50)
///     .election_ms(500)
///     .arg("--quota-backend-bytes=1073741824")
///     .start()
///     .await
///     .unwrap();
/// # drop(cluster);
/// # }
/// ```
#[derive(Clone)]
pub struct ClusterBuilder {
    /// Number of members (at least 1).
    members: usize,
    /// Serve clients over https with generated certificates.
    tls: bool,
    /// Require client certificates (implies `tls`).
    client_cert_auth: bool,
    /// CN of the generated client certificate.
    client_cert_cn: String,
    /// Root user and password to create before enabling auth.
    auth: Option<(String, String)>,
    /// `--heartbeat-interval` in ms; `None` = etcd's default (100).
    heartbeat_ms: Option<u64>,
    /// `--election-timeout` in ms; `None` = etcd's default (1000).
    election_ms: Option<u64>,
    /// Extra flags appended to every member's command line.
    extra_args: Vec<OsString>,
    /// The members' watch progress notify interval, if not etcd's default (10 min).
    progress_notify: Option<std::time::Duration>,
    /// How long the start (and later restarts) may take.
    ready_timeout: Duration,
    /// Run each member in its own network namespace, so it can be partitioned.
    isolated_network: bool,
    /// Also serve clients on a unix socket in each member's directory (not advertised).
    unix_sockets: bool,
    /// Give each member's backend a filesystem of its own that tests can freeze.
    freezable_backend: bool,
    /// Where the cluster's directory is made; `None` = the system's temp dir.
    parent_dir: Option<PathBuf>,
    /// This etcd binary instead of the one [`etcd_binary`](super::etcd_binary) finds.
    etcd_bin: Option<PathBuf>,
    /// Or etcd of this version (see [`etcd_of_version`](super::etcd_of_version)).
    etcd_version: Option<String>,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        ClusterBuilder {
            members: 1,
            tls: false,
            client_cert_auth: false,
            client_cert_cn: DEFAULT_CLIENT_CN.to_string(),
            auth: None,
            heartbeat_ms: None,
            election_ms: None,
            extra_args: Vec::new(),
            progress_notify: None,
            ready_timeout: DEFAULT_READY_TIMEOUT,
            isolated_network: false,
            unix_sockets: false,
            freezable_backend: false,
            parent_dir: None,
            etcd_bin: None,
            etcd_version: None,
        }
    }
}

impl std::fmt::Debug for ClusterBuilder {
    // The user only: the password stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterBuilder")
            .field("members", &self.members)
            .field("tls", &self.tls)
            .field("client_cert_auth", &self.client_cert_auth)
            .field("client_cert_cn", &self.client_cert_cn)
            .field("user", &self.auth.as_ref().map(|(user, _)| user))
            .field("heartbeat_ms", &self.heartbeat_ms)
            .field("election_ms", &self.election_ms)
            .field("extra_args", &self.extra_args)
            .field("ready_timeout", &self.ready_timeout)
            .field("isolated_network", &self.isolated_network)
            .field("unix_sockets", &self.unix_sockets)
            .field("freezable_backend", &self.freezable_backend)
            .field("parent_dir", &self.parent_dir)
            .finish()
    }
}

impl ClusterBuilder {
    /// Number of members; 1 or 3 are the usual choices. Default 1.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().members(3).start().await.unwrap();
    /// # drop(cluster);
    /// # }
    /// ```
    pub fn members(mut self, members: usize) -> Self {
        self.members = members;
        self
    }

    /// Serve clients over https, with a generated CA and a server certificate for 127.0.0.1 and
    /// localhost. Peers keep talking plain http. Default false.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().tls(true).start().await.unwrap();
    /// assert!(cluster.tls().is_some());
    /// # }
    /// ```
    pub fn tls(mut self, tls: bool) -> Self {
        self.tls = tls;
        self
    }

    /// Require a client certificate signed by the cluster's CA (`--client-cert-auth`); turns on
    /// TLS. Default false.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().client_cert_auth(true).start().await.unwrap();
    /// assert!(cluster.tls().is_some());
    /// # }
    /// ```
    pub fn client_cert_auth(mut self, on: bool) -> Self {
        self.client_cert_auth = on;
        self
    }

    /// Common name of the generated client certificate. Default "etcd-ha-testkit-client".
    ///
    /// With client-cert auth and auth enabled, etcd takes this CN as the user of requests
    /// without a token: set it to "root" to test certificate-based authentication.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder()
    ///     .client_cert_auth(true)
    ///     .client_cert_cn("root")
    ///     .auth("root", "rootpw")
    ///     .start()
    ///     .await
    ///     .unwrap();
    /// # drop(cluster);
    /// # }
    /// ```
    pub fn client_cert_cn(mut self, cn: impl Into<String>) -> Self {
        self.client_cert_cn = cn.into();
        self
    }

    /// Enable etcd auth once the cluster is up: create `user` (normally "root", which etcd
    /// requires) with `password`, grant it the root role, then AuthEnable. Default off.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().auth("root", "rootpw").start().await.unwrap();
    /// assert_eq!(cluster.auth(), Some(("root", "rootpw")));
    /// # }
    /// ```
    pub fn auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.auth = Some((user.into(), password.into()));
        self
    }

    /// Raft heartbeat interval in milliseconds (`--heartbeat-interval`). Default: etcd's, 100.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().heartbeat_ms(50).election_ms(500).start().await.unwrap();
    /// # drop(cluster);
    /// # }
    /// ```
    pub fn heartbeat_ms(mut self, ms: u64) -> Self {
        self.heartbeat_ms = Some(ms);
        self
    }

    /// Raft election timeout in milliseconds (`--election-timeout`), at least 5x the heartbeat.
    /// Default: etcd's, 1000.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().election_ms(500).heartbeat_ms(50).start().await.unwrap();
    /// # drop(cluster);
    /// # }
    /// ```
    pub fn election_ms(mut self, ms: u64) -> Self {
        self.election_ms = Some(ms);
        self
    }

    /// One extra flag for every member, e.g. `"--auto-compaction-retention=1"`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().arg("--max-txn-ops=256").start().await.unwrap();
    /// # drop(cluster);
    /// # }
    /// ```
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// How often members send a progress notification to watches that asked for them (etcd's
    /// default is 10 minutes), under the flag the server's version knows:
    /// `--experimental-watch-progress-notify-interval` before 3.6,
    /// `--watch-progress-notify-interval` from 3.6 (3.7 knows only that one).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder()
    ///     .watch_progress_notify_interval(std::time::Duration::from_secs(1))
    ///     .start()
    ///     .await
    ///     .unwrap();
    /// # drop(cluster);
    /// # }
    /// ```
    pub fn watch_progress_notify_interval(mut self, interval: std::time::Duration) -> Self {
        self.progress_notify = Some(interval);
        self
    }

    /// How long the start, and later restarts, may take. Default 30 s.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// use std::time::Duration;
    /// let cluster = etcd_ha::testkit::Cluster::builder().ready_timeout(Duration::from_secs(60)).start().await.unwrap();
    /// # drop(cluster);
    /// # }
    /// ```
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// Runs each member in its own Linux network namespace, so that
    /// [`Cluster::partition`] can cut it off from its peers while clients still reach it.
    /// Default false.
    ///
    /// Member `i` then serves clients on `http(s)://10.X.Y.(4i+2):2379` (X, Y chosen per
    /// cluster, see [`Cluster::endpoints`]) and its peers on port 2380 of its own address.
    /// Needs root and `ip` (iproute2); the start fails with
    /// [`TestkitError::NetnsNeedsRoot`] or [`TestkitError::IpMissing`] otherwise, never skips.
    /// At most 32 members. Dropping the cluster deletes the namespaces and links; the start
    /// first deletes those left behind by test processes that were killed outright.
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
    /// let leader = cluster.leader(Duration::from_secs(10)).await.unwrap();
    /// cluster.partition(leader).unwrap();
    /// let next = cluster.leader(Duration::from_secs(10)).await.unwrap();
    /// assert_ne!(leader, next);
    /// cluster.heal(leader).unwrap();
    /// # }
    /// ```
    pub fn isolated_network(mut self, on: bool) -> Self {
        self.isolated_network = on;
        self
    }

    /// Also serve clients on a unix socket in each member's directory, next to the TCP client
    /// URL (see [`Cluster::unix_endpoint`](super::Cluster::unix_endpoint)); etcd then runs in
    /// that directory. Members keep advertising only their TCP URL: etcd names a unix socket
    /// `unix://host:port` relative to its own working directory, which means nothing to a
    /// client elsewhere. Default false.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().unix_sockets(true).start().await.unwrap();
    /// assert!(cluster.unix_endpoint(0).unwrap().starts_with("unix:///"));
    /// # }
    /// ```
    pub fn unix_sockets(mut self, on: bool) -> Self {
        self.unix_sockets = on;
        self
    }

    /// Give each member's backend (its bbolt database) a filesystem of its own, with the WAL
    /// outside it, so that [`Cluster::freeze_backend`](super::Cluster::freeze_backend) can
    /// stall the member's apply while its raft log goes on: the apply lag of a slow disk,
    /// which ends in `too many requests`. A sparse ext4 image per member, loop-mounted in the
    /// cluster's directory; needs root, `mkfs.ext4` and `fsfreeze`. Default false.
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
    /// cluster.freeze_backend(1).unwrap();
    /// // ... writes go on; member 1 falls behind, then refuses with "too many requests" ...
    /// cluster.thaw_backend(1).unwrap();
    /// # }
    /// ```
    pub fn freezable_backend(mut self, on: bool) -> Self {
        self.freezable_backend = on;
        self
    }

    /// Makes the cluster's directory (member data, logs, certificates) under `parent` instead
    /// of the system's temp dir, e.g. a tmpfs such as `/dev/shm`. Members of one machine share
    /// its disk: a member that starts writes its WAL and database while the others wait on
    /// their fsyncs, which stalls every client of the cluster for hundreds of milliseconds on a
    /// slow virtual disk. On a tmpfs nothing is synced, so what remains is the members' own
    /// work. The directory is removed with the cluster either way.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().data_dir_in("/dev/shm").start().await.unwrap();
    /// # drop(cluster);
    /// # }
    /// ```
    pub fn data_dir_in(mut self, parent: impl Into<PathBuf>) -> Self {
        self.parent_dir = Some(parent.into());
        self
    }

    /// Run this etcd binary (a test that needs a server of a given version, built by
    /// `scripts/etcd-go.sh`), whatever `ETCD_BIN` says.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder()
    ///     .etcd_bin(".etcd-cache/etcd-v3.5.35/etcd")
    ///     .start()
    ///     .await
    ///     .unwrap();
    /// assert_eq!(cluster.etcd_version(), "3.5.35");
    /// # }
    /// ```
    pub fn etcd_bin(mut self, path: impl Into<PathBuf>) -> Self {
        self.etcd_bin = Some(path.into());
        self
    }

    /// Run etcd of this version, obtained as [`etcd_of_version`](super::etcd_of_version) does
    /// (cached; built from its Go modules the first time), whatever `ETCD_BIN` says.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder()
    ///     .etcd_version("3.6.16")
    ///     .start()
    ///     .await
    ///     .unwrap();
    /// assert_eq!(cluster.etcd_version(), "3.6.16");
    /// # }
    /// ```
    pub fn etcd_version(mut self, version: impl Into<String>) -> Self {
        self.etcd_version = Some(version.into());
        self
    }

    /// Finds (or provisions) etcd, starts the members and waits until they agree on a leader,
    /// then enables auth if asked.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let cluster = etcd_ha::testkit::Cluster::builder().members(3).start().await.unwrap();
    /// # drop(cluster);
    /// # }
    /// ```
    pub async fn start(self) -> Result<Cluster, TestkitError> {
        if self.members == 0 {
            return Err(TestkitError::NoMembers);
        }
        // Finding etcd may mean downloading it: keep that off the async worker threads.
        let pinned = self.etcd_bin.clone();
        let of_version = self.etcd_version.clone();
        let (binary, version) = tokio::task::spawn_blocking(move || {
            let binary = match (pinned, of_version) {
                (Some(path), _) if path.is_file() => path,
                (Some(path), _) => return Err(TestkitError::EtcdBinMissing { path }),
                (None, Some(version)) => binary::etcd_of_version(&version)?,
                (None, None) => binary::etcd_binary()?,
            };
            let version = binary::etcd_version(&binary)?;
            Ok::<_, TestkitError>((binary, version))
        })
        .await
        .unwrap_or_else(|join| std::panic::resume_unwind(join.into_panic()))?;

        // Declared before the members so that it is dropped after them on every early return:
        // a namespace only goes away once its processes are dead.
        let network = if self.isolated_network {
            let members = self.members;
            let network = tokio::task::spawn_blocking(move || Network::create(members))
                .await
                .unwrap_or_else(|join| std::panic::resume_unwind(join.into_panic()))?;
            Some(network)
        } else {
            None
        };
        let member_ips: Vec<IpAddr> = network
            .iter()
            .flat_map(|n| (0..self.members).map(|i| IpAddr::V4(n.client_ip(i))))
            .collect();

        let parent = self.parent_dir.clone().unwrap_or_else(std::env::temp_dir);
        let dir = tempfile::Builder::new()
            .prefix("etcd-ha-testkit-")
            .tempdir_in(&parent)
            .map_err(|e| TestkitError::io("create temp dir in", parent.clone(), e))?;
        let tls = if self.tls || self.client_cert_auth {
            Some(TlsFiles::generate(
                dir.path(),
                &self.client_cert_cn,
                &member_ips,
            )?)
        } else {
            None
        };
        let client_tls = tls.as_ref().map(TlsFiles::client_tls_config).transpose()?;
        let backends = if self.freezable_backend {
            // mkfs and mount: off the async worker threads, like the namespaces.
            let (members, path) = (self.members, dir.path().to_path_buf());
            tokio::task::spawn_blocking(move || {
                (0..members)
                    .map(|i| BackendFs::create(&path, &format!("m{i}")))
                    .collect::<Result<Vec<_>, _>>()
            })
            .await
            .unwrap_or_else(|join| std::panic::resume_unwind(join.into_panic()))?
        } else {
            Vec::new()
        };

        let mut attempt = 1;
        let members = loop {
            let members = self.layout(
                dir.path(),
                (&binary, &version),
                tls.as_ref(),
                network.as_ref(),
                &backends,
            )?;
            match boot(&members, client_tls.as_ref(), self.ready_timeout).await {
                Ok(()) => break members,
                Err(e) if is_port_taken(&e) && attempt < START_ATTEMPTS => attempt += 1,
                Err(e) => return Err(e),
            }
        };
        if let Some((user, password)) = &self.auth {
            let tls = client_tls.as_ref();
            auth::enable(&members, tls, user, password, self.ready_timeout).await?;
        }
        Ok(Cluster {
            members,
            network,
            version,
            tls,
            client_tls,
            auth: self.auth,
            ready_timeout: self.ready_timeout,
            backends,
            dir,
        })
    }

    /// Fresh member directories, ports and command lines for one start attempt.
    fn layout(
        &self,
        dir: &Path,
        (binary, version): (&Path, &str),
        tls: Option<&TlsFiles>,
        network: Option<&Network>,
        backends: &[BackendFs],
    ) -> Result<Vec<Member>, TestkitError> {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let names: Vec<String> = (0..self.members).map(|i| format!("m{i}")).collect();
        let mut client_addrs = Vec::new();
        let mut peer_urls = Vec::new();
        for i in 0..names.len() {
            match network {
                // Every member has addresses of its own: fixed ports cannot collide.
                Some(network) => {
                    let client_ip = network.client_ip(i);
                    client_addrs.push(SocketAddr::from((client_ip, netns::CLIENT_PORT)));
                    let peer_ip = network.peer_ip(i);
                    peer_urls.push(format!("http://{peer_ip}:{}", netns::PEER_PORT));
                }
                None => {
                    let port = ports::free_port()?;
                    client_addrs.push(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
                    peer_urls.push(format!("http://127.0.0.1:{}", ports::free_port()?));
                }
            }
        }
        let initial_cluster = names
            .iter()
            .zip(&peer_urls)
            .map(|(name, url)| format!("{name}={url}"))
            .collect::<Vec<_>>()
            .join(",");
        let token = cluster_token();

        let mut members = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let member_dir = member_dir(dir, name);
            // A previous attempt may have left a half-initialised data dir behind.
            if member_dir.exists() {
                std::fs::remove_dir_all(&member_dir)
                    .map_err(|e| TestkitError::io("remove member dir", &member_dir, e))?;
            }
            std::fs::create_dir_all(&member_dir)
                .map_err(|e| TestkitError::io("create member dir", &member_dir, e))?;
            let client_url = format!("{scheme}://{}", client_addrs[i]);
            let data_dir = match backends.get(i) {
                Some(backend) => {
                    let data_dir = backend.data_dir();
                    if data_dir.exists() {
                        std::fs::remove_dir_all(&data_dir)
                            .map_err(|e| TestkitError::io("remove data dir", &data_dir, e))?;
                    }
                    data_dir
                }
                None => member_dir.join("data"),
            };
            let mut args: Vec<OsString> = Vec::new();
            let mut flag = |name: &str, value: OsString| {
                args.push(format!("--{name}").into());
                args.push(value);
            };
            flag("name", name.into());
            flag("data-dir", data_dir.into());
            if !backends.is_empty() {
                // The raft log off the freezable filesystem: raft goes on while apply stalls.
                flag("wal-dir", member_dir.join("wal").into());
            }
            // etcd 3.5 wants every listen URL as scheme://host:port and listens on a unix URL's
            // host and path joined: this socket is the file "localhost:2379" in etcd's working
            // directory, the member's directory (Member::spawn). Clients get its absolute path.
            let unix_url = self
                .unix_sockets
                .then(|| format!("unix://{}", member_dir.join(UNIX_SOCKET_NAME).display()));
            let listen = match &unix_url {
                Some(_) => format!("{client_url},unix://{UNIX_SOCKET_NAME}"),
                None => client_url.clone(),
            };
            flag("listen-client-urls", listen.into());
            flag("advertise-client-urls", client_url.clone().into());
            flag("listen-peer-urls", peer_urls[i].clone().into());
            flag("initial-advertise-peer-urls", peer_urls[i].clone().into());
            flag("initial-cluster", initial_cluster.clone().into());
            flag("initial-cluster-state", "new".into());
            flag("initial-cluster-token", token.clone().into());
            // zap is 3.5's default; on 3.4 it replaces capnslog, which warns about its own
            // deprecation on every start. Errors only: the log is for post-mortems.
            flag("logger", "zap".into());
            flag("log-level", "error".into());
            if let Some(ms) = self.heartbeat_ms {
                flag("heartbeat-interval", ms.to_string().into());
            }
            if let Some(ms) = self.election_ms {
                flag("election-timeout", ms.to_string().into());
            }
            if let Some(tls) = tls {
                flag("cert-file", tls.server_cert.clone().into());
                flag("key-file", tls.server_key.clone().into());
                if self.client_cert_auth {
                    flag("trusted-ca-file", tls.ca.clone().into());
                    args.push("--client-cert-auth".into());
                }
            }
            // Pre-vote is 3.5's default and off in 3.4: without it, a member that rejoins after
            // a partition (its term raised by its lone campaigns) deposes the working leader, a
            // leaderless second or two that says nothing about the client. Same on both.
            args.push("--pre-vote=true".into());
            if let Some(interval) = self.progress_notify {
                let renamed = version
                    .parse::<crate::ServerVersion>()
                    .is_ok_and(|v| v >= crate::ServerVersion::new(3, 6, 0));
                let name = if renamed {
                    "--watch-progress-notify-interval"
                } else {
                    "--experimental-watch-progress-notify-interval"
                };
                args.push(format!("{name}={}ms", interval.as_millis()).into());
            }
            // The caller's own flags last: they win over ours.
            args.extend(self.extra_args.iter().cloned());
            let mut binary = PathBuf::from(binary);
            if unix_url.is_some() {
                // etcd runs in the member's directory: a relative ETCD_BIN must still resolve.
                binary = std::fs::canonicalize(&binary).unwrap_or(binary);
            }
            let mut member = Member::new(
                name.clone(),
                &member_dir,
                binary,
                client_url,
                client_addrs[i],
                network.map(|n| n.member_ns_path(i)),
                args,
            );
            member.unix_url = unix_url;
            members.push(member);
        }
        Ok(members)
    }
}

/// Starts every member, then waits for the cluster to agree on a leader. On failure the members
/// are killed when the caller drops them.
async fn boot(
    members: &[Member],
    tls: Option<&ClientTlsConfig>,
    limit: Duration,
) -> Result<(), TestkitError> {
    for member in members {
        member.spawn()?;
    }
    wait::agreed_leader_of(members, tls, "cluster ready", limit)
        .await
        .map(drop)
}

/// A token unique to each cluster start, so members of different test clusters can never
/// mistake each other for peers (etcd refuses peers whose token differs).
fn cluster_token() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("etcd-ha-testkit-{}-{n}", std::process::id())
}
