//! How every call leaves the client: the shared [`Transport`] (balancer, options, token) and the
//! call path on top of it: a pure call plan ([`plan`]) run by a thin driver ([`driver`]) for
//! unary calls and stream opens alike.
//!
//! The typed sub-clients say *what* to call and which [`Rpc`] it is; this layer decides *where*
//! (the [`Balancer`]), *how often* (the retry policy) and *how long* (the deadline). It sits on
//! `balance/` and `endpoint/` and knows nothing of KV, watches or the lease keeper.

pub(crate) mod attempt;
mod budget;
mod decorate;
mod driver;
mod encoded;
mod headed;
mod ledger;
pub(crate) mod link;
mod members;
mod options;
pub(crate) mod plan;
mod renew;
mod running;
pub(crate) mod stats;
mod streamed;
mod streams;
pub(crate) mod supervise;
mod typed;
mod unimplemented;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::balance::{Balancer, BalancerConfig};
use crate::endpoint::prober::ProbeTimers;
use crate::endpoint::{self, AttemptService, Endpoint, EndpointInfo};
use crate::error::{Error, Result};
use crate::options::Options;
#[cfg(test)]
use crate::proto::etcdserverpb::cluster_client::ClusterClient;
use crate::proto::etcdserverpb::{
    ResponseHeader, auth_client::AuthClient, kv_client::KvClient, lease_client::LeaseClient,
    maintenance_client::MaintenanceClient, watch_client::WatchClient,
};
use crate::proto::v3electionpb::election_client::ElectionClient;
#[cfg(test)]
use crate::proto::v3lockpb::lock_client::LockClient;
use crate::revisions::Revisions;
use crate::rpc::{Route, Rpc};
use crate::token::TokenCell;

/// While a leader-bound call waits for a new leader, the probers are woken this often. 20 ms:
/// the new leader is known within this of a member naming it (a handover takes ~50 ms, an
/// election ~1 s; at 100 ms one planned move in three waited ~100 ms past its handover), while
/// a prober still does one probe at a time, so a wait costs each member at most one Status and
/// one read in flight.
const LEADER_NUDGE: Duration = Duration::from_millis(20);

pub(crate) use headed::Headed;
pub(crate) use options::{CallOptions, call_option_methods};
pub(crate) use plan::wants_login;

/// Where a call goes.
#[derive(Clone, Debug, Default)]
pub(crate) enum Target {
    /// Wherever the balancer routes the RPC.
    #[default]
    Any,
    /// Routed as this route, whatever the RPC's own.
    Route(Route),
    /// This endpoint only (maintenance of one member, or a handle pinned by the caller).
    Member(Arc<Endpoint>),
}

/// How one call goes: where, how long, and whether it asks for a leader.
#[derive(Clone, Debug, Default)]
pub(crate) struct Call {
    pub(crate) target: Target,
    pub(crate) deadline: Deadline,
    /// Override of the client's require-leader option.
    pub(crate) require_leader: Option<bool>,
    /// Members to leave for last (by URL): a watch stream's siblings' members, so that the
    /// client's watch streams spread over the cluster.
    pub(crate) avoid: Option<Arc<[Arc<str>]>>,
}

impl Call {
    /// A call to `target` within `deadline`.
    pub(crate) fn new(target: Target, deadline: Deadline) -> Self {
        Call {
            target,
            deadline,
            require_leader: None,
            avoid: None,
        }
    }

    /// The route a call to `target` takes for `rpc`.
    pub(crate) fn route_of(target: &Target, rpc: Rpc) -> Route {
        match target {
            Target::Any => rpc.route(),
            Target::Route(route) => *route,
            Target::Member(_) => Route::Pinned,
        }
    }
}

/// How long a unary call may take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// The client's request timeout.
    #[default]
    Default,
    /// The caller's own bound for this call.
    Within(Duration),
    /// No deadline: calls that wait by design (server-side Lock and Campaign, Defragment).
    Unbounded,
}

impl Deadline {
    /// This deadline, unless the caller set its own bound for the call.
    pub(crate) fn within(self, timeout: Option<Duration>) -> Deadline {
        timeout.map_or(self, Deadline::Within)
    }
}

/// A connection to one member, handed to the closure that makes the call.
#[derive(Clone)]
pub(crate) struct Conn {
    service: AttemptService,
    max_response_bytes: usize,
}

macro_rules! service {
    ($name:ident, $client:ident) => {
        // By value: the connection handle moves into the client (a clone of a channel is a
        // tower buffer's sender, made and dropped per call otherwise: ~800 instructions).
        pub(crate) fn $name(self) -> $client<AttemptService> {
            $client::new(self.service)
                .max_decoding_message_size(self.max_response_bytes)
                .max_encoding_message_size(usize::MAX)
        }
    };
}

impl Conn {
    /// This connection, with its attempts let finish after their caller gives up (a txn to a
    /// member that crashes when one is canceled, see `endpoint/version.rs`).
    pub(crate) fn must_finish(mut self) -> Self {
        self.service = self.service.must_finish();
        self
    }

    service!(kv, KvClient);
    service!(watch, WatchClient);
    service!(lease, LeaseClient);
    service!(maintenance, MaintenanceClient);
    service!(auth, AuthClient);
    service!(election, ElectionClient);
    // Cluster and lock calls are all unary (encoded, `encoded.rs`): only the test that pairs
    // each row with its generated method (`typed.rs`) takes these clients.
    #[cfg(test)]
    service!(cluster, ClusterClient);
    #[cfg(test)]
    service!(lock, LockClient);
}

/// Shared state behind every [`Client`](crate::Client) handle.
pub(crate) struct Transport {
    /// Endpoints, health and leader.
    pub(crate) balancer: Arc<Balancer>,
    /// Validated options.
    pub(crate) options: Options,
    /// Auth token, when credentials were given.
    token: Option<Arc<TokenCell>>,
    /// Cancelled when the last client handle goes: stops every background task.
    pub(crate) cancel: CancellationToken,
    /// The newest revisions the client knows of (the balancer's probes write them too).
    pub(crate) revisions: Arc<Revisions>,
    /// The hedge budget the calls draw on (see [`budget`]) and what they did, for
    /// [`Client::call_stats`](crate::Client::call_stats).
    pub(crate) ledger: ledger::Ledger,
    /// Members that lately answered they do not have a method (an older etcd).
    pub(crate) methods: unimplemented::Methods,
}

impl fmt::Debug for Transport {
    // Written by hand: the options' TLS and credentials and the token stay out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let urls: Vec<Arc<str>> = self
            .balancer
            .endpoints()
            .iter()
            .map(|e| e.url.clone())
            .collect();
        f.debug_struct("Transport")
            .field("endpoints", &urls)
            .field("options", &self.options)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Transport {
    /// Build the endpoint set and start the probers and member sync.
    pub(crate) fn start(urls: &[String], options: Options) -> Result<Arc<Self>> {
        let balancer = Balancer::start(
            urls,
            balancer_config(&options)?,
            options.pick_policy.clone(),
        )?;
        let transport = Self::over(balancer, options);
        if let Some(interval) = transport.options.member_sync_interval {
            members::spawn(&transport, interval);
        }
        Ok(transport)
    }

    /// A transport over `balancer`, with no background task of its own.
    fn over(balancer: Arc<Balancer>, options: Options) -> Arc<Self> {
        // One cell for the calls and the probes (see `BalancerConfig::token`).
        let token = balancer.token().cloned();
        let revisions = balancer.revisions().clone();
        Arc::new(Transport {
            revisions,
            balancer,
            options,
            token,
            cancel: CancellationToken::new(),
            ledger: ledger::Ledger::new(Instant::now()),
            methods: unimplemented::Methods::default(),
        })
    }

    /// A transport whose endpoints are never probed (tests drive health themselves).
    #[cfg(test)]
    pub(crate) fn unprobed(urls: &[String], options: Options) -> Arc<Self> {
        let balancer = Balancer::unprobed(
            urls,
            balancer_config(&options).unwrap(),
            options.pick_policy.clone(),
        )
        .unwrap();
        Self::over(balancer, options)
    }

    /// An answer carried this header (every unary answer does, through
    /// [`unary`](Self::unary): KV, lease, election, lock, cluster and maintenance answers
    /// alike): remember its revision if it is the newest seen, and refresh the leader view at
    /// once if it comes from a newer raft term.
    pub(crate) fn observe_header(&self, header: Option<&ResponseHeader>) {
        if let Some(h) = header {
            self.revisions.answered(h.revision);
            self.balancer.observe_term(h.raft_term);
        }
    }

    /// An answer that went through consensus (a write, a linearizable read), sent when the
    /// client had seen revisions up to `floor`: it carries the cluster's revision at that time
    /// or later, so one below `floor` means the cluster's history went back (restored from a
    /// backup under the same cluster id). The floor comes down to it, once, and the balancer
    /// tells the endpoint events; without this every serializable read timed out against a
    /// floor no member would reach again, and "from now" watches started in the future, until
    /// the client was restarted. A revision at or above `floor` needs nothing here: `unary`
    /// observed the header already (see [`observe_header`](Self::observe_header)).
    pub(crate) fn observe_committed(&self, header: Option<&ResponseHeader>, floor: i64) {
        let Some(h) = header else {
            return;
        };
        if h.revision >= floor || h.revision <= 0 {
            return;
        }
        if let Some(from) = self.revisions.rewind(floor, h.revision) {
            tracing::warn!(
                from,
                to = h.revision,
                "the cluster's revision went back (a restore?); the monotonic floor follows"
            );
            self.balancer.history_rewound(from, h.revision);
        }
    }

    /// What the calls did so far, with the ejections and suspicions of the endpoints in use.
    pub(crate) fn call_stats(&self) -> stats::CallStats {
        let (ejections, suspicions) = self
            .balancer
            .endpoints()
            .iter()
            .map(|e| e.ejections_and_suspicions())
            .fold((0, 0), |(a, b), (e, s)| (a + e, b + s));
        self.ledger.stats(ejections, suspicions)
    }

    /// A connection to `ep`.
    pub(crate) fn conn(&self, ep: &Endpoint) -> Conn {
        Conn {
            service: ep.attempts.clone(),
            max_response_bytes: self.options.max_response_bytes,
        }
    }

    /// The endpoint with this URL (any accepted spelling), if it is in the set.
    pub(crate) fn endpoint(&self, url: &str) -> Result<Arc<Endpoint>> {
        let normalized = endpoint::normalize(url, self.options.tls.is_some())?;
        self.balancer
            .endpoint(&normalized)
            .ok_or_else(|| Error::InvalidEndpoint {
                endpoint: endpoint::redact(url),
                reason: "not one of the client's endpoints",
            })
    }

    /// Snapshots of every endpoint.
    pub(crate) fn infos(&self) -> Vec<EndpointInfo> {
        self.balancer.infos()
    }

    /// Resolves whenever some endpoint's health changes (see [`Balancer::health_changes`]).
    pub(crate) fn health_changes(&self) -> tokio::sync::watch::Receiver<()> {
        self.balancer.health_changes()
    }

    /// What a failed call teaches the balancer (see [`Balancer::learn`]).
    pub(crate) fn learn(&self, ep: &Endpoint, error: &Error) {
        self.balancer.learn(ep, error);
    }

    /// The absolute deadline of a call that starts now.
    pub(crate) fn deadline_at(&self, deadline: Deadline) -> Option<Instant> {
        self.deadline_from(deadline, Instant::now())
    }

    /// The absolute deadline of a call that started at `start`.
    pub(crate) fn deadline_from(&self, deadline: Deadline, start: Instant) -> Option<Instant> {
        let timeout = match deadline {
            Deadline::Default => self.options.request_timeout,
            Deadline::Within(d) => Some(d),
            Deadline::Unbounded => None,
        }?;
        // A bound too far away to add is no bound (Instant arithmetic must not panic).
        start.checked_add(timeout)
    }

    /// After losing the leader, wait (bounded by the leader grace and the deadline) until a new
    /// one is known, so that a leader-bound call is not sent to a follower that would forward it
    /// to the lost leader and hang. Waits on the leader view's changes; probes are woken so the
    /// new leader is found quickly. Whether it waited (else the caller's clock reading still
    /// holds).
    pub(crate) async fn await_leader(&self, route: Route, deadline: Option<Instant>) -> bool {
        let Some(until) = self.leader_wait(route, deadline) else {
            return false;
        };
        self.balancer.await_leader(until, LEADER_NUDGE).await;
        true
    }

    /// Until when a call on `route` would wait for a new leader now: `None` unless it is
    /// leader-bound and a leader outage is on or the leader stalled (see
    /// [`Balancer::leader_unready`]); bounded by the leader grace and 3/4 of what is left of
    /// `deadline`.
    pub(crate) fn leader_wait(&self, route: Route, deadline: Option<Instant>) -> Option<Instant> {
        if !route.is_leader_bound() {
            return None;
        }
        let since = self.balancer.leader_unready()?;
        let mut until = since + self.options.leader_grace;
        if let Some(d) = deadline {
            // Keep a little of the deadline for the call itself.
            until = until.min(d - (d.saturating_duration_since(Instant::now()) / 4));
        }
        Some(until)
    }

    /// The endpoint for the next attempt of a call to `target` routed as `route`.
    pub(crate) fn pick(
        &self,
        route: Route,
        target: &Target,
        tried: &[Arc<str>],
        now: Instant,
    ) -> Result<Arc<Endpoint>> {
        match target {
            Target::Member(ep) => Ok(ep.clone()),
            // A match, not `ok_or`: that builds the error on every call and drops it unused.
            Target::Any | Target::Route(_) => match self.balancer.pick_at(route, tried, now) {
                Some(ep) => Ok(ep),
                None => Err(Error::NoEndpoints),
            },
        }
    }
}

/// The balancer's part of the options, with the TLS files read now.
fn balancer_config(options: &Options) -> Result<BalancerConfig> {
    Ok(BalancerConfig {
        dial: options.dial()?,
        health: options.health,
        probes: ProbeTimers {
            interval: options.probe_interval,
            timeout: options.probe_timeout,
        },
        token: options
            .credentials
            .as_ref()
            .map(|_| Arc::new(TokenCell::default())),
        revisions: Arc::default(),
    })
}
