//! A thin client for etcd's server-side Election service (`v3electionpb`).
//!
//! The server runs the campaign recipe for us: `campaign` blocks on the server until this
//! candidate leads. The client-side recipe with fencing and fast loss detection comes later.

use std::sync::Arc;

use crate::call::{CallOptions, Deadline, Transport};
use crate::error::Result;
use crate::proto::v3electionpb::{
    CampaignRequest, CampaignResponse, LeaderKey, LeaderRequest, LeaderResponse, ProclaimRequest,
    ProclaimResponse, ResignRequest, ResignResponse,
};
use crate::stream::ResponseStream;

/// The server-side Election service (`v3electionpb`). Get one with
/// [`Client::election`](crate::Client::election). Not to be confused with the client-side
/// recipe [`concurrency::Election`](crate::concurrency::Election).
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// let lease = client.lease().grant(10, None).await?.id;
/// let won = client.election().campaign("primary", lease, "node-1").await?;
/// let key = won.leader.expect("a leader key");
/// client.election().proclaim(key.clone(), "node-1 (ready)").await?;
/// client.election().resign(key).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ElectionService {
    transport: Arc<Transport>,
    /// Per-call options (deadline, routing, require-leader) of the calls made through it.
    call: CallOptions,
}

impl ElectionService {
    pub(crate) fn new(transport: Arc<Transport>) -> Self {
        ElectionService {
            transport,
            call: CallOptions::default(),
        }
    }

    crate::call::call_option_methods!("election");

    /// Wait (on the server, with no client deadline) until this candidate leads election
    /// `name`; its key lives as long as `lease`.
    ///
    /// With `lease` 0 the server grants a 60-second lease of its own that nobody keeps alive,
    /// so the leadership ends by itself about a minute later: pass a lease you keep alive. A
    /// lease that does not exist fails with [`Error::LeaseNotFound`](crate::Error::LeaseNotFound).
    ///
    /// ```no_run
    /// # async fn demo(e: etcd_ha::ElectionService, lease: i64) -> etcd_ha::Result<()> {
    /// let leader_key = e.campaign("primary", lease, "me").await?.leader;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn campaign(
        &self,
        name: impl Into<Vec<u8>>,
        lease: i64,
        value: impl Into<Vec<u8>>,
    ) -> Result<CampaignResponse> {
        let request = CampaignRequest {
            name: name.into(),
            lease,
            value: value.into(),
        };
        self.transport
            .call(self.call.call(Deadline::Unbounded), request)
            .await
    }

    /// Publish a new value as the leader holding `leader`. A key that no longer leads (resigned,
    /// lease gone) fails with etcd's `election: not leader`, which arrives as
    /// [`Error::Grpc`](crate::Error::Grpc) with code `Unknown`.
    ///
    /// ```no_run
    /// # async fn demo(e: etcd_ha::ElectionService, key: etcd_ha::proto::v3electionpb::LeaderKey) -> etcd_ha::Result<()> {
    /// e.proclaim(key, "new value").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn proclaim(
        &self,
        leader: LeaderKey,
        value: impl Into<Vec<u8>>,
    ) -> Result<ProclaimResponse> {
        let request = ProclaimRequest {
            leader: Some(leader),
            value: value.into(),
        };
        self.transport
            .call(self.call.call(Deadline::Default), request)
            .await
    }

    /// The current leader's key and value. An election without a leader fails with etcd's
    /// `election: no leader`, which arrives as [`Error::Grpc`](crate::Error::Grpc) with code
    /// `Unknown` (it is not [`Error::NoLeader`](crate::Error::NoLeader), which is about raft).
    ///
    /// ```no_run
    /// # async fn demo(e: etcd_ha::ElectionService) -> etcd_ha::Result<()> {
    /// let kv = e.leader("primary").await?.kv;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn leader(&self, name: impl Into<Vec<u8>>) -> Result<LeaderResponse> {
        let request = LeaderRequest { name: name.into() };
        self.transport
            .call(self.call.call(Deadline::Default), request)
            .await
    }

    /// Stream the leader's value: the current one, then every change. The call returns once
    /// the election has a leader (the server sends nothing before).
    ///
    /// ```no_run
    /// # async fn demo(e: etcd_ha::ElectionService) -> etcd_ha::Result<()> {
    /// let mut leaders = e.observe("primary").await?;
    /// while let Some(l) = leaders.message().await? { println!("{:?}", l.kv); }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn observe(
        &self,
        name: impl Into<Vec<u8>>,
    ) -> Result<ResponseStream<LeaderResponse>> {
        let request = LeaderRequest { name: name.into() };
        self.transport
            .open_server_stream(self.call.call(Deadline::Unbounded), request)
            .await
    }

    /// Give up leadership held by `leader`, so the next candidate takes over at once. Only the
    /// key is deleted, not its lease; resigning a key that no longer leads is a no-op.
    ///
    /// ```no_run
    /// # async fn demo(e: etcd_ha::ElectionService, key: etcd_ha::proto::v3electionpb::LeaderKey) -> etcd_ha::Result<()> {
    /// e.resign(key).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn resign(&self, leader: LeaderKey) -> Result<ResignResponse> {
        let request = ResignRequest {
            leader: Some(leader),
        };
        self.transport
            .call(self.call.call(Deadline::Default), request)
            .await
    }
}
