//! Lease TTLs made safe for time arithmetic: etcd's maximum, what a server's TTL means, and
//! instants that cannot overflow.
//!
//! A TTL comes from two untrusted places: the server (a grant or keep-alive answer, an `i64` of
//! seconds) and the user (a `Duration` or an `i64`). Adding either to an `Instant` unchecked
//! panics for values near `i64::MAX`, in the keeper's background task. etcd itself never grants
//! more than [`MAX_LEASE_TTL`], so a larger server TTL is clamped to it, and a user TTL above it
//! is refused before it is sent (etcd would refuse it too: `etcdserver: too large lease TTL`).

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};

/// The longest lease TTL etcd grants, in seconds: its `MaxLeaseTTL` (9,000,000,000 s, about
/// 285 years; `server/lease/lessor.go`). A longer grant is refused with
/// [`Error::LeaseTtlTooLarge`].
///
/// ```
/// assert_eq!(etcd_ha::MAX_LEASE_TTL, 9_000_000_000);
/// ```
pub const MAX_LEASE_TTL: i64 = 9_000_000_000;

/// How far an instant may be put off when the sum would not fit: 30 years (tokio's own "far
/// future"), far past any lease while keeping the sum representable.
const FAR_FUTURE: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);

/// A server's TTL answer: `None` when the lease is gone (`ttl <= 0`), else the TTL clamped to
/// [`MAX_LEASE_TTL`] (a server's value is never trusted to fit in time arithmetic).
pub(crate) fn from_server(ttl_secs: i64) -> Option<Duration> {
    (ttl_secs > 0).then(|| Duration::from_secs(ttl_secs.min(MAX_LEASE_TTL).unsigned_abs()))
}

/// A user's TTL in whole seconds (rounded up, at least 1: etcd leases have second
/// granularity), refused above [`MAX_LEASE_TTL`].
pub(crate) fn whole_seconds(ttl: Duration) -> Result<i64> {
    let secs = ttl
        .as_secs()
        .saturating_add(u64::from(ttl.subsec_nanos() > 0))
        .max(1);
    checked_secs(i64::try_from(secs).unwrap_or(i64::MAX))
}

/// A user's TTL in seconds, refused above [`MAX_LEASE_TTL`] (below 1 etcd raises it to its
/// minimum, so that is left to the server).
pub(crate) fn checked_secs(ttl_secs: i64) -> Result<i64> {
    if ttl_secs > MAX_LEASE_TTL {
        return Err(Error::LeaseTtlTooLarge {
            max_secs: MAX_LEASE_TTL,
        });
    }
    Ok(ttl_secs)
}

/// A user's TTL as a `Duration`, refused above [`MAX_LEASE_TTL`].
pub(crate) fn checked(ttl: Duration) -> Result<Duration> {
    whole_seconds(ttl)?;
    Ok(ttl)
}

/// `at + d`, or as far as it goes when that does not fit.
pub(crate) fn later(at: Instant, d: Duration) -> Instant {
    at.checked_add(d)
        .or_else(|| at.checked_add(FAR_FUTURE))
        .unwrap_or(at)
}

/// When a lease whose local expiry is `expires_at` falls *at risk*: a third of its TTL before
/// that expiry. A kept lease is renewed a third of its TTL after its last renewal was sent, so
/// it is at risk only once a second renewal period has passed with no answer: a missed renewal
/// and a failover (a re-election, a new stream) take less than that on a healthy cluster.
pub(crate) fn at_risk_from(expires_at: Instant, ttl: Duration) -> Instant {
    expires_at.checked_sub(ttl / 3).unwrap_or(expires_at)
}

/// The most a lease's last renewal may be kept back before its local expiry (see
/// [`last_send_margin`]).
const LAST_SEND_MARGIN: Duration = Duration::from_millis(250);

/// How close to its local expiry a lease may come and still be sent a renewal, for the
/// shortest TTL kept: a tenth of it, at most [`LAST_SEND_MARGIN`]. An answer after the local
/// expiry loses the lease anyway, and a renewal that reaches the leader after the server's
/// own expiry does worse: etcd's lessor holds it until the lease is revoked (revokes are
/// rate-limited to 1,000 a second), and with it every renewal behind it on the stream. Once a
/// keeper fell behind, those held renewals stalled its stream for seconds and every lease was
/// lost (200,000 leases of TTL 6 s on etcd 3.5.1, no fault).
pub(crate) fn last_send_margin(min_ttl: Duration) -> Duration {
    (min_ttl / 10).min(LAST_SEND_MARGIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_ttls_are_clamped_and_non_positive_means_gone() {
        assert_eq!(from_server(0), None);
        assert_eq!(from_server(-1), None);
        assert_eq!(from_server(i64::MIN), None);
        assert_eq!(from_server(5), Some(Duration::from_secs(5)));
        let max = Duration::from_secs(MAX_LEASE_TTL.unsigned_abs());
        assert_eq!(from_server(MAX_LEASE_TTL), Some(max));
        assert_eq!(from_server(i64::MAX), Some(max));
    }

    #[test]
    fn user_ttls_round_up_and_are_bounded() {
        assert_eq!(whole_seconds(Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(whole_seconds(Duration::ZERO).unwrap(), 1);
        assert_eq!(whole_seconds(Duration::from_secs(5)).unwrap(), 5);
        assert_eq!(whole_seconds(Duration::from_millis(5001)).unwrap(), 6);
        let max = Duration::from_secs(MAX_LEASE_TTL.unsigned_abs());
        assert_eq!(whole_seconds(max).unwrap(), MAX_LEASE_TTL);
        for too_long in [max + Duration::from_nanos(1), Duration::MAX] {
            assert!(matches!(
                whole_seconds(too_long),
                Err(Error::LeaseTtlTooLarge { .. })
            ));
        }
        assert!(checked_secs(MAX_LEASE_TTL + 1).is_err());
        assert_eq!(checked_secs(-1).unwrap(), -1);
    }

    #[tokio::test(start_paused = true)]
    async fn later_never_panics() {
        let now = Instant::now();
        assert_eq!(
            later(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
        assert!(later(now, Duration::MAX) > now);
    }

    #[tokio::test(start_paused = true)]
    async fn at_risk_is_a_third_of_the_ttl_before_the_expiry() {
        let expires = Instant::now() + Duration::from_secs(6);
        assert_eq!(
            at_risk_from(expires, Duration::from_secs(6)),
            expires - Duration::from_secs(2)
        );
        // Any TTL (a server's is clamped to etcd's maximum, not to the clock): never a panic.
        assert!(at_risk_from(expires, Duration::MAX) <= expires);
    }
}
