//! The Maintenance service: status, alarms, defragment, hashes, leader moves, downgrade, snapshot.
//!
//! Most of these are about one member; [`Maintenance::on`] pins the calls to the member you name.

use std::sync::Arc;

use crate::call::{CallOptions, Deadline, Transport};
use crate::error::Result;
use crate::proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, AlarmType, DefragmentRequest, DefragmentResponse,
    DowngradeRequest, DowngradeResponse, HashKvRequest, HashKvResponse, HashRequest, HashResponse,
    MoveLeaderRequest, MoveLeaderResponse, SnapshotRequest, SnapshotResponse, StatusRequest,
    StatusResponse, alarm_request::AlarmAction, downgrade_request::DowngradeAction,
};
use crate::stream::ResponseStream;

/// The Maintenance service. Get one with [`Client::maintenance`](crate::Client::maintenance).
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// for url in client.endpoint_urls() {
///     let status = client.maintenance().on(&url)?.status().await?;
///     println!("{url}: member {:x}, leader {:x}, term {}", status.header.unwrap().member_id, status.leader, status.raft_term);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Maintenance {
    transport: Arc<Transport>,
    /// Per-call options (deadline, routing, require-leader; the member, after `on`) of the
    /// calls made through it.
    call: CallOptions,
}

impl Maintenance {
    pub(crate) fn new(transport: Arc<Transport>) -> Self {
        Maintenance {
            transport,
            call: CallOptions::default(),
        }
    }

    crate::call::call_option_methods!("maintenance");

    /// The same service, with every call sent to the member at `endpoint` (one of the client's
    /// endpoints, in any of the accepted forms).
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// let m = client.maintenance().on("http://127.0.0.1:2379")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn on(&self, endpoint: &str) -> Result<Maintenance> {
        self.clone().with_member(endpoint)
    }

    /// The member's status: version, db size, leader id, raft term and index, learner or not.
    ///
    /// ```no_run
    /// # async fn demo(m: etcd_ha::Maintenance) -> etcd_ha::Result<()> {
    /// let s = m.status().await?;
    /// let is_leader = s.header.as_ref().map(|h| h.member_id) == Some(s.leader);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn status(&self) -> Result<StatusResponse> {
        self.transport
            .call(self.call.call(Deadline::Default), StatusRequest {})
            .await
    }

    /// Active alarms of every member (e.g. NOSPACE when the db hit its quota).
    ///
    /// ```no_run
    /// # async fn demo(m: etcd_ha::Maintenance) -> etcd_ha::Result<()> {
    /// for a in m.alarm_list().await?.alarms { println!("{:x}: {:?}", a.member_id, a.alarm()); }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn alarm_list(&self) -> Result<AlarmResponse> {
        self.alarm(AlarmAction::Get, 0, AlarmType::None).await
    }

    /// Clear `alarm` on the member with this id (after the cause is fixed, e.g. after a
    /// compaction and defragment freed space).
    ///
    /// ```no_run
    /// # async fn demo(m: etcd_ha::Maintenance, id: u64) -> etcd_ha::Result<()> {
    /// use etcd_ha::proto::etcdserverpb::AlarmType;
    /// m.alarm_deactivate(id, AlarmType::Nospace).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn alarm_deactivate(
        &self,
        member_id: u64,
        alarm: AlarmType,
    ) -> Result<AlarmResponse> {
        self.alarm(AlarmAction::Deactivate, member_id, alarm).await
    }

    /// Raise `alarm` on a member by hand (mostly for tests of alarm handling).
    ///
    /// ```no_run
    /// # async fn demo(m: etcd_ha::Maintenance, id: u64) -> etcd_ha::Result<()> {
    /// use etcd_ha::proto::etcdserverpb::AlarmType;
    /// m.alarm_activate(id, AlarmType::Nospace).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn alarm_activate(&self, member_id: u64, alarm: AlarmType) -> Result<AlarmResponse> {
        self.alarm(AlarmAction::Activate, member_id, alarm).await
    }

    async fn alarm(
        &self,
        action: AlarmAction,
        member_id: u64,
        alarm: AlarmType,
    ) -> Result<AlarmResponse> {
        let request = AlarmRequest {
            action: action as i32,
            member_id,
            alarm: alarm as i32,
        };
        self.transport
            .call(self.call.call(Deadline::Default), request)
            .await
    }

    /// Defragment the member's backend, giving freed space back to the file system. The member
    /// serves nothing while it runs, so pin it with [`on`](Self::on) and do one member at a time.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// for url in client.endpoint_urls() {
    ///     client.maintenance().on(&url)?.defragment().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn defragment(&self) -> Result<DefragmentResponse> {
        // Defragmenting a large db takes minutes: no client deadline.
        self.transport
            .call(self.call.call(Deadline::Unbounded), DefragmentRequest {})
            .await
    }

    /// Hash of the member's whole backend (for corruption checks between members).
    ///
    /// ```no_run
    /// # async fn demo(m: etcd_ha::Maintenance) -> etcd_ha::Result<()> {
    /// let h = m.hash().await?.hash;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn hash(&self) -> Result<HashResponse> {
        self.transport
            .call(self.call.call(Deadline::Default), HashRequest {})
            .await
    }

    /// Hash of the key-value store up to `revision` (0: the newest), comparable across members.
    ///
    /// ```no_run
    /// # async fn demo(m: etcd_ha::Maintenance) -> etcd_ha::Result<()> {
    /// let h = m.hash_kv(0).await?;
    /// println!("hash {} at compact revision {}", h.hash, h.compact_revision);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn hash_kv(&self, revision: i64) -> Result<HashKvResponse> {
        let request = HashKvRequest { revision };
        self.transport
            .call(self.call.call(Deadline::Default), request)
            .await
    }

    /// Hand raft leadership to the member with this id. Must reach the current leader: pin it
    /// with [`on`](Self::on).
    ///
    /// ```no_run
    /// # async fn demo(m: etcd_ha::Maintenance, target: u64) -> etcd_ha::Result<()> {
    /// m.move_leader(target).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn move_leader(&self, target_id: u64) -> Result<MoveLeaderResponse> {
        let request = MoveLeaderRequest { target_id };
        self.transport
            .call(self.call.call(Deadline::Default), request)
            .await
    }

    /// Validate, enable or cancel a cluster downgrade to `version` (etcd 3.5+).
    ///
    /// ```no_run
    /// # async fn demo(m: etcd_ha::Maintenance) -> etcd_ha::Result<()> {
    /// use etcd_ha::proto::etcdserverpb::downgrade_request::DowngradeAction;
    /// m.downgrade(DowngradeAction::Validate, "3.4").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn downgrade(
        &self,
        action: DowngradeAction,
        version: impl Into<String>,
    ) -> Result<DowngradeResponse> {
        let request = DowngradeRequest {
            action: action as i32,
            version: version.into(),
        };
        self.transport
            .call(self.call.call(Deadline::Default), request)
            .await
    }

    /// Stream a snapshot of the member's backend, in chunks; `remaining_bytes` counts down to 0.
    ///
    /// ```no_run
    /// # async fn demo(m: etcd_ha::Maintenance) -> etcd_ha::Result<()> {
    /// let mut chunks = m.snapshot().await?;
    /// let mut db = Vec::new();
    /// while let Some(chunk) = chunks.message().await? { db.extend_from_slice(&chunk.blob); }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn snapshot(&self) -> Result<ResponseStream<SnapshotResponse>> {
        self.transport
            .open_server_stream(self.call.call(Deadline::Default), SnapshotRequest {})
            .await
    }
}
