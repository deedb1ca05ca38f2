//! How long a leader-bound call takes through one member: the prober's linearizable reads
//! there, kept lock-free for the pick that reads it on every call.
//!
//! The pick compares the leader's value with the followers' (see `balance/pick.rs`, the
//! detour): a read sent to the leader costs the client's link to it plus a quorum round; one
//! sent to a follower costs the link to the follower plus its forward to the leader. The value
//! is the member's latest read. A read [`clearly_slower`] than the one before is checked again
//! at once (the prober does not wait its interval): a link that turned slow is confirmed within
//! a round trip, and one slow read of a healthy member (a scheduler hiccup on a loaded box)
//! moves calls for that round trip only. Why not the better of two reads, to never move on a
//! hiccup: a wrong detour costs a forward hop for a few milliseconds, a late one costs every
//! call a round trip of the slow link until the next probe (writes kept 0.44x of their rate).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How many times another path a path must take, plus [`DETOUR_MARGIN`], to be clearly slower.
///
/// Why 2x and a margin: a follower's forward costs a hop (a few hundred µs on one machine), so
/// only a clearly slower direct link is worth leaving, and sub-10 ms noise on a loaded box
/// never moves traffic. With +100 ms each way on the leader's link, its path is ~200 ms
/// against a follower's ~1 ms.
pub(crate) const DETOUR_FACTOR: u32 = 2;

/// The absolute part of [`clearly_slower`]: see [`DETOUR_FACTOR`].
pub(crate) const DETOUR_MARGIN: Duration = Duration::from_millis(10);

/// Whether path `a` is clearly slower than path `b`: more than [`DETOUR_FACTOR`] times it plus
/// [`DETOUR_MARGIN`].
pub(crate) fn clearly_slower(a: Duration, b: Duration) -> bool {
    a > b * DETOUR_FACTOR + DETOUR_MARGIN
}

/// The latest linearizable read time of one member, in microseconds (0: none yet).
#[derive(Debug, Default)]
pub(crate) struct ReadPath {
    last: AtomicU64,
}

impl ReadPath {
    /// A linearizable read took `took`; returns whether it was [`clearly_slower`] than the
    /// read before (worth checking again at once). Only the member's prober writes.
    pub(crate) fn record(&self, took: Duration) -> bool {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
        let before = self.last.swap(us, Ordering::Relaxed);
        before != 0 && clearly_slower(took, Duration::from_micros(before))
    }

    /// The member's leader path: its latest read; `None` before the first.
    pub(crate) fn get(&self) -> Option<Duration> {
        match self.last.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clearly_slower_is_twice_plus_ten_ms() {
        assert!(!clearly_slower(ms(12), ms(1)));
        assert!(clearly_slower(ms(13), ms(1)));
        assert!(!clearly_slower(ms(40), ms(20)));
        assert!(clearly_slower(ms(201), ms(1)));
        assert!(!clearly_slower(ms(1), ms(200)));
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_latest_read_counts_and_a_jump_asks_for_another() {
        let path = ReadPath::default();
        assert_eq!(path.get(), None);
        assert!(!path.record(ms(1)), "a first read is no jump");
        assert_eq!(path.get(), Some(ms(1)));
        // A slow read: it counts at once, and is worth a second look at once.
        assert!(path.record(ms(200)));
        assert_eq!(path.get(), Some(ms(200)));
        // Still slow: no jump from the slow one, nothing more to check.
        assert!(!path.record(ms(210)));
        // One fast read is enough to look fast again.
        assert!(!path.record(ms(2)));
        assert_eq!(path.get(), Some(ms(2)));
    }

    #[test]
    fn a_read_of_zero_still_counts() {
        let path = ReadPath::default();
        assert!(!path.record(Duration::ZERO));
        assert_eq!(path.get(), Some(Duration::from_micros(1)));
    }
}
