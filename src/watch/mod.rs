//! The Watch service: the managed watch ([`Watch::watch`]: shared stream, failover, exact
//! resume) and the raw bidirectional stream ([`Watch::raw`], [`Watch::open`]: create, cancel
//! and progress requests in, watch responses out).
//!
//! The files: `managed.rs` is what the caller holds ([`WatchStream`], [`WatchBatch`]) and
//! `buffer.rs` the batches waiting for it;
//! `hub.rs` the task that owns the shared stream; `resume.rs` where a watch resumes (pure);
//! `progress.rs` the liveness and progress rules (pure); `lag.rs` the rule that moves the
//! stream off a member that falls behind the client's revisions at its own pace (pure);
//! `relogin.rs` what an auth refusal of a create does to the stream; `now.rs` the one
//! quorum read that watches from now asked for together share. This file is the service and
//! the options.

mod buffer;
mod calls;
mod dispatch;
mod handle;
mod hub;
mod lag;
mod link;
mod managed;
mod now;
mod probe;
mod progress;
mod raw;
mod relogin;
mod resume;

use std::sync::Arc;

pub(crate) use handle::{Hub, HubCell};
pub use managed::{WatchBatch, WatchStream};
pub use raw::Watcher;

use crate::call::{Call, Transport};
use crate::error::Result;
use crate::kv::{GetOptions, Kv};
use crate::namespace::{self, Namespace};
use crate::proto::etcdserverpb::{
    WatchCreateRequest, WatchRequest, WatchResponse, watch_create_request::FilterType,
    watch_request::RequestUnion,
};
use crate::stream::ResponseStream;

/// The Watch service. Get one with [`Client::watch`](crate::Client::watch).
///
/// [`watch`](Self::watch) is the managed watch: it survives member failures and delivers every
/// event exactly once. [`raw`](Self::raw) and [`open`](Self::open) are the bare gRPC stream,
/// which does not reconnect or resume by itself.
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use etcd_ha::{WatchBatch, WatchOptions};
/// let mut jobs = client.watch().watch("jobs/", WatchOptions::new().with_prefix()).await?;
/// while let Some(batch) = jobs.next_batch().await {
///     if let WatchBatch::Events { events, .. } = batch? {
///         for event in events {
///             println!("{:?} {:?}", event.r#type(), event.kv);
///         }
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Watch {
    transport: Arc<Transport>,
    /// The client's hub, started by the first managed watch.
    hub: Arc<HubCell>,
    /// The client's namespace: watched keys are prefixed, events' keys stripped.
    namespace: Option<Namespace>,
}

impl Watch {
    pub(crate) fn new(
        transport: Arc<Transport>,
        hub: Arc<HubCell>,
        namespace: Option<Namespace>,
    ) -> Self {
        Watch {
            transport,
            hub,
            namespace,
        }
    }

    /// Watch `key` (with `options`): a managed watch that survives member failures.
    ///
    /// Returns once the server created the watch, so a write made after this returns is seen
    /// (a watch from "now" is pinned to the revision it was created at); gives up with
    /// [`Error::Timeout`](crate::Error::Timeout) after the client's request timeout.
    ///
    /// "Now" is the serving member's current revision when the watch is created, and never
    /// earlier than what this client has already seen: a watch without a start revision
    /// delivers nothing at or below the newest revision of any KV answer the client received
    /// (a put it just made, say), even when the member serving the watch has not applied that
    /// revision yet, and nothing written before `watch` was called, however old the client's
    /// last answer.
    ///
    /// # What it guarantees
    ///
    /// Every event in the watched range after the start revision is delivered exactly once, in
    /// revision order, across any failover, as long as the history it needs is not compacted
    /// away (then [`WatchBatch::Compacted`], or [`WatchBatch::Reloaded`] with
    /// [`WatchOptions::with_reload_on_compaction`]). A revision's events are never split
    /// across batches: fragmented responses are reassembled.
    ///
    /// # How
    ///
    /// All managed watches of a [`Client`](crate::Client) share one gRPC stream, owned by one
    /// background task. The stream is opened like any watch (spread over healthy members,
    /// with require-leader unless the client turned it off, so a member that lost its leader
    /// cancels it within a few seconds). The task asks for progress every second; a stream
    /// that says nothing at all for 3 s (a frozen or black-holed member, which never cancels
    /// anything) is dead. When the stream fails, falls silent, is refused for lack of a
    /// leader, or its member is ejected by the client's probes, the member is reported to the
    /// balancer and every watch is created again on a new stream on another member, from the
    /// revision after the last one it handed over (a watch from "now" from the revision after
    /// its creation). Events at or below that revision are dropped should the server send
    /// them again.
    ///
    /// # From "now"
    ///
    /// A watch without a start revision begins at the cluster's revision when `watch` is
    /// called: it delivers nothing written (and answered to anyone) before the call. The
    /// member that serves the stream may lag behind the cluster (restarted, cut off from its
    /// peers), and its own "now" would replay what it applies late; so a watch from now first
    /// makes one linearizable read (a count of the watched key: a quorum round trip) and drops
    /// whatever the stream sends at or below that revision. When that read fails, so does
    /// `watch`, with its error.
    ///
    /// # Backpressure
    ///
    /// Each watch has a bounded buffer (128 batches). The task never waits for a consumer:
    /// when a watch's buffer is full, that watch alone is canceled on the server and resumed
    /// from its last buffered revision once its consumer has drained half the buffer. Other
    /// watches on the stream are not held up; the slow one replays from history, so if its
    /// consumer stays away past a compaction it gets [`WatchBatch::Compacted`] (or a reload).
    ///
    /// # Progress
    ///
    /// With [`WatchOptions::with_progress_notify`], [`WatchBatch::Progress`] reports that
    /// every event up to a revision has been delivered. It comes from the server's own
    /// per-watch notifications (every 10 minutes by default; etcd's
    /// `--experimental-watch-progress-notify-interval`), which are ordered after the watch's
    /// events on every version, and from the answers to the task's progress requests on
    /// members whose version orders them after pending events (etcd 3.4.25+, 3.5.8+, 3.6+);
    /// on older members those answers can overtake events (etcd#15220) and only serve as a
    /// sign of life. A progress is delivered only when it is newer than what was delivered.
    ///
    /// # Options
    ///
    /// Every [`WatchOptions`] applies except [`with_watch_id`](WatchOptions::with_watch_id)
    /// (the task chooses ids on the shared stream) and
    /// [`with_fragment`](WatchOptions::with_fragment) (always on; fragments are reassembled).
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// use etcd_ha::{WatchBatch, WatchOptions};
    ///
    /// let options = WatchOptions::new().with_prefix().with_reload_on_compaction();
    /// let mut config = client.watch().watch("config/", options).await?;
    /// while let Some(batch) = config.next_batch().await {
    ///     match batch? {
    ///         WatchBatch::Events { events, .. } => println!("{} changes", events.len()),
    ///         WatchBatch::Reloaded { kvs, .. } => println!("history compacted; {} keys now", kvs.len()),
    ///         _ => {}
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn watch(
        &self,
        key: impl Into<Vec<u8>>,
        options: WatchOptions,
    ) -> Result<WatchStream> {
        let reload = options.reload_on_compaction;
        let create = options.create_request(key.into());
        let mut create = namespace::map(self.namespace.as_ref(), create, Namespace::watch_create);
        create.watch_id = 0;
        create.fragment = true;
        let mut cluster_now = 0;
        #[cfg(feature = "mutants")]
        let stale = crate::mutants::from_now_stale();
        #[cfg(not(feature = "mutants"))]
        let stale = false;
        if create.start_revision == 0 && !stale {
            // "Now" is the cluster's, not the serving member's (which can lag: a follower cut
            // off from its peers replayed hundreds of acknowledged writes in the robustness
            // suite) nor this client's last answer (which can be old: starting right after it
            // replayed every write since). Nothing at or below the read's revision is
            // delivered.
            // One read serves every watch asked for while it is on its way (`now.rs`).
            let read = || async {
                let now = Kv::new(self.transport.clone(), None)
                    .get(create.key.clone(), GetOptions::new().with_count_only())
                    .await?;
                Ok(now.header.map_or(0, |h| h.revision))
            };
            cluster_now = self.hub.now.get(read).await?;
        }
        let floor = self.transport.revisions.seen().max(cluster_now);
        let mut stream = Hub::of(&self.hub, &self.transport)
            .watch(
                create,
                reload,
                floor,
                self.transport.options.request_timeout,
            )
            .await?;
        stream.set_namespace(self.namespace.clone());
        Ok(stream)
    }

    /// A [`Watch`] whose managed watches share a stream of their own, apart from the client's
    /// other managed watches (and with its own background task, which ends when this handle
    /// and its watches are dropped). For a watch that must not wait for others: etcd answers a
    /// progress request only once every watch on the stream has caught up, and a watch that
    /// replays a long history holds up the events of the watches behind it on its stream.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// let own = client.watch().isolated();
    /// let w = own.watch("config/", etcd_ha::WatchOptions::new().with_prefix()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn isolated(&self) -> Watch {
        Watch {
            transport: self.transport.clone(),
            hub: Arc::new(HubCell::default()),
            namespace: self.namespace.clone(),
        }
    }

    /// How many streams the managed watches of this client have opened (one, unless
    /// failures forced reopening). For tests.
    #[doc(hidden)]
    pub fn streams_opened(&self) -> u64 {
        self.hub.all().iter().map(Hub::streams_opened).sum()
    }

    /// How many of those streams broke (an error, a silence, the server's close) rather than
    /// being left by the client's own choice (a member too slow or unhealthy). For tests.
    #[doc(hidden)]
    pub fn streams_broken(&self) -> u64 {
        self.hub.all().iter().map(Hub::streams_broken).sum()
    }

    /// The URL of the member whose stream carries this client's managed watches now (`None`
    /// before the first managed watch, or between streams).
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// println!("watches go to {:?}", client.watch().stream_endpoint());
    /// # }
    /// ```
    pub fn stream_endpoint(&self) -> Option<String> {
        self.hub.all().iter().find_map(Hub::endpoint)
    }

    /// The members whose streams carry this client's managed watches now, one per stream
    /// (see [`Options::with_watch_streams`](crate::Options::with_watch_streams)). For tests.
    #[doc(hidden)]
    pub fn stream_endpoints(&self) -> Vec<String> {
        self.hub.all().iter().filter_map(Hub::endpoint).collect()
    }

    /// Open a raw watch stream with a first watch on `key`. More watches can share the stream
    /// through the returned [`Watcher`]. The stream does not reconnect or resume by itself;
    /// see [`watch`](Self::watch) for one that does.
    ///
    /// ```no_run
    /// # async fn demo(watch: etcd_ha::Watch) -> etcd_ha::Result<()> {
    /// let (watcher, mut responses) = watch.raw("k", etcd_ha::WatchOptions::new().with_start_revision(1)).await?;
    /// while let Some(resp) = responses.message().await? {
    ///     println!("{} events for watch {}", resp.events.len(), resp.watch_id);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn raw(
        &self,
        key: impl Into<Vec<u8>>,
        options: WatchOptions,
    ) -> Result<(Watcher, ResponseStream<WatchResponse>)> {
        self.open(options.into_request(key.into())).await
    }

    /// Open a raw watch stream whose first request is `first`.
    ///
    /// ```no_run
    /// # async fn demo(watch: etcd_ha::Watch) -> etcd_ha::Result<()> {
    /// let first = etcd_ha::WatchOptions::new().into_request(b"k".to_vec());
    /// let (watcher, responses) = watch.open(first).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn open(
        &self,
        first: WatchRequest,
    ) -> Result<(Watcher, ResponseStream<WatchResponse>)> {
        let first = namespace::map(self.namespace.as_ref(), first, Namespace::watch_request);
        let (tx, mut stream) = self.transport.open_bidi(Call::default(), first).await?;
        if let Some(ns) = self.namespace.clone() {
            stream = stream.with_map(move |r: &mut WatchResponse| ns.watch_response(r));
        }
        let namespace = self.namespace.clone();
        Ok((Watcher::new(tx, namespace), stream))
    }
}

/// Options of one watch.
///
/// ```
/// let options = etcd_ha::WatchOptions::new()
///     .with_prefix()
///     .with_start_revision(100)
///     .with_prev_kv()
///     .with_progress_notify()
///     .without_deletes();
/// ```
#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    create: WatchCreateRequest,
    prefix: bool,
    from_key: bool,
    /// Managed watch only: reload the range instead of ending on compaction.
    reload_on_compaction: bool,
}

impl WatchOptions {
    /// Watch one key from the next revision.
    ///
    /// ```
    /// let o = etcd_ha::WatchOptions::new();
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Watch every key that starts with the key.
    ///
    /// ```
    /// let o = etcd_ha::WatchOptions::new().with_prefix();
    /// ```
    pub fn with_prefix(mut self) -> Self {
        self.prefix = true;
        self
    }

    /// Watch every key in `[key, end)`.
    ///
    /// ```
    /// let o = etcd_ha::WatchOptions::new().with_range("z");
    /// ```
    pub fn with_range(mut self, end: impl Into<Vec<u8>>) -> Self {
        self.create.range_end = end.into();
        self
    }

    /// Watch every key greater than or equal to the key.
    ///
    /// ```
    /// let o = etcd_ha::WatchOptions::new().with_from_key();
    /// ```
    pub fn with_from_key(mut self) -> Self {
        self.from_key = true;
        self
    }

    /// Deliver history from this revision on (inclusive); 0 means "from now".
    ///
    /// ```
    /// let o = etcd_ha::WatchOptions::new().with_start_revision(42);
    /// ```
    pub fn with_start_revision(mut self, revision: i64) -> Self {
        self.create.start_revision = revision;
        self
    }

    /// Have the server send periodic progress notifications while idle.
    ///
    /// ```
    /// let o = etcd_ha::WatchOptions::new().with_progress_notify();
    /// ```
    pub fn with_progress_notify(mut self) -> Self {
        self.create.progress_notify = true;
        self
    }

    /// Include the previous key-value pair in each event.
    ///
    /// ```
    /// let o = etcd_ha::WatchOptions::new().with_prev_kv();
    /// ```
    pub fn with_prev_kv(mut self) -> Self {
        self.create.prev_kv = true;
        self
    }

    /// Leave out put events.
    ///
    /// ```
    /// let o = etcd_ha::WatchOptions::new().without_puts();
    /// ```
    pub fn without_puts(mut self) -> Self {
        self.create.filters.push(FilterType::Noput as i32);
        self
    }

    /// Leave out delete events.
    ///
    /// ```
    /// let o = etcd_ha::WatchOptions::new().without_deletes();
    /// ```
    pub fn without_deletes(mut self) -> Self {
        self.create.filters.push(FilterType::Nodelete as i32);
        self
    }

    /// Ask for this watch id instead of one chosen by the server (etcd 3.4+).
    ///
    /// ```
    /// let o = etcd_ha::WatchOptions::new().with_watch_id(7);
    /// ```
    pub fn with_watch_id(mut self, id: i64) -> Self {
        self.create.watch_id = id;
        self
    }

    /// Let the server split large revisions over several responses (`fragment` set on all but
    /// the last); the caller reassembles them.
    ///
    /// ```
    /// let o = etcd_ha::WatchOptions::new().with_fragment();
    /// ```
    pub fn with_fragment(mut self) -> Self {
        self.create.fragment = true;
        self
    }

    /// Managed watch ([`Watch::watch`]) only: when the history the watch needs was compacted
    /// away, read the current state of the range and continue from there
    /// ([`WatchBatch::Reloaded`], then events after its revision) instead of ending with
    /// [`WatchBatch::Compacted`].
    ///
    /// ```
    /// let o = etcd_ha::WatchOptions::new().with_prefix().with_reload_on_compaction();
    /// ```
    pub fn with_reload_on_compaction(mut self) -> Self {
        self.reload_on_compaction = true;
        self
    }

    /// The create request these options make for `key`.
    ///
    /// ```
    /// let req = etcd_ha::WatchOptions::new().with_prefix().into_request(b"a".to_vec());
    /// ```
    pub fn into_request(self, key: Vec<u8>) -> WatchRequest {
        WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(self.create_request(key))),
        }
    }

    fn create_request(self, key: Vec<u8>) -> WatchCreateRequest {
        let mut create = self.create;
        if self.prefix {
            create.range_end = crate::kv::prefix_end(&key);
        } else if self.from_key {
            create.range_end = vec![0];
        }
        create.key = key;
        create
    }
}
