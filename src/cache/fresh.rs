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
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::store::Proof;
use super::task::{Sent, Shared};
use crate::error::{Error, Result};
use crate::kv::{GetOptions, Kv};
use crate::proto::etcdserverpb::RangeRequest;
use crate::proto::etcdserverpb::range_request::{SortOrder, SortTarget};

/// How long a round waits on the store before it asks for progress again: an answer that
/// came from a member behind the quorum read's revision proves too little.
const ASK_AGAIN: Duration = Duration::from_millis(50);

/// On members whose progress answers prove nothing, how long a round waits for events to
/// bring the store to the quorum read's revision before it reads the range's own proof (a
/// busy range gets there in a few milliseconds; a quiet one never does).
const EVENT_GRACE: Duration = Duration::from_millis(20);

/// A reader waiting for a round: told `true` once the store is fresh by the round's proof,
/// `false` when the round's quorum read failed (it then reads alone, to get its own error).
type Joiner = oneshot::Sender<bool>;

/// The handle readers join rounds through.
#[derive(Debug)]
pub(super) struct Rounds {
    tx: mpsc::UnboundedSender<Joiner>,
}

impl Rounds {
    /// Start the round task (it ends when this handle is dropped).
    pub(super) fn start(shared: Arc<Shared>, kv: Kv) -> Rounds {
        let (tx, rx) = mpsc::unbounded_channel();
        let prover = Arc::new(Prover { shared, kv });
        tokio::spawn(run(prover, rx));
        Rounds { tx }
    }

    /// Wait for the next round to begin and the store to be fresh by its proof: `Some(true)`
    /// when it is, `Some(false)` when the round's quorum read failed.
    async fn join(&self) -> Option<bool> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(tx).ok()?;
        rx.await.ok()
    }
}

/// A round whose proof is read and whose readers wait for the store.
struct Pending {
    proof: Proof,
    joiners: Vec<Joiner>,
}

/// The round task: at most one quorum read in flight; the readers that arrive meanwhile are
/// the next round's. Only this task watches the store for the waiting rounds, so a change of
/// the store wakes one task, not every reader.
async fn run(prover: Arc<Prover>, mut rx: mpsc::UnboundedReceiver<Joiner>) {
    let mut changed = prover.shared.subscribe();
    let mut queued: Vec<Joiner> = Vec::new();
    let mut pending: Vec<Pending> = Vec::new();
    let mut reading: Option<(Vec<Joiner>, BoxFuture<'static, Result<Proof>>)> = None;
    let mut ask_at = Instant::now() + ASK_AGAIN;
    loop {
        // Start the next round when none is reading.
        queued.retain(|j| !j.is_closed());
        if reading.is_none() && !queued.is_empty() {
            prover.shared.stats.rounds.fetch_add(1, Ordering::Relaxed);
            let p = prover.clone();
            reading = Some((
                std::mem::take(&mut queued),
                Box::pin(async move { p.prove().await }),
            ));
        }
        // Hand over the rounds that became fresh; a proof that counted on progress answers
        // from a member that no longer gives sound ones goes to the next round.
        let ordered = prover.shared.ordered();
        let mut i = 0;
        while i < pending.len() {
            pending[i].joiners.retain(|j| !j.is_closed());
            let round = &pending[i];
            if round.joiners.is_empty() {
                pending.swap_remove(i);
            } else if prover.shared.store_fresh(&round.proof) {
                for joiner in pending.swap_remove(i).joiners {
                    let _ = joiner.send(true);
                }
            } else if matches!(round.proof, Proof::Revision(_)) && ordered == Some(false) {
                queued.extend(pending.swap_remove(i).joiners);
            } else {
                i += 1;
            }
        }
        if reading.is_none() && !queued.is_empty() {
            continue;
        }
        let read = async {
            match reading.as_mut() {
                Some((_, proving)) => proving.await,
                None => std::future::pending().await,
            }
        };
        let waiting = !pending.is_empty();
        tokio::select! {
            joiner = rx.recv() => match joiner {
                Some(joiner) => {
                    queued.push(joiner);
                    while let Ok(more) = rx.try_recv() {
                        queued.push(more);
                    }
                }
                None => return,
            },
            proof = read => {
                let (joiners, _) = reading.take().expect("a read was in flight");
                match proof {
                    Ok(proof) => pending.push(Pending { proof, joiners }),
                    Err(_) => {
                        for joiner in joiners {
                            let _ = joiner.send(false);
                        }
                    }
                }
            }
            result = changed.changed() => {
                if result.is_err() {
                    return;
                }
            }
            () = tokio::time::sleep_until(ask_at), if waiting => {
                prover.shared.nudge();
                ask_at = Instant::now() + ASK_AGAIN;
            }
        }
    }
}

/// Makes the quorum reads.
struct Prover {
    shared: Arc<Shared>,
    kv: Kv,
}

impl Prover {
    async fn prove(&self) -> Result<Proof> {
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
        self.shared.set_wanted(proof.revision());
        if self.shared.store_fresh(&proof) {
            return Ok(proof);
        }
        match self.shared.ordered() {
            // Progress answers prove it: ask for one, without waiting for it to go out.
            Some(true) => {
                self.shared.nudge();
                Ok(proof)
            }
            // They prove nothing: events may still bring the store there (a busy range),
            // else the range's own proof.
            Some(false) => {
                self.shared.nudge();
                if self.events_within(&proof, EVENT_GRACE).await {
                    Ok(proof)
                } else {
                    self.unchanged().await
                }
            }
            None => match self.shared.request_progress().await {
                Sent::Ordered => Ok(proof),
                // Not sent in time (between streams), or to a member that proves nothing.
                Sent::Unordered | Sent::Not => self.unchanged().await,
            },
        }
    }

    /// Whether the store becomes fresh by `proof` within `grace`.
    async fn events_within(&self, proof: &Proof, grace: Duration) -> bool {
        let mut changed = self.shared.subscribe();
        let until = Instant::now() + grace;
        loop {
            if self.shared.store_fresh(proof) {
                return true;
            }
            match tokio::time::timeout_at(until, changed.changed()).await {
                Ok(Ok(())) => {}
                _ => return self.shared.store_fresh(proof),
            }
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
    match tokio::time::timeout_at(deadline, rounds.join()).await {
        Err(_) => Err(shared.not_fresh(shared.wanted())),
        Ok(Some(true)) => shared.check(),
        Ok(None) => Err(Error::Shutdown),
        // The round's read failed: read alone, to have its own error (or a proof).
        Ok(Some(false)) => {
            let alone = Prover {
                shared: shared.clone(),
                kv: kv.clone(),
            };
            let proof = match tokio::time::timeout_at(deadline, alone.prove()).await {
                Err(_) => return Err(shared.not_fresh(0)),
                Ok(proof) => proof?,
            };
            wait(shared, &proof, deadline).await
        }
    }
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
