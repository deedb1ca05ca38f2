//! Where a `tonic::Status` is read, once: etcd's message strings and the transport's error chains become typed errors and the few facts the client acts on.
//!
//! etcd reports its own failures as gRPC statuses whose message is one of a fixed set of
//! strings (`etcdserver: no leader`, `etcdserver: mvcc: required revision has been
//! compacted`, ...); tonic, hyper and h2 report a broken connection as a status whose source
//! chain says what happened (a connect error, a canceled request, a refused stream, a GOAWAY).
//! Both are matched here and nowhere else, so the rest of the client matches on variants and
//! on [`ErrorClass`](super::ErrorClass), never on text.

use super::Error;

impl Error {
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
        // comes from a grpc-timeout (one a `BalancedChannel` caller or a user's layer set; typed
        // calls send none), ran out first.
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

    /// The error a watch canceled by the server carries: etcd sends the reason as a Go gRPC
    /// error string (`rpc error: code = ... desc = etcdserver: ...`, or the bare message); a
    /// reason that names an etcd error becomes that error, anything else
    /// [`Error::WatchCanceled`].
    pub(crate) fn from_cancel_reason(watch_id: i64, reason: &str) -> Error {
        let message = reason.split_once("desc = ").map_or(reason, |(_, m)| m);
        match Error::from_status(tonic::Status::unknown(message.to_owned()), "") {
            Error::Grpc(_) => Error::WatchCanceled {
                watch_id,
                reason: reason.to_owned(),
            },
            known => known,
        }
    }

    /// Whether a leader refused a membership change because a peer is not yet connected
    /// (`unhealthy cluster`, etcd's strict reconfiguration check): it still leads.
    pub(crate) fn is_unhealthy_cluster(&self) -> bool {
        match self {
            Error::Unavailable(status) => status.message().ends_with("unhealthy cluster"),
            _ => false,
        }
    }
}

/// tonic enforces a request's grpc-timeout (one a `BalancedChannel` caller set) with its own
/// timer and reports `Cancelled "Timeout expired"` with a `TimeoutExpired` source: that is the
/// caller's deadline, not a broken connection.
fn is_client_timeout(status: &tonic::Status) -> bool {
    caused_by::<tonic::TimeoutExpired>(status, |_| true)
        || status.code() == tonic::Code::Cancelled && status.message() == "Timeout expired"
}

/// Whether some error of type `E` in `error`'s source chain (`error` itself excluded: a
/// status is never its own cause) satisfies `test`: the one walker of error chains.
fn caused_by<E: std::error::Error + 'static>(
    error: &(dyn std::error::Error + 'static),
    test: impl Fn(&E) -> bool,
) -> bool {
    let mut source = error.source();
    while let Some(e) = source {
        if e.downcast_ref::<E>().is_some_and(&test) {
            return true;
        }
        source = e.source();
    }
    false
}

impl Error {
    /// Whether a connection attempt was refused (ECONNREFUSED somewhere in the source chain):
    /// nothing listens at the endpoint, so its process is stopping or gone, not just far away.
    pub(crate) fn is_connection_refused(&self) -> bool {
        caused_by::<std::io::Error>(self, |io| {
            io.kind() == std::io::ErrorKind::ConnectionRefused
        })
    }
}

/// A status that tonic made up itself because the connection failed, rather than one the server
/// sent: it carries a source error (hyper, IO, TLS) and no etcd message.
fn is_transport_failure(status: &tonic::Status) -> bool {
    use std::error::Error as _;
    status.source().is_some() && !status.message().starts_with("etcdserver:")
}

/// Whether a failed call was never processed by the server, so even a write may go again:
///
/// - tonic could not establish the connection (refused, unreachable, connect timeout): no byte
///   of the request was written;
/// - hyper canceled the request before handing it to the connection ("connection closed" while
///   it was queued: the member closed the connection, e.g. stopping);
/// - the server refused the stream (HTTP/2 `REFUSED_STREAM`, which RFC 9113 section 8.7 says
///   means no application processing happened), or announced with `GOAWAY` that it will not
///   process streams above its last stream id, this one among them (section 6.8).
pub(crate) fn never_sent(status: &tonic::Status) -> bool {
    caused_by::<tonic::ConnectError>(status, |_| true)
        || caused_by::<hyper::Error>(status, hyper::Error::is_canceled)
        || caused_by::<h2::Error>(status, |h2| {
            h2.is_remote() && (h2.reason() == Some(h2::Reason::REFUSED_STREAM) || h2.is_go_away())
        })
}

/// Whether `status` says its member does not have the method at all (grpc-go's own answers
/// for a method or service it does not know), not only that it refused this request.
pub(crate) fn is_unknown_method(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::Unimplemented
        && (status.message().starts_with("unknown method")
            || status.message().starts_with("unknown service"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Status;

    #[test]
    fn cancel_reasons_become_typed_errors() {
        assert!(matches!(
            Error::from_cancel_reason(3, "etcdserver: permission denied"),
            Error::PermissionDenied
        ));
        assert!(matches!(
            Error::from_cancel_reason(
                3,
                "rpc error: code = PermissionDenied desc = etcdserver: permission denied"
            ),
            Error::PermissionDenied
        ));
        assert!(matches!(
            Error::from_cancel_reason(3, "something else"),
            Error::WatchCanceled { watch_id: 3, .. }
        ));
    }

    #[test]
    fn only_method_level_answers_count() {
        assert!(is_unknown_method(&Status::unimplemented(
            "unknown method RangeStream for service etcdserverpb.KV"
        )));
        assert!(is_unknown_method(&Status::unimplemented(
            "unknown service etcdserverpb.KV"
        )));
        // etcd 3.7 refusing one request of a method it has.
        assert!(!is_unknown_method(&Status::unimplemented(
            "RangeStream does not support custom sort orders"
        )));
        assert!(!is_unknown_method(&Status::unavailable("unknown method")));
    }

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
        assert!(never_sent(&status), "{status:?}");
        let error = Error::from_status(status, &url);
        assert!(error.is_connection_refused(), "{error:?}");
        // Refused at connect: the request never left, so it was not applied.
        assert_eq!(error.class(), crate::ErrorClass::NeverSent, "{error:?}");
        assert!(!error.may_have_applied());
        assert!(!Error::Timeout.is_connection_refused());
        assert!(!map(Status::unavailable("transport is closing")).is_connection_refused());
    }
}
