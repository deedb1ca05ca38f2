//! etcd-ha without its `tls` feature: `https://` endpoints and TLS options are refused with
//! `Error::TlsNotCompiled` at connect (no dial, no wait), plain endpoints still parse.
//! Run alone: `cargo test -p etcd-ha-no-tls`.

use std::time::Duration;

use etcd_ha::{Client, Error, Options, TlsOptions};

#[tokio::test]
async fn https_and_tls_options_are_refused_without_the_tls_feature() {
    let started = std::time::Instant::now();
    for endpoints in [
        vec!["https://127.0.0.1:2379"],
        vec!["http://127.0.0.1:1", "https://h:1"],
    ] {
        let err = Client::connect(&endpoints, Options::new())
            .await
            .expect_err("no TLS in this build");
        assert!(
            matches!(err, Error::TlsNotCompiled),
            "{endpoints:?}: {err:?} (is etcd-ha built with `tls`? run this package alone)"
        );
    }
    let err = Client::connect(
        ["127.0.0.1:2379"],
        Options::new().with_tls(TlsOptions::new().with_ca_file("ca.pem")),
    )
    .await
    .expect_err("no TLS in this build");
    assert!(matches!(err, Error::TlsNotCompiled), "{err:?}");
    assert!(err.to_string().contains("\"tls\" feature"), "{err}");
    // Refused before any connection attempt.
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn plain_endpoints_still_parse_and_dial() {
    // Nothing listens on port 1: a connect error after the (short) connect timeout, not a
    // refusal of the endpoint.
    let err = Client::connect(
        ["http://127.0.0.1:1"],
        Options::new().with_connect_timeout(Duration::from_millis(300)),
    )
    .await
    .expect_err("nothing listens");
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
}
