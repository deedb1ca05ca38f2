//! A thin client for etcd's server-side Lock service (`v3lockpb`).

use std::sync::Arc;
use std::time::Duration;

use crate::call::{Deadline, Target, Transport};
use crate::error::Result;
use crate::proto::v3lockpb::{LockRequest, LockResponse, UnlockRequest, UnlockResponse};
use crate::rpc::Rpc;

/// The Lock service. Get one with [`Client::lock`](crate::Client::lock).
///
/// A lock is a key under `name` owned by a lease: it is released by [`unlock`](Self::unlock),
/// or when the lease expires or is revoked; waiters take it in the order they asked.
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// let lease = client.lease().grant(10, None).await?.id;
/// let held = client.lock().lock("jobs/cleanup", lease).await?;
/// // ... critical section; guard writes with a Txn on held.key's create revision ...
/// client.lock().unlock(held.key).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Lock {
    transport: Arc<Transport>,
    /// The caller's own deadline for every call made through this handle.
    timeout: Option<Duration>,
}

impl Lock {
    pub(crate) fn new(transport: Arc<Transport>) -> Self {
        Lock {
            transport,
            timeout: None,
        }
    }

    /// The same handle with its own deadline for every call made through it, instead of the
    /// client's request timeout (also for calls that otherwise wait without one, such as a
    /// lock or a campaign). Hedging and retries follow this deadline: a short one still gets
    /// a hedge at a third of it.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.lock().with_timeout(Duration::from_secs(10));
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Wait (on the server, with no client deadline) until the lock `name` is held for `lease`;
    /// the response's `key` is the ownership key, `<name>/<lease id in hex>`.
    ///
    /// With `lease` 0 the server grants a 60-second lease of its own that nobody keeps alive,
    /// so the lock goes away by itself about a minute later: pass a lease you keep alive.
    /// A lease that does not exist (expired, revoked) fails with
    /// [`Error::LeaseNotFound`](crate::Error::LeaseNotFound).
    ///
    /// ```no_run
    /// # async fn demo(l: etcd_ha::Lock, lease: i64) -> etcd_ha::Result<()> {
    /// let key = l.lock("my-lock", lease).await?.key;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self, name: impl Into<Vec<u8>>, lease: i64) -> Result<LockResponse> {
        let request = LockRequest {
            name: name.into(),
            lease,
        };
        self.transport
            .unary(
                Rpc::Lock,
                Target::Any,
                Deadline::Unbounded.within(self.timeout),
                request,
                |c, r| async move { c.lock().lock(r).await },
            )
            .await
    }

    /// Release the lock owned through `key`. This is a plain delete of `key`: releasing a lock
    /// that is not held (or a key that never was a lock) succeeds and changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(l: etcd_ha::Lock, key: Vec<u8>) -> etcd_ha::Result<()> {
    /// l.unlock(key).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unlock(&self, key: impl Into<Vec<u8>>) -> Result<UnlockResponse> {
        let request = UnlockRequest { key: key.into() };
        self.transport
            .unary(
                Rpc::Unlock,
                Target::Any,
                Deadline::Default.within(self.timeout),
                request,
                |c, r| async move { c.lock().unlock(r).await },
            )
            .await
    }
}
