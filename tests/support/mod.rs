//! Shared helpers for the integration tests: clusters, clients, unique keys, logging.
#![allow(dead_code)]

pub mod members;
pub mod traffic;
pub mod workload;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_ha::Client;
use etcd_ha::testkit::Cluster;

/// How long a freshly started cluster may take to agree on a leader on a loaded 2-core box.
pub const READY: Duration = Duration::from_secs(30);

/// Route `tracing` output to the test harness (set RUST_LOG to see it).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A 3-member plain-HTTP cluster with a leader.
pub async fn cluster3() -> Cluster {
    with_leader(Cluster::builder().members(3)).await
}

/// The cluster's endpoints, member `member`'s replaced by `proxy` in front of it (tests that
/// hurt one member's client link). Pair it with `without_member_sync()`: member sync would
/// swap the proxy for the member's advertised URL.
pub fn through_proxy(
    cluster: &Cluster,
    member: usize,
    proxy: &etcd_ha::testkit::FaultProxy,
) -> Vec<String> {
    (0..cluster.len())
        .map(|i| {
            if i == member {
                proxy.url("http")
            } else {
                cluster.endpoint(i)
            }
        })
        .collect()
}

/// A 1-member plain-HTTP cluster with a leader.
pub async fn cluster1() -> Cluster {
    with_leader(Cluster::builder().members(1)).await
}

/// Start `builder`'s cluster and wait for its leader.
async fn with_leader(builder: etcd_ha::testkit::ClusterBuilder) -> Cluster {
    init_tracing();
    let cluster = builder.start().await.expect("start the etcd cluster");
    cluster
        .leader(READY)
        .await
        .expect("the cluster elects a leader");
    cluster
}

/// A 3-member plain-HTTP cluster with a leader, its data in memory (under `/dev/shm`, a tmpfs,
/// where the machine has one): for tests that bound the client's own share of a gap, which on
/// the machine's shared disk would include the members' fsyncs stalling one another (up to
/// ~30 ms per write seen on a loaded virtual disk).
pub async fn cluster3_in_memory() -> Cluster {
    let shm = std::path::Path::new("/dev/shm");
    let mut builder = Cluster::builder().members(3);
    if shm.is_dir() {
        builder = builder.data_dir_in(shm);
    }
    with_leader(builder).await
}

/// Options that reach `cluster` (its TLS files, its root user).
#[allow(unused_imports)]
pub use etcd_ha_check::harness::options_for;

/// A client connected to every member of `cluster`.
pub async fn client(cluster: &Cluster) -> Client {
    Client::connect(cluster.endpoints(), options_for(cluster))
        .await
        .expect("connect to the test cluster")
}

/// A client whose probes come once a minute: on etcd 3.6 and 3.5.28+ with auth on, probes show
/// the member the client's token (Status needs a user there), which keeps a simple token alive;
/// tests of what happens when it expires need probes rarer than its TTL.
pub async fn client_letting_tokens_expire(cluster: &Cluster) -> Client {
    let options = options_for(cluster).with_probe(Duration::from_secs(60), Duration::from_secs(2));
    Client::connect(cluster.endpoints(), options)
        .await
        .expect("connect to the test cluster")
}

/// Whether the client's probes may keep its token alive on this cluster's server: where Status
/// needs a user with auth on (etcd 3.6+, 3.5.28+), probes show it the token, and the rare ones
/// of [`client_letting_tokens_expire`] still come after an ejection or a failure.
pub fn probes_keep_tokens_alive(cluster: &Cluster) -> bool {
    cluster
        .etcd_version()
        .parse::<etcd_ha::ServerVersion>()
        .is_ok_and(|v| {
            v >= etcd_ha::ServerVersion::new(3, 6, 0)
                || (v.minor == 5 && v.major == 3 && v.patch >= 28)
        })
}

/// Wait until every endpoint is healthy (probes have run, so calls spread over all of them)
/// and the client knows the leader.
pub async fn all_healthy(client: &Client) {
    let until = tokio::time::Instant::now() + READY;
    loop {
        let endpoints = client.endpoints();
        if endpoints
            .iter()
            .all(|e| e.health == etcd_ha::HealthState::Healthy)
            && endpoints.iter().any(|e| e.is_leader)
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "not healthy again: {endpoints:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A key no other test uses: `name/<n>` with a process-wide counter.
pub fn unique(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{name}/{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Whether the cluster runs etcd 3.5 or newer (some RPCs and fields are 3.5+).
pub fn is_v35_or_newer(cluster: &Cluster) -> bool {
    let mut parts = cluster.etcd_version().split('.');
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor) >= (3, 5)
}

/// The etcd binary of `version` (the testkit's, built from its Go modules the first time and
/// cached in `.etcd-cache`): for tests of what only some servers do. Fails loudly when it
/// cannot be had.
pub fn etcd_of_version(version: &str) -> std::path::PathBuf {
    etcd_ha::testkit::etcd_of_version(version)
        .unwrap_or_else(|e| panic!("etcd {version} is needed by this test: {e}"))
}
