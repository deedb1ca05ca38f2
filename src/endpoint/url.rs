//! Endpoint URLs and channels: parse what the user gave, build the lazily connected HTTP/2 channel.

use std::fmt;
use std::time::Duration;

use http::Uri;
use tonic::transport::Channel;
#[cfg(feature = "tls")]
use tonic::transport::ClientTlsConfig;

use crate::error::{Error, Result};

/// etcd's client port; used when an endpoint names only a host.
const DEFAULT_PORT: u16 = 2379;

/// The TLS settings a channel is built with: tonic's rustls configuration, or nothing at all
/// when the crate is built without its `tls` feature (then no value of it can exist).
#[cfg(feature = "tls")]
pub(crate) type TlsConfig = ClientTlsConfig;
/// The TLS settings a channel is built with: none, the `tls` feature is off.
#[cfg(not(feature = "tls"))]
pub(crate) type TlsConfig = std::convert::Infallible;

/// The scheme of etcd's unix socket URLs (`--listen-client-urls unix://...`).
const UNIX: &str = "unix://";

/// Parse and normalise one endpoint given by the user.
///
/// Accepts `http://host:port`, `https://host:port` and `host:port` (scheme from whether TLS is
/// configured). The port defaults to 2379. Paths, queries and other schemes are refused: etcd
/// serves gRPC at the root. `unix://path` names a unix socket the way etcd does (see
/// [`unix_path`]); `https://` needs the `tls` feature.
pub(crate) fn normalize(endpoint: &str, tls: bool) -> Result<String> {
    normalize_with(endpoint, tls, cfg!(feature = "tls"))
}

/// [`normalize`], with whether TLS support is compiled in as a parameter, so that both builds'
/// rules are unit-tested in either.
fn normalize_with(endpoint: &str, tls: bool, tls_compiled: bool) -> Result<String> {
    let invalid = |reason| Error::InvalidEndpoint {
        endpoint: redact(endpoint),
        reason,
    };
    let trimmed = endpoint.trim();
    if trimmed.is_empty() {
        return Err(invalid("empty endpoint"));
    }
    if let Some(path) = trimmed.strip_prefix(UNIX) {
        if path.is_empty() {
            return Err(invalid("unix:// endpoint without a socket path"));
        }
        if tls {
            // Like an http:// endpoint next to TLS options: never plain text when the user
            // asked for TLS.
            return Err(invalid(
                "unix:// endpoints are plain text while TLS options are set",
            ));
        }
        if path.contains(['?', '#']) {
            return Err(invalid("etcd endpoints take no query"));
        }
        return Ok(trimmed.to_owned());
    }
    if trimmed.starts_with("unixs://") {
        return Err(invalid(
            "unixs:// (TLS over a unix socket) is not supported; use unix:// or https://",
        ));
    }
    // `user:password@` would be dropped silently (etcd takes credentials from Authenticate,
    // not from the URL): refuse it, so that the user learns to pass them with `with_user`.
    if trimmed.contains('@') {
        return Err(invalid(
            "credentials in an endpoint URL are not used; give them with Options::with_user",
        ));
    }
    let with_scheme = if trimmed.contains("://") {
        trimmed.to_owned()
    } else if tls {
        format!("https://{trimmed}")
    } else {
        format!("http://{trimmed}")
    };
    let uri: Uri = with_scheme
        .parse()
        .map_err(|_| invalid("not a valid URL"))?;
    let scheme = match uri.scheme_str() {
        Some("http") if tls => {
            return Err(invalid(
                "http:// endpoint while TLS options are set; use https://",
            ));
        }
        Some("https") if !tls_compiled => return Err(Error::TlsNotCompiled),
        Some(s @ ("http" | "https")) => s,
        _ => return Err(invalid("scheme must be http, https or unix")),
    };
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| invalid("missing host"))?;
    if uri
        .path_and_query()
        .is_some_and(|p| p.as_str() != "/" && !p.as_str().is_empty())
    {
        return Err(invalid("etcd endpoints take no path or query"));
    }
    // Read the port from the authority text: `Uri::port` silently drops one out of range.
    let authority = uri.authority().map(|a| a.as_str()).unwrap_or_default();
    let port = match authority.rsplit_once(':') {
        Some((_, p)) if !p.ends_with(']') => p
            .parse::<u16>()
            .map_err(|_| invalid("port is not a number from 1 to 65535"))?,
        _ => DEFAULT_PORT,
    };
    if port == 0 {
        return Err(invalid("port 0 is not a valid endpoint port"));
    }
    Ok(format!("{scheme}://{host}:{port}"))
}

/// The socket path of a normalised `unix://` URL, as etcd reads it: everything after the scheme
/// (etcd listens on the URL's host and path joined). `unix:///run/etcd.sock` is the absolute
/// path `/run/etcd.sock`; `unix://localhost:2379`, the form etcd's own tests use, is the file
/// `localhost:2379` in the current directory.
pub(crate) fn unix_path(url: &str) -> Option<&str> {
    url.strip_prefix(UNIX)
}

/// An endpoint as it may be shown in an error or a log: without user info (`user:password@`)
/// and without a query or fragment (which could carry a token).
///
/// Errs on the side of hiding: everything between the scheme and the *last* `@` goes (a
/// password may itself hold `/`, `?` or `@`), then everything from the first `?` or `#`.
pub(crate) fn redact(endpoint: &str) -> String {
    let (scheme, rest) = match endpoint.find("://") {
        Some(i) => endpoint.split_at(i + 3),
        None => ("", endpoint),
    };
    let rest = match rest.rfind('@') {
        Some(at) => format!("<redacted>@{}", &rest[at + 1..]),
        None => rest.to_owned(),
    };
    let rest = match rest.find(['?', '#']) {
        Some(q) => format!("{}?<redacted>", &rest[..q]),
        None => rest,
    };
    format!("{scheme}{rest}")
}

/// A member's advertised client URL, normalised, or `None` if this client must not dial it.
///
/// `secure` says the client talks TLS (TLS options set, or an `https://` endpoint given): then a
/// member URL that is not `https://` is refused, never dialled in plain text (the auth token and
/// password would cross the network in the clear). Never a downgrade.
///
/// A `unix://` URL names a file on the member's own host: it is dialled only by a client that
/// was itself given a `unix://` endpoint (`local`: it runs next to the cluster), and never by
/// a TLS client.
pub(crate) fn member_url(url: &str, secure: bool, local: bool) -> Option<String> {
    normalize(url, secure)
        .ok()
        .filter(|u| !secure || u.starts_with("https://"))
        .filter(|u| local || unix_path(u).is_none())
}

/// Whether a client with these endpoints runs next to the cluster (was given a `unix://`
/// endpoint): only then does member sync dial the unix sockets members advertise.
pub(crate) fn is_local<'a>(endpoints: impl IntoIterator<Item = &'a str>) -> bool {
    endpoints.into_iter().any(|u| unix_path(u).is_some())
}

/// Whether a client with these endpoints (and TLS options or not) talks TLS: then it never
/// dials a plain `http://` URL that member sync finds.
pub(crate) fn is_secure<'a>(tls: bool, endpoints: impl IntoIterator<Item = &'a str>) -> bool {
    tls || endpoints.into_iter().any(|u| u.starts_with("https://"))
}

/// How members are dialled: the connection settings every endpoint's channel shares.
#[derive(Clone)]
pub(crate) struct Dial {
    /// Limit for establishing one connection.
    pub(crate) connect_timeout: Duration,
    /// HTTP/2 keepalive ping interval while calls are open (`None`: no pings).
    pub(crate) keepalive_interval: Option<Duration>,
    /// How long a ping may go unanswered before the connection is closed.
    pub(crate) keepalive_timeout: Duration,
    /// TLS for `https://` members (read from the user's files once, at connect).
    pub(crate) tls: Option<TlsConfig>,
    /// The user's tower layers around every typed call's attempt.
    pub(crate) layer: Option<super::AttemptLayer>,
}

impl fmt::Debug for Dial {
    // Written by hand: `ClientTlsConfig`'s own Debug prints the client's private key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dial")
            .field("connect_timeout", &self.connect_timeout)
            .field("keepalive_interval", &self.keepalive_interval)
            .field("keepalive_timeout", &self.keepalive_timeout)
            .field("tls", &self.tls.as_ref().map(|_| "<configured>"))
            .field("layer", &self.layer)
            .finish()
    }
}

impl Dial {
    /// Build the lazily connected channel for one normalised URL.
    pub(crate) fn channel(&self, url: &str) -> Result<Channel> {
        let invalid = |_| Error::InvalidEndpoint {
            endpoint: redact(url),
            reason: "rejected by the transport",
        };
        if let Some(path) = unix_path(url) {
            // HTTP/2 still needs a URI (its :authority); etcd ignores it. The connector below
            // dials the socket whatever the URI says.
            let ep = self.settings(tonic::transport::Endpoint::from_static("http://localhost"));
            return Ok(ep.connect_with_connector_lazy(super::unix::Connector::new(path)));
        }
        let mut ep = self.settings(
            tonic::transport::Endpoint::from_shared(url.to_owned())
                .map_err(invalid)?
                .tcp_nodelay(true),
        );
        if url.starts_with("https://") {
            ep = self.with_tls(ep)?;
        }
        Ok(ep.connect_lazy())
    }

    /// The settings every channel shares, whatever it runs over.
    fn settings(&self, ep: tonic::transport::Endpoint) -> tonic::transport::Endpoint {
        let mut ep = ep
            .connect_timeout(self.connect_timeout)
            // Pings only while calls are open: etcd answers idle-connection pings faster than
            // every 2 h with GOAWAY too_many_pings (see DEFAULT_KEEPALIVE_INTERVAL).
            .keep_alive_while_idle(false)
            // hyper counts, over a connection's whole life, the resets it sends for frames of
            // streams it reset and then forgot (a dropped or hedged call's late answer), and
            // at 1,024 closes the connection, failing every call on it as ambiguous. At 256
            // callers through a slow link that took seconds. The limit guards a server against
            // abusive clients; our peers are the cluster's members.
            .http2_max_local_error_reset_streams(None);
        if let Some(interval) = self.keepalive_interval {
            ep = ep
                .http2_keep_alive_interval(interval)
                .keep_alive_timeout(self.keepalive_timeout);
        }
        ep
    }

    /// An `https://` member's endpoint with the client's TLS settings.
    #[cfg(feature = "tls")]
    fn with_tls(&self, ep: tonic::transport::Endpoint) -> Result<tonic::transport::Endpoint> {
        let config = match &self.tls {
            Some(config) => config.clone(),
            // An https:// endpoint without TLS options: verify against the system roots.
            None => ClientTlsConfig::new().with_native_roots(),
        };
        ep.tls_config(config).map_err(Error::TlsConfig)
    }

    /// Without the `tls` feature no `https://` URL gets this far (normalize refuses it); the
    /// error is here for the day one does.
    #[cfg(not(feature = "tls"))]
    fn with_tls(&self, _ep: tonic::transport::Endpoint) -> Result<tonic::transport::Endpoint> {
        Err(Error::TlsNotCompiled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_common_forms() {
        assert_eq!(
            normalize("127.0.0.1:2379", false).unwrap(),
            "http://127.0.0.1:2379"
        );
        assert_eq!(
            normalize("http://localhost", false).unwrap(),
            "http://localhost:2379"
        );
        assert_eq!(
            normalize("https://10.0.0.1:4001/", true).unwrap(),
            "https://10.0.0.1:4001"
        );
        assert_eq!(
            normalize("etcd-0:2379", true).unwrap(),
            "https://etcd-0:2379"
        );
    }

    #[test]
    fn rejects_bad_endpoints() {
        for bad in [
            "",
            "  ",
            "ftp://x:1",
            "http://",
            "http://h:1/v3/kv",
            "http://h:0",
            "not a url",
            "http://h:99999",
        ] {
            assert!(
                matches!(normalize(bad, false), Err(Error::InvalidEndpoint { .. })),
                "{bad:?} should be rejected"
            );
        }
        assert!(normalize("http://h:1", true).is_err());
    }

    #[test]
    fn errors_never_show_credentials_or_queries() {
        for (given, secret) in [
            ("http://alice:s3cret@127.0.0.1:0/x", "s3cret"),
            ("alice:s3cret@127.0.0.1:2379", "s3cret"),
            ("https://alice:s3/c@r?t@h:1", "s3/c@r?t"),
            ("http://alice:s3cret@", "s3cret"),
            ("ftp://bob:hunter2@x", "hunter2"),
            ("http://h:1/?token=abc.def", "abc.def"),
        ] {
            let err = normalize(given, false).unwrap_err();
            assert!(matches!(err, Error::InvalidEndpoint { .. }), "{given}");
            for shown in [err.to_string(), format!("{err:?}")] {
                assert!(!shown.contains(secret), "{given}: {shown}");
            }
        }
        assert_eq!(
            redact("http://a:b@h:1/p?q#f"),
            "http://<redacted>@h:1/p?<redacted>"
        );
        assert_eq!(redact("http://h:1"), "http://h:1");
    }

    #[test]
    fn a_tls_client_never_dials_a_plain_member_url() {
        // Issue 8, defect 6: https endpoints without TLS options (system roots) let member
        // sync add members' http:// URLs.
        let secure = is_secure(false, ["https://10.0.0.1:2379"]);
        assert!(secure);
        assert_eq!(member_url("http://10.0.0.2:2379", secure, false), None);
        assert_eq!(
            member_url("10.0.0.2:2379", secure, false).as_deref(),
            Some("https://10.0.0.2:2379")
        );
        assert_eq!(
            member_url("https://10.0.0.2:2379", secure, false).as_deref(),
            Some("https://10.0.0.2:2379")
        );
        assert_eq!(member_url("unix:///tmp/etcd.sock", secure, true), None);
        // With TLS options too.
        assert!(is_secure(true, ["10.0.0.1:2379"]));
        assert_eq!(member_url("http://10.0.0.2:2379", true, false), None);
        // A plain-text client keeps what the member advertises.
        let plain = is_secure(false, ["http://10.0.0.1:2379"]);
        assert!(!plain);
        assert_eq!(
            member_url("http://10.0.0.2:2379", plain, false).as_deref(),
            Some("http://10.0.0.2:2379")
        );
        assert_eq!(
            member_url("https://10.0.0.2:2379", plain, false).as_deref(),
            Some("https://10.0.0.2:2379")
        );
    }

    #[test]
    fn unix_endpoints_name_a_socket_as_etcd_does() {
        for (given, path) in [
            ("unix:///run/etcd/client.sock", "/run/etcd/client.sock"),
            ("unix://localhost:2379", "localhost:2379"),
            (" unix://rel/dir.sock ", "rel/dir.sock"),
        ] {
            let url = normalize(given, false).unwrap();
            assert_eq!(unix_path(&url), Some(path), "{given}");
        }
        for bad in ["unix://", "unixs:///run/etcd.sock", "unix:///x.sock?t=1"] {
            assert!(
                matches!(normalize(bad, false), Err(Error::InvalidEndpoint { .. })),
                "{bad:?} should be rejected"
            );
        }
        // Plain text is never chosen next to TLS options.
        assert!(normalize("unix:///x.sock", true).is_err());
        assert_eq!(unix_path("http://127.0.0.1:2379"), None);
    }

    #[test]
    fn member_unix_sockets_only_for_a_client_next_to_the_cluster() {
        let local = is_local(["unix:///run/m0.sock", "http://127.0.0.1:2379"]);
        assert!(local);
        assert!(!is_local(["http://127.0.0.1:2379"]));
        assert_eq!(
            member_url("unix:///run/m1.sock", false, local).as_deref(),
            Some("unix:///run/m1.sock")
        );
        // A TCP client cannot know the path is on its host.
        assert_eq!(member_url("unix:///run/m1.sock", false, false), None);
        assert_eq!(
            member_url("http://127.0.0.1:2380", false, local).as_deref(),
            Some("http://127.0.0.1:2380")
        );
    }

    #[test]
    fn https_without_tls_compiled_in_is_a_typed_error() {
        assert!(matches!(
            normalize_with("https://10.0.0.1:2379", false, false),
            Err(Error::TlsNotCompiled)
        ));
        // host:port with TLS options set means https.
        assert!(matches!(
            normalize_with("10.0.0.1:2379", true, false),
            Err(Error::TlsNotCompiled)
        ));
        assert_eq!(
            normalize_with("http://10.0.0.1:2379", false, false).unwrap(),
            "http://10.0.0.1:2379"
        );
        assert_eq!(
            normalize_with("https://10.0.0.1:2379", false, true).unwrap(),
            "https://10.0.0.1:2379"
        );
    }
}
