//! The clients under test, behind one small interface: connect, put, linearizable get,
//! serializable get, each reporting success or a short error kind.
//!
//! Three clients run side by side in every scenario:
//!
//! - `etcd-ha` with [`etcd_ha::Options::default`]: what this crate ships, in every scenario.
//! - `etcd-client` with its defaults (`Client::connect(endpoints, None)`): no request timeout,
//!   no connect timeout, no keepalive, no retry.
//! - `etcd-client-tuned`: what a careful user of etcd-client configures (see [`tuned_options`]).

use std::time::Duration;

/// Which client, and so which key prefix its loops write under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    /// This crate with its default options.
    Ha,
    /// The `etcd-client` crate with its default options.
    Baseline,
    /// The `etcd-client` crate with keepalive, connect and request timeouts set.
    BaselineTuned,
}

impl ClientKind {
    /// Every client, in the order the report lists them.
    pub const ALL: [ClientKind; 3] = [
        ClientKind::Ha,
        ClientKind::Baseline,
        ClientKind::BaselineTuned,
    ];

    /// The name in the report, also the first part of the client's key prefix.
    pub fn name(self) -> &'static str {
        match self {
            ClientKind::Ha => "etcd-ha",
            ClientKind::Baseline => "etcd-client",
            ClientKind::BaselineTuned => "etcd-client-tuned",
        }
    }
}

/// Connect timeout of the tuned etcd-client: 1 s, a loopback connect takes microseconds.
const TUNED_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Request timeout of the tuned etcd-client: 2 s, a few hundred times a healthy loopback call.
/// The bench's own 1 s deadline per call fires first, so this mostly bounds the calls that the
/// loops do not see (connection setup, the balancer's readiness wait).
const TUNED_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Keepalive of the tuned etcd-client: 5 s is the shortest interval etcd's server accepts
/// (`MinTime`; faster pings earn GOAWAY `too_many_pings`), 1 s for the ping's answer on loopback.
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

/// A connected client. Cheap to clone: clones share the connections, so each loop gets its own
/// clone (etcd-client's KV calls take `&mut self`).
#[derive(Clone)]
pub enum BenchClient {
    /// etcd-ha's KV service.
    Ha(etcd_ha::Kv),
    /// etcd-client's KV client, default or tuned.
    Baseline(Box<etcd_client::KvClient>),
}

/// What reached the caller when a call failed: a short, stable kind ("Timeout",
/// "grpc Unavailable", ...) that the report counts.
pub type ErrorKind = String;

impl BenchClient {
    /// Connects `kind` to `endpoints` (etcd-ha with `ha_options`) and writes one marker key
    /// (`<prefix>marker`) so that the connections are up before the warm-up window starts.
    pub async fn connect(
        kind: ClientKind,
        endpoints: &[String],
        prefix: &str,
        ha_options: etcd_ha::Options,
    ) -> Self {
        let client = match kind {
            ClientKind::Ha => {
                let client = etcd_ha::Client::connect(endpoints, ha_options)
                    .await
                    .expect("etcd-ha connects to a healthy cluster");
                BenchClient::Ha(client.kv())
            }
            ClientKind::Baseline | ClientKind::BaselineTuned => {
                let options = (kind == ClientKind::BaselineTuned).then(tuned_options);
                let client = etcd_client::Client::connect(endpoints, options)
                    .await
                    .expect("etcd-client connects to a healthy cluster");
                BenchClient::Baseline(Box::new(client.kv_client()))
            }
        };
        let marker = format!("{prefix}marker");
        client
            .clone()
            .put(marker.clone().into_bytes(), b"ready".to_vec())
            .await
            .unwrap_or_else(|kind| panic!("first put of {marker} failed: {kind}"));
        client
    }

    /// Put `value` at `key`.
    pub async fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), ErrorKind> {
        match self {
            BenchClient::Ha(kv) => kv
                .put(key, value, etcd_ha::PutOptions::new())
                .await
                .map(drop)
                .map_err(|e| ha_kind(&e)),
            BenchClient::Baseline(kv) => kv
                .put(key, value, None)
                .await
                .map(drop)
                .map_err(|e| ec_kind(&e)),
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
                let options =
                    serializable.then(|| etcd_client::GetOptions::new().with_serializable());
                kv.get(key, options)
                    .await
                    .map(drop)
                    .map_err(|e| ec_kind(&e))
            }
        }
    }
}

/// etcd-ha's error variant name ("Timeout", "Unavailable", "NoLeader", ...).
fn ha_kind(error: &etcd_ha::Error) -> ErrorKind {
    variant_name(&format!("{error:?}"))
}

/// etcd-client's error as "grpc <code>" for a status, else its variant name.
fn ec_kind(error: &etcd_client::Error) -> ErrorKind {
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
