//! "etcd is unavailable": every endpoint of the client has been unhealthy for longer than a
//! bound, as the client's own health state machine sees it.

use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::endpoint::HealthState;

/// Whether no endpoint of `client` is [`HealthState::Healthy`] (down, ejected, on probation, or
/// its member has no raft leader).
pub(crate) fn unavailable(client: &Client) -> bool {
    client
        .endpoints()
        .iter()
        .all(|e| e.health != HealthState::Healthy)
}

/// Completes once etcd has been unavailable without a break for `bound`; returns how long that
/// was.
///
/// Unavailable means no endpoint is healthy and there is no other evidence of the contrary:
/// `last_ok` may report when something last went through (a lease renewal that the raft
/// leader answered), which restarts the count. The count also starts no earlier than this
/// future's first look, so a caller that starts during an outage still gets a full `bound`
/// before it gives up, and callers that loop on this cannot spin.
///
/// Why the extra evidence: after an outage the client readmits endpoints only after their
/// ejection and a couple of good probes (up to about 3 s), while requests already go through;
/// a leader that just won must not step down for that.
pub(crate) async fn unavailable_for(
    client: &Client,
    bound: Duration,
    last_ok: impl Fn() -> Option<Instant>,
) -> Duration {
    // Woken by every endpoint health transition: no polling. `last_ok` only ever moves the
    // start later, so between transitions the only thing to wait for is `start + bound`.
    let mut changes = client.health_changes();
    let mut since: Option<Instant> = None;
    loop {
        changes.borrow_and_update();
        let now = Instant::now();
        let wake = if unavailable(client) {
            let mut start = *since.get_or_insert(now);
            if let Some(ok) = last_ok() {
                start = start.max(ok.min(now));
            }
            since = Some(start);
            if now - start >= bound {
                return now - start;
            }
            // A bound too far away to add (the user's `with_unavailable_bound`) never ends.
            start.checked_add(bound)
        } else {
            since = None;
            None
        };
        let deadline = async {
            match wake {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    // The client is gone: nothing will ever be available again.
                    std::future::pending::<()>().await;
                }
            }
            () = deadline => {}
        }
    }
}
