//! etcd-ha: an etcd v3 client for teams that need control of connection routing and fast,
//! measured failover.
//!
//! # Layout
//!
//! ```text
//! proto.rs        the etcd v3 API generated from proto/ (etcdserverpb, mvccpb, authpb,
//!                 v3electionpb, v3lockpb)
//! error/          the one Error enum; tonic::Status -> typed etcd errors; ErrorClass
//! options/        Options (mod.rs) and TlsOptions (tls.rs): documented defaults, validated at
//!                 connect
//! rpc.rs          THE table: every RPC's route, idempotency and require-leader flag
//! retry.rs        the retry policy: failure class x idempotency, linear backoff + jitter
//!
//! The routing core is a one-way stack; each layer knows nothing of those above it:
//!
//! endpoint/       one member: mod.rs (the endpoint), state.rs (what changes together,
//!                 behind one lock: health, raft view, pace, strikes, the drain, the outage
//!                 rule's proofs),
//!                 in_flight.rs (attempts waiting on it), raft_view.rs, url.rs (parsing,
//!                 dialing, no TLS downgrade), unix.rs (the unix socket connector), health.rs
//!                 (the state machine), prober.rs (active probes, reporting through a sink),
//!                 read_path.rs (what a leader-bound call costs through it), candidate.rs and
//!                 info.rs (what a policy and the user see), sync.rs (which member URLs to
//!                 keep), cluster_id.rs (the client's cluster; others' endpoints refused)
//! balance/        the endpoint set and the leader view (leader.rs: one lock, published
//!                 through a watch channel), what failures teach them (mod.rs), whether
//!                 leader-bound calls can go (outage.rs), member sync's changes (members.rs),
//!                 pick policies (pick.rs: leader first, the detour around a slow leader link)
//! call/           how every call leaves the client: the shared Transport (mod.rs), a pure
//!                 call plan (plan.rs: hedge, retry, fail, renew, blame; no IO), the driver
//!                 that runs it for unary calls and stream opens (driver.rs), one attempt's
//!                 bookkeeping for every way out (attempt.rs), the RPC table's typed halves
//!                 (typed.rs: unary, streamed.rs: streams), stream opens (streams.rs), the
//!                 hedge budget and counters (ledger.rs), token renewal (renew.rs), member
//!                 sync (members.rs), members that lack a method (unimplemented.rs: an older
//!                 etcd asked for a newer call), the long-lived streams' skeleton (link.rs:
//!                 down, paused, opening, up; supervise.rs: where they open, when they leave)
//! channel.rs      BalancedChannel: the balancer as a tower Service for generated clients
//! events.rs       EndpointEvents: health, leader and membership transitions as a stream
//! drain.rs        Client::drain / undrain: a member made safe to stop (planned maintenance)
//! token.rs        the auth token, renewed once for all concurrent callers
//! stream.rs       ResponseStream: server streams with typed errors
//! response.rs     helpers on answers: key_str / value_str, RangeResponse::first, kvs_str
//! metrics.rs      counters through the `metrics` facade (feature "metrics")
//! discovery.rs    DNS SRV discovery of the endpoints (feature "dns-srv")
//! client.rs       Client: connect, endpoints(), the typed sub-clients below, and the lease
//!                 keeper and watch hub they share
//! connect.rs      what connect checks first (unix sockets, plain text) and the first contact
//! kv/, txn.rs    KV: get / put / delete with options, the Txn builder, compact;
//!                 kv/monotonic.rs: the rule that keeps serializable reads from going back;
//!                 kv/pages.rs: get_stream, a range page by page (RangeStream on etcd 3.7+,
//!                 Range pages before), kv/pager.rs: its rules (one revision, no IO)
//! namespace.rs    key namespaces: the prefix put on requests and stripped from answers
//! lease.rs        Lease: grant, revoke, time to live, leases, raw keep-alive stream
//! keeper/         the lease keeper: many leases over one keep-alive stream, conservative
//!                 local expiry, lost signal (state.rs: the bookkeeping; task.rs: the stream)
//! session.rs      Session: a kept lease for recipes; done / lost / close (revokes)
//! watch/          Watch: the managed watch (mod.rs: service and WatchOptions; managed.rs:
//!                 WatchStream / WatchBatch; buffer.rs: each watch's waiting batches;
//!                 now.rs: one "now" read shared by watches asked for together; hub.rs:
//!                 the task owning the one shared stream, failover and resume; resume.rs:
//!                 resume revision, fragments, dedup;
//!                 progress.rs: liveness and progress rules; lag.rs: leaving a member that
//!                 falls behind the client's revisions at its own pace) and the raw stream
//! cluster.rs      Cluster: member list / add / add learner / remove / update / promote
//! maintenance.rs  Maintenance: status, alarms, defragment, hashes, move leader, snapshot
//! auth.rs         Auth: enable / disable / status, authenticate, users, roles
//! concurrency/    recipes: Election and Mutex (queued, predecessor-only waits), PD-style
//!                 Leadership with a lost() signal, Fence for guarded writes; stm/
//!                 (software transactional memory: state.rs the pure bookkeeping)
//! election.rs     ElectionService: the server-side Election service
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
//!
//! # Namespaces, monotonic reads and STM
//!
//! [`Client::with_namespace`] confines a client to the keys under a prefix (every sub-client
//! and recipe built on it included). Serializable reads never go back to a revision older than
//! one the client already saw ([`Options::with_monotonic_reads`], on by default).
//! [`concurrency::stm::Stm`] runs a read-modify-write closure as one transaction, again on
//! conflict.
//!
//! ```no_run
//! use etcd_ha::concurrency::stm::{Isolation, Stm};
//! use etcd_ha::{GetOptions, PutOptions};
//!
//! # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
//! let tenant = client.with_namespace("tenant-a/")?;
//! tenant.kv().put("accounts/a", "100", PutOptions::new()).await?; // "tenant-a/accounts/a"
//! tenant.kv().put("accounts/b", "0", PutOptions::new()).await?;
//!
//! let balance = |v: Option<Vec<u8>>| -> i64 {
//!     v.and_then(|v| String::from_utf8(v).ok()?.parse().ok()).unwrap_or(0)
//! };
//! Stm::new(&tenant)
//!     .with_isolation(Isolation::SerializableSnapshot)
//!     .run(|tx| async move {
//!         let a = balance(tx.get("accounts/a").await?);
//!         let b = balance(tx.get("accounts/b").await?);
//!         tx.put("accounts/a", (a - 10).to_string());
//!         tx.put("accounts/b", (b + 10).to_string());
//!         Ok::<_, etcd_ha::Error>(())
//!     })
//!     .await?;
//! let accounts = tenant.kv().get("accounts/", GetOptions::new().with_prefix().with_serializable()).await?;
//! assert_eq!(accounts.kvs[1].key, b"accounts/b");
//! # Ok(())
//! # }
//! ```
//!
//! # Discovery
//!
//! Endpoints are `http://host:port`, `https://host:port` (feature `tls`), `host:port`, or
//! `unix://path` for a member's unix socket. With the `dns-srv` feature,
//! `discovery::SrvDiscovery` finds them in DNS SRV records:
//!
//! ```no_run
//! # #[cfg(feature = "dns-srv")]
//! # async fn demo() -> etcd_ha::Result<()> {
//! use etcd_ha::{Client, Options, discovery::SrvDiscovery};
//!
//! let endpoints = SrvDiscovery::new("example.com").lookup().await?;
//! let client = Client::connect(endpoints, Options::new()).await?;
//! let local = Client::connect(["unix:///run/etcd/client.sock"], Options::new()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Feature flags
//!
//! - `tls` (default): `https://` endpoints and [`TlsOptions`], with rustls (ring) and the
//!   system's root certificates. Without it both are refused with [`Error::TlsNotCompiled`].
//! - `dns-srv`: the `discovery` module (DNS SRV, through hickory-resolver).
//! - `metrics`: counters for requests, retries, ejections and failovers through the
//!   [`metrics`](https://docs.rs/metrics) facade.
//! - `testkit`: the `testkit` module, real local etcd clusters with fault injection for tests
//!   (turns on `tls`).
//!
//! The minimum supported Rust version is 1.88.
#![warn(missing_docs)]
// docs.rs (`--cfg docsrs`, nightly) marks the items a feature gates.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod auth;
mod balance;
mod cache;
mod call;
mod channel;
mod client;
mod cluster;
pub mod concurrency;
mod connect;
#[cfg(feature = "dns-srv")]
#[cfg_attr(docsrs, doc(cfg(feature = "dns-srv")))]
pub mod discovery;
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
mod namespace;
mod options;
pub mod proto;
mod redact;
mod response;
mod retry;
mod revisions;
pub mod rpc;
mod session;
mod stream;
mod token;
mod txn;
mod watch;

#[cfg(feature = "testkit")]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
pub mod testkit;

pub use auth::{Auth, PermissionType};
pub use balance::{Candidate, LeaderFirst, PickPolicy};
pub use cache::{
    Cache, CacheCheck, CacheOptions, CacheRead, CacheStats, CacheWatchOptions, CacheWatchStream,
    DEFAULT_CHECK_INTERVAL, DEFAULT_HISTORY, DEFAULT_MAX_BYTES, DEFAULT_MAX_KEYS, Freshness,
    PROGRESS_EVERY,
};
#[doc(hidden)]
pub use call::stats::CallStats;
pub use channel::BalancedChannel;
pub use client::Client;
pub use cluster::Cluster;
pub use election::ElectionService;
/// The old name of [`ElectionService`], which clashed with the recipe
/// [`concurrency::Election`].
///
/// ```
/// # #![allow(deprecated)]
/// fn old(e: etcd_ha::Election) -> etcd_ha::ElectionService { e }
/// ```
#[deprecated(note = "renamed ElectionService; the recipe is etcd_ha::concurrency::Election")]
pub type Election = ElectionService;
pub use endpoint::{EndpointInfo, HealthState, ParseVersionError, ServerVersion};
pub use error::{Error, ErrorClass, Result};
pub use events::{EndpointEvent, EndpointEvents};
pub use keeper::{Keeper, KeptLease, MAX_LEASE_TTL};
pub use kv::{
    DeleteOptions, GetOptions, Kv, PutOptions, RangeMethod, RangePages, SortOrder, SortTarget,
    prefix_end,
};
pub use lease::{KeepAliveSender, Lease};
pub use lock::Lock;
pub use maintenance::Maintenance;
pub use options::{
    DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_KEEP_ALIVE_STREAM_RATE,
    DEFAULT_KEEP_ALIVE_STREAMS, DEFAULT_KEEPALIVE_INTERVAL, DEFAULT_KEEPALIVE_TIMEOUT,
    DEFAULT_LEADER_GRACE, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MEMBER_SYNC_INTERVAL,
    DEFAULT_PROBE_INTERVAL, DEFAULT_PROBE_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, MAX_INTERVAL,
    MAX_KEEP_ALIVE_STREAMS, MAX_TIMEOUT, MAX_WATCH_STREAMS, Options, TlsOptions,
};
pub use rpc::Route;
pub use session::Session;
pub use stream::ResponseStream;
pub use txn::{Compare, CompareOp, Txn, TxnOp};
pub use watch::{Watch, WatchBatch, WatchOptions, WatchStream, Watcher};
