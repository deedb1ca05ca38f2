//! [`Watcher`]: the sending half of a raw watch stream ([`Watch::raw`](super::Watch::raw)),
//! which neither reconnects nor resumes.

use tokio::sync::mpsc;

use super::WatchOptions;
use crate::error::{Error, Result};
use crate::namespace::{self, Namespace};
use crate::proto::etcdserverpb::watch_request::RequestUnion;
use crate::proto::etcdserverpb::{WatchCancelRequest, WatchProgressRequest, WatchRequest};

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
    /// The namespace of the client that opened the stream: creates sent here are mapped into it.
    namespace: Option<Namespace>,
}

impl Watcher {
    pub(super) fn new(tx: mpsc::Sender<WatchRequest>, namespace: Option<Namespace>) -> Self {
        Watcher { tx, namespace }
    }

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
    /// current revision. etcd 3.4.25+ and 3.5.8+ send it once every watch on the stream has
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
        let request = namespace::map(self.namespace.as_ref(), request, Namespace::watch_request);
        self.tx.send(request).await.map_err(|_| Error::StreamClosed)
    }
}
