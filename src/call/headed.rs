//! What the call path reads of every unary answer: its header, whose cluster id says which
//! cluster answered (checked on every answer, not only the probes' Status answers, so that a
//! foreign member's answer is never taken, nor its revision raising the monotonic floor).

use crate::proto::etcdserverpb::{self as pb, ResponseHeader};
use crate::proto::{v3electionpb as election, v3lockpb as lock};

/// An answer that may carry a [`ResponseHeader`].
pub(crate) trait Headed {
    /// The answer's header, if it has one.
    fn header(&self) -> Option<&ResponseHeader>;
}

macro_rules! headed {
    ($($t:ty),* $(,)?) => {
        $(impl Headed for $t {
            fn header(&self) -> Option<&ResponseHeader> {
                self.header.as_ref()
            }
        })*
    };
}

headed!(
    pb::AlarmResponse,
    pb::AuthDisableResponse,
    pb::AuthEnableResponse,
    pb::AuthRoleAddResponse,
    pb::AuthRoleDeleteResponse,
    pb::AuthRoleGetResponse,
    pb::AuthRoleGrantPermissionResponse,
    pb::AuthRoleListResponse,
    pb::AuthRoleRevokePermissionResponse,
    pb::AuthStatusResponse,
    pb::AuthUserAddResponse,
    pb::AuthUserChangePasswordResponse,
    pb::AuthUserDeleteResponse,
    pb::AuthUserGetResponse,
    pb::AuthUserGrantRoleResponse,
    pb::AuthUserListResponse,
    pb::AuthUserRevokeRoleResponse,
    pb::AuthenticateResponse,
    pb::CompactionResponse,
    pb::DefragmentResponse,
    pb::DeleteRangeResponse,
    pb::DowngradeResponse,
    pb::HashKvResponse,
    pb::HashResponse,
    pb::LeaseGrantResponse,
    pb::LeaseKeepAliveResponse,
    pb::LeaseLeasesResponse,
    pb::LeaseRevokeResponse,
    pb::LeaseTimeToLiveResponse,
    pb::MemberAddResponse,
    pb::MemberListResponse,
    pb::MemberPromoteResponse,
    pb::MemberRemoveResponse,
    pb::MemberUpdateResponse,
    pb::MoveLeaderResponse,
    pb::PutResponse,
    pb::RangeResponse,
    pb::StatusResponse,
    pb::TxnResponse,
    election::CampaignResponse,
    election::LeaderResponse,
    election::ProclaimResponse,
    election::ResignResponse,
    lock::LockResponse,
    lock::UnlockResponse,
);
