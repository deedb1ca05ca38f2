//! No `Debug` output of any public type shows a secret (issue 8, defect 5): a client connected
//! over mutual TLS with a password is formatted with `{:?}` and `{:#?}` through every public
//! type that holds it (sub-clients, sessions, keeper and lease handles, concurrency recipes, the
//! balanced channel) and every other public value the test can reach (options, endpoint
//! snapshots, errors), and none may show the client's private key, the password, or an auth
//! token.
//!
//! The key is looked for in two shapes: its PEM text (any 40-character run of its base64 body),
//! and the same text as derived `Debug` prints a `Vec<u8>`, a list of decimal bytes (which is how
//! tonic's `Identity` would show it).

mod support;

use std::time::Duration;

use etcd_ha::concurrency::stm::Stm;
use etcd_ha::concurrency::{Election, Fence, Leadership, Mutex};
use etcd_ha::testkit::Cluster;
use etcd_ha::{Client, Error, GetOptions, Session, WatchOptions};

/// Root's password: must never show.
const PASSWORD: &str = "pw-debug-redaction-7c1e0b";

/// Length of the runs of the key's base64 body looked for: long enough that no other output
/// matches by chance, short enough to catch any part of the key.
const CHUNK: usize = 40;

/// What must not show, and the checks.
struct Secrets {
    /// The base64 body of the client key's PEM, without headers and line breaks.
    key_body: String,
}

impl Secrets {
    fn load(cluster: &Cluster) -> Secrets {
        let tls = cluster.tls().expect("a TLS cluster");
        let pem = std::fs::read_to_string(&tls.client_key).expect("read the client key");
        let key_body: String = pem
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect::<Vec<_>>()
            .concat();
        assert!(
            key_body.len() >= 2 * CHUNK,
            "the client key is too short to search for: {} base64 characters",
            key_body.len()
        );
        Secrets { key_body }
    }

    /// Which secret `shown` holds, if any.
    fn leak(&self, shown: &str) -> Option<&'static str> {
        // Also read the output as derived `Debug` of bytes prints them: every decimal number
        // up to 255, in order, taken as one byte.
        let as_bytes = decimal_bytes(shown);
        for text in [shown, as_bytes.as_str()] {
            let key = (0..=self.key_body.len() - CHUNK)
                .any(|start| text.contains(&self.key_body[start..start + CHUNK]));
            if key {
                return Some("the client's private key");
            }
            if text.contains(PASSWORD) {
                return Some("the password");
            }
            if has_simple_token(text) {
                return Some("an auth token");
            }
        }
        None
    }

    /// Fail if `shown` (the output of formatting `what`) holds a secret.
    fn assert_clean(&self, what: &str, shown: &str) {
        if let Some(secret) = self.leak(shown) {
            panic!("{what}: {secret} shows in its Debug output");
        }
    }

    /// Format `value` both ways and check both.
    fn check(&self, what: &str, value: &dyn std::fmt::Debug) {
        self.assert_clean(what, &format!("{value:?}"));
        self.assert_clean(&format!("{what} (pretty)"), &format!("{value:#?}"));
    }
}

/// Every decimal number from 0 to 255 in `text`, in order, as one string of bytes (lossy).
fn decimal_bytes(text: &str) -> String {
    let mut bytes = Vec::new();
    let mut number: Option<u32> = None;
    for c in text.chars().chain(std::iter::once(' ')) {
        match c.to_digit(10) {
            Some(d) => number = Some(number.unwrap_or(0).saturating_mul(10).saturating_add(d)),
            None => {
                if let Some(n) = number.take()
                    && n <= 255
                {
                    bytes.push(n as u8);
                }
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Whether `text` contains something shaped like an etcd simple token: 16 ASCII letters, a dot,
/// and a decimal index (`tLjvLnuFJAXXUNJu.17`). The client's token cannot be read from outside.
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
async fn no_public_type_shows_the_key_the_password_or_the_token() {
    support::init_tracing();
    let builder = Cluster::builder()
        .members(1)
        .tls(true)
        .client_cert_auth(true)
        .auth("root", PASSWORD)
        .arg("--bcrypt-cost=4");
    let cluster = builder
        .clone()
        .start()
        .await
        .expect("start a TLS + client-cert + auth cluster");
    cluster
        .leader(support::READY)
        .await
        .expect("the cluster elects a leader");
    let secrets = Secrets::load(&cluster);

    // The checks must be able to see what they look for.
    let key_pem = std::fs::read(&cluster.tls().unwrap().client_key).unwrap();
    let tripwire = format!("{:?}", key_pem);
    assert_eq!(
        secrets.leak(&tripwire),
        Some("the client's private key"),
        "the key detector does not see a key printed as bytes"
    );
    assert_eq!(secrets.leak(PASSWORD), Some("the password"));

    // The testkit's own types hold the password and the client key too.
    secrets.check("ClusterBuilder", &builder);
    secrets.check("testkit Cluster", &cluster);

    let options = support::options_for(&cluster);
    secrets.check("Options", &options);
    let tls = cluster.tls().unwrap();
    secrets.check(
        "TlsOptions",
        &etcd_ha::TlsOptions::new()
            .with_ca_file(&tls.ca)
            .with_client_cert(&tls.client_cert, &tls.client_key),
    );

    let client = Client::connect(cluster.endpoints(), options.clone())
        .await
        .expect("connect with CA, client certificate and root's password");
    // A call makes the client log in: it holds a token from here on.
    client
        .kv()
        .get("debug", GetOptions::new())
        .await
        .expect("a read");
    // The token detector sees etcd's tokens.
    let auth = client.auth().authenticate("root", PASSWORD).await.unwrap();
    assert!(has_simple_token(&auth.token), "unexpected token shape");
    secrets.check("AuthenticateResponse", &auth);

    secrets.check("Client", &client);
    secrets.check("Kv", &client.kv());
    secrets.check("Lease", &client.lease());
    secrets.check("Watch", &client.watch());
    secrets.check("Auth", &client.auth());
    secrets.check("Cluster", &client.cluster());
    secrets.check("Maintenance", &client.maintenance());
    secrets.check(
        "Maintenance (pinned)",
        &client.maintenance().on(&cluster.endpoint(0)).unwrap(),
    );
    secrets.check("Election", &client.election());
    secrets.check("Lock", &client.lock());
    secrets.check("Keeper", &client.keeper());
    secrets.check("BalancedChannel", &client.balanced_channel());
    secrets.check("EndpointInfo", &client.endpoints());

    let kept = client
        .keeper()
        .grant(Duration::from_secs(30))
        .await
        .expect("a kept lease");
    secrets.check("KeptLease", &kept);
    let session = Session::new(&client, Duration::from_secs(30))
        .await
        .expect("a session");
    secrets.check("Session", &session);
    let granted = client.lease().grant(30, None).await.unwrap();
    let (sender, answers) = client.lease().keep_alive(granted.id).await.unwrap();
    secrets.check("KeepAliveSender", &sender);
    secrets.check("ResponseStream (keep-alive)", &answers);

    let stream = client
        .watch()
        .watch("debug/", WatchOptions::new().with_prefix())
        .await
        .expect("a managed watch");
    secrets.check("WatchStream", &stream);
    let (watcher, raw) = client
        .watch()
        .raw("debug/raw", WatchOptions::new())
        .await
        .expect("a raw watch");
    secrets.check("Watcher", &watcher);
    secrets.check("ResponseStream (watch)", &raw);

    // Concurrency recipes, which hold the client.
    let election = Election::new(&client, "debug-election");
    secrets.check("concurrency::Election", &election);
    let leader = election.campaign(&session, "me").await.expect("campaign");
    secrets.check("concurrency::Leader", &leader);
    secrets.check("concurrency::Observe", &election.observe());
    let mutex = Mutex::new("debug-mutex");
    secrets.check("concurrency::Mutex", &mutex);
    let guard = mutex.lock(&session).await.expect("lock");
    secrets.check("concurrency::MutexGuard", &guard);
    secrets.check("Fence", &Fence::new("k", 1));
    let leadership =
        Leadership::new(&client, "debug-leadership", "me").with_ttl(Duration::from_secs(10));
    secrets.check("concurrency::Leadership", &leadership);
    let held = leadership.acquire().await.expect("acquire the leadership");
    secrets.check("concurrency::LeadershipHeld", &held);
    let current = leadership.current().await.unwrap();
    secrets.check("concurrency::CurrentLeader", &current);

    // A namespaced view, and STM (the runner and the attempt its closure sees).
    let tenant = client.with_namespace("debug-tenant/").unwrap();
    secrets.check("Client (namespaced)", &tenant);
    let stm = Stm::new(&tenant);
    secrets.check("stm::Stm", &stm);
    let shown = stm
        .run(|tx| async move {
            tx.get("k").await?;
            tx.put("k", "v");
            Ok::<_, Error>(format!("{tx:?}\n{tx:#?}"))
        })
        .await
        .expect("an STM transaction");
    secrets.assert_clean("stm::StmTxn", &shown);

    // Errors a caller may log.
    let wrong = Client::connect(
        cluster.endpoints(),
        options.clone().with_user("root", "not-the-password"),
    )
    .await;
    let failed = match wrong {
        Ok(c) => c.kv().get("debug", GetOptions::new()).await.err(),
        Err(e) => Some(e),
    };
    let failed: Error = failed.expect("a wrong password fails");
    secrets.check("Error (wrong password)", &failed);
    secrets.check("Error (display)", &failed.to_string());
    let invalid = client.maintenance().on("ftp://nowhere").unwrap_err();
    secrets.check("Error (invalid endpoint)", &invalid);

    held.resign().await.unwrap();
    guard.unlock().await.unwrap();
    leader.resign().await.unwrap();
    session.close().await.unwrap();
}
