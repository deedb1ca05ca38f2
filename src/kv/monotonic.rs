//! Monotonic reads: the rule that keeps a serializable read from returning a revision older than one the client has already seen.
//!
//! # Why
//!
//! A serializable read is answered by whichever member the balancer picks, from that member's
//! own store, without asking the leader. A member that lags (cut off from its peers, or catching
//! up after a restart) answers from the past, so two reads in a row could see revision 120 and
//! then 100: the second read un-happens writes the first one saw, which no caller expects.
//!
//! The client knows the newest revision it has seen in any KV answer. A read takes that as its
//! *floor* when it starts; an answer whose header revision is below the floor is stale and is
//! not returned. The read is made again, within what is left of the caller's deadline, in two
//! ways at once, and the first answer at or above the floor wins (`kv/mod.rs`, `guarded`):
//!
//! - *linearizably*: a linearizable read waits until its member has applied everything
//!   committed before it, which includes every revision the client saw, so it cannot be stale;
//! - *serializably on each other member*: a linearizable read needs a leader, and while a
//!   leader cut off from its peers is replaced there is none for an election timeout. Then the
//!   followers may not even know the last commits the old leader acknowledged (the commit
//!   index travels with the leader's next message, which the cut stopped), so their answers
//!   are below the floor, while the cut-off leader still has them and answers at once. With
//!   the linearizable read alone, a serializable read failed there (the benchmark's leader
//!   partition, 1 trial in 3; `tests/monotonic_reads.rs` reproduces it).
//!
//! The extra requests are made only for an answer below the floor, which is rare outside a
//! lagging member or an election.
//!
//! Only the floor at the start counts: a write that finishes while the read is in flight is
//! concurrent with it, and either answer is correct.
//!
//! This file is the rule alone (no IO); `kv/mod.rs` applies it.

use tokio::time::Instant;

use crate::call::Deadline;
use crate::error::{Error, Result};
use crate::proto::etcdserverpb::{RequestOp, ResponseHeader, TxnRequest, request_op};

/// The revision a read must not go below: `Some` when the guard is on, the read is
/// serializable and the client has seen a revision.
pub(crate) fn floor(enabled: bool, serializable: bool, seen: i64) -> Option<i64> {
    #[cfg(feature = "mutants")]
    if crate::mutants::skip_monotonic_guard() {
        return None;
    }
    (enabled && serializable && seen > 0).then_some(seen)
}

/// Whether an answer with `header` is older than `floor` (an answer without a header cannot be
/// judged and is returned).
pub(crate) fn is_stale(floor: Option<i64>, header: Option<&ResponseHeader>) -> bool {
    match (floor, header) {
        (Some(floor), Some(h)) => h.revision < floor,
        _ => false,
    }
}

/// The deadline of the second read: what is left of the first one's (`at`, absolute), or
/// [`Error::Timeout`] when nothing is.
pub(crate) fn remaining(at: Option<Instant>, now: Instant) -> Result<Deadline> {
    match at {
        None => Ok(Deadline::Unbounded),
        Some(at) if at > now => Ok(Deadline::Within(at - now)),
        Some(_) => Err(Error::Timeout),
    }
}

/// Whether a txn is a serializable read: only range reads (nested txns included), every one of
/// them serializable. etcd answers such a txn from the member's own store, like a serializable
/// range.
pub(crate) fn is_serializable_txn(txn: &TxnRequest) -> bool {
    let mut ops = txn.success.iter().chain(&txn.failure).peekable();
    ops.peek().is_some()
        && ops.all(|op| match &op.request {
            Some(request_op::Request::RequestRange(r)) => r.serializable,
            Some(request_op::Request::RequestTxn(inner)) => is_serializable_txn(inner),
            _ => false,
        })
}

/// The same txn with every read linearizable.
pub(crate) fn linearizable_txn(mut txn: TxnRequest) -> TxnRequest {
    fn linearizable(op: &mut RequestOp) {
        match &mut op.request {
            Some(request_op::Request::RequestRange(r)) => r.serializable = false,
            Some(request_op::Request::RequestTxn(inner)) => inner
                .success
                .iter_mut()
                .chain(&mut inner.failure)
                .for_each(linearizable),
            _ => {}
        }
    }
    txn.success
        .iter_mut()
        .chain(&mut txn.failure)
        .for_each(linearizable);
    txn
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::kv::GetOptions;
    use crate::txn::{Txn, TxnOp};

    fn header(revision: i64) -> ResponseHeader {
        ResponseHeader {
            revision,
            ..Default::default()
        }
    }

    #[test]
    fn only_guarded_serializable_reads_after_a_seen_revision_have_a_floor() {
        assert_eq!(floor(true, true, 10), Some(10));
        assert_eq!(floor(false, true, 10), None, "guard off");
        assert_eq!(
            floor(true, false, 10),
            None,
            "linearizable reads need no guard"
        );
        assert_eq!(floor(true, true, 0), None, "nothing seen yet");
    }

    #[test]
    fn an_answer_below_the_floor_is_stale() {
        assert!(is_stale(Some(10), Some(&header(9))));
        assert!(!is_stale(Some(10), Some(&header(10))));
        assert!(!is_stale(Some(10), Some(&header(11))));
        assert!(!is_stale(None, Some(&header(1))));
        assert!(!is_stale(Some(10), None));
    }

    #[tokio::test(start_paused = true)]
    async fn the_second_read_gets_what_is_left_of_the_deadline() {
        let start = Instant::now();
        let at = Some(start + Duration::from_secs(2));
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(
            remaining(at, Instant::now()).unwrap(),
            Deadline::Within(Duration::from_millis(1500))
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(matches!(remaining(at, Instant::now()), Err(Error::Timeout)));
        assert_eq!(
            remaining(None, Instant::now()).unwrap(),
            Deadline::Unbounded
        );
    }

    #[test]
    fn a_txn_of_serializable_reads_is_a_serializable_read() {
        let ser = || TxnOp::get("a", GetOptions::new().with_serializable());
        let lin = || TxnOp::get("a", GetOptions::new());
        let txn = Txn::new()
            .and_then([ser(), TxnOp::txn(Txn::new().or_else([ser()]))])
            .into_request();
        assert!(is_serializable_txn(&txn));
        let fixed = linearizable_txn(txn);
        assert!(!is_serializable_txn(&fixed));
        assert!(!is_serializable_txn(
            &Txn::new().and_then([ser(), lin()]).into_request()
        ));
        assert!(!is_serializable_txn(
            &Txn::new()
                .and_then([ser(), TxnOp::put("a", "b", Default::default())])
                .into_request()
        ));
        assert!(
            !is_serializable_txn(&Txn::new().into_request()),
            "no read at all"
        );
    }
}
