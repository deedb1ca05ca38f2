//! The typed half of the RPC table: each unary request type knows its row ([`Rpc`]), its answer type and its service method, so a call site cannot pair a request with the wrong row or method.
//!
//! Before, each of ~40 call sites passed an `Rpc` variant and a closure naming the method by
//! hand (`Rpc::Put, .., |c, r| c.kv().put(r)`), and nothing checked that they matched: a range
//! sent under `Rpc::Put` would have been routed to the leader and never retried. Here the
//! request decides, including the rows that depend on its contents (a serializable range, a
//! txn that only reads, an alarm that only lists).

use std::future::Future;

use tonic::{Request, Response, Status};

use super::encoded::Encoded;
use super::{Call, Conn, Headed, Transport};
use crate::error::Result;
use crate::proto::etcdserverpb::*;
use crate::proto::{v3electionpb, v3lockpb};
use crate::rpc::Rpc;

/// A unary etcd request: its row of the RPC table, and how it is sent.
pub(crate) trait UnaryRpc: prost::Message + Clone + Send + Sync + 'static {
    /// What etcd answers.
    type Response: Headed + Send;

    /// Its row of the table (route, idempotency, hedging).
    fn rpc(&self) -> Rpc;

    /// Send it (encoded, see `encoded.rs`) on `conn`, once, as row `rpc`.
    fn send(
        conn: Conn,
        rpc: Rpc,
        request: Request<Encoded>,
    ) -> impl Future<Output = std::result::Result<Response<Self::Response>, Status>> + Send;
}

impl Transport {
    /// Make the unary call `request` stands for, as `how` says: routed, retried and hedged by
    /// its row of the RPC table. It is encoded once, whatever the attempts.
    pub(crate) async fn call<R: UnaryRpc>(&self, how: Call, request: R) -> Result<R::Response> {
        let rpc = request.rpc();
        let encoded = Encoded::of(&request);
        drop(request);
        self.unary(rpc, how, encoded, move |conn, r| R::send(conn, rpc, r))
            .await
    }
}

/// `Request => Response, service.method, |request| row;` for each unary RPC.
macro_rules! unary_rpcs {
    ($($request:ty => $response:ty, $service:ident . $method:ident, $rpc:expr;)*) => {$(
        impl UnaryRpc for $request {
            type Response = $response;

            fn rpc(&self) -> Rpc {
                let row: fn(&Self) -> Rpc = $rpc;
                row(self)
            }

            fn send(
                conn: Conn,
                rpc: Rpc,
                request: Request<Encoded>,
            ) -> impl Future<Output = std::result::Result<Response<Self::Response>, Status>> + Send
            {
                // The path is the same for every request of this type: made once.
                static PATH: std::sync::OnceLock<tonic::codegen::http::uri::PathAndQuery> =
                    std::sync::OnceLock::new();
                let path = PATH.get_or_init(|| super::encoded::path_of(rpc)).clone();
                conn.unary(rpc, path, request)
            }
        }

        // The generated client pairs this request with this answer on this method: the
        // encoded path above must be the same method (`rows_name_the_generated_methods`).
        #[cfg(test)]
        const _: () = {
            #[allow(dead_code)]
            async fn paired(
                conn: Conn,
                request: Request<$request>,
            ) -> std::result::Result<Response<$response>, Status> {
                conn.$service().$method(request).await
            }
        };
    )*

        /// Each row's service and method, as the generated client names them, and its row.
        #[cfg(test)]
        const ROWS: &[(&str, &str, fn() -> Rpc)] = &[
            $((stringify!($service), stringify!($method), || <$request>::default().rpc()),)*
        ];
    };
}

unary_rpcs! {
    // KV
    RangeRequest => RangeResponse, kv.range,
        |r| Rpc::Range { serializable: r.serializable };
    PutRequest => PutResponse, kv.put, |_| Rpc::Put;
    DeleteRangeRequest => DeleteRangeResponse, kv.delete_range, |_| Rpc::DeleteRange;
    // A txn that only reads is as safe to repeat as a range.
    TxnRequest => TxnResponse, kv.txn,
        |r| Rpc::Txn { read_only: crate::rpc::txn_is_read_only(r) };
    CompactionRequest => CompactionResponse, kv.compact, |_| Rpc::Compact;
    // Lease
    LeaseGrantRequest => LeaseGrantResponse, lease.lease_grant, |_| Rpc::LeaseGrant;
    LeaseRevokeRequest => LeaseRevokeResponse, lease.lease_revoke, |_| Rpc::LeaseRevoke;
    LeaseTimeToLiveRequest => LeaseTimeToLiveResponse, lease.lease_time_to_live,
        |_| Rpc::LeaseTimeToLive;
    LeaseLeasesRequest => LeaseLeasesResponse, lease.lease_leases, |_| Rpc::LeaseLeases;
    // Cluster
    MemberAddRequest => MemberAddResponse, cluster.member_add, |_| Rpc::MemberAdd;
    MemberRemoveRequest => MemberRemoveResponse, cluster.member_remove, |_| Rpc::MemberRemove;
    MemberUpdateRequest => MemberUpdateResponse, cluster.member_update, |_| Rpc::MemberUpdate;
    MemberListRequest => MemberListResponse, cluster.member_list, |_| Rpc::MemberList;
    MemberPromoteRequest => MemberPromoteResponse, cluster.member_promote,
        |_| Rpc::MemberPromote;
    // Maintenance
    AlarmRequest => AlarmResponse, maintenance.alarm,
        |r| Rpc::Alarm { get: r.action == alarm_request::AlarmAction::Get as i32 };
    StatusRequest => StatusResponse, maintenance.status, |_| Rpc::Status;
    DefragmentRequest => DefragmentResponse, maintenance.defragment, |_| Rpc::Defragment;
    HashRequest => HashResponse, maintenance.hash, |_| Rpc::Hash;
    HashKvRequest => HashKvResponse, maintenance.hash_kv, |_| Rpc::HashKv;
    MoveLeaderRequest => MoveLeaderResponse, maintenance.move_leader, |_| Rpc::MoveLeader;
    DowngradeRequest => DowngradeResponse, maintenance.downgrade, |_| Rpc::Downgrade;
    // Auth
    AuthEnableRequest => AuthEnableResponse, auth.auth_enable, |_| Rpc::AuthEnable;
    AuthDisableRequest => AuthDisableResponse, auth.auth_disable, |_| Rpc::AuthDisable;
    AuthStatusRequest => AuthStatusResponse, auth.auth_status, |_| Rpc::AuthStatus;
    AuthenticateRequest => AuthenticateResponse, auth.authenticate, |_| Rpc::Authenticate;
    AuthUserAddRequest => AuthUserAddResponse, auth.user_add, |_| Rpc::UserAdd;
    AuthUserGetRequest => AuthUserGetResponse, auth.user_get, |_| Rpc::UserGet;
    AuthUserListRequest => AuthUserListResponse, auth.user_list, |_| Rpc::UserList;
    AuthUserDeleteRequest => AuthUserDeleteResponse, auth.user_delete, |_| Rpc::UserDelete;
    AuthUserChangePasswordRequest => AuthUserChangePasswordResponse,
        auth.user_change_password, |_| Rpc::UserChangePassword;
    AuthUserGrantRoleRequest => AuthUserGrantRoleResponse, auth.user_grant_role,
        |_| Rpc::UserGrantRole;
    AuthUserRevokeRoleRequest => AuthUserRevokeRoleResponse, auth.user_revoke_role,
        |_| Rpc::UserRevokeRole;
    AuthRoleAddRequest => AuthRoleAddResponse, auth.role_add, |_| Rpc::RoleAdd;
    AuthRoleGetRequest => AuthRoleGetResponse, auth.role_get, |_| Rpc::RoleGet;
    AuthRoleListRequest => AuthRoleListResponse, auth.role_list, |_| Rpc::RoleList;
    AuthRoleDeleteRequest => AuthRoleDeleteResponse, auth.role_delete, |_| Rpc::RoleDelete;
    AuthRoleGrantPermissionRequest => AuthRoleGrantPermissionResponse,
        auth.role_grant_permission, |_| Rpc::RoleGrantPermission;
    AuthRoleRevokePermissionRequest => AuthRoleRevokePermissionResponse,
        auth.role_revoke_permission, |_| Rpc::RoleRevokePermission;
    // v3election and v3lock
    v3electionpb::CampaignRequest => v3electionpb::CampaignResponse, election.campaign,
        |_| Rpc::Campaign;
    v3electionpb::ProclaimRequest => v3electionpb::ProclaimResponse, election.proclaim,
        |_| Rpc::Proclaim;
    v3electionpb::LeaderRequest => v3electionpb::LeaderResponse, election.leader,
        |_| Rpc::Leader;
    v3electionpb::ResignRequest => v3electionpb::ResignResponse, election.resign,
        |_| Rpc::Resign;
    v3lockpb::LockRequest => v3lockpb::LockResponse, lock.lock, |_| Rpc::Lock;
    v3lockpb::UnlockRequest => v3lockpb::UnlockResponse, lock.unlock, |_| Rpc::Unlock;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `LeaseTimeToLive` as the generated client names it: `lease_time_to_live`.
    fn snake(name: &str) -> String {
        let mut out = String::new();
        let mut previous_lower = false;
        for c in name.chars() {
            if c.is_ascii_uppercase() && previous_lower {
                out.push('_');
            }
            previous_lower = c.is_ascii_lowercase();
            out.push(c.to_ascii_lowercase());
        }
        out
    }

    #[test]
    fn rows_name_the_generated_methods() {
        assert_eq!(snake("HashKV"), "hash_kv");
        for (service, method, row) in ROWS {
            let rpc = row();
            let last = rpc.service().rsplit('.').next().unwrap();
            assert_eq!(last.to_ascii_lowercase(), *service, "{rpc:?}");
            assert_eq!(snake(rpc.name()), *method, "{rpc:?}");
        }
        assert!(ROWS.len() > 40);
    }

    #[test]
    fn rows_that_depend_on_the_request_follow_it() {
        let read = RangeRequest {
            serializable: true,
            ..Default::default()
        };
        assert_eq!(read.rpc(), Rpc::Range { serializable: true });
        assert_eq!(
            RangeRequest::default().rpc(),
            Rpc::Range {
                serializable: false
            }
        );
        let get = AlarmRequest {
            action: alarm_request::AlarmAction::Get as i32,
            ..Default::default()
        };
        assert_eq!(get.rpc(), Rpc::Alarm { get: true });
        let activate = AlarmRequest {
            action: alarm_request::AlarmAction::Activate as i32,
            ..Default::default()
        };
        assert_eq!(activate.rpc(), Rpc::Alarm { get: false });
        assert_eq!(TxnRequest::default().rpc(), Rpc::Txn { read_only: true });
        let write = TxnRequest {
            success: vec![RequestOp {
                request: Some(request_op::Request::RequestPut(PutRequest::default())),
            }],
            ..Default::default()
        };
        assert_eq!(write.rpc(), Rpc::Txn { read_only: false });
    }
}
