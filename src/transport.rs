//! How every call leaves the client: endpoint choice, auth token, deadline, size limit, error mapping.
//!
//! The typed sub-clients (KV, Lease, ...) describe *what* to call; this file decides *where* and
//! *how*. It is the single place where `tonic::Status` becomes [`Error`].

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tonic::Request;
use tonic::transport::Channel;

use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::options::Options;
use crate::proto::etcdserverpb::{
    AuthenticateRequest, auth_client::AuthClient, cluster_client::ClusterClient,
    kv_client::KvClient, lease_client::LeaseClient, maintenance_client::MaintenanceClient,
    watch_client::WatchClient,
};
use crate::proto::v3electionpb::election_client::ElectionClient;
use crate::proto::v3lockpb::lock_client::LockClient;
use crate::token::TokenCell;

/// Where a call should go.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) enum Target {
    /// Whichever endpoint the client currently prefers.
    #[default]
    Any,
    /// This endpoint (index into the endpoint list), e.g. maintenance of one member.
    Member(usize),
}

/// How long a unary call may take.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) enum Deadline {
    /// The client's request timeout.
    #[default]
    Default,
    /// No deadline: calls that wait by design (server-side Lock and Campaign).
    Unbounded,
}

/// A connection to one member, handed to the closure that makes the call.
#[derive(Clone)]
pub(crate) struct Conn {
    channel: Channel,
    max_response_bytes: usize,
}

macro_rules! service {
    ($name:ident, $client:ident) => {
        pub(crate) fn $name(&self) -> $client<Channel> {
            $client::new(self.channel.clone())
                .max_decoding_message_size(self.max_response_bytes)
                .max_encoding_message_size(usize::MAX)
        }
    };
}

impl Conn {
    service!(kv, KvClient);
    service!(watch, WatchClient);
    service!(lease, LeaseClient);
    service!(cluster, ClusterClient);
    service!(maintenance, MaintenanceClient);
    service!(auth, AuthClient);
    service!(election, ElectionClient);
    service!(lock, LockClient);
}

/// Shared state behind every [`Client`](crate::Client) handle.
#[derive(Debug)]
pub(crate) struct Transport {
    /// The members' endpoints, in the order given (deduplicated).
    pub(crate) endpoints: Vec<Endpoint>,
    /// Index of the endpoint calls go to; moves on when that endpoint's transport fails.
    preferred: AtomicUsize,
    /// Validated options.
    pub(crate) options: Options,
    /// Auth token, when credentials were given.
    token: Option<TokenCell>,
}

impl Transport {
    pub(crate) fn new(endpoints: Vec<Endpoint>, options: Options) -> Arc<Self> {
        let token = options.credentials.as_ref().map(|_| TokenCell::default());
        Arc::new(Transport {
            endpoints,
            preferred: AtomicUsize::new(0),
            options,
            token,
        })
    }

    /// Make `index` the endpoint calls go to.
    pub(crate) fn prefer(&self, index: usize) {
        self.preferred.store(index, Ordering::Relaxed);
    }

    /// The endpoint a call to `target` goes to now.
    pub(crate) fn pick(&self, target: Target) -> (usize, Conn) {
        let index = match target {
            Target::Any => self.preferred.load(Ordering::Relaxed) % self.endpoints.len(),
            Target::Member(i) => i,
        };
        let conn = Conn {
            channel: self.endpoints[index].channel.clone(),
            max_response_bytes: self.options.max_response_bytes,
        };
        (index, conn)
    }

    /// Note that the transport to `index` failed, so later calls go elsewhere.
    fn failed(&self, index: usize) {
        let next = (index + 1) % self.endpoints.len();
        // Only move on if nobody else already did.
        let _ = self
            .preferred
            .compare_exchange(index, next, Ordering::Relaxed, Ordering::Relaxed);
        tracing::debug!(endpoint = %self.endpoints[index].url, "transport failed; preferring {}", self.endpoints[next].url);
    }

    /// Translate a status from endpoint `index`, noting transport failures.
    pub(crate) fn error(&self, index: usize, status: tonic::Status) -> Error {
        let err = Error::from_status(status, &self.endpoints[index].url);
        if err.is_transport() {
            self.failed(index);
        }
        err
    }

    /// Attach the auth token; returns its generation.
    pub(crate) fn decorate<T>(&self, request: &mut Request<T>) -> u64 {
        match &self.token {
            Some(cell) => cell.attach(request.metadata_mut()),
            None => 0,
        }
    }

    /// The deadline a unary call gets.
    fn timeout(&self, deadline: Deadline) -> Option<Duration> {
        match deadline {
            Deadline::Default => self.options.request_timeout,
            Deadline::Unbounded => None,
        }
    }

    /// Make one unary call: pick the endpoint, attach the token, enforce the deadline and the size
    /// limit, map the error; renew the token once if etcd rejected it.
    pub(crate) async fn unary<Req, Resp, F, Fut>(
        &self,
        target: Target,
        deadline: Deadline,
        message: Req,
        call: F,
    ) -> Result<Resp>
    where
        Req: prost::Message + Clone,
        F: Fn(Conn, Request<Req>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<Resp>, tonic::Status>>,
    {
        if message.encoded_len() > self.options.max_request_bytes {
            return Err(Error::RequestTooLarge);
        }
        let timeout = self.timeout(deadline);
        let mut renewed = false;
        loop {
            let (index, conn) = self.pick(target);
            let mut request = Request::new(message.clone());
            let generation = self.decorate(&mut request);
            let sent_token = request.metadata().contains_key(crate::token::TOKEN_KEY);
            if let Some(t) = timeout {
                // Also tells the server (grpc-timeout), so it stops working for us in time.
                request.set_timeout(t);
            }
            let result = match timeout {
                Some(t) => match tokio::time::timeout(t, call(conn, request)).await {
                    Ok(r) => r,
                    Err(_) => return Err(Error::Timeout),
                },
                None => call(conn, request).await,
            };
            match result {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) => {
                    let err = self.error(index, status);
                    if wants_login(&err, sent_token) && !renewed && self.token.is_some() {
                        renewed = true;
                        self.renew_token(generation).await?;
                        continue;
                    }
                    return Err(err);
                }
            }
        }
    }

    /// Open a stream: like [`unary`](Self::unary) but the request is built by `make` for each
    /// attempt (a stream body cannot be cloned), and only the opening is bounded by the deadline.
    pub(crate) async fn open_stream<Body, Resp, M, F, Fut>(
        &self,
        target: Target,
        deadline: Deadline,
        make: M,
        call: F,
    ) -> Result<(usize, tonic::Streaming<Resp>)>
    where
        M: Fn() -> Body,
        F: Fn(Conn, Request<Body>) -> Fut,
        Fut: Future<
            Output = std::result::Result<tonic::Response<tonic::Streaming<Resp>>, tonic::Status>,
        >,
    {
        let mut renewed = false;
        loop {
            let (index, conn) = self.pick(target);
            let mut request = Request::new(make());
            let generation = self.decorate(&mut request);
            let sent_token = request.metadata().contains_key(crate::token::TOKEN_KEY);
            let open = call(conn, request);
            let result = match self.timeout(deadline) {
                Some(t) => tokio::time::timeout(t, open)
                    .await
                    .map_err(|_| Error::Timeout)?,
                None => open.await,
            };
            match result {
                Ok(response) => return Ok((index, response.into_inner())),
                Err(status) => {
                    let err = self.error(index, status);
                    if wants_login(&err, sent_token) && !renewed && self.token.is_some() {
                        renewed = true;
                        self.renew_token(generation).await?;
                        continue;
                    }
                    return Err(err);
                }
            }
        }
    }

    /// Authenticate again, unless another caller already replaced the token of `stale`'s
    /// generation.
    pub(crate) async fn renew_token(&self, stale: u64) -> Result<()> {
        let (Some(cell), Some(credentials)) = (&self.token, &self.options.credentials) else {
            return Ok(());
        };
        let _renewing = cell.renewing.lock().await;
        if cell.generation() != stale {
            return Ok(());
        }
        let message = AuthenticateRequest {
            name: credentials.user.clone(),
            password: credentials.password.clone(),
        };
        // Authenticate carries no token; try each endpoint once, starting with the preferred one.
        let mut last = Error::NoEndpoints;
        for _ in 0..self.endpoints.len() {
            let (index, conn) = self.pick(Target::Any);
            let mut auth = conn.auth();
            let call = auth.authenticate(Request::new(message.clone()));
            // Authenticate hashes the password with bcrypt on the server: allow it some time.
            let limit = self
                .options
                .request_timeout
                .unwrap_or(self.options.connect_timeout * 2);
            let result = tokio::time::timeout(limit, call).await;
            match result {
                Ok(Ok(response)) => {
                    let token = response.into_inner().token;
                    let value = token.parse().map_err(|_| Error::InvalidAuthToken)?;
                    cell.store(value);
                    tracing::debug!("auth token renewed");
                    return Ok(());
                }
                Ok(Err(status)) => {
                    last = self.error(index, status);
                    if matches!(last, Error::AuthNotEnabled) {
                        // Auth is off (or was turned off): call without a token, as etcd's
                        // clientv3 does; etcd 3.4/3.5 reject a token from before AuthDisable.
                        cell.clear();
                        tracing::debug!("auth is not enabled; calling without a token");
                        return Ok(());
                    }
                    if !last.is_transport() {
                        return Err(last);
                    }
                }
                Err(_) => {
                    last = Error::Timeout;
                    self.failed(index);
                }
            }
        }
        Err(last)
    }
}

/// Whether a failed call should log in again and be retried once: etcd rejected the token
/// (expired, or older than an auth change), or the call went without one (auth was off when the
/// client last logged in) and etcd now wants a user.
fn wants_login(err: &Error, sent_token: bool) -> bool {
    match err {
        Error::InvalidAuthToken | Error::AuthRequired => true,
        // Without a token, `--client-cert-auth` makes the certificate's CN the user; its denial
        // says nothing about what our own user may do.
        Error::PermissionDenied => !sent_token,
        _ => false,
    }
}

/// Room for requests queued on a bidirectional stream before `send` waits: enough for a burst
/// of watch creates or keep-alives, small enough that a stuck stream pushes back on the caller.
const STREAM_REQUEST_BUFFER: usize = 64;

impl Transport {
    /// Open a bidirectional stream with `first` already queued (etcd answers the headers only
    /// with its first message, so an empty stream would never open), and hand back the sender
    /// for further requests and the typed response stream.
    pub(crate) async fn open_bidi<Req, Resp, F, Fut>(
        &self,
        target: Target,
        deadline: Deadline,
        first: Req,
        call: F,
    ) -> Result<(
        tokio::sync::mpsc::Sender<Req>,
        crate::stream::ResponseStream<Resp>,
    )>
    where
        Req: Clone + Send + 'static,
        F: Fn(Conn, Request<tokio_stream::wrappers::ReceiverStream<Req>>) -> Fut,
        Fut: Future<
            Output = std::result::Result<tonic::Response<tonic::Streaming<Resp>>, tonic::Status>,
        >,
    {
        // Each attempt needs its own channel; keep the sender of the attempt that opened.
        let sender = std::sync::Mutex::new(None);
        let make = || {
            let (tx, rx) = tokio::sync::mpsc::channel(STREAM_REQUEST_BUFFER);
            tx.try_send(first.clone())
                .expect("a new channel has room for one message");
            *sender.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
            tokio_stream::wrappers::ReceiverStream::new(rx)
        };
        let (index, streaming) = self.open_stream(target, deadline, make, call).await?;
        let tx = sender
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .expect("make ran before the stream opened");
        let stream =
            crate::stream::ResponseStream::new(streaming, self.endpoints[index].url.clone());
        Ok((tx, stream))
    }

    /// Open a server stream: like [`unary`](Self::unary) but the response is a stream.
    pub(crate) async fn open_server_stream<Req, Resp, F, Fut>(
        &self,
        target: Target,
        deadline: Deadline,
        message: Req,
        call: F,
    ) -> Result<crate::stream::ResponseStream<Resp>>
    where
        Req: Clone,
        F: Fn(Conn, Request<Req>) -> Fut,
        Fut: Future<
            Output = std::result::Result<tonic::Response<tonic::Streaming<Resp>>, tonic::Status>,
        >,
    {
        let (index, streaming) = self
            .open_stream(target, deadline, || message.clone(), call)
            .await?;
        Ok(crate::stream::ResponseStream::new(
            streaming,
            self.endpoints[index].url.clone(),
        ))
    }
}
