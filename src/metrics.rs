//! Counters through the `metrics` facade (feature `metrics`); without the feature they are no-ops.
//!
//! - `etcd_ha_requests_total{rpc}`: calls made (not attempts);
//! - `etcd_ha_retries_total{rpc}`: extra attempts, hedges included;
//! - `etcd_ha_ejections_total{endpoint}`: endpoints taken out of rotation;
//! - `etcd_ha_failovers_total`: leader changes observed from one known leader to another.

/// A call started.
pub(crate) fn request(rpc: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("etcd_ha_requests_total", "rpc" => rpc).increment(1);
    let _ = rpc;
}

/// A call made another attempt.
pub(crate) fn retry(rpc: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("etcd_ha_retries_total", "rpc" => rpc).increment(1);
    let _ = rpc;
}

/// An endpoint was ejected.
pub(crate) fn ejection(endpoint: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("etcd_ha_ejections_total", "endpoint" => endpoint.to_owned()).increment(1);
    let _ = endpoint;
}

/// The leader moved from one known member to another.
pub(crate) fn failover() {
    #[cfg(feature = "metrics")]
    metrics::counter!("etcd_ha_failovers_total").increment(1);
}
