//! The managed watch as its caller sees it: a [`WatchStream`] of [`WatchBatch`]es, fed by the
//! hub (`hub.rs`) through a bounded per-watch buffer.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_util::Stream;

use super::buffer::BatchReceiver;
use super::handle::Hub;
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::proto::mvccpb::{Event, KeyValue};

/// Batches one watch may have waiting for its consumer. A watch whose consumer lets the
/// buffer fill up is paused (see [`Watch::watch`](crate::Watch::watch)), so memory stays
/// bounded by this many batches per watch; 128 absorbs bursts of a busy key range without
/// pausing a consumer that keeps up on average.
pub(crate) const BUFFER: usize = 128;

/// What a managed watch delivers: events, progress, or what became of its history.
///
/// Every batch is delivered once, in revision order, across any failover.
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use etcd_ha::{WatchBatch, WatchOptions};
///
/// let mut jobs = client.watch().watch("jobs/", WatchOptions::new().with_prefix()).await?;
/// while let Some(batch) = jobs.next_batch().await {
///     match batch? {
///         WatchBatch::Events { revision, events } => println!("{} events up to {revision}", events.len()),
///         WatchBatch::Progress { revision } => println!("nothing else happened up to {revision}"),
///         WatchBatch::Compacted { compact_revision } => {
///             println!("history before {compact_revision} is gone; reload and watch again");
///             break;
///         }
///         WatchBatch::Reloaded { revision, kvs } => println!("{} keys at {revision}", kvs.len()),
///         _ => {}
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum WatchBatch {
    /// The events of one or more consecutive revisions (a revision's events are never split
    /// across batches: fragmented responses are reassembled), in revision order; `revision`
    /// is the last event's.
    Events {
        /// The mod revision of the last event.
        revision: i64,
        /// The events, oldest first.
        events: Vec<Event>,
    },
    /// Every event of this watch up to `revision` has been delivered. Only for watches made
    /// with [`WatchOptions::with_progress_notify`](crate::WatchOptions::with_progress_notify);
    /// see [`Watch::watch`](crate::Watch::watch) for where it comes from.
    Progress {
        /// Nothing else happened to the watched keys up to this revision.
        revision: i64,
    },
    /// The history this watch needs was compacted away: events between its last delivered
    /// revision and `compact_revision` are lost. The watch ends after this batch (unless it was
    /// made with [`with_reload_on_compaction`](crate::WatchOptions::with_reload_on_compaction),
    /// which delivers [`Reloaded`](WatchBatch::Reloaded) instead).
    Compacted {
        /// The revision the history was compacted at; a watch from it would work again.
        compact_revision: i64,
    },
    /// The history was compacted, so the watch read the current state of its keys instead:
    /// `kvs` is every key in its range at `revision`, and events continue from
    /// `revision + 1`. Replace whatever state was built from earlier batches.
    Reloaded {
        /// The revision the state was read at.
        revision: i64,
        /// Every key in the watched range at `revision`, in key order.
        kvs: Vec<KeyValue>,
    },
}

impl WatchBatch {
    /// The revision this batch brings the watch to (for [`Compacted`](Self::Compacted), the
    /// compaction revision).
    ///
    /// ```
    /// let b = etcd_ha::WatchBatch::Progress { revision: 7 };
    /// assert_eq!(b.revision(), 7);
    /// ```
    pub fn revision(&self) -> i64 {
        match self {
            WatchBatch::Events { revision, .. }
            | WatchBatch::Progress { revision }
            | WatchBatch::Reloaded { revision, .. } => *revision,
            WatchBatch::Compacted { compact_revision } => *compact_revision,
        }
    }
}

/// What a watch's stream and the hub share, besides the buffer.
#[derive(Debug, Default)]
pub(crate) struct Control {
    /// Set by the hub when it paused the watch because the buffer was full; whoever swaps it
    /// back (the stream after draining half the buffer, or the hub if that already happened)
    /// has the watch resumed.
    pub(crate) paused: AtomicBool,
    /// The item that ends the watch ([`WatchBatch::Compacted`] or an error), handed over after
    /// everything already buffered; the hub sets it, then drops the buffer's sender.
    pub(crate) last: Mutex<Option<Result<WatchBatch>>>,
}

impl Control {
    /// Leave the item that ends the watch.
    pub(crate) fn set_last(&self, item: Result<WatchBatch>) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(item);
    }

    fn take_last(&self) -> Option<Result<WatchBatch>> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Whether the hub should resume a paused watch whose buffer holds `queued` batches; at
    /// most one caller gets `true` per pause.
    pub(crate) fn should_resume(&self, queued: usize) -> bool {
        queued <= BUFFER / 2
            && self.paused.load(Ordering::SeqCst)
            && self.paused.swap(false, Ordering::SeqCst)
    }
}

/// A managed watch: a [`Stream`] of [`WatchBatch`]es that survives member failures. Get one
/// with [`Watch::watch`](crate::Watch::watch).
///
/// Dropping it (or calling [`cancel`](Self::cancel)) cancels the watch on the server.
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use futures_util::StreamExt;
///
/// let mut config = client.watch().watch("config/", etcd_ha::WatchOptions::new().with_prefix()).await?;
/// while let Some(batch) = config.next().await {
///     println!("{:?}", batch?);
/// }
/// # Ok(())
/// # }
/// ```
pub struct WatchStream {
    /// The watch's buffer (bounded: [`BUFFER`]).
    rx: BatchReceiver,
    /// Shared with the hub: pause flag and the last item.
    control: Arc<Control>,
    /// For cancel on drop and resume after a pause.
    hub: Hub,
    /// The watch's key in the hub.
    key: u64,
    /// Last revision delivered to the caller (see [`revision`](Self::revision)).
    revision: i64,
    /// The last item was handed over: nothing more comes.
    ended: bool,
    /// The namespace of the client that made the watch: keys are stripped of it.
    namespace: Option<Namespace>,
}

impl WatchStream {
    pub(crate) fn new(rx: BatchReceiver, control: Arc<Control>, hub: Hub, key: u64) -> Self {
        WatchStream {
            rx,
            control,
            hub,
            key,
            revision: 0,
            ended: false,
            namespace: None,
        }
    }

    pub(crate) fn set_namespace(&mut self, namespace: Option<Namespace>) {
        self.namespace = namespace;
    }

    pub(crate) fn set_revision(&mut self, revision: i64) {
        self.revision = revision;
    }

    /// The next batch; `None` once the watch ended (after [`WatchBatch::Compacted`] or an
    /// error). Errors are final: after one, the stream ends.
    ///
    /// ```no_run
    /// # async fn demo(mut w: etcd_ha::WatchStream) -> etcd_ha::Result<()> {
    /// while let Some(batch) = w.next_batch().await {
    ///     let _ = batch?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn next_batch(&mut self) -> Option<Result<WatchBatch>> {
        std::future::poll_fn(|cx| self.poll_batch(cx)).await
    }

    /// Every event of this watch up to this revision has been delivered to the caller; a
    /// resume continues from `revision() + 1`. Right after [`Watch::watch`](crate::Watch::watch)
    /// returns it is the revision the watch was created at (for a watch from "now") or the
    /// start revision minus one.
    ///
    /// ```no_run
    /// # async fn demo(w: etcd_ha::WatchStream) {
    /// println!("up to date with revision {}", w.revision());
    /// # }
    /// ```
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The URL of the member whose stream carries the client's managed watches now, if one is
    /// open.
    ///
    /// ```no_run
    /// # fn demo(w: etcd_ha::WatchStream) {
    /// println!("served by {:?}", w.endpoint());
    /// # }
    /// ```
    pub fn endpoint(&self) -> Option<String> {
        self.hub.endpoint()
    }

    /// Ask the server for progress on this watch's stream now, rather than at the next
    /// periodic request (every second). Resolves once the request went out, to whether the
    /// answer will prove anything: `true` on members that order progress answers after
    /// pending events (etcd 3.4.25+, 3.5.8+, 3.6+), where a watch made with
    /// [`with_progress_notify`](crate::WatchOptions::with_progress_notify) then gets a
    /// [`WatchBatch::Progress`] (if it is news); `false` where the answer only proves the
    /// stream alive, or while the member's version is not known yet.
    ///
    /// etcd answers only when every watch on the stream has caught up, and drops a request
    /// that arrives while one replays history: on a stream shared with such watches the
    /// answer comes with a later request (the periodic one, or the next call of this), once
    /// they caught up. A watch that needs prompt answers belongs on a stream of its own
    /// ([`Watch::isolated`](crate::Watch::isolated)).
    ///
    /// ```no_run
    /// # async fn demo(w: etcd_ha::WatchStream) -> etcd_ha::Result<()> {
    /// if !w.request_progress().await? {
    ///     println!("this member's progress answers prove nothing");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn request_progress(&self) -> Result<bool> {
        Ok(self.hub.request_progress().await? == Some(true))
    }

    /// The hub that carries this watch (a cache asks it for progress while another task
    /// reads the stream).
    pub(crate) fn hub(&self) -> Hub {
        self.hub.clone()
    }

    /// Cancel the watch (on the server too). Dropping the stream does the same.
    ///
    /// ```no_run
    /// # fn demo(w: etcd_ha::WatchStream) {
    /// w.cancel();
    /// # }
    /// ```
    pub fn cancel(self) {}

    fn poll_batch(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<WatchBatch>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        let item = match self.rx.poll_recv(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Some(item)) => {
                if self.control.should_resume(self.rx.len()) {
                    self.hub.resume(self.key);
                }
                item
            }
            Poll::Ready(None) => {
                self.ended = true;
                match self.control.take_last() {
                    Some(item) => item,
                    // The hub went away without a word: the client is gone.
                    None => Err(Error::Shutdown),
                }
            }
        };
        let mut item = item;
        if let (Some(ns), Ok(batch)) = (&self.namespace, &mut item) {
            match batch {
                WatchBatch::Events { events, .. } => events.iter_mut().for_each(|e| ns.event(e)),
                WatchBatch::Reloaded { kvs, .. } => kvs.iter_mut().for_each(|kv| ns.kv(kv)),
                _ => {}
            }
        }
        match &item {
            Ok(
                batch @ (WatchBatch::Events { .. }
                | WatchBatch::Progress { .. }
                | WatchBatch::Reloaded { .. }),
            ) => {
                self.revision = self.revision.max(batch.revision());
            }
            Ok(_) => {}
            Err(_) => self.ended = true,
        }
        Poll::Ready(Some(item))
    }
}

impl Stream for WatchStream {
    type Item = Result<WatchBatch>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_batch(cx)
    }
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        self.hub.remove(self.key);
    }
}

impl std::fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStream")
            .field("revision", &self.revision)
            .field("buffered", &self.rx.len())
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_is_resumed_once_by_whoever_sees_half_the_buffer_free() {
        let control = Control::default();
        // Not paused: nothing to resume.
        assert!(!control.should_resume(0));
        control.paused.store(true, Ordering::SeqCst);
        // Still more than half full: keep paused.
        assert!(!control.should_resume(BUFFER / 2 + 1));
        assert!(control.paused.load(Ordering::SeqCst));
        // Half drained: exactly one caller (stream or hub) gets to resume it.
        assert!(control.should_resume(BUFFER / 2));
        assert!(!control.should_resume(0));
    }

    #[test]
    fn the_last_item_is_handed_over_once() {
        let control = Control::default();
        control.set_last(Ok(WatchBatch::Compacted {
            compact_revision: 9,
        }));
        assert!(matches!(
            control.take_last(),
            Some(Ok(WatchBatch::Compacted {
                compact_revision: 9
            }))
        ));
        assert!(control.take_last().is_none());
    }
}
