//! Bad input and bad luck against real etcd: malformed endpoints and options, dead and
//! black-holed endpoints, etcd's refusals as typed errors, and members dying under the client.
//!
//! Run against etcd 3.4 too: `ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test --features testkit --test bad_input`.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use etcd_ha::{Client, Error, GetOptions, Options, PutOptions, WatchOptions};

/// Connect timeout of the tests that wait for it to run out: short, so the file stays fast.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Slack on top of a timeout before we call it a hang: a loaded 2-core box can be slow to
/// schedule the timer, but not by seconds.
const MARGIN: Duration = Duration::from_secs(1);

/// A port on 127.0.0.1 that nothing listens on: bound by us for a moment, then released.
fn dead_endpoint() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", listener.local_addr().unwrap())
}

/// A listener that accepts connections and never says a word, like a frozen host whose kernel
/// still completes handshakes. Returns its endpoint and how many connections it accepted.
async fn black_hole() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        // Hold every socket: closing one would give the client a prompt error.
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });
    (endpoint, accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_endpoints_and_options_are_refused_before_dialling() {
    support::init_tracing();
    // Every rejection below must come before any dialling: an endpoint that would hang is in
    // the list too, and it must see no connection.
    let (hang, accepted) = black_hole().await;

    for bad in [
        "ftp://x",
        "http://h:99999",
        "",
        "http://h:1/path",
        "http://h:0",
        "http://",
    ] {
        let began = Instant::now();
        let result = Client::connect([hang.as_str(), bad], Options::new()).await;
        match &result {
            Err(Error::InvalidEndpoint { endpoint, reason }) => {
                assert_eq!(endpoint, bad);
                assert!(!reason.is_empty());
            }
            other => panic!("{bad:?}: expected InvalidEndpoint, got {other:?}"),
        }
        assert!(
            began.elapsed() < Duration::from_millis(500),
            "{bad:?} was slow"
        );
    }
    // Credentials (or a token in a query) in an endpoint are refused, and never echoed.
    for (bad, secret) in [
        ("http://alice:s3cret@127.0.0.1:0/x", "s3cret"),
        ("http://alice:s3cret@127.0.0.1:2379", "s3cret"),
        ("alice:s3cret@127.0.0.1:2379", "s3cret"),
        ("https://alice:p@ss/w?rd@127.0.0.1:1", "p@ss/w?rd"),
        ("http://alice:s3cret@", "s3cret"),
        ("gopher://alice:s3cret@h", "s3cret"),
        ("http://127.0.0.1:1/?token=tok.s3cret", "tok.s3cret"),
    ] {
        let result = Client::connect([hang.as_str(), bad], Options::new()).await;
        let Err(err) = result else {
            panic!("{bad:?} was accepted")
        };
        assert!(
            matches!(err, Error::InvalidEndpoint { .. }),
            "{bad:?}: {err:?}"
        );
        for shown in [err.to_string(), format!("{err:?}")] {
            assert!(!shown.contains(secret), "{bad:?} leaks: {shown}");
        }
    }
    // http:// while TLS is configured would send plaintext to a TLS port: refused too.
    let tls = Options::new().with_tls(etcd_ha::TlsOptions::new());
    let result = Client::connect(["http://127.0.0.1:2379"], tls).await;
    assert!(
        matches!(result, Err(Error::InvalidEndpoint { .. })),
        "{result:?}"
    );

    let result = Client::connect(Vec::<String>::new(), Options::new()).await;
    assert!(matches!(result, Err(Error::NoEndpoints)), "{result:?}");

    let cases = [
        (
            Options::new().with_keepalive(Duration::from_secs(4), Duration::from_secs(1)),
            "keepalive",
        ),
        (
            Options::new().with_connect_timeout(Duration::ZERO),
            "connect_timeout",
        ),
        (
            Options::new().with_request_timeout(Duration::ZERO),
            "request_timeout",
        ),
        (
            Options::new().with_max_request_bytes(0),
            "max_request_bytes",
        ),
        (Options::new().with_user("", "pw"), "user"),
    ];
    for (options, name) in cases {
        let result = Client::connect([hang.as_str()], options).await;
        assert!(
            matches!(&result, Err(Error::InvalidOptions { option, .. }) if *option == name),
            "{name}: {result:?}"
        );
    }
    // Credentials over plain text (issue 18): refused before a byte goes out, password and
    // token alike, unless the user opts in; a list mixing https:// and http:// members too.
    let with_user = || Options::new().with_user("app", "the-password");
    let refused = Client::connect([hang.as_str()], with_user()).await;
    match &refused {
        Err(e @ Error::PlaintextCredentials { endpoint }) => {
            assert_eq!(endpoint, &hang);
            assert!(!format!("{e} {e:?}").contains("the-password"), "{e:?}");
        }
        other => panic!("credentials over http:// accepted: {other:?}"),
    }
    let mixed = Client::connect(["https://127.0.0.1:1", hang.as_str()], Options::new()).await;
    assert!(
        matches!(&mixed, Err(Error::InvalidEndpoint { endpoint, .. }) if *endpoint == hang),
        "{mixed:?}"
    );
    let mixed = Client::connect(["https://127.0.0.1:1", hang.as_str()], with_user()).await;
    assert!(
        matches!(&mixed, Err(Error::InvalidEndpoint { .. })),
        "{mixed:?}"
    );

    // Exactly 5 s is etcd's floor and is accepted (validation alone; nothing dialled).
    Options::new()
        .with_keepalive(Duration::from_secs(5), Duration::from_secs(1))
        .validate()
        .unwrap();

    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "nothing may be dialled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_endpoints_fail_to_connect_within_the_connect_timeout() {
    support::init_tracing();
    let options = || Options::new().with_connect_timeout(CONNECT_TIMEOUT);

    // Refused connections: an answer, so no waiting for the timeout.
    let dead = [dead_endpoint(), dead_endpoint()];
    let began = Instant::now();
    let result = Client::connect(&dead, options()).await;
    let elapsed = began.elapsed();
    match &result {
        Err(
            err @ Error::Connect {
                endpoints,
                timeout,
                source,
            },
        ) => {
            assert_eq!(endpoints, &dead.to_vec());
            assert_eq!(*timeout, CONNECT_TIMEOUT);
            assert!(matches!(**source, Error::Transport { .. }), "{source:?}");
            assert!(err.is_retryable());
        }
        other => panic!("expected Connect, got {other:?}"),
    }
    assert!(
        elapsed < CONNECT_TIMEOUT + MARGIN,
        "refused took {elapsed:?}"
    );

    // A black hole accepts and never answers: only the connect timeout ends the wait.
    let (hole, accepted) = black_hole().await;
    let began = Instant::now();
    let result = Client::connect([hole.as_str()], options()).await;
    let elapsed = began.elapsed();
    match &result {
        Err(Error::Connect { source, .. }) => {
            assert!(matches!(**source, Error::Timeout), "{source:?}")
        }
        other => panic!("expected Connect, got {other:?}"),
    }
    assert!(
        accepted.load(Ordering::SeqCst) >= 1,
        "the client did dial it"
    );
    assert!(
        elapsed >= CONNECT_TIMEOUT - Duration::from_millis(50),
        "{elapsed:?}"
    );
    assert!(
        elapsed < CONNECT_TIMEOUT + MARGIN,
        "black hole took {elapsed:?}"
    );

    // Both kinds together: still one typed error within the timeout.
    let began = Instant::now();
    let result = Client::connect([hole.as_str(), dead[0].as_str()], options()).await;
    assert!(matches!(result, Err(Error::Connect { .. })), "{result:?}");
    assert!(began.elapsed() < CONNECT_TIMEOUT + MARGIN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_refusals_arrive_as_typed_errors() {
    let cluster = support::cluster3().await;

    // One dead endpoint first in the list does not stop the client from using the live ones.
    let mut endpoints = vec![dead_endpoint()];
    endpoints.extend(cluster.endpoints());
    let client = Client::connect(
        &endpoints,
        Options::new().with_connect_timeout(CONNECT_TIMEOUT),
    )
    .await
    .expect("connect with one dead endpoint among live ones");
    let kv = client.kv();
    let key = support::unique("bad");
    for i in 0..5 {
        kv.put(key.as_str(), format!("v{i}"), PutOptions::new())
            .await
            .unwrap();
    }
    assert_eq!(
        kv.get(key.as_str(), GetOptions::new()).await.unwrap().kvs[0].value,
        b"v4"
    );

    // Over etcd's --max-request-bytes (1.5 MiB by default). The client refuses it itself...
    let big = vec![b'x'; 1_700_000];
    let result = kv.put(key.as_str(), big.clone(), PutOptions::new()).await;
    assert!(matches!(result, Err(Error::RequestTooLarge)), "{result:?}");
    // ...and so does etcd when the client's own limit is raised: below gRPC's limit (request
    // limit + 512 KiB) etcd says "request is too large", above it gRPC refuses the message.
    let lax = Client::connect(
        cluster.endpoints(),
        Options::new().with_max_request_bytes(8 << 20),
    )
    .await
    .unwrap();
    for size in [1_700_000, 3 << 20] {
        let result = lax
            .kv()
            .put(key.as_str(), vec![b'x'; size], PutOptions::new())
            .await;
        assert!(
            matches!(result, Err(Error::RequestTooLarge)),
            "{size}: {result:?}"
        );
        assert!(!result.unwrap_err().is_retryable());
    }
    // Nothing of those was written.
    assert_eq!(
        kv.get(key.as_str(), GetOptions::new()).await.unwrap().kvs[0].value,
        b"v4"
    );

    // A read at a compacted revision.
    let first = kv.get(key.as_str(), GetOptions::new()).await.unwrap().kvs[0].create_revision;
    let head = kv
        .put(key.as_str(), "after", PutOptions::new())
        .await
        .unwrap();
    let head = head.header.unwrap().revision;
    kv.compact(head, true).await.unwrap();
    let result = kv
        .get(key.as_str(), GetOptions::new().with_revision(first))
        .await;
    assert!(matches!(result, Err(Error::Compacted { .. })), "{result:?}");
    // The compaction revision itself is still readable; a future one is not.
    let at_head = kv
        .get(key.as_str(), GetOptions::new().with_revision(head))
        .await
        .unwrap();
    assert_eq!(at_head.kvs[0].value, b"after");
    let result = kv
        .get(key.as_str(), GetOptions::new().with_revision(head + 1000))
        .await;
    assert!(matches!(result, Err(Error::FutureRevision)), "{result:?}");

    // A put on a revoked lease.
    let lease = client.lease();
    let granted = lease.grant(60, None).await.unwrap();
    kv.put("leased", "1", PutOptions::new().with_lease(granted.id))
        .await
        .unwrap();
    lease.revoke(granted.id).await.unwrap();
    assert_eq!(kv.get("leased", GetOptions::new()).await.unwrap().count, 0);
    let result = kv
        .put("leased", "2", PutOptions::new().with_lease(granted.id))
        .await;
    assert!(matches!(result, Err(Error::LeaseNotFound)), "{result:?}");
    let result = lease.revoke(granted.id).await;
    assert!(matches!(result, Err(Error::LeaseNotFound)), "{result:?}");

    // An empty key is etcd's own validation error, not a transport problem.
    let result = kv.put("", "v", PutOptions::new()).await;
    assert!(
        matches!(result, Err(Error::InvalidRequest(_))),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dying_members_give_retryable_errors_and_the_client_recovers() {
    let mut cluster = support::cluster3().await;
    let request_timeout = Duration::from_secs(2);
    let options = Options::new()
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_request_timeout(request_timeout);
    let client = Client::connect(cluster.endpoints(), options).await.unwrap();
    let key = support::unique("dying");
    let written = client
        .kv()
        .put(key.as_str(), "1", PutOptions::new())
        .await
        .unwrap()
        .header
        .unwrap()
        .revision;

    // A raw watch stream whose member is killed under it ends with a typed, retryable error
    // (SIGKILL closes the member's sockets), not with a hang and not with a clean end. It
    // starts after the put: "from now" on a follower that has not applied the put yet would
    // deliver it.
    let (_watcher, mut events) = client
        .watch()
        .raw(
            key.as_str(),
            WatchOptions::new().with_start_revision(written + 1),
        )
        .await
        .unwrap();
    let created = events
        .message()
        .await
        .unwrap()
        .expect("the created response");
    assert!(created.created);
    let serving = cluster
        .endpoints()
        .iter()
        .position(|e| e == events.endpoint())
        .expect("the stream names one of the cluster's endpoints");
    cluster.kill(serving);
    let ended = tokio::time::timeout(Duration::from_secs(10), events.message())
        .await
        .expect("the stream reports the dead member within 10 s");
    match &ended {
        Err(e @ (Error::Transport { .. } | Error::Unavailable(_))) => {
            assert!(e.is_retryable(), "{e:?}")
        }
        other => panic!("expected a transport error, got {other:?}"),
    }
    // The client moves on to a live member. If the dead member led, a read may still meet the
    // election (no leader for longer than its 2 s deadline on a loaded box); any such failure
    // must be retryable, and a live member soon answers.
    let deadline = Instant::now() + Duration::from_secs(10);
    let answered = loop {
        match client.kv().get(key.as_str(), GetOptions::new()).await {
            Ok(got) => break got,
            Err(e) => {
                assert!(e.is_retryable(), "{e:?}");
                assert!(Instant::now() < deadline, "no live member answered: {e:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(answered.kvs[0].value, b"1");

    // The whole cluster dies: a request fails with a retryable error within its timeout.
    cluster.kill_all();
    let began = Instant::now();
    let result = client.kv().get(key.as_str(), GetOptions::new()).await;
    let elapsed = began.elapsed();
    let err = result.expect_err("no member is alive");
    assert!(err.is_retryable(), "{err:?}");
    assert!(elapsed < request_timeout + MARGIN, "took {elapsed:?}");
    let result = client.kv().put(key.as_str(), "2", PutOptions::new()).await;
    assert!(
        result.as_ref().is_err_and(Error::is_retryable),
        "{result:?}"
    );

    // Back up: the same client redials and works without being rebuilt.
    cluster.start_all().await.unwrap();
    let got = client
        .kv()
        .get(key.as_str(), GetOptions::new())
        .await
        .expect("redialled");
    assert_eq!(got.kvs[0].value, b"1");
    let put = client
        .kv()
        .put(key.as_str(), "3", PutOptions::new())
        .await
        .unwrap();
    assert!(put.header.unwrap().revision > got.header.unwrap().revision);
}

/// Issue 9, defect 3: every duration option at its documented maximum works (the client
/// connects, writes, reads, watches and grants a lease without any panic in `Instant`
/// arithmetic), and just above it the option is refused with a typed error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_options_at_their_maximum_work_and_above_it_are_refused() {
    use etcd_ha::{MAX_INTERVAL, MAX_TIMEOUT};
    let cluster = support::cluster3().await;
    let over = Duration::from_secs(1);
    // (option name, options with it set to `d`, its maximum)
    type Set = fn(Duration) -> Options;
    let cases: [(&str, Set, Duration); 12] = [
        (
            "connect_timeout",
            |d| Options::new().with_connect_timeout(d),
            MAX_TIMEOUT,
        ),
        (
            "request_timeout",
            |d| Options::new().with_request_timeout(d),
            MAX_TIMEOUT,
        ),
        (
            "attempt_timeout",
            |d| Options::new().with_attempt_timeout(d),
            MAX_TIMEOUT,
        ),
        (
            "probe",
            |d| Options::new().with_probe(Duration::from_millis(500), d),
            MAX_TIMEOUT,
        ),
        (
            "probe",
            |d| Options::new().with_probe(d, Duration::from_secs(1)),
            MAX_INTERVAL,
        ),
        (
            "keepalive",
            |d| Options::new().with_keepalive(Duration::from_secs(10), d),
            MAX_TIMEOUT,
        ),
        (
            "keepalive",
            |d| Options::new().with_keepalive(d, Duration::from_secs(3)),
            MAX_INTERVAL,
        ),
        (
            "retry",
            |d| Options::new().with_retry(d, 0.1, 100),
            MAX_TIMEOUT,
        ),
        (
            "ejection",
            |d| Options::new().with_ejection(Duration::from_millis(250), d, 2),
            MAX_TIMEOUT,
        ),
        (
            "ejection",
            |d| Options::new().with_ejection(d, d, 2),
            MAX_TIMEOUT,
        ),
        (
            "leader_grace",
            |d| Options::new().with_leader_grace(d),
            MAX_TIMEOUT,
        ),
        (
            "member_sync",
            |d| Options::new().with_member_sync(d),
            MAX_INTERVAL,
        ),
    ];
    for (name, set, max) in cases {
        let client = Client::connect(cluster.endpoints(), set(max))
            .await
            .unwrap_or_else(|e| panic!("{name} at {max:?}: {e}"));
        let key = support::unique("max-option");
        client
            .kv()
            .put(key.as_str(), "v", PutOptions::new())
            .await
            .unwrap();
        let got = client
            .kv()
            .get(key.as_str(), GetOptions::new())
            .await
            .unwrap();
        assert_eq!(got.kvs[0].value, b"v", "{name}");
        let watch = client
            .watch()
            .watch(key.as_str(), WatchOptions::new())
            .await;
        assert!(watch.is_ok(), "{name}: {:?}", watch.err());
        let lease = client
            .keeper()
            .grant(Duration::from_secs(10))
            .await
            .unwrap();
        client.lease().revoke(lease.id()).await.unwrap();
        drop(client);

        for too_much in [max + over, Duration::MAX] {
            let result = Client::connect(cluster.endpoints(), set(too_much)).await;
            assert!(
                matches!(&result, Err(Error::InvalidOptions { option, reason })
                    if *option == name && reason.contains("at most")),
                "{name} at {too_much:?}: {:?}",
                result.map(|_| ())
            );
        }
    }
}
