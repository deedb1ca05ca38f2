//! How a read of a [`Cache`](super::Cache) becomes fresh: one quorum read per round, shared by
//! every reader that arrived before it began, then a wait on the store until it holds what that
//! read proved (the proofs: `store.rs`).
//!
//! ```text
//!  readers ──join──> round task: take every reader waiting now
//!                        │
//!                        ├─ quorum read: a count of one key (its header's revision R)
//!                        │     store at R already? ──> Proof::Revision(R)
//!                        ├─ progress request on the cache's own stream, sent
//!                        │     member orders progress answers? ──> Proof::Revision(R)
//!                        └─ otherwise a quorum read of the range's count and newest
//!                              mod revision ──> Proof::Unchanged
//!  each reader: wait for the store to change until the proof holds, asking for progress
//!  again while it falls short, until its deadline (then Error::NotFresh)
//! ```
//!
//! A reader that arrives while a round's quorum read is in flight waits for the next round: a
//! read begun before it may miss a write it must see.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::store::Proof;
use super::task::{Sent, Shared};
use crate::error::{Error, Result};
use crate::kv::{GetOptions, Kv};
use crate::proto::etcdserverpb::RangeRequest;
use crate::proto::etcdserverpb::range_request::{SortOrder, SortTarget};

/// How long a reader waits on the store before it asks for progress again: an answer that
/// came from a member behind the quorum read's revision proves too little.
const ASK_AGAIN: Duration = Duration::from_millis(50);

/// Readers waiting for the next round; each gets the round's proof, or `None` when the
/// round's quorum read failed (it then reads alone, to get its own error).
type Joiner = oneshot::Sender<Option<Proof>>;

/// The handle readers join rounds through.
#[derive(Debug)]
pub(super) struct Rounds {
    tx: mpsc::UnboundedSender<Joiner>,
}

impl Rounds {
    /// Start the round task (it ends when this handle is dropped).
    pub(super) fn start(shared: Arc<Shared>, kv: Kv) -> Rounds {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(shared, kv, rx));
        Rounds { tx }
    }

    /// The proof of the next round to begin.
    async fn join(&self) -> Option<Proof> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(tx).ok()?;
        rx.await.ok().flatten()
    }
}

async fn run(shared: Arc<Shared>, kv: Kv, mut rx: mpsc::UnboundedReceiver<Joiner>) {
    let prover = Prover {
        shared,
        kv,
        unordered: AtomicBool::new(false),
    };
    while let Some(first) = rx.recv().await {
        let mut joiners = vec![first];
        while let Ok(more) = rx.try_recv() {
            joiners.push(more);
        }
        joiners.retain(|j| !j.is_closed());
        if joiners.is_empty() {
            continue;
        }
        prover.shared.stats.rounds.fetch_add(1, Ordering::Relaxed);
        let proof = prover.prove().await.ok();
        for joiner in joiners {
            let _ = joiner.send(proof);
        }
    }
}

/// Makes the quorum reads.
struct Prover {
    shared: Arc<Shared>,
    kv: Kv,
    /// The stream's member said its progress answers prove nothing: go straight to the
    /// range's own proof next time (a member of another version may say otherwise later).
    unordered: AtomicBool,
}

impl Prover {
    async fn prove(&self) -> Result<Proof> {
        if self.unordered.load(Ordering::Relaxed) {
            let proof = self.unchanged().await?;
            // Ask again when it falls short: the stream may have moved to a member that orders.
            if !self.shared.store_fresh(&proof)
                && self.shared.request_progress().await == Sent::Ordered
            {
                self.unordered.store(false, Ordering::Relaxed);
            }
            return Ok(proof);
        }
        let range = &self.shared.range;
        let now = self
            .kv
            .get(range.key.clone(), GetOptions::new().with_count_only())
            .await?;
        self.shared
            .stats
            .quorum_reads
            .fetch_add(1, Ordering::Relaxed);
        let proof = Proof::Revision(now.header.map_or(0, |h| h.revision));
        if self.shared.store_fresh(&proof) {
            return Ok(proof);
        }
        match self.shared.request_progress().await {
            Sent::Ordered => Ok(proof),
            Sent::Unordered => {
                self.unordered.store(true, Ordering::Relaxed);
                self.unchanged().await
            }
            // Between streams: this round proves it by the range, the next asks again.
            Sent::Not => self.unchanged().await,
        }
    }

    /// The range's key count and newest mod revision, by a quorum read.
    async fn unchanged(&self) -> Result<Proof> {
        let range = &self.shared.range;
        let request = RangeRequest {
            key: range.key.clone(),
            range_end: range.range_end.clone(),
            limit: 1,
            sort_order: SortOrder::Descend as i32,
            sort_target: SortTarget::Mod as i32,
            keys_only: true,
            ..Default::default()
        };
        let answer = self.kv.range(request).await?;
        self.shared
            .stats
            .quorum_reads
            .fetch_add(1, Ordering::Relaxed);
        self.shared
            .stats
            .range_proofs
            .fetch_add(1, Ordering::Relaxed);
        Ok(Proof::Unchanged {
            revision: answer.header.map_or(0, |h| h.revision),
            count: usize::try_from(answer.count).unwrap_or(usize::MAX),
            newest: answer.kvs.first().map_or(0, |kv| kv.mod_revision),
        })
    }
}

/// Wait until the cache holds every event up to a revision a quorum read proved after now
/// (see the module docs), or until `deadline`.
pub(super) async fn consistent(
    shared: &Arc<Shared>,
    rounds: &Rounds,
    kv: &Kv,
    deadline: Instant,
) -> Result<()> {
    let proof = match tokio::time::timeout_at(deadline, rounds.join()).await {
        Err(_) => return Err(shared.not_fresh(0)),
        Ok(Some(proof)) => proof,
        // The round's read failed: read alone, to have its own error (or a proof).
        Ok(None) => {
            let alone = Prover {
                shared: shared.clone(),
                kv: kv.clone(),
                unordered: AtomicBool::new(false),
            };
            match tokio::time::timeout_at(deadline, alone.prove()).await {
                Err(_) => return Err(shared.not_fresh(0)),
                Ok(proof) => proof?,
            }
        }
    };
    wait(shared, &proof, deadline).await
}

/// Wait until the store is fresh by `proof`, asking for progress while it is not.
pub(super) async fn wait(shared: &Arc<Shared>, proof: &Proof, deadline: Instant) -> Result<()> {
    let mut changed = shared.subscribe();
    loop {
        shared.check()?;
        if shared.store_fresh(proof) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(shared.not_fresh(proof.revision()));
        }
        let ask_at = (Instant::now() + ASK_AGAIN).min(deadline);
        tokio::select! {
            changed = changed.changed() => {
                if changed.is_err() {
                    return Err(Error::Shutdown);
                }
            }
            () = tokio::time::sleep_until(ask_at) => shared.nudge(),
        }
    }
}
