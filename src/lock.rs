//! A thin client for etcd's server-side Lock service (`v3lockpb`).

use std::sync::Arc;

use crate::call::{CallOptions, Deadline, Transport};
use crate::error::Result;
use crate::proto::v3lockpb::{LockRequest, LockResponse, UnlockRequest, UnlockResponse};

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
    /// Per-call options (deadline, routing, require-leader) of the calls made through it.
    call: CallOptions,
}

impl Lock {
    pub(crate) fn new(transport: Arc<Transport>) -> Self {
        Lock {
            transport,
            call: CallOptions::default(),
        }
    }

    crate::call::call_option_methods!("lock");

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
            .call(self.call.call(Deadline::Unbounded), request)
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
            .call(self.call.call(Deadline::Default), request)
            .await
    }
}
