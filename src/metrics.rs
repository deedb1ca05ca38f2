//! Counters through the `metrics` facade (feature `metrics`); without the feature they are no-ops.
//!
//! - `etcd_ha_requests_total{rpc}`: calls made (not attempts);
//! - `etcd_ha_retries_total{rpc}`: extra attempts, hedges included;
//! - `etcd_ha_ejections_total{endpoint}`: endpoints taken out of rotation;
//! - `etcd_ha_failovers_total`: leader changes observed from one known leader to another;
//! - `etcd_ha_leases_at_risk_total`: kept leases whose renewals fell behind (a third of the TTL
//!   left), each time one does; `etcd_ha_leases_at_risk` (gauge): how many are at risk now;
//! - `etcd_ha_leases_lost_total{reason}`: kept leases lost, `expired` locally or `gone` on the
//!   server;
//! - `etcd_ha_cache_mismatches_total`: caches found to differ from etcd at one revision (each
//!   then loads its range again).

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

/// `count` kept leases fell at risk.
pub(crate) fn leases_fell_at_risk(count: usize) {
    #[cfg(feature = "metrics")]
    metrics::counter!("etcd_ha_leases_at_risk_total").increment(count as u64);
    let _ = count;
}

/// How many kept leases are at risk now.
pub(crate) fn leases_at_risk(count: usize) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("etcd_ha_leases_at_risk").set(count as f64);
    let _ = count;
}

/// `count` kept leases were lost (`reason`: `expired` or `gone`).
pub(crate) fn leases_lost(reason: &'static str, count: usize) {
    #[cfg(feature = "metrics")]
    metrics::counter!("etcd_ha_leases_lost_total", "reason" => reason).increment(count as u64);
    let _ = (reason, count);
}

/// A cache differed from etcd at one revision.
pub(crate) fn cache_mismatch() {
    #[cfg(feature = "metrics")]
    metrics::counter!("etcd_ha_cache_mismatches_total").increment(1);
}
