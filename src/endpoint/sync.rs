//! Member sync: keeps the endpoint set equal to the cluster's started, voting members.
//!
//! Runs every sync interval and right after failures (a dead endpoint may mean a replaced
//! member). Reads MemberList from a healthy member (serializable: it must work without a
//! leader), keeps the client URLs of members that have a name (started) and are not learners,
//! like etcd's own `Sync` and PD's syncer, and never empties the set.
//!
//! Endpoints are matched to members by member id (from the probes' Status), not only by URL,
//! so that an endpoint the user gave under another name than the member advertises (a TCP
//! proxy, a DNS alias, a port forward) stays in use instead of being replaced.

use std::sync::Weak;
use std::time::Duration;

use crate::error::Error;
use crate::proto::etcdserverpb::MemberListRequest;
use crate::rpc::Rpc;
use crate::transport::{Deadline, Target, Transport};

/// After a failure-triggered sync, wait at least this long before the next one: a flapping
/// member should not turn into a MemberList storm.
const MIN_GAP: Duration = Duration::from_millis(500);

pub(crate) struct MemberSync {
    transport: Weak<Transport>,
    interval: Duration,
}

impl MemberSync {
    pub(crate) fn new(transport: Weak<Transport>, interval: Duration) -> Self {
        MemberSync {
            transport,
            interval,
        }
    }

    pub(crate) async fn run(self) {
        loop {
            let Some(transport) = self.transport.upgrade() else {
                return;
            };
            let cancel = transport.cancel.clone();
            let notify = transport.sync_now.clone();
            drop(transport);
            let woken = notify.notified();
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(self.interval) => {}
                () = woken => tokio::time::sleep(MIN_GAP).await,
            }
            let Some(transport) = self.transport.upgrade() else {
                return;
            };
            if let Err(e) = sync_once(&transport).await {
                tracing::debug!(error = %e, "member sync failed; keeping the endpoint set");
            }
        }
    }
}

/// One sync: list members and apply the result.
pub(crate) async fn sync_once(transport: &std::sync::Arc<Transport>) -> Result<(), Error> {
    let list = transport
        .unary(
            Rpc::MemberList,
            Target::Any,
            Deadline::Default,
            MemberListRequest {
                linearizable: false,
            },
            |c, r| async move { c.cluster().member_list(r).await },
        )
        .await?;
    let current = transport.balancer.endpoints();
    // A TLS client never dials a member's plain http:// URL.
    let secure = crate::endpoint::is_secure(
        transport.options.tls.is_some(),
        current.iter().map(|e| &*e.url),
    );
    let mut urls = Vec::new();
    for m in list.members {
        if m.name.is_empty() || m.is_learner {
            continue;
        }
        // One endpoint per member: the endpoint in use that this member answered from (a
        // proxy, a load-balanced or DNS name the user gave: its Status named this member id),
        // else the member's URL already in use, else its first usable one.
        let usable: Vec<String> = m
            .client_ur_ls
            .iter()
            .filter_map(|u| crate::endpoint::member_url(u, secure))
            .collect();
        if usable.is_empty() && !m.client_ur_ls.is_empty() {
            tracing::warn!(
                member = %format!("{:x}", m.id),
                urls = ?m.client_ur_ls,
                secure,
                "no usable client URL for this member (a TLS client never dials http://); skipped"
            );
        }
        let chosen = current
            .iter()
            .find(|e| e.raft().member_id == m.id)
            .map(|e| e.url.to_string())
            .or_else(|| {
                usable
                    .iter()
                    .find(|u| current.iter().any(|e| *e.url == ***u))
                    .or(usable.first())
                    .cloned()
            });
        if let Some(u) = chosen
            && !urls.contains(&u)
        {
            urls.push(u);
        }
    }
    transport.apply_members(urls);
    Ok(())
}
