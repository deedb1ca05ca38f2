//! [`KeptLease`], the handle on a lease the keeper renews: its local expiry and the `lost`
//! signal, read from what the keeper task publishes; and the registration its clones share,
//! whose drop stops the renewal.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::Shared;
use super::state::{Lost, View};
use crate::error::{Error, Result};

/// One registration of a kept lease; renewal stops when the last [`KeptLease`] clone drops it.
pub(super) struct Handle {
    pub(super) id: i64,
    /// Which registration of `id` this is.
    pub(super) generation: u64,
    /// The keep-alive stream's slot whose task renews it (`streams.rs`).
    pub(super) slot: usize,
    /// Its share of that slot's load (`streams::rate`).
    pub(super) rate: u64,
    /// What the task publishes about the lease.
    pub(super) view: watch::Receiver<View>,
    /// To tell the task when the handle goes.
    pub(super) shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.slots[self.slot].remove(self.rate);
        self.shared.forget(self.slot, self.id, self.generation);
    }
}

impl Handle {
    /// Wait for the lease's first answer (a lease kept by id), bounded by its wait bound.
    pub(super) async fn confirmed(&self) -> Result<()> {
        let mut view = self.view.clone();
        loop {
            let deadline = {
                let v = view.borrow_and_update();
                match v.lost {
                    Some(Lost::Gone) => return Err(Error::LeaseNotFound),
                    Some(Lost::Expired) => return Err(Error::Timeout),
                    None if v.is_lost(Instant::now()) => return Err(Error::Timeout),
                    None if v.confirmed => return Ok(()),
                    None => v.expires_at,
                }
            };
            tokio::select! {
                // Past the wait bound: the loop says so.
                () = tokio::time::sleep_until(deadline) => {}
                changed = view.changed() => {
                    if changed.is_err() {
                        // The task dropped the lease without an answer: the client went away.
                        return Err(Error::Shutdown);
                    }
                }
            }
        }
    }
}

/// A lease the [`Keeper`](super::Keeper) renews. Clones share it; dropping the last clone stops
/// renewing (it does not revoke: the lease then expires after its TTL).
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// let lease = client.keeper().grant(std::time::Duration::from_secs(5)).await?;
/// tokio::select! {
///     () = lease.lost() => println!("lease {:x} lost; stop acting on it", lease.id()),
///     () = tokio::time::sleep(std::time::Duration::from_secs(60)) => lease.stop(),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct KeptLease {
    pub(super) handle: Arc<Handle>,
}

impl KeptLease {
    /// The lease id.
    ///
    /// ```no_run
    /// # fn demo(lease: etcd_ha::KeptLease) {
    /// let opts = etcd_ha::PutOptions::new().with_lease(lease.id());
    /// # }
    /// ```
    pub fn id(&self) -> i64 {
        self.handle.id
    }

    /// The TTL the server granted.
    ///
    /// ```no_run
    /// # fn demo(lease: etcd_ha::KeptLease) {
    /// println!("renewed every {:?}", lease.ttl() / 3);
    /// # }
    /// ```
    pub fn ttl(&self) -> Duration {
        self.handle.view.borrow().ttl
    }

    /// The conservative local expiry: send time of the last renewal that got an answer (or
    /// of the grant) + TTL. The server's expiry is never earlier. Final once the lease is lost.
    ///
    /// ```no_run
    /// # fn demo(lease: etcd_ha::KeptLease) {
    /// let left = lease.expires_at().saturating_duration_since(tokio::time::Instant::now());
    /// println!("safe for another {left:?} even if no renewal gets through");
    /// # }
    /// ```
    pub fn expires_at(&self) -> Instant {
        self.handle.view.borrow().expires_at
    }

    /// Whether the lease is lost: the server said it is gone, or its local expiry passed.
    ///
    /// ```no_run
    /// # fn demo(lease: etcd_ha::KeptLease) {
    /// if lease.is_expired() {
    ///     println!("no longer the holder");
    /// }
    /// # }
    /// ```
    pub fn is_expired(&self) -> bool {
        let view = self.handle.view.borrow();
        // The clock is read while the view is borrowed: see the keeper's state docs.
        view.is_lost(Instant::now())
    }

    /// Whether the lease is at risk: not lost yet, but less than a third of its TTL is left
    /// before its local expiry because its renewals have fallen behind (two renewal periods
    /// without an answer). A renewal that gets through ends it. Never true for a lease whose
    /// renewals come in time, and false again once it is lost.
    ///
    /// ```no_run
    /// # fn demo(lease: etcd_ha::KeptLease) {
    /// if lease.is_at_risk() {
    ///     println!("finish or hand off the work: the lease may be lost in {:?}",
    ///         lease.expires_at().saturating_duration_since(tokio::time::Instant::now()));
    /// }
    /// # }
    /// ```
    pub fn is_at_risk(&self) -> bool {
        let view = self.handle.view.borrow();
        view.is_at_risk(Instant::now())
    }

    /// Completes when the lease is at risk (see [`is_at_risk`](Self::is_at_risk)) or lost,
    /// whichever comes first: the warning before [`lost`](Self::lost), while a third of the
    /// TTL is still left to hand work off or stop taking more. Completes at once if it already
    /// is; never completes while renewals come in time.
    ///
    /// ```no_run
    /// # async fn demo(lease: etcd_ha::KeptLease) {
    /// lease.at_risk().await;
    /// if !lease.is_expired() {
    ///     let by = lease.expires_at();
    ///     println!("renewals fall behind; lost by {by:?} unless one gets through");
    /// }
    /// # }
    /// ```
    pub async fn at_risk(&self) {
        let mut view = self.handle.view.clone();
        loop {
            let at = {
                let v = view.borrow_and_update();
                let now = Instant::now();
                if v.is_lost(now) || v.is_at_risk(now) {
                    return;
                }
                // Unconfirmed (kept by id, no answer yet): only a change can tell.
                v.confirmed.then(|| v.at_risk_at())
            };
            let sleep = async {
                match at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = sleep => {}
                changed = view.changed() => {
                    if changed.is_err() {
                        // Nothing will renew the lease any more: at risk when its time comes.
                        match at {
                            Some(at) => tokio::time::sleep_until(at).await,
                            None => return,
                        }
                    }
                }
            }
        }
    }

    /// Completes when the lease is lost: at its local expiry if no renewal came in time
    /// (even if the client is gone by then), or as soon as the server answers that it expired
    /// or was revoked. Never completes while the lease is kept alive. Any number of tasks may
    /// wait on it.
    ///
    /// After [`stop`](Self::stop), nothing renews the lease, so this completes at its local
    /// expiry.
    ///
    /// ```no_run
    /// # async fn demo(lease: etcd_ha::KeptLease) {
    /// lease.lost().await;
    /// println!("lease {:x} lost", lease.id());
    /// # }
    /// ```
    pub async fn lost(&self) {
        let mut view = self.handle.view.clone();
        loop {
            let expires_at = {
                let v = view.borrow_and_update();
                if v.is_lost(Instant::now()) {
                    return;
                }
                v.expires_at
            };
            #[cfg(feature = "mutants")]
            if crate::mutants::lease_no_local_expiry() {
                // The bug: only the server's word ends the lease.
                if view.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
                continue;
            }
            tokio::select! {
                // The local expiry, kept by this waiter itself: it holds even if the keeper
                // task is gone.
                () = tokio::time::sleep_until(expires_at) => {}
                changed = view.changed() => {
                    if changed.is_err() {
                        // Nothing will renew the lease any more: it is lost at its expiry.
                        tokio::time::sleep_until(expires_at).await;
                    }
                }
            }
        }
    }

    /// Stop renewing the lease, for every clone (it is not revoked; it expires after its TTL,
    /// which [`lost`](Self::lost) then reports).
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client, lease: etcd_ha::KeptLease) -> etcd_ha::Result<()> {
    /// lease.stop();
    /// client.lease().revoke(lease.id()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn stop(&self) {
        self.handle
            .shared
            .stop(self.handle.slot, self.handle.id, self.handle.generation);
    }

    /// Renewals answered so far (for tests).
    ///
    /// ```no_run
    /// # fn demo(lease: etcd_ha::KeptLease) {
    /// println!("renewed {} times", lease.renewals());
    /// # }
    /// ```
    #[doc(hidden)]
    pub fn renewals(&self) -> u64 {
        self.handle.view.borrow().renewals
    }
}

impl fmt::Debug for KeptLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let view = *self.handle.view.borrow();
        f.debug_struct("KeptLease")
            .field("id", &format_args!("{:x}", self.handle.id))
            .field("ttl", &view.ttl)
            .field("expires_at", &view.expires_at)
            .field("lost", &view.lost)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Weak;

    use super::*;

    /// A handle on a lease the test controls through the returned sender; no task, no client.
    fn handle(view: View) -> (KeptLease, watch::Sender<View>) {
        let (tx, rx) = watch::channel(view);
        let shared = Arc::new(Shared::new(Weak::new(), 1, 1));
        let handle = Arc::new(Handle {
            id: 1,
            generation: 1,
            slot: 0,
            rate: 1,
            view: rx,
            shared,
        });
        (KeptLease { handle }, tx)
    }

    fn view(expires_in: Duration) -> View {
        View {
            ttl: Duration::from_secs(6),
            expires_at: Instant::now() + expires_in,
            confirmed: true,
            renewals: 0,
            lost: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn lost_fires_exactly_at_the_local_expiry() {
        let (lease, _tx) = handle(view(Duration::from_secs(6)));
        let expires = lease.expires_at();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let lease = lease.clone();
                tokio::spawn(async move {
                    lease.lost().await;
                    Instant::now()
                })
            })
            .collect();
        for w in waiters {
            assert_eq!(w.await.unwrap(), expires);
        }
        assert!(lease.is_expired());
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_moves_the_waiters_on() {
        let (lease, tx) = handle(view(Duration::from_secs(6)));
        let waiter = tokio::spawn({
            let lease = lease.clone();
            async move {
                lease.lost().await;
                Instant::now()
            }
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        let renewed = Instant::now() + Duration::from_secs(6);
        tx.send_modify(|v| v.expires_at = renewed);
        assert_eq!(waiter.await.unwrap(), renewed);
    }

    #[tokio::test(start_paused = true)]
    async fn gone_fires_at_once_and_a_dropped_task_still_expires() {
        let (lease, tx) = handle(view(Duration::from_secs(6)));
        let start = Instant::now();
        tx.send_modify(|v| v.lost = Some(Lost::Gone));
        lease.lost().await;
        assert_eq!(Instant::now(), start);

        // The task gone (sender dropped) without a verdict: lost at the expiry all the same.
        let (lease, tx) = handle(view(Duration::from_secs(6)));
        drop(tx);
        lease.lost().await;
        assert_eq!(Instant::now(), start + Duration::from_secs(6));
    }

    #[tokio::test(start_paused = true)]
    async fn at_risk_fires_a_third_of_the_ttl_before_the_expiry_and_a_renewal_puts_it_off() {
        let (lease, tx) = handle(view(Duration::from_secs(6)));
        let start = Instant::now();
        let waiter = tokio::spawn({
            let lease = lease.clone();
            async move {
                lease.at_risk().await;
                Instant::now()
            }
        });
        // Renewed at 2 s: the next risk moves to 8 s - 2 s.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(!lease.is_at_risk());
        tx.send_modify(|v| v.expires_at = start + Duration::from_secs(8));
        assert_eq!(waiter.await.unwrap(), start + Duration::from_secs(6));
        assert!(lease.is_at_risk());
        assert!(!lease.is_expired());
        // Lost: no longer at risk, and at_risk() completes at once.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(lease.is_expired() && !lease.is_at_risk());
        lease.at_risk().await;
        assert_eq!(Instant::now(), start + Duration::from_secs(8));
    }

    #[tokio::test(start_paused = true)]
    async fn at_risk_completes_when_the_server_says_gone_and_waits_for_the_first_answer() {
        let (lease, tx) = handle(view(Duration::from_secs(6)));
        let start = Instant::now();
        tx.send_modify(|v| v.lost = Some(Lost::Gone));
        lease.at_risk().await;
        assert_eq!(Instant::now(), start);

        // Kept by id, no answer yet: its wait bound says nothing of risk.
        let mut unconfirmed = view(Duration::from_secs(1));
        unconfirmed.confirmed = false;
        let (lease, tx) = handle(unconfirmed);
        assert!(!lease.is_at_risk());
        let waiter = tokio::spawn({
            let lease = lease.clone();
            async move { lease.at_risk().await }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!waiter.is_finished());
        tx.send_modify(|v| {
            v.confirmed = true;
            v.expires_at = start + Duration::from_millis(500) + Duration::from_secs(6);
        });
        waiter.await.unwrap();
        assert_eq!(
            Instant::now(),
            start + Duration::from_millis(500) + Duration::from_secs(4)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn keep_waits_for_the_first_answer_within_its_bound() {
        let mut unconfirmed = view(Duration::from_secs(5));
        unconfirmed.confirmed = false;
        let (lease, tx) = handle(unconfirmed);
        let answer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            tx.send_modify(|v| v.confirmed = true);
            tx
        });
        lease.handle.confirmed().await.unwrap();
        let _tx = answer.await.unwrap();

        let (lease, _tx) = handle(unconfirmed);
        assert!(matches!(
            lease.handle.confirmed().await,
            Err(Error::Timeout)
        ));
        let (lease, tx) = handle(unconfirmed);
        tx.send_modify(|v| v.lost = Some(Lost::Gone));
        assert!(matches!(
            lease.handle.confirmed().await,
            Err(Error::LeaseNotFound)
        ));
    }
}
