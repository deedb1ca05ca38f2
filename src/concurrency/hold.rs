//! [`LeadershipHeld`]: a won leadership, the task that watches everything that can end it, and
//! [`LostReason`], what did.
//!
//! ```text
//!  campaign won ──> monitor task ──select──> key deleted / changed        (managed watch)
//!                                 ├────────> lease lost / local expiry    (KeptLease)
//!                                 ├────────> etcd unavailable > bound     (endpoint health)
//!                                 └────────> handle dropped / resigned
//!                        │
//!                        └─> publish LostReason (lost() completes) ─> stop renewing ─> revoke
//! ```

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::fence::Fence;
use super::health::unavailable_for;
use super::keys::show;
use super::queue::{follow_key, revoke_until_gone};
use crate::KeptLease;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::proto::mvccpb::KeyValue;
use crate::txn::Txn;

/// How long after losing leadership the old holder keeps trying to revoke its lease (beyond the
/// lease's TTL).
///
/// 30 s: long enough to ride out a full cluster restart, after which etcd extends every lease by
/// its TTL again, so that the next leader need not wait for our lease to run out; after that the
/// lease is surely gone or about to go by itself.
const RELEASE_GIVE_UP: Duration = Duration::from_secs(30);

/// Why a leadership ended (or, for a follower's watch, why the leader it watched is gone).
///
/// ```
/// use etcd_ha::concurrency::LostReason;
/// fn should_page(reason: &LostReason) -> bool {
///     matches!(reason, LostReason::EtcdUnavailable { .. } | LostReason::WatchFailed(_))
/// }
/// assert!(!should_page(&LostReason::KeyDeleted));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum LostReason {
    /// The leader key was deleted: resigned, revoked, or its lease expired on the server.
    KeyDeleted,
    /// The leader key was re-created or overwritten (different create revision, lease or value).
    KeyChanged,
    /// The lease expired: the server said so, or its conservative local expiry passed without a
    /// renewal (the server's expiry is never earlier).
    LeaseExpired,
    /// No endpoint was healthy (and, for a leader, no lease renewal was answered) for this
    /// long, more than the configured bound.
    EtcdUnavailable {
        /// How long etcd had been unavailable when this was decided.
        duration: Duration,
    },
    /// [`LeadershipHeld::resign`] was called.
    Resigned,
    /// Watching the key failed in a way no retry can fix (permission denied, client shut down).
    WatchFailed(Arc<Error>),
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::KeyDeleted => f.write_str("the leader key was deleted"),
            LostReason::KeyChanged => f.write_str("the leader key was changed by someone else"),
            LostReason::LeaseExpired => f.write_str("the lease expired"),
            LostReason::EtcdUnavailable { duration } => {
                write!(f, "etcd was unavailable for {duration:?}")
            }
            LostReason::Resigned => f.write_str("resigned"),
            LostReason::WatchFailed(e) => write!(f, "watching the leader key failed: {e}"),
        }
    }
}

/// Whether `now` (`None`: deleted) is still the leader key `mine`; why not otherwise.
pub(crate) fn changed(now: Option<&KeyValue>, mine: &KeyValue) -> Option<LostReason> {
    match now {
        None => Some(LostReason::KeyDeleted),
        Some(kv)
            if kv.create_revision != mine.create_revision
                || kv.lease != mine.lease
                || kv.value != mine.value =>
        {
            Some(LostReason::KeyChanged)
        }
        Some(_) => None,
    }
}

/// A won leadership (from [`Leadership::campaign`](super::Leadership::campaign) or
/// [`acquire`](super::Leadership::acquire)).
///
/// While it exists, a task keeps its lease alive and watches for anything that ends it;
/// [`lost`](Self::lost) completes when something did. Guard the leader's writes with
/// [`txn`](Self::txn). Dropping it gives the leadership up: renewal stops and the lease is
/// revoked in the background (so the leader key goes at once); [`resign`](Self::resign) does
/// the same and waits for it.
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use etcd_ha::concurrency::Leadership;
/// let held = Leadership::new(&client, "svc/leader", "me").acquire().await?;
/// tokio::select! {
///     reason = held.lost() => println!("stepping down: {reason}"),
///     _ = serve_as_leader(&held) => {}
/// }
/// # Ok(())
/// # }
/// # async fn serve_as_leader(_: &etcd_ha::concurrency::LeadershipHeld) {}
/// ```
pub struct LeadershipHeld {
    /// For `resign`'s revoke.
    client: Client,
    /// The leader key and its create revision.
    fence: Fence,
    /// The value we wrote.
    value: Vec<u8>,
    /// Our lease, kept alive by the client's keeper while this (or the monitor) holds a clone.
    lease: KeptLease,
    /// Set once, by the monitor, when the leadership is lost.
    lost: watch::Receiver<Option<LostReason>>,
    /// Cancelled on drop and resign: stops the monitor.
    stop: CancellationToken,
    /// Set by `resign`, so the stopped monitor leaves the revoke to it.
    resigned: Arc<AtomicBool>,
}

impl LeadershipHeld {
    /// Start watching a leadership just won: `kv` is the leader key as written, read at
    /// `revision`.
    pub(crate) fn start(
        client: Client,
        kv: KeyValue,
        revision: i64,
        lease: KeptLease,
        unavailable_bound: Duration,
    ) -> LeadershipHeld {
        let (lost_tx, lost) = watch::channel(None);
        let stop = CancellationToken::new();
        let resigned = Arc::new(AtomicBool::new(false));
        let fence = Fence::new(kv.key.clone(), kv.create_revision);
        let span = tracing::info_span!("etcd_ha::leadership", key = %show(&kv.key));
        let value = kv.value.clone();
        let monitor = Monitor {
            client: client.clone(),
            mine: kv,
            from_revision: revision.saturating_add(1),
            lease: lease.clone(),
            unavailable_bound,
            lost: lost_tx,
            stop: stop.clone(),
            resigned: resigned.clone(),
        };
        tokio::spawn(monitor.run().instrument(span));
        LeadershipHeld {
            client,
            fence,
            value,
            lease,
            lost,
            stop,
            resigned,
        }
    }

    /// The leader key.
    ///
    /// ```no_run
    /// # fn demo(held: etcd_ha::concurrency::LeadershipHeld) {
    /// println!("leading as {}", String::from_utf8_lossy(held.key()));
    /// # }
    /// ```
    pub fn key(&self) -> &[u8] {
        self.fence.key()
    }

    /// The value written to the leader key.
    ///
    /// ```no_run
    /// # fn demo(held: etcd_ha::concurrency::LeadershipHeld) {
    /// let me = held.value();
    /// # }
    /// ```
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The revision at which the leader key was created by this campaign.
    ///
    /// ```no_run
    /// # fn demo(held: etcd_ha::concurrency::LeadershipHeld) {
    /// let term = held.create_revision(); // grows with every new leader
    /// # }
    /// ```
    pub fn create_revision(&self) -> i64 {
        self.fence.create_revision()
    }

    /// The lease the leader key is attached to.
    ///
    /// ```no_run
    /// # fn demo(held: etcd_ha::concurrency::LeadershipHeld) {
    /// println!("lease {:x}", held.lease_id());
    /// # }
    /// ```
    pub fn lease_id(&self) -> i64 {
        self.lease.id()
    }

    /// The lease's conservative local expiry: the send time of the last answered renewal plus
    /// the TTL. etcd cannot expire the lease earlier, so until then nobody else can lead.
    ///
    /// ```no_run
    /// # fn demo(held: etcd_ha::concurrency::LeadershipHeld) {
    /// let left = held.expires_at().saturating_duration_since(tokio::time::Instant::now());
    /// # }
    /// ```
    pub fn expires_at(&self) -> Instant {
        self.lease.expires_at()
    }

    /// The fence of this leadership: the leader key and its create revision.
    ///
    /// ```no_run
    /// # fn demo(held: etcd_ha::concurrency::LeadershipHeld) {
    /// let fence = held.fence();
    /// let compare = fence.compare(); // for your own txn
    /// # }
    /// ```
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// `txn` guarded by this leadership: it runs its `and_then` branch only if the leader key
    /// still exists with our create revision (see [`Fence::guard`]).
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client, held: etcd_ha::concurrency::LeadershipHeld) -> etcd_ha::Result<()> {
    /// use etcd_ha::{PutOptions, Txn, TxnOp};
    /// let write = held.txn(Txn::new().and_then([TxnOp::put("svc/epoch", "7", PutOptions::new())]));
    /// let applied = client.kv().txn(write).await?.succeeded;
    /// # Ok(())
    /// # }
    /// ```
    pub fn txn(&self, txn: Txn) -> Txn {
        self.fence.guard(txn)
    }

    /// Whether the leadership is known to be lost, or the lease is past its local expiry.
    /// Cheap; check it before acting as leader, and use [`txn`](Self::txn) for the writes.
    ///
    /// ```no_run
    /// # fn demo(held: etcd_ha::concurrency::LeadershipHeld) {
    /// if held.is_lost() {
    ///     return;
    /// }
    /// # }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lost.borrow().is_some() || Instant::now() >= self.lease.expires_at()
    }

    /// Completes when the leadership is lost, with the reason: the leader key deleted or
    /// changed, the lease lost or past its local expiry, or etcd unavailable for longer than the
    /// bound. Never completes while all is well. Cancel-safe; may be awaited any number of times.
    ///
    /// ```no_run
    /// # async fn demo(held: etcd_ha::concurrency::LeadershipHeld) {
    /// let reason = held.lost().await;
    /// eprintln!("lost leadership: {reason}");
    /// # }
    /// ```
    pub async fn lost(&self) -> LostReason {
        let mut lost = self.lost.clone();
        match lost.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or(LostReason::Resigned),
            // The monitor is gone without a word: only when the runtime shuts down.
            Err(_) => LostReason::WatchFailed(Arc::new(Error::Shutdown)),
        }
    }

    /// Give the leadership up now: stop renewing and revoke the lease, which deletes the
    /// leader key, so a follower can take over at once. Succeeds also when the lease was
    /// already gone.
    ///
    /// ```no_run
    /// # async fn demo(held: etcd_ha::concurrency::LeadershipHeld) -> etcd_ha::Result<()> {
    /// held.resign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn resign(self) -> Result<()> {
        self.resigned.store(true, Ordering::SeqCst);
        self.stop.cancel();
        self.lease.stop();
        match self.client.lease().revoke(self.lease.id()).await {
            Ok(_) | Err(Error::LeaseNotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl Drop for LeadershipHeld {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl fmt::Debug for LeadershipHeld {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeadershipHeld")
            .field("key", &show(self.fence.key()))
            .field("create_revision", &self.fence.create_revision())
            .field("lease", &format_args!("{:x}", self.lease.id()))
            .field("lost", &*self.lost.borrow())
            .finish()
    }
}

/// The task behind a [`LeadershipHeld`]: waits for the first thing that ends the leadership,
/// publishes it, and releases the lease.
struct Monitor {
    client: Client,
    /// The leader key as we wrote it.
    mine: KeyValue,
    /// Where the watch of the leader key starts: just after our campaign.
    from_revision: i64,
    /// Our lease; the monitor's clone keeps it renewed while the handle lives.
    lease: KeptLease,
    /// How long etcd may be unavailable before we step down.
    unavailable_bound: Duration,
    /// Where the reason goes.
    lost: watch::Sender<Option<LostReason>>,
    /// Cancelled when the handle is dropped or resigns.
    stop: CancellationToken,
    /// Set when the handle resigned (and revokes by itself).
    resigned: Arc<AtomicBool>,
}

impl Monitor {
    async fn run(self) {
        let deleted = follow_key(&self.client, &self.mine.key, self.from_revision, |kv| {
            changed(kv, &self.mine)
        });
        let last_ok = || last_renewal(&self.lease);
        let unavailable = unavailable_for(&self.client, self.unavailable_bound, last_ok);
        let reason = tokio::select! {
            // The handle is gone (dropped) or resigning.
            () = self.stop.cancelled() => None,
            // The leader key was deleted or changed (the managed watch fails over by itself).
            r = deleted => Some(r.unwrap_or_else(|e| LostReason::WatchFailed(Arc::new(e)))),
            // The server said the lease is gone, or the keeper gave up on it.
            () = self.lease.lost() => Some(LostReason::LeaseExpired),
            // The conservative local expiry passed without a renewal.
            () = local_expiry(&self.lease) => Some(LostReason::LeaseExpired),
            // Every endpoint unhealthy, and no renewal answered, for longer than the bound.
            duration = unavailable => Some(LostReason::EtcdUnavailable { duration }),
        };
        if let Some(reason) = reason {
            tracing::warn!(%reason, "leadership lost");
            self.lost.send_replace(Some(reason));
        }
        self.lease.stop();
        if !self.resigned.load(Ordering::SeqCst) {
            // Delete the leader key with the lease, so that the next leader (maybe us again)
            // need not wait for the TTL; during an outage, as soon as etcd is back.
            let give_up = Instant::now() + self.lease.ttl() + RELEASE_GIVE_UP;
            revoke_until_gone(&self.client, self.lease.id(), give_up).await;
        }
    }
}

/// When the last renewal of `lease` that got an answer was sent (or the grant, before any).
fn last_renewal(lease: &KeptLease) -> Option<Instant> {
    lease.expires_at().checked_sub(lease.ttl())
}

/// Completes when `lease` is past its local expiry (which renewals push forward).
async fn local_expiry(lease: &KeptLease) {
    loop {
        let at = lease.expires_at();
        if Instant::now() >= at {
            return;
        }
        tokio::time::sleep_until(at).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(create_revision: i64, lease: i64, value: &str) -> KeyValue {
        KeyValue {
            key: b"leader".to_vec(),
            create_revision,
            mod_revision: create_revision,
            version: 1,
            value: value.as_bytes().to_vec(),
            lease,
        }
    }

    #[test]
    fn classifies_leader_key_states() {
        let mine = kv(10, 7, "me");
        assert!(changed(Some(&mine), &mine).is_none());
        // A later put with the same content (version bump) is still ours.
        let mut bumped = mine.clone();
        bumped.version = 2;
        bumped.mod_revision = 12;
        assert!(changed(Some(&bumped), &mine).is_none());
        assert!(matches!(changed(None, &mine), Some(LostReason::KeyDeleted)));
        for other in [kv(11, 7, "me"), kv(10, 8, "me"), kv(10, 7, "you")] {
            assert!(matches!(
                changed(Some(&other), &mine),
                Some(LostReason::KeyChanged)
            ));
        }
    }
}
