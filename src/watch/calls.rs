//! The hub's calls besides the stream, run as small tasks that report back: the stream
//! member's version (does it order progress answers?), its revision when the stream lags (is
//! the member or only the stream slow?) and the reload of a compacted watch's range.

use std::sync::Arc;

use tracing::Instrument;

use super::hub::{HubTask, Internal};
use super::lag::STALL_CAP;
use super::link::Up;
use super::progress::orders_progress;
use crate::call::supervise::backoff;
use crate::call::{Call, Deadline, Target, Transport};
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::kv::Kv;
use crate::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use crate::proto::etcdserverpb::{RangeRequest, StatusRequest};
use crate::proto::mvccpb::KeyValue;

/// Keys read per request when a watch reloads its range after a compaction.
const RELOAD_PAGE: i64 = 1000;

impl HubTask {
    /// Ask the stream's member for its version, to know whether its progress answers prove
    /// anything (see `progress.rs`).
    pub(super) fn check_version(&self, endpoint: &Arc<Endpoint>) {
        let transport = self.transport.clone();
        let endpoint = endpoint.clone();
        let report = self.internal_tx.clone();
        let generation = self.generation;
        tokio::spawn(
            async move {
                let Some(transport) = transport.upgrade() else {
                    return;
                };
                let status = transport
                    .call(
                        Call::new(Target::Member(endpoint), Deadline::Default),
                        StatusRequest {},
                    )
                    .await;
                drop(transport);
                let ordered = match status {
                    Ok(status) => {
                        let ordered = orders_progress(&status.version);
                        tracing::debug!(
                            version = %status.version,
                            ordered,
                            "watch stream's member version: its progress answers {}",
                            if ordered { "prove progress" } else { "only prove it is alive" },
                        );
                        ordered
                    }
                    Err(error) => {
                        tracing::debug!(
                            %error,
                            "no version from the watch stream's member; \
                             its progress answers prove nothing",
                        );
                        false
                    }
                };
                let _ = report.send(Internal::Version {
                    generation,
                    ordered,
                });
            }
            .in_current_span(),
        );
    }

    /// Ask the stream's member for its revision on the side, bounded by the longest stall
    /// limit; the answer comes back as [`Internal::MemberStatus`] (see `lag.rs`). Straight on
    /// its channel, like a probe: no retry elsewhere, no blame, no token.
    pub(super) fn ask_member(&self, up: &Up, sent: tokio::time::Instant) {
        let mut maintenance = MaintenanceClient::new(up.stream.endpoint.channel.clone());
        let report = self.internal_tx.clone();
        let generation = up.generation;
        let cancel = self.cancel.clone();
        tokio::spawn(async move {
            let call = tokio::time::timeout(STALL_CAP, maintenance.status(StatusRequest {}));
            let answer = tokio::select! {
                // The client is gone.
                () = cancel.cancelled() => return,
                // The answer, an error or the bound.
                answer = call => answer,
            };
            if let Ok(Ok(status)) = answer {
                let revision = status.get_ref().header.as_ref().map_or(0, |h| h.revision);
                let _ = report.send(Internal::MemberStatus {
                    generation,
                    sent,
                    revision,
                });
            }
        });
    }

    /// Read the current state of a watch's range (after its history was compacted), retrying
    /// transient failures; the result comes back as [`Internal::Reloaded`].
    pub(super) fn spawn_reload(&self, key: u64) {
        let Some(entry) = self.entries.get(&key) else {
            return;
        };
        let range = (entry.create.key.clone(), entry.create.range_end.clone());
        let max_bytes = self.max_bytes;
        let transport = self.transport.clone();
        let report = self.internal_tx.clone();
        let cancel = self.cancel.clone();
        tokio::spawn(
            async move {
                let mut failures = 0;
                let result = loop {
                    let Some(t) = transport.upgrade() else {
                        break Err(Error::Shutdown);
                    };
                    match read_range(t, &range.0, &range.1, max_bytes).await {
                        Ok(state) => break Ok(state),
                        Err(e) if e.is_retryable() || matches!(e, Error::Compacted { .. }) => {
                            failures += 1;
                            tracing::debug!(error = %e, "reload failed; retrying");
                            tokio::select! {
                                () = cancel.cancelled() => break Err(Error::Shutdown),
                                () = tokio::time::sleep(backoff(failures)) => {}
                            }
                        }
                        Err(e) => break Err(e),
                    }
                };
                let _ = report.send(Internal::Reloaded { key, result });
            }
            .in_current_span(),
        );
    }
}

/// Every key in `[key, range_end)` at one revision (the first page's), page by page; no more
/// than `max_bytes` in all ([`Error::WatchTooLarge`]: each page is bounded by gRPC, the whole
/// range only by what the server holds).
async fn read_range(
    transport: Arc<Transport>,
    key: &[u8],
    range_end: &[u8],
    max_bytes: usize,
) -> Result<(i64, Vec<KeyValue>)> {
    let kv = Kv::new(transport, None);
    let mut revision = 0;
    let mut from = key.to_vec();
    let mut kvs = Vec::new();
    let mut bytes = 0usize;
    loop {
        let page = kv
            .range(RangeRequest {
                key: from,
                range_end: range_end.to_vec(),
                revision,
                limit: RELOAD_PAGE,
                ..Default::default()
            })
            .await?;
        if revision == 0 {
            revision = page.header.as_ref().map_or(0, |h| h.revision);
        }
        let next = page.kvs.last().map(|kv| {
            let mut next = kv.key.clone();
            next.push(0);
            next
        });
        bytes = page
            .kvs
            .iter()
            .map(prost::Message::encoded_len)
            .fold(bytes, usize::saturating_add);
        if bytes > max_bytes {
            return Err(Error::WatchTooLarge { limit: max_bytes });
        }
        kvs.extend(page.kvs);
        match next {
            Some(next) if page.more && !range_end.is_empty() => from = next,
            _ => return Ok((revision, kvs)),
        }
    }
}
