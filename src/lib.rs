//! etcd-ha: an etcd v3 client for teams that need control of connection routing and fast,
//! measured failover.
//!
//! # Layout
//!
//! ```text
//! proto.rs        the etcd v3 API generated from proto/ (etcdserverpb, mvccpb, authpb,
//!                 v3electionpb, v3lockpb)
//! error.rs        the one Error enum; tonic::Status -> typed etcd errors; is_retryable()
//! options/        Options (mod.rs) and TlsOptions (tls.rs): documented defaults, validated at
//!                 connect
//! rpc.rs          THE table: every RPC's route, idempotency and require-leader flag
//! retry.rs        the retry policy: failure class x idempotency, linear backoff + jitter
//!
//! The routing core is a one-way stack; each layer knows nothing of those above it:
//!
//! endpoint/       one member: mod.rs (the endpoint, its raft view), url.rs (parsing,
//!                 dialing, no TLS downgrade), health.rs (the state machine), prober.rs
//!                 (active probes, reporting through a sink), sync.rs (which member URLs to
//!                 keep), cluster_id.rs (the client's cluster; others' endpoints refused)
//! balance/        the endpoint set and the leader view (leader.rs: one lock, published
//!                 through a watch channel), what failures teach them (mod.rs), pick
//!                 policies (pick.rs)
//! call/           how every call leaves the client: the shared Transport (mod.rs), a pure
//!                 call plan (plan.rs: hedge, retry, fail, renew, blame; no IO), the driver
//!                 that runs it for unary calls and stream opens (driver.rs), stream opens
//!                 (streams.rs), member sync (members.rs)
//! channel.rs      BalancedChannel: the balancer as a tower Service for generated clients
//! events.rs       EndpointEvents: health, leader and membership transitions as a stream
//! drain.rs        Client::drain / undrain: a member made safe to stop (planned maintenance)
//! token.rs        the auth token, renewed once for all concurrent callers
//! stream.rs       ResponseStream: server streams with typed errors
//! metrics.rs      counters through the `metrics` facade (feature "metrics")
//! client.rs       Client: connect, endpoints(), the typed sub-clients below, and the lease
//!                 keeper and watch hub they share
//! kv.rs, txn.rs   KV: get / put / delete with options, the Txn builder, compact
//! lease.rs        Lease: grant, revoke, time to live, leases, raw keep-alive stream
//! keeper/         the lease keeper: many leases over one keep-alive stream, conservative
//!                 local expiry, lost signal (state.rs: the bookkeeping; task.rs: the stream)
//! session.rs      Session: a kept lease for recipes; done / lost / close (revokes)
//! watch/          Watch: the managed watch (mod.rs: service and WatchOptions; managed.rs:
//!                 WatchStream / WatchBatch; hub.rs: the task owning the one shared stream,
//!                 failover and resume; resume.rs: resume revision, fragments, dedup;
//!                 progress.rs: liveness and progress rules; lag.rs: leaving a member that
//!                 falls behind the client's revisions at its own pace) and the raw stream
//! cluster.rs      Cluster: member list / add / add learner / remove / update / promote
//! maintenance.rs  Maintenance: status, alarms, defragment, hashes, move leader, snapshot
//! auth.rs         Auth: enable / disable / status, authenticate, users, roles
//! concurrency/    recipes: Election and Mutex (queued, predecessor-only waits), PD-style
//!                 Leadership with a lost() signal, Fence for guarded writes
//! election.rs     the server-side Election service
//! lock.rs         the server-side Lock service
//! testkit/        (feature "testkit") real etcd clusters and fault injection for tests
//! ```
//!
//! # How a call fails over
//!
//! Data flows one way: typed sub-client -> call plan and driver (retry, hedging, deadline)
//! -> balancer pick -> one endpoint's HTTP/2 channel. Probers (one per member, every 500 ms)
//! and the outcome of every request feed each endpoint's health state machine; a member that
//! fails a request or a probe is ejected at once (the leader at its second late answer in a
//! row) and comes back through probation. Calls that need the leader go to it while it is
//! healthy; writes (lease grant and revoke included) are never hedged, and retried only when
//! they provably never left the client or were refused before etcd did anything; reads are
//! retried on any
//! transient failure and hedged to another member when slow. Managed watches
//! ([`Watch::watch`]) share one stream that moves to another member when its own fails, falls
//! silent or loses its leader, and resume there so that every event arrives exactly once.
//!
//! # Example
//!
//! ```no_run
//! use etcd_ha::{Client, Compare, CompareOp, GetOptions, Options, PutOptions, Txn, TxnOp};
//!
//! # async fn demo() -> etcd_ha::Result<()> {
//! let client = Client::connect(
//!     ["http://127.0.0.1:2379", "http://127.0.0.1:22379", "http://127.0.0.1:32379"],
//!     Options::default(),
//! )
//! .await?;
//! let kv = client.kv();
//! kv.put("config/mode", "blue", PutOptions::new()).await?;
//!
//! // Flip the mode only if nobody else changed it.
//! let flipped = kv
//!     .txn(
//!         Txn::new()
//!             .when([Compare::value("config/mode", CompareOp::Equal, "blue")])
//!             .and_then([TxnOp::put("config/mode", "green", PutOptions::new())]),
//!     )
//!     .await?
//!     .succeeded;
//! let all = kv.get("config/", GetOptions::new().with_prefix()).await?;
//! println!("flipped: {flipped}, {} keys", all.count);
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

mod auth;
mod balance;
mod call;
mod channel;
mod client;
mod cluster;
pub mod concurrency;
mod drain;
mod election;
mod endpoint;
mod error;
mod events;
mod keeper;
mod kv;
mod lease;
mod lock;
mod maintenance;
mod metrics;
#[cfg(feature = "mutants")]
mod mutants;
mod options;
pub mod proto;
mod redact;
mod retry;
pub mod rpc;
mod session;
mod stream;
mod token;
mod txn;
mod watch;

#[cfg(feature = "testkit")]
pub mod testkit;

pub use auth::{Auth, PermissionType};
pub use balance::{Candidate, LeaderFirst, PickPolicy};
#[doc(hidden)]
pub use call::stats::CallStats;
pub use channel::BalancedChannel;
pub use client::Client;
pub use cluster::Cluster;
pub use election::Election;
pub use endpoint::{EndpointInfo, HealthState};
pub use error::{Error, Result};
pub use events::{EndpointEvent, EndpointEvents};
pub use keeper::{Keeper, KeptLease, MAX_LEASE_TTL};
pub use kv::{DeleteOptions, GetOptions, Kv, PutOptions, SortOrder, SortTarget, prefix_end};
pub use lease::{KeepAliveSender, Lease};
pub use lock::Lock;
pub use maintenance::Maintenance;
pub use options::{
    DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_KEEPALIVE_INTERVAL,
    DEFAULT_KEEPALIVE_TIMEOUT, DEFAULT_LEADER_GRACE, DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MEMBER_SYNC_INTERVAL, DEFAULT_PROBE_INTERVAL, DEFAULT_PROBE_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT, MAX_INTERVAL, MAX_TIMEOUT, Options, TlsOptions,
};
pub use rpc::Route;
pub use session::Session;
pub use stream::ResponseStream;
pub use txn::{Compare, CompareOp, Txn, TxnOp};
pub use watch::{Watch, WatchBatch, WatchOptions, WatchStream, Watcher};
