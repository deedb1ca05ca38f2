//! Turns on etcd authentication: creates the root user and role, grants it, and enables auth.

use std::time::Duration;

use tonic::transport::ClientTlsConfig;

use crate::proto::etcdserverpb::auth_client::AuthClient;
use crate::proto::etcdserverpb::{
    AuthEnableRequest, AuthRoleAddRequest, AuthUserAddRequest, AuthUserGrantRoleRequest,
};

use super::member::Member;
use super::{TestkitError, probe, wait};

/// Creates `user` with `password`, gives it the `root` role and enables auth through the first
/// member, then waits until every member has applied that, so no test can slip an
/// unauthenticated request through a member that has not caught up yet.
///
/// etcd only enables auth when a user named "root" holding the "root" role exists, so `user`
/// is normally "root"; other names make AuthEnable fail with etcd's own error.
pub(crate) async fn enable(
    members: &[Member],
    tls: Option<&ClientTlsConfig>,
    user: &str,
    password: &str,
    limit: Duration,
) -> Result<(), TestkitError> {
    let member = &members[0];
    let channel = probe::connect(&member.client_url, tls).await?;
    let mut auth = AuthClient::new(channel);
    let rpc_error = |rpc: &'static str| {
        let member = member.name.clone();
        move |source| TestkitError::Rpc {
            rpc,
            member,
            source,
        }
    };
    auth.user_add(AuthUserAddRequest {
        name: user.to_string(),
        password: password.to_string(),
        ..Default::default()
    })
    .await
    .map_err(rpc_error("UserAdd"))?;
    auth.role_add(AuthRoleAddRequest {
        name: "root".to_string(),
    })
    .await
    .map_err(rpc_error("RoleAdd"))?;
    auth.user_grant_role(AuthUserGrantRoleRequest {
        user: user.to_string(),
        role: "root".to_string(),
    })
    .await
    .map_err(rpc_error("UserGrantRole"))?;
    // From here on the testkit's own Status probes may need a user (etcd 3.6, 3.5.28+).
    for m in members {
        let _ = m.login.set((user.to_string(), password.to_string()));
    }
    auth.auth_enable(AuthEnableRequest {})
        .await
        .map_err(rpc_error("AuthEnable"))?;
    // The member that took AuthEnable has applied it before answering; its commit index is
    // therefore at least the index of that entry.
    let committed = probe::status(member, tls).await?.raft_index;
    wait::applied(members, tls, committed, limit).await
}
