//! The Lease service: grant, revoke, time to live, list, and the raw keep-alive stream.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::call::{CallOptions, Deadline, Transport};
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::proto::etcdserverpb::{
    LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse,
    LeaseLeasesRequest, LeaseLeasesResponse, LeaseRevokeRequest, LeaseRevokeResponse,
    LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
};
use crate::stream::ResponseStream;

/// The Lease service. Get one with [`Client::lease`](crate::Client::lease).
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// let lease = client.lease().grant(10, None).await?;
/// client.kv().put("ephemeral", "x", etcd_ha::PutOptions::new().with_lease(lease.id)).await?;
/// client.lease().revoke(lease.id).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Lease {
    transport: Arc<Transport>,
    /// Per-call options (deadline, routing, require-leader) of the calls made through it.
    call: CallOptions,
    /// The client's namespace: a lease's keys are listed stripped of it, other keys left out.
    namespace: Option<Namespace>,
}

impl Lease {
    pub(crate) fn new(transport: Arc<Transport>, namespace: Option<Namespace>) -> Self {
        Lease {
            transport,
            call: CallOptions::default(),
            namespace,
        }
    }

    crate::call::call_option_methods!("lease");

    /// Grant a lease of `ttl` seconds, with this id or one chosen by the server.
    ///
    /// etcd raises TTLs below its minimum (1.5 x election timeout, 2 s by default); the granted
    /// TTL is in the response. A TTL above [`MAX_LEASE_TTL`](crate::MAX_LEASE_TTL) is refused
    /// with [`Error::LeaseTtlTooLarge`](crate::Error::LeaseTtlTooLarge) before it is sent.
    ///
    /// ```no_run
    /// # async fn demo(lease: etcd_ha::Lease) -> etcd_ha::Result<()> {
    /// let granted = lease.grant(5, None).await?;
    /// println!("lease {:x} ttl {}", granted.id, granted.ttl);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn grant(&self, ttl: i64, id: Option<i64>) -> Result<LeaseGrantResponse> {
        let request = LeaseGrantRequest {
            ttl: crate::keeper::checked_ttl_secs(ttl)?,
            id: id.unwrap_or(0),
        };
        self.transport
            .call(self.call.call(Deadline::Default), request)
            .await
    }

    /// Revoke a lease: every key attached to it is deleted.
    ///
    /// ```no_run
    /// # async fn demo(lease: etcd_ha::Lease, id: i64) -> etcd_ha::Result<()> {
    /// lease.revoke(id).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn revoke(&self, id: i64) -> Result<LeaseRevokeResponse> {
        let request = LeaseRevokeRequest { id };
        self.transport
            .call(self.call.call(Deadline::Default), request)
            .await
    }

    /// Remaining and granted TTL of a lease (`ttl == -1` when it expired or never existed), and
    /// its keys when `keys` is set. Through a namespaced client
    /// ([`Client::with_namespace`](crate::Client::with_namespace)) the keys are those of its
    /// namespace, without the prefix; keys the lease holds elsewhere are left out.
    ///
    /// ```no_run
    /// # async fn demo(lease: etcd_ha::Lease, id: i64) -> etcd_ha::Result<()> {
    /// let info = lease.time_to_live(id, true).await?;
    /// println!("{} s left, {} keys", info.ttl, info.keys.len());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn time_to_live(&self, id: i64, keys: bool) -> Result<LeaseTimeToLiveResponse> {
        let request = LeaseTimeToLiveRequest { id, keys };
        let mut resp = self
            .transport
            .call(self.call.call(Deadline::Default), request)
            .await?;
        if let Some(ns) = &self.namespace {
            resp.keys = ns.lease_keys(std::mem::take(&mut resp.keys));
        }
        Ok(resp)
    }

    /// Every lease the cluster holds.
    ///
    /// ```no_run
    /// # async fn demo(lease: etcd_ha::Lease) -> etcd_ha::Result<()> {
    /// let ids: Vec<i64> = lease.leases().await?.leases.iter().map(|l| l.id).collect();
    /// # Ok(())
    /// # }
    /// ```
    pub async fn leases(&self) -> Result<LeaseLeasesResponse> {
        self.transport
            .call(self.call.call(Deadline::Default), LeaseLeasesRequest {})
            .await
    }

    /// Open the raw keep-alive stream and send a first keep-alive for `id`.
    ///
    /// Send more keep-alives (for this or other leases) with the returned [`KeepAliveSender`];
    /// each answer carries the lease's new TTL, `ttl <= 0` meaning it is gone. Nothing here renews
    /// on a timer or reconnects: that is the job of the managed [`Keeper`](crate::Keeper).
    ///
    /// ```no_run
    /// # async fn demo(lease: etcd_ha::Lease) -> etcd_ha::Result<()> {
    /// let id = lease.grant(5, None).await?.id;
    /// let (sender, mut answers) = lease.keep_alive(id).await?;
    /// let first = answers.message().await?.expect("an answer");
    /// assert!(first.ttl > 0);
    /// sender.keep_alive(id).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn keep_alive(
        &self,
        id: i64,
    ) -> Result<(KeepAliveSender, ResponseStream<LeaseKeepAliveResponse>)> {
        let (tx, stream) = self
            .transport
            .open_bidi(
                self.call.call(Deadline::Default),
                LeaseKeepAliveRequest { id },
            )
            .await?;
        Ok((KeepAliveSender { tx }, stream))
    }
}

/// The sending half of a raw keep-alive stream: one renewal per call, no timer, no reconnect
/// (the managed [`Keeper`](crate::Keeper) does those).
///
/// ```no_run
/// # async fn demo(sender: etcd_ha::KeepAliveSender, id: i64) -> etcd_ha::Result<()> {
/// sender.keep_alive(id).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct KeepAliveSender {
    /// Feeds the stream opened by [`Lease::keep_alive`].
    tx: mpsc::Sender<LeaseKeepAliveRequest>,
}

impl KeepAliveSender {
    /// Ask for one renewal of `id`; the answer arrives on the response stream.
    ///
    /// ```no_run
    /// # async fn demo(sender: etcd_ha::KeepAliveSender) -> etcd_ha::Result<()> {
    /// sender.keep_alive(0x1234).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn keep_alive(&self, id: i64) -> Result<()> {
        self.tx
            .send(LeaseKeepAliveRequest { id })
            .await
            .map_err(|_| Error::StreamClosed)
    }
}
