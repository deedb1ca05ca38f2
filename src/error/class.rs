//! What an error means for the request that failed, decided once per variant: was it sent, was it applied, may it go again.
//!
//! Every consumer reads this one decision: [`Error::may_have_applied`] for the caller, the
//! retry policy for whether an attempt goes again (`retry.rs`), the balancer and the prober
//! for what it says of a member, the watch, the keeper and the recipes for whether to resume.
//! A new variant must be given its class here (the `match` has no wildcard arm), and the
//! table test below walks every variant.

use super::Error;

/// The class of an [`Error`]: what it says about the request that failed.
///
/// ```
/// use etcd_ha::{Error, ErrorClass};
/// assert_eq!(Error::NoLeader.class(), ErrorClass::Refused);
/// assert_eq!(Error::Timeout.class(), ErrorClass::Interrupted);
/// assert_eq!(Error::LeaseNotFound.class(), ErrorClass::Definite);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    /// No byte of the request reached a member's server: nothing was done, and it may go
    /// anywhere again (a connection that could not be made).
    NeverSent,
    /// A member refused it before proposing or applying anything (`no leader`, `not leader`,
    /// `too many requests`, `raft proposal dropped`): not applied, and another attempt, perhaps
    /// on another member, may succeed.
    Refused,
    /// The member refused the auth token (expired, or older than an auth change): not applied;
    /// the client logs in again and resends.
    Login,
    /// The answer was lost on the way (a timeout, a broken connection, `leader changed`, a
    /// closed stream): it may have been applied. A read may go again; a write only if the
    /// caller decides so.
    Interrupted,
    /// The server answered with an error after it may have applied the request (`database
    /// space exceeded`, an answer too large for a limit on its way back), or with one this
    /// client does not know, or the client shut down with it in flight. Sending it again is
    /// the caller's decision, and by itself would not help.
    Ambiguous,
    /// Judged and refused, by the server (compacted, lease not found, permission denied, a
    /// failed fence, ...) or by the client before sending (a campaign guard, a member list
    /// too long): not applied, and the same request gets the same answer.
    Definite,
    /// The client's own configuration (endpoints, options, TLS files, DNS, credentials):
    /// nothing was sent, and nothing will work until it is fixed.
    Fatal,
}

impl Error {
    /// This error's [`ErrorClass`].
    ///
    /// ```
    /// let e = etcd_ha::Error::NoEndpoints;
    /// assert_eq!(e.class(), etcd_ha::ErrorClass::Fatal);
    /// ```
    pub fn class(&self) -> ErrorClass {
        use ErrorClass::*;
        match self {
            Error::Connect { .. } => NeverSent,
            // A connection that failed before the request was written, a request hyper canceled
            // while queued, a stream the server refused or announced it would not process.
            Error::Transport { source, .. } if super::never_sent(source) => NeverSent,
            Error::NoLeader
            | Error::NotLeader
            | Error::ProposalDropped
            | Error::TooManyRequests
            | Error::NotFresh { .. } => Refused,
            Error::InvalidAuthToken => Login,
            Error::Transport { .. }
            | Error::Timeout
            | Error::Unavailable(_)
            | Error::LeaderChanged
            | Error::StreamClosed => Interrupted,
            // A foreign member answered: the request may have been applied to its cluster.
            Error::NoSpace
            | Error::ResponseTooLarge
            | Error::Grpc(_)
            | Error::Shutdown
            | Error::ClusterIdMismatch { .. } => Ambiguous,
            Error::Compacted { .. }
            | Error::FutureRevision
            | Error::LeaseNotFound
            | Error::LeaseExists
            | Error::LeaseTtlTooLarge { .. }
            | Error::RequestTooLarge
            | Error::PermissionDenied
            | Error::AuthFailed
            | Error::AuthNotEnabled
            | Error::InvalidRequest(_)
            | Error::Fenced { .. }
            | Error::StmConflict { .. }
            | Error::MemberNotFound
            | Error::LearnerNotReady
            | Error::ElectionNoLeader
            | Error::ElectionNotLeader
            | Error::WatchCanceled { .. }
            | Error::WatchTooLarge { .. }
            | Error::CampaignTooFrequent { .. }
            | Error::TooManyMembers { .. }
            | Error::CacheLimit { .. } => Definite,
            Error::NoEndpoints
            | Error::InvalidEndpoint { .. }
            | Error::PlaintextCredentials { .. }
            | Error::InvalidOptions { .. }
            | Error::TlsFile { .. }
            | Error::TlsConfig(_)
            | Error::TlsNotCompiled
            | Error::SrvNotFound { .. }
            | Error::Dns { .. }
            | Error::AuthRequired
            | Error::InvalidNamespace { .. } => Fatal,
        }
    }

    /// For a write (put, delete, txn, lease grant or revoke, ...) that failed with this error:
    /// whether it may have been applied anyway ([`ErrorClass::Interrupted`] or
    /// [`ErrorClass::Ambiguous`]). `false` means it was certainly not applied: it never reached
    /// a member, or etcd refused it before proposing it (see the table in the retry policy's
    /// docs), or etcd judged and refused it. `true` means only the caller can decide: a
    /// timeout, a connection lost after sending, `leader changed`, anything unknown.
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
        matches!(
            self.class(),
            ErrorClass::Interrupted | ErrorClass::Ambiguous
        )
    }

    /// Whether the same request may succeed if sent again, possibly to another member
    /// ([`ErrorClass::NeverSent`], [`Refused`](ErrorClass::Refused),
    /// [`Login`](ErrorClass::Login) or [`Interrupted`](ErrorClass::Interrupted)).
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
            self.class(),
            ErrorClass::NeverSent
                | ErrorClass::Refused
                | ErrorClass::Login
                | ErrorClass::Interrupted
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tonic::Status;

    /// One of every variant with the class it must have. `class()` has no wildcard arm, so a
    /// new variant fails to compile until it has a class; this table makes the choice visible
    /// next to the others.
    fn every_variant() -> Vec<(Error, ErrorClass)> {
        use ErrorClass::*;
        let tls = tonic::transport::Endpoint::from_shared("\n").expect_err("not a URI");
        vec![
            (Error::NoEndpoints, Fatal),
            (
                Error::InvalidEndpoint {
                    endpoint: "x".into(),
                    reason: "r",
                },
                Fatal,
            ),
            (
                Error::PlaintextCredentials {
                    endpoint: "http://a".into(),
                },
                Fatal,
            ),
            (
                Error::TooManyMembers {
                    count: 65,
                    limit: 64,
                },
                Definite,
            ),
            (
                Error::InvalidOptions {
                    option: "o",
                    reason: "r",
                },
                Fatal,
            ),
            (
                Error::TlsFile {
                    path: "/x".into(),
                    source: std::io::Error::other("e"),
                },
                Fatal,
            ),
            (Error::TlsConfig(tls), Fatal),
            (Error::TlsNotCompiled, Fatal),
            (Error::SrvNotFound { name: "n".into() }, Fatal),
            (
                Error::Dns {
                    name: "n".into(),
                    source: "e".into(),
                },
                Fatal,
            ),
            (
                Error::Connect {
                    endpoints: vec![],
                    timeout: Duration::from_secs(1),
                    source: Box::new(Error::Timeout),
                },
                NeverSent,
            ),
            (
                Error::Transport {
                    endpoint: "e".into(),
                    source: Status::unavailable("x"),
                },
                Interrupted,
            ),
            (
                Error::ClusterIdMismatch {
                    endpoint: "e".into(),
                    expected: 1,
                    found: 2,
                },
                Ambiguous,
            ),
            (Error::Timeout, Interrupted),
            (Error::Unavailable(Status::unavailable("x")), Interrupted),
            (
                Error::Compacted {
                    compact_revision: Some(3),
                },
                Definite,
            ),
            (Error::FutureRevision, Definite),
            (Error::LeaseNotFound, Definite),
            (Error::LeaseExists, Definite),
            (Error::LeaseTtlTooLarge { max_secs: 1 }, Definite),
            (Error::NoLeader, Refused),
            (Error::LeaderChanged, Interrupted),
            (Error::ProposalDropped, Refused),
            (Error::NotLeader, Refused),
            (Error::RequestTooLarge, Definite),
            (Error::TooManyRequests, Refused),
            (Error::PermissionDenied, Definite),
            (Error::AuthFailed, Definite),
            (Error::InvalidAuthToken, Login),
            (Error::AuthRequired, Fatal),
            (Error::AuthNotEnabled, Definite),
            (Error::NoSpace, Ambiguous),
            (Error::ResponseTooLarge, Ambiguous),
            (Error::LearnerNotReady, Definite),
            (Error::ElectionNoLeader, Definite),
            (Error::ElectionNotLeader, Definite),
            (Error::MemberNotFound, Definite),
            (
                Error::InvalidRequest(Status::invalid_argument("x")),
                Definite,
            ),
            (
                Error::WatchCanceled {
                    watch_id: 1,
                    reason: "r".into(),
                },
                Definite,
            ),
            (Error::WatchTooLarge { limit: 1 }, Definite),
            (Error::Fenced { key: vec![] }, Definite),
            (
                Error::CampaignTooFrequent {
                    max: 1,
                    window: Duration::from_secs(1),
                    retry_after: Duration::from_secs(1),
                },
                Definite,
            ),
            (Error::InvalidNamespace { reason: "r" }, Fatal),
            (Error::StmConflict { attempts: 3 }, Definite),
            (
                Error::CacheLimit {
                    what: "keys",
                    limit: 1,
                },
                Definite,
            ),
            (
                Error::NotFresh {
                    revision: 1,
                    wanted: 2,
                },
                Refused,
            ),
            (Error::StreamClosed, Interrupted),
            (Error::Shutdown, Ambiguous),
            (Error::Grpc(Status::unknown("x")), Ambiguous),
        ]
    }

    #[test]
    fn every_variant_has_its_class_and_the_answers_follow_from_it() {
        for (error, class) in every_variant() {
            assert_eq!(error.class(), class, "{error:?}");
            let applied = matches!(class, ErrorClass::Interrupted | ErrorClass::Ambiguous);
            assert_eq!(error.may_have_applied(), applied, "{error:?}");
            let retryable = matches!(
                class,
                ErrorClass::NeverSent
                    | ErrorClass::Refused
                    | ErrorClass::Login
                    | ErrorClass::Interrupted
            );
            assert_eq!(error.is_retryable(), retryable, "{error:?}");
        }
    }

    #[test]
    fn what_etcd_says_lands_in_the_class_its_semantics_need() {
        let class = |status: Status| Error::from_status(status, "http://127.0.0.1:1").class();
        // Refused before proposing: retried even for a write.
        for message in [
            "no leader",
            "not leader",
            "too many requests",
            "raft proposal dropped",
        ] {
            let status = Status::unavailable(format!("etcdserver: {message}"));
            assert_eq!(class(status), ErrorClass::Refused, "{message}");
        }
        // Applied and then refused (the quota's second check): the caller decides.
        let space = Status::resource_exhausted("etcdserver: mvcc: database space exceeded");
        assert_eq!(class(space), ErrorClass::Ambiguous);
        let answer = Status::resource_exhausted("grpc: trying to send message larger than max");
        assert_eq!(class(answer), ErrorClass::Ambiguous);
        assert_eq!(
            class(Status::unavailable("etcdserver: leader changed")),
            ErrorClass::Interrupted
        );
        assert_eq!(
            class(Status::unauthenticated("etcdserver: invalid auth token")),
            ErrorClass::Login
        );
        assert_eq!(
            class(Status::unknown("something new")),
            ErrorClass::Ambiguous
        );
    }
}
