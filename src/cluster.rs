//! The Cluster service: list, add (as voter or learner), remove, update and promote members.

use std::sync::Arc;

use crate::call::{CallOptions, Deadline, Transport};
use crate::error::Result;
use crate::proto::etcdserverpb::{
    MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse,
    MemberPromoteRequest, MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse,
    MemberUpdateRequest, MemberUpdateResponse,
};

/// The Cluster service. Get one with [`Client::cluster`](crate::Client::cluster).
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// for m in client.cluster().member_list().await?.members {
///     println!("{:x} {} {:?} learner={}", m.id, m.name, m.client_ur_ls, m.is_learner);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Cluster {
    transport: Arc<Transport>,
    /// Per-call options (deadline, routing, require-leader) of the calls made through it.
    call: CallOptions,
}

impl Cluster {
    pub(crate) fn new(transport: Arc<Transport>) -> Self {
        Cluster {
            transport,
            call: CallOptions::default(),
        }
    }

    crate::call::call_option_methods!("cluster");

    /// The members, as the answering member knows them (may lag after a change).
    ///
    /// ```no_run
    /// # async fn demo(cluster: etcd_ha::Cluster) -> etcd_ha::Result<()> {
    /// let n = cluster.member_list().await?.members.len();
    /// # Ok(())
    /// # }
    /// ```
    pub async fn member_list(&self) -> Result<MemberListResponse> {
        self.list(false).await
    }

    /// The members, read through the raft leader so the answer reflects every committed change
    /// (etcd 3.5+; older servers ignore the flag and answer from local state).
    ///
    /// ```no_run
    /// # async fn demo(cluster: etcd_ha::Cluster) -> etcd_ha::Result<()> {
    /// let members = cluster.member_list_linearizable().await?.members;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn member_list_linearizable(&self) -> Result<MemberListResponse> {
        self.list(true).await
    }

    async fn list(&self, linearizable: bool) -> Result<MemberListResponse> {
        let request = MemberListRequest { linearizable };
        self.transport
            .call(self.call.call(Deadline::Default), request)
            .await
    }

    /// Add a voting member with these peer URLs; start it afterwards with
    /// `--initial-cluster-state existing`.
    ///
    /// ```no_run
    /// # async fn demo(cluster: etcd_ha::Cluster) -> etcd_ha::Result<()> {
    /// let added = cluster.member_add(["http://10.0.0.4:2380"]).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn member_add<I, S>(&self, peer_urls: I) -> Result<MemberAddResponse>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.add(peer_urls.into_iter().map(Into::into).collect(), false)
            .await
    }

    /// Add a learner: a non-voting member that catches up before it is promoted.
    ///
    /// ```no_run
    /// # async fn demo(cluster: etcd_ha::Cluster) -> etcd_ha::Result<()> {
    /// let added = cluster.member_add_as_learner(["http://10.0.0.4:2380"]).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn member_add_as_learner<I, S>(&self, peer_urls: I) -> Result<MemberAddResponse>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.add(peer_urls.into_iter().map(Into::into).collect(), true)
            .await
    }

    async fn add(&self, peer_ur_ls: Vec<String>, is_learner: bool) -> Result<MemberAddResponse> {
        let request = MemberAddRequest {
            peer_ur_ls,
            is_learner,
        };
        self.transport
            .call(self.call.call(Deadline::Default), request)
            .await
    }

    /// Remove the member with this id.
    ///
    /// ```no_run
    /// # async fn demo(cluster: etcd_ha::Cluster, id: u64) -> etcd_ha::Result<()> {
    /// cluster.member_remove(id).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn member_remove(&self, id: u64) -> Result<MemberRemoveResponse> {
        let request = MemberRemoveRequest { id };
        self.transport
            .call(self.call.call(Deadline::Default), request)
            .await
    }

    /// Replace a member's peer URLs.
    ///
    /// ```no_run
    /// # async fn demo(cluster: etcd_ha::Cluster, id: u64) -> etcd_ha::Result<()> {
    /// cluster.member_update(id, ["http://10.0.0.9:2380"]).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn member_update<I, S>(&self, id: u64, peer_urls: I) -> Result<MemberUpdateResponse>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let request = MemberUpdateRequest {
            id,
            peer_ur_ls: peer_urls.into_iter().map(Into::into).collect(),
        };
        self.transport
            .call(self.call.call(Deadline::Default), request)
            .await
    }

    /// Promote a learner that has caught up to a voting member.
    ///
    /// ```no_run
    /// # async fn demo(cluster: etcd_ha::Cluster, id: u64) -> etcd_ha::Result<()> {
    /// cluster.member_promote(id).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn member_promote(&self, id: u64) -> Result<MemberPromoteResponse> {
        let request = MemberPromoteRequest { id };
        self.transport
            .call(self.call.call(Deadline::Default), request)
            .await
    }
}
