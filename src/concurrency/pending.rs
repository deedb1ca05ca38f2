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
//! [`Election`]: super::Election
//! [`Mutex`]: super::Mutex

use tracing::Instrument;

use super::cleanup::Cleanups;
use super::keys::show;
use super::queue::idempotent_txn;
use crate::client::Client;
use crate::error::Result;
use crate::kv::DeleteOptions;
use crate::txn::{Compare, CompareOp, Txn, TxnOp};

/// A key put under `lease_id` whose answer is owed; withdrawn on drop unless settled.
#[derive(Debug)]
pub(crate) struct Pending {
    client: Client,
    key: Vec<u8>,
    lease_id: i64,
    armed: bool,
    /// The session's deletions in flight: a withdrawal counts among them until it is done.
    cleanups: Cleanups,
}

impl Pending {
    /// Armed: the txn putting `key` under `lease_id` is about to go out. The caller waited
    /// for `cleanups` of `key` first.
    pub(crate) fn arm(client: &Client, key: &[u8], lease_id: i64, cleanups: &Cleanups) -> Self {
        Pending {
            client: client.clone(),
            key: key.to_vec(),
            lease_id,
            armed: true,
            cleanups: cleanups.clone(),
        }
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
        // Registered now, before the caller can campaign again: that campaign waits for it.
        let cleanup = self.cleanups.begin(&key);
        let span = tracing::debug_span!("etcd_ha::withdraw", key = %show(&key));
        runtime.spawn(
            async move {
                match withdraw(&client, &key, lease_id).await {
                    Ok(true) => tracing::debug!("withdrew a key whose put was abandoned"),
                    Ok(false) => {}
                    Err(e) => {
                        let what = "could not withdraw the key; it goes with its lease";
                        tracing::warn!(error = %e, "{what}");
                    }
                }
                drop(cleanup);
            }
            .instrument(span),
        );
    }
}

/// Delete `key` if it carries `lease_id`; says whether it did. Idempotent, so retried.
async fn withdraw(client: &Client, key: &[u8], lease_id: i64) -> Result<bool> {
    let txn = Txn::new()
        .when([Compare::lease(key.to_vec(), CompareOp::Equal, lease_id)])
        .and_then([TxnOp::delete(key.to_vec(), DeleteOptions::new())]);
    idempotent_txn(client, txn).await
}
