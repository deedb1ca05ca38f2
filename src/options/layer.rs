//! User tower layers around every attempt of the typed API: [`Options::with_layer`].

use tonic::body::Body;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Layer, Service};

use super::Options;
use crate::endpoint::{AttemptLayer, Layered};

impl Options {
    /// Wrap every attempt of the typed API (`Kv`, `Lease`, ...) in a tower layer: a
    /// concurrency limit, tracing, metrics, a header, your own middleware.
    ///
    /// Where it sits: below the call plan, so every attempt (the first, each retry, each hedge)
    /// passes through it; and above each member's HTTP/2 channel, so the layer is applied once
    /// per member. An error it returns reaches the plan as a gRPC status and is judged like
    /// etcd's own: a `tonic::Status` as it is (`Status::unavailable` makes a read go out
    /// again, elsewhere), any other error as `Unknown`, which is not retried. State that should span members
    /// must be shared across clones (e.g. `GlobalConcurrencyLimitLayer`, not
    /// `ConcurrencyLimitLayer`, which limits each member on its own; `RateLimit` keeps its
    /// state per clone and limits nothing here). Health probes and
    /// [`BalancedChannel`](crate::BalancedChannel) bypass it. Called more than once, the
    /// layers nest: the first one added is the outermost.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tokio::sync::Semaphore;
    /// use tower::limit::GlobalConcurrencyLimitLayer;
    ///
    /// // At most 64 calls in flight to the whole cluster, whatever the callers do.
    /// let options = etcd_ha::Options::new()
    ///     .with_layer(GlobalConcurrencyLimitLayer::with_semaphore(Arc::new(Semaphore::new(64))));
    /// ```
    pub fn with_layer<L>(mut self, layer: L) -> Self
    where
        L: Layer<Layered> + Send + Sync + 'static,
        L::Service: Service<http::Request<Body>, Response = http::Response<Body>>
            + Clone
            + Send
            + Sync
            + 'static,
        <L::Service as Service<http::Request<Body>>>::Error: Into<BoxError>,
        <L::Service as Service<http::Request<Body>>>::Future: Send + 'static,
    {
        let outer = self.layer.take();
        self.layer = Some(AttemptLayer::new(move |inner: Layered| {
            let wrapped = tower::ServiceBuilder::new()
                .map_err(Into::<BoxError>::into)
                .service(layer.layer(inner));
            let wrapped: Layered = BoxCloneSyncService::new(wrapped);
            // The layers added before this one stay outside it.
            match &outer {
                Some(outer) => outer.wrap(wrapped),
                None => wrapped,
            }
        }));
        self
    }
}
