//! How the benchmark reaches a user's own cluster beyond its URLs: TLS files (`--cacert`,
//! `--cert`, `--key`) and an etcd user (`--user`, the password from `--password` or
//! [`PASSWORD_ENV`]), given alike to every client of the run (etcd-ha, the etcd-client ones,
//! the Go driver) and to the benchmark's own calls (the re-election poller, the read-back, the
//! lease check, the clean-up).
//!
//! The rules, checked once by [`Access::new`] before anything connects:
//!
//! - TLS files, or any `https://` endpoint, mean TLS for every endpoint, with the server's
//!   certificate always verified (against `--cacert`, else the system's roots). An `http://`
//!   endpoint beside them is refused: nothing here ever dials an https cluster in plain text.
//! - A password only goes to `https://` endpoints: over http anyone on the path reads it.
//! - The password shows in no `Debug`, log line, table, JSON or command line: the Go driver
//!   gets it in its environment, never in its arguments (`/proc/<pid>/cmdline` is readable by
//!   every user of the machine).

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_ha::proto::etcdserverpb::AuthenticateRequest;
use etcd_ha::proto::etcdserverpb::auth_client::AuthClient;
use tonic::metadata::AsciiMetadataValue;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// The environment variable the password may come in, so that it stays out of the shell's
/// history and the process list; the Go driver is handed it the same way.
pub const PASSWORD_ENV: &str = "ETCD_HA_BENCH_PASSWORD";

/// The metadata key etcd reads its auth token from.
const TOKEN_KEY: &str = "token";

/// The TLS files of a user's cluster, as given on the command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM file of the CA that signed the members' certificates; `None`: the system's roots.
    pub ca: Option<PathBuf>,
    /// PEM client certificate, for mutual TLS.
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert` (only its path is ever shown).
    pub key: Option<PathBuf>,
}

/// A password that shows as `<redacted>` in `Debug`.
#[derive(Clone)]
struct Password(String);

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The TLS settings and the user every client of a run connects with. Cheap to clone (one
/// `Arc`); clones share the token the benchmark's own calls use.
#[derive(Clone, Default)]
pub struct Access {
    inner: Arc<Inner>,
}

/// What an [`Access`] holds.
#[derive(Default)]
struct Inner {
    /// The TLS files as given (for etcd-ha, which reads them itself, and the Go driver).
    files: Option<TlsFiles>,
    /// The same, read into tonic's configuration once (for etcd-client and the bench's own
    /// channels); `None` for plain http.
    tls: Option<ClientTlsConfig>,
    /// The etcd user and its password; `None` without auth.
    user: Option<(String, Password)>,
    /// The token of the benchmark's own calls, fetched once and shared by every poll: each
    /// Authenticate costs the cluster a bcrypt, which a poll every 50 ms must not pay.
    token: Mutex<Option<AsciiMetadataValue>>,
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Access")
            .field("tls", &self.inner.files)
            .field("user", &self.inner.user)
            .finish_non_exhaustive()
    }
}

impl Access {
    /// Plain http, no user: the local clusters.
    pub fn none() -> Access {
        Access::default()
    }

    /// Checks `tls` and `user` against `endpoints` by the rules of the module docs and reads
    /// the TLS files, so that a wrong path fails here, before any cluster is touched.
    pub fn new(
        endpoints: &[String],
        tls: TlsFiles,
        user: Option<(String, String)>,
    ) -> Result<Access, String> {
        let secure = endpoints
            .iter()
            .filter(|u| u.starts_with("https://"))
            .count();
        let given = tls != TlsFiles::default();
        if (given || secure > 0) && secure < endpoints.len() {
            return Err(format!(
                "TLS is on ({}), so every endpoint must be https://: {}",
                if given {
                    "--cacert/--cert/--key"
                } else {
                    "an https:// endpoint"
                },
                endpoints.join(",")
            ));
        }
        if tls.cert.is_some() != tls.key.is_some() {
            return Err("--cert and --key go together".into());
        }
        let (files, config) = if given || secure > 0 {
            (Some(tls.clone()), Some(tonic_tls(&tls)?))
        } else {
            (None, None)
        };
        if let Some((name, password)) = &user {
            if config.is_none() {
                return Err(format!(
                    "--user {name}: the password would cross http:// in plain text; use https \
                     endpoints"
                ));
            }
            if password.is_empty() {
                return Err(format!(
                    "--user {name} needs a password: --password, or ${PASSWORD_ENV}"
                ));
            }
        }
        let inner = Inner {
            files,
            tls: config,
            user: user.map(|(name, password)| (name, Password(password))),
            token: Mutex::default(),
        };
        Ok(Access {
            inner: Arc::new(inner),
        })
    }

    /// How the clients connect, in words, for the report: never the password.
    pub fn describe(&self) -> String {
        let tls = match &self.inner.files {
            None => "plain http".to_string(),
            Some(files) => format!(
                "TLS (CA: {}{})",
                files
                    .ca
                    .as_deref()
                    .map_or("the system's roots".into(), |ca| ca.display().to_string()),
                if files.cert.is_some() {
                    ", client certificate"
                } else {
                    ""
                }
            ),
        };
        match self.user_name() {
            Some(user) => format!("{tls}, user {user}"),
            None => tls,
        }
    }

    /// True if the clients use TLS.
    pub fn is_tls(&self) -> bool {
        self.inner.tls.is_some()
    }

    /// The user's name, if any (never the password).
    pub fn user_name(&self) -> Option<&str> {
        self.inner.user.as_ref().map(|(name, _)| name.as_str())
    }

    /// etcd-ha's options: its defaults, with these TLS files and this user.
    pub fn ha_options(&self) -> etcd_ha::Options {
        let mut options = etcd_ha::Options::default();
        if let Some(files) = &self.inner.files {
            let mut tls = etcd_ha::TlsOptions::new();
            if let Some(ca) = &files.ca {
                tls = tls.with_ca_file(ca);
            }
            if let (Some(cert), Some(key)) = (&files.cert, &files.key) {
                tls = tls.with_client_cert(cert, key);
            }
            options = options.with_tls(tls);
        }
        if let Some((name, password)) = &self.inner.user {
            options = options.with_user(name, &password.0);
        }
        options
    }

    /// etcd-client's options: `base` (`None`: the crate's defaults), with this TLS and user.
    pub fn ec_options(
        &self,
        base: Option<etcd_client::ConnectOptions>,
    ) -> Option<etcd_client::ConnectOptions> {
        if self.inner.tls.is_none() && self.inner.user.is_none() {
            return base;
        }
        let mut options = base.unwrap_or_default();
        if let Some(tls) = &self.inner.tls {
            options = options.with_tls(tls.clone());
        }
        if let Some((name, password)) = &self.inner.user {
            options = options.with_user(name, &password.0);
        }
        Some(options)
    }

    /// The Go driver's flags for the TLS files and the user; the password goes in
    /// [`Access::go_env`], never here.
    pub fn go_args(&self) -> Vec<OsString> {
        let mut args = Vec::new();
        let files = self.inner.files.clone().unwrap_or_default();
        let paths = [
            ("-cacert", files.ca),
            ("-cert", files.cert),
            ("-key", files.key),
        ];
        for (flag, path) in paths {
            if let Some(path) = path {
                args.push(flag.into());
                args.push(path.into_os_string());
            }
        }
        if let Some((name, _)) = &self.inner.user {
            args.push("-user".into());
            args.push(name.into());
        }
        args
    }

    /// The Go driver's environment: the password, if any.
    pub fn go_env(&self) -> Option<(&'static str, &str)> {
        self.inner
            .user
            .as_ref()
            .map(|(_, password)| (PASSWORD_ENV, password.0.as_str()))
    }

    /// A fresh channel to `url` for one of the benchmark's own calls, with TLS as the clients
    /// have it and the run's token on every request; `timeout` bounds the connect and each call.
    pub async fn channel(&self, url: &str, timeout: Duration) -> Result<Authed, String> {
        let mut endpoint = Endpoint::from_shared(url.to_string())
            .map_err(|e| format!("{url}: {e}"))?
            .connect_timeout(timeout)
            .timeout(timeout);
        if let Some(tls) = &self.inner.tls {
            endpoint = endpoint
                .tls_config(tls.clone())
                .map_err(|e| format!("{url}: {e}"))?;
        }
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        let token = self.token(&channel).await?;
        Ok(InterceptedService::new(channel, Token(token)))
    }

    /// Fetches the shared token through the first of `urls` that answers within `timeout`
    /// (the polls' own bound, 200 ms, may be shorter than one Authenticate, a bcrypt on the
    /// server); a no-op without a user or with a token already.
    pub async fn authenticate(&self, urls: &[String], timeout: Duration) -> Result<(), String> {
        if self.inner.user.is_none() || self.inner.token.lock().unwrap().is_some() {
            return Ok(());
        }
        let mut last = String::from("no endpoints");
        for url in urls {
            match tokio::time::timeout(timeout, self.channel(url, timeout)).await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(e)) => last = e,
                Err(_) => last = format!("{url}: Authenticate timed out"),
            }
        }
        Err(last)
    }

    /// Hands back `answer`, forgetting the shared token first if etcd refused it (expired, or
    /// revoked): the next [`Access::channel`] authenticates again.
    pub fn check<T>(&self, answer: Result<T, tonic::Status>) -> Result<T, tonic::Status> {
        if let Err(status) = &answer
            && status.code() == tonic::Code::Unauthenticated
        {
            *self.inner.token.lock().unwrap() = None;
        }
        answer
    }

    /// The shared token, authenticating on `channel` if there is none yet; `None` without a
    /// user. Two callers that find none both authenticate, and the later token wins: rare, and
    /// cheaper than holding a lock across the call.
    async fn token(&self, channel: &Channel) -> Result<Option<AsciiMetadataValue>, String> {
        let Some((name, password)) = &self.inner.user else {
            return Ok(None);
        };
        if let Some(token) = self.inner.token.lock().unwrap().clone() {
            return Ok(Some(token));
        }
        let request = AuthenticateRequest {
            name: name.clone(),
            password: password.0.clone(),
        };
        // etcd's message names the user at most, never the password.
        let answer = AuthClient::new(channel.clone())
            .authenticate(request)
            .await
            .map_err(|s| format!("Authenticate as {name}: {:?}: {}", s.code(), s.message()))?;
        let token = AsciiMetadataValue::try_from(answer.into_inner().token)
            .map_err(|_| "etcd's token is not ASCII".to_string())?;
        *self.inner.token.lock().unwrap() = Some(token.clone());
        Ok(Some(token))
    }
}

/// A channel whose requests carry the run's token (when there is a user).
pub type Authed = InterceptedService<Channel, Token>;

/// Puts the token, if any, on every request of a channel.
#[derive(Clone)]
pub struct Token(Option<AsciiMetadataValue>);

impl Interceptor for Token {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            request.metadata_mut().insert(TOKEN_KEY, token.clone());
        }
        Ok(request)
    }
}

/// tonic's TLS configuration for `files`: the CA (else the system's roots) and the client
/// certificate, read now.
fn tonic_tls(files: &TlsFiles) -> Result<ClientTlsConfig, String> {
    let mut config = ClientTlsConfig::new();
    config = match &files.ca {
        Some(ca) => config.ca_certificate(Certificate::from_pem(read_pem(ca)?)),
        None => config.with_native_roots(),
    };
    if let (Some(cert), Some(key)) = (&files.cert, &files.key) {
        config = config.identity(Identity::from_pem(read_pem(cert)?, read_pem(key)?));
    }
    Ok(config)
}

/// The PEM text of `path`; an error naming the path if it cannot be read or holds no PEM block.
fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !bytes.windows(10).any(|w| w == b"-----BEGIN") {
        return Err(format!("{}: no PEM block", path.display()));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(list: &[&str]) -> Vec<String> {
        list.iter().map(|u| u.to_string()).collect()
    }

    #[test]
    fn plain_http_needs_nothing() {
        let access = Access::new(&urls(&["http://a:2379"]), TlsFiles::default(), None).unwrap();
        assert!(!access.is_tls());
        assert!(access.go_args().is_empty());
        assert!(access.go_env().is_none());
    }

    #[test]
    fn tls_never_mixes_with_http() {
        let mixed = urls(&["https://a:2379", "http://b:2379"]);
        assert!(Access::new(&mixed, TlsFiles::default(), None).is_err());
        let files = TlsFiles {
            ca: Some("ca.pem".into()),
            ..TlsFiles::default()
        };
        let err = Access::new(&urls(&["http://a:2379"]), files, None).unwrap_err();
        assert!(err.contains("https"), "{err}");
    }

    #[test]
    fn a_password_never_crosses_http() {
        let user = Some(("app".to_string(), "s3cret-pw".to_string()));
        let err = Access::new(&urls(&["http://a:2379"]), TlsFiles::default(), user).unwrap_err();
        assert!(
            err.contains("plain text") && !err.contains("s3cret-pw"),
            "{err}"
        );
    }

    #[test]
    fn the_password_shows_nowhere_but_the_drivers_environment() {
        let dir = std::env::temp_dir().join(format!("etcd-ha-bench-access-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(
            &ca,
            "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let files = TlsFiles {
            ca: Some(ca),
            ..TlsFiles::default()
        };
        let user = Some(("app".to_string(), "s3cret-pw".to_string()));
        let access = Access::new(&urls(&["https://a:2379"]), files, user).unwrap();
        let shown = format!("{access:?} {:?}", access.go_args());
        assert!(
            shown.contains("app") && !shown.contains("s3cret-pw"),
            "{shown}"
        );
        assert_eq!(access.go_env(), Some((PASSWORD_ENV, "s3cret-pw")));
        let described = access.describe();
        assert!(
            described.contains("TLS") && described.ends_with("user app"),
            "{described}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
