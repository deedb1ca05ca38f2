//! [`ResponseStream`]: a server stream whose errors arrive as typed [`Error`]s.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::Stream;

use crate::error::{Error, Result};

/// Messages from a gRPC server stream (watch, keep-alive, snapshot, observe), with errors
/// translated like every other call's.
///
/// It is a [`Stream`]; [`message`](Self::message) is the same without importing `StreamExt`.
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// let mut snapshot = client.maintenance().snapshot().await?;
/// let mut bytes = 0;
/// while let Some(chunk) = snapshot.message().await? {
///     bytes += chunk.blob.len();
/// }
/// # Ok(())
/// # }
/// ```
pub struct ResponseStream<T> {
    inner: tonic::Streaming<T>,
    /// The member serving the stream, for transport errors.
    endpoint: Arc<str>,
    /// Applied to every message before it is handed out (a namespaced watch strips its keys).
    map: Option<MapFn<T>>,
}

/// What a stream does to each message (see [`ResponseStream::with_map`]).
type MapFn<T> = Arc<dyn Fn(&mut T) + Send + Sync>;

impl<T> ResponseStream<T> {
    pub(crate) fn new(inner: tonic::Streaming<T>, endpoint: Arc<str>) -> Self {
        ResponseStream {
            inner,
            endpoint,
            map: None,
        }
    }

    /// The same stream with `map` applied to every message.
    pub(crate) fn with_map(mut self, map: impl Fn(&mut T) + Send + Sync + 'static) -> Self {
        self.map = Some(Arc::new(map));
        self
    }

    /// The next message; `Ok(None)` when the server ended the stream cleanly.
    ///
    /// ```no_run
    /// # async fn demo(mut s: etcd_ha::ResponseStream<etcd_ha::proto::etcdserverpb::SnapshotResponse>) -> etcd_ha::Result<()> {
    /// while let Some(msg) = s.message().await? { let _ = msg.remaining_bytes; }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn message(&mut self) -> Result<Option<T>> {
        match self.inner.message().await {
            Ok(mut m) => {
                if let (Some(map), Some(m)) = (&self.map, &mut m) {
                    map(m);
                }
                Ok(m)
            }
            Err(status) => Err(Error::from_status(status, &self.endpoint)),
        }
    }

    /// The endpoint URL of the member serving this stream.
    ///
    /// ```no_run
    /// # fn demo(s: etcd_ha::ResponseStream<etcd_ha::proto::etcdserverpb::SnapshotResponse>) {
    /// println!("served by {}", s.endpoint());
    /// # }
    /// ```
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

impl<T> std::fmt::Debug for ResponseStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseStream")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl<T> Stream for ResponseStream<T> {
    type Item = Result<T>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let endpoint = self.endpoint.clone();
        let map = self.map.clone();
        Pin::new(&mut self.inner).poll_next(cx).map(|item| {
            item.map(|r| {
                r.map(|mut m| {
                    if let Some(map) = &map {
                        map(&mut m);
                    }
                    m
                })
                .map_err(|s| Error::from_status(s, &endpoint))
            })
        })
    }
}
