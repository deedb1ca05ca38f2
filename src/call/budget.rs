//! The hedge budget: hedges are allowed only while they stay a small share of recent calls (no
//! IO here).
//!
//! # Why a budget and not just a good delay
//! A hedge delay derived from each member's tail ([`crate::endpoint`]'s pace) hedges about one
//! call in a few hundred in steady state. But the tail moves: a compaction, a defragment or a
//! saturated box slows *every* member at once, and until the latency windows catch up every slow
//! call would hedge, adding load exactly when the cluster has none to spare (the retry storm
//! tower's retry budget exists for; see its "Why budgets and not max retries?"). A saturated box
//! does the same to the fixed cap: with 256 calls in flight on two cores, 4 % of reads took
//! longer than the 300 ms attempt timeout, and hedging them all only deepened the queue. So
//! every hedge draws on a budget: at most [`RATIO`] of the calls of the last one to two
//! [`PERIOD`]s, plus [`FLOOR`] per window so that a quiet client can still route around a
//! stalled member. A hedge the budget refuses is not lost: an early one waits for the cap (the
//! attempt timeout, or a third of the deadline), one at the cap looks again a cap later.
//! A stalled member needs few hedges anyway: the calls that hit it make it suspected, and new
//! calls avoid it. Leader-bound calls cannot avoid a stalled leader that way, so a hedge at
//! the cap away from a member whose own pace is well under the cap (stalled, not slow) goes
//! without the budget's consent (see `Plan::hedge_goes`).

use std::time::Duration;

use tokio::time::Instant;

/// Hedges may add at most this share of recent calls, plus the floor: 1 %. With the floor, a
/// storm of hedges adds at most `RATIO + FLOOR / (calls per second)` requests: under 2 % from a
/// thousand calls a second up, where a storm costs something.
pub(crate) const RATIO: f64 = 0.01;

/// Hedges allowed per window whatever the call rate: a client making a few calls a second
/// still gets to hedge around a stalled member (a handful of extra reads cost nothing).
pub(crate) const FLOOR: u32 = 10;

/// How long one generation of counts lasts; the budget looks at the last one to two.
pub(crate) const PERIOD: Duration = Duration::from_secs(1);

/// Calls and hedges in one generation.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    calls: u32,
    hedges: u32,
}

/// The client's hedge budget (one for all members: what it bounds is the cluster's extra load).
///
/// ```text
/// call()      -> current.calls += 1
/// try_hedge() -> allowed while hedges < FLOOR + RATIO * calls (current + previous generation)
/// ```
#[derive(Clone, Debug)]
pub(crate) struct HedgeBudget {
    current: Counts,
    previous: Counts,
    /// When `current` started.
    rotated_at: Instant,
}

impl HedgeBudget {
    /// A budget with no history: only the floor is available.
    pub(crate) fn new(now: Instant) -> Self {
        HedgeBudget {
            current: Counts::default(),
            previous: Counts::default(),
            rotated_at: now,
        }
    }

    fn rotate(&mut self, now: Instant) {
        let age = now.saturating_duration_since(self.rotated_at);
        if age < PERIOD {
            return;
        }
        self.previous = if age >= PERIOD * 2 {
            Counts::default()
        } else {
            self.current
        };
        self.current = Counts::default();
        self.rotated_at = now;
    }

    /// A call started at `now`.
    pub(crate) fn call(&mut self, now: Instant) {
        self.rotate(now);
        self.current.calls = self.current.calls.saturating_add(1);
    }

    /// A hedge is due at `now`: take it from the budget if it allows (`true`).
    pub(crate) fn try_hedge(&mut self, now: Instant) -> bool {
        self.rotate(now);
        let calls = self.current.calls.saturating_add(self.previous.calls);
        let hedges = self.current.hedges.saturating_add(self.previous.hedges);
        let allowed = f64::from(FLOOR) + RATIO * f64::from(calls);
        if f64::from(hedges) + 1.0 > allowed {
            return false;
        }
        self.current.hedges = self.current.hedges.saturating_add(1);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_quiet_client_gets_the_floor() {
        let mut b = HedgeBudget::new(Instant::now());
        for _ in 0..FLOOR {
            assert!(b.try_hedge(Instant::now()));
        }
        assert!(!b.try_hedge(Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn hedges_stay_within_the_ratio_of_calls() {
        let mut b = HedgeBudget::new(Instant::now());
        let mut allowed = 0;
        // 10 000 calls, each wanting a hedge: a storm.
        for _ in 0..10_000 {
            b.call(Instant::now());
            if b.try_hedge(Instant::now()) {
                allowed += 1;
            }
        }
        // 1 % of calls plus the floor, no more.
        assert!(allowed <= 100 + FLOOR, "{allowed}");
        assert!(allowed >= 100, "{allowed}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_refills_as_calls_go_on_and_forgets_old_ones() {
        let mut b = HedgeBudget::new(Instant::now());
        while b.try_hedge(Instant::now()) {}
        // 200 more calls: two more hedges.
        for _ in 0..200 {
            b.call(Instant::now());
        }
        assert!(b.try_hedge(Instant::now()));
        assert!(b.try_hedge(Instant::now()));
        assert!(!b.try_hedge(Instant::now()));
        // A generation later the spent hedges still count (previous generation)...
        tokio::time::advance(PERIOD).await;
        assert!(!b.try_hedge(Instant::now()));
        // ...two generations later they are forgotten: the floor again.
        tokio::time::advance(PERIOD).await;
        assert!(b.try_hedge(Instant::now()));
    }
}
