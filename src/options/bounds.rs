//! Upper bounds of the duration options, and the check that enforces them.
//!
//! Every duration option ends up added to an `Instant` or multiplied (a deadline, a hedge, an
//! ejection's end, a backoff with jitter); `Instant::now() + Duration::MAX` panics, and it would
//! do so in a background task or in the middle of a call. So each option has a generous
//! maximum, far beyond any sane setting yet small enough that no sum or product the client
//! forms can overflow, and [`Options::validate`](crate::Options::validate) refuses anything
//! above it with [`Error::InvalidOptions`](crate::Error::InvalidOptions) naming the option.

use std::time::Duration;

use super::Options;
use crate::error::{Error, Result};

/// The longest timeout-like option: the connect, request, attempt, probe and keepalive
/// timeouts, the retry backoff, the ejection base and maximum and the leader grace.
///
/// 1 hour: a call, a connect or a backoff that would wait longer is a mistake, not a setting;
/// and `Instant::now()` plus a few of these (a backoff with jitter, twice the connect timeout)
/// never overflows.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(etcd_ha::MAX_TIMEOUT, Duration::from_secs(3600));
/// etcd_ha::Options::new().with_request_timeout(etcd_ha::MAX_TIMEOUT).validate().unwrap();
/// assert!(etcd_ha::Options::new()
///     .with_request_timeout(etcd_ha::MAX_TIMEOUT + Duration::from_secs(1))
///     .validate()
///     .is_err());
/// ```
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// The longest interval option: the probe, keepalive-ping and member-sync intervals.
///
/// 1 day: an interval that long already means "practically never"; anything longer only risks
/// overflow in the timers.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(etcd_ha::MAX_INTERVAL, Duration::from_secs(24 * 3600));
/// etcd_ha::Options::new().with_member_sync(etcd_ha::MAX_INTERVAL).validate().unwrap();
/// ```
pub const MAX_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);

/// Refuse any duration option above its maximum.
pub(super) fn check(o: &Options) -> Result<()> {
    const TIMEOUT: &str = "must be at most 1 hour (etcd_ha::MAX_TIMEOUT)";
    const INTERVAL: &str = "must be at most 1 day (etcd_ha::MAX_INTERVAL)";
    let timeouts = [
        ("connect_timeout", Some(o.connect_timeout)),
        ("request_timeout", o.request_timeout),
        ("attempt_timeout", Some(o.attempt_timeout)),
        ("probe", Some(o.probe_timeout)),
        ("keepalive", Some(o.keepalive_timeout)),
        ("retry", Some(o.retry.backoff)),
        ("ejection", Some(o.health.eject_base)),
        ("ejection", Some(o.health.eject_max)),
        ("leader_grace", Some(o.leader_grace)),
    ];
    let intervals = [
        ("probe", Some(o.probe_interval)),
        ("keepalive", o.keepalive_interval),
        ("member_sync", o.member_sync_interval),
    ];
    let over = |list: &[(&'static str, Option<Duration>)], max: Duration| {
        list.iter()
            .find(|(_, d)| d.is_some_and(|d| d > max))
            .map(|(option, _)| *option)
    };
    if let Some(option) = over(&timeouts, MAX_TIMEOUT) {
        return Err(Error::InvalidOptions {
            option,
            reason: TIMEOUT,
        });
    }
    if let Some(option) = over(&intervals, MAX_INTERVAL) {
        return Err(Error::InvalidOptions {
            option,
            reason: INTERVAL,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every duration option with its value set to `d` (others at their defaults), by name.
    fn each_option(d: Duration) -> Vec<(&'static str, Options)> {
        let o = Options::new;
        vec![
            ("connect_timeout", o().with_connect_timeout(d)),
            ("request_timeout", o().with_request_timeout(d)),
            ("attempt_timeout", o().with_attempt_timeout(d)),
            ("probe", o().with_probe(Duration::from_secs(1), d)),
            ("keepalive", o().with_keepalive(Duration::from_secs(10), d)),
            ("retry", o().with_retry(d, 0.1, 3)),
            ("ejection", o().with_ejection(d, d, 2)),
            ("ejection", o().with_ejection(Duration::from_secs(1), d, 2)),
            ("leader_grace", o().with_leader_grace(d)),
        ]
    }

    fn each_interval(d: Duration) -> Vec<(&'static str, Options)> {
        let o = Options::new;
        vec![
            ("probe", o().with_probe(d, Duration::from_secs(1))),
            ("keepalive", o().with_keepalive(d, Duration::from_secs(3))),
            ("member_sync", o().with_member_sync(d)),
        ]
    }

    #[test]
    fn each_duration_option_is_bounded() {
        let second = Duration::from_secs(1);
        for (list, max) in [
            (each_option as fn(Duration) -> _, MAX_TIMEOUT),
            (each_interval, MAX_INTERVAL),
        ] {
            for (_, options) in list(max) {
                options.validate().unwrap();
            }
            for over in [max + second, Duration::MAX] {
                for (name, options) in list(over) {
                    match options.validate() {
                        Err(Error::InvalidOptions { option, reason }) => {
                            assert_eq!(option, name);
                            assert!(reason.contains("at most"), "{reason}");
                        }
                        other => panic!("{name} = {over:?}: {other:?}"),
                    }
                }
            }
        }
    }
}
