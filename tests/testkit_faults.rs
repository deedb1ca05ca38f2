//! The testkit's fault injectors against real etcd: the TCP fault proxy, and network partitions of members in their own namespaces.
//!
//! The partition tests need root and `ip` (iproute2); they fail, never skip, without them.
//! Run against etcd 3.4 too: `ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test --features testkit --test testkit_faults`.

use std::future::Future;
use std::time::{Duration, Instant};

use etcd_ha::proto::etcdserverpb::kv_client::KvClient;
use etcd_ha::proto::etcdserverpb::{PutRequest, RangeRequest, RangeResponse};
use etcd_ha::testkit::{Cluster, FaultProxy, Mode, TestkitError};
use etcd_ha::{Client, Options};
use tonic::transport::{Channel, Endpoint};

/// Generous: the machine may run several clusters at once; a healthy election takes ~1-2 s.
const LEADER_WAIT: Duration = Duration::from_secs(20);

/// How long a request must hang to count as hanging: several times a localhost round trip
/// under load, and short enough to keep the suite quick.
const HANG: Duration = Duration::from_secs(1);

/// A failure that comes faster than this came from the fault, not from a timeout.
const FAST: Duration = Duration::from_millis(500);

/// How long a partitioned member may take to notice it has no leader: an election timeout
/// (500 ms in these clusters) for check-quorum or the follower's timer, plus slack.
const NO_LEADER_WAIT: Duration = Duration::from_secs(10);

/// A channel to `url` that fails instead of waiting long: the fault tests bound every call
/// themselves, and a connect must not outlive them.
async fn connect(url: String) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_shared(url)
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
}

fn put_request(key: &str, value: &str) -> PutRequest {
    PutRequest {
        key: key.into(),
        value: value.into(),
        ..Default::default()
    }
}

/// A Range of one key: linearizable unless `serializable`, with `hasleader=true` if
/// `require_leader` (the member then refuses at once when it has no leader).
fn range_request(
    key: &str,
    serializable: bool,
    require_leader: bool,
) -> tonic::Request<RangeRequest> {
    let mut request = tonic::Request::new(RangeRequest {
        key: key.into(),
        serializable,
        ..Default::default()
    });
    if require_leader {
        request
            .metadata_mut()
            .insert("hasleader", "true".parse().unwrap());
    }
    request
}

async fn range(kv: &mut KvClient<Channel>, key: &str) -> Result<RangeResponse, tonic::Status> {
    kv.range(range_request(key, false, false))
        .await
        .map(tonic::Response::into_inner)
}

fn value_of(response: &RangeResponse) -> &[u8] {
    &response.kvs.first().expect("the key exists").value
}

/// Connect and read `key` through a fresh connection; a transport error counts as a failed call.
async fn fresh_range(url: String, key: &str) -> Result<RangeResponse, String> {
    let channel = connect(url).await.map_err(|e| format!("connect: {e}"))?;
    range(&mut KvClient::new(channel), key)
        .await
        .map_err(|e| format!("range: {e}"))
}

/// Runs `call`, which must not finish within [`HANG`].
async fn assert_hangs<T: std::fmt::Debug>(what: &str, call: impl Future<Output = T>) {
    if let Ok(result) = tokio::time::timeout(HANG, call).await {
        panic!("{what} should hang, but finished with {result:?}");
    }
}

/// The namespaces on this machine, from `ip netns list`.
fn netns_list() -> String {
    let output = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("run ip netns list");
    assert!(output.status.success(), "ip netns list: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_passes_blackholes_resets_and_delays() {
    let cluster = Cluster::start(1).await.expect("cluster starts");
    let proxy = FaultProxy::start(cluster.client_addr(0)).unwrap();
    assert_eq!(proxy.target(), cluster.client_addr(0));
    assert_eq!(proxy.url("http"), format!("http://{}", proxy.addr()));
    assert!(
        matches!(cluster.partition(0), Err(TestkitError::NotIsolated)),
        "partitions need an isolated network"
    );

    // Pass: everything goes through, and is counted.
    let mut kv = KvClient::new(connect(proxy.url("http")).await.unwrap());
    kv.put(put_request("proxy/k", "v")).await.unwrap();
    assert_eq!(value_of(&range(&mut kv, "proxy/k").await.unwrap()), b"v");
    assert_eq!(proxy.accepted(), 1);
    assert!(proxy.bytes_forwarded() > 0);

    // Blackhole: a request on the open connection hangs, and so does one on a new connection,
    // which the proxy accepts and never answers.
    proxy.set_mode(Mode::Blackhole);
    assert_eq!(proxy.mode(), Mode::Blackhole);
    // The count is taken after the switch: the connection keeps talking on its own (the server's
    // HTTP/2 pings and their acks, 17 bytes each), and a frame that passed the mode check just
    // before the switch is still being written and counted. Once that write ends, nothing more
    // may pass.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let forwarded = proxy.bytes_forwarded();
    assert_hangs("a request on an open connection", range(&mut kv, "proxy/k")).await;
    assert_hangs(
        "a request on a new connection",
        fresh_range(proxy.url("http"), "proxy/k"),
    )
    .await;
    assert_eq!(proxy.accepted(), 2, "the new connection was accepted");
    assert_eq!(
        proxy.bytes_forwarded(),
        forwarded,
        "nothing forwarded while blackholed"
    );

    // Reset: calls fail at once, on the old channel and on a new one.
    proxy.set_mode(Mode::Reset);
    let began = Instant::now();
    let old = tokio::time::timeout(HANG, range(&mut kv, "proxy/k")).await;
    assert!(matches!(old, Ok(Err(_))), "old channel fails: {old:?}");
    let new = tokio::time::timeout(HANG, fresh_range(proxy.url("http"), "proxy/k")).await;
    assert!(matches!(new, Ok(Err(_))), "new channel fails: {new:?}");
    let took = began.elapsed();
    assert!(took < 2 * FAST, "resets fail fast, took {took:?}");

    // Pass again: a new connection works.
    proxy.set_mode(Mode::Pass);
    let response = fresh_range(proxy.url("http"), "proxy/k").await.unwrap();
    assert_eq!(value_of(&response), b"v");

    // Latency: a round trip is delayed both ways.
    let delay = Duration::from_millis(300);
    let mut kv = KvClient::new(connect(proxy.url("http")).await.unwrap());
    range(&mut kv, "proxy/k").await.unwrap();
    proxy.set_mode(Mode::Latency(delay));
    let began = Instant::now();
    assert_eq!(value_of(&range(&mut kv, "proxy/k").await.unwrap()), b"v");
    let took = began.elapsed();
    assert!(
        took >= 2 * delay,
        "round trip with {delay:?} each way took {took:?}"
    );
    proxy.set_mode(Mode::Pass);
    range(&mut kv, "proxy/k").await.unwrap();
    eprintln!(
        "etcd {}: latency round trip {took:?}",
        cluster.etcd_version()
    );

    // Loss: every chunk held back (100 %) stalls each round trip by a retransmission timeout
    // both ways; none (0 %) stalls nothing; the stream stays intact either way.
    let retransmit = Duration::from_millis(250);
    proxy.set_mode(Mode::Loss {
        percent: 100,
        retransmit,
    });
    let began = Instant::now();
    assert_eq!(value_of(&range(&mut kv, "proxy/k").await.unwrap()), b"v");
    let lossy = began.elapsed();
    assert!(
        lossy >= 2 * retransmit,
        "round trip with every chunk held {retransmit:?} took {lossy:?}"
    );
    proxy.set_mode(Mode::Loss {
        percent: 0,
        retransmit,
    });
    // Chunks read while every chunk was held (the client's acknowledgements of the answer)
    // are still due: what comes after them waits, as on a TCP stream.
    tokio::time::sleep(2 * retransmit).await;
    let began = Instant::now();
    assert_eq!(value_of(&range(&mut kv, "proxy/k").await.unwrap()), b"v");
    let clean = began.elapsed();
    assert!(
        clean < retransmit,
        "round trip with no chunk held took {clean:?}"
    );
    proxy.set_mode(Mode::Pass);

    // Drop: the port closes.
    let addr = proxy.addr();
    drop(proxy);
    let deadline = Instant::now() + Duration::from_secs(2);
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "the proxy still accepts after drop"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_is_replaced_and_rejoins_on_heal() {
    let began = Instant::now();
    let cluster = Cluster::builder()
        .members(3)
        .isolated_network(true)
        .heartbeat_ms(50)
        .election_ms(500)
        .start()
        .await
        .expect("isolated cluster starts");
    eprintln!(
        "etcd {}: isolated 3-member cluster ready in {:?}",
        cluster.etcd_version(),
        began.elapsed()
    );
    let namespaces: Vec<String> = (0..3).map(|i| cluster.netns(i).unwrap()).collect();
    let listed = netns_list();
    for (i, ns) in namespaces.iter().enumerate() {
        assert!(listed.contains(ns.as_str()), "{ns} exists");
        assert!(
            cluster.endpoint(i).starts_with("http://10."),
            "{}",
            cluster.endpoint(i)
        );
        // The tracked pid is etcd itself, running in the member's namespace.
        let pid = cluster.pid(i).unwrap();
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
        assert_eq!(comm.trim(), "etcd");
        let ns_of = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/net")).unwrap();
        assert_ne!(ns_of(&pid.to_string()), ns_of("self"));
    }

    let old = cluster.leader(LEADER_WAIT).await.unwrap();
    let client = Client::connect(cluster.endpoints(), Options::new())
        .await
        .expect("client connects");
    client
        .kv()
        .put("part/k", "v1", Default::default())
        .await
        .unwrap();
    let got = client.kv().get("part/k", Default::default()).await.unwrap();
    assert_eq!(got.kvs[0].value, b"v1");
    drop(client);

    let mut on_old = KvClient::new(connect(cluster.endpoint(old)).await.unwrap());
    let before = on_old.range(range_request("part/k", false, true)).await;
    assert!(
        before.is_ok(),
        "leader answers before the partition: {before:?}"
    );

    // Partition the leader: the other two agree on a new one.
    cluster.partition(old).unwrap();
    assert!(cluster.is_partitioned(old));
    let cut = Instant::now();
    let new = cluster.leader(Duration::from_secs(10)).await.unwrap();
    assert_ne!(new, old, "the majority elected another leader");
    eprintln!(
        "new leader {new} agreed {:?} after the partition",
        cut.elapsed()
    );
    let mut on_new = KvClient::new(connect(cluster.endpoint(new)).await.unwrap());
    on_new.put(put_request("part/k", "v2")).await.unwrap();

    // The cut-off member still serves serializable reads, from its stale copy...
    let stale = tokio::time::timeout(HANG, on_old.range(range_request("part/k", true, false)))
        .await
        .expect("a serializable read does not hang")
        .unwrap()
        .into_inner();
    assert_eq!(
        value_of(&stale),
        b"v1",
        "the partitioned member has not seen v2"
    );

    // ...and refuses reads that need a leader, once it knows it has none.
    let deadline = Instant::now() + NO_LEADER_WAIT;
    let refused = loop {
        let call = on_old.range(range_request("part/k", false, true));
        match tokio::time::timeout(HANG, call).await {
            Ok(Err(status)) if status.message().contains("no leader") => break status,
            other => assert!(
                Instant::now() < deadline,
                "no \"no leader\" within {NO_LEADER_WAIT:?}; last: {other:?}"
            ),
        }
    };
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    eprintln!(
        "partitioned member refused with no leader {:?} after the partition",
        cut.elapsed()
    );

    // Heal: it rejoins, agrees on the leader and catches up.
    cluster.heal(old).unwrap();
    assert!(!cluster.is_partitioned(old));
    cluster
        .wait_ready(LEADER_WAIT)
        .await
        .expect("all three agree again");
    let deadline = Instant::now() + NO_LEADER_WAIT;
    loop {
        let call = on_old.range(range_request("part/k", false, true));
        match tokio::time::timeout(HANG, call).await {
            Ok(Ok(response)) if value_of(response.get_ref()) == b"v2" => break,
            other => assert!(
                Instant::now() < deadline,
                "healed member not caught up: {other:?}"
            ),
        }
    }

    // Drop deletes every namespace of the cluster.
    drop(on_old);
    drop(on_new);
    drop(cluster);
    let listed = netns_list();
    for ns in &namespaces {
        assert!(
            !listed.contains(ns.as_str()),
            "{ns} still exists after drop:\n{listed}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_start_sweeps_namespaces_of_dead_processes_and_members_restart() {
    // What a test process killed with SIGKILL leaves behind: a namespace whose pid is gone.
    // Block ffff lies outside the blocks the testkit hands out, so no live cluster has it.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = format!("eha-ffff-{dead}-m0");
    let added = std::process::Command::new("ip")
        .args(["netns", "add", &stale])
        .status()
        .unwrap();
    assert!(added.success());
    // And the root end of a client link whose namespace is gone (a namespace can outlive its
    // name while the kernel holds a reference, keeping the veth pair alive). Blocks from f000
    // are never handed out either; pick one no concurrent test process is using.
    let orphan = loop {
        let block = 0xf000 | fastrand::u16(..0x1000);
        let (orphan, peer) = (format!("eha{block:04x}c0"), format!("eha{block:04x}q0"));
        let added = std::process::Command::new("ip")
            .args([
                "link", "add", "name", &orphan, "type", "veth", "peer", "name", &peer,
            ])
            .output()
            .unwrap();
        if added.status.success() {
            break orphan;
        }
        assert!(
            String::from_utf8_lossy(&added.stderr).contains("exists"),
            "ip link add: {added:?}"
        );
    };

    // TLS too: the server certificate must name the member's address in its namespace.
    let mut cluster = Cluster::builder()
        .isolated_network(true)
        .tls(true)
        .start()
        .await
        .expect("isolated cluster starts");
    assert!(
        !netns_list().contains(&stale),
        "the stale namespace was swept"
    );
    let link = std::process::Command::new("ip")
        .args(["link", "show", "dev", &orphan])
        .output()
        .unwrap();
    assert!(
        !link.status.success(),
        "the orphaned link {orphan} was swept"
    );
    assert!(cluster.endpoint(0).starts_with("https://10."));

    // Kill and restart work as usual inside the namespace.
    let tls = cluster.tls().unwrap().client_tls_config().unwrap();
    let url = cluster.endpoint(0);
    let tls_channel = || async {
        Endpoint::from_shared(url.clone())
            .unwrap()
            .tls_config(tls.clone())
            .unwrap()
            .connect()
            .await
            .unwrap()
    };
    let mut kv = KvClient::new(tls_channel().await);
    kv.put(put_request("sweep/k", "v")).await.unwrap();
    cluster.kill(0);
    assert!(cluster.pid(0).is_none());
    cluster.restart(0).await.unwrap();
    let mut kv = KvClient::new(tls_channel().await);
    assert_eq!(value_of(&range(&mut kv, "sweep/k").await.unwrap()), b"v");
    let ns = cluster.netns(0).unwrap();
    drop(cluster);
    assert!(!netns_list().contains(&ns));
}

/// Puts `count` entries of `key` through `channel`, `in_flight` at a time.
async fn put_many(channel: &Channel, key: &str, count: usize, in_flight: usize) {
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..in_flight {
        let mut kv = KvClient::new(channel.clone());
        let key = key.to_string();
        let share = count / in_flight + usize::from(t < count % in_flight);
        tasks.spawn(async move {
            for n in 0..share {
                kv.put(put_request(&key, &format!("{t}-{n}")))
                    .await
                    .expect("a put through the leader");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_backend_stalls_apply_until_the_member_refuses_with_too_many_requests() {
    let cluster = Cluster::builder()
        .members(3)
        .freezable_backend(true)
        .start()
        .await
        .unwrap();
    let leader = cluster.leader(LEADER_WAIT).await.unwrap();
    let follower = (leader + 1) % 3;
    let to_leader = connect(cluster.endpoints()[leader].clone()).await.unwrap();
    let to_follower = connect(cluster.endpoints()[follower].clone())
        .await
        .unwrap();
    let mut follower_kv = KvClient::new(to_follower.clone());
    follower_kv
        .put(put_request("lag/before", "x"))
        .await
        .unwrap();

    cluster.freeze_backend(follower).unwrap();
    // Writes through the leader until the follower's commit runs 5,000 entries ahead of its
    // apply: then it refuses at once, before proposing. (Status cannot say: its header reads
    // the store's revision, which waits on the frozen backend too.)
    let mut written = 0;
    let refusal = loop {
        put_many(&to_leader, "lag/burst", 1_000, 64).await;
        written += 1_000;
        let put = follower_kv.put(put_request("lag/probe", "x"));
        if let Ok(answer) = tokio::time::timeout(HANG, put).await {
            break answer.expect_err("a put to a member whose apply stalls cannot succeed");
        }
        assert!(written < 20_000, "no refusal after {written} writes");
    };
    assert!(
        refusal.message().contains("too many requests"),
        "refused with {refusal:?}"
    );
    assert!(
        written >= 5_000,
        "refused after only {written} writes: {refusal:?}"
    );
    // Thawing twice is harmless; the member applies what it missed and serves again.
    cluster.thaw_backend(follower).unwrap();
    cluster.thaw_backend(follower).unwrap();
    let mut follower_kv = KvClient::new(connect(cluster.endpoint(follower)).await.unwrap());
    let caught_up = Instant::now() + Duration::from_secs(20);
    loop {
        match follower_kv.put(put_request("lag/after", "x")).await {
            Ok(_) => break,
            // Still applying the backlog: the same refusal, for a while.
            Err(e) if e.message().contains("too many requests") => {}
            Err(e) => panic!("the thawed follower answered {e:?}"),
        }
        assert!(
            Instant::now() < caught_up,
            "the thawed follower never caught up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let no_freeze = Cluster::start(1).await.unwrap();
    assert!(matches!(
        no_freeze.freeze_backend(0),
        Err(TestkitError::BackendNotFreezable)
    ));
}
