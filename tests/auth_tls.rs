//! Authentication and TLS against real etcd: mutual TLS with a password, secrets kept out of
//! `Debug`, typed auth failures, users and roles, token renewal after expiry, and TLS refusals.
//!
//! Run against etcd 3.4 too: `ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test --features testkit --test auth_tls`.

mod support;

use std::error::Error as StdError;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use etcd_ha::testkit::{Cluster, generate_unrelated_ca};
use etcd_ha::{
    Client, Error, GetOptions, Options, PermissionType, PutOptions, TlsOptions, prefix_end,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::READY;

/// Root's password; the tests check that it never shows in `Debug` output.
const ROOT_PASSWORD: &str = "root-pw-5f1c9a";

/// CN of the client certificate. With `--client-cert-auth`, etcd takes it as the user of any
/// request that carries no token, so it is set explicitly here and the tests can create (or not)
/// a user of that name.
const CERT_USER: &str = "cert-user";

/// Simple-token idle TTL (`--auth-token-ttl`, seconds) of the token-renewal cluster. Two seconds
/// rather than one so that a renewed token cannot expire again before the retry that uses it
/// reaches the server on a loaded box.
const TOKEN_TTL_SECS: u64 = 2;

/// How long to stay idle so that the token has surely expired: etcd's token keeper checks
/// once a second, so a token dies between TTL and TTL + 1 s after its last use.
const TOKEN_EXPIRY_WAIT: Duration = Duration::from_secs(TOKEN_TTL_SECS + 2);

/// 3 members, https, client certificates required (CN = `CERT_USER`), auth on with root.
async fn mtls_auth_cluster() -> Cluster {
    support::init_tracing();
    let cluster = Cluster::builder()
        .members(3)
        .tls(true)
        .client_cert_auth(true)
        .client_cert_cn(CERT_USER)
        .auth("root", ROOT_PASSWORD)
        // Each Authenticate, UserAdd and ChangePassword runs bcrypt; the lowest cost keeps the
        // many logins of these tests cheap on a 2-core box without changing any semantics.
        .arg("--bcrypt-cost=4")
        .start()
        .await
        .expect("start a TLS + client-cert + auth cluster");
    cluster
        .leader(READY)
        .await
        .expect("the cluster elects a leader");
    cluster
}

/// TLS options with the cluster's CA and client certificate, and no user.
fn cert_only_options(cluster: &Cluster) -> Options {
    let tls = cluster.tls().expect("a TLS cluster");
    Options::new().with_tls(
        TlsOptions::new()
            .with_ca_file(&tls.ca)
            .with_client_cert(&tls.client_cert, &tls.client_key),
    )
}

/// Every message of an error's source chain, joined: what a caller logging the error sees.
fn error_chain(err: &Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        text.push_str(" <- ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// Whether `text` contains something shaped like an etcd simple token: 16 ASCII letters, a dot,
/// and a decimal index (`tLjvLnuFJAXXUNJu.17`). The client's token cannot be read from outside,
/// so this is how we look for it in `Debug` output.
fn has_simple_token(text: &str) -> bool {
    let bytes = text.as_bytes();
    (0..bytes.len()).any(|i| {
        let letters = &bytes[i..(i + 16).min(bytes.len())];
        letters.len() == 16
            && letters.iter().all(u8::is_ascii_alphabetic)
            && (i == 0 || !bytes[i - 1].is_ascii_alphabetic())
            && bytes.get(i + 16) == Some(&b'.')
            && bytes.get(i + 17).is_some_and(u8::is_ascii_digit)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_with_password_works_and_keeps_secrets_out_of_debug() {
    let cluster = mtls_auth_cluster().await;
    let options = support::options_for(&cluster);
    let shown = format!("{options:?}");
    assert!(!shown.contains(ROOT_PASSWORD), "password in {shown}");
    assert!(
        shown.contains("root"),
        "the user name is useful in logs: {shown}"
    );

    let client = Client::connect(cluster.endpoints(), options.clone())
        .await
        .expect("connect with CA, client certificate and root's password");
    assert!(
        client
            .endpoint_urls()
            .iter()
            .all(|u| u.starts_with("https://127.0.0.1:"))
    );
    let kv = client.kv();
    let key = support::unique("tls");
    let put = kv
        .put(key.as_str(), "over-tls", PutOptions::new())
        .await
        .unwrap();
    let got = kv.get(key.as_str(), GetOptions::new()).await.unwrap();
    assert_eq!(got.kvs.len(), 1);
    assert_eq!(got.kvs[0].value, b"over-tls");
    assert_eq!(got.kvs[0].mod_revision, put.header.unwrap().revision);

    // The client holds a token now; neither it nor the password may show in its Debug.
    let shown = format!("{client:?}");
    assert!(!shown.contains(ROOT_PASSWORD), "password in {shown}");
    assert!(!has_simple_token(&shown), "token in {shown}");
    // Authenticate hands out a token of the same shape: it must not show in the response's
    // Debug either, and the detector above must be able to see one.
    let auth = client
        .auth()
        .authenticate("root", ROOT_PASSWORD)
        .await
        .unwrap();
    assert!(
        has_simple_token(&auth.token),
        "unexpected token shape {:?}",
        auth.token.len()
    );
    let shown = format!("{auth:?}");
    assert!(
        !shown.contains(&auth.token) && !has_simple_token(&shown),
        "token in {shown}"
    );

    // A wrong password, or a user that does not exist, fails at connect with a typed error.
    for (user, password) in [("root", "not-the-password"), ("nobody", ROOT_PASSWORD)] {
        let wrong = support::options_for(&cluster).with_user(user, password);
        let result = Client::connect(cluster.endpoints(), wrong).await;
        assert!(
            matches!(result, Err(Error::AuthFailed)),
            "{user}/{password}: {result:?}"
        );
    }

    // Without a token, `--client-cert-auth` makes etcd use the certificate's CN as the user.
    // That user does not exist yet, so etcd denies the request (it does not say "user name is
    // empty": a user name was found, in the certificate).
    let anonymous = Client::connect(cluster.endpoints(), cert_only_options(&cluster))
        .await
        .expect("connect needs no credentials: Status is open to all");
    let denied = anonymous
        .kv()
        .put(key.as_str(), "x", PutOptions::new())
        .await;
    assert!(matches!(denied, Err(Error::PermissionDenied)), "{denied:?}");
    let denied = anonymous.kv().get(key.as_str(), GetOptions::new()).await;
    assert!(matches!(denied, Err(Error::PermissionDenied)), "{denied:?}");

    // Give the CN a passwordless user that may read `tls/`: the same token-less client can now
    // read there, and still not write.
    let admin = client.auth();
    admin.user_add_without_password(CERT_USER).await.unwrap();
    admin.role_add("tls-reader").await.unwrap();
    admin
        .role_grant_permission(
            "tls-reader",
            PermissionType::Read,
            "tls/",
            Some(prefix_end(b"tls/")),
        )
        .await
        .unwrap();
    admin
        .user_grant_role(CERT_USER, "tls-reader")
        .await
        .unwrap();
    let read = anonymous
        .kv()
        .get(key.as_str(), GetOptions::new())
        .await
        .unwrap();
    assert_eq!(read.kvs[0].value, b"over-tls");
    let denied = anonymous
        .kv()
        .put(key.as_str(), "x", PutOptions::new())
        .await;
    assert!(matches!(denied, Err(Error::PermissionDenied)), "{denied:?}");
    // A passwordless user cannot log in with a password.
    let login = admin.authenticate(CERT_USER, "").await;
    assert!(matches!(login, Err(Error::AuthFailed)), "{login:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_roles_and_permissions_through_the_auth_client() {
    let cluster = mtls_auth_cluster().await;
    let root = support::client(&cluster).await;
    let admin = root.auth();
    let (user, role) = ("alice", "pub-reader");
    let (prefix, end) = ("pub/", prefix_end(b"pub/"));

    admin.user_add(user, "alice-pw-1").await.unwrap();
    admin.role_add(role).await.unwrap();
    admin
        .role_grant_permission(role, PermissionType::Read, prefix, Some(end.clone()))
        .await
        .unwrap();
    admin.user_grant_role(user, role).await.unwrap();

    assert_eq!(admin.user_get(user).await.unwrap().roles, [role]);
    let users = admin.user_list().await.unwrap().users;
    assert!(
        users.iter().any(|u| u == "root") && users.iter().any(|u| u == user),
        "{users:?}"
    );
    let perms = admin.role_get(role).await.unwrap().perm;
    assert_eq!(perms.len(), 1, "{perms:?}");
    assert_eq!(perms[0].perm_type, PermissionType::Read as i32);
    assert_eq!(perms[0].key, prefix.as_bytes());
    assert_eq!(perms[0].range_end, end);
    let roles = admin.role_list().await.unwrap().roles;
    assert!(
        roles.iter().any(|r| r == "root") && roles.iter().any(|r| r == role),
        "{roles:?}"
    );

    root.kv()
        .put("pub/a", "1", PutOptions::new())
        .await
        .unwrap();
    root.kv()
        .put("private/a", "2", PutOptions::new())
        .await
        .unwrap();

    // Alice connects over the same mutual TLS; her token, not the certificate's CN (which is no
    // user here), decides what she may do.
    let alice_options = support::options_for(&cluster).with_user(user, "alice-pw-1");
    let alice = Client::connect(cluster.endpoints(), alice_options)
        .await
        .unwrap();
    let read = alice
        .kv()
        .get(prefix, GetOptions::new().with_prefix())
        .await
        .unwrap();
    assert_eq!(read.count, 1);
    assert_eq!(read.kvs[0].value, b"1");
    let denied = alice.kv().put("pub/b", "x", PutOptions::new()).await;
    assert!(matches!(denied, Err(Error::PermissionDenied)), "{denied:?}");
    let denied = alice.kv().get("private/a", GetOptions::new()).await;
    assert!(matches!(denied, Err(Error::PermissionDenied)), "{denied:?}");

    // Without the permission the role grants nothing, and reads are denied too.
    admin
        .role_revoke_permission(role, prefix, Some(end.clone()))
        .await
        .unwrap();
    assert!(admin.role_get(role).await.unwrap().perm.is_empty());
    let denied = alice.kv().get("pub/a", GetOptions::new()).await;
    assert!(matches!(denied, Err(Error::PermissionDenied)), "{denied:?}");
    admin.user_revoke_role(user, role).await.unwrap();
    assert!(admin.user_get(user).await.unwrap().roles.is_empty());

    // A new password: the old one no longer logs in, the new one does.
    admin
        .user_change_password(user, "alice-pw-2")
        .await
        .unwrap();
    let old = support::options_for(&cluster).with_user(user, "alice-pw-1");
    let result = Client::connect(cluster.endpoints(), old).await;
    assert!(matches!(result, Err(Error::AuthFailed)), "{result:?}");
    let new = support::options_for(&cluster).with_user(user, "alice-pw-2");
    let alice2 = Client::connect(cluster.endpoints(), new).await.unwrap();
    // She may do nothing now, and etcd says so (the login itself worked).
    let denied = alice2.kv().get("pub/a", GetOptions::new()).await;
    assert!(matches!(denied, Err(Error::PermissionDenied)), "{denied:?}");
    // The client that logged in with the old password had its token invalidated by the change;
    // renewing it with the old password fails, typed.
    let stale = alice.kv().get("pub/a", GetOptions::new()).await;
    assert!(matches!(stale, Err(Error::AuthFailed)), "{stale:?}");

    admin.user_delete(user).await.unwrap();
    assert!(
        !admin
            .user_list()
            .await
            .unwrap()
            .users
            .iter()
            .any(|u| u == user)
    );
    let gone = admin.user_get(user).await;
    assert!(
        matches!(&gone, Err(Error::Grpc(s)) if s.code() == tonic::Code::FailedPrecondition
            && s.message().contains("user name not found")),
        "{gone:?}"
    );
    admin.role_delete(role).await.unwrap();
    assert!(
        !admin
            .role_list()
            .await
            .unwrap()
            .roles
            .iter()
            .any(|r| r == role)
    );

    // Auth status is etcd 3.5+; 3.4 does not know the RPC.
    let status = admin.status().await;
    if support::is_v35_or_newer(&cluster) {
        let status = status.unwrap();
        assert!(status.enabled);
        assert!(status.auth_revision > 0);
    } else {
        assert!(
            matches!(&status, Err(Error::Grpc(s)) if s.code() == tonic::Code::Unimplemented),
            "{status:?}"
        );
    }

    // Auth off: a client without a token (and whose certificate CN is no user) may write.
    let anonymous = Client::connect(cluster.endpoints(), cert_only_options(&cluster))
        .await
        .unwrap();
    let denied = anonymous.kv().put("open/a", "x", PutOptions::new()).await;
    assert!(matches!(denied, Err(Error::PermissionDenied)), "{denied:?}");
    admin.disable().await.unwrap();
    anonymous
        .kv()
        .put("open/a", "1", PutOptions::new())
        .await
        .unwrap();
    if support::is_v35_or_newer(&cluster) {
        assert!(!admin.status().await.unwrap().enabled);
    }
    // Root's client keeps working while auth is off. etcd (3.4.23 and 3.5.1 alike) rejects the
    // token it holds, issued before the disable, as invalid, and logging in again says auth is
    // not enabled: the client must then call without a token, as etcd's own clientv3 does.
    let got = root.kv().get("open/a", GetOptions::new()).await.unwrap();
    assert_eq!(got.kvs[0].value, b"1");
    // Likewise credentials given to a cluster without auth are no error at connect.
    let late = support::client(&cluster).await;
    assert_eq!(
        late.kv()
            .get("open/a", GetOptions::new())
            .await
            .unwrap()
            .count,
        1
    );

    // And on again: the anonymous client is refused; the two root clients, which now call
    // without a token, log in again and are let through.
    admin.enable().await.unwrap();
    let denied = anonymous.kv().put("open/a", "2", PutOptions::new()).await;
    assert!(matches!(denied, Err(Error::PermissionDenied)), "{denied:?}");
    root.kv()
        .put("open/a", "3", PutOptions::new())
        .await
        .unwrap();
    late.kv()
        .put("open/a", "4", PutOptions::new())
        .await
        .unwrap();
    if support::is_v35_or_newer(&cluster) {
        assert!(admin.status().await.unwrap().enabled);
    }
}

/// The port of an `http://127.0.0.1:port` endpoint.
fn port_of(endpoint: &str) -> u16 {
    endpoint.rsplit(':').next().unwrap().parse().unwrap()
}

/// How many Authenticate calls the members have received in all, from etcd's own gRPC metrics
/// (`grpc_server_started_total`, served at `/metrics` on the client port). This is an observable
/// outside the client: it counts logins, whatever the client thinks it did.
async fn authenticate_calls(cluster: &Cluster) -> u64 {
    let mut total = 0;
    for endpoint in cluster.endpoints() {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port_of(&endpoint)))
            .await
            .unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut body = String::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut body))
            .await
            .expect("/metrics answers")
            .unwrap();
        let line = body
            .lines()
            .find(|l| {
                l.starts_with("grpc_server_started_total{")
                    && l.contains(r#"grpc_method="Authenticate""#)
            })
            .unwrap_or_else(|| panic!("no Authenticate counter at {endpoint}/metrics"));
        let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        total += value as u64;
    }
    total
}

/// A plain-http 3-member cluster with auth on and tokens that expire after
/// [`TOKEN_TTL_SECS`] (cheap bcrypt, so logins are fast).
async fn short_token_cluster() -> Cluster {
    Cluster::builder()
        .members(3)
        .auth("root", ROOT_PASSWORD)
        .arg(format!("--auth-token-ttl={TOKEN_TTL_SECS}"))
        .arg("--bcrypt-cost=4")
        .start()
        .await
        .expect("start an auth cluster with a short token TTL")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_token_is_renewed_once_for_all_waiting_requests() {
    support::init_tracing();
    // Plain http so that the test can read /metrics with a bare HTTP/1.1 request.
    let cluster = short_token_cluster().await;
    cluster.leader(READY).await.unwrap();

    // No credentials and no client certificate: etcd has no user name at all.
    let anonymous = Client::connect(cluster.endpoints(), Options::new())
        .await
        .unwrap();
    let refused = anonymous.kv().put("k", "v", PutOptions::new()).await;
    assert!(matches!(refused, Err(Error::AuthRequired)), "{refused:?}");
    let refused = anonymous.kv().get("k", GetOptions::new()).await;
    assert!(matches!(refused, Err(Error::AuthRequired)), "{refused:?}");

    let client = support::client_letting_tokens_expire(&cluster).await;
    let keeps_alive = support::probes_keep_tokens_alive(&cluster);
    let kv = client.kv();
    let key = support::unique("ttl");
    kv.put(key.as_str(), "before-expiry", PutOptions::new())
        .await
        .unwrap();

    // One request after the token expired: etcd rejects the token, the client logs in again and
    // the caller sees only the answer.
    let logins = authenticate_calls(&cluster).await;
    tokio::time::sleep(TOKEN_EXPIRY_WAIT).await;
    let got = kv
        .get(key.as_str(), GetOptions::new())
        .await
        .expect("renewed transparently");
    assert_eq!(got.kvs[0].value, b"before-expiry");
    // Where Status needs a user, a probe that came in the wait (after an ejection, or woken by
    // a failure) showed the token and kept it alive: then no login at all is right too.
    let renewals = authenticate_calls(&cluster).await - logins;
    assert!(
        renewals == 1 || (keeps_alive && renewals == 0),
        "the token expired, so exactly one new login: {renewals}"
    );

    // Twenty requests at once after the next expiry: all succeed, with a single login between
    // them (the first to see the rejection renews; the others wait and reuse its token).
    let logins = authenticate_calls(&cluster).await;
    tokio::time::sleep(TOKEN_EXPIRY_WAIT).await;
    let done = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let kv = client.kv();
            let key = format!("{key}/{i}");
            let done = done.clone();
            tokio::spawn(async move {
                let put = kv
                    .put(key.as_str(), i.to_string(), PutOptions::new())
                    .await?;
                done.fetch_add(1, Ordering::Relaxed);
                Ok::<_, Error>(put.header.unwrap().revision)
            })
        })
        .collect();
    let mut revisions = Vec::new();
    for task in tasks {
        revisions.push(
            task.await
                .unwrap()
                .expect("every request succeeds after renewal"),
        );
    }
    revisions.sort_unstable();
    revisions.dedup();
    assert_eq!(revisions.len(), 20, "twenty distinct writes");
    assert_eq!(done.load(Ordering::Relaxed), 20);
    let after = authenticate_calls(&cluster).await;
    assert!(
        after - logins == 1 || (keeps_alive && after == logins),
        "one login for all twenty requests: {}",
        after - logins
    );
    let all = kv
        .get(format!("{key}/"), GetOptions::new().with_prefix())
        .await
        .unwrap();
    assert_eq!(all.count, 20);

    // Etcd's generated client over the balanced channel: the token goes on every call; a call
    // that meets an expired token fails (its body cannot be sent twice) and renews it, once,
    // for the next call.
    use etcd_ha::proto::etcdserverpb::{PutRequest, kv_client::KvClient};
    let mut raw = KvClient::new(client.balanced_channel());
    let put = |value: &str| PutRequest {
        key: format!("{key}/raw").into_bytes(),
        value: value.as_bytes().to_vec(),
        ..Default::default()
    };
    raw.put(put("fresh-token")).await.expect("token attached");
    let debug = format!("{:?}", client.balanced_channel());
    assert!(
        !debug.contains(ROOT_PASSWORD) && !has_simple_token(&debug),
        "{debug}"
    );
    let logins = authenticate_calls(&cluster).await;
    tokio::time::sleep(TOKEN_EXPIRY_WAIT).await;
    match raw.put(put("stale-token")).await {
        Err(refused) => {
            assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
            raw.put(put("renewed"))
                .await
                .expect("the next call has a fresh token");
            assert_eq!(authenticate_calls(&cluster).await - logins, 1, "one login");
        }
        // Kept alive by a probe in the wait (see above).
        Ok(_) if keeps_alive => {
            raw.put(put("renewed"))
                .await
                .expect("the token still works");
        }
        Ok(answer) => panic!("token expired, yet the put went through: {answer:?}"),
    }
    let got = kv
        .get(format!("{key}/raw"), GetOptions::new())
        .await
        .unwrap();
    assert_eq!(got.kvs[0].value, b"renewed");
}

/// A call pinned to a follower and refused for an expired token is retried there with a new
/// token, at once and with one login per expiry. The login is made on the member that refused
/// the old token: etcd's simple tokens live in each member's memory, added as the member
/// applies the Authenticate entry, so a token issued by another member can still be unknown
/// to a member whose apply lags (CI once saw "invalid auth token" on the call right after a
/// renewal, on a loaded box). This test does not reproduce that lag (it passed before the
/// login moved, also under three busy loops and a disk writer): it holds the pinned path and
/// the login count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_token_works_at_once_on_the_member_that_refused_the_old_one() {
    support::init_tracing();
    let cluster = short_token_cluster().await;
    let leader = cluster.leader(READY).await.unwrap();
    let client = support::client_letting_tokens_expire(&cluster).await;
    let key = support::unique("refused-by");
    client
        .kv()
        .put(key.as_str(), "v", PutOptions::new())
        .await
        .unwrap();
    let logins_before = authenticate_calls(&cluster).await;
    let rounds: u64 = 4;
    for round in 0..rounds {
        // Each follower in turn: the login (before the fix, wherever the balancer picked) and
        // the retry (always the pinned member) meet on different members often.
        let follower = (leader + 1 + round as usize % 2) % cluster.len();
        tokio::time::sleep(TOKEN_EXPIRY_WAIT).await;
        let got = client
            .kv()
            .with_member(&cluster.endpoint(follower))
            .unwrap()
            .get(key.as_str(), GetOptions::new().with_serializable())
            .await;
        assert!(
            got.is_ok(),
            "round {round}: a read pinned to follower {follower} after its token expired: {got:?}"
        );
    }
    let logins = authenticate_calls(&cluster).await - logins_before;
    println!("{rounds} rounds, {logins} logins");
    // The token did expire (else nothing was shown); a probe may have kept it alive in a wait.
    assert!(
        logins >= 2 && logins <= rounds,
        "one login per expired token, at most: {logins} in {rounds} rounds"
    );
}

/// A listener that counts the connections it accepts and never answers, to prove that a
/// failure happened before anything was dialled.
async fn counting_listener() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("https://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });
    (endpoint, accepted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_verification_and_file_errors_are_typed_and_quick() {
    support::init_tracing();
    let cluster = Cluster::builder()
        .tls(true)
        .start()
        .await
        .expect("start a TLS member");
    cluster.leader(READY).await.unwrap();
    let files = cluster.tls().unwrap().clone();
    let connect_timeout = Duration::from_secs(2);
    let base = || Options::new().with_connect_timeout(connect_timeout);
    let good = TlsOptions::new().with_ca_file(&files.ca);

    // The right CA works, so every failure below is due to the one thing changed.
    let client = Client::connect(cluster.endpoints(), base().with_tls(good.clone()))
        .await
        .unwrap();
    client
        .kv()
        .put("tls/ok", "1", PutOptions::new())
        .await
        .unwrap();

    let scratch = tempfile::tempdir().unwrap();
    let unrelated = generate_unrelated_ca(scratch.path()).unwrap();
    let cases = [
        (
            "an unrelated CA",
            TlsOptions::new().with_ca_file(&unrelated),
            "UnknownIssuer",
        ),
        (
            "a wrong server name",
            good.clone().with_server_name("wrong.example"),
            "not valid for name",
        ),
    ];
    for (what, tls, problem) in cases {
        let began = Instant::now();
        let result = Client::connect(cluster.endpoints(), base().with_tls(tls)).await;
        let elapsed = began.elapsed();
        let Err(err @ Error::Connect { .. }) = &result else {
            panic!("{what}: expected Error::Connect, got {result:?}");
        };
        let chain = error_chain(err);
        // rustls' own words, e.g. "invalid peer certificate: UnknownIssuer".
        assert!(
            chain.contains("invalid peer certificate") && chain.contains(problem),
            "{what}: {chain}"
        );
        // A refused handshake is an answer: no waiting for the connect timeout, let alone a hang.
        assert!(
            elapsed < connect_timeout + Duration::from_secs(1),
            "{what}: took {elapsed:?}"
        );
    }

    // Unusable TLS files are reported with their path before anything is dialled: the
    // endpoint here would accept (and hang), and it sees no connection.
    let missing = scratch.path().join("no-such-ca.pem");
    let not_pem = scratch.path().join("not-a-ca.pem");
    std::fs::write(&not_pem, "this is not a certificate\n").unwrap();
    for (path, kind) in [
        (&missing, std::io::ErrorKind::NotFound),
        (&not_pem, std::io::ErrorKind::InvalidData),
    ] {
        let (endpoint, accepted) = counting_listener().await;
        let began = Instant::now();
        let tls = TlsOptions::new().with_ca_file(path);
        let result = Client::connect([endpoint], base().with_tls(tls)).await;
        match &result {
            Err(Error::TlsFile { path: p, source }) => {
                assert_eq!(p, path);
                assert_eq!(source.kind(), kind, "{source}");
            }
            other => panic!("{}: expected Error::TlsFile, got {other:?}", path.display()),
        }
        assert!(began.elapsed() < Duration::from_millis(500));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 0, "nothing was dialled");
    }
    // The client certificate's files are checked the same way.
    let missing_key = Path::new("/nonexistent/key.pem");
    let tls = good.with_client_cert(&files.client_cert, missing_key);
    let result = Client::connect(cluster.endpoints(), base().with_tls(tls)).await;
    assert!(
        matches!(&result, Err(Error::TlsFile { path, .. }) if path == missing_key),
        "{result:?}"
    );
}
