//! [`EndpointInfo`]: the public snapshot of one endpoint.

use std::time::Duration;

use super::{HealthState, ServerVersion};

/// A snapshot of one endpoint, from [`Client::endpoints`](crate::Client::endpoints).
///
/// ```no_run
/// # fn demo(client: etcd_ha::Client) {
/// for e in client.endpoints() {
///     println!("{} {:?} leader={} latency={:?} since {:?} last error {:?}",
///         e.url, e.health, e.is_leader, e.latency, e.since.elapsed(), e.last_error);
/// }
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EndpointInfo {
    /// The endpoint URL.
    pub url: String,
    /// The member id behind it, once a Status answer told it.
    pub member_id: Option<u64>,
    /// Health as the balancer sees it.
    pub health: HealthState,
    /// Whether its member is the raft leader, as last learned.
    pub is_leader: bool,
    /// Smoothed latency of successful requests and probes.
    pub latency: Option<Duration>,
    /// How long its probes' linearizable reads took (the better of the latest two): what a
    /// leader-bound call costs through it (see
    /// [`Candidate::leader_path`](crate::Candidate::leader_path)); leader-bound calls leave a
    /// leader whose path is clearly slower than a serving follower's.
    pub leader_path: Option<Duration>,
    /// The last failure seen there.
    pub last_error: Option<String>,
    /// When it entered its current health state.
    pub since: std::time::Instant,
    /// Whether the operator drains it ([`Client::drain`](crate::Client::drain)).
    pub draining: bool,
    /// Calls now waiting on it.
    pub in_flight: usize,
    /// Suspected of stalling: a call here was overdue by its own recent latency, so new calls
    /// avoid it while a healthy member can take them (it is not ejected for that).
    pub suspected: bool,
    /// Its member's etcd version, once a Status answer told it: what the client may use there
    /// (see [`ServerVersion`]).
    pub version: Option<ServerVersion>,
}
