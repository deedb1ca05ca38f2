//! The service one attempt of a typed call goes through: the member's HTTP/2 channel, wrapped
//! in the user's tower layers when [`Options::with_layer`](crate::Options::with_layer) gave
//! some.
//!
//! Layers sit below the call plan (each retry and hedge is its own attempt, and passes through
//! them again) and above the member's channel (one layered service per member). Probes bypass
//! them: a health check must not queue behind a user's concurrency limit.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::{BoxFuture, Either, MapErr, TryFutureExt};
use tonic::body::Body;
use tonic::transport::Channel;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Service};

/// The header that carries a call's deadline to the server.
const GRPC_TIMEOUT: &str = "grpc-timeout";

/// A request of one attempt, as HTTP.
pub(crate) type HttpRequest = http::Request<Body>;
/// Its answer.
pub(crate) type HttpResponse = http::Response<Body>;
/// A layered attempt service, boxed.
pub(crate) type Layered = BoxCloneSyncService<HttpRequest, HttpResponse, BoxError>;

/// Wraps a member's (boxed) channel in the user's layers, already composed.
#[derive(Clone)]
pub(crate) struct AttemptLayer(Arc<dyn Fn(Layered) -> Layered + Send + Sync>);

impl AttemptLayer {
    /// A layer from a function that wraps one member's service.
    pub(crate) fn new(wrap: impl Fn(Layered) -> Layered + Send + Sync + 'static) -> Self {
        AttemptLayer(Arc::new(wrap))
    }

    /// Wrap `inner` in these layers.
    pub(crate) fn wrap(&self, inner: Layered) -> Layered {
        (self.0)(inner)
    }
}

impl fmt::Debug for AttemptLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AttemptLayer(..)")
    }
}

/// What a typed call's attempt is sent through.
#[derive(Clone)]
pub(crate) enum AttemptService {
    /// The member's channel itself (no user layers: no boxing on the hot path).
    Plain(Channel),
    /// The channel inside the user's layers.
    Layered(Layered),
    /// An attempt that must finish once sent, whoever stops waiting for it: a txn to a member
    /// that crashes when a txn it is applying is canceled (etcd 3.5.0-3.5.4, issue 14110; see
    /// `version.rs`). It goes without `grpc-timeout` (the server would cancel it at the
    /// deadline itself) and runs in a task of its own until its answer's headers come, which
    /// etcd sends only once the txn is done; a caller that gives up earlier drops the answer,
    /// not the txn. Only the send of such a txn pays for the task.
    MustFinish(Box<AttemptService>),
}

impl AttemptService {
    /// This service, with every attempt let finish after its caller gives up (see
    /// [`AttemptService::MustFinish`]).
    pub(crate) fn must_finish(self) -> Self {
        match self {
            AttemptService::MustFinish(_) => self,
            other => AttemptService::MustFinish(Box::new(other)),
        }
    }

    /// The service for a member reached through `channel`.
    pub(crate) fn new(channel: Channel, layer: Option<&AttemptLayer>) -> Self {
        match layer {
            Some(layer) => {
                let base = tower::ServiceBuilder::new()
                    .map_err(Into::<BoxError>::into)
                    .service(channel);
                AttemptService::Layered(layer.wrap(BoxCloneSyncService::new(base)))
            }
            None => AttemptService::Plain(channel),
        }
    }
}

type PlainFuture =
    MapErr<<Channel as Service<HttpRequest>>::Future, fn(tonic::transport::Error) -> BoxError>;

impl Service<HttpRequest> for AttemptService {
    type Response = HttpResponse;
    type Error = BoxError;
    type Future = Either<PlainFuture, BoxFuture<'static, Result<HttpResponse, BoxError>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            AttemptService::Plain(channel) => channel.poll_ready(cx).map_err(Into::into),
            AttemptService::Layered(service) => service.poll_ready(cx),
            AttemptService::MustFinish(inner) => inner.poll_ready(cx),
        }
    }

    fn call(&mut self, request: HttpRequest) -> Self::Future {
        match self {
            AttemptService::Plain(channel) => {
                let boxed: fn(tonic::transport::Error) -> BoxError = Into::into;
                Either::Left(channel.call(request).map_err(boxed))
            }
            AttemptService::Layered(service) => Either::Right(service.call(request)),
            AttemptService::MustFinish(inner) => {
                let mut request = request;
                request.headers_mut().remove(GRPC_TIMEOUT);
                // Called on the instance that was readied; only awaiting moves to the task.
                let sent = tokio::spawn(inner.call(request));
                Either::Right(Box::pin(async move {
                    match sent.await {
                        Ok(answer) => answer,
                        Err(join) => Err(BoxError::from(join)),
                    }
                }))
            }
        }
    }
}
