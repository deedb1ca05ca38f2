//! Member sync: a background task that keeps the endpoint set equal to the cluster's started,
//! voting members, every sync interval and right after failures (a dead endpoint may mean a
//! replaced member). The rule for which URLs to keep is `endpoint::sync`'s; this task lists
//! the members through the call path (retries, token) and hands the result to the balancer.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tracing::Instrument;

use super::{Call, Transport};
use crate::endpoint::sync::member_urls;
use crate::error::Error;
use crate::proto::etcdserverpb::MemberListRequest;

/// After a failure-triggered sync, wait at least this long before the next one: a flapping
/// member should not turn into a MemberList storm.
const MIN_GAP: Duration = Duration::from_millis(500);

/// Start member sync for `transport`; it ends with the client.
pub(super) fn spawn(transport: &Arc<Transport>, interval: Duration) {
    let task = run(Arc::downgrade(transport), interval);
    tokio::spawn(task.instrument(tracing::info_span!("etcd_ha_member_sync")));
}

async fn run(transport: Weak<Transport>, interval: Duration) {
    loop {
        let Some(strong) = transport.upgrade() else {
            return;
        };
        let cancel = strong.cancel.clone();
        let notify = strong.balancer.sync_now.clone();
        drop(strong);
        let woken = notify.notified();
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
            () = woken => tokio::time::sleep(MIN_GAP).await,
        }
        let Some(strong) = transport.upgrade() else {
            return;
        };
        if let Err(e) = sync_once(&strong).await {
            tracing::debug!(error = %e, "member sync failed; keeping the endpoint set");
        }
    }
}

/// The most members a list may name: etcd clusters have a handful (etcd advises at most 7
/// voting members); a list of thousands, from a broken or hostile server, would make as many
/// connections and probers.
pub(crate) const MAX_MEMBERS: usize = 64;

/// One sync: list members (serializable: it must work without a leader) and apply the result,
/// only when it comes from the client's own cluster and names at most [`MAX_MEMBERS`].
pub(crate) async fn sync_once(transport: &Arc<Transport>) -> Result<(), Error> {
    let request = MemberListRequest {
        linearizable: false,
    };
    // Through the RPC table like any unary call, which also refuses an answer from another
    // cluster's member: a foreign member's list could replace every endpoint with its own
    // cluster's.
    let list = transport.call(Call::default(), request).await?;
    let balancer = &transport.balancer;
    if list.members.len() > MAX_MEMBERS {
        return Err(Error::TooManyMembers {
            count: list.members.len(),
            limit: MAX_MEMBERS,
        });
    }
    let urls = member_urls(
        list.members,
        &balancer.endpoints(),
        transport.options.tls.is_some(),
    );
    balancer.apply_members(urls);
    Ok(())
}
