//! The documented defaults of [`Options`](crate::Options), each with the reason for its value.

use std::time::Duration;

/// How long to wait for the first member to answer at connect, and for each TCP/TLS connect.
///
/// 2 s: etcdctl's `--dial-timeout`; long enough for a TLS handshake on a loaded box, short enough
/// that a dead endpoint list is reported quickly.
///
/// ```
/// assert_eq!(etcd_ha::DEFAULT_CONNECT_TIMEOUT, std::time::Duration::from_secs(2));
/// ```
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Default deadline of one unary request (all attempts included).
///
/// 5 s: etcdctl's `--command-timeout`; below etcd's own 7 s request timeout (5 s + 2 x election
/// timeout) so that the client gives up, and can try elsewhere, before the server does.
///
/// ```
/// assert_eq!(etcd_ha::DEFAULT_REQUEST_TIMEOUT, std::time::Duration::from_secs(5));
/// ```
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Default HTTP/2 keepalive ping interval.
///
/// 10 s: etcd's server rejects pings closer than 5 s apart on busy connections (and on idle
/// connections any ping closer than 2 h) with GOAWAY `too_many_pings` after two strikes. We ping
/// only while a call or stream is open, and no more often than every 10 s (PD's value), twice the
/// server's floor to absorb timer jitter.
///
/// ```
/// assert_eq!(etcd_ha::DEFAULT_KEEPALIVE_INTERVAL, std::time::Duration::from_secs(10));
/// ```
pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// Default time to wait for a keepalive ping's answer before the connection is declared dead.
///
/// 3 s: PD's `defaultDialKeepAliveTimeout`; a frozen member is detected within 13 s even when
/// nothing else notices.
///
/// ```
/// assert_eq!(etcd_ha::DEFAULT_KEEPALIVE_TIMEOUT, std::time::Duration::from_secs(3));
/// ```
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(3);

/// etcd's default `--max-request-bytes` (1.5 MiB); requests larger than this are refused by the
/// client before they are sent.
///
/// ```
/// assert_eq!(etcd_ha::DEFAULT_MAX_REQUEST_BYTES, 1536 * 1024);
/// ```
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1536 * 1024;

/// Default interval between health probes of one endpoint.
///
/// 500 ms: a frozen or cut-off member is noticed within interval + timeout (1.5 s), well inside
/// an etcd election (1-2 s at etcd's defaults), at a cost of two tiny RPCs per member per half
/// second. PD probes every 10 s and needs up to 20 s to notice.
///
/// ```
/// assert_eq!(etcd_ha::DEFAULT_PROBE_INTERVAL, std::time::Duration::from_millis(500));
/// ```
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_millis(500);

/// Default bound on one health probe (Status, then a linearizable read of `health`).
///
/// 1 s: a healthy member on a loaded box answers in milliseconds; etcd itself holds a
/// linearizable read up to 7 s before it gives up, far too long to wait.
///
/// ```
/// assert_eq!(etcd_ha::DEFAULT_PROBE_TIMEOUT, std::time::Duration::from_secs(1));
/// ```
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Default time after which a repeatable request still waiting on one endpoint is also sent to
/// another one (hedging); the first answer wins. It is also how long a member may owe an answer
/// to a call that ends (deadline, or dropped by the caller) before the silence counts against it.
///
/// 300 ms: a healthy member answers a linearizable read within a heartbeat or two (100 ms each
/// at etcd's defaults), so 300 ms of silence is a strong hint that it is frozen, cut off or
/// overloaded; at most one extra copy of a slow read is sent. With a short request timeout the
/// hedge goes out after a third of it instead.
///
/// ```
/// assert_eq!(etcd_ha::DEFAULT_ATTEMPT_TIMEOUT, std::time::Duration::from_millis(300));
/// ```
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_millis(300);

/// Default time leader-bound calls wait for a new leader after the client lost the old one.
///
/// 2 s: an etcd election takes one to two election timeouts (1 s by default). Until it is over,
/// followers still forward writes and read-index requests to the lost leader, where they hang
/// until the deadline and come back ambiguous; waiting for the new leader instead turns those
/// into successes. When only the client's link to a live leader broke, calls go through
/// followers after this grace.
///
/// ```
/// assert_eq!(etcd_ha::DEFAULT_LEADER_GRACE, std::time::Duration::from_secs(2));
/// ```
pub const DEFAULT_LEADER_GRACE: Duration = Duration::from_secs(2);

/// Default interval of member sync (MemberList): new members are used, removed ones dropped.
///
/// ```
/// assert_eq!(etcd_ha::DEFAULT_MEMBER_SYNC_INTERVAL, std::time::Duration::from_secs(5));
/// ```
pub const DEFAULT_MEMBER_SYNC_INTERVAL: Duration = Duration::from_secs(5);

/// Default most keep-alive streams one client's [`Keeper`](crate::Keeper) opens: one per
/// [`DEFAULT_KEEP_ALIVE_STREAM_RATE`] renewals a second its leases need, up to this many.
///
/// ```
/// assert_eq!(etcd_ha::DEFAULT_KEEP_ALIVE_STREAMS, 4);
/// ```
pub const DEFAULT_KEEP_ALIVE_STREAMS: usize = 4;

/// The most keep-alive streams
/// [`Options::with_keep_alive_streams`](crate::Options::with_keep_alive_streams) accepts.
///
/// ```
/// assert_eq!(etcd_ha::MAX_KEEP_ALIVE_STREAMS, 64);
/// ```
pub const MAX_KEEP_ALIVE_STREAMS: usize = 64;

/// The most watch streams
/// [`Options::with_watch_streams`](crate::Options::with_watch_streams) accepts.
///
/// ```
/// assert_eq!(etcd_ha::MAX_WATCH_STREAMS, 16);
/// ```
pub const MAX_WATCH_STREAMS: usize = 16;

/// Default renewals a second one keep-alive stream is given before the
/// [`Keeper`](crate::Keeper) puts new leases on another: 10,000, the renewals of 20,000 leases
/// of TTL 6 s or 33,333 of TTL 10 s. A third of what one stream to an etcd 3.4.23 leader
/// carried on a 2-core machine (28,000-39,000 a second; etcd 3.5 and 3.6: 168,000-208,000),
/// so that a stream keeps up through what slows the leader (writes to apply, the burst of
/// renewals after a failover) on every supported server. After a leader kill, 60,000 leases of
/// TTL 6 s on etcd 3.4.23 had 13,028 at risk on one stream and none on three.
///
/// ```
/// assert_eq!(etcd_ha::DEFAULT_KEEP_ALIVE_STREAM_RATE, 10_000);
/// ```
pub const DEFAULT_KEEP_ALIVE_STREAM_RATE: u32 = 10_000;
