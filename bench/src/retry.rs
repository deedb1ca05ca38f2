//! The retry loop a careful application writes around etcd-client, which has none of its own:
//! a bound on each attempt, exponential backoff with jitter, reads retried on any transient
//! failure, puts only when the request provably never reached etcd.
//!
//! Why puts are held back: a put that timed out or lost its connection may have been applied;
//! sending it again could apply it twice. A careful application retries a put only when the
//! error says it was never sent (the connect failed) or etcd refused it before proposing it
//! (`etcdserver: no leader`); everything else goes to the caller. The caller's deadline (the
//! benchmark's `--deadline`) bounds the whole loop: the loop itself never gives up.

use std::future::Future;
use std::time::Duration;

use tonic::Code;

use crate::clients::{ErrorKind, ec_kind};

/// First backoff: 50 ms, a common first step (gRPC's connection backoff starts at 1 s, which is
/// too slow for a 1 s deadline; etcd's own Go client waits 25 ms between attempts).
const FIRST_BACKOFF: Duration = Duration::from_millis(50);

/// Longest backoff: 400 ms, so that a 1 s deadline still allows a few attempts.
const MAX_BACKOFF: Duration = Duration::from_millis(400);

/// Jitter: +-20 % on each backoff, so that many callers do not retry in lockstep.
const JITTER: f64 = 0.2;

/// Attempts per caller deadline: 3, so an attempt stuck on a dead or frozen member leaves time
/// for two more on others.
const ATTEMPTS_PER_DEADLINE: u32 = 3;

/// What is being retried, which decides which errors are safe to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A put: retried only when it never reached etcd.
    Put,
    /// A get: retried on any transient failure.
    Get,
}

/// The bound on one attempt for a caller whose deadline is `deadline`.
pub fn attempt_timeout(deadline: Duration) -> Duration {
    deadline / ATTEMPTS_PER_DEADLINE
}

/// The loop in words, for the report.
pub fn describe(attempt_timeout: Duration) -> String {
    format!(
        "an app retry loop: {} ms per attempt, backoff {}..{} ms x2 +-{:.0}%, gets retried on \
         transient errors, puts only when never sent",
        attempt_timeout.as_millis(),
        FIRST_BACKOFF.as_millis(),
        MAX_BACKOFF.as_millis(),
        JITTER * 100.0
    )
}

/// Runs `attempt` until it succeeds or fails in a way [`retryable`] rejects. An attempt that
/// outlives `attempt_timeout` counts as a timeout: retried for gets, returned for puts.
pub async fn run<F, Fut>(op: Op, attempt_timeout: Duration, mut attempt: F) -> Result<(), ErrorKind>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), etcd_client::Error>>,
{
    let mut backoff = FIRST_BACKOFF;
    loop {
        match tokio::time::timeout(attempt_timeout, attempt()).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) if !retryable(op, &e) => return Err(ec_kind(&e)),
            Err(_elapsed) if op == Op::Put => return Err("attempt timeout".to_string()),
            // A retryable error, or a get's attempt that timed out: back off and go again. If
            // the caller's deadline ends the loop meanwhile, the caller sees its own deadline,
            // as in an application.
            Ok(Err(_)) | Err(_) => {}
        }
        tokio::time::sleep(jittered(backoff)).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// `backoff` +- [`JITTER`].
fn jittered(backoff: Duration) -> Duration {
    backoff.mul_f64(1.0 + JITTER * (2.0 * fastrand::f64() - 1.0))
}

/// True if a failed attempt of `op` may be sent again.
pub fn retryable(op: Op, error: &etcd_client::Error) -> bool {
    match op {
        Op::Get => transient(error),
        Op::Put => never_sent(error),
    }
}

/// A failure that another attempt, maybe on another member, can cure.
fn transient(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(status) => matches!(
            status.code(),
            Code::Unavailable
                | Code::Cancelled
                | Code::DeadlineExceeded
                | Code::Unknown
                | Code::Internal
                | Code::Aborted
                | Code::ResourceExhausted
        ),
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        _ => false,
    }
}

/// A failure that proves the request was not applied: the connection was never made, or etcd
/// refused the request for want of a leader before proposing it.
fn never_sent(error: &etcd_client::Error) -> bool {
    let text = match error {
        etcd_client::Error::GRpcStatus(status) if status.code() == Code::Unavailable => {
            status.message().to_ascii_lowercase()
        }
        etcd_client::Error::TransportError(e) => format!("{e:?}").to_ascii_lowercase(),
        _ => return false,
    };
    text.contains("connect") || text.contains("no leader") || text.contains("not ready")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: Code, message: &str) -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::new(code, message))
    }

    #[test]
    fn gets_retry_transient_failures_only() {
        assert!(retryable(
            Op::Get,
            &status(Code::Unavailable, "leader changed")
        ));
        assert!(retryable(
            Op::Get,
            &status(Code::Cancelled, "Timeout expired")
        ));
        assert!(!retryable(Op::Get, &status(Code::InvalidArgument, "bad")));
    }

    #[test]
    fn puts_retry_only_what_never_left() {
        let refused = status(Code::Unavailable, "tcp connect error: Connection refused");
        assert!(retryable(Op::Put, &refused));
        assert!(retryable(
            Op::Put,
            &status(Code::Unavailable, "etcdserver: no leader")
        ));
        assert!(!retryable(
            Op::Put,
            &status(Code::Unavailable, "etcdserver: leader changed")
        ));
        assert!(!retryable(
            Op::Put,
            &status(Code::Cancelled, "Timeout expired")
        ));
    }

    #[test]
    fn backoff_stays_within_jitter() {
        for _ in 0..100 {
            let d = jittered(FIRST_BACKOFF);
            assert!(d >= FIRST_BACKOFF.mul_f64(1.0 - JITTER));
            assert!(d <= FIRST_BACKOFF.mul_f64(1.0 + JITTER));
        }
    }
}
