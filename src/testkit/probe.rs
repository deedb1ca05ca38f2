//! Asks members for their Maintenance Status, and decides from the answers which member leads.

use std::time::Duration;

use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::proto::etcdserverpb::auth_client::AuthClient;
use crate::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use crate::proto::etcdserverpb::{AuthenticateRequest, StatusRequest, StatusResponse};

use super::TestkitError;
use super::member::Member;

/// Bound on one probe (connect + Status). Generous for localhost, yet short enough that a member
/// without quorum (etcd accepts the connection but serves nothing until it has joined) does
/// not stall a polling loop for long.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);

/// A fresh channel to `url`, with TLS if the cluster uses it.
///
/// Fresh on every call on purpose: members are killed and restarted under the same URL all the
/// time, and a new channel never carries state over from a previous process.
pub(crate) async fn connect(
    url: &str,
    tls: Option<&ClientTlsConfig>,
) -> Result<Channel, TestkitError> {
    let connect_error = |source| TestkitError::Connect {
        endpoint: url.to_string(),
        source,
    };
    let mut endpoint = Endpoint::from_shared(url.to_string())
        .map_err(connect_error)?
        .connect_timeout(PROBE_TIMEOUT)
        .timeout(PROBE_TIMEOUT);
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls.clone()).map_err(connect_error)?;
    }
    endpoint.connect().await.map_err(connect_error)
}

/// One member's Status, remembering its member id on the way.
pub(crate) async fn status(
    member: &Member,
    tls: Option<&ClientTlsConfig>,
) -> Result<StatusResponse, TestkitError> {
    let rpc_error = |rpc: &'static str| {
        move |source| TestkitError::Rpc {
            rpc,
            member: member.name.clone(),
            source,
        }
    };
    let call = async {
        let channel = connect(&member.client_url, tls).await?;
        let mut maintenance = MaintenanceClient::new(channel.clone());
        let token = member
            .token
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let anonymous = maintenance.status(with_token(token.as_deref())).await;
        let answer = match (anonymous, member.login.get()) {
            // Auth is on and this server answers Status only to a user, or the token expired:
            // log in and ask again.
            (Err(refused), Some((user, password)))
                if refused.code() == tonic::Code::InvalidArgument
                    || refused.code() == tonic::Code::Unauthenticated =>
            {
                let login = AuthClient::new(channel)
                    .authenticate(AuthenticateRequest {
                        name: user.clone(),
                        password: password.clone(),
                    })
                    .await
                    .map_err(rpc_error("Authenticate"))?
                    .into_inner();
                *member.token.lock().unwrap_or_else(|p| p.into_inner()) = Some(login.token.clone());
                maintenance.status(with_token(Some(&login.token))).await
            }
            (answer, _) => answer,
        };
        Ok::<_, TestkitError>(answer.map_err(rpc_error("Status"))?.into_inner())
    };
    // Endpoint::timeout covers the request, connect_timeout the TCP connect; this also covers a
    // TLS handshake with a member that accepted the connection but does not serve yet.
    let response = tokio::time::timeout(PROBE_TIMEOUT * 2, call)
        .await
        .map_err(|_| TestkitError::Rpc {
            rpc: "Status",
            member: member.name.clone(),
            source: tonic::Status::deadline_exceeded("testkit probe timed out"),
        })??;
    if let Some(header) = &response.header {
        let _ = member.id.set(header.member_id);
    }
    Ok(response)
}

/// A Status request, with `token` if there is one.
fn with_token(token: Option<&str>) -> tonic::Request<StatusRequest> {
    let mut request = tonic::Request::new(StatusRequest {});
    if let Some(value) = token.and_then(|t| t.parse().ok()) {
        request.metadata_mut().insert("token", value);
    }
    request
}

/// What one live member said: its own id and the leader id it sees (0 = none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct View {
    /// Index of the member in the cluster.
    pub(crate) index: usize,
    /// Its raft member id.
    pub(crate) member_id: u64,
    /// The leader it reports.
    pub(crate) leader_id: u64,
}

/// The index of the leader if every live member reports the same leader and that leader is one
/// of them; `None` while an election is under way or a member still follows a dead leader.
///
/// Pure so it can be tested without etcd. `views` must hold one entry per live member.
pub(crate) fn agreed_leader(views: &[View]) -> Option<usize> {
    let leader_id = views.first()?.leader_id;
    if leader_id == 0 || views.iter().any(|v| v.leader_id != leader_id) {
        return None;
    }
    views
        .iter()
        .find(|v| v.member_id == leader_id)
        .map(|v| v.index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(index: usize, member_id: u64, leader_id: u64) -> View {
        View {
            index,
            member_id,
            leader_id,
        }
    }

    #[test]
    fn all_agree_on_a_live_leader() {
        let views = [view(0, 10, 11), view(1, 11, 11), view(2, 12, 11)];
        assert_eq!(agreed_leader(&views), Some(1));
    }

    #[test]
    fn no_leader_while_electing_or_disagreeing() {
        assert_eq!(agreed_leader(&[view(0, 10, 0), view(1, 11, 0)]), None);
        assert_eq!(agreed_leader(&[view(0, 10, 10), view(1, 11, 11)]), None);
        assert_eq!(agreed_leader(&[]), None);
    }

    #[test]
    fn a_dead_leader_does_not_count() {
        // Member 2 (id 12) was killed; the survivors still remember it as leader.
        assert_eq!(agreed_leader(&[view(0, 10, 12), view(1, 11, 12)]), None);
    }
}
