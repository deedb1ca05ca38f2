//! The Watch service as the raw bidirectional stream: create, cancel and progress requests in,
//! watch responses out.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::proto::etcdserverpb::{
    WatchCancelRequest, WatchCreateRequest, WatchProgressRequest, WatchRequest, WatchResponse,
    watch_create_request::FilterType, watch_request::RequestUnion,
};
use crate::rpc::Rpc;
use crate::stream::ResponseStream;
use crate::transport::{Deadline, Target, Transport};

/// The Watch service. Get one with [`Client::watch`](crate::Client::watch).
///
/// This is the raw stream: it does not reconnect or resume by itself.
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use etcd_ha::WatchOptions;
/// let (watcher, mut responses) = client.watch().watch("jobs/", WatchOptions::new().with_prefix()).await?;
/// while let Some(resp) = responses.message().await? {
///     for event in resp.events {
///         println!("{:?} {:?}", event.r#type(), event.kv);
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Watch {
    transport: Arc<Transport>,
}

impl Watch {
    pub(crate) fn new(transport: Arc<Transport>) -> Self {
        Watch { transport }
    }

    /// Open a watch stream with a first watch on `key`. More watches can share the stream
    /// through the returned [`Watcher`].
    ///
    /// ```no_run
    /// # async fn demo(watch: etcd_ha::Watch) -> etcd_ha::Result<()> {
    /// let (watcher, responses) = watch.watch("k", etcd_ha::WatchOptions::new().with_start_revision(1)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn watch(
        &self,
        key: impl Into<Vec<u8>>,
        options: WatchOptions,
    ) -> Result<(Watcher, ResponseStream<WatchResponse>)> {
        self.open(options.into_request(key.into())).await
    }

    /// Open a watch stream whose first request is `first`.
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
        let (tx, stream) = self
            .transport
            .open_bidi(
                Rpc::Watch,
                Target::Any,
                Deadline::Default,
                first,
                |c, r| async move { c.watch().watch(r).await },
            )
            .await?;
        Ok((Watcher { tx }, stream))
    }
}

/// The sending half of a watch stream: add watches, cancel them, ask for progress.
///
/// ```no_run
/// # async fn demo(watcher: etcd_ha::Watcher) -> etcd_ha::Result<()> {
/// watcher.watch("other", etcd_ha::WatchOptions::new()).await?;
/// watcher.request_progress().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Watcher {
    tx: mpsc::Sender<WatchRequest>,
}

impl Watcher {
    /// Add a watch on this stream; its `created` response carries the watch id.
    ///
    /// ```no_run
    /// # async fn demo(watcher: etcd_ha::Watcher) -> etcd_ha::Result<()> {
    /// watcher.watch("b", etcd_ha::WatchOptions::new().with_prev_kv()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn watch(&self, key: impl Into<Vec<u8>>, options: WatchOptions) -> Result<()> {
        self.send(options.into_request(key.into())).await
    }

    /// Cancel the watch with this id; the server answers with a `canceled` response.
    ///
    /// ```no_run
    /// # async fn demo(watcher: etcd_ha::Watcher) -> etcd_ha::Result<()> {
    /// watcher.cancel(0).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn cancel(&self, watch_id: i64) -> Result<()> {
        self.send(WatchRequest {
            request_union: Some(RequestUnion::CancelRequest(WatchCancelRequest { watch_id })),
        })
        .await
    }

    /// Ask for a progress notification: a response with no events, watch id -1 and the
    /// current revision. etcd 3.4.24+ and 3.5.8+ send it once every watch on the stream has
    /// caught up; older servers (3.4.23, 3.5.1 included) answer at once, possibly ahead of
    /// events still queued for a watch (etcd-io/etcd#15220).
    ///
    /// ```no_run
    /// # async fn demo(watcher: etcd_ha::Watcher) -> etcd_ha::Result<()> {
    /// watcher.request_progress().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn request_progress(&self) -> Result<()> {
        self.send(WatchRequest {
            request_union: Some(RequestUnion::ProgressRequest(WatchProgressRequest {})),
        })
        .await
    }

    /// Send a raw request on the stream.
    ///
    /// ```no_run
    /// # async fn demo(watcher: etcd_ha::Watcher) -> etcd_ha::Result<()> {
    /// watcher.send(etcd_ha::WatchOptions::new().into_request(b"k".to_vec())).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn send(&self, request: WatchRequest) -> Result<()> {
        self.tx.send(request).await.map_err(|_| Error::StreamClosed)
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

    /// The create request these options make for `key`.
    ///
    /// ```
    /// let req = etcd_ha::WatchOptions::new().with_prefix().into_request(b"a".to_vec());
    /// ```
    pub fn into_request(self, key: Vec<u8>) -> WatchRequest {
        let mut create = self.create;
        if self.prefix {
            create.range_end = crate::kv::prefix_end(&key);
        } else if self.from_key {
            create.range_end = vec![0];
        }
        create.key = key;
        WatchRequest {
            request_union: Some(RequestUnion::CreateRequest(create)),
        }
    }
}
