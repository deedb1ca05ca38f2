//! Connection options: documented defaults, builder methods, validated once at connect.

use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};

mod bounds;
mod defaults;
mod layer;
mod tls;
mod validate;
pub use bounds::{MAX_INTERVAL, MAX_TIMEOUT};
pub use defaults::*;
pub use tls::TlsOptions;

/// Options for [`Client::connect`](crate::Client::connect).
///
/// ```
/// use std::time::Duration;
/// use etcd_ha::Options;
///
/// let options = Options::new()
///     .with_connect_timeout(Duration::from_secs(1))
///     .with_request_timeout(Duration::from_secs(3))
///     .with_user("root", "secret");
/// // Debug never shows the password.
/// assert!(!format!("{options:?}").contains("secret"));
/// ```
#[derive(Clone)]
pub struct Options {
    /// Bounds the first contact at connect and every TCP/TLS connect later.
    pub(crate) connect_timeout: Duration,
    /// Deadline of a unary request unless the call says otherwise; `None` waits forever.
    pub(crate) request_timeout: Option<Duration>,
    /// HTTP/2 ping interval while calls are open; `None` disables keepalive.
    pub(crate) keepalive_interval: Option<Duration>,
    /// How long an unanswered ping may take before the connection is closed.
    pub(crate) keepalive_timeout: Duration,
    /// User name and password; the client authenticates and renews the token itself.
    pub(crate) credentials: Option<Credentials>,
    /// Send the credentials (and the token they buy) to `http://` endpoints too.
    pub(crate) plaintext_credentials: bool,
    /// TLS settings; `None` means plain HTTP/2 unless an endpoint says `https://`.
    pub(crate) tls: Option<TlsOptions>,
    /// Requests larger than this are refused locally with [`Error::RequestTooLarge`].
    pub(crate) max_request_bytes: usize,
    /// Largest response accepted (snapshots stream in chunks, so this bounds one range).
    pub(crate) max_response_bytes: usize,
    /// Send `hasleader=true` on calls that need a leader, so a leaderless member refuses at once.
    pub(crate) require_leader: bool,
    /// Never return a serializable read older than a revision this client has already seen
    /// (see [`Options::with_monotonic_reads`]).
    pub(crate) monotonic_reads: bool,
    /// Health probe interval per endpoint.
    pub(crate) probe_interval: Duration,
    /// Bound on one probe.
    pub(crate) probe_timeout: Duration,
    /// When a repeatable request is also sent to another endpoint.
    pub(crate) attempt_timeout: Duration,
    /// Retry backoff, jitter and attempt cap.
    pub(crate) retry: crate::retry::RetryPolicy,
    /// Member sync interval; `None` keeps the given endpoints as they are.
    pub(crate) member_sync_interval: Option<Duration>,
    /// Ejection and readmission tunables.
    pub(crate) health: crate::endpoint::HealthConfig,
    /// How long leader-bound calls wait for a new leader after losing the old one.
    pub(crate) leader_grace: Duration,
    /// The most keep-alive streams the keeper opens, and the renewals a second each is given.
    pub(crate) keep_alive_streams: (usize, u32),
    /// The streams the managed watches are spread over.
    pub(crate) watch_streams: usize,
    /// Chooses the endpoint of each request.
    pub(crate) pick_policy: std::sync::Arc<dyn crate::balance::PickPolicy>,
    /// The user's tower layers around every typed call's attempt (see `layer.rs`).
    pub(crate) layer: Option<crate::endpoint::AttemptLayer>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            keepalive_interval: Some(DEFAULT_KEEPALIVE_INTERVAL),
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            credentials: None,
            plaintext_credentials: false,
            tls: None,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            // etcd's client default is "unlimited" (MaxInt32); 512 MiB still stops a runaway.
            max_response_bytes: 512 * 1024 * 1024,
            require_leader: true,
            monotonic_reads: true,
            probe_interval: DEFAULT_PROBE_INTERVAL,
            probe_timeout: DEFAULT_PROBE_TIMEOUT,
            attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
            retry: crate::retry::RetryPolicy::default(),
            member_sync_interval: Some(DEFAULT_MEMBER_SYNC_INTERVAL),
            health: crate::endpoint::HealthConfig::default(),
            leader_grace: DEFAULT_LEADER_GRACE,
            keep_alive_streams: (DEFAULT_KEEP_ALIVE_STREAMS, DEFAULT_KEEP_ALIVE_STREAM_RATE),
            watch_streams: 1,
            pick_policy: std::sync::Arc::new(crate::balance::LeaderFirst),
            layer: None,
        }
    }
}

impl Options {
    /// How members are dialled, with the TLS files read now (typed errors for bad files).
    pub(crate) fn dial(&self) -> Result<crate::endpoint::Dial> {
        Ok(crate::endpoint::Dial {
            connect_timeout: self.connect_timeout,
            keepalive_interval: self.keepalive_interval,
            keepalive_timeout: self.keepalive_timeout,
            tls: self
                .tls
                .as_ref()
                .map(TlsOptions::client_config)
                .transpose()?,
            layer: self.layer.clone(),
        })
    }
}

impl Options {
    /// The defaults (see the `DEFAULT_*` constants).
    ///
    /// ```
    /// let options = etcd_ha::Options::new();
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Bound the first contact and every connection attempt. Default
    /// [`DEFAULT_CONNECT_TIMEOUT`].
    ///
    /// ```
    /// let o = etcd_ha::Options::new().with_connect_timeout(std::time::Duration::from_millis(500));
    /// ```
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Deadline of each unary request. Default [`DEFAULT_REQUEST_TIMEOUT`].
    ///
    /// ```
    /// let o = etcd_ha::Options::new().with_request_timeout(std::time::Duration::from_secs(1));
    /// ```
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// Let unary requests wait as long as it takes.
    ///
    /// ```
    /// let o = etcd_ha::Options::new().without_request_timeout();
    /// ```
    pub fn without_request_timeout(mut self) -> Self {
        self.request_timeout = None;
        self
    }

    /// HTTP/2 keepalive: ping every `interval` while calls are open, close the connection when a
    /// ping is not answered within `timeout`. `interval` must be at least 5 s, etcd's server
    /// minimum. Default 10 s / 3 s.
    ///
    /// ```
    /// use std::time::Duration;
    /// let o = etcd_ha::Options::new().with_keepalive(Duration::from_secs(6), Duration::from_secs(2));
    /// ```
    pub fn with_keepalive(mut self, interval: Duration, timeout: Duration) -> Self {
        self.keepalive_interval = Some(interval);
        self.keepalive_timeout = timeout;
        self
    }

    /// Turn HTTP/2 keepalive off.
    ///
    /// ```
    /// let o = etcd_ha::Options::new().without_keepalive();
    /// ```
    pub fn without_keepalive(mut self) -> Self {
        self.keepalive_interval = None;
        self
    }

    /// Authenticate as `user`; the token is sent on every call and renewed when etcd rejects it.
    ///
    /// ```
    /// let o = etcd_ha::Options::new().with_user("app", "password");
    /// ```
    pub fn with_user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some(Credentials {
            user: user.into(),
            password: password.into(),
        });
        self
    }

    /// Let the credentials of [`with_user`](Self::with_user), and the token they buy, go to
    /// `http://` endpoints in plain text. Off by default: [`Client::connect`](crate::Client::connect)
    /// refuses credentials with any `http://` endpoint ([`Error::PlaintextCredentials`]), since
    /// anyone on the path reads the password and can use the token. For a loopback or test
    /// cluster, or a network whose links are encrypted below etcd.
    ///
    /// ```
    /// let o = etcd_ha::Options::new()
    ///     .with_user("app", "password")
    ///     .with_plaintext_credentials();
    /// ```
    pub fn with_plaintext_credentials(mut self) -> Self {
        self.plaintext_credentials = true;
        self
    }

    /// Use TLS with these settings for every endpoint.
    ///
    /// ```
    /// let tls = etcd_ha::TlsOptions::new().with_ca_file("ca.pem");
    /// let o = etcd_ha::Options::new().with_tls(tls);
    /// ```
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Refuse requests larger than `bytes` locally. Default [`DEFAULT_MAX_REQUEST_BYTES`], etcd's
    /// own default; raise it together with the server's `--max-request-bytes`.
    ///
    /// ```
    /// let o = etcd_ha::Options::new().with_max_request_bytes(4 << 20);
    /// ```
    pub fn with_max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes;
        self
    }

    /// Largest response message accepted. Default 512 MiB. It also caps what a managed watch
    /// holds at once: a response in fragments, reassembled, and a reload after a compaction
    /// ([`Error::WatchTooLarge`] beyond it).
    ///
    /// ```
    /// let o = etcd_ha::Options::new().with_max_response_bytes(64 << 20);
    /// ```
    pub fn with_max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// Send `hasleader=true` with calls that need a leader (default on), so that a member that
    /// lost its leader refuses them at once and they move on, instead of waiting up to etcd's
    /// 7 s request timeout.
    ///
    /// ```
    /// let o = etcd_ha::Options::new().with_require_leader(false);
    /// ```
    pub fn with_require_leader(mut self, on: bool) -> Self {
        self.require_leader = on;
        self
    }

    /// Monotonic reads (default on): a serializable read (a get with
    /// [`GetOptions::with_serializable`](crate::GetOptions::with_serializable), or a txn of
    /// such reads) answered at a revision older than the newest one this client has already
    /// seen (in any KV answer before the read started) is not returned; it is made again,
    /// linearizably, within the same deadline. Serializable reads are spread over the members
    /// and a lagging member (cut off from its peers, or catching up after a restart) answers
    /// from its old state, so without this a read can go back in time. A linearizable read
    /// never does. The second read goes where the first could: a handle pinned to one member
    /// ([`Kv::with_member`](crate::Kv::with_member)) reads that member again, and fails (with
    /// the deadline) if it cannot serve a linearizable read. Off (`false`), every answer is
    /// returned as it comes, like etcd's own clients do by default.
    ///
    /// ```
    /// let o = etcd_ha::Options::new().with_monotonic_reads(false);
    /// ```
    pub fn with_monotonic_reads(mut self, on: bool) -> Self {
        self.monotonic_reads = on;
        self
    }

    /// Probe every endpoint every `interval`, each probe bounded by `timeout`. Defaults
    /// [`DEFAULT_PROBE_INTERVAL`] and [`DEFAULT_PROBE_TIMEOUT`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let o = etcd_ha::Options::new().with_probe(Duration::from_millis(250), Duration::from_millis(500));
    /// ```
    pub fn with_probe(mut self, interval: Duration, timeout: Duration) -> Self {
        self.probe_interval = interval;
        self.probe_timeout = timeout;
        self
    }

    /// Send a repeatable request that has waited this long on one endpoint to another one as
    /// well (hedging). Default [`DEFAULT_ATTEMPT_TIMEOUT`].
    ///
    /// ```
    /// let o = etcd_ha::Options::new().with_attempt_timeout(std::time::Duration::from_millis(300));
    /// ```
    pub fn with_attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// Retry settings: wait `backoff` +- `jitter` (a fraction, 0.1 = 10 %) between attempts,
    /// at most `max_attempts` attempts per call. Defaults 25 ms, 0.1, 100.
    ///
    /// ```
    /// use std::time::Duration;
    /// let o = etcd_ha::Options::new().with_retry(Duration::from_millis(50), 0.2, 10);
    /// ```
    pub fn with_retry(mut self, backoff: Duration, jitter: f64, max_attempts: u32) -> Self {
        self.retry = crate::retry::RetryPolicy {
            backoff,
            jitter,
            max_attempts,
        };
        self
    }

    /// Sync the endpoint set with the cluster's members every `interval` (and after failures).
    /// Default [`DEFAULT_MEMBER_SYNC_INTERVAL`].
    ///
    /// ```
    /// let o = etcd_ha::Options::new().with_member_sync(std::time::Duration::from_secs(30));
    /// ```
    pub fn with_member_sync(mut self, interval: Duration) -> Self {
        self.member_sync_interval = Some(interval);
        self
    }

    /// Keep exactly the endpoints given: no members added or dropped. Endpoints that reach one
    /// member under another name than it advertises (a proxy, an alias) are kept by member sync
    /// too, once a probe has seen which member answers there; turn sync off when an endpoint is
    /// a load balancer over several members, or when the set must never change.
    ///
    /// ```
    /// let o = etcd_ha::Options::new().without_member_sync();
    /// ```
    pub fn without_member_sync(mut self) -> Self {
        self.member_sync_interval = None;
        self
    }

    /// Ejection tunables: the n-th ejection in a row lasts `n x base`, at most `max`; an ejected
    /// endpoint needs `readmit_probes` good probes in a row to come back. Defaults 250 ms, 2 s, 2.
    ///
    /// ```
    /// use std::time::Duration;
    /// let o = etcd_ha::Options::new().with_ejection(Duration::from_millis(100), Duration::from_secs(1), 3);
    /// ```
    pub fn with_ejection(mut self, base: Duration, max: Duration, readmit_probes: u32) -> Self {
        self.health.eject_base = base;
        self.health.eject_max = max;
        self.health.readmit_probes = readmit_probes;
        self
    }

    /// After the client lost the leader, calls that need one wait up to `grace` for a new
    /// leader before they go through followers. Default [`DEFAULT_LEADER_GRACE`]; zero turns
    /// the wait off.
    ///
    /// ```
    /// let o = etcd_ha::Options::new().with_leader_grace(std::time::Duration::from_secs(3));
    /// ```
    pub fn with_leader_grace(mut self, grace: Duration) -> Self {
        self.leader_grace = grace;
        self
    }

    /// The [`Keeper`](crate::Keeper) opens at most `streams` keep-alive streams, each on the
    /// leader, and puts a new lease on another stream once its leases need more than
    /// `renewals_per_stream` renewals a second (a lease of TTL `t` is renewed every `t / 3`):
    /// etcd answers a stream's keep-alives one at a time, so one stream has a ceiling of its
    /// own. Defaults [`DEFAULT_KEEP_ALIVE_STREAMS`] and [`DEFAULT_KEEP_ALIVE_STREAM_RATE`];
    /// `streams` from 1 to [`MAX_KEEP_ALIVE_STREAMS`], `renewals_per_stream` at least 1. A
    /// client whose leases fit one stream's share opens one.
    ///
    /// ```
    /// // Up to 8 streams, one per 20,000 renewals a second.
    /// let o = etcd_ha::Options::new().with_keep_alive_streams(8, 20_000);
    /// # o.validate().unwrap();
    /// assert!(etcd_ha::Options::new().with_keep_alive_streams(0, 20_000).validate().is_err());
    /// ```
    pub fn with_keep_alive_streams(mut self, streams: usize, renewals_per_stream: u32) -> Self {
        self.keep_alive_streams = (streams, renewals_per_stream);
        self
    }

    /// Spread the client's managed watches over `streams` watch streams (default 1, at most
    /// [`MAX_WATCH_STREAMS`]), dealt out in turn, each opened on a member the others' are not
    /// on while there is one: a failure of a member then resumes only its stream's watches.
    ///
    /// For clients that hold tens of thousands of watches. A stream's watches resume from
    /// where the stream last proved them caught up, and etcd proves that (answers a progress
    /// request) only while every watch of the stream is caught up, which a burst of writes
    /// keeps from happening on one large stream. etcd then reads the history from the oldest
    /// resume point again for each 512 watches it catches up. Measured with
    /// `watch-scale-bench --watch-streams` (100,000 watches, a put to each, then a SIGKILL of
    /// a stream's member): p99 from a put to its event 10-28 s with one stream (5 runs), 23
    /// ms-1.4 s with three. The price: 1.3-1.8x the client's CPU per event, ~0.1 KiB more per
    /// watch; with the resume points caught up, one stream resumed as fast or faster.
    ///
    /// ```
    /// let o = etcd_ha::Options::new().with_watch_streams(3);
    /// # o.validate().unwrap();
    /// assert!(etcd_ha::Options::new().with_watch_streams(0).validate().is_err());
    /// assert!(etcd_ha::Options::new().with_watch_streams(17).validate().is_err());
    /// ```
    pub fn with_watch_streams(mut self, streams: usize) -> Self {
        self.watch_streams = streams;
        self
    }

    /// Route requests with your own [`PickPolicy`](crate::PickPolicy). Default
    /// [`LeaderFirst`](crate::LeaderFirst).
    ///
    /// ```
    /// let o = etcd_ha::Options::new().with_pick_policy(etcd_ha::LeaderFirst);
    /// ```
    pub fn with_pick_policy(mut self, policy: impl crate::balance::PickPolicy) -> Self {
        self.pick_policy = std::sync::Arc::new(policy);
        self
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("keepalive_interval", &self.keepalive_interval)
            .field("keepalive_timeout", &self.keepalive_timeout)
            .field("credentials", &self.credentials)
            .field("tls", &self.tls)
            .field("max_request_bytes", &self.max_request_bytes)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("require_leader", &self.require_leader)
            .field("monotonic_reads", &self.monotonic_reads)
            .field("probe_interval", &self.probe_interval)
            .field("probe_timeout", &self.probe_timeout)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("retry", &self.retry)
            .field("member_sync_interval", &self.member_sync_interval)
            .field("health", &self.health)
            .field("leader_grace", &self.leader_grace)
            .field("keep_alive_streams", &self.keep_alive_streams)
            .field("watch_streams", &self.watch_streams)
            .field("pick_policy", &self.pick_policy)
            .field("layer", &self.layer)
            .finish()
    }
}

/// A user name and password. `Debug` shows the user and hides the password.
///
/// ```
/// let o = etcd_ha::Options::new().with_user("root", "hunter2");
/// assert!(format!("{o:?}").contains("root"));
/// assert!(!format!("{o:?}").contains("hunter2"));
/// ```
#[derive(Clone)]
pub struct Credentials {
    pub(crate) user: String,
    pub(crate) password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_password() {
        let o = Options::new().with_user("alice", "s3cr3t-pw");
        let shown = format!("{o:?}");
        assert!(shown.contains("alice"));
        assert!(!shown.contains("s3cr3t-pw"));
    }
}
