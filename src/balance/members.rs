//! Member sync's side of the balancer: the endpoint set brought in line with the cluster's
//! members (dialled, kept or dropped).

use std::sync::Arc;

use super::Balancer;
use crate::endpoint::Endpoint;

impl Balancer {
    /// Bring the endpoint set in line with the cluster's members (client URLs of started,
    /// voting members). Keeps existing endpoints (their connections and health), dials new ones,
    /// drops removed ones. Never empties the set.
    pub(crate) fn apply_members(self: &Arc<Self>, urls: Vec<String>) {
        if urls.is_empty() {
            return;
        }
        let current = self.endpoints();
        // A TLS client never dials a plain-text URL (token and password in the clear).
        let secure = crate::endpoint::is_secure(
            self.config.dial.tls.is_some(),
            current.iter().map(|e| &*e.url),
        );
        // Nor a unix socket unless it was given one (see endpoint::member_url).
        let local = crate::endpoint::is_local(current.iter().map(|e| &*e.url));
        let mut next = Vec::with_capacity(urls.len());
        let mut added = Vec::new();
        for url in &urls {
            // A refused endpoint (another cluster's) is stopped: never kept, dialled anew.
            if let Some(ep) = current
                .iter()
                .find(|e| *e.url == **url && !e.cancel.is_cancelled())
            {
                next.push(ep.clone());
                continue;
            }
            if crate::endpoint::member_url(url, secure, local).is_none() {
                tracing::warn!(
                    %url,
                    "member URL refused (a TLS client never dials http://); skipped",
                );
                continue;
            }
            match self.config.dial.channel(url) {
                Ok(channel) => {
                    let ep = Endpoint::new(
                        url.as_str().into(),
                        channel,
                        self.config.dial.layer.as_ref(),
                        self.config.health,
                        self.cancel.child_token(),
                        self.health_changes.clone(),
                    );
                    added.push(ep.clone());
                    next.push(ep);
                }
                Err(e) => tracing::warn!(%url, error = %e, "member URL is not usable; skipped"),
            }
        }
        let removed: Vec<_> = current
            .iter()
            .filter(|e| !next.iter().any(|n| Arc::ptr_eq(n, e)))
            .cloned()
            .collect();
        if next.is_empty() || (added.is_empty() && removed.is_empty()) {
            return;
        }
        self.endpoints.send_replace(Arc::new(next));
        for ep in &added {
            tracing::info!(endpoint = %ep.url, "member added; endpoint in use");
            self.spawn_prober(ep.clone());
        }
        for ep in &removed {
            tracing::info!(endpoint = %ep.url, "member removed; endpoint dropped");
            ep.cancel.cancel();
        }
    }
}
