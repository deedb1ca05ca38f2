//! How long a leader-bound call takes through one member: the prober's linearizable reads
//! there, kept lock-free for the pick that reads it on every call.
//!
//! The pick compares the leader's path with the followers' (see `balance/pick.rs`, the
//! detour): a read sent to the leader costs the client's link to it plus a quorum round; one
//! sent to a follower costs the link to the follower plus its forward to the leader.
//!
//! - The leader's path is its *confirmed* one, the better of its latest two reads: one slow
//!   read (a scheduler hiccup on a loaded box) moves no call. A read [`clearly_slower`] than
//!   the one before is checked again at once (the prober does not wait its interval), so a
//!   link that turned slow is confirmed within a round trip of it, and one fast read brings
//!   the calls back.
//! - A follower's path is the *worse* of its latest two reads, and only while it is *fresh*:
//!   not in doubt since (failed, or suspected of stalling) and owing no answer past the
//!   shortest stall (see `Endpoint::candidate`). A detour to a member that just froze would
//!   hold every call sent there; a put is never sent twice. Why the worse: the leader must be
//!   slow twice to count as slow, so a follower must be fast twice to count as fast. With its
//!   latest read alone, one lucky 3 ms follower read against a leader at 32 ms moved every
//!   leader-bound call to that follower with no fault at all, on a box loaded by 1,024 calls
//!   in flight (2-3 samples of 20 at 256 and 1,024), and a follower kill then broke the puts
//!   in flight there (180 in one trial of failover-bench at 256 in flight).

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

/// Set in [`ReadPath`]'s word while the member is in doubt (failed, or suspected of
/// stalling) since its latest read.
const IN_DOUBT: u64 = 1 << 63;

/// The latest linearizable read times of one member, in microseconds (0: none yet).
#[derive(Debug, Default)]
pub(crate) struct ReadPath {
    /// The latest read, and whether the member is in doubt since (the top bit).
    last: AtomicU64,
    /// The better of the latest two reads: slow only when both were.
    confirmed: AtomicU64,
    /// The worse of the latest two reads: fast only when both were.
    steady: AtomicU64,
}

impl ReadPath {
    /// A linearizable read took `took`; returns whether it was [`clearly_slower`] than the
    /// read before (worth checking again at once). Clears the doubt. Only the member's prober
    /// writes reads.
    pub(crate) fn record(&self, took: Duration) -> bool {
        let us = u64::try_from(took.as_micros())
            .unwrap_or(u64::MAX)
            .clamp(1, IN_DOUBT - 1);
        let before = self.last.swap(us, Ordering::Relaxed) & !IN_DOUBT;
        let (confirmed, steady) = if before == 0 {
            (us, us)
        } else {
            (before.min(us), before.max(us))
        };
        self.confirmed.store(confirmed, Ordering::Relaxed);
        self.steady.store(steady, Ordering::Relaxed);
        before != 0 && clearly_slower(took, Duration::from_micros(before))
    }

    /// The member failed, or is suspected of stalling: until its next read it is no member to
    /// send calls through (see [`ReadPath::fresh`]); its last value still says how slow it is.
    pub(crate) fn doubt(&self) {
        self.last.fetch_or(IN_DOUBT, Ordering::Relaxed);
    }

    /// The member's path as confirmed: the better of its latest two reads, in doubt or not
    /// (`None` before the first). One slow read (a hiccup) does not make it slow; it is
    /// checked again at once, and the second read confirms it or not.
    pub(crate) fn confirmed(&self) -> Option<Duration> {
        match self.confirmed.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// The worse of the latest two reads, unless the member is in doubt since its latest: how
    /// fast a call sent through it would be, if one may be sent at all.
    pub(crate) fn fresh(&self) -> Option<Duration> {
        match self.last.load(Ordering::Relaxed) {
            0 => None,
            us if us & IN_DOUBT != 0 => None,
            _ => Some(Duration::from_micros(
                self.steady.load(Ordering::Relaxed).max(1),
            )),
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
    fn a_slow_path_is_confirmed_by_a_second_read_and_one_fast_read_ends_it() {
        let path = ReadPath::default();
        assert_eq!(path.confirmed(), None);
        assert!(!path.record(ms(1)), "a first read is no jump");
        assert_eq!(path.confirmed(), Some(ms(1)));
        // A slow read: not confirmed yet, but worth a second look at once.
        assert!(path.record(ms(200)));
        assert_eq!(path.confirmed(), Some(ms(1)));
        assert_eq!(path.fresh(), Some(ms(200)));
        // Still slow: confirmed, and no jump from the slow one.
        assert!(!path.record(ms(210)));
        assert_eq!(path.confirmed(), Some(ms(200)));
        // One fast read is enough to look fast again as the leader...
        assert!(!path.record(ms(2)));
        assert_eq!(path.confirmed(), Some(ms(2)));
        // ...but a follower is a way through at its worse read until a second fast one.
        assert_eq!(path.fresh(), Some(ms(210)));
        path.record(ms(3));
        assert_eq!(path.fresh(), Some(ms(3)));
    }

    #[test]
    fn one_lucky_fast_read_does_not_make_a_follower_look_fast() {
        // A loaded follower: 20 ms, then a lucky 3 ms read. Its path stays 20 ms, so a leader
        // at 32 ms is not clearly slower than it (the detour stays off).
        let path = ReadPath::default();
        path.record(ms(20));
        path.record(ms(3));
        assert_eq!(path.fresh(), Some(ms(20)));
        assert!(!clearly_slower(ms(32), path.fresh().unwrap()));
        assert!(
            clearly_slower(ms(32), ms(3)),
            "what the latest read alone would have said"
        );
    }

    #[test]
    fn a_member_in_doubt_is_no_way_through_until_its_next_read() {
        let path = ReadPath::default();
        path.record(ms(2));
        // The member failed or is suspected: its path is still known, but not fresh.
        path.doubt();
        assert_eq!(path.confirmed(), Some(ms(2)));
        assert_eq!(path.fresh(), None);
        assert!(path.record(ms(300)), "a jump from the last value");
        assert_eq!(path.fresh(), Some(ms(300)));
    }

    #[test]
    fn a_member_never_read_is_neither_known_nor_fresh() {
        let path = ReadPath::default();
        path.doubt();
        assert_eq!((path.confirmed(), path.fresh()), (None, None));
    }

    #[test]
    fn a_read_of_zero_still_counts() {
        let path = ReadPath::default();
        assert!(!path.record(Duration::ZERO));
        assert_eq!(path.confirmed(), Some(Duration::from_micros(1)));
    }
}
