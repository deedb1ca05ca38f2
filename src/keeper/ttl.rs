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

/// The most a renewal goes out before it is due (see [`batch_ahead`]).
const BATCH_AHEAD_MAX: Duration = Duration::from_millis(50);

/// How far ahead of their due time renewals join a batch that is going out: a 64th of the
/// shortest renewal period (TTL/3) kept, at most [`BATCH_AHEAD_MAX`].
///
/// Why: a turn of the keeper has a fixed cost (a wake-up, a timer, the orderings' lookups, a
/// send) that leases granted one after another, each due at its own instant, pay one by one.
/// Taking those due within the next 50 ms along, the leases renewed together stay together
/// (the next renewal counts from the send). Measured (`lease-scale-bench --counts
/// 1000,10000,100000 --ttl 10 --faults kill`, etcd 3.5.1, the same day, less the client's
/// background): 9.6 -> 4.0 us of CPU per renewal at 10,000 leases, 6.7 -> 3.8 at 100,000;
/// 1,000 (granted 64 at a time, so already due in groups) stayed at ~12. The price is at most
/// 1/64 more renewals, none sent later than it would have been.
pub(crate) fn batch_ahead(min_ttl: Duration) -> Duration {
    (min_ttl / 3 / 64).min(BATCH_AHEAD_MAX)
}

/// The least a lease's last renewal is kept back before its local expiry, at most (see
/// [`last_send_margin`]).
const LAST_SEND_FLOOR: Duration = Duration::from_millis(250);

/// How long one slow answer counts in [`RoundTrips`]: one to two of these.
const ROUND_TRIP_WINDOW: Duration = Duration::from_secs(1);

/// How close to its local expiry a lease may come and still be sent a renewal, for the
/// shortest TTL kept and the stream's recent longest round trip: twice that round trip, at
/// least a tenth of the TTL (at most 250 ms of it), at most a quarter of the TTL (so that a
/// lease at risk, a third of its TTL left, is still sent one).
///
/// An answer after the local expiry loses the lease anyway, and a renewal that reaches the
/// leader after the server's own expiry does worse: etcd's lessor holds it until the lease is
/// revoked (revokes are rate-limited to 1,000 a second), and with it every renewal behind it
/// on the stream. A keeper that fell behind sent such renewals, its stream stalled, and every
/// lease was lost (300,000 leases of TTL 6 s on etcd 3.5.1, no fault).
pub(crate) fn last_send_margin(min_ttl: Duration, round_trip: Duration) -> Duration {
    (min_ttl / 10)
        .min(LAST_SEND_FLOOR)
        .max(round_trip.saturating_mul(2))
        .min(min_ttl / 4)
}

/// The longest round trip of a stream's recent answers: the largest seen in the current
/// window of [`ROUND_TRIP_WINDOW`] and the one before, so one slow answer counts for one to
/// two windows.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RoundTrips {
    window_start: Option<Instant>,
    current: Duration,
    previous: Duration,
}

impl RoundTrips {
    /// An answer at `now` that took `round_trip`.
    pub(crate) fn record(&mut self, now: Instant, round_trip: Duration) {
        let elapsed = self
            .window_start
            .map(|start| now.saturating_duration_since(start));
        match elapsed {
            Some(elapsed) if elapsed < ROUND_TRIP_WINDOW => {}
            Some(elapsed) => {
                let last = if elapsed < 2 * ROUND_TRIP_WINDOW {
                    self.current
                } else {
                    Duration::ZERO
                };
                *self = RoundTrips {
                    window_start: Some(now),
                    current: Duration::ZERO,
                    previous: last,
                };
            }
            None => self.window_start = Some(now),
        }
        self.current = self.current.max(round_trip);
    }

    /// The longest round trip that still counts at `now`.
    pub(crate) fn longest(&self, now: Instant) -> Duration {
        let Some(start) = self.window_start else {
            return Duration::ZERO;
        };
        match now.saturating_duration_since(start) {
            e if e < ROUND_TRIP_WINDOW => self.current.max(self.previous),
            e if e < 2 * ROUND_TRIP_WINDOW => self.current,
            _ => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_send_margin_follows_the_round_trip_within_bounds() {
        let ms = Duration::from_millis;
        let ttl = Duration::from_secs(6);
        assert_eq!(
            last_send_margin(ttl, ms(5)),
            ms(250),
            "the floor: a tenth, at most 250 ms"
        );
        assert_eq!(last_send_margin(Duration::from_secs(2), ms(5)), ms(200));
        assert_eq!(
            last_send_margin(ttl, ms(300)),
            ms(600),
            "twice the round trip"
        );
        assert_eq!(
            last_send_margin(ttl, ms(5000)),
            ms(1500),
            "at most a quarter of the TTL"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_answer_counts_for_one_to_two_windows() {
        let ms = Duration::from_millis;
        let mut trips = RoundTrips::default();
        assert_eq!(trips.longest(Instant::now()), Duration::ZERO);
        trips.record(Instant::now(), ms(300));
        tokio::time::advance(ms(600)).await;
        trips.record(Instant::now(), ms(10));
        assert_eq!(trips.longest(Instant::now()), ms(300));
        // A new window: the last one's longest still counts.
        tokio::time::advance(ms(600)).await;
        trips.record(Instant::now(), ms(20));
        assert_eq!(trips.longest(Instant::now()), ms(300));
        // Past it, only the newer window's.
        tokio::time::advance(ms(1200)).await;
        assert_eq!(trips.longest(Instant::now()), ms(20));
        tokio::time::advance(ms(1000)).await;
        assert_eq!(trips.longest(Instant::now()), Duration::ZERO);
    }

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
