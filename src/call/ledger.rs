//! The caller's side of the transport: the hedge budget every call draws on and the counters
//! behind [`Client::call_stats`](crate::Client::call_stats), kept apart from what a call needs
//! to reach a member (balancer, options, token).

use std::sync::Mutex;

use tokio::time::Instant;

use super::budget::HedgeBudget;
use super::stats::{CallStats, Count, Counters};

/// What the client's calls spent (hedges) and did (counts).
#[derive(Debug)]
pub(crate) struct Ledger {
    /// A std mutex held for a few additions, never across `.await`.
    budget: Mutex<HedgeBudget>,
    counters: Counters,
}

impl Ledger {
    /// A ledger with nothing spent at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        Ledger {
            budget: Mutex::new(HedgeBudget::new(now)),
            counters: Counters::default(),
        }
    }

    /// A call starts at `now`: counted, and the hedge budget grows.
    pub(crate) fn call(&self, now: Instant) {
        self.counters.add(Count::Call);
        self.budget().call(now);
    }

    /// A hedge is due: whether the budget allows it (and takes it if so).
    pub(crate) fn hedge(&self) -> bool {
        self.budget().try_hedge(Instant::now())
    }

    /// Count one event of a call.
    pub(crate) fn count(&self, what: Count) {
        self.counters.add(what);
    }

    /// What the calls did so far, with the endpoints' `ejections` and `suspicions`.
    pub(crate) fn stats(&self, ejections: u64, suspicions: u64) -> CallStats {
        self.counters.snapshot(ejections, suspicions)
    }

    fn budget(&self) -> std::sync::MutexGuard<'_, HedgeBudget> {
        self.budget.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn calls_feed_the_budget_and_the_counts() {
        let now = Instant::now();
        let ledger = Ledger::new(now);
        // A quiet client still gets the budget's floor of hedges.
        let floor = (0..crate::call::budget::FLOOR)
            .filter(|_| ledger.hedge())
            .count();
        assert_eq!(floor, crate::call::budget::FLOOR as usize);
        assert!(!ledger.hedge(), "past the floor, hedges need calls");
        for _ in 0..200 {
            ledger.call(now);
        }
        assert!(ledger.hedge(), "1 % of 200 calls");
        ledger.count(Count::Hedge { early: true });
        let stats = ledger.stats(1, 2);
        assert_eq!(stats.calls, 200);
        assert_eq!(stats.hedges, 1);
        assert_eq!(stats.early_hedges, 1);
        assert_eq!((stats.ejections, stats.suspicions), (1, 2));
    }
}
