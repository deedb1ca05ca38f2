//! [`ResponseStream`]: a server stream whose errors arrive as typed [`Error`]s and, for a
//! stream handed to a user, teach the balancer about the member that served it.

use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use futures_util::Stream;

use crate::balance::Balancer;
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};

/// Messages from a gRPC server stream (watch, keep-alive, snapshot, observe), with errors
/// translated like every other call's. A failure also teaches the client about the member,
/// as a failed call's does: a lost connection ejects it, so the next calls and streams go
/// elsewhere at once.
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
    /// Who learns from the stream's failure, for a stream handed to a user (see
    /// [`ResponseStream::learning`]).
    learner: Option<Learner>,
}

/// The balancer, to learn what a broken user stream says about its member. Weak: a stream
/// the user keeps must not keep the client's probers alive once the client is gone.
struct Learner {
    balancer: Weak<Balancer>,
    ep: Arc<Endpoint>,
}

/// What a stream does to each message (see [`ResponseStream::with_map`]).
type MapFn<T> = Arc<dyn Fn(&mut T) + Send + Sync>;

impl<T> ResponseStream<T> {
    /// A stream whose owner judges its failures itself (the keeper's and the watch hub's
    /// supervised streams blame their member by their own rules).
    pub(crate) fn new(inner: tonic::Streaming<T>, endpoint: Arc<str>) -> Self {
        ResponseStream {
            inner,
            endpoint,
            map: None,
            learner: None,
        }
    }

    /// A stream handed to a user (a raw watch or keep-alive, a snapshot, an observe, a range
    /// stream's chunks): its failure teaches the balancer about `ep` as a failed call's does
    /// (a lost connection ejects the member, `no leader` marks it, a leader that lost its
    /// leadership is forgotten). Nobody else would learn it: the user's stream is the one
    /// thing on that member that saw it break.
    pub(crate) fn learning(
        inner: tonic::Streaming<T>,
        ep: Arc<Endpoint>,
        balancer: &Arc<Balancer>,
    ) -> Self {
        ResponseStream {
            inner,
            endpoint: ep.url.clone(),
            map: None,
            learner: Some(Learner {
                balancer: Arc::downgrade(balancer),
                ep,
            }),
        }
    }

    /// One pulled item, mapped, or its error translated (and learned from).
    fn judge(&self, pulled: std::result::Result<T, tonic::Status>) -> Result<T> {
        match pulled {
            Ok(mut m) => {
                if let Some(map) = &self.map {
                    map(&mut m);
                }
                Ok(m)
            }
            Err(status) => {
                let error = Error::from_status(status, &self.endpoint);
                if let Some(Learner { balancer, ep }) = &self.learner
                    && let Some(balancer) = balancer.upgrade()
                {
                    balancer.learn(ep, &error);
                }
                Err(error)
            }
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
        let pulled = self.inner.message().await.transpose();
        pulled.map(|p| self.judge(p)).transpose()
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

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        Pin::new(&mut this.inner)
            .poll_next(cx)
            .map(|item| item.map(|pulled| this.judge(pulled)))
    }
}
