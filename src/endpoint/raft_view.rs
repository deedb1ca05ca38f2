//! [`RaftView`]: what a member's last Status answer said about raft.

use super::ServerVersion;
use crate::proto::etcdserverpb::StatusResponse;

/// What the member's last Status answer said about raft.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RaftView {
    /// This member's id (0 until the first answer).
    pub(crate) member_id: u64,
    /// The leader it follows (0: none).
    pub(crate) leader_id: u64,
    /// Its raft term.
    pub(crate) raft_term: u64,
    /// The cluster it belongs to (0: the answer had no header).
    pub(crate) cluster_id: u64,
    /// Its etcd version (`None`: the answer's did not parse).
    pub(crate) version: Option<ServerVersion>,
}

impl RaftView {
    /// What a Status answer says of its member.
    pub(crate) fn from_status(status: &StatusResponse) -> Self {
        RaftView {
            member_id: status.header.as_ref().map_or(0, |h| h.member_id),
            leader_id: status.leader,
            raft_term: status.raft_term,
            cluster_id: status.header.as_ref().map_or(0, |h| h.cluster_id),
            version: status.version.parse().ok(),
        }
    }
}
