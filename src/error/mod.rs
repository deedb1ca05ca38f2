//! The one public error type: its variants here, where a `tonic::Status` becomes one in `status.rs`, and what each means for the failed request in `class.rs`.
//!
//! etcd reports its own failures as gRPC statuses whose message is one of a fixed set of strings
//! (`etcdserver: no leader`, `etcdserver: mvcc: required revision has been compacted`, ...). We match
//! those strings once, in `status.rs`, so that callers match on variants instead of text; and
//! each variant's [`ErrorClass`] (never sent, refused up front, login, interrupted, ambiguous,
//! definite, fatal) is decided once, in `class.rs`, for every consumer.

use std::path::PathBuf;
use std::time::Duration;

mod class;
mod status;

pub use class::ErrorClass;
pub(crate) use status::{is_unknown_method, never_sent};

/// A `Result` whose error is [`Error`].
///
/// ```
/// async fn read(client: &etcd_ha::Client) -> etcd_ha::Result<Option<Vec<u8>>> {
///     let got = client.kv().get("k", Default::default()).await?;
///     Ok(got.kvs.into_iter().next().map(|kv| kv.value))
/// }
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong talking to etcd.
///
/// etcd's own failures are variants of their own; [`Error::is_retryable`] says whether the same
/// request may succeed if it is sent again (possibly to another member).
///
/// ```
/// use etcd_ha::Error;
///
/// fn describe(err: &Error) -> &'static str {
///     match err {
///         Error::Compacted { .. } => "reload the state and watch again",
///         Error::NoLeader | Error::LeaderChanged => "the cluster is electing; try again",
///         e if e.is_retryable() => "transient",
///         _ => "permanent",
///     }
/// }
/// assert_eq!(describe(&Error::NoLeader), "the cluster is electing; try again");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The endpoint list given to [`Client::connect`](crate::Client::connect) was empty.
    #[error("no endpoints were given")]
    NoEndpoints,

    /// An endpoint is not a usable URL (`http://host:port`, `https://host:port`, `host:port` or
    /// `unix://path`), or a `unix://` endpoint names no socket.
    #[error("invalid endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint {
        /// The endpoint as given, less any `user:password@` and query (never shown).
        endpoint: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// Credentials were given with an `http://` endpoint: the password and the token would go
    /// there in plain text. Use `https://` endpoints, or opt in with
    /// [`Options::with_plaintext_credentials`](crate::Options::with_plaintext_credentials).
    #[error("credentials refused in plain text to {endpoint} (use https://, or allow it)")]
    PlaintextCredentials {
        /// The first `http://` endpoint.
        endpoint: String,
    },

    /// A member list names more members than a client follows (see member sync): kept out,
    /// the endpoint set stays as it was.
    #[error("a member list of {count} members, more than the {limit} a client follows")]
    TooManyMembers {
        /// Members the list named.
        count: usize,
        /// The most a client takes.
        limit: usize,
    },

    /// An option is out of its valid range or contradicts another option.
    #[error("invalid option {option}: {reason}")]
    InvalidOptions {
        /// The option's name, as its builder method is called.
        option: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A TLS file (CA, certificate or key) could not be read or parsed.
    #[error("cannot use TLS file {}: {source}", path.display())]
    TlsFile {
        /// The file that failed.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },

    /// The TLS configuration was refused by the TLS library (for example a key it cannot use).
    #[error("invalid TLS configuration: {0}")]
    TlsConfig(#[source] tonic::transport::Error),

    /// An `https://` endpoint or [`TlsOptions`](crate::TlsOptions) were given to a client built
    /// without the `tls` feature (on by default).
    #[error(
        "TLS support is not compiled in: build etcd-ha with its \"tls\" feature to use https:// endpoints or TlsOptions"
    )]
    TlsNotCompiled,

    /// DNS SRV discovery found no endpoint: the name has no SRV record (`NXDOMAIN` or an empty
    /// answer), or every record points at port 0 or the root name.
    #[error("no SRV records for {name}")]
    SrvNotFound {
        /// The SRV name queried, e.g. `_etcd-client._tcp.example.com`.
        name: String,
    },

    /// DNS SRV discovery failed: the resolver could not be set up or the query failed (no
    /// name server answered, a malformed answer).
    #[error("DNS SRV lookup of {name} failed: {source}")]
    Dns {
        /// The SRV name queried (or the domain, when the resolver could not be set up).
        name: String,
        /// The resolver's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// No endpoint could be reached before the connect timeout.
    #[error("could not connect to any of {endpoints:?} within {timeout:?}: {source}")]
    Connect {
        /// The endpoints tried.
        endpoints: Vec<String>,
        /// The connect timeout that ran out or bounded the attempts.
        timeout: Duration,
        /// The last failure seen.
        #[source]
        source: Box<Error>,
    },

    /// The transport failed: connection refused or reset, TLS handshake failure, HTTP/2 error.
    #[error("transport error talking to {endpoint}: {source}")]
    Transport {
        /// The endpoint the request went to.
        endpoint: String,
        /// The underlying status, whose source chain holds the IO or TLS error.
        #[source]
        source: tonic::Status,
    },

    /// An endpoint answered for another etcd cluster than the one this client first reached
    /// (its `ResponseHeader.cluster_id` differs): a mistyped endpoint, or an address that a
    /// member of another cluster now holds. The endpoint is dropped and never used for a call.
    #[error(
        "endpoint {endpoint} belongs to cluster {found:x}, \
         not to this client's cluster {expected:x}"
    )]
    ClusterIdMismatch {
        /// The endpoint that answered.
        endpoint: String,
        /// The cluster id this client first saw.
        expected: u64,
        /// The cluster id the endpoint answered with.
        found: u64,
    },

    /// The request did not complete within its timeout (the client's or the server's).
    #[error("request timed out")]
    Timeout,

    /// A member answered that it could not serve the request now (`Unavailable`), for instance
    /// `etcdserver: request timed out` or `etcdserver: unhealthy cluster`.
    #[error("etcd unavailable: {0}")]
    Unavailable(#[source] tonic::Status),

    /// `etcdserver: mvcc: required revision has been compacted`.
    #[error("required revision has been compacted (compact revision {compact_revision:?})")]
    Compacted {
        /// The compaction revision, when the server said it (a watch does; a range does not).
        compact_revision: Option<i64>,
    },

    /// `etcdserver: mvcc: required revision is a future revision`.
    #[error("required revision is a future revision")]
    FutureRevision,

    /// `etcdserver: requested lease not found`: the lease expired or was revoked.
    #[error("requested lease not found")]
    LeaseNotFound,

    /// `etcdserver: lease already exists` (a grant with an explicit id that is taken).
    #[error("lease already exists")]
    LeaseExists,

    /// A lease TTL above etcd's maximum ([`MAX_LEASE_TTL`](crate::MAX_LEASE_TTL) seconds), refused
    /// by the client before it is sent, or by etcd (`etcdserver: too large lease TTL`).
    #[error("lease TTL is too large (at most {max_secs} s)")]
    LeaseTtlTooLarge {
        /// The largest TTL etcd grants, in seconds.
        max_secs: i64,
    },

    /// `etcdserver: no leader`: the member has no raft leader (partitioned or electing).
    #[error("etcd member has no leader")]
    NoLeader,

    /// `etcdserver: leader changed`: the request raced a leader election.
    #[error("etcd leader changed")]
    LeaderChanged,

    /// `raft proposal dropped`: the leader refused the proposal before it entered the raft log
    /// (raft's `ErrProposalDropped`, e.g. while leadership is being transferred), so the write
    /// was certainly not applied and is safe to send again.
    #[error("etcd dropped the proposal (leadership moving); it was not applied")]
    ProposalDropped,

    /// `etcdserver: not leader`: a request that only the leader serves reached a follower.
    #[error("etcd member is not the leader")]
    NotLeader,

    /// The request is larger than the server (or this client) accepts.
    #[error("request is too large")]
    RequestTooLarge,

    /// `etcdserver: too many requests`: the member is overloaded (applied index far behind).
    #[error("too many requests")]
    TooManyRequests,

    /// `etcdserver: permission denied`: the user's roles do not allow this key or operation.
    #[error("permission denied")]
    PermissionDenied,

    /// `etcdserver: authentication failed, invalid user ID or password`.
    #[error("authentication failed: invalid user name or password")]
    AuthFailed,

    /// `etcdserver: invalid auth token` (or the auth store moved on): the token must be renewed.
    /// The client renews it by itself when it holds credentials.
    #[error("invalid or expired auth token")]
    InvalidAuthToken,

    /// `etcdserver: user name is empty`: auth is enabled and the request carried no token.
    #[error("authentication required: auth is enabled but no credentials were given")]
    AuthRequired,

    /// `etcdserver: authentication is not enabled`.
    #[error("authentication is not enabled")]
    AuthNotEnabled,

    /// `etcdserver: mvcc: database space exceeded`: the NOSPACE alarm is raised; writes are
    /// refused until space is freed (compact, defragment) and the alarm is deactivated.
    ///
    /// A write that fails with it **may have been applied** ([`may_have_applied`] is true):
    /// etcd checks the quota before proposing (refused) and again when it applies the entry,
    /// where the write that fills the backend is applied and then answered with this error.
    ///
    /// [`may_have_applied`]: Error::may_have_applied
    #[error("database space exceeded (NOSPACE alarm); the write may have been applied")]
    NoSpace,

    /// The answer was larger than a limit on its way back: the server's or a proxy's send
    /// limit (`grpc: trying to send message larger than max`), or this client's receive limit.
    /// The request was served first, so a write may have been applied.
    #[error("the answer is larger than a limit on its way back; the request may have been applied")]
    ResponseTooLarge,

    /// A learner cannot be promoted before it has caught up with the leader.
    #[error("learner is not in sync with the leader yet")]
    LearnerNotReady,

    /// `election: no leader`: the (server-side) election has no leader. Unlike
    /// [`Error::NoLeader`], this is about the election, not about raft.
    #[error("the election has no leader")]
    ElectionNoLeader,

    /// `election: not leader`: the leader key given does not lead the election (any more).
    #[error("not the leader of the election")]
    ElectionNotLeader,

    /// A member id named in the request is not in the cluster.
    #[error("member not found")]
    MemberNotFound,

    /// The request is malformed by etcd's rules (empty key, duplicate key in a txn, too many
    /// operations, ...).
    #[error("invalid request: {0}")]
    InvalidRequest(#[source] tonic::Status),

    /// A watch was canceled by the server; `reason` is the server's cancel reason.
    #[error("watch {watch_id} canceled by the server: {reason}")]
    WatchCanceled {
        /// The watch id.
        watch_id: i64,
        /// The server's `cancel_reason`.
        reason: String,
    },

    /// A managed watch's response in fragments, or its reload after a compaction
    /// ([`with_reload_on_compaction`](crate::WatchOptions::with_reload_on_compaction)), came to
    /// more than the client accepts for one response
    /// ([`Options::with_max_response_bytes`](crate::Options::with_max_response_bytes)). That
    /// watch ends; the others on the same stream go on.
    #[error("watch response or reload larger than {limit} bytes")]
    WatchTooLarge {
        /// The cap, in bytes.
        limit: usize,
    },

    /// A write guarded by a [`Fence`](crate::concurrency::Fence) did not happen because the
    /// holder's key no longer exists with its create revision: the leadership or lock it
    /// guards was lost (for example [`Leader::proclaim`](crate::concurrency::Leader::proclaim)
    /// after the session expired).
    #[error(
        "no longer the holder of {}: its key was deleted or re-created",
        String::from_utf8_lossy(key)
    )]
    Fenced {
        /// The holder's key.
        key: Vec<u8>,
    },

    /// [`Leadership::campaign`](crate::concurrency::Leadership::campaign) refused: this
    /// candidate already won `max` campaigns within `window` (it keeps winning and losing the
    /// leadership), so it stays out until `retry_after` has passed.
    #[error(
        "campaigned too often: {max} won campaigns within {window:?}; retry after {retry_after:?}"
    )]
    CampaignTooFrequent {
        /// The limit of won campaigns per window.
        max: usize,
        /// The window.
        window: Duration,
        /// When a campaign will be allowed again.
        retry_after: Duration,
    },

    /// A namespace prefix given to [`Client::with_namespace`](crate::Client::with_namespace)
    /// cannot be used (it is empty, so it would isolate nothing).
    #[error("invalid namespace: {reason}")]
    InvalidNamespace {
        /// What is wrong with it.
        reason: &'static str,
    },

    /// An [`Stm`](crate::concurrency::stm::Stm) transaction conflicted with other writers on
    /// every one of its `attempts` and gave up; none of its writes was applied.
    #[error("STM transaction conflicted {attempts} times in a row; gave up")]
    StmConflict {
        /// How many times the transaction ran and found its reads changed.
        attempts: u32,
    },

    /// A [`Cache`](crate::Cache)'s range holds more than its limit of keys or bytes
    /// ([`CacheOptions`](crate::CacheOptions)): it stopped following the range, and every
    /// read of it fails with this error. Make it again with a larger limit or a smaller range.
    #[error("cache limit exceeded: more than {limit} {what}")]
    CacheLimit {
        /// What went over: `"keys"` or `"bytes"`.
        what: &'static str,
        /// The limit.
        limit: usize,
    },

    /// A [`Cache`](crate::Cache) read that must be fresh could not be made so within its
    /// deadline: the cache holds revision `revision`, and the read needed `wanted` (0 while
    /// the quorum read that tells it was still pending). The cache never falls back to etcd
    /// by itself; the caller may read etcd directly.
    #[error("cache not fresh in time: it holds revision {revision}, the read needed {wanted}")]
    NotFresh {
        /// The revision the cache holds.
        revision: i64,
        /// The revision the read needed.
        wanted: i64,
    },

    /// The server closed a stream that should have stayed open.
    #[error("the server closed the stream")]
    StreamClosed,

    /// The client was shut down (or every handle dropped) while the request was pending.
    #[error("client is shut down")]
    Shutdown,

    /// Any other gRPC status, kept whole.
    #[error("etcd error: {0}")]
    Grpc(#[source] tonic::Status),
}
