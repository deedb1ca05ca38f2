//! What the hub sends to learn how the stream stands: progress requests (the periodic probe,
//! and those callers ask for) and, when a request stays unanswered, a canary watch (the rules
//! behind both: `progress.rs`).

use tokio::time::Instant;

use super::hub::HubTask;
use super::link::{Up, cancel_request};
use super::progress::Probe;
use crate::proto::etcdserverpb::{
    WatchCreateRequest, WatchProgressRequest, WatchRequest, watch_request::RequestUnion,
};

/// The key of the canary watch (see `progress.rs`): any key does; this one is never written
/// by anyone sane, so the canary sees no events.
const CANARY_KEY: &[u8] = b"\0etcd-ha/watch-liveness";

impl HubTask {
    /// Send the progress request callers asked for, unless one is outstanding (its answer
    /// frees the slot and the next advance sends this one: one at a time keeps requests and
    /// answers paired); tell them whether its answer will prove anything.
    pub(super) fn progress_now(&mut self, up: &mut Up, now: Instant) {
        if up.gate.probe(now) != Probe::Progress {
            return;
        }
        let request = WatchRequest {
            request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})),
        };
        if up.tx.try_send(request).is_ok() {
            up.gate.sent(now);
            let ordered = up.gate.ordered();
            for waiter in self.progress_wanted.drain(..) {
                let _ = waiter.send(ordered);
            }
        }
    }

    /// Ask the stream for a sign of life (and progress).
    pub(super) fn probe(&mut self, up: &mut Up, now: Instant) {
        match up.gate.probe(now) {
            Probe::Progress => {
                let request = WatchRequest {
                    request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})),
                };
                // A full channel is a stream pushing back; the next probe tries again.
                if up.tx.try_send(request).is_ok() {
                    up.gate.sent(now);
                }
            }
            // A progress request is owed (newer etcd holds its answer while a watch catches
            // up): a canary's `created` comes at once on every version.
            Probe::Canary | Probe::Wait => {
                let watch_id = self.watch_id();
                let create = WatchRequest {
                    request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                        key: CANARY_KEY.to_vec(),
                        watch_id,
                        ..Default::default()
                    })),
                };
                if up.tx.try_send(create).is_ok() {
                    tracing::trace!(
                        endpoint = %up.endpoint.url,
                        "progress request unanswered; canary watch sent",
                    );
                    up.creating.push_back((watch_id, None));
                    up.outbox.push_back(cancel_request(watch_id));
                }
            }
        }
    }
}
