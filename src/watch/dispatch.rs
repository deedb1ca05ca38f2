//! What the server says about each watch: created (or refused), events (reassembled, new
//! only), progress, canceled (compaction or a reason); and handing batches to the watches'
//! buffers, pausing a watch whose consumer is too slow.

use std::sync::atomic::Ordering;

use super::buffer::Refused;
use super::hub::{HubTask, State};
use super::link::{Up, cancel_request};
use super::managed::WatchBatch;
use super::relogin::Refusal;
use crate::error::Error;
use crate::proto::etcdserverpb::WatchResponse;

impl HubTask {
    /// One response from the server.
    pub(super) fn on_response(&mut self, up: &mut Up, response: WatchResponse) {
        let revision = response.header.as_ref().map_or(0, |h| h.revision);
        if response.created {
            self.on_created(up, response, revision);
            return;
        }
        if response.watch_id == -1 && response.events.is_empty() && !response.canceled {
            // The answer to a progress request: proof for the watches created below its
            // revision (see `progress.rs`), or life only.
            let Some(proved) = up.gate.answered(revision) else {
                return;
            };
            let covered: Vec<u64> = up
                .ids
                .values()
                .copied()
                .filter(|k| {
                    self.entries.get(k).is_some_and(
                        |e| matches!(e.state, State::Active { created, .. } if created < proved),
                    )
                })
                .collect();
            for key in covered {
                self.on_sound_progress(up, key, revision);
            }
            return;
        }
        let Some(&key) = up.ids.get(&response.watch_id) else {
            // A watch we canceled (or paused) whose last responses were still on the way.
            return;
        };
        if response.canceled {
            up.ids.remove(&response.watch_id);
            self.on_canceled(key, response);
            return;
        }
        if !response.events.is_empty() || response.fragment {
            // Events prove the member still follows the cluster's commits: a late probe or
            // call there is load, not a stall (see `endpoint/heard.rs`). Progress answers do
            // not: a cut-off member makes them from its own store.
            up.stream.endpoint.heard.news(tokio::time::Instant::now());
            let Some(entry) = self.entries.get_mut(&key) else {
                return;
            };
            match entry.cursor.events(response.events, response.fragment) {
                Ok(Some((last, events))) => {
                    let batch = WatchBatch::Events {
                        revision: last,
                        events,
                    };
                    self.deliver(up, key, batch, last);
                }
                Ok(None) => {}
                Err(error) => {
                    // This watch alone ends; the stream and its other watches go on.
                    tracing::warn!(%error, "watch response over the size cap; the watch ends");
                    up.ids.remove(&response.watch_id);
                    up.outbox.push_back(cancel_request(response.watch_id));
                    self.end(key, Err(error));
                }
            }
            return;
        }
        // The server's own progress notification for this watch: sound on every version.
        if self.entries.get(&key).is_some_and(|e| e.progress) {
            self.report_progress(up, key, revision);
        }
    }

    /// A sound answer to a progress request proved every event of watch `key` up to
    /// `revision` was sent: a watch that asked for progress is told; a quiet one keeps its
    /// place there without a word, so that a stream move after a compaction past its last
    /// event resumes it from here instead of below the compaction (it ended `Compacted`
    /// though nothing it watches had changed).
    fn on_sound_progress(&mut self, up: &mut Up, key: u64, revision: i64) {
        let Some(entry) = self.entries.get_mut(&key) else {
            return;
        };
        if entry.progress {
            self.report_progress(up, key, revision);
        } else if entry.cursor.progress(revision).is_some() {
            entry.cursor.advance(revision);
        }
    }

    /// A progress notification proved every event of watch `key` up to `revision` was sent:
    /// report it if it is news (and the watch asked for progress).
    pub(super) fn report_progress(&mut self, up: &mut Up, key: u64, revision: i64) {
        let Some(entry) = self.entries.get(&key) else {
            return;
        };
        if let Some(r) = entry.cursor.progress(revision) {
            self.deliver(up, key, WatchBatch::Progress { revision: r }, r);
        }
    }

    /// A `created` answer: matched to the oldest create in flight.
    pub(super) fn on_created(&mut self, up: &mut Up, response: WatchResponse, revision: i64) {
        let Some((asked, key)) = up.creating.pop_front() else {
            tracing::warn!(
                watch_id = response.watch_id,
                "created answer with no create in flight"
            );
            return;
        };
        // The id etcd will use: the one we asked for (etcd 3.4+), unless it chose another.
        let watch_id = if response.watch_id >= 0 {
            response.watch_id
        } else {
            asked
        };
        let Some(key) = key else {
            // The canary: its cancel went out with the id we asked for.
            if watch_id != asked && !response.canceled {
                up.outbox.push_back(cancel_request(watch_id));
            }
            return;
        };
        let Some(entry) = self.entries.get_mut(&key) else {
            // Dropped while its create was in flight.
            if !response.canceled {
                up.outbox.push_back(cancel_request(watch_id));
            }
            return;
        };
        if entry.state != (State::Creating { watch_id: asked }) {
            return;
        }
        if response.canceled {
            // The server refused the create (permission denied, a bad range, ...).
            let error = Error::from_cancel_reason(watch_id, &response.cancel_reason);
            let can_renew = self.transport.upgrade().is_some_and(|t| t.has_token());
            match Refusal::of(&error, entry.auth_refusals, can_renew) {
                Refusal::Verify => {
                    // Perhaps only the stream's token is stale: find out with a read.
                    entry.auth_refusals += 1;
                    entry.state = State::Verifying {
                        stream: up.generation,
                    };
                    tracing::debug!(%error, "watch refused; checking the permission");
                    self.spawn_permission_check(key);
                }
                Refusal::Final => {
                    tracing::debug!(%error, "watch refused");
                    self.end(key, Err(error));
                }
            }
            return;
        }
        entry.auth_refusals = 0;
        let at = entry.cursor.created(revision);
        entry.state = State::Active {
            watch_id,
            // No header: no progress answer ever covers it.
            created: response.header.as_ref().map_or(i64::MAX, |h| h.revision),
        };
        up.ids.insert(watch_id, key);
        if let Some(ready) = entry.ready.take() {
            let _ = ready.send(Ok(at));
        }
    }

    /// The server canceled a running watch.
    pub(super) fn on_canceled(&mut self, key: u64, response: WatchResponse) {
        let Some(entry) = self.entries.get_mut(&key) else {
            return;
        };
        entry.cursor.stream_lost();
        if response.compact_revision > 0 {
            let compact_revision = response.compact_revision;
            if entry.reload {
                tracing::info!(
                    compact_revision,
                    resume_from = entry.cursor.resume_from(),
                    "watch history compacted; reloading the range"
                );
                entry.state = State::Reloading;
                self.spawn_reload(key);
            } else {
                tracing::info!(
                    compact_revision,
                    resume_from = entry.cursor.resume_from(),
                    "watch history compacted; the watch ends"
                );
                self.end(key, Ok(WatchBatch::Compacted { compact_revision }));
            }
            return;
        }
        if response.cancel_reason.is_empty() {
            // Canceled without a reason: create it again from where it stands.
            self.enqueue(key);
        } else {
            let error = Error::from_cancel_reason(response.watch_id, &response.cancel_reason);
            tracing::warn!(%error, "watch canceled by the server");
            self.end(key, Err(error));
        }
    }

    /// Hand a batch to a watch's buffer, or pause the watch when the buffer is full.
    pub(super) fn deliver(&mut self, up: &mut Up, key: u64, batch: WatchBatch, revision: i64) {
        let Some(entry) = self.entries.get_mut(&key) else {
            return;
        };
        match entry.tx.try_send(Ok(batch)) {
            Ok(()) => {
                entry.cursor.advance(revision);
                // The client has seen this revision now: reads do not go back before it.
                if let Some(transport) = self.transport.upgrade() {
                    transport.revisions.delivered(revision);
                }
            }
            Err(Refused::Closed) => {
                // The consumer is gone; its Remove is on the way.
                if let State::Active { watch_id, .. } = entry.state {
                    up.ids.remove(&watch_id);
                    up.outbox.push_back(cancel_request(watch_id));
                }
                self.entries.remove(&key);
            }
            Err(Refused::Full) => {
                // The consumer is slow. Rather than stop reading the stream (which would
                // stall every other watch on it), this watch alone is canceled on the server
                // and resumed from its cursor once the consumer drained half its buffer.
                if let State::Active { watch_id, .. } = entry.state {
                    up.ids.remove(&watch_id);
                    up.outbox.push_back(cancel_request(watch_id));
                }
                entry.cursor.stream_lost();
                entry.state = State::Paused;
                entry.control.paused.store(true, Ordering::SeqCst);
                tracing::debug!(
                    resume_from = entry.cursor.resume_from(),
                    "watch consumer is slow; watch paused"
                );
                // The consumer may have drained its buffer in the meantime.
                let queued = entry.tx.len();
                if entry.control.should_resume(queued) {
                    self.enqueue(key);
                }
            }
        }
    }
}
