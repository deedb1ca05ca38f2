//! The retry policy: which failures are worth another attempt, and how long to wait (no IO here).
//!
//! Why this shape: a retry must never turn one write into two. So the decision crosses the RPC's
//! idempotency (from the one table in [`rpc`](crate::rpc)) with the failure class:
//!
//! - a request that provably never left the client (the connection could not be made) is retried
//!   whatever it is;
//! - a request the server provably refused before doing anything (`no leader` from the
//!   require-leader check, `too many requests` from the apply-gap check, `raft proposal
//!   dropped`, an auth token to renew) is retried whatever it is;
//! - any other transient failure (timeout, reset connection, `leader changed`) is *ambiguous*: it
//!   is retried only for repeatable RPCs, and returned as it is for mutations.
//!
//! What each failure means for a write, and why:
//!
//! | failure | the write | why |
//! |---|---|---|
//! | connection refused / not established (tonic `ConnectError`) | not applied | the request never left the client |
//! | `etcdserver: no leader` | not applied | the `hasleader` check (v3rpc interceptor) refuses before the handler runs |
//! | `etcdserver: too many requests` | not applied | etcdserver refuses when the applied index lags the committed one by more than 5000, before proposing |
//! | `raft proposal dropped` | not applied | raft's `ErrProposalDropped`: the leader (e.g. transferring leadership) drops the proposal before it enters the log, so the proposer can fail fast |
//! | `invalid auth token` / `user name is empty` | not applied | the auth check runs before the request is proposed |
//! | `etcdserver: not leader` | not applied | a request only the leader serves (MoveLeader, a lease renewal) reached a follower, which refuses it before doing anything |
//! | `etcdserver: leader changed`, `request timed out`, deadline, reset connection | maybe applied | the proposal may already be in the log; only the caller can decide |
//! | `mvcc: database space exceeded` | maybe applied | etcd checks the quota twice: before proposing (refused) and again in the apply, where the put, txn or grant is applied *and then* answered so |
//! | `grpc: trying to send message larger than max`, tonic's "decoded message length too large" | maybe applied | a limit on the *answer* (the server's, a proxy's or this client's), met after the request was served |
//! | any other answer etcd gives (`compacted`, `permission denied`, ...) | definite | the request was judged; sending it again changes nothing |
//!
//! The wait between attempts is constant with jitter (25 ms +-10 % by default, etcd's Go
//! client's `backoffLinearWithJitter`), the number of attempts is capped, and the caller's
//! deadline bounds everything. Each retry goes to another endpoint; that part is the balancer's.

use std::time::Duration;

use crate::error::{Error, ErrorClass};
use crate::rpc::{Idempotency, Rpc};

/// Whether to try again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Send the request again (to another endpoint) after the backoff.
    Retry,
    /// Return this error to the caller.
    Stop,
}

/// Retry settings (from [`Options`](crate::Options)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RetryPolicy {
    /// Wait between attempts.
    pub(crate) backoff: Duration,
    /// +- this fraction of `backoff`, so that many clients do not retry in lockstep.
    pub(crate) jitter: f64,
    /// Attempts per call, the first included.
    pub(crate) max_attempts: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            backoff: Duration::from_millis(25),
            jitter: 0.10,
            // With 25 ms waits this is ~2.5 s of waiting: more than an election takes; the
            // request deadline usually ends the call first.
            max_attempts: 100,
        }
    }
}

impl RetryPolicy {
    /// Decide after attempt number `attempt` (1-based) of `rpc` failed with `error`;
    /// `never_sent` says the connection failed before the request could be written.
    pub(crate) fn decide(
        &self,
        rpc: Rpc,
        error: &Error,
        never_sent: bool,
        attempt: u32,
    ) -> Decision {
        if attempt >= self.max_attempts {
            return Decision::Stop;
        }
        // Errors that etcd returns *before* it proposes or applies anything: even a write is
        // safe to send again.
        if never_sent || error.class() == ErrorClass::Refused {
            return Decision::Retry;
        }
        #[cfg(feature = "mutants")]
        if error.is_retryable()
            && (crate::mutants::resend_ambiguous()
                || (crate::mutants::resend_deletes() && rpc == Rpc::DeleteRange))
        {
            return Decision::Retry;
        }
        match rpc.idempotency() {
            Idempotency::Repeatable if error.is_retryable() => Decision::Retry,
            _ => Decision::Stop,
        }
    }

    /// The wait before the next attempt: `backoff` +- `jitter`.
    pub(crate) fn backoff(&self) -> Duration {
        let spread = self.jitter.clamp(0.0, 1.0) * (fastrand::f64() * 2.0 - 1.0);
        self.backoff.mul_f64(1.0 + spread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy::default()
    }

    fn ambiguous() -> Error {
        Error::Timeout
    }

    #[test]
    fn writes_only_when_never_sent_or_refused_up_front() {
        let p = policy();
        assert_eq!(p.decide(Rpc::Put, &ambiguous(), false, 1), Decision::Stop);
        assert_eq!(
            p.decide(Rpc::Put, &Error::LeaderChanged, false, 1),
            Decision::Stop
        );
        assert_eq!(p.decide(Rpc::Put, &ambiguous(), true, 1), Decision::Retry);
        assert_eq!(
            p.decide(Rpc::Put, &Error::NoLeader, false, 1),
            Decision::Retry
        );
        assert_eq!(
            p.decide(Rpc::Put, &Error::ProposalDropped, false, 1),
            Decision::Retry
        );
        assert_eq!(
            p.decide(
                Rpc::Txn { read_only: false },
                &Error::TooManyRequests,
                false,
                1
            ),
            Decision::Retry
        );
    }

    #[test]
    fn lease_grant_and_revoke_only_when_never_sent_or_refused_up_front() {
        let p = policy();
        for rpc in [Rpc::LeaseGrant, Rpc::LeaseRevoke] {
            for e in [Error::Timeout, Error::LeaderChanged, Error::StreamClosed] {
                assert_eq!(p.decide(rpc, &e, false, 1), Decision::Stop, "{rpc:?} {e:?}");
            }
            assert_eq!(p.decide(rpc, &ambiguous(), true, 1), Decision::Retry);
            assert_eq!(p.decide(rpc, &Error::NoLeader, false, 1), Decision::Retry);
        }
    }

    #[test]
    fn reads_on_any_transient_failure() {
        let p = policy();
        let read = Rpc::Range {
            serializable: false,
        };
        for e in [
            Error::Timeout,
            Error::LeaderChanged,
            Error::NoLeader,
            Error::StreamClosed,
        ] {
            assert_eq!(p.decide(read, &e, false, 1), Decision::Retry, "{e:?}");
        }
        for e in [
            Error::Compacted {
                compact_revision: None,
            },
            Error::PermissionDenied,
            Error::FutureRevision,
        ] {
            assert_eq!(p.decide(read, &e, false, 1), Decision::Stop, "{e:?}");
        }
    }

    #[test]
    fn attempts_are_capped() {
        let p = RetryPolicy {
            max_attempts: 3,
            ..policy()
        };
        let read = Rpc::Range { serializable: true };
        assert_eq!(p.decide(read, &Error::Timeout, false, 2), Decision::Retry);
        assert_eq!(p.decide(read, &Error::Timeout, false, 3), Decision::Stop);
    }

    #[test]
    fn backoff_stays_within_jitter() {
        let p = policy();
        for _ in 0..1000 {
            let b = p.backoff();
            assert!(
                b >= Duration::from_micros(22_500) && b <= Duration::from_micros(27_500),
                "{b:?}"
            );
        }
        let exact = RetryPolicy {
            jitter: 0.0,
            ..policy()
        };
        assert_eq!(exact.backoff(), Duration::from_millis(25));
    }
}
