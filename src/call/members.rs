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
use crate::rpc::Rpc;

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

/// One sync: list members (serializable: it must work without a leader) and apply the result.
pub(crate) async fn sync_once(transport: &Arc<Transport>) -> Result<(), Error> {
    let list = transport
        .unary(
            Rpc::MemberList,
            Call::default(),
            MemberListRequest {
                linearizable: false,
            },
            |c, r| async move { c.cluster().member_list(r).await },
        )
        .await?;
    let balancer = &transport.balancer;
    let urls = member_urls(
        list.members,
        &balancer.endpoints(),
        transport.options.tls.is_some(),
    );
    balancer.apply_members(urls);
    Ok(())
}
