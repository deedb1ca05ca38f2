//! Waits on members: until their ports are bound, until one answers, until the live ones agree on a leader.

use std::time::Duration;

use tokio::time::{Instant, sleep, timeout};
use tonic::transport::ClientTlsConfig;

use super::TestkitError;
use super::member::Member;
use super::probe::{self, View, agreed_leader};

/// Pause between two polls: short next to etcd's election timeout (1 s by default), so we see
/// a new leader soon after it exists, yet long enough not to load a two-core CI machine.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Polls until every live member answers Status and all agree on a live leader; returns the
/// leader's index. Fails at once if a member died on its own: waiting longer cannot help.
pub(crate) async fn agreed_leader_of(
    members: &[Member],
    tls: Option<&ClientTlsConfig>,
    what: &'static str,
    limit: Duration,
) -> Result<usize, TestkitError> {
    poll(what, limit, || observe(members, tls)).await
}

/// Polls until `member` answers Status (it has joined its cluster and serves clients).
pub(crate) async fn serving(
    member: &Member,
    tls: Option<&ClientTlsConfig>,
    limit: Duration,
) -> Result<(), TestkitError> {
    poll("member to serve clients", limit, || async {
        if let Some(status) = member.exited() {
            return Err(member.exited_error(status));
        }
        probe::status(member, tls).await.map(drop)
    })
    .await
}

/// Polls until every live member has applied the raft log up to `index`, so a change made
/// through one member (such as enabling auth) is visible on all of them.
pub(crate) async fn applied(
    members: &[Member],
    tls: Option<&ClientTlsConfig>,
    index: u64,
    limit: Duration,
) -> Result<(), TestkitError> {
    poll("members to apply the log", limit, || async {
        for member in members.iter().filter(|m| m.is_live()) {
            let status = probe::status(member, tls).await?;
            if status.raft_applied_index < index {
                return Err(TestkitError::Lagging {
                    member: member.name.clone(),
                    applied: status.raft_applied_index,
                    wanted: index,
                });
            }
        }
        Ok(())
    })
    .await
}

/// Polls until the member's process has bound its client port, or has exited.
///
/// etcd binds its peer and client ports before it does anything else, and exits at once if one
/// is taken; so "port accepts TCP and the process still runs" means the start went through. This
/// works without quorum, when the member cannot answer RPCs yet.
pub(crate) async fn bound(member: &Member, limit: Duration) -> Result<(), TestkitError> {
    poll("member to bind its ports", limit, || async {
        if let Some(status) = member.exited() {
            return Err(member.exited_error(status));
        }
        match tokio::net::TcpStream::connect(member.client_addr).await {
            Ok(_) => match member.exited() {
                Some(status) => Err(member.exited_error(status)),
                None => Ok(()),
            },
            Err(e) => Err(TestkitError::io(
                "connect to client port of",
                &member.name,
                e,
            )),
        }
    })
    .await
}

/// One round: who is live, what does each say, do they agree.
///
/// A partitioned member is left out: cut off from its peers, it reports no leader (or, for a
/// while, itself), which says nothing about the leader of the majority.
async fn observe(members: &[Member], tls: Option<&ClientTlsConfig>) -> Result<usize, TestkitError> {
    for member in members {
        if let Some(status) = member.exited() {
            return Err(member.exited_error(status));
        }
    }
    let asks = members
        .iter()
        .enumerate()
        .filter(|(_, member)| member.is_live() && !member.is_partitioned())
        .map(|(index, member)| async move {
            let response = probe::status(member, tls).await?;
            Ok::<_, TestkitError>(View {
                index,
                member_id: response.header.map_or(0, |h| h.member_id),
                leader_id: response.leader,
            })
        });
    let views = futures_util::future::try_join_all(asks).await?;
    agreed_leader(&views).ok_or_else(|| TestkitError::NoAgreedLeader {
        views: views
            .iter()
            .map(|v| (members[v.index].name.clone(), v.leader_id))
            .collect(),
    })
}

/// Retries `round` until it succeeds, a member has exited, or `limit` has passed.
async fn poll<T, F, Fut>(
    what: &'static str,
    limit: Duration,
    mut round: F,
) -> Result<T, TestkitError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, TestkitError>>,
{
    let deadline = Instant::now() + limit;
    let mut last = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match timeout(left, round()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(exited @ TestkitError::MemberExited { .. })) => return Err(exited),
            Ok(Err(e)) => last = Some(Box::new(e)),
            // The round itself ran out of time; `last` keeps the previous round's reason.
            Err(_) => {}
        }
        if Instant::now() + POLL_INTERVAL >= deadline {
            return Err(TestkitError::Timeout {
                what,
                after: limit,
                last,
            });
        }
        sleep(POLL_INTERVAL).await;
    }
}
