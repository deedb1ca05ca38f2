//! `unix://` endpoints against real etcd members listening on unix sockets: calls work, member
//! sync keeps a socket endpoint (matched to its member by id) and adds the other members by the
//! TCP URLs they advertise, and failover from a killed member works as over TCP. A socket path
//! that does not exist is a typed error at once.

mod support;

use std::time::Duration;

use etcd_ha::testkit::Cluster;
use etcd_ha::{Client, Error, GetOptions, Options, PutOptions};
use tokio::time::{Instant, sleep};

/// Member sync period of the clients: many syncs within the test's window.
const SYNC: Duration = Duration::from_millis(200);

/// Wait until `client`'s endpoint URLs satisfy `done`, or fail with what they are.
async fn endpoints_until(client: &Client, what: &str, done: impl Fn(&[String]) -> bool) {
    let until = Instant::now() + support::READY;
    loop {
        let urls: Vec<String> = client.endpoints().into_iter().map(|e| e.url).collect();
        if done(&urls) {
            return;
        }
        assert!(Instant::now() < until, "{what}: endpoints are {urls:?}");
        sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_member_sync_and_failover_over_unix_sockets() {
    support::init_tracing();
    let mut cluster = Cluster::builder()
        .members(3)
        .unix_sockets(true)
        .start()
        .await
        .expect("start a 3-member cluster with unix sockets");
    cluster
        .leader(support::READY)
        .await
        .expect("the cluster elects a leader");
    let sockets: Vec<String> = (0..3)
        .map(|i| cluster.unix_endpoint(i).expect("a unix endpoint"))
        .collect();

    // Every member by its socket: member sync sees the members' TCP URLs and keeps the
    // sockets, each matched to its member by the id its Status answered with.
    let all = Client::connect(&sockets, Options::new().with_member_sync(SYNC))
        .await
        .expect("connect over unix sockets");
    all.kv()
        .put("unix/k", "v", PutOptions::new())
        .await
        .expect("put over a unix socket");
    let got = all
        .kv()
        .get("unix/k", GetOptions::new())
        .await
        .expect("get over a unix socket");
    let kv = got.first().expect("the key just put");
    assert_eq!((kv.key_str(), kv.value_str()), (Ok("unix/k"), Ok("v")));
    support::all_healthy(&all).await;
    sleep(SYNC * 5).await;
    let mut urls: Vec<String> = all.endpoints().into_iter().map(|e| e.url).collect();
    urls.sort();
    let mut want = sockets.clone();
    want.sort();
    assert_eq!(urls, want, "member sync replaced a socket endpoint");

    // One member by its socket: member sync adds the two others by their advertised TCP URLs.
    let one = Client::connect([&sockets[0]], Options::new().with_member_sync(SYNC))
        .await
        .expect("connect over one unix socket");
    let tcp = cluster.endpoints();
    endpoints_until(&one, "member sync adds the other members", |urls| {
        urls.len() == 3
            && urls.contains(&sockets[0])
            && urls.contains(&tcp[1])
            && urls.contains(&tcp[2])
    })
    .await;

    // The member behind the socket dies: calls go on over TCP.
    cluster.kill(0);
    let deadline = Instant::now() + support::READY;
    let mut n = 0;
    while n < 20 {
        match one
            .kv()
            .put(format!("unix/after/{n}"), "v", PutOptions::new())
            .await
        {
            Ok(_) => n += 1,
            // A new leader may be being elected if member 0 led.
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("put after the socket's member died: {e}"),
        }
    }
    let got = one
        .kv()
        .get("unix/after/", GetOptions::new().with_prefix())
        .await
        .expect("get after the socket's member died");
    assert_eq!(got.count, 20);
    let pairs: Vec<(&str, &str)> = got
        .kvs_str()
        .collect::<Result<_, _>>()
        .expect("UTF-8 keys and values");
    assert!(
        pairs
            .iter()
            .all(|(k, v)| k.starts_with("unix/after/") && *v == "v")
    );
}

#[tokio::test]
async fn a_missing_socket_is_an_invalid_endpoint_at_once() {
    let dir = std::env::temp_dir().join(format!("etcd-ha-unix-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = format!("unix://{}", dir.join("absent.sock").display());
    let file = dir.join("plain-file");
    std::fs::write(&file, b"not a socket").unwrap();
    let not_socket = format!("unix://{}", file.display());

    for (endpoint, reason) in [
        (&missing, "no unix socket at this path"),
        (&not_socket, "not a unix socket"),
    ] {
        let started = Instant::now();
        let err = Client::connect([endpoint], Options::new())
            .await
            .expect_err("no etcd behind the path");
        assert!(
            matches!(err, Error::InvalidEndpoint { reason: r, .. } if r == reason),
            "{endpoint}: {err:?}"
        );
        // At once: not after the connect timeout (generous margin for a loaded box).
        assert!(started.elapsed() < Duration::from_secs(2), "{endpoint}");
    }
    for bad in ["unix://", "unixs:///run/etcd.sock"] {
        assert!(
            matches!(
                Client::connect([bad], Options::new()).await,
                Err(Error::InvalidEndpoint { .. })
            ),
            "{bad}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
