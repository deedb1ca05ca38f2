//! [`Election`]: etcd's client-side election recipe. Candidates queue under a prefix, each
//! watching only its predecessor; the oldest key leads.

use super::cleanup::Cleanups;
use super::fence::Fence;
use super::keys::{key_of, prefix_of, range_kvs, revision, show};
use super::observe::Observe;
use super::pending::Pending;
use super::queue::{delete_if, key_gone_error, spawn_delete, wait_turn};
use crate::Session;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::kv::{GetOptions, PutOptions, SortOrder, SortTarget};
use crate::proto::mvccpb::KeyValue;
use crate::txn::{Compare, CompareOp, Txn, TxnOp};

/// An election among the sessions that campaign under `name` (etcd's `concurrency.Election`;
/// keys are `name/<lease id in hex>`, so Go candidates can share the election).
///
/// A candidate's key lives as long as its session's lease. The candidate whose key was created
/// first leads; the others wait in create-revision order, each watching only the key just
/// before its own, so a resignation wakes one candidate, not all.
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use std::time::Duration;
/// use etcd_ha::Session;
/// use etcd_ha::concurrency::Election;
///
/// let session = Session::new(&client, Duration::from_secs(10)).await?;
/// let election = Election::new(&client, "jobs/scheduler");
/// let leader = election.campaign(&session, "node-a").await?; // waits for our turn
/// leader.proclaim("node-a, epoch 2").await?;
/// leader.resign().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Election {
    client: Client,
    /// The election's name.
    name: Vec<u8>,
    /// `name` + "/": every candidate's key is under it.
    prefix: Vec<u8>,
}

impl Election {
    /// The election called `name`.
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// let election = etcd_ha::concurrency::Election::new(&client, "jobs/scheduler");
    /// # }
    /// ```
    pub fn new(client: &Client, name: impl Into<Vec<u8>>) -> Election {
        let name = name.into();
        Election {
            client: client.clone(),
            prefix: prefix_of(&name),
            name,
        }
    }

    /// The election's name.
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// let election = etcd_ha::concurrency::Election::new(&client, "e");
    /// assert_eq!(election.name(), b"e");
    /// # }
    /// ```
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// Join the election with `value` and wait until this session leads.
    ///
    /// Puts the session's key (`If(create_revision(key) == 0) Then(put) Else(get)`; if the
    /// session already campaigned, its key is reused and, if the value differs, proclaimed),
    /// then waits until every key created before it is gone, watching only its predecessor.
    ///
    /// Fails with [`Error::LeaseNotFound`] if the session's lease is lost (or its key deleted)
    /// while waiting.
    ///
    /// # Cancellation
    ///
    /// Dropping the returned future at any point (for instance in `tokio::select!` or under
    /// `tokio::time::timeout`), even while the txn that puts the key is in flight, withdraws
    /// the candidacy: the key is deleted in a background task on the current runtime
    /// (conditionally, on its create revision, or while the txn's answer is owed, on the
    /// session's lease). The same happens when the campaign fails, ambiguously too. If that
    /// delete cannot run (no runtime, etcd unreachable), the key goes with the session's
    /// lease. The session's next campaign in this election waits for that delete first (it
    /// would otherwise delete the new campaign's key), so campaigning again at once after a
    /// timeout is safe. Run one campaign per session and election at a time: they share the
    /// session's key.
    ///
    /// ```no_run
    /// # async fn demo(election: etcd_ha::concurrency::Election, session: etcd_ha::Session) -> etcd_ha::Result<()> {
    /// use std::time::Duration;
    /// match tokio::time::timeout(Duration::from_secs(30), election.campaign(&session, "me")).await {
    ///     Ok(leader) => { let _leader = leader?; /* lead */ }
    ///     Err(_) => { /* not our turn within 30 s; our key is already being removed */ }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn campaign(&self, session: &Session, value: impl Into<Vec<u8>>) -> Result<Leader> {
        let value = value.into();
        let lease_id = session.lease_id();
        let key = key_of(&self.prefix, lease_id);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                value.clone(),
                PutOptions::new().with_lease(lease_id),
            )])
            .or_else([TxnOp::get(key.clone(), GetOptions::new())]);
        // An earlier campaign of this session that was dropped may still be deleting the key
        // in the background: it would delete the one we put (or find) now.
        session.cleanups().settled(&key).await;
        // Until the answer is in hand, a drop or an ambiguous failure withdraws the key.
        let (pending, answer) =
            Pending::send(&self.client, txn, &key, lease_id, session.cleanups());
        let resp = answer.await?;
        let mut leader = Leader {
            client: self.client.clone(),
            fence: Fence::new(key, revision(&resp)),
            lease_id,
            released: false,
            cleanups: session.cleanups().clone(),
        };
        pending.settle();
        if !resp.succeeded {
            // Our session campaigned before: take its key over.
            let Some(existing) = range_kvs(&resp, 0).first() else {
                leader.released = true;
                return Err(key_gone_error());
            };
            leader.fence = Fence::new(existing.key.clone(), existing.create_revision);
            if existing.value != value {
                leader.proclaim(value).await?;
            }
        }
        // From here on, `leader`'s Drop withdraws the key if we fail or are dropped.
        let fence = &leader.fence;
        let turn = wait_turn(
            &self.client,
            &self.prefix,
            fence.key(),
            fence.create_revision(),
        );
        tokio::select! {
            r = turn => r?,
            () = session.done() => return Err(key_gone_error()),
        }
        if session.lease().is_expired() {
            // The turn's read was answered after the session's local expiry (this process
            // stalled: both branches were ready at once): the key may be gone by now.
            return Err(key_gone_error());
        }
        tracing::debug!(key = %show(leader.key()), "election won");
        Ok(leader)
    }

    /// The current leader's key-value (the oldest candidate), `None` when nobody campaigns.
    ///
    /// ```no_run
    /// # async fn demo(election: etcd_ha::concurrency::Election) -> etcd_ha::Result<()> {
    /// if let Some(kv) = election.leader().await? {
    ///     println!("leader says {}", String::from_utf8_lossy(&kv.value));
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn leader(&self) -> Result<Option<KeyValue>> {
        let resp = self
            .client
            .kv()
            .get(self.prefix.clone(), first_created())
            .await?;
        Ok(resp.kvs.into_iter().next())
    }

    /// A stream of the leader: the current one first (once there is one), then every change,
    /// a new leader or a new value proclaimed. Follows failover and compaction by itself; ends
    /// with an error only when no retry can help. Dropping it stops the watching.
    ///
    /// ```no_run
    /// # async fn demo(election: etcd_ha::concurrency::Election) -> etcd_ha::Result<()> {
    /// use futures_util::StreamExt;
    /// let mut leaders = election.observe();
    /// while let Some(leader) = leaders.next().await {
    ///     println!("leader: {}", String::from_utf8_lossy(&leader?.value));
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn observe(&self) -> Observe {
        Observe::start(self.client.clone(), self.prefix.clone())
    }
}

/// The read of the oldest key under a prefix.
pub(crate) fn first_created() -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1)
}

/// The leadership won by [`Election::campaign`]: the leader's key and its fence.
///
/// Dropping it resigns (in a background task, best effort); [`resign`](Self::resign) does it
/// and waits. Closing or losing the session ends the leadership too (the key goes with the
/// lease); guard writes with [`txn`](Self::txn) so an ex-leader's writes fail.
///
/// ```no_run
/// # async fn demo(leader: etcd_ha::concurrency::Leader, client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use etcd_ha::{PutOptions, Txn, TxnOp};
/// let write = leader.txn(Txn::new().and_then([TxnOp::put("jobs/next", "42", PutOptions::new())]));
/// assert!(client.kv().txn(write).await?.succeeded, "still the leader");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Leader {
    client: Client,
    /// Our key and its create revision.
    fence: Fence,
    /// The session's lease, which proclaims keep the key on.
    lease_id: i64,
    /// Resigned already (or nothing to resign): Drop does nothing.
    released: bool,
    /// The session's background deletions, which Drop's deletion joins.
    cleanups: Cleanups,
}

impl Leader {
    /// The leader's key (`name/<lease id in hex>`).
    ///
    /// ```no_run
    /// # fn demo(leader: etcd_ha::concurrency::Leader) {
    /// println!("{}", String::from_utf8_lossy(leader.key()));
    /// # }
    /// ```
    pub fn key(&self) -> &[u8] {
        self.fence.key()
    }

    /// The revision at which the leader's key was created.
    ///
    /// ```no_run
    /// # fn demo(leader: etcd_ha::concurrency::Leader) {
    /// let rev = leader.create_revision();
    /// # }
    /// ```
    pub fn create_revision(&self) -> i64 {
        self.fence.create_revision()
    }

    /// The fence of this leadership (key and create revision).
    ///
    /// ```no_run
    /// # fn demo(leader: etcd_ha::concurrency::Leader) {
    /// let compare = leader.fence().compare();
    /// # }
    /// ```
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// `txn`, run only while we lead (see [`Fence::guard`]).
    ///
    /// ```no_run
    /// # fn demo(leader: etcd_ha::concurrency::Leader) {
    /// use etcd_ha::{PutOptions, Txn, TxnOp};
    /// let txn = leader.txn(Txn::new().and_then([TxnOp::put("k", "v", PutOptions::new())]));
    /// # }
    /// ```
    pub fn txn(&self, txn: Txn) -> Txn {
        self.fence.guard(txn)
    }

    /// Publish a new value as leader, without another election. Fails with [`Error::Fenced`]
    /// if we no longer lead.
    ///
    /// ```no_run
    /// # async fn demo(leader: etcd_ha::concurrency::Leader) -> etcd_ha::Result<()> {
    /// leader.proclaim("serving on :8081").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn proclaim(&self, value: impl Into<Vec<u8>>) -> Result<()> {
        let txn = self.txn(Txn::new().and_then([TxnOp::put(
            self.key().to_vec(),
            value.into(),
            PutOptions::new().with_lease(self.lease_id),
        )]));
        if self.client.kv().txn(txn).await?.succeeded {
            Ok(())
        } else {
            Err(Error::Fenced {
                key: self.key().to_vec(),
            })
        }
    }

    /// Step down: delete our key (if it still has our create revision), handing the leadership
    /// to the next candidate in line. Succeeds also when we had lost it already.
    ///
    /// ```no_run
    /// # async fn demo(leader: etcd_ha::concurrency::Leader) -> etcd_ha::Result<()> {
    /// leader.resign().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn resign(mut self) -> Result<()> {
        self.released = true;
        delete_if(&self.client, self.fence.key(), self.fence.create_revision()).await?;
        Ok(())
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        if !self.released {
            spawn_delete(
                self.client.clone(),
                self.fence.key().to_vec(),
                self.fence.create_revision(),
                &self.cleanups,
            );
        }
    }
}
