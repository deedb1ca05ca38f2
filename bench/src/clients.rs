//! The clients under test, behind one small interface: connect, put, linearizable get,
//! serializable get, each reporting success or a short error kind.
//!
//! Four clients run side by side in every trial, a fifth when asked for:
//!
//! - `etcd-ha` with [`etcd_ha::Options::default`]: what this crate ships.
//! - `etcd-ha-alone`: the same, running one put loop and nothing else, as an application that
//!   only writes: no reads, watch, lease or leadership on the client tell it of a fault, only
//!   its own puts, each under the caller's own deadline (the case issue 17's regression hid in).
//! - `etcd-client-default`: the `etcd-client` crate as `Client::connect(endpoints, None)`: no
//!   request timeout, no connect timeout, no keepalive, no retry.
//! - `etcd-client-tuned`: what a careful user of etcd-client configures (see [`tuned_options`]).
//! - `etcd-client-tuned-retry`: the tuned client inside the retry loop a careful application
//!   writes around it (see [`crate::retry`]).
//! - `go-clientv3`: etcd's own Go client, clientv3 3.6, when Go is installed (see
//!   [`crate::goclient`]).
//! - `go-clientv3-3.4` (only when named): clientv3 3.4 from Debian's sources.
//!
//! With `--endpoints`, every one of them connects with the same TLS files and user
//! ([`Access`]).

use std::time::Duration;

use clap::ValueEnum;
use serde::Serialize;

use tokio::time::Instant;

use crate::access::Access;
use crate::goclient::{self, Driver, GoClient};
use crate::leadership::Held;
use crate::lease::Kept;
use crate::retry::{self, Op};
use crate::watch::Watched;
use crate::workload::LoopKind;

/// Which client, and so which key prefix its loops write under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientKind {
    /// This crate with its default options.
    EtcdHa,
    /// This crate with its default options, running the put loop alone.
    EtcdHaAlone,
    /// The `etcd-client` crate with its default options.
    EtcdClientDefault,
    /// The `etcd-client` crate with keepalive, connect and request timeouts set.
    EtcdClientTuned,
    /// The tuned `etcd-client` inside an application's retry loop.
    EtcdClientTunedRetry,
    /// etcd's Go client, clientv3 3.6, through a driver process (needs Go).
    GoClientv3,
    /// etcd's Go client as it was in 3.4 (Debian's sources), through the same driver.
    #[value(name = "go-clientv3-3.4")]
    #[serde(rename = "go-clientv3-3.4")]
    GoClientv3Legacy,
}

impl ClientKind {
    /// The clients of a run that names none, in the order the report lists them
    /// (`go-clientv3-3.4` runs only when named).
    pub const DEFAULT: [ClientKind; 6] = [
        ClientKind::EtcdHa,
        ClientKind::EtcdHaAlone,
        ClientKind::EtcdClientDefault,
        ClientKind::EtcdClientTuned,
        ClientKind::EtcdClientTunedRetry,
        ClientKind::GoClientv3,
    ];

    /// The loops the client runs, in [`LoopKind::ALL`] order.
    pub fn loops(self) -> &'static [LoopKind] {
        match self {
            ClientKind::EtcdHaAlone => &[LoopKind::Put],
            _ => &LoopKind::ALL,
        }
    }

    /// The name in the report and on the command line, also part of the client's key prefix.
    pub fn name(self) -> &'static str {
        match self {
            ClientKind::EtcdHa => "etcd-ha",
            ClientKind::EtcdHaAlone => "etcd-ha-alone",
            ClientKind::EtcdClientDefault => "etcd-client-default",
            ClientKind::EtcdClientTuned => "etcd-client-tuned",
            ClientKind::EtcdClientTunedRetry => "etcd-client-tuned-retry",
            ClientKind::GoClientv3 => "go-clientv3",
            ClientKind::GoClientv3Legacy => "go-clientv3-3.4",
        }
    }

    /// The Go driver this client runs in, if it is a Go client.
    pub fn go_driver(self) -> Option<Driver> {
        match self {
            ClientKind::GoClientv3 => Some(Driver::Current),
            ClientKind::GoClientv3Legacy => Some(Driver::Debian34),
            _ => None,
        }
    }

    /// How the client is configured, in words, for the report.
    pub fn describe(self, deadline: Duration) -> String {
        match self {
            ClientKind::EtcdHa => "Options::default()".to_string(),
            ClientKind::EtcdHaAlone => {
                "Options::default(); its put loop alone on the client (no reads, watch, lease or \
                 leadership)"
                    .to_string()
            }
            ClientKind::EtcdClientDefault => "ConnectOptions: none (the crate's defaults)".into(),
            ClientKind::EtcdClientTuned => tuned_description(),
            ClientKind::EtcdClientTunedRetry => format!(
                "{}; plus {}",
                tuned_description(),
                retry::describe(retry::attempt_timeout(deadline))
            ),
            ClientKind::GoClientv3 | ClientKind::GoClientv3Legacy => {
                let driver = self.go_driver().expect("a Go client");
                let version = goclient::version(driver).unwrap_or_else(|| "(not built)".into());
                let balancer = match driver {
                    Driver::Current => "gRPC's round-robin balancer",
                    Driver::Debian34 => "its own balancer",
                };
                format!(
                    "clientv3 {version} (Go): DialTimeout 2s, DialKeepAliveTime 5s, \
                     DialKeepAliveTimeout 1s, a {}ms context per call; {balancer} and its \
                     retry interceptor",
                    deadline.as_millis()
                )
            }
        }
    }
}

/// Connect timeout of the tuned etcd-client: 1 s, a LAN connect takes a millisecond.
const TUNED_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Request timeout of the tuned etcd-client: 2 s, a few hundred times a healthy call. The
/// bench's own per-call deadline (1 s unless `--deadline`) usually fires first, so this mostly
/// bounds the calls the loops do not see (connection setup, the balancer's readiness wait).
const TUNED_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Keepalive of the tuned etcd-client: 5 s is the shortest interval etcd's server accepts
/// (`MinTime`; faster pings earn GOAWAY `too_many_pings`), 1 s for the ping's answer.
const TUNED_KEEPALIVE: (Duration, Duration) = (Duration::from_secs(5), Duration::from_secs(1));

/// The "careful user" options of etcd-client. `ConnectOptions::new()` turns on
/// `keep_alive_while_idle`, which etcd answers with `too_many_pings` on idle connections
/// (etcd-client #42), so it is turned off again.
pub fn tuned_options() -> etcd_client::ConnectOptions {
    etcd_client::ConnectOptions::new()
        .with_keep_alive(TUNED_KEEPALIVE.0, TUNED_KEEPALIVE.1)
        .with_keep_alive_while_idle(false)
        .with_connect_timeout(TUNED_CONNECT_TIMEOUT)
        .with_timeout(TUNED_REQUEST_TIMEOUT)
}

/// The settings of the tuned client, for the report.
pub fn tuned_description() -> String {
    format!(
        "keepalive {}s/{}s (not while idle), connect timeout {}s, request timeout {}s",
        TUNED_KEEPALIVE.0.as_secs(),
        TUNED_KEEPALIVE.1.as_secs(),
        TUNED_CONNECT_TIMEOUT.as_secs(),
        TUNED_REQUEST_TIMEOUT.as_secs()
    )
}

/// A connected client. Cheap to clone: clones share the connections, so every task of a loop
/// gets its own clone of one client (etcd-client's KV calls take `&mut self`).
#[derive(Clone)]
pub enum BenchClient {
    /// etcd-ha's KV service.
    Ha(etcd_ha::Kv),
    /// etcd-client's KV client, default or tuned, called once per call.
    Baseline(Box<etcd_client::KvClient>),
    /// etcd's Go client in its driver process (the caller's deadline is set there).
    Go(GoClient),
    /// The tuned etcd-client inside the application's retry loop.
    Retrying {
        /// The tuned KV client.
        kv: Box<etcd_client::KvClient>,
        /// The bound on one attempt, derived from the caller's deadline.
        attempt_timeout: Duration,
    },
}

/// A client's watch service, for the watch probe ([`crate::watch`]).
#[derive(Clone)]
pub enum WatchHandle {
    /// etcd-ha's managed watch.
    Ha(etcd_ha::Watch),
    /// etcd-client's watch client; `resume` for the application's loop around it.
    Ec {
        /// The crate's watch client.
        client: Box<etcd_client::WatchClient>,
        /// True if the application creates the watch again after it ends.
        resume: bool,
    },
    /// clientv3's `Watch`, in the driver.
    Go(GoClient),
}

impl WatchHandle {
    /// Watches `prefix` until `until`, sample times measured from `start`.
    pub async fn watch(self, prefix: String, start: Instant, until: Instant) -> Watched {
        match self {
            WatchHandle::Ha(watch) => crate::watch::watch_ha(watch, prefix, start, until).await,
            WatchHandle::Ec { client, resume } => {
                crate::watch::watch_ec(*client, prefix, start, until, resume).await
            }
            WatchHandle::Go(client) => client.watch(prefix, start, until).await,
        }
    }
}

/// A client's lease service, for the lease probe ([`crate::lease`]).
#[derive(Clone)]
pub enum LeaseHandle {
    /// etcd-ha's keeper.
    Ha(etcd_ha::Keeper),
    /// etcd-client's lease client; `resume` for the application's loop around it.
    Ec {
        /// The crate's lease client.
        client: Box<etcd_client::LeaseClient>,
        /// True if the application opens the keep-alive stream again after it fails.
        resume: bool,
    },
    /// clientv3's `KeepAlive`, in the driver.
    Go(GoClient),
}

impl LeaseHandle {
    /// Grants a lease and keeps it until `until`, times measured from `start`.
    pub async fn keep(self, start: Instant, until: Instant) -> Kept {
        match self {
            LeaseHandle::Ha(keeper) => crate::lease::keep_ha(keeper, start, until).await,
            LeaseHandle::Ec { client, resume } => {
                crate::lease::keep_ec(*client, start, until, resume).await
            }
            LeaseHandle::Go(client) => client.keep(crate::lease::LEASE_TTL, start, until).await,
        }
    }
}

/// A client's election side, for the leadership probe ([`crate::leadership`]).
#[derive(Clone)]
pub enum LeadershipHandle {
    /// etcd-ha's client, for its `Leadership`.
    Ha(etcd_ha::Client),
    /// etcd-client's client, for its lease and election API; `resume` for the application's
    /// keep-alive loop that reopens its stream.
    Ec {
        /// The crate's client.
        client: Box<etcd_client::Client>,
        /// True if the application opens the keep-alive stream again after it fails.
        resume: bool,
    },
    /// clientv3's concurrency session and election, in the driver.
    Go(GoClient),
}

impl LeadershipHandle {
    /// Holds the leadership of `key` until `until` (campaigning again after each loss), times
    /// measured from `start`.
    pub async fn hold(self, key: String, start: Instant, until: Instant) -> Held {
        match self {
            LeadershipHandle::Ha(client) => {
                crate::leadership::hold_ha(client, key, start, until).await
            }
            LeadershipHandle::Ec { client, resume } => {
                crate::leadership::hold_ec(*client, key, start, until, resume).await
            }
            LeadershipHandle::Go(client) => client.hold(key, start, until).await,
        }
    }
}

/// A connected client: its calls, and its watch, lease and election services.
pub struct Connected {
    /// etcd-ha's client itself, for the operator's side (drain); `None` for the others.
    pub ha: Option<etcd_ha::Client>,
    /// The put and get calls.
    pub client: BenchClient,
    /// The watch service on the same connections.
    pub watch: Option<WatchHandle>,
    /// The lease service on the same connections.
    pub lease: Option<LeaseHandle>,
    /// The election side on the same connections.
    pub leadership: Option<LeadershipHandle>,
}

/// What reached the caller when a call failed: a short, stable kind ("Timeout",
/// "grpc Unavailable", ...) that the report counts.
pub type ErrorKind = String;

impl BenchClient {
    /// Connects `kind` to `endpoints` and writes one marker key (`<prefix>marker`) so that the
    /// connections are up before the warm-up starts. `deadline` is the caller's per-call bound.
    pub async fn connect(
        kind: ClientKind,
        endpoints: &[String],
        access: &Access,
        prefix: &str,
        deadline: Duration,
    ) -> Result<Connected, String> {
        let mut ha = None;
        let (client, watch, lease, leadership) = match kind {
            ClientKind::EtcdHaAlone => {
                let client = etcd_ha::Client::connect(endpoints, access.ha_options())
                    .await
                    .map_err(|e| format!("etcd-ha could not connect: {e}"))?;
                (BenchClient::Ha(client.kv()), None, None, None)
            }
            ClientKind::EtcdHa => {
                let client = etcd_ha::Client::connect(endpoints, access.ha_options())
                    .await
                    .map_err(|e| format!("etcd-ha could not connect: {e}"))?;
                let lease = LeaseHandle::Ha(client.keeper());
                let watch = WatchHandle::Ha(client.watch());
                let kv = client.kv();
                let leadership = LeadershipHandle::Ha(client.clone());
                ha = Some(client);
                (
                    BenchClient::Ha(kv),
                    Some(watch),
                    Some(lease),
                    Some(leadership),
                )
            }
            ClientKind::EtcdClientDefault
            | ClientKind::EtcdClientTuned
            | ClientKind::EtcdClientTunedRetry => {
                let options = (kind != ClientKind::EtcdClientDefault).then(tuned_options);
                let options = access.ec_options(options);
                let client = etcd_client::Client::connect(endpoints, options)
                    .await
                    .map_err(|e| format!("etcd-client could not connect: {e}"))?;
                let kv = Box::new(client.kv_client());
                let resume = kind == ClientKind::EtcdClientTunedRetry;
                let watch = WatchHandle::Ec {
                    client: Box::new(client.watch_client()),
                    resume,
                };
                let lease = LeaseHandle::Ec {
                    client: Box::new(client.lease_client()),
                    resume,
                };
                let leadership = LeadershipHandle::Ec {
                    client: Box::new(client.clone()),
                    resume,
                };
                if resume {
                    let attempt_timeout = retry::attempt_timeout(deadline);
                    let client = BenchClient::Retrying {
                        kv,
                        attempt_timeout,
                    };
                    (client, Some(watch), Some(lease), Some(leadership))
                } else {
                    let client = BenchClient::Baseline(kv);
                    (client, Some(watch), Some(lease), Some(leadership))
                }
            }
            ClientKind::GoClientv3 | ClientKind::GoClientv3Legacy => {
                let driver = kind.go_driver().expect("a Go client");
                let client = GoClient::start(driver, endpoints, access, deadline).await?;
                (
                    BenchClient::Go(client.clone()),
                    Some(WatchHandle::Go(client.clone())),
                    Some(LeaseHandle::Go(client.clone())),
                    Some(LeadershipHandle::Go(client)),
                )
            }
        };
        let marker = format!("{prefix}marker");
        client
            .clone()
            .put(marker.clone().into_bytes(), b"ready".to_vec())
            .await
            .map_err(|kind| format!("first put of {marker} failed: {kind}"))?;
        Ok(Connected {
            ha,
            client,
            watch,
            lease,
            leadership,
        })
    }

    /// Put `value` at `key`.
    pub async fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), ErrorKind> {
        match self {
            BenchClient::Ha(kv) => kv
                .put(key, value, etcd_ha::PutOptions::new())
                .await
                .map(drop)
                .map_err(|e| ha_kind(&e)),
            BenchClient::Baseline(kv) => ec_put(kv, key, value).await.map_err(|e| ec_kind(&e)),
            BenchClient::Go(client) => client.put(&key, &value).await,
            BenchClient::Retrying {
                kv,
                attempt_timeout,
            } => {
                let kv: &etcd_client::KvClient = kv;
                let attempt = || ec_put(kv, key.clone(), value.clone());
                retry::run(Op::Put, *attempt_timeout, attempt).await
            }
        }
    }

    /// Read `key`, linearizably (`serializable = false`) or from the member's local state.
    pub async fn get(&mut self, key: Vec<u8>, serializable: bool) -> Result<(), ErrorKind> {
        match self {
            BenchClient::Ha(kv) => {
                let mut options = etcd_ha::GetOptions::new();
                if serializable {
                    options = options.with_serializable();
                }
                kv.get(key, options)
                    .await
                    .map(drop)
                    .map_err(|e| ha_kind(&e))
            }
            BenchClient::Baseline(kv) => {
                ec_get(kv, key, serializable).await.map_err(|e| ec_kind(&e))
            }
            BenchClient::Go(client) => client.get(&key, serializable).await,
            BenchClient::Retrying {
                kv,
                attempt_timeout,
            } => {
                let kv: &etcd_client::KvClient = kv;
                let attempt = || ec_get(kv, key.clone(), serializable);
                retry::run(Op::Get, *attempt_timeout, attempt).await
            }
        }
    }
}

/// One put through etcd-client; the KV client is cloned so that attempts can be retried.
async fn ec_put(
    kv: &etcd_client::KvClient,
    key: Vec<u8>,
    value: Vec<u8>,
) -> Result<(), etcd_client::Error> {
    kv.clone().put(key, value, None).await.map(drop)
}

/// One get through etcd-client, serializable or linearizable.
async fn ec_get(
    kv: &etcd_client::KvClient,
    key: Vec<u8>,
    serializable: bool,
) -> Result<(), etcd_client::Error> {
    let options = serializable.then(|| etcd_client::GetOptions::new().with_serializable());
    kv.clone().get(key, options).await.map(drop)
}

/// etcd-ha's error variant name ("Timeout", "Unavailable", "NoLeader", ...).
///
/// With `BENCH_DEBUG_ERRORS` set, each error is also printed to stderr with its whole source
/// chain: the report keeps only the variant, and a `Transport` error's cause (a reset, a
/// GOAWAY and who sent it) is in the chain.
fn ha_kind(error: &etcd_ha::Error) -> ErrorKind {
    if std::env::var_os("BENCH_DEBUG_ERRORS").is_some() {
        let mut chain = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            chain.push_str(&format!(" <- {cause:?}"));
            source = cause.source();
        }
        eprintln!("etcd-ha error: {chain}");
    }
    variant_name(&format!("{error:?}"))
}

/// etcd-client's error as "grpc <code>" for a status, else its variant name.
pub fn ec_kind(error: &etcd_client::Error) -> ErrorKind {
    match error {
        etcd_client::Error::GRpcStatus(status) => format!("grpc {:?}", status.code()),
        other => variant_name(&format!("{other:?}")),
    }
}

/// The leading identifier of a `Debug` string: `Unavailable(Status { .. })` -> `Unavailable`.
fn variant_name(debug: &str) -> String {
    debug
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .next()
        .unwrap_or("error")
        .to_string()
}
