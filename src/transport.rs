//! How every call leaves the client: pick, token, require-leader, deadline, retry and hedging.
//!
//! The typed sub-clients say *what* to call and which [`Rpc`] it is; this file decides *where*
//! (the [`Balancer`]), *how often* (the [`RetryPolicy`]) and *how long*. It is also where what a
//! call learned flows back: failures eject endpoints and wake the probers, so the next pick
//! already avoids a member that just died.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Request;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::transport::{Channel, ClientTlsConfig};

use crate::balance::Balancer;
use crate::endpoint::{self, Endpoint, EndpointInfo, Failure};
use crate::error::{Error, Result};
use crate::options::Options;
use crate::proto::etcdserverpb::{
    AuthenticateRequest, ResponseHeader, auth_client::AuthClient, cluster_client::ClusterClient,
    kv_client::KvClient, lease_client::LeaseClient, maintenance_client::MaintenanceClient,
    watch_client::WatchClient,
};
use crate::proto::v3electionpb::election_client::ElectionClient;
use crate::proto::v3lockpb::lock_client::LockClient;
use crate::retry::{Decision, never_sent};
use crate::rpc::{Idempotency, Route, Rpc};
use crate::token::TokenCell;

/// Metadata key of etcd's require-leader check.
const HAS_LEADER_KEY: &str = "hasleader";

/// At most this many attempts of one repeatable call are in flight at once (the original plus
/// one hedge): enough to route around one stuck member without doubling the load.
const MAX_IN_FLIGHT: usize = 2;

/// How often a call waiting for a new leader looks again.
const LEADER_POLL: Duration = Duration::from_millis(25);

/// Where a call goes.
#[derive(Clone, Debug, Default)]
pub(crate) enum Target {
    /// Wherever the balancer routes the RPC.
    #[default]
    Any,
    /// This endpoint only (maintenance of one member).
    Member(Arc<Endpoint>),
}

/// How long a unary call may take.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) enum Deadline {
    /// The client's request timeout.
    #[default]
    Default,
    /// No deadline: calls that wait by design (server-side Lock and Campaign, Defragment).
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
///
/// `Debug` is written by hand: the TLS config holds the client's private key, and every public
/// handle (`Kv`, `Lease`, ...) derives its `Debug` through this one.
pub(crate) struct Transport {
    /// Endpoints, health and leader.
    pub(crate) balancer: Balancer,
    /// Validated options.
    pub(crate) options: Options,
    /// TLS settings, kept to dial members that member sync discovers.
    tls: Option<ClientTlsConfig>,
    /// Auth token, when credentials were given.
    token: Option<TokenCell>,
    /// Cancelled when the last client handle goes: stops every background task.
    pub(crate) cancel: CancellationToken,
    /// Wakes every prober at once (a failure hinted that the leader moved or a member died).
    pub(crate) probe_now: Arc<Notify>,
    /// Wakes member sync (a failure hinted that membership may have changed).
    pub(crate) sync_now: Arc<Notify>,
    /// Bumped whenever an endpoint's health changes (see [`Transport::health_changes`]).
    health_changes: endpoint::HealthChanges,
    /// The cluster this client reached first; endpoints of another cluster are refused.
    pub(crate) cluster_id: endpoint::ClusterId,
    /// The newest store revision in any KV answer: where a managed watch from "now" starts.
    seen_revision: std::sync::atomic::AtomicI64,
    /// The lease keeper shared by every handle, started on first use (it holds this transport
    /// weakly, so it does not keep it alive).
    pub(crate) keeper: std::sync::OnceLock<crate::keeper::Keeper>,
    /// The task that owns the managed watches' shared stream, started on first use (it holds
    /// this transport weakly too).
    pub(crate) watch_hub: std::sync::OnceLock<crate::watch::Hub>,
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl std::fmt::Debug for Transport {
    // No secret: the TLS config (private key) shows only whether it is set; the token cell and
    // the options redact their own.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("endpoints", &self.balancer.endpoints())
            .field("options", &self.options)
            .field("tls", &self.tls.as_ref().map(|_| "<configured>"))
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl Transport {
    /// Build the endpoint set and start the probers and member sync.
    pub(crate) fn start(
        urls: &[String],
        options: Options,
        tls: Option<ClientTlsConfig>,
    ) -> Result<Arc<Self>> {
        let cancel = CancellationToken::new();
        let (health_changes, _) = tokio::sync::watch::channel(());
        let endpoints = urls
            .iter()
            .map(|u| {
                let channel = endpoint::channel(u, &options, tls.as_ref())?;
                Ok(Endpoint::new(
                    u.as_str().into(),
                    channel,
                    options.health,
                    cancel.child_token(),
                    health_changes.clone(),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let token = options.credentials.as_ref().map(|_| TokenCell::default());
        let transport = Arc::new(Transport {
            balancer: Balancer::new(endpoints, options.pick_policy.clone()),
            options,
            tls,
            token,
            cancel,
            probe_now: Arc::new(Notify::new()),
            sync_now: Arc::new(Notify::new()),
            health_changes,
            cluster_id: endpoint::ClusterId::default(),
            seen_revision: std::sync::atomic::AtomicI64::new(0),
            keeper: std::sync::OnceLock::new(),
            watch_hub: std::sync::OnceLock::new(),
        });
        for ep in transport.balancer.endpoints().iter() {
            transport.spawn_prober(ep.clone());
        }
        if let Some(interval) = transport.options.member_sync_interval {
            let sync = endpoint::sync::MemberSync::new(Arc::downgrade(&transport), interval);
            let span = tracing::info_span!("etcd_ha_member_sync");
            tokio::spawn(tracing::Instrument::instrument(sync.run(), span));
        }
        Ok(transport)
    }

    fn spawn_prober(self: &Arc<Self>, ep: Arc<Endpoint>) {
        let span = tracing::info_span!("etcd_ha_prober", endpoint = %ep.url);
        let prober = endpoint::prober::Prober::new(ep, Arc::downgrade(self));
        tokio::spawn(tracing::Instrument::instrument(prober.run(), span));
    }

    /// Resolves whenever some endpoint's health changes (and once at once, for changes since
    /// the last look): long-lived streams use it to leave an ejected member without delay.
    pub(crate) fn health_changes(&self) -> tokio::sync::watch::Receiver<()> {
        self.health_changes.subscribe()
    }

    /// A KV answer carried this header: remember its revision if it is the newest seen.
    pub(crate) fn observe_header(&self, header: Option<&ResponseHeader>) {
        if let Some(h) = header {
            self.seen_revision
                .fetch_max(h.revision, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The newest store revision this client has seen in a KV answer (0: none yet).
    pub(crate) fn seen_revision(&self) -> i64 {
        self.seen_revision
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A connection to `ep`.
    pub(crate) fn conn(&self, ep: &Endpoint) -> Conn {
        Conn {
            channel: ep.channel.clone(),
            max_response_bytes: self.options.max_response_bytes,
        }
    }

    /// The endpoint with this URL (any accepted spelling), if it is in the set.
    pub(crate) fn endpoint(&self, url: &str) -> Result<Arc<Endpoint>> {
        let normalized = endpoint::normalize(url, self.options.tls.is_some())?;
        self.balancer
            .endpoints()
            .iter()
            .find(|e| *e.url == *normalized)
            .cloned()
            .ok_or(Error::InvalidEndpoint {
                endpoint: url.to_owned(),
                reason: "not one of the client's endpoints",
            })
    }

    /// Snapshots of every endpoint.
    pub(crate) fn infos(&self) -> Vec<EndpointInfo> {
        let leader = self.balancer.leader_id();
        self.balancer
            .endpoints()
            .iter()
            .map(|e| e.info(leader))
            .collect()
    }

    /// Attach the auth token and, for calls that need a leader, `hasleader=true`; returns the
    /// token generation used and whether a token went out.
    pub(crate) fn decorate<T>(&self, rpc: Rpc, request: &mut Request<T>) -> (u64, bool) {
        self.decorate_metadata(rpc, request.metadata_mut())
    }

    /// [`Transport::decorate`] on bare metadata (requests that arrive as HTTP, through
    /// [`BalancedChannel`](crate::BalancedChannel)).
    pub(crate) fn decorate_metadata(&self, rpc: Rpc, metadata: &mut MetadataMap) -> (u64, bool) {
        if self.options.require_leader && rpc.requires_leader() {
            metadata.insert(HAS_LEADER_KEY, AsciiMetadataValue::from_static("true"));
        }
        match &self.token {
            Some(cell) => {
                let generation = cell.attach(metadata);
                let sent = metadata.contains_key(crate::token::TOKEN_KEY);
                (generation, sent)
            }
            None => (0, false),
        }
    }

    /// What a failed call teaches: eject or mark the endpoint, and wake the probers when the
    /// leader may have moved.
    pub(crate) fn learn(&self, ep: &Endpoint, error: &Error) {
        let was_leader = {
            let id = ep.raft().member_id;
            id != 0 && id == self.balancer.leader_id()
        };
        match error {
            Error::Transport { .. } | Error::Timeout | Error::StreamClosed => {
                ep.on_failure(Failure::Unreachable, error);
                if was_leader {
                    self.balancer.forget_leader(ep.raft().member_id);
                }
                self.probe_now.notify_waiters();
                self.sync_now.notify_one();
            }
            Error::NoLeader => {
                ep.on_failure(Failure::NoLeader, error);
                if was_leader {
                    self.balancer.forget_leader(ep.raft().member_id);
                }
                self.probe_now.notify_waiters();
            }
            Error::LeaderChanged | Error::NotLeader | Error::Unavailable(_) => {
                if was_leader {
                    self.balancer.forget_leader(ep.raft().member_id);
                }
                self.probe_now.notify_waiters();
            }
            _ => {}
        }
    }

    /// The deadline a call gets.
    fn timeout(&self, deadline: Deadline) -> Option<Duration> {
        match deadline {
            Deadline::Default => self.options.request_timeout,
            Deadline::Unbounded => None,
        }
    }

    /// After losing the leader, wait (bounded by the leader grace and the deadline) until a new
    /// one is known, so that a leader-bound call is not sent to a follower that would forward it
    /// to the lost leader and hang. Probes are woken so the new leader is found quickly.
    pub(crate) async fn await_leader(&self, rpc: Rpc, target: &Target, deadline: Option<Instant>) {
        if !matches!(target, Target::Any) || rpc.route() != Route::Leader {
            return;
        }
        let Some(since) = self.balancer.leader_outage() else {
            return;
        };
        let mut until = since + self.options.leader_grace;
        if let Some(d) = deadline {
            // Keep a little of the deadline for the call itself.
            until = until.min(d - (d.saturating_duration_since(Instant::now()) / 4));
        }
        let mut next_probe = Instant::now();
        while Instant::now() < until && self.balancer.leader_outage().is_some() {
            if Instant::now() >= next_probe {
                self.probe_now.notify_waiters();
                next_probe = Instant::now() + LEADER_POLL * 4;
            }
            tokio::time::sleep(LEADER_POLL).await;
        }
    }

    /// The endpoint for the next attempt.
    pub(crate) fn pick(
        &self,
        rpc: Rpc,
        target: &Target,
        tried: &[Arc<str>],
    ) -> Result<Arc<Endpoint>> {
        match target {
            Target::Member(ep) => Ok(ep.clone()),
            Target::Any => self
                .balancer
                .pick(rpc.route(), tried)
                .ok_or(Error::NoEndpoints),
        }
    }

    /// Make one unary call with retries, hedging and token renewal; see the module docs.
    pub(crate) async fn unary<Req, Resp, F, Fut>(
        &self,
        rpc: Rpc,
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
        crate::metrics::request(rpc.name());
        let deadline_kind = deadline;
        let deadline = self.timeout(deadline).map(|t| Instant::now() + t);
        let pinned = matches!(target, Target::Member(_));
        let hedging = !pinned && rpc.idempotency() == Idempotency::Repeatable;
        let policy = self.options.retry;

        let launch = |ep: Arc<Endpoint>| {
            let mut request = Request::new(message.clone());
            let (generation, sent_token) = self.decorate(rpc, &mut request);
            if let Some(d) = deadline {
                // Tell the server too (grpc-timeout), so it stops working for us in time.
                request.set_timeout(d.saturating_duration_since(Instant::now()));
            }
            let fut = call(self.conn(&ep), request);
            async move {
                let started = Instant::now();
                let result = fut.await;
                (ep, started, generation, sent_token, result)
            }
        };

        // Hedge early enough that the hedge itself has time to answer before the deadline.
        let hedge_after = match self.timeout(deadline_kind) {
            Some(t) => self.options.attempt_timeout.min(t / 3),
            None => self.options.attempt_timeout,
        };
        let mut tried: Vec<Arc<str>> = Vec::new();
        let mut in_flight = FuturesUnordered::new();
        // Endpoints of the attempts in `in_flight`: blamed if the call ends (deadline, or the
        // caller dropping it) while they still owe an answer.
        // Calls that wait by design (campaign, lock) owe nothing in any time.
        let mut waiting_on = Abandoned::new(
            self,
            if deadline.is_some() {
                hedge_after
            } else {
                Duration::MAX
            },
        );
        let mut attempts: u32 = 1;
        let mut renewed = false;
        self.await_leader(rpc, &target, deadline).await;
        let first = self.pick(rpc, &target, &tried)?;
        tried.push(first.url.clone());
        waiting_on.push(&first);
        in_flight.push(launch(first));
        let mut hedge_at = Instant::now() + hedge_after;

        loop {
            let deadline_sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let can_hedge =
                hedging && in_flight.len() < MAX_IN_FLIGHT && attempts < policy.max_attempts;
            tokio::select! {
                            // An attempt finished.
                            Some((ep, started, generation, sent_token, result)) = in_flight.next() => {
                                waiting_on.answered(&ep);
                                let status = match result {
                                    Ok(response) => {
                                        ep.on_success(started.elapsed());
                                        // A hedge that lost the race is not the member's fault.
                                        waiting_on.waiting.clear();
                                        return Ok(response.into_inner());
                                    }
                                    Err(status) => status,
                                };
                                let unsent = never_sent(&status);
                                let err = Error::from_status(status, &ep.url);
                                self.learn(&ep, &err);
                                if wants_login(&err, sent_token) && !renewed && self.token.is_some() {
                                    renewed = true;
                                    self.renew_token(generation).await?;
                                    waiting_on.push(&ep);
                                    in_flight.push(launch(ep));
                                    continue;
                                }
                                let decision = if pinned && !unsent {
                                    Decision::Stop
                                } else {
                                    policy.decide(rpc, &err, unsent, attempts)
                                };
                                if decision == Decision::Stop {
                                    // Another attempt may still succeed; a definite answer (e.g. compacted)
                                    // from any member is the answer.
                                    if in_flight.is_empty() || !err.is_retryable() {
                                        return Err(err);
                                    }
                                    continue;
                                }
                                if !in_flight.is_empty() {
                                    // The hedge is still running; let it answer.
                                    continue;
                                }
                                let wait = policy.backoff();
                                if deadline.is_some_and(|d| Instant::now() + wait >= d) {
                                    return Err(err);
                                }
                                tokio::time::sleep(wait).await;
                                self.await_leader(rpc, &target, deadline).await;
                                let next = self.next_endpoint(rpc, &target, &mut tried, &ep)?;
                                tracing::debug!(rpc = rpc.name(), from = %ep.url, to = %next.url, error = %err, "retrying");
                                crate::metrics::retry(rpc.name());
                                attempts += 1;
                                waiting_on.push(&next);
                                in_flight.push(launch(next));
                                hedge_at = Instant::now() + hedge_after;
                            }
                            // Slow: send a repeatable request to another member as well.
                            _ = tokio::time::sleep_until(hedge_at), if can_hedge => {
                                let Ok(next) = self.pick(rpc, &target, &tried) else { continue };
                                if tried.iter().any(|t| *t == next.url) {
                                    // Nowhere else to go; keep waiting on what is in flight.
                                    hedge_at = Instant::now() + hedge_after;
                                    continue;
                                }
                                tracing::debug!(rpc = rpc.name(), to = %next.url, "hedging a slow request");
                                crate::metrics::retry(rpc.name());
                                tried.push(next.url.clone());
                                attempts += 1;
                                waiting_on.push(&next);
                                in_flight.push(launch(next));
                                hedge_at = Instant::now() + hedge_after;
                            }
                            () = deadline_sleep => {
                                // Whatever is still in flight is abandoned: for a mutation the outcome is
                                // unknown, which is what Timeout says. The members that did not answer in
                                // the whole deadline are suspect until a probe says otherwise.
            return Err(Error::Timeout);
                            }
                        }
        }
    }

    /// The endpoint for a retry: one this call has not tried yet; when all were tried, any but
    /// the one that just failed.
    fn next_endpoint(
        &self,
        rpc: Rpc,
        target: &Target,
        tried: &mut Vec<Arc<str>>,
        failed: &Endpoint,
    ) -> Result<Arc<Endpoint>> {
        let all = self.balancer.endpoints();
        if all.iter().all(|e| tried.contains(&e.url)) {
            tried.clear();
            tried.push(failed.url.clone());
        }
        let next = self.pick(rpc, target, tried)?;
        if !tried.contains(&next.url) {
            tried.push(next.url.clone());
        }
        Ok(next)
    }

    /// Open a stream: the request is built by `make` for each attempt (a stream body cannot be
    /// cloned). Each attempt's opening is bounded by the attempt timeout, the whole by the
    /// request timeout; repeatable streams are retried on other members.
    pub(crate) async fn open_stream<Body, Resp, M, F, Fut>(
        &self,
        rpc: Rpc,
        target: Target,
        deadline: Deadline,
        make: M,
        call: F,
    ) -> Result<(Arc<Endpoint>, tonic::Streaming<Resp>)>
    where
        M: Fn() -> Body,
        F: Fn(Conn, Request<Body>) -> Fut,
        Fut: Future<
            Output = std::result::Result<tonic::Response<tonic::Streaming<Resp>>, tonic::Status>,
        >,
    {
        crate::metrics::request(rpc.name());
        let deadline = self.timeout(deadline).map(|t| Instant::now() + t);
        let pinned = matches!(target, Target::Member(_));
        let policy = self.options.retry;
        let mut tried: Vec<Arc<str>> = Vec::new();
        let mut attempts: u32 = 1;
        let mut renewed = false;
        self.await_leader(rpc, &target, deadline).await;
        let mut ep = self.pick(rpc, &target, &tried)?;
        tried.push(ep.url.clone());
        loop {
            let mut request = Request::new(make());
            let (generation, sent_token) = self.decorate(rpc, &mut request);
            let started = Instant::now();
            let open = call(self.conn(&ep), request);
            // A repeatable stream that does not open in time is opened elsewhere; others wait
            // for the whole deadline.
            // Streams without a deadline (observe) wait by design: no attempt limit either.
            let limit = match (rpc.idempotency(), deadline) {
                (Idempotency::Repeatable, Some(d)) if !pinned => {
                    // At least 1 s: opening a stream may wait for its first message (a snapshot
                    // chunk, a watch's created answer) on a busy member.
                    let open_limit = self.options.attempt_timeout.max(Duration::from_secs(1));
                    Some((started + open_limit).min(d))
                }
                (_, d) => d,
            };
            let result = match limit {
                Some(l) => match tokio::time::timeout_at(l, open).await {
                    Ok(r) => r.map_err(|s| (never_sent(&s), Error::from_status(s, &ep.url))),
                    Err(_) => Err((false, Error::Timeout)),
                },
                None => open
                    .await
                    .map_err(|s| (never_sent(&s), Error::from_status(s, &ep.url))),
            };
            let (unsent, err) = match result {
                Ok(response) => {
                    ep.on_success(started.elapsed());
                    return Ok((ep, response.into_inner()));
                }
                Err(e) => e,
            };
            self.learn(&ep, &err);
            if wants_login(&err, sent_token) && !renewed && self.token.is_some() {
                renewed = true;
                self.renew_token(generation).await?;
                continue;
            }
            let decision = if pinned && !unsent {
                Decision::Stop
            } else {
                policy.decide(rpc, &err, unsent, attempts)
            };
            let wait = policy.backoff();
            if decision == Decision::Stop || deadline.is_some_and(|d| Instant::now() + wait >= d) {
                return Err(err);
            }
            tokio::time::sleep(wait).await;
            self.await_leader(rpc, &target, deadline).await;
            let next = self.next_endpoint(rpc, &target, &mut tried, &ep)?;
            tracing::debug!(rpc = rpc.name(), from = %ep.url, to = %next.url, error = %err, "retrying stream open");
            crate::metrics::retry(rpc.name());
            attempts += 1;
            ep = next;
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
        // Authenticate hashes the password with bcrypt on the server: allow it some time.
        let limit = self
            .options
            .request_timeout
            .unwrap_or(self.options.connect_timeout * 2);
        let mut last = Error::NoEndpoints;
        let mut tried: Vec<Arc<str>> = Vec::new();
        for _ in 0..self.balancer.endpoints().len() {
            let Some(ep) = self.balancer.pick(Route::Any, &tried) else {
                break;
            };
            tried.push(ep.url.clone());
            let mut auth = self.conn(&ep).auth();
            let call = auth.authenticate(Request::new(message.clone()));
            match tokio::time::timeout(limit, call).await {
                Ok(Ok(response)) => {
                    let token = response.into_inner().token;
                    let value = token.parse().map_err(|_| Error::InvalidAuthToken)?;
                    cell.store(value);
                    tracing::debug!("auth token renewed");
                    return Ok(());
                }
                Ok(Err(status)) => {
                    last = Error::from_status(status, &ep.url);
                    self.learn(&ep, &last);
                    if matches!(last, Error::AuthNotEnabled) {
                        // Auth is off (or was turned off): call without a token, as etcd's
                        // clientv3 does; etcd 3.4/3.5 reject a token from before AuthDisable.
                        cell.clear();
                        tracing::debug!("auth is not enabled; calling without a token");
                        return Ok(());
                    }
                    if !last.is_retryable() {
                        return Err(last);
                    }
                }
                Err(_) => {
                    last = Error::Timeout;
                    self.learn(&ep, &last);
                }
            }
        }
        Err(last)
    }

    /// Bring the endpoint set in line with the cluster's members (client URLs of started,
    /// voting members). Keeps existing endpoints (their connections and health), dials new ones,
    /// drops removed ones. Never empties the set.
    pub(crate) fn apply_members(self: &Arc<Self>, urls: Vec<String>) {
        if urls.is_empty() {
            return;
        }
        let current = self.balancer.endpoints();
        // A TLS client never dials a plain-text URL (token and password in the clear).
        let secure =
            endpoint::is_secure(self.options.tls.is_some(), current.iter().map(|e| &*e.url));
        let mut next = Vec::with_capacity(urls.len());
        let mut added = Vec::new();
        for url in &urls {
            // A refused endpoint (another cluster's) is stopped: never kept, dialled anew.
            if let Some(ep) = current
                .iter()
                .find(|e| *e.url == **url && !e.cancel.is_cancelled())
            {
                next.push(ep.clone());
                continue;
            }
            if endpoint::member_url(url, secure).is_none() {
                tracing::warn!(%url, "member URL refused (a TLS client never dials http://); skipped");
                continue;
            }
            match endpoint::channel(url, &self.options, self.tls.as_ref()) {
                Ok(channel) => {
                    let ep = Endpoint::new(
                        url.as_str().into(),
                        channel,
                        self.options.health,
                        self.cancel.child_token(),
                        self.health_changes.clone(),
                    );
                    added.push(ep.clone());
                    next.push(ep);
                }
                Err(e) => tracing::warn!(%url, error = %e, "member URL is not usable; skipped"),
            }
        }
        if next.is_empty() {
            return;
        }
        let removed: Vec<_> = current
            .iter()
            .filter(|e| !next.iter().any(|n| Arc::ptr_eq(n, e)))
            .cloned()
            .collect();
        if added.is_empty() && removed.is_empty() {
            return;
        }
        self.balancer.replace(next);
        for ep in &added {
            tracing::info!(endpoint = %ep.url, "member added; endpoint in use");
            self.spawn_prober(ep.clone());
        }
        for ep in &removed {
            tracing::info!(endpoint = %ep.url, "member removed; endpoint dropped");
            ep.cancel.cancel();
        }
    }
}

/// The attempts a call is still waiting on. When the call ends without their answer (its
/// deadline ran out, or the caller gave up and dropped it, e.g. with its own shorter timeout),
/// every member that has owed an answer for longer than the hedge delay is blamed like a
/// timeout: a frozen or black-holed member is then ejected by the very calls it stalls, not
/// only by the next probe.
pub(crate) struct Abandoned<'a> {
    transport: &'a Transport,
    waiting: Vec<(Arc<Endpoint>, Instant)>,
    /// How long an answer may be owed before silence counts against the member.
    threshold: Duration,
}

impl<'a> Abandoned<'a> {
    /// Nothing owed yet; silence longer than `threshold` will count.
    pub(crate) fn new(transport: &'a Transport, threshold: Duration) -> Self {
        Abandoned {
            transport,
            waiting: Vec::new(),
            threshold,
        }
    }

    pub(crate) fn push(&mut self, ep: &Arc<Endpoint>) {
        self.waiting.push((ep.clone(), Instant::now()));
    }

    pub(crate) fn answered(&mut self, ep: &Arc<Endpoint>) {
        if let Some(i) = self.waiting.iter().position(|(w, _)| Arc::ptr_eq(w, ep)) {
            self.waiting.swap_remove(i);
        }
    }
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        for (ep, since) in &self.waiting {
            if since.elapsed() >= self.threshold {
                self.transport.learn(ep, &Error::Timeout);
            }
        }
    }
}

/// Whether a failed call should log in again and be retried once: etcd rejected the token
/// (expired, or older than an auth change), or the call went without one (auth was off when the
/// client last logged in) and etcd now wants a user.
pub(crate) fn wants_login(err: &Error, sent_token: bool) -> bool {
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
        rpc: Rpc,
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
        let (ep, streaming) = self.open_stream(rpc, target, deadline, make, call).await?;
        let tx = sender
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .expect("make ran before the stream opened");
        let stream = crate::stream::ResponseStream::new(streaming, ep.url.clone());
        Ok((tx, stream))
    }

    /// [`open_bidi`](Self::open_bidi) for long-lived background streams (lease keep-alive,
    /// shared watch): the whole open is bounded by `limit`, and the endpoint serving the stream
    /// is returned too, so that the task owning the stream can blame it when the stream dies.
    pub(crate) async fn open_supervised<Req, Resp, F, Fut>(
        &self,
        rpc: Rpc,
        first: Req,
        limit: Duration,
        call: F,
    ) -> Result<(
        tokio::sync::mpsc::Sender<Req>,
        crate::stream::ResponseStream<Resp>,
        Arc<Endpoint>,
    )>
    where
        Req: Clone + Send + 'static,
        F: Fn(Conn, Request<tokio_stream::wrappers::ReceiverStream<Req>>) -> Fut,
        Fut: Future<
            Output = std::result::Result<tonic::Response<tonic::Streaming<Resp>>, tonic::Status>,
        >,
    {
        let opening = self.open_bidi(rpc, Target::Any, Deadline::Default, first, call);
        let (tx, answers) = tokio::time::timeout(limit, opening)
            .await
            .map_err(|_| Error::Timeout)??;
        let endpoint = self.endpoint(answers.endpoint())?;
        Ok((tx, answers, endpoint))
    }

    /// Open a server stream: like [`unary`](Self::unary) but the response is a stream.
    pub(crate) async fn open_server_stream<Req, Resp, F, Fut>(
        &self,
        rpc: Rpc,
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
        let (ep, streaming) = self
            .open_stream(rpc, target, deadline, || message.clone(), call)
            .await?;
        Ok(crate::stream::ResponseStream::new(
            streaming,
            ep.url.clone(),
        ))
    }
}
