//! Managed watches on an auth cluster whose tokens expire: the shared watch stream carries the
//! token it was opened with, and etcd checks it again for every watch created on it. After an
//! expiry the stream renews the token, reopens and resumes every watch (issue 9, defect 1);
//! a user who may not read a key still gets `PermissionDenied`, once.
//!
//! Run against etcd 3.4 too: `ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test --features testkit --test auth_watch`.

mod support;

use std::time::Duration;

use etcd_ha::concurrency::Election;
use etcd_ha::testkit::Cluster;
use etcd_ha::{
    Client, Error, Options, PermissionType, PutOptions, Session, WatchBatch, WatchOptions,
    WatchStream, prefix_end,
};
use futures_util::StreamExt;
use tokio::time::timeout;

use support::READY;

/// Simple-token idle TTL (`--auth-token-ttl`, seconds): short, so that tests can outwait it.
const TOKEN_TTL_SECS: u64 = 2;

/// Quiet time after which the token has surely expired: etcd's token keeper checks once a
/// second, so a token dies between TTL and TTL + 1 s after its last use.
const TOKEN_EXPIRY_WAIT: Duration = Duration::from_secs(TOKEN_TTL_SECS + 2);

/// Expiries each test outwaits (3 x 4 s = 12 s of quiet time per test).
const EXPIRIES: usize = 3;

/// How long anything may take on a loaded 2-core box.
const PROMPT: Duration = Duration::from_secs(15);

/// 3 members, auth on with root, tokens that expire after 2 s unused.
async fn short_token_cluster() -> Cluster {
    support::init_tracing();
    let cluster = Cluster::builder()
        .members(3)
        .auth("root", "pw")
        .arg(format!("--auth-token-ttl={TOKEN_TTL_SECS}"))
        // Every login runs bcrypt; the lowest cost keeps the many renewals cheap.
        .arg("--bcrypt-cost=4")
        .start()
        .await
        .expect("start an auth cluster with a short token TTL");
    cluster.leader(READY).await.expect("a leader");
    cluster
}

/// The values of the next events batch of `watch` (skipping progress), within [`PROMPT`].
async fn next_values(watch: &mut WatchStream) -> Vec<String> {
    loop {
        let batch = timeout(PROMPT, watch.next_batch())
            .await
            .expect("a batch in time")
            .expect("the watch goes on")
            .unwrap_or_else(|e| panic!("the watch failed: {e:?}"));
        if let WatchBatch::Events { events, .. } = batch {
            return events
                .into_iter()
                .map(|e| String::from_utf8(e.kv.unwrap().value).unwrap())
                .collect();
        }
    }
}

/// Read `n` values from `watch`, which must be exactly `expected`, in order.
async fn expect_values(watch: &mut WatchStream, expected: &[String], who: &str) {
    let mut got = Vec::new();
    while got.len() < expected.len() {
        got.extend(next_values(watch).await);
    }
    assert_eq!(got, expected, "{who}: every event once, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_watches_made_before_and_after_token_expiries_deliver_every_event_once() {
    let cluster = short_token_cluster().await;
    let client = support::client_letting_tokens_expire(&cluster).await;
    let kv = client.kv();
    let prefix = support::unique("auth-watch");
    let on_prefix = || WatchOptions::new().with_prefix();

    // Made before any expiry; sees everything.
    let mut first = client
        .watch()
        .watch(prefix.as_str(), on_prefix())
        .await
        .unwrap();
    let mut later: Vec<(WatchStream, usize)> = Vec::new();
    let mut written: Vec<String> = Vec::new();
    for round in 0..EXPIRIES {
        tokio::time::sleep(TOKEN_EXPIRY_WAIT).await;
        // A new watch right after the expiry, before any unary call renews the token: etcd
        // refuses the create on the old stream; the client must renew and reopen by itself.
        let watch = timeout(PROMPT, client.watch().watch(prefix.as_str(), on_prefix()))
            .await
            .expect("the watch is made in time")
            .unwrap_or_else(|e| panic!("round {round}: new watch after expiry: {e:?}"));
        later.push((watch, written.len()));
        for i in 0..3 {
            let value = format!("r{round}-{i}");
            kv.put(format!("{prefix}/{i}"), value.as_str(), PutOptions::new())
                .await
                .unwrap();
            written.push(value);
        }
        // Everyone sees this round's writes now, so that the next round's quiet time is quiet.
        expect_values(&mut first, &written[written.len() - 3..], "first").await;
        for (n, (watch, _)) in later.iter_mut().enumerate() {
            expect_values(watch, &written[written.len() - 3..], &format!("watch {n}")).await;
        }
    }
    // After the last expiry, an untouched watch made before it still delivers, and nothing
    // was delivered twice: the next batch is the next write.
    tokio::time::sleep(TOKEN_EXPIRY_WAIT).await;
    kv.put(format!("{prefix}/last"), "last", PutOptions::new())
        .await
        .unwrap();
    let last = vec!["last".to_owned()];
    expect_values(&mut first, &last, "first").await;
    for (n, (watch, _)) in later.iter_mut().enumerate() {
        expect_values(watch, &last, &format!("watch {n}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_campaign_and_observer_work_across_token_expiries() {
    let cluster = short_token_cluster().await;
    let client = support::client_letting_tokens_expire(&cluster).await;
    let name = support::unique("auth-election");
    let election = Election::new(&client, name.as_str());

    // Short sessions: if the keep-alive stream were refused after an expiry, the leases would
    // be lost within the quiet time and the proclaims below would fail.
    let ttl = Duration::from_secs(3);
    let session_a = Session::new(&client, ttl).await.unwrap();
    let session_b = Session::new(&client, ttl).await.unwrap();
    let leader_a = election.campaign(&session_a, "a-0").await.unwrap();
    let mut observer = election.observe();
    let seen = timeout(PROMPT, observer.next()).await.unwrap().unwrap();
    assert_eq!(seen.unwrap().value, b"a-0");

    // B waits for its turn on a watch of A's key, made now.
    let contender = {
        let election = election.clone();
        tokio::spawn(async move {
            let leader = election.campaign(&session_b, "b").await;
            (leader, session_b)
        })
    };

    for round in 1..=EXPIRIES {
        tokio::time::sleep(TOKEN_EXPIRY_WAIT).await;
        assert!(
            !contender.is_finished(),
            "B must still wait (round {round})"
        );
        let value = format!("a-{round}");
        timeout(PROMPT, leader_a.proclaim(value.as_str()))
            .await
            .expect("proclaim in time")
            .unwrap_or_else(|e| panic!("round {round}: proclaim: {e:?}"));
        // The observer follows the new value with a watch made after the expiry.
        let seen = timeout(PROMPT, observer.next())
            .await
            .expect("the observer reports in time")
            .expect("the observer goes on")
            .unwrap_or_else(|e| panic!("round {round}: observer: {e:?}"));
        assert_eq!(
            seen.value,
            value.as_bytes(),
            "round {round}: once, in order"
        );
    }
    assert!(
        !session_a.lease().is_expired(),
        "A's lease was kept alive throughout"
    );

    // A hands over: B's watch, made before every expiry, wakes it.
    tokio::time::sleep(TOKEN_EXPIRY_WAIT).await;
    leader_a.resign().await.unwrap();
    let (leader_b, session_b) = timeout(PROMPT, contender)
        .await
        .expect("B wins in time")
        .unwrap();
    let leader_b = leader_b.unwrap_or_else(|e| panic!("B's campaign: {e:?}"));
    let seen = timeout(PROMPT, observer.next()).await.unwrap().unwrap();
    assert_eq!(seen.unwrap().value, b"b");
    // The keep-alive stream needs no token renewal: etcd renews leases without checking it.
    // (The keeper may still move it to a better member on a loaded box: that is no break.)
    assert_eq!(
        client.keeper().streams_broken(),
        0,
        "keep-alive stream never broke ({} opened)",
        client.keeper().streams_opened()
    );
    leader_b.resign().await.unwrap();
    session_a.close().await.unwrap();
    session_b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_read_permission_gets_permission_denied_once() {
    let cluster = short_token_cluster().await;
    let root = support::client_letting_tokens_expire(&cluster).await;
    let auth = root.auth();
    let allowed = support::unique("allowed");
    let secret = support::unique("secret");
    auth.user_add("reader", "reader-pw").await.unwrap();
    auth.role_add("reader").await.unwrap();
    auth.role_grant_permission(
        "reader",
        PermissionType::Read,
        allowed.as_str(),
        Some(prefix_end(allowed.as_bytes())),
    )
    .await
    .unwrap();
    auth.user_grant_role("reader", "reader").await.unwrap();

    let reader = Client::connect(
        cluster.endpoints(),
        Options::new()
            .with_user("reader", "reader-pw")
            .with_plaintext_credentials(),
    )
    .await
    .unwrap();
    let mut ok = reader
        .watch()
        .watch(allowed.as_str(), WatchOptions::new().with_prefix())
        .await
        .expect("reader may watch what it may read");
    let opened = reader.watch().streams_opened();

    for attempt in 0..2 {
        // A fresh token does not help: the refusal is final, and quick (no loop).
        let refused = timeout(
            PROMPT,
            reader
                .watch()
                .watch(secret.as_str(), WatchOptions::new().with_prefix()),
        )
        .await
        .expect("the refusal comes in time");
        assert!(
            matches!(refused, Err(Error::PermissionDenied)),
            "attempt {attempt}: {:?}",
            refused.map(|_| ())
        );
        // A real denial is told by a read, not by reopening the shared stream (one reopen is
        // allowed for a token that happened to expire meanwhile on a slow box).
        let now = reader.watch().streams_opened();
        assert!(now <= opened + 1, "attempt {attempt}: {now} streams");
    }

    // The other watch on the stream kept going, exactly once.
    root.kv()
        .put(format!("{allowed}/k"), "v1", PutOptions::new())
        .await
        .unwrap();
    expect_values(&mut ok, &["v1".to_owned()], "allowed").await;

    // After an expiry the same holds: the permitted watch is made, the forbidden one refused.
    tokio::time::sleep(TOKEN_EXPIRY_WAIT).await;
    let mut again = timeout(
        PROMPT,
        reader
            .watch()
            .watch(allowed.as_str(), WatchOptions::new().with_prefix()),
    )
    .await
    .unwrap()
    .expect("a permitted watch after an expiry");
    let refused = timeout(
        PROMPT,
        reader.watch().watch(secret.as_str(), WatchOptions::new()),
    )
    .await
    .unwrap();
    assert!(
        matches!(refused, Err(Error::PermissionDenied)),
        "{:?}",
        refused.map(|_| ())
    );
    root.kv()
        .put(format!("{allowed}/k"), "v2", PutOptions::new())
        .await
        .unwrap();
    expect_values(&mut ok, &["v2".to_owned()], "allowed").await;
    expect_values(&mut again, &["v2".to_owned()], "again").await;
}
