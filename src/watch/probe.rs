//! What the hub sends to learn how the stream stands: progress requests (the periodic probe,
//! and those callers ask for) and, when a request stays unanswered, a canary watch (the rules
//! behind both: `progress.rs`).

use tokio::time::Instant;

use super::hub::HubTask;
use super::link::{Up, cancel_request};
use crate::proto::etcdserverpb::{
    WatchCreateRequest, WatchProgressRequest, WatchRequest, watch_request::RequestUnion,
};

/// The key of the canary watch (see `progress.rs`): any key does; this one is never written
/// by anyone sane, so the canary sees no events.
const CANARY_KEY: &[u8] = b"\0etcd-ha/watch-liveness";

impl HubTask {
    /// Send the progress request callers asked for and tell them whether its answer will
    /// prove anything; with the request channel full, the next advance tries again.
    pub(super) fn progress_now(&mut self, up: &mut Up, now: Instant) {
        if self.send_progress_request(up, now) {
            let ordered = up.gate.ordered();
            for waiter in self.progress_wanted.drain(..) {
                let _ = waiter.send(ordered);
            }
        }
    }

    /// Ask the stream for a sign of life and progress: a new request every time (etcd drops
    /// one that arrives while a watch replays history), and a canary too when requests have
    /// gone unanswered for an interval (its `created` comes at once on every version).
    pub(super) fn probe(&mut self, up: &mut Up, now: Instant) {
        if up.gate.wants_canary(now) {
            let watch_id = self.watch_id();
            let create = WatchRequest {
                request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
                    key: CANARY_KEY.to_vec(),
                    watch_id,
                    ..Default::default()
                })),
            };
            if up.stream.tx.try_send(create).is_ok() {
                tracing::trace!(
                    endpoint = %up.stream.endpoint.url,
                    "progress requests unanswered; canary watch sent",
                );
                up.creating.push_back((watch_id, None));
                up.outbox.push_back(cancel_request(watch_id));
            }
        }
        // A full channel is a stream pushing back; the next probe tries again.
        self.send_progress_request(up, now);
    }

    /// Send one progress request; whether it went out.
    fn send_progress_request(&mut self, up: &mut Up, now: Instant) -> bool {
        let request = WatchRequest {
            request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})),
        };
        let sent = up.stream.tx.try_send(request).is_ok();
        if sent {
            up.gate.sent(now);
        }
        sent
    }
}
