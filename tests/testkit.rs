//! Behaviour of the testkit itself against real etcd: start, leader, kill, freeze, restart, TLS, auth, teardown.
//!
//! Run against etcd 3.4 too: `ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test --features testkit --test testkit`.

use std::time::{Duration, Instant};

use etcd_ha::proto::etcdserverpb::auth_client::AuthClient;
use etcd_ha::proto::etcdserverpb::kv_client::KvClient;
use etcd_ha::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use etcd_ha::proto::etcdserverpb::{AuthenticateRequest, PutRequest, RangeRequest, StatusRequest};
use etcd_ha::testkit::{Cluster, generate_unrelated_ca};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

/// Generous: the machine may run several clusters at once; a healthy election takes ~1-2 s.
const LEADER_WAIT: Duration = Duration::from_secs(20);

/// Starts a cluster of `n` members, printing how long that took (for the report).
async fn start(n: usize) -> Cluster {
    let began = Instant::now();
    let cluster = Cluster::start(n).await.expect("cluster starts");
    eprintln!(
        "etcd {}: {n}-member cluster ready in {:?}",
        cluster.etcd_version(),
        began.elapsed()
    );
    cluster
}

async fn channel(url: String) -> Channel {
    Endpoint::from_shared(url).unwrap().connect().await.unwrap()
}

async fn status_member_id(url: String) -> u64 {
    let mut client = MaintenanceClient::new(channel(url).await);
    let status = client.status(StatusRequest {}).await.unwrap().into_inner();
    status.header.unwrap().member_id
}

/// True if no process with `pid` exists (reaped, not a zombie).
fn process_gone(pid: u32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_start_and_agree_on_one_leader() {
    let cluster = start(3).await;
    assert_eq!(cluster.len(), 3);
    assert_eq!(cluster.member_name(1), "m1");
    let leader = cluster.leader(LEADER_WAIT).await.unwrap();
    assert!(leader < 3);

    // The member ids we cache are the ones the members report themselves.
    let mut ids = Vec::new();
    for i in 0..3 {
        let id = cluster.member_id(i).await.unwrap();
        assert_eq!(id, status_member_id(cluster.endpoint(i)).await);
        ids.push(id);
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3, "member ids are distinct");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_elects_another() {
    // Faster raft timings than etcd's defaults, which also checks that the flags are accepted.
    let mut cluster = Cluster::builder()
        .members(3)
        .heartbeat_ms(50)
        .election_ms(500)
        .start()
        .await
        .unwrap();
    let old = cluster.leader(LEADER_WAIT).await.unwrap();
    let pid = cluster.pid(old).unwrap();
    cluster.kill(old);
    assert_eq!(cluster.pid(old), None);
    assert!(process_gone(pid), "killed member is reaped");

    let began = Instant::now();
    let new = cluster.leader(LEADER_WAIT).await.unwrap();
    eprintln!("new leader after {:?}", began.elapsed());
    assert_ne!(new, old);

    cluster.restart(old).await.unwrap();
    cluster.wait_ready(LEADER_WAIT).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_member_answers_nothing_until_thawed() {
    let cluster = start(3).await;
    let leader = cluster.leader(LEADER_WAIT).await.unwrap();
    let frozen = (leader + 1) % 3;
    cluster.stop(frozen);
    assert!(cluster.pid(frozen).is_some(), "a frozen member still runs");

    let mut client = MaintenanceClient::new(channel(cluster.endpoint(frozen)).await);
    let call = tokio::time::timeout(Duration::from_millis(500), client.status(StatusRequest {}));
    assert!(call.await.is_err(), "a frozen member does not answer");
    // The others do not ask the frozen one, so they still report the leader.
    assert_eq!(cluster.leader(LEADER_WAIT).await.unwrap(), leader);

    cluster.cont(frozen);
    cluster.wait_ready(LEADER_WAIT).await.unwrap();
    client.status(StatusRequest {}).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_one_member_keeps_its_identity() {
    let mut cluster = start(3).await;
    let id = cluster.member_id(2).await.unwrap();
    let pid = cluster.pid(2).unwrap();
    cluster.restart(2).await.unwrap();
    assert_ne!(cluster.pid(2).unwrap(), pid);
    assert_eq!(status_member_id(cluster.endpoint(2)).await, id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarting_every_member_keeps_the_data() {
    let mut cluster = start(3).await;
    let mut kv = KvClient::new(channel(cluster.endpoint(0)).await);
    kv.put(PutRequest {
        key: b"testkit/key".to_vec(),
        value: b"survives".to_vec(),
        ..Default::default()
    })
    .await
    .unwrap();

    cluster.kill_all();
    assert!((0..3).all(|i| cluster.pid(i).is_none()));
    let began = Instant::now();
    cluster.start_all().await.unwrap();
    cluster.leader(LEADER_WAIT).await.unwrap();
    eprintln!("whole cluster back in {:?}", began.elapsed());

    let mut kv = KvClient::new(channel(cluster.endpoint(1)).await);
    let range = kv
        .range(RangeRequest {
            key: b"testkit/key".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(range.kvs.len(), 1);
    assert_eq!(range.kvs[0].value, b"survives");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_client_cert_and_auth_cluster() {
    let began = Instant::now();
    let cluster = Cluster::builder()
        .tls(true)
        .client_cert_auth(true)
        .auth("root", "rootpw")
        .start()
        .await
        .unwrap();
    eprintln!("TLS + auth 1-member cluster ready in {:?}", began.elapsed());
    assert!(cluster.endpoint(0).starts_with("https://127.0.0.1:"));
    assert_eq!(cluster.auth(), Some(("root", "rootpw")));
    let tls = cluster.tls().unwrap();
    let endpoint = Endpoint::from_shared(cluster.endpoint(0)).unwrap();

    // Status works over TLS with the client certificate.
    let with_cert = endpoint
        .clone()
        .tls_config(tls.client_tls_config().unwrap())
        .unwrap()
        .connect()
        .await
        .unwrap();
    MaintenanceClient::new(with_cert.clone())
        .status(StatusRequest {})
        .await
        .unwrap();

    // A Range without a token is refused: auth is on.
    let denied = KvClient::new(with_cert)
        .range(RangeRequest {
            key: b"k".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_ne!(denied.code(), tonic::Code::Ok);
    eprintln!("unauthenticated Range: {denied:?}");

    // A client that trusts another CA does not get through the handshake.
    let wrong_ca = generate_unrelated_ca(cluster.dir()).unwrap();
    let pem = std::fs::read_to_string(wrong_ca).unwrap();
    let wrong = endpoint
        .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)))
        .unwrap()
        .connect()
        .await;
    assert!(wrong.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_without_client_cert_auth_takes_any_client_that_trusts_the_ca() {
    let cluster = Cluster::builder().tls(true).start().await.unwrap();
    let tls = cluster.tls().unwrap();
    let ca_only = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&tls.ca_pem));
    let channel = Endpoint::from_shared(cluster.endpoint(0))
        .unwrap()
        .tls_config(ca_only)
        .unwrap()
        .connect()
        .await
        .unwrap();
    MaintenanceClient::new(channel)
        .status(StatusRequest {})
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_is_on_for_every_member_once_started() {
    let cluster = Cluster::builder()
        .members(3)
        .auth("root", "rootpw")
        .start()
        .await
        .unwrap();
    for url in cluster.endpoints() {
        let denied = KvClient::new(channel(url).await)
            .range(RangeRequest {
                key: b"k".to_vec(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(denied.code(), tonic::Code::InvalidArgument, "{denied:?}");
    }
    let token = AuthClient::new(channel(cluster.endpoint(2)).await)
        .authenticate(AuthenticateRequest {
            name: "root".into(),
            password: "rootpw".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .token;
    let mut request = tonic::Request::new(RangeRequest {
        key: b"k".to_vec(),
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert("token", token.parse().unwrap());
    KvClient::new(channel(cluster.endpoint(1)).await)
        .range(request)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_kills_every_member_and_removes_the_dirs() {
    let mut cluster = start(3).await;
    cluster.stop(0);
    let pids: Vec<u32> = (0..3).filter_map(|i| cluster.pid(i)).collect();
    assert_eq!(pids.len(), 3);
    let dir = cluster.dir().to_path_buf();
    let data_dir = cluster.data_dir(1).to_path_buf();
    assert!(data_dir.join("member").is_dir());
    cluster.kill(2);

    drop(cluster);
    for pid in pids {
        assert!(process_gone(pid), "pid {pid} still exists after drop");
    }
    assert!(!dir.exists(), "{dir:?} removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_test_still_tears_down() {
    let (tx, rx) = std::sync::mpsc::channel();
    let task = tokio::spawn(async move {
        let cluster = start(1).await;
        tx.send((cluster.pid(0).unwrap(), cluster.dir().to_path_buf()))
            .unwrap();
        panic!("a test failing while its cluster runs");
    });
    assert!(task.await.unwrap_err().is_panic());
    let (pid, dir) = rx.recv().unwrap();
    assert!(process_gone(pid));
    assert!(!dir.exists());
}
