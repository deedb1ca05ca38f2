//! The one public error type, and the single place where `tonic::Status` becomes a typed etcd error.
//!
//! etcd reports its own failures as gRPC statuses whose message is one of a fixed set of strings
//! (`etcdserver: no leader`, `etcdserver: mvcc: required revision has been compacted`, ...). We match
//! those strings here, once, so that callers match on variants instead of text.

use std::path::PathBuf;
use std::time::Duration;

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

impl Error {
    /// For a write (put, delete, txn, lease grant or revoke, ...) that failed with this error:
    /// whether it may have been applied anyway. `false` means it was certainly not applied: it
    /// never reached a member, or etcd refused it before proposing it (see the table in the
    /// retry policy's docs), or etcd judged and refused it. `true` means only the caller can
    /// decide: a timeout, a connection lost after sending, `leader changed`, anything unknown.
    ///
    /// This holds for the error a call returns, not only its last attempt: the client never
    /// resends a write after an ambiguous failure, so every earlier attempt of a call that ends
    /// with a "not applied" error was refused too. The robustness suite checks this claim
    /// against the cluster's own record of every change (`tests/robustness/`).
    ///
    /// ```
    /// assert!(!etcd_ha::Error::ProposalDropped.may_have_applied());
    /// assert!(etcd_ha::Error::Timeout.may_have_applied());
    /// ```
    pub fn may_have_applied(&self) -> bool {
        !matches!(
            self,
            Error::NoEndpoints
                | Error::InvalidEndpoint { .. }
                | Error::PlaintextCredentials { .. }
                | Error::InvalidOptions { .. }
                | Error::TlsFile { .. }
                | Error::TlsConfig(_)
                | Error::TlsNotCompiled
                | Error::SrvNotFound { .. }
                | Error::Dns { .. }
                | Error::Connect { .. }
                | Error::Compacted { .. }
                | Error::FutureRevision
                | Error::LeaseNotFound
                | Error::LeaseExists
                | Error::LeaseTtlTooLarge { .. }
                | Error::NoLeader
                | Error::NotLeader
                | Error::ProposalDropped
                | Error::RequestTooLarge
                | Error::TooManyRequests
                | Error::PermissionDenied
                | Error::AuthFailed
                | Error::InvalidAuthToken
                | Error::AuthRequired
                | Error::AuthNotEnabled
                | Error::InvalidRequest(_)
                | Error::Fenced { .. }
                | Error::InvalidNamespace { .. }
                | Error::StmConflict { .. }
        )
    }

    /// Whether the same request may succeed if sent again, possibly to another member.
    ///
    /// This is about the *failure*; whether the *request* is safe to repeat (a put that may have
    /// been applied is not) is decided by the retry layer.
    ///
    /// ```
    /// assert!(etcd_ha::Error::NoLeader.is_retryable());
    /// assert!(!etcd_ha::Error::Compacted { compact_revision: None }.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Connect { .. }
                | Error::Transport { .. }
                | Error::Timeout
                | Error::Unavailable(_)
                | Error::NoLeader
                | Error::LeaderChanged
                | Error::ProposalDropped
                | Error::NotLeader
                | Error::TooManyRequests
                | Error::InvalidAuthToken
                | Error::StreamClosed
        )
    }

    /// Translate a gRPC status from etcd (or from the transport) into a typed error.
    ///
    /// `endpoint` names the member the request went to, for transport errors.
    ///
    /// ```
    /// let status = tonic::Status::unavailable("etcdserver: no leader");
    /// assert!(matches!(etcd_ha::Error::from_status(status, "http://127.0.0.1:2379"), etcd_ha::Error::NoLeader));
    /// ```
    pub fn from_status(status: tonic::Status, endpoint: &str) -> Error {
        use tonic::Code;
        // etcd prefixes its messages with "etcdserver: "; the lock and election services use
        // their own prefixes, so match on the tail.
        let msg = status.message();
        let tail = msg.strip_prefix("etcdserver: ").unwrap_or(msg);
        match tail {
            "mvcc: required revision has been compacted" => {
                return Error::Compacted {
                    compact_revision: None,
                };
            }
            "mvcc: required revision is a future revision" => return Error::FutureRevision,
            "requested lease not found" => return Error::LeaseNotFound,
            "lease already exists" => return Error::LeaseExists,
            "too large lease TTL" => {
                return Error::LeaseTtlTooLarge {
                    max_secs: crate::MAX_LEASE_TTL,
                };
            }
            "no leader" => return Error::NoLeader,
            "leader changed" => return Error::LeaderChanged,
            "raft proposal dropped" => return Error::ProposalDropped,
            "not leader" => return Error::NotLeader,
            "request is too large" => return Error::RequestTooLarge,
            "too many requests" => return Error::TooManyRequests,
            "permission denied" => return Error::PermissionDenied,
            "authentication failed, invalid user ID or password" => return Error::AuthFailed,
            // Authenticate as a user created without a password (only a certificate CN logs
            // it in); etcd passes its auth store's error through untranslated, code Unknown.
            "auth: authentication failed, password was given for no password user" => {
                return Error::AuthFailed;
            }
            // An old auth revision means the token predates a user/role change: renew it. The
            // maintenance service (HashKV, Status, ...) passes the auth store's own error
            // through untranslated ("auth: ...", code Unknown): found by the robustness suite,
            // whose end-of-run HashKV failed after a token expiry instead of renewing it.
            "invalid auth token"
            | "revision of auth store is old"
            | "auth: invalid auth token"
            | "auth: revision of auth store is old" => {
                return Error::InvalidAuthToken;
            }
            "user name is empty" => return Error::AuthRequired,
            "authentication is not enabled" => return Error::AuthNotEnabled,
            "member not found" => return Error::MemberNotFound,
            "mvcc: database space exceeded" => return Error::NoSpace,
            "can only promote a learner member which is in sync with leader" => {
                return Error::LearnerNotReady;
            }
            // A learner refuses what needs a voter; another member can serve it. etcd 3.5 says
            // so with Unavailable, 3.6 with FailedPrecondition: one error for both.
            "rpc not supported for learner" => {
                return Error::Unavailable(tonic::Status::unavailable(status.message()));
            }
            "election: no leader" => return Error::ElectionNoLeader,
            "election: not leader" => return Error::ElectionNotLeader,
            _ => {}
        }
        // "context deadline exceeded" (code Unknown): the server's context, whose deadline
        // comes from the grpc-timeout this client sends, ran out first (a very short per-call
        // deadline can see the server's answer before the client's own timer, which ticks in
        // milliseconds).
        if tail.starts_with("request timed out")
            || tail == "context deadline exceeded"
            || is_client_timeout(&status)
        {
            return Error::Timeout;
        }
        match status.code() {
            Code::DeadlineExceeded => Error::Timeout,
            // A limit on the answer (a server's or proxy's send limit, this client's receive
            // limit): met after the request was served.
            Code::ResourceExhausted | Code::OutOfRange
                if msg.contains("trying to send message larger than")
                    || msg.contains("decoded message length too large") =>
            {
                Error::ResponseTooLarge
            }
            // A limit on the request: the server's gRPC receive limit (`grpc: received message
            // larger than max`), or tonic's own encode limit before sending.
            Code::ResourceExhausted if msg.contains("larger than") || msg.contains("too large") => {
                Error::RequestTooLarge
            }
            Code::OutOfRange
                if msg.contains("larger than")
                    || msg.contains("encoded message length too large") =>
            {
                Error::RequestTooLarge
            }
            Code::Unavailable if is_transport_failure(&status) => Error::Transport {
                endpoint: endpoint.to_owned(),
                source: status,
            },
            Code::Unavailable => Error::Unavailable(status),
            Code::Unauthenticated => Error::InvalidAuthToken,
            Code::PermissionDenied => Error::PermissionDenied,
            Code::InvalidArgument => Error::InvalidRequest(status),
            _ if is_transport_failure(&status) => Error::Transport {
                endpoint: endpoint.to_owned(),
                source: status,
            },
            _ => Error::Grpc(status),
        }
    }

    /// Whether the member answered gRPC `Unimplemented`: it does not have the method (an older
    /// etcd asked for a newer call, such as `RangeStream` before 3.7), or does not take this
    /// request of it. Nothing was done.
    ///
    /// ```
    /// let old = tonic::Status::unimplemented("unknown method RangeStream for service etcdserverpb.KV");
    /// assert!(etcd_ha::Error::from_status(old, "http://127.0.0.1:2379").is_unimplemented());
    /// assert!(!etcd_ha::Error::NoLeader.is_unimplemented());
    /// ```
    pub fn is_unimplemented(&self) -> bool {
        matches!(self, Error::Grpc(status) if status.code() == tonic::Code::Unimplemented)
    }

    /// Whether this failure happened below gRPC (connect, TLS, HTTP/2), so that the member's
    /// server never answered. The balancer uses this to mark the endpoint as failed.
    ///
    /// ```
    /// assert!(!etcd_ha::Error::NoLeader.is_transport());
    /// ```
    pub fn is_transport(&self) -> bool {
        matches!(self, Error::Transport { .. } | Error::Connect { .. })
    }
}

/// tonic enforces the grpc-timeout we send with its own timer and reports `Cancelled "Timeout
/// expired"` with a `TimeoutExpired` source: that is our deadline, not a broken connection.
fn is_client_timeout(status: &tonic::Status) -> bool {
    use std::error::Error as _;
    let mut source = status.source();
    while let Some(e) = source {
        if e.is::<tonic::TimeoutExpired>() {
            return true;
        }
        source = e.source();
    }
    status.code() == tonic::Code::Cancelled && status.message() == "Timeout expired"
}

/// A status that tonic made up itself because the connection failed, rather than one the server
/// sent: it carries a source error (hyper, IO, TLS) and no etcd message.
impl Error {
    /// Whether a connection attempt was refused (ECONNREFUSED somewhere in the source chain):
    /// nothing listens at the endpoint, so its process is stopping or gone, not just far away.
    pub(crate) fn is_connection_refused(&self) -> bool {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(error) = source {
            if let Some(io) = error.downcast_ref::<std::io::Error>()
                && io.kind() == std::io::ErrorKind::ConnectionRefused
            {
                return true;
            }
            source = error.source();
        }
        false
    }
}

fn is_transport_failure(status: &tonic::Status) -> bool {
    use std::error::Error as _;
    status.source().is_some() && !status.message().starts_with("etcdserver:")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Status;

    fn map(status: Status) -> Error {
        Error::from_status(status, "http://127.0.0.1:1")
    }

    #[test]
    fn etcd_messages_become_variants() {
        assert!(matches!(
            map(Status::out_of_range(
                "etcdserver: mvcc: required revision has been compacted"
            )),
            Error::Compacted { .. }
        ));
        assert!(matches!(
            map(Status::out_of_range(
                "etcdserver: mvcc: required revision is a future revision"
            )),
            Error::FutureRevision
        ));
        assert!(matches!(
            map(Status::not_found("etcdserver: requested lease not found")),
            Error::LeaseNotFound
        ));
        assert!(matches!(
            map(Status::unavailable("etcdserver: leader changed")),
            Error::LeaderChanged
        ));
        assert!(matches!(
            map(Status::invalid_argument("etcdserver: request is too large")),
            Error::RequestTooLarge
        ));
        assert!(matches!(
            map(Status::resource_exhausted(
                "grpc: received message larger than max (3145738 vs. 2097152)"
            )),
            Error::RequestTooLarge
        ));
        // A limit on the answer, met after the request was served: ambiguous for a write.
        for answer_limit in [
            Status::resource_exhausted(
                "grpc: trying to send message larger than max (4194405 vs. 4194304)",
            ),
            Status::out_of_range(
                "Error, decoded message length too large: found 5000000 bytes, the limit is: \
                 4194304 bytes",
            ),
        ] {
            let e = map(answer_limit);
            assert!(matches!(e, Error::ResponseTooLarge), "{e:?}");
            assert!(e.may_have_applied());
        }
        let unsent = map(Status::out_of_range(
            "Error, encoded message length too large: found 5000000 bytes, the limit is: 4194304 \
             bytes",
        ));
        assert!(matches!(unsent, Error::RequestTooLarge), "{unsent:?}");
        assert!(!unsent.may_have_applied());
        assert!(matches!(
            map(Status::invalid_argument(
                "etcdserver: authentication failed, invalid user ID or password"
            )),
            Error::AuthFailed
        ));
        assert!(matches!(
            map(Status::unknown(
                "auth: authentication failed, password was given for no password user"
            )),
            Error::AuthFailed
        ));
        assert!(matches!(
            map(Status::unauthenticated("etcdserver: invalid auth token")),
            Error::InvalidAuthToken
        ));
        assert!(matches!(
            map(Status::unknown("context deadline exceeded")),
            Error::Timeout
        ));
        // The maintenance service's untranslated form (HashKV after a token expiry).
        assert!(matches!(
            map(Status::unknown("auth: invalid auth token")),
            Error::InvalidAuthToken
        ));
        assert!(matches!(
            map(Status::unavailable(
                "etcdserver: request timed out, possibly due to previous leader failure"
            )),
            Error::Timeout
        ));
        assert!(matches!(
            map(Status::unavailable("etcdserver: unhealthy cluster")),
            Error::Unavailable(_)
        ));
        assert!(matches!(
            map(Status::invalid_argument("etcdserver: key is not provided")),
            Error::InvalidRequest(_)
        ));
        assert!(matches!(
            map(Status::resource_exhausted(
                "etcdserver: mvcc: database space exceeded"
            )),
            Error::NoSpace
        ));
        // Refused before proposing or applied and then refused: the client cannot tell.
        assert!(Error::NoSpace.may_have_applied());
        assert!(matches!(
            map(Status::unknown("election: no leader")),
            Error::ElectionNoLeader
        ));
        assert!(matches!(
            map(Status::unknown("election: not leader")),
            Error::ElectionNotLeader
        ));
    }

    #[test]
    fn retryable_classes() {
        assert!(Error::NoLeader.is_retryable());
        assert!(Error::Timeout.is_retryable());
        assert!(!Error::PermissionDenied.is_retryable());
        assert!(!Error::LeaseNotFound.is_retryable());
        assert!(!Error::RequestTooLarge.is_retryable());
        let foreign = Error::ClusterIdMismatch {
            endpoint: "https://10.0.0.9:2379".into(),
            expected: 0xa1,
            found: 0xb2,
        };
        assert!(!foreign.is_retryable());
        assert!(!foreign.is_transport());
        assert_eq!(
            foreign.to_string(),
            "endpoint https://10.0.0.9:2379 belongs to cluster b2, not to this client's cluster a1"
        );
    }

    /// A member whose process is gone refuses the connection: the error says so (the balancer
    /// then keeps writes off followers that still name it as leader), and an answer that only
    /// broke is not taken for a refusal.
    #[tokio::test]
    async fn a_refused_connection_is_told_apart() {
        use crate::proto::etcdserverpb::StatusRequest;
        use crate::proto::etcdserverpb::maintenance_client::MaintenanceClient;
        // A port that was just free: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}");
        let channel = tonic::transport::Endpoint::from_shared(url.clone())
            .unwrap()
            .connect_lazy();
        let status = MaintenanceClient::new(channel)
            .status(StatusRequest {})
            .await
            .unwrap_err();
        let error = Error::from_status(status, &url);
        assert!(error.is_connection_refused(), "{error:?}");
        assert!(!Error::Timeout.is_connection_refused());
        assert!(!map(Status::unavailable("transport is closing")).is_connection_refused());
    }
}
