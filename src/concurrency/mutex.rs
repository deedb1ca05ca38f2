//! [`Mutex`]: etcd's client-side lock recipe. Waiters queue under a prefix, each watching only
//! its predecessor; the oldest key holds the lock.

use super::cleanup::Cleanups;
use super::election::first_created;
use super::fence::Fence;
use super::keys::{key_of, prefix_of, range_kvs, revision, show};
use super::pending::Pending;
use super::queue::{delete_if, key_gone_error, spawn_delete, wait_turn};
use crate::Session;
use crate::client::Client;
use crate::error::Result;
use crate::kv::{GetOptions, PutOptions};
use crate::txn::{Compare, CompareOp, Txn, TxnOp};

/// A distributed lock called `name`, held by [`Session`]s (etcd's `concurrency.Mutex`; keys are
/// `name/<lease id in hex>`, so Go clients can share the lock).
///
/// The lock is held by the session whose key under the prefix is the oldest. It is released by
/// [`MutexGuard::unlock`], by dropping the guard, or when the session's lease ends (closed,
/// or lost after its holder died): the key goes with the lease. Guard the holder's writes with
/// [`MutexGuard::txn`].
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use std::time::Duration;
/// use etcd_ha::Session;
/// use etcd_ha::concurrency::Mutex;
///
/// let session = Session::new(&client, Duration::from_secs(10)).await?;
/// let mutex = Mutex::new("locks/reindex");
/// let guard = mutex.lock(&session).await?; // waits for our turn
/// // ... work, fenced with guard.txn(...) ...
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Mutex {
    /// The lock's name.
    name: Vec<u8>,
    /// `name` + "/": every waiter's key is under it.
    prefix: Vec<u8>,
}

impl Mutex {
    /// The lock called `name`.
    ///
    /// ```
    /// let mutex = etcd_ha::concurrency::Mutex::new("locks/reindex");
    /// assert_eq!(mutex.name(), b"locks/reindex");
    /// ```
    pub fn new(name: impl Into<Vec<u8>>) -> Mutex {
        let name = name.into();
        Mutex {
            prefix: prefix_of(&name),
            name,
        }
    }

    /// The lock's name.
    ///
    /// ```
    /// assert_eq!(etcd_ha::concurrency::Mutex::new("l").name(), b"l");
    /// ```
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// Take the lock for `session`, waiting for the holder and every earlier waiter.
    ///
    /// Fails with [`Error::LeaseNotFound`](crate::Error::LeaseNotFound) if the session's lease
    /// is lost (or its key deleted) while waiting. If the session already holds or waits for
    /// this lock, its key is reused.
    ///
    /// # Cancellation
    ///
    /// Dropping the future while it waits withdraws from the queue: the key is deleted in a
    /// background task on the current runtime (else it goes with the session's lease). The
    /// session's next lock of this mutex waits for that delete first.
    ///
    /// ```no_run
    /// # async fn demo(session: etcd_ha::Session) -> etcd_ha::Result<()> {
    /// let guard = etcd_ha::concurrency::Mutex::new("locks/a").lock(&session).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self, session: &Session) -> Result<MutexGuard> {
        let (guard, owner) = self.enqueue(session).await?;
        if !owner {
            // From here on, the guard's Drop withdraws the key if we fail or are dropped.
            let turn = wait_turn(
                session.client(),
                &self.prefix,
                guard.key(),
                guard.create_revision(),
            );
            tokio::select! {
                r = turn => r?,
                () = session.done() => return Err(key_gone_error()),
            }
        }
        if session.lease().is_expired() {
            // The last answer (the enqueue's own, when nobody was ahead) came after the
            // session's local expiry: the key may be gone, so the lock is not reported held.
            // The guard's Drop withdraws it if it is not.
            return Err(key_gone_error());
        }
        tracing::debug!(key = %show(guard.key()), "lock acquired");
        Ok(guard)
    }

    /// Take the lock if nobody holds it or waits for it; `None` (and nothing left behind)
    /// otherwise.
    ///
    /// ```no_run
    /// # async fn demo(session: etcd_ha::Session) -> etcd_ha::Result<()> {
    /// match etcd_ha::concurrency::Mutex::new("locks/a").try_lock(&session).await? {
    ///     Some(guard) => guard.unlock().await?,
    ///     None => println!("busy"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(&self, session: &Session) -> Result<Option<MutexGuard>> {
        let (guard, owner) = self.enqueue(session).await?;
        if owner {
            return Ok(Some(guard));
        }
        guard.unlock().await?;
        Ok(None)
    }

    /// Put the session's key (or find it) and tell whether it is the oldest:
    /// `If(create_revision(key) == 0) Then(put key, get oldest) Else(get key, get oldest)`.
    async fn enqueue(&self, session: &Session) -> Result<(MutexGuard, bool)> {
        let client = session.client();
        let lease_id = session.lease_id();
        let key = key_of(&self.prefix, lease_id);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(key.clone(), "", PutOptions::new().with_lease(lease_id)),
                TxnOp::get(self.prefix.clone(), first_created()),
            ])
            .or_else([
                TxnOp::get(key.clone(), GetOptions::new()),
                TxnOp::get(self.prefix.clone(), first_created()),
            ]);
        // An earlier lock of this session that was dropped may still be deleting the key in
        // the background: it would delete the one we put (or find) now.
        session.cleanups().settled(&key).await;
        // Until the answer is in hand, a drop or an ambiguous failure withdraws the key.
        let (pending, answer) = Pending::send(client, txn, &key, lease_id, session.cleanups());
        let resp = answer.await?;
        let create_revision = if resp.succeeded {
            revision(&resp)
        } else {
            match range_kvs(&resp, 0).first() {
                Some(kv) => kv.create_revision,
                None => return Err(key_gone_error()),
            }
        };
        let owner = range_kvs(&resp, 1)
            .first()
            .is_some_and(|kv| kv.create_revision == create_revision);
        let guard = MutexGuard {
            client: client.clone(),
            fence: Fence::new(key, create_revision),
            released: false,
            cleanups: session.cleanups().clone(),
        };
        pending.settle();
        Ok((guard, owner))
    }
}

/// A held [`Mutex`]: the holder's key and create revision (its fence).
///
/// Dropping it unlocks in a background task (best effort); [`unlock`](Self::unlock) unlocks and
/// waits. If the session's lease ends first, the lock is released with it, and fenced writes
/// of this guard fail from then on.
///
/// ```no_run
/// # async fn demo(guard: etcd_ha::concurrency::MutexGuard, client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use etcd_ha::{PutOptions, Txn, TxnOp};
/// let write = guard.txn(Txn::new().and_then([TxnOp::put("reindex/progress", "50%", PutOptions::new())]));
/// if !client.kv().txn(write).await?.succeeded {
///     // The lock was lost (session expired): stop working.
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct MutexGuard {
    client: Client,
    /// Our key and its create revision.
    fence: Fence,
    /// Unlocked already: Drop does nothing.
    released: bool,
    /// The session's background deletions, which Drop's deletion joins.
    cleanups: Cleanups,
}

impl MutexGuard {
    /// The holder's key (`name/<lease id in hex>`).
    ///
    /// ```no_run
    /// # fn demo(guard: etcd_ha::concurrency::MutexGuard) {
    /// println!("{}", String::from_utf8_lossy(guard.key()));
    /// # }
    /// ```
    pub fn key(&self) -> &[u8] {
        self.fence.key()
    }

    /// The revision at which the holder's key was created.
    ///
    /// ```no_run
    /// # fn demo(guard: etcd_ha::concurrency::MutexGuard) {
    /// let rev = guard.create_revision();
    /// # }
    /// ```
    pub fn create_revision(&self) -> i64 {
        self.fence.create_revision()
    }

    /// The fence of this lock (key and create revision).
    ///
    /// ```no_run
    /// # fn demo(guard: etcd_ha::concurrency::MutexGuard) {
    /// let compare = guard.fence().compare();
    /// # }
    /// ```
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// `txn`, run only while we hold the lock (see [`Fence::guard`]).
    ///
    /// ```no_run
    /// # fn demo(guard: etcd_ha::concurrency::MutexGuard) {
    /// use etcd_ha::{PutOptions, Txn, TxnOp};
    /// let txn = guard.txn(Txn::new().and_then([TxnOp::put("k", "v", PutOptions::new())]));
    /// # }
    /// ```
    pub fn txn(&self, txn: Txn) -> Txn {
        self.fence.guard(txn)
    }

    /// Release the lock: delete our key (if it still has our create revision). Succeeds also
    /// when the lock was lost already.
    ///
    /// ```no_run
    /// # async fn demo(guard: etcd_ha::concurrency::MutexGuard) -> etcd_ha::Result<()> {
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        self.released = true;
        delete_if(&self.client, self.fence.key(), self.fence.create_revision()).await?;
        Ok(())
    }
}

impl Drop for MutexGuard {
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
