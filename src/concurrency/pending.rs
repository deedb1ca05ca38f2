//! The guard of a queue key whose put is in flight: the campaign of an [`Election`] or the
//! enqueue of a [`Mutex`] puts the session's key in a txn, and until its answer is in hand
//! nothing else knows the key may exist.
//!
//! Without it, a caller that drops the future while the txn is in flight (the
//! `timeout(d, election.campaign(..))` the docs show), or a txn that fails ambiguously after it
//! was applied, left the key behind: the session keeps it alive, and every other candidate
//! waits behind it for the session's whole life (38 of 112 campaigns timed out at 0-2 ms did).
//! Armed before the txn goes out, the guard withdraws the key when dropped unless the answer
//! came and a [`Leader`](super::Leader) or [`MutexGuard`](super::MutexGuard) took the key over.
//!
//! The withdrawal is a txn that deletes the key only while it carries this session's lease: a
//! key the txn never wrote is left alone unless it is this session's own (one campaign per
//! session and name at a time, as the recipes' docs ask).
//!
//! The withdrawal comes *after* the put. A txn dropped in flight may still be applied by the
//! server, and a delete sent at once can overtake it: it deleted nothing, the put landed, and
//! the key was orphaned anyway (the robustness suite's given-up campaigns found it: a lock
//! given up after 0-3 ms left its key for the session's life). So the txn goes out from a task
//! of its own ([`Pending::send`]), which the caller's drop does not cancel, and the withdrawal
//! waits for its answer. When that answer is an error, the put may still be in the server's
//! pipeline: the withdrawal is made again [`SWEEP_AFTER`] later.
//!
//! [`Election`]: super::Election
//! [`Mutex`]: super::Mutex

use std::time::Duration;

use tokio::sync::watch;
use tracing::Instrument;

use super::cleanup::Cleanups;
use super::keys::show;
use super::queue::idempotent_txn;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::kv::DeleteOptions;
use crate::proto::etcdserverpb::TxnResponse;
use crate::txn::{Compare, CompareOp, Txn, TxnOp};

/// After a put that ended in an error, the withdrawal is made again this much later: a
/// proposal the server already took is applied or dropped within a few election timeouts.
pub(crate) const SWEEP_AFTER: Duration = Duration::from_secs(2);

/// How the put ended, as the withdrawal needs it: not yet (`None`), answered, or failed.
type Outcome = Option<bool>;

/// A key put under `lease_id` whose answer is owed; withdrawn on drop unless settled.
#[derive(Debug)]
pub(crate) struct Pending {
    client: Client,
    key: Vec<u8>,
    lease_id: i64,
    armed: bool,
    /// The session's deletions in flight: a withdrawal counts among them until it is done.
    cleanups: Cleanups,
    /// The put's outcome (`Some(true)`: answered), set by the task that sends it.
    outcome: watch::Receiver<Outcome>,
}

impl Pending {
    /// Sends `txn`, which puts `key` under `lease_id`, from a task of its own, guarded: the
    /// caller awaits its answer through the handle, and whoever drops first, the key is
    /// withdrawn once the txn is done, unless [`settle`](Self::settle)d. The caller waited for
    /// `cleanups` of `key` first.
    pub(crate) fn send(
        client: &Client,
        txn: Txn,
        key: &[u8],
        lease_id: i64,
        cleanups: &Cleanups,
    ) -> (Self, impl Future<Output = Result<TxnResponse>> + use<>) {
        let (tx, outcome) = watch::channel(None);
        let kv = client.kv();
        let sent = tokio::spawn(async move {
            let resp = kv.txn(txn).await;
            tx.send_replace(Some(resp.is_ok()));
            resp
        });
        let pending = Pending {
            client: client.clone(),
            key: key.to_vec(),
            lease_id,
            armed: true,
            cleanups: cleanups.clone(),
            outcome,
        };
        // A task that did not finish was aborted with the runtime: the client is going away.
        let answer = async move { sent.await.map_err(|_| Error::Shutdown)? };
        (pending, answer)
    }

    /// The answer came and another guard owns the key now: nothing to withdraw.
    pub(crate) fn settle(mut self) {
        self.armed = false;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (client, key, lease_id) = (self.client.clone(), self.key.clone(), self.lease_id);
        let mut outcome = self.outcome.clone();
        // Registered now, before the caller can campaign again: that campaign waits for it.
        let cleanup = self.cleanups.begin(&key);
        let span = tracing::debug_span!("etcd_ha::withdraw", key = %show(&key));
        runtime.spawn(
            async move {
                // After the put, never before it: a delete that overtakes it deletes nothing.
                // (A closed channel is a put task that is gone: nothing more can come.)
                let answered = outcome
                    .wait_for(Option::is_some)
                    .await
                    .is_ok_and(|o| *o == Some(true));
                withdraw_logged(&client, &key, lease_id).await;
                if !answered {
                    tokio::time::sleep(SWEEP_AFTER).await;
                    withdraw_logged(&client, &key, lease_id).await;
                }
                drop(cleanup);
            }
            .instrument(span),
        );
    }
}

async fn withdraw_logged(client: &Client, key: &[u8], lease_id: i64) {
    match withdraw(client, key, lease_id).await {
        Ok(true) => tracing::debug!("withdrew a key whose put was abandoned"),
        Ok(false) => {}
        Err(e) => {
            let what = "could not withdraw the key; it goes with its lease";
            tracing::warn!(error = %e, "{what}");
        }
    }
}

/// Delete `key` if it carries `lease_id`; says whether it did. Idempotent, so retried.
async fn withdraw(client: &Client, key: &[u8], lease_id: i64) -> Result<bool> {
    let txn = Txn::new()
        .when([Compare::lease(key.to_vec(), CompareOp::Equal, lease_id)])
        .and_then([TxnOp::delete(key.to_vec(), DeleteOptions::new())]);
    idempotent_txn(client, txn).await
}
