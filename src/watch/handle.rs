//! The handle on a watch hub ([`Hub`]), what handles ask of its task ([`Command`]) and where a
//! client keeps its hub ([`HubCell`]); the task itself is `hub.rs`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use super::buffer::{BatchSender, buffer};
use super::hub::HubTask;
use super::managed::{BUFFER, Control, WatchStream};
use super::now::ClusterNow;
use crate::call::Transport;
use crate::error::{Error, Result};
use crate::proto::etcdserverpb::WatchCreateRequest;

/// The client's watch hub: a handle on its task. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Hub {
    pub(super) inner: Arc<Inner>,
}

/// What the handles and the task share.
pub(super) struct Inner {
    /// Commands to the task; the task lives until the client is gone.
    pub(super) commands: mpsc::UnboundedSender<Command>,
    /// Tells watches apart in the hub.
    pub(super) next_key: AtomicU64,
    /// Streams opened so far (one, unless failures forced reopening).
    pub(super) streams_opened: AtomicU64,
    /// Streams lost to an error or the server's close (not moved by the client's own choice).
    pub(super) streams_broken: AtomicU64,
    /// The member whose stream carries the watches now.
    pub(super) endpoint: Mutex<Option<Arc<str>>>,
    /// This hub's place among its client's watch streams, and where the others are.
    pub(super) shard: usize,
    pub(super) placement: Arc<Placement>,
}

impl Inner {
    /// Say which member carries the stream now (`None`: no stream).
    pub(super) fn set_endpoint(&self, url: Option<Arc<str>>) {
        self.placement.set(self.shard, url.clone());
        *self.endpoint.lock().unwrap_or_else(|e| e.into_inner()) = url;
    }

    /// Whether a sibling stream with a lower place is on `url` too (the higher one moves, so
    /// two young streams never both leave).
    pub(super) fn shares_with_lower(&self, url: &str) -> bool {
        let members = self
            .placement
            .members
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        members
            .iter()
            .take(self.shard)
            .any(|m| m.as_deref() == Some(url))
    }

    /// The members the client's other watch streams are on: a new stream leaves them for last.
    pub(super) fn siblings(&self) -> Option<Arc<[Arc<str>]>> {
        let others = self.placement.others(self.shard);
        (!others.is_empty()).then(|| others.into())
    }
}

/// Which member each of a client's watch streams is on.
#[derive(Debug, Default)]
pub(crate) struct Placement {
    members: Mutex<Vec<Option<Arc<str>>>>,
}

impl Placement {
    fn set(&self, shard: usize, url: Option<Arc<str>>) {
        let mut members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        if members.len() <= shard {
            members.resize(shard + 1, None);
        }
        members[shard] = url;
    }

    fn others(&self, shard: usize) -> Vec<Arc<str>> {
        let members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        members
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != shard)
            .filter_map(|(_, m)| m.clone())
            .collect()
    }
}

/// What handles ask of the task.
pub(super) enum Command {
    /// Run a new watch.
    Add(Box<NewWatch>),
    /// The consumer dropped the watch.
    Remove(u64),
    /// The consumer drained a paused watch's buffer.
    Resume(u64),
    /// Ask the stream for progress as soon as no request is outstanding; answered, once it is
    /// sent, with whether the member orders the answer after pending events (`None`: its
    /// version is not known yet).
    Progress(oneshot::Sender<Option<bool>>),
}

/// A watch to run.
pub(super) struct NewWatch {
    /// Its key in the hub (the stream's handle names it so).
    pub(super) key: u64,
    /// The create request, less start revision and watch id (the hub sets those).
    pub(super) create: WatchCreateRequest,
    /// Reload the range instead of ending on compaction.
    pub(super) reload: bool,
    /// For a watch from "now": the newest revision this client had seen when it was asked
    /// for; nothing at or below it is delivered (see [`Cursor::from_now`]).
    pub(super) floor: i64,
    /// The sending half of its buffer.
    pub(super) tx: BatchSender,
    /// Shared with the stream's handle: pause flag, last item.
    pub(super) control: Arc<Control>,
    /// Answered with the watch's revision once the server created it.
    pub(super) ready: oneshot::Sender<Result<i64>>,
}

/// Where a client keeps its hub: started on first use, and started again if its task ended
/// (it panicked on something unforeseen), so that one failure does not leave every later
/// managed watch, election and lock of the client failing with `Shutdown`.
#[derive(Debug, Default)]
pub(crate) struct HubCell {
    /// One hub per watch stream (`Options::with_watch_streams`), started on first use.
    hubs: Mutex<Vec<Option<Hub>>>,
    /// The hub the next watch goes to.
    next: AtomicUsize,
    placement: Arc<Placement>,
    /// The cluster's "now", read once for the watches from now asked for together.
    pub(crate) now: ClusterNow,
}

impl HubCell {
    /// The hubs now, those that were started (they may have ended).
    pub(crate) fn all(&self) -> Vec<Hub> {
        let hubs = self.hubs.lock().unwrap_or_else(|e| e.into_inner());
        hubs.iter().flatten().cloned().collect()
    }
}

impl Hub {
    /// The hub of `transport`: the running one, or a new one on first use or after the last
    /// one's task ended (its command channel is closed then).
    pub(crate) fn of(cell: &HubCell, transport: &Arc<Transport>) -> Hub {
        let streams = transport.options.watch_streams.max(1);
        let shard = cell.next.fetch_add(1, Ordering::Relaxed) % streams;
        let mut hubs = cell.hubs.lock().unwrap_or_else(|e| e.into_inner());
        if hubs.len() < streams {
            hubs.resize(streams, None);
        }
        let hub = &mut hubs[shard];
        match &*hub {
            Some(running) if !running.inner.commands.is_closed() => running.clone(),
            ended => {
                if ended.is_some() {
                    tracing::warn!("the watch hub's task ended; starting a new one");
                }
                let started = Hub::start(transport, shard, cell.placement.clone());
                *hub = Some(started.clone());
                started
            }
        }
    }

    fn start(transport: &Arc<Transport>, shard: usize, placement: Arc<Placement>) -> Hub {
        let (commands, rx) = mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            commands,
            next_key: AtomicU64::new(1),
            streams_opened: AtomicU64::new(0),
            streams_broken: AtomicU64::new(0),
            endpoint: Mutex::new(None),
            shard,
            placement,
        });
        let task = HubTask::new(inner.clone(), transport, rx);
        tokio::spawn(
            task.run()
                .instrument(tracing::info_span!("etcd_ha_watch_hub")),
        );
        Hub { inner }
    }

    /// Start a managed watch; returns once the server created it. Gives up after `limit`. A
    /// watch from "now" (start revision 0) delivers nothing at or below `floor`.
    pub(crate) async fn watch(
        &self,
        create: WatchCreateRequest,
        reload: bool,
        floor: i64,
        limit: Option<Duration>,
    ) -> Result<WatchStream> {
        let key = self.inner.next_key.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = buffer(BUFFER);
        let (ready, answer) = oneshot::channel();
        let control = Arc::new(Control::default());
        self.inner
            .commands
            .send(Command::Add(Box::new(NewWatch {
                key,
                create,
                reload,
                floor,
                tx,
                control: control.clone(),
                ready,
            })))
            .map_err(|_| Error::Shutdown)?;
        // Made first, so that giving up (timeout, or the caller dropping us) removes the watch.
        let mut stream = WatchStream::new(rx, control, self.clone(), key);
        let answer = match limit {
            Some(limit) => tokio::time::timeout(limit, answer)
                .await
                .map_err(|_| Error::Timeout)?,
            None => answer.await,
        };
        let revision = answer.map_err(|_| Error::Shutdown)??;
        stream.set_revision(revision);
        Ok(stream)
    }

    /// The watch `key` was dropped: cancel it.
    pub(crate) fn remove(&self, key: u64) {
        let _ = self.inner.commands.send(Command::Remove(key));
    }

    /// The consumer of paused watch `key` drained half its buffer: resume it.
    pub(crate) fn resume(&self, key: u64) {
        let _ = self.inner.commands.send(Command::Resume(key));
    }

    /// Ask the stream for progress now (see [`WatchStream::request_progress`]): resolves to
    /// whether its answer proves anything once the request went out (`None`: the member's
    /// version is not known yet, so it proves nothing).
    pub(crate) async fn request_progress(&self) -> Result<Option<bool>> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .commands
            .send(Command::Progress(tx))
            .map_err(|_| Error::Shutdown)?;
        rx.await.map_err(|_| Error::Shutdown)
    }

    /// The URL of the member whose stream carries the watches now.
    pub(crate) fn endpoint(&self) -> Option<String> {
        self.inner
            .endpoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_deref()
            .map(str::to_owned)
    }

    /// Streams opened so far.
    pub(crate) fn streams_opened(&self) -> u64 {
        self.inner.streams_opened.load(Ordering::Relaxed)
    }

    /// Streams lost to an error or the server's close so far.
    pub(crate) fn streams_broken(&self) -> u64 {
        self.inner.streams_broken.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("endpoint", &self.endpoint())
            .field("streams_opened", &self.streams_opened())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Options;

    #[tokio::test(start_paused = true)]
    async fn a_hub_whose_task_ended_is_started_again() {
        let urls = vec!["http://127.0.0.1:1".to_string()];
        let transport = Transport::unprobed(&urls, Options::default());
        let cell = HubCell::default();
        let first = Hub::of(&cell, &transport);
        assert!(Arc::ptr_eq(&first.inner, &Hub::of(&cell, &transport).inner));
        // A hub whose task is gone (it panicked): its command channel is closed.
        let (commands, rx) = mpsc::unbounded_channel();
        drop(rx);
        let dead = Hub {
            inner: Arc::new(Inner {
                commands,
                next_key: AtomicU64::new(1),
                streams_opened: AtomicU64::new(0),
                streams_broken: AtomicU64::new(0),
                endpoint: Mutex::new(None),
                shard: 0,
                placement: Arc::default(),
            }),
        };
        *cell.hubs.lock().unwrap() = vec![Some(dead.clone())];
        let again = Hub::of(&cell, &transport);
        assert!(!Arc::ptr_eq(&again.inner, &dead.inner), "a new hub");
        assert!(!again.inner.commands.is_closed(), "and it runs");
    }
}
