//! The balancer as a tower `Service`: etcd's generated gRPC clients, and any tower layers, over
//! the client's endpoints with the same routing, health and leader tracking as the typed API.
//!
//! The typed sub-clients ([`Kv`](crate::Kv), [`Lease`](crate::Lease), ...) add retries and
//! hedging on top of the same picks; they can do that because they hold the request message and
//! can send it again. A request that arrives here is already an HTTP body that can be sent only
//! once, so this service routes, decorates and learns, and leaves repeating to the caller
//! (a tower `Retry` layer with the caller's own policy, for example).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use tokio::time::Instant;
use tonic::body::Body;
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};
use tower::{BoxError, Service, ServiceExt};

use crate::call::attempt::{self, Sent};
use crate::call::{Target, Transport, wants_login};
use crate::error::Error;
use crate::rpc::{Route, Rpc};

/// The client's endpoints as one tower [`Service`] of gRPC requests, for etcd's generated
/// clients (`etcd_ha::proto::...::*_client`) and for stacking tower layers.
///
/// Every request is routed by its gRPC path through the one RPC table ([`Rpc::from_path`]) and
/// the client's [`PickPolicy`](crate::PickPolicy): writes, linearizable reads, lease, election
/// and lock calls to the healthy leader, member-local calls to the fastest healthy member,
/// never an ejected member while a healthy one exists. It carries the auth token and, on
/// leader-bound calls, etcd's `hasleader` check. What a call meets feeds health as the typed
/// API's calls do: a connection failure or "no leader" ejects the member, an error that means
/// the leader moved makes the next pick look again, a rejected token is renewed so that the
/// next call carries a fresh one, and a member that kept a prompt call waiting longer than the
/// attempt timeout before the caller gave up (a tower `Timeout`, say) is ejected.
///
/// It does not repeat requests: a gRPC request body can be sent only once. A failed connection
/// ends the call with `Unavailable`, whose message says what the caller may do: "safe to send
/// again" when the request provably never reached the member, "may have been applied" when the
/// connection was lost after it could have. A caller's own gRPC deadline (`grpc-timeout`, as
/// `Request::set_timeout` sets it; tonic enforces it in the member's channel) that runs out ends
/// the call with `DeadlineExceeded`, "may have been applied", and counts against the member
/// only when its streams fell silent too. A Range arriving
/// here is taken to be linearizable (the path does not say), so it goes to the leader.
///
/// Cheap to clone; clones share the client's connections. It keeps the client's connections
/// and background tasks alive as a [`Client`](crate::Client) handle does.
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use etcd_ha::proto::etcdserverpb::{PutRequest, kv_client::KvClient};
///
/// // A generated client, with a deadline per call as a tower layer.
/// let channel = tower::ServiceBuilder::new()
///     .timeout(Duration::from_secs(1))
///     .service(client.balanced_channel());
/// let mut kv = KvClient::new(channel);
/// kv.put(PutRequest { key: b"k".to_vec(), value: b"v".to_vec(), ..Default::default() })
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct BalancedChannel {
    transport: Arc<Transport>,
}

impl BalancedChannel {
    pub(crate) fn new(transport: Arc<Transport>) -> Self {
        BalancedChannel { transport }
    }
}

impl fmt::Debug for BalancedChannel {
    // The endpoints only: the token and the options' credentials stay out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let urls: Vec<Arc<str>> = self
            .transport
            .balancer
            .endpoints()
            .iter()
            .map(|e| e.url.clone())
            .collect();
        f.debug_struct("BalancedChannel")
            .field("endpoints", &urls)
            .finish()
    }
}

impl Service<Request<Body>> for BalancedChannel {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // The endpoint is picked when the call is made, from health as it is then, and that
        // endpoint's channel is driven to readiness inside the call: readiness here would have
        // to be about an endpoint not chosen yet.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        Box::pin(route(self.transport.clone(), request))
    }
}

/// Send one request to the endpoint the balancer picks for its RPC, and learn from the answer.
async fn route(
    transport: Arc<Transport>,
    mut request: Request<Body>,
) -> Result<Response<Body>, BoxError> {
    let rpc = Rpc::from_path(request.uri().path());
    crate::metrics::request(rpc.map_or("unknown", Rpc::name));
    let (generation, sent_token) = match rpc {
        Some(rpc) => {
            // Right after losing the leader, followers would forward to it and hang: wait for
            // the next one, within the caller's gRPC deadline when it set one.
            // The caller's header may name a deadline too far away to add: then it is none.
            let deadline =
                grpc_timeout(request.headers()).and_then(|t| Instant::now().checked_add(t));
            transport.await_leader(rpc.route(), deadline).await;
            let mut metadata = MetadataMap::from_headers(std::mem::take(request.headers_mut()));
            let decorated = transport.decorate_metadata(rpc, None, &mut metadata);
            *request.headers_mut() = metadata.into_headers();
            decorated
        }
        // Not one of etcd's methods: no token for it; the leader serves whatever etcd serves.
        None => (0, false),
    };
    let ep = match rpc {
        Some(rpc) => transport.pick(rpc.route(), &Target::Any, &[], Instant::now()),
        None => transport
            .balancer
            .pick(Route::Leader, &[])
            .ok_or(Error::NoEndpoints),
    }
    .map_err(|e| Status::unavailable(e.to_string()))?;

    // The same bookkeeping as a typed call's attempt (`call/attempt.rs`): counted in flight, a
    // debt on the member while a prompt leader-bound call is unanswered (so that the next one
    // sees a frozen leader at once, even when this caller's own timeout drops this call), and
    // a prompt call still waiting past the attempt timeout counts against the member when its
    // streams are silent too. A caller that gives up earlier, or drops the call, blames nobody.
    let prompt = rpc.is_some_and(|r| !r.holds_open());
    let owes = rpc.is_some_and(|r| attempt::owes(r.route(), prompt));
    let sent = Sent::start(&ep, owes, Instant::now());
    let started = sent.started();
    let call = ep.channel.clone().oneshot(request);
    tokio::pin!(call);
    let late = tokio::time::sleep(transport.options.attempt_timeout);
    tokio::pin!(late);
    let mut struck = !prompt;
    let result = loop {
        tokio::select! {
            result = &mut call => break result,
            () = &mut late, if !struck => struck = true,
        }
        if attempt::silent(&ep, started, Instant::now()) {
            transport.learn(&ep, &Error::Timeout);
        }
    };
    drop(sent);

    let response = match result {
        Ok(response) => response,
        Err(err) => {
            // Classified and learned from with the whole error chain (a refused connection
            // tells the outage rule the member's process is gone), as a typed call's is.
            let status = Status::from_error(err.into());
            let (error, unsent) = transport.unanswered(&ep, status.clone(), started);
            if matches!(error, Error::Timeout) {
                // The caller's own `grpc-timeout` ran out first (tonic enforces it): gRPC's
                // code for that, not a lost connection.
                let message = format!(
                    "deadline exceeded waiting for {}; the request may have been applied",
                    ep.url
                );
                return Err(Status::deadline_exceeded(message).into());
            }
            if unsent {
                // Say so plainly: this channel sends a body once, but the caller may send the
                // request again, even a write (the member never saw it).
                let message = format!(
                    "request not sent to {} ({}); safe to send again",
                    ep.url,
                    status.message()
                );
                return Err(Status::unavailable(message).into());
            }
            // Every other failure here is the connection's (the server's answers come back as
            // responses): lost after the request may have gone out, so only the caller can
            // decide. Unavailable, as gRPC reports a transport failure, so that retry policies
            // keyed on codes see it; the message says what a write must assume.
            let message = format!(
                "connection to {} lost ({}); the request may have been applied",
                ep.url,
                status.message()
            );
            let mut lost = Status::unavailable(message);
            // The whole chain stays reachable (hyper's and the IO error), for callers that
            // look deeper.
            lost.set_source(Arc::new(status));
            return Err(lost.into());
        }
    };
    // etcd answers a failed unary call with a trailers-only response: the status is in the
    // headers. A status in the trailers of a streamed answer is the caller's to read.
    match Status::from_header_map(response.headers()) {
        Some(status) if status.code() != Code::Ok => {
            let (err, _) = transport.refused(&ep, rpc, status);
            if wants_login(&err, sent_token) {
                // This call has failed; the next one goes out with a fresh token.
                if let Err(renew) = transport.renew_token(generation, Some(&ep)).await {
                    tracing::debug!(error = %renew, "auth token renewal failed");
                }
            }
        }
        _ if prompt => {
            // The pace of a call that hedges, as the typed API's answers teach it.
            let pace_cap = rpc
                .filter(|r| r.hedgeable())
                .map(|_| transport.options.attempt_timeout);
            attempt::answered(&ep, started, owes, pace_cap);
        }
        _ => {}
    }
    Ok(response)
}

/// The deadline a caller put on its request (`grpc-timeout`: at most 8 digits and a unit).
fn grpc_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::grpc_timeout;
    use std::time::Duration;

    fn parse(value: &str) -> Option<Duration> {
        let mut headers = http::HeaderMap::new();
        headers.insert("grpc-timeout", value.parse().unwrap());
        grpc_timeout(&headers)
    }

    #[test]
    fn grpc_timeout_units() {
        assert_eq!(parse("1500m"), Some(Duration::from_millis(1500)));
        assert_eq!(parse("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse("250u"), Some(Duration::from_micros(250)));
        assert_eq!(parse("99999999n"), Some(Duration::from_nanos(99_999_999)));
        assert_eq!(grpc_timeout(&http::HeaderMap::new()), None);
        for bad in ["", "m", "123456789m", "10x", "1.5S", "-1S"] {
            let mut headers = http::HeaderMap::new();
            headers.insert("grpc-timeout", bad.parse().unwrap());
            assert_eq!(grpc_timeout(&headers), None, "{bad:?}");
        }
    }
}
