//! An optional [`Instant`] in one atomic: what the hot path reads without a lock (when a
//! member's streams last brought news, since when it has owed the leader an answer).
//!
//! Stored as nanoseconds after an epoch fixed at creation, plus one, so that 0 means "none".
//! An instant before the epoch counts as the epoch; one more than ~584 years after it is
//! clamped (never reached: the epoch is the endpoint's creation).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// An `Option<Instant>` read and written with relaxed atomics.
#[derive(Debug)]
pub(crate) struct AtomicInstant {
    epoch: Instant,
    raw: AtomicU64,
}

impl AtomicInstant {
    /// None yet; instants are measured from `epoch`.
    pub(crate) fn new(epoch: Instant) -> Self {
        AtomicInstant {
            epoch,
            raw: AtomicU64::new(0),
        }
    }

    fn encode(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.epoch).as_nanos();
        u64::try_from(nanos).unwrap_or(u64::MAX - 1) + 1
    }

    /// The instant held, if any.
    pub(crate) fn get(&self) -> Option<Instant> {
        match self.raw.load(Ordering::Relaxed) {
            0 => None,
            raw => Some(self.epoch + Duration::from_nanos(raw - 1)),
        }
    }

    /// Whether an instant is held (one load, no clock).
    pub(crate) fn is_set(&self) -> bool {
        self.raw.load(Ordering::Relaxed) != 0
    }

    /// Hold `at` unless an instant is held already (the oldest wins).
    pub(crate) fn set_if_none(&self, at: Instant) {
        if !self.is_set() {
            let _ =
                self.raw
                    .compare_exchange(0, self.encode(at), Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Hold `at` if it is newer than what is held (the newest wins).
    pub(crate) fn set_max(&self, at: Instant) {
        self.raw.fetch_max(self.encode(at), Ordering::Relaxed);
    }

    /// Hold nothing.
    pub(crate) fn clear(&self) {
        // A load first: the common case (nothing held) then writes no cache line.
        if self.is_set() {
            self.raw.store(0, Ordering::Relaxed);
        }
    }

    /// Whether the instant held is at or after `at` (false when none is held).
    pub(crate) fn at_or_after(&self, at: Instant) -> bool {
        let raw = self.raw.load(Ordering::Relaxed);
        raw != 0 && raw >= self.encode(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn none_until_set_and_after_clear() {
        let t = AtomicInstant::new(Instant::now());
        assert_eq!(t.get(), None);
        assert!(!t.is_set());
        assert!(
            !t.at_or_after(Instant::now() - ms(1)),
            "none is never after"
        );
        tokio::time::advance(ms(3)).await;
        let at = Instant::now();
        t.set_max(at);
        assert_eq!(t.get(), Some(at));
        t.clear();
        assert_eq!(t.get(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_or_the_newest_wins_as_asked() {
        let t = AtomicInstant::new(Instant::now());
        let first = Instant::now();
        tokio::time::advance(ms(10)).await;
        let second = Instant::now();
        t.set_if_none(first);
        t.set_if_none(second);
        assert_eq!(t.get(), Some(first), "set_if_none keeps the oldest");
        t.set_max(second);
        t.set_max(first);
        assert_eq!(t.get(), Some(second), "set_max keeps the newest");
        assert!(t.at_or_after(second));
        assert!(!t.at_or_after(second + Duration::from_nanos(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn an_instant_before_the_epoch_is_held_as_the_epoch() {
        tokio::time::advance(ms(100)).await;
        let epoch = Instant::now();
        let t = AtomicInstant::new(epoch);
        t.set_max(epoch - ms(50));
        assert_eq!(t.get(), Some(epoch));
    }
}
