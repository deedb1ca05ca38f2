//! [`Leadership`]: PD-style leadership. One leader key, created with a lease of its own if
//! absent; followers watch the current leader and campaign again when it is gone; a frequency
//! guard stops a candidate that keeps winning and losing.
//!
//! ```text
//!           ┌──────────── acquire() ─────────────┐
//!           v                                    │
//!     current leader? ──yes──> watch(leader) ────┘  (key deleted/changed,
//!           │ no                                     etcd unavailable > bound)
//!           v
//!     campaign(): grant lease, txn If(create_revision(key) == 0) Then(put key) Else(get key)
//!           │ won                      │ lost: watch the winner
//!           v
//!     LeadershipHeld ── lost() ──> (caller) acquire() again
//! ```

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::current::{Campaign, CurrentLeader};
use super::health::unavailable_for;
use super::hold::{LeadershipHeld, LostReason, changed};
use super::keys::{range_kvs, revision, show};
use super::limit::CampaignLimit;
use super::queue::{RETRY_PAUSE, follow_key, revoke_until_gone};
use crate::KeptLease;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::kv::{GetOptions, PutOptions};
use crate::proto::mvccpb::KeyValue;
use crate::txn::{Compare, CompareOp, Txn, TxnOp};

/// Default TTL of the leader's lease.
///
/// 5 s: PD's `defaultLeaderLease`. A dead leader is replaced within about this long (plus an
/// etcd election timeout when the etcd leader died with it); renewals every TTL/3 leave room for
/// two lost renewals before the lease runs out.
///
/// ```
/// assert_eq!(etcd_ha::concurrency::DEFAULT_LEADERSHIP_TTL, std::time::Duration::from_secs(5));
/// ```
pub const DEFAULT_LEADERSHIP_TTL: Duration = Duration::from_secs(5);

/// Default time etcd may be unavailable (no endpoint healthy) before a leader steps down and a
/// follower stops waiting for the leader it watches.
///
/// 3 s: longer than an etcd leader election (1-2 s at etcd's defaults) so that one does not
/// cost the leadership, and shorter than the default TTL, so a leader cut off from etcd steps
/// down before its lease can run out on the server and somebody else can lead.
///
/// ```
/// assert_eq!(etcd_ha::concurrency::DEFAULT_UNAVAILABLE_BOUND, std::time::Duration::from_secs(3));
/// ```
pub const DEFAULT_UNAVAILABLE_BOUND: Duration = Duration::from_secs(3);

/// Default number of won campaigns allowed within [`DEFAULT_CAMPAIGN_WINDOW`]: PD's
/// `campaignLeaderFrequencyTimes`.
///
/// ```
/// assert_eq!(etcd_ha::concurrency::DEFAULT_CAMPAIGN_LIMIT, 3);
/// ```
pub const DEFAULT_CAMPAIGN_LIMIT: usize = 3;

/// Default window of the campaign limit: PD's `campaignTimesRecordTimeout`.
///
/// ```
/// assert_eq!(etcd_ha::concurrency::DEFAULT_CAMPAIGN_WINDOW, std::time::Duration::from_secs(5 * 60));
/// ```
pub const DEFAULT_CAMPAIGN_WINDOW: Duration = Duration::from_secs(5 * 60);

/// Grants per campaign when the first ones come back with too little of their TTL left.
const FRESH_LEASE_ATTEMPTS: usize = 3;

/// PD-style leadership of one key.
///
/// [`campaign`](Self::campaign) grants a fresh lease (kept alive by the client's keeper) and
/// creates the leader key with it in one txn, if the key is absent. There is no queue: a
/// follower [`watch`](Self::watch)es the current leader and campaigns again once it is gone.
/// [`acquire`](Self::acquire) is that loop. The winner's [`LeadershipHeld::lost`] fires on
/// anything that makes the leadership doubtful, before the lease can run out on the server, so
/// an old leader knows it is one before a new leader can exist.
///
/// # The campaign guard
///
/// A candidate that wins more than [`DEFAULT_CAMPAIGN_LIMIT`] times within
/// [`DEFAULT_CAMPAIGN_WINDOW`] (PD's 3 in 5 minutes) flaps; its next campaign fails with
/// [`Error::CampaignTooFrequent`], which says when it may try again, so the other candidates
/// can lead meanwhile. Only wins count (see why in the limit's module docs). Change it with
/// [`with_campaign_limit`](Self::with_campaign_limit); clones share the record.
///
/// # Example: the usual loop
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use etcd_ha::Error;
/// use etcd_ha::concurrency::Leadership;
///
/// let leadership = Leadership::new(&client, "svc/leader", "node-a");
/// loop {
///     let held = match leadership.acquire().await {
///         Ok(held) => held,
///         Err(Error::CampaignTooFrequent { retry_after, .. }) => {
///             tokio::time::sleep(retry_after).await;
///             continue;
///         }
///         Err(e) => return Err(e),
///     };
///     tokio::select! {
///         reason = held.lost() => eprintln!("lost leadership: {reason}"),
///         _ = lead(&held) => {}
///     }
/// }
/// # }
/// # async fn lead(_: &etcd_ha::concurrency::LeadershipHeld) {}
/// ```
#[derive(Clone, Debug)]
pub struct Leadership {
    client: Client,
    /// The leader key.
    key: Vec<u8>,
    /// What the leader writes into it (who it is).
    value: Vec<u8>,
    /// TTL of each campaign's lease.
    ttl: Duration,
    /// How long etcd may be unavailable before a leader steps down or a watch gives up.
    unavailable_bound: Duration,
    /// The campaign guard, shared by clones.
    limit: Arc<std::sync::Mutex<CampaignLimit>>,
}

impl Leadership {
    /// Leadership of `key`, campaigning with `value` (name the candidate in it), with the
    /// defaults: [`DEFAULT_LEADERSHIP_TTL`], [`DEFAULT_UNAVAILABLE_BOUND`] and the campaign
    /// guard.
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// let leadership = etcd_ha::concurrency::Leadership::new(&client, "svc/leader", "node-a:8080");
    /// # }
    /// ```
    pub fn new(client: &Client, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        Leadership {
            client: client.clone(),
            key: key.into(),
            value: value.into(),
            ttl: DEFAULT_LEADERSHIP_TTL,
            unavailable_bound: DEFAULT_UNAVAILABLE_BOUND,
            limit: Arc::new(std::sync::Mutex::new(CampaignLimit::new(
                DEFAULT_CAMPAIGN_LIMIT,
                DEFAULT_CAMPAIGN_WINDOW,
            ))),
        }
    }

    /// TTL of the leader's lease (etcd rounds it up to whole seconds and to its minimum, 1.5 x
    /// its election timeout). Default [`DEFAULT_LEADERSHIP_TTL`].
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// use std::time::Duration;
    /// let l = etcd_ha::concurrency::Leadership::new(&client, "k", "v").with_ttl(Duration::from_secs(3));
    /// # }
    /// ```
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long etcd may be unavailable (no endpoint of the client healthy and, for the leader,
    /// no lease renewal answered) before the leader steps down and a follower's
    /// [`watch`](Self::watch) returns. Keep it below the TTL.
    /// Default [`DEFAULT_UNAVAILABLE_BOUND`].
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// use std::time::Duration;
    /// let l = etcd_ha::concurrency::Leadership::new(&client, "k", "v")
    ///     .with_unavailable_bound(Duration::from_secs(2));
    /// # }
    /// ```
    pub fn with_unavailable_bound(mut self, bound: Duration) -> Self {
        self.unavailable_bound = bound;
        self
    }

    /// At most `max` won campaigns within `window`; further campaigns fail with
    /// [`Error::CampaignTooFrequent`]. Default [`DEFAULT_CAMPAIGN_LIMIT`] in
    /// [`DEFAULT_CAMPAIGN_WINDOW`].
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// use std::time::Duration;
    /// let l = etcd_ha::concurrency::Leadership::new(&client, "k", "v")
    ///     .with_campaign_limit(5, Duration::from_secs(600));
    /// # }
    /// ```
    pub fn with_campaign_limit(mut self, max: usize, window: Duration) -> Self {
        self.limit = Arc::new(std::sync::Mutex::new(CampaignLimit::new(max, window)));
        self
    }

    /// No campaign limit.
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// let l = etcd_ha::concurrency::Leadership::new(&client, "k", "v").without_campaign_limit();
    /// # }
    /// ```
    pub fn without_campaign_limit(mut self) -> Self {
        self.limit = Arc::new(std::sync::Mutex::new(CampaignLimit::off()));
        self
    }

    /// The leader key.
    ///
    /// ```no_run
    /// # fn demo(l: etcd_ha::concurrency::Leadership) {
    /// assert!(!l.key().is_empty());
    /// # }
    /// ```
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The current leader, read linearizably; `None` when nobody leads.
    ///
    /// ```no_run
    /// # async fn demo(l: etcd_ha::concurrency::Leadership) -> etcd_ha::Result<()> {
    /// let leader = l.current().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn current(&self) -> Result<Option<CurrentLeader>> {
        let resp = self
            .client
            .kv()
            .get(self.key.clone(), GetOptions::new())
            .await?;
        let revision = resp.header.as_ref().map_or(0, |h| h.revision);
        Ok(resp
            .kvs
            .into_iter()
            .next()
            .map(|kv| CurrentLeader { kv, revision }))
    }

    /// Campaign once: grant a lease of the configured TTL and, in one txn, create the leader key
    /// with it if the key is absent. Won: the lease is kept alive and watched (see
    /// [`LeadershipHeld`]). Lost: the lease is revoked and the current leader returned, to
    /// [`watch`](Self::watch). Fails with [`Error::CampaignTooFrequent`] when the campaign guard
    /// says so (nothing is sent then).
    ///
    /// ```no_run
    /// # async fn demo(l: etcd_ha::concurrency::Leadership) -> etcd_ha::Result<()> {
    /// use etcd_ha::concurrency::Campaign;
    /// if let Campaign::Won(held) = l.campaign().await? {
    ///     held.lost().await;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn campaign(&self) -> Result<Campaign> {
        self.check_limit()?;
        let lease = self.fresh_lease().await?;
        let txn = Txn::new()
            .when([Compare::create_revision(
                self.key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then([TxnOp::put(
                self.key.clone(),
                self.value.clone(),
                PutOptions::new().with_lease(lease.id()),
            )])
            .or_else([TxnOp::get(self.key.clone(), GetOptions::new())]);
        let resp = match self.client.kv().txn(txn).await {
            Ok(resp) => resp,
            Err(e) => {
                // The put may have happened; revoking the lease undoes it.
                self.abandon(lease);
                return Err(e);
            }
        };
        let revision = revision(&resp);
        if resp.succeeded && lease.is_expired() {
            // Won on the server, but the lease's local expiry passed before the answer came
            // (this process stalled: a pause longer than the TTL): the key may already be
            // gone, so never report it held. Revoking undoes the put if it is not.
            tracing::warn!(
                key = %show(&self.key),
                revision,
                "campaign won after its lease expired"
            );
            self.abandon(lease);
            return Err(Error::Timeout);
        }
        if resp.succeeded {
            self.limit_record();
            let kv = KeyValue {
                key: self.key.clone(),
                create_revision: revision,
                mod_revision: revision,
                version: 1,
                value: self.value.clone(),
                lease: lease.id(),
            };
            tracing::info!(key = %show(&self.key), revision, "leadership won");
            let held = LeadershipHeld::start(
                self.client.clone(),
                kv,
                revision,
                lease,
                self.unavailable_bound,
            );
            return Ok(Campaign::Won(held));
        }
        self.abandon(lease);
        match range_kvs(&resp, 0).first() {
            Some(kv) => Ok(Campaign::Lost(CurrentLeader {
                kv: kv.clone(),
                revision,
            })),
            // The compare failed, so the key existed at this revision, and the txn's get read
            // that very revision: etcd never answers this.
            None => Err(Error::Grpc(tonic::Status::internal(
                "campaign txn failed but its get found no leader key",
            ))),
        }
    }

    /// Follow `leader` until it is gone: its key deleted or changed, or etcd unavailable for
    /// longer than the bound (then the leader may be gone without our seeing it; read and
    /// campaign again). Survives member failures, reconnects and compaction (a delete that was
    /// compacted away is found by reading the key again). Errors only when no retry can help.
    ///
    /// ```no_run
    /// # async fn demo(l: etcd_ha::concurrency::Leadership) -> etcd_ha::Result<()> {
    /// if let Some(leader) = l.current().await? {
    ///     let why = l.watch(&leader).await?;
    ///     println!("leader gone: {why}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn watch(&self, leader: &CurrentLeader) -> Result<LostReason> {
        let mine = &leader.kv;
        let gone = follow_key(
            &self.client,
            &mine.key,
            leader.revision.saturating_add(1),
            |kv| changed(kv, mine),
        );
        let unavailable = unavailable_for(&self.client, self.unavailable_bound, || None);
        tokio::select! {
            r = gone => r,
            duration = unavailable => Ok(LostReason::EtcdUnavailable { duration }),
        }
    }

    /// Lead: campaign, and while somebody else leads, watch them and campaign again when they
    /// are gone. Returns the won leadership, or the first error no retry can fix (including
    /// [`Error::CampaignTooFrequent`]). Retryable errors (etcd unavailable, ...) are retried
    /// after a short pause; each call inside has the client's own deadline and fail-over.
    ///
    /// ```no_run
    /// # async fn demo(l: etcd_ha::concurrency::Leadership) -> etcd_ha::Result<()> {
    /// let held = l.acquire().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self) -> Result<LeadershipHeld> {
        loop {
            let leader = match self.current().await {
                Ok(Some(leader)) => leader,
                Ok(None) => match self.campaign().await {
                    Ok(Campaign::Won(held)) => return Ok(held),
                    Ok(Campaign::Lost(leader)) => leader,
                    Err(e) if e.is_retryable() => {
                        tracing::debug!(error = %e, "campaign failed; trying again");
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue;
                    }
                    Err(e) => return Err(e),
                },
                Err(e) if e.is_retryable() => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            match self.watch(&leader).await {
                Ok(reason) => tracing::debug!(%reason, "leader gone"),
                Err(e) if e.is_retryable() => tokio::time::sleep(RETRY_PAUSE).await,
                Err(e) => return Err(e),
            }
        }
    }

    /// Fail with [`Error::CampaignTooFrequent`] if the guard refuses a campaign now.
    fn check_limit(&self) -> Result<()> {
        let mut limit = self.limit.lock().unwrap_or_else(|e| e.into_inner());
        let settings = limit.settings();
        match (limit.check(Instant::now()), settings) {
            (Err(retry_after), Some((max, window))) => Err(Error::CampaignTooFrequent {
                max,
                window,
                retry_after,
            }),
            _ => Ok(()),
        }
    }

    /// Record a won campaign with the guard.
    fn limit_record(&self) {
        let mut limit = self.limit.lock().unwrap_or_else(|e| e.into_inner());
        limit.record(Instant::now());
    }

    /// A newly granted lease with most of its TTL ahead of it.
    ///
    /// The keeper counts a lease's first local expiry from when the grant was *sent*; a grant
    /// sent during an outage and answered only once etcd is back (the client retries it inside
    /// the call) may be nearly expired on arrival, and winning with it would lose the
    /// leadership right away. Such a lease is given up and granted again, which with etcd back
    /// takes milliseconds.
    async fn fresh_lease(&self) -> Result<KeptLease> {
        let mut attempt = 1;
        loop {
            let lease = self.client.keeper().grant(self.ttl).await?;
            let left = lease.expires_at().saturating_duration_since(Instant::now());
            if left >= lease.ttl() / 2 || attempt == FRESH_LEASE_ATTEMPTS {
                return Ok(lease);
            }
            tracing::debug!(?left, "the grant took long; granting again");
            self.abandon(lease);
            attempt += 1;
        }
    }

    /// Give up a lease we did not win with: stop renewing and revoke it in the background.
    fn abandon(&self, lease: KeptLease) {
        lease.stop();
        let client = self.client.clone();
        let give_up = Instant::now() + lease.ttl();
        tokio::spawn(async move { revoke_until_gone(&client, lease.id(), give_up).await });
    }
}
