//! The balancer as a tower `Service` under etcd's generated clients, against a real 3-member
//! cluster: requests are routed by RPC (writes to the leader, watches anywhere), a leader
//! kill moves them to the new leader with a handful of errors at most, and a frozen leader
//! costs one deadline.

mod support;

use std::time::{Duration, Instant};

use etcd_ha::proto::etcdserverpb::{
    PutRequest, RangeRequest, WatchCreateRequest, WatchRequest, kv_client::KvClient,
    watch_client::WatchClient, watch_request::RequestUnion,
};
use etcd_ha::testkit::FaultProxy;
use etcd_ha::{Client, GetOptions, Options};
use futures_util::StreamExt;

/// Deadline of each call in the kill test, as a tower layer.
const CALL_DEADLINE: Duration = Duration::from_secs(1);

/// Pause of the test's caller after a failed call.
const CALLER_BACKOFF: Duration = Duration::from_millis(25);

/// Re-election takes ~1.2 s here; a loaded 2-core box may need several times that.
const RECOVERY_BOUND: Duration = Duration::from_secs(10);

async fn until(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn put(key: &str, value: Vec<u8>) -> PutRequest {
    PutRequest {
        key: key.as_bytes().to_vec(),
        value,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_clients_are_routed_by_rpc() {
    let cluster = support::cluster3().await;
    // A counting proxy in front of every member shows where the bytes go.
    let proxies: Vec<FaultProxy> = (0..3)
        .map(|i| FaultProxy::start(cluster.client_addr(i)).unwrap())
        .collect();
    let urls: Vec<String> = proxies.iter().map(|p| p.url("http")).collect();
    let client = Client::connect(&urls, Options::new().without_member_sync())
        .await
        .unwrap();
    until(Duration::from_secs(10), "the leader is known", || {
        client.endpoints().iter().any(|e| e.is_leader)
    })
    .await;
    let leader_url = client
        .endpoints()
        .into_iter()
        .find(|e| e.is_leader)
        .unwrap()
        .url;
    let leader = urls.iter().position(|u| *u == leader_url).unwrap();

    let key = support::unique("balanced");
    let mut kv = KvClient::new(client.balanced_channel());
    let before: Vec<u64> = proxies.iter().map(FaultProxy::bytes_forwarded).collect();
    const PUTS: usize = 100;
    const VALUE: usize = 4096;
    for i in 0..PUTS {
        kv.put(put(&format!("{key}/{i}"), vec![b'x'; VALUE]))
            .await
            .unwrap();
    }
    let sent: Vec<u64> = proxies
        .iter()
        .zip(&before)
        .map(|(p, b)| p.bytes_forwarded() - b)
        .collect();
    // Every put went to the leader; the others only saw probes (a few hundred bytes each).
    let total = (PUTS * VALUE) as u64;
    assert!(sent[leader] >= total, "leader carried {sent:?} for {total}");
    for (i, bytes) in sent.iter().enumerate() {
        if i != leader {
            assert!(*bytes < total / 10, "follower {i} carried {sent:?}");
        }
    }
    // A Range through the generated client, then the typed API agrees.
    let got = kv
        .range(RangeRequest {
            key: format!("{key}/7").into_bytes(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.kvs[0].value.len(), VALUE);
    let typed = client
        .kv()
        .get(
            format!("{key}/"),
            GetOptions::new().with_prefix().with_count_only(),
        )
        .await
        .unwrap();
    assert_eq!(typed.count, PUTS as i64);

    // A watch (a bidirectional stream) through the generated Watch client: it opens on a member
    // of the balancer's choosing, with require-leader, and sees the next put.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
            key: format!("{key}/watched").into_bytes(),
            ..Default::default()
        })),
    })
    .await
    .unwrap();
    let mut watch = WatchClient::new(client.balanced_channel());
    let mut events = watch
        .watch(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let created = events.next().await.unwrap().unwrap();
    assert!(created.created);
    kv.put(put(&format!("{key}/watched"), b"seen".to_vec()))
        .await
        .unwrap();
    let batch = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("the watch sees the put")
        .unwrap()
        .unwrap();
    assert_eq!(batch.events[0].kv.as_ref().unwrap().value, b"seen");
    drop(tx);
}

/// A generated KV client over `client`'s channel with [`CALL_DEADLINE`] as a tower layer, once
/// the leader is known and 20 puts to a key of its own (named after `name`) went through.
async fn warmed_up(client: &Client, name: &str) -> (KvClient<Deadlined>, String) {
    until(Duration::from_secs(10), "the leader is known", || {
        client.endpoints().iter().any(|e| e.is_leader)
    })
    .await;
    let channel = tower::ServiceBuilder::new()
        .timeout(CALL_DEADLINE)
        .service(client.balanced_channel());
    let mut kv = KvClient::new(channel);
    let key = support::unique(name);
    for i in 0..20 {
        kv.put(put(&key, i.to_string().into_bytes())).await.unwrap();
    }
    (kv, key)
}

/// The balanced channel under a per-call deadline.
type Deadlined = tower::timeout::Timeout<etcd_ha::BalancedChannel>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kill_moves_generated_clients_to_the_new_leader() {
    let mut cluster = support::cluster3().await;
    let client = support::client(&cluster).await;
    let (mut kv, key) = warmed_up(&client, "balanced-kill").await;

    let leader = cluster.leader(support::READY).await.unwrap();
    cluster.kill(leader);
    let killed = Instant::now();
    let mut errors = Vec::new();
    let mut n = 0u64;
    let recovered = loop {
        n += 1;
        let started = Instant::now();
        match kv.put(put(&key, format!("after-{n}").into_bytes())).await {
            Ok(_) => break killed.elapsed(),
            Err(status) => errors.push((status, started.elapsed())),
        }
        assert!(
            killed.elapsed() < RECOVERY_BOUND,
            "no put succeeded within {RECOVERY_BOUND:?}: {errors:?}"
        );
        // What a caller of a generated client does between attempts (the channel itself does
        // not retry: a request body can be sent once).
        tokio::time::sleep(CALLER_BACKOFF).await;
    };
    let summary: Vec<_> = errors
        .iter()
        .map(|(s, took)| (s.code(), s.message().to_owned(), took.as_millis()))
        .collect();
    eprintln!(
        "leader kill: first put through the balanced channel after {recovered:?}, \
         {} errors: {summary:?}",
        errors.len(),
    );
    // Every failure is one a caller can act on: the connection to the dead member refused (or
    // closed before the request went out: "not sent", safe to send again), the
    // survivors' "no leader" while they elect one (at once: they are asked with hasleader), or
    // the caller's own deadline while the channel waits for the new leader. And at most once,
    // the call that met the dead member's connection before the client saw it close (the put
    // right after the kill can be written into a socket the kernel has just reset): reported
    // as Unavailable, "may have been applied", since a channel that sends a body once cannot
    // know how far it got.
    let mut lost = 0;
    for (status, _) in &errors {
        let message = status.message();
        if message.contains("may have been applied") {
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            lost += 1;
            continue;
        }
        assert!(
            message.contains("tcp connect error")
                || message.contains("not sent")
                || message.contains("no leader")
                || message.contains("request timed out"),
            "{status:?}"
        );
    }
    assert!(lost <= 1, "{lost} calls lost their connection: {summary:?}");
    // Calls that hung for the whole deadline (the failure of a client that keeps sending to a
    // dead or leaderless member): only while the channel waits out the election.
    let hung = errors
        .iter()
        .filter(|(s, _)| s.message().contains("request timed out"))
        .count();
    assert!(hung <= 3, "{hung} calls ran into the deadline: {summary:?}");
    // From then on the dead member is never picked again.
    for i in 0..50 {
        kv.put(put(&key, format!("steady-{i}").into_bytes()))
            .await
            .unwrap_or_else(|e| panic!("put {i} after recovery: {e:?}"));
    }
    let got = client
        .kv()
        .get(key.as_str(), GetOptions::new())
        .await
        .unwrap();
    assert_eq!(got.kvs[0].value, b"steady-49");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_lost_mid_call_is_unavailable_and_maybe_applied() {
    support::init_tracing();
    let cluster = etcd_ha::testkit::Cluster::start(1)
        .await
        .expect("start a 1-member etcd cluster");
    cluster.leader(support::READY).await.unwrap();
    // The member behind a proxy that holds every chunk back, so a put is surely on the wire
    // (written, unanswered) when the proxy resets the connection.
    let proxy = FaultProxy::start(cluster.client_addr(0)).unwrap();
    let client = Client::connect([proxy.url("http")], Options::new().without_member_sync())
        .await
        .unwrap();
    until(
        Duration::from_secs(10),
        "the member is known to lead",
        || client.endpoints().iter().any(|e| e.is_leader),
    )
    .await;
    let mut kv = KvClient::new(client.balanced_channel());
    let key = support::unique("balanced-lost");
    kv.put(put(&key, b"before".to_vec())).await.unwrap();

    proxy.set_mode(etcd_ha::testkit::Mode::Latency(Duration::from_millis(300)));
    let call = tokio::spawn(async move { kv.put(put(&key, b"lost".to_vec())).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.set_mode(etcd_ha::testkit::Mode::Reset);
    let status = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the call ends when its connection is reset")
        .unwrap()
        .expect_err("the put's connection was reset");
    // gRPC's code for a transport failure, so retry layers keyed on codes see it; the message
    // says the one thing a writer must assume, and names the member.
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("may have been applied")
            && status.message().contains(&proxy.url("http")),
        "{status:?}"
    );
    // The cause is still there for callers that look.
    assert!(std::error::Error::source(&status).is_some(), "{status:?}");
}

/// A frozen leader (SIGSTOP) costs a generated client over the channel one deadline, as it
/// costs the typed API: the probes' reads left unanswered there show the leader stalled, so
/// the next call waits for the next leader instead of being sent to the frozen one as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_costs_one_deadline() {
    let cluster = support::cluster3_in_memory().await;
    let client = support::client(&cluster).await;
    let (mut kv, key) = warmed_up(&client, "balanced-freeze").await;

    let leader = cluster.leader(support::READY).await.unwrap();
    cluster.stop(leader);
    let frozen = Instant::now();
    let mut errors = Vec::new();
    let mut n = 0u64;
    let outcome = loop {
        n += 1;
        let started = Instant::now();
        match kv.put(put(&key, format!("after-{n}").into_bytes())).await {
            Ok(_) => break Ok(frozen.elapsed()),
            Err(status) => errors.push((status.message().to_owned(), started.elapsed())),
        }
        if frozen.elapsed() > RECOVERY_BOUND {
            break Err(());
        }
        tokio::time::sleep(CALLER_BACKOFF).await;
    };
    cluster.cont(leader);
    let summary: Vec<_> = errors.iter().map(|(m, t)| (m, t.as_millis())).collect();
    println!("MEASURE frozen leader: first put after {outcome:?}, errors {summary:?}");
    assert!(
        outcome.is_ok(),
        "no put within {RECOVERY_BOUND:?}: {summary:?}"
    );
    let hung = errors
        .iter()
        .filter(|(m, _)| m.contains("request timed out"))
        .count();
    assert!(hung <= 1, "{hung} calls ran into the deadline: {summary:?}");
}

/// A caller's own gRPC deadline (`grpc-timeout`, which tonic enforces inside the channel) that
/// runs out on a frozen leader comes back as `DeadlineExceeded` saying the put may have been
/// applied, not as a lost connection; and the member is judged as for any unanswered call
/// (its streams' silence), so the next put, with a fresh deadline, gets through once a new
/// leader is elected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_grpc_deadline_is_a_deadline() {
    let cluster = support::cluster3_in_memory().await;
    let client = support::client(&cluster).await;
    until(Duration::from_secs(10), "the leader is known", || {
        client.endpoints().iter().any(|e| e.is_leader)
    })
    .await;
    let mut kv = KvClient::new(client.balanced_channel());
    let key = support::unique("balanced-grpc-timeout");
    let with_deadline = |value: &str| {
        let mut request = tonic::Request::new(put(&key, value.as_bytes().to_vec()));
        request.set_timeout(Duration::from_millis(300));
        request
    };
    kv.put(with_deadline("before")).await.unwrap();

    let leader = cluster.leader(support::READY).await.unwrap();
    cluster.stop(leader);
    let frozen = Instant::now();
    let status = kv.put(with_deadline("frozen")).await.unwrap_err();
    let took = frozen.elapsed();
    let mut recovered = None;
    let mut n = 0;
    while frozen.elapsed() < RECOVERY_BOUND {
        n += 1;
        if kv.put(with_deadline(&format!("after-{n}"))).await.is_ok() {
            recovered = Some(frozen.elapsed());
            break;
        }
        tokio::time::sleep(CALLER_BACKOFF).await;
    }
    cluster.cont(leader);
    println!(
        "MEASURE grpc-timeout on a frozen leader: {:?} {:?} after {took:?}; a put went \
         through after {recovered:?}",
        status.code(),
        status.message()
    );
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(
        status.message().contains("may have been applied"),
        "{status:?}"
    );
    assert!(took < Duration::from_secs(2), "the deadline held: {took:?}");
    assert!(
        recovered.is_some(),
        "no put within {RECOVERY_BOUND:?} of the freeze"
    );
}
