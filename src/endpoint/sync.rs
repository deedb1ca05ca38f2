//! Member sync's rule: which member URLs the endpoint set should hold (no IO here).
//!
//! The sync task (`call/members.rs`) runs every sync interval and right after failures (a dead endpoint may mean a replaced
//! member). Reads MemberList from a healthy member (serializable: it must work without a
//! leader), keeps the client URLs of members that have a name (started) and are not learners,
//! like etcd's own `Sync` and PD's syncer, and never empties the set.
//!
//! Endpoints are matched to members by member id (from the probes' Status), not only by URL,
//! so that an endpoint the user gave under another name than the member advertises (a TCP
//! proxy, a DNS alias, a port forward) stays in use instead of being replaced.

use std::sync::Arc;

use super::Endpoint;
use crate::proto::etcdserverpb::Member;

/// The URLs the endpoint set should hold for `members` (a MemberList answer), given the
/// endpoints in use now; `tls` says whether the client was configured for TLS.
pub(crate) fn member_urls(
    members: Vec<Member>,
    current: &[Arc<Endpoint>],
    tls: bool,
) -> Vec<String> {
    // A TLS client (TLS options, or any https:// endpoint) never dials a member's http:// URL.
    let secure = super::is_secure(tls, current.iter().map(|e| &*e.url));
    // A unix socket a member advertises is a file on its own host: dialled only by a client
    // that was given a unix:// endpoint itself (it runs next to the cluster).
    let local = super::is_local(current.iter().map(|e| &*e.url));
    let mut urls = Vec::new();
    for m in members {
        if m.name.is_empty() || m.is_learner {
            continue;
        }
        // One endpoint per member: the endpoint in use that this member answered from (a
        // proxy, a load-balanced or DNS name the user gave: its Status named this member id),
        // else the member's URL already in use, else its first usable one.
        let usable: Vec<String> = m
            .client_ur_ls
            .iter()
            .filter_map(|u| super::member_url(u, secure, local))
            .collect();
        if usable.is_empty() && !m.client_ur_ls.is_empty() {
            tracing::warn!(
                member = %format!("{:x}", m.id),
                // As the member advertises them, less any credentials or query.
                urls = ?m.client_ur_ls.iter().map(|u| super::redact(u)).collect::<Vec<_>>(),
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
    urls
}
