//! Counters of what the call path did (calls, attempts, hedges, suspicions, ejections), so that
//! tests and benchmarks can check the hedge overhead without the `metrics` feature.

use std::sync::atomic::{AtomicU64, Ordering};

/// What the client's calls did since it connected, from
/// [`Client::call_stats`](crate::Client::call_stats). Not a stable interface: for the
/// project's own tests and benchmarks.
///
/// ```no_run
/// # fn demo(client: etcd_ha::Client) {
/// let s = client.call_stats();
/// let overhead = s.hedges as f64 / s.calls.max(1) as f64;
/// println!("{:.2} % extra requests from hedging, {} ejections", overhead * 100.0, s.ejections);
/// # }
/// ```
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallStats {
    /// Typed calls made (each counts once, however many attempts it took).
    pub calls: u64,
    /// Attempts sent, first attempts, retries and hedges included (token renewals not).
    pub attempts: u64,
    /// Hedges sent (a second attempt of a slow repeatable call to another member).
    pub hedges: u64,
    /// Of those, hedges sent before the fixed cap because the member was overdue by its own
    /// latency.
    pub early_hedges: u64,
    /// Early hedges the budget refused (they waited for the cap instead).
    pub hedges_refused: u64,
    /// Times an endpoint became suspected of stalling (endpoints in the set now).
    pub suspicions: u64,
    /// Times an endpoint was ejected (endpoints in the set now).
    pub ejections: u64,
}

impl CallStats {
    /// What happened between `earlier` and this snapshot.
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// let before = client.call_stats();
    /// // ... traffic ...
    /// let run = client.call_stats().since(&before);
    /// println!("{} hedges for {} calls", run.hedges, run.calls);
    /// # }
    /// ```
    pub fn since(&self, earlier: &CallStats) -> CallStats {
        CallStats {
            calls: self.calls.saturating_sub(earlier.calls),
            attempts: self.attempts.saturating_sub(earlier.attempts),
            hedges: self.hedges.saturating_sub(earlier.hedges),
            early_hedges: self.early_hedges.saturating_sub(earlier.early_hedges),
            hedges_refused: self.hedges_refused.saturating_sub(earlier.hedges_refused),
            suspicions: self.suspicions.saturating_sub(earlier.suspicions),
            ejections: self.ejections.saturating_sub(earlier.ejections),
        }
    }
}

/// The transport's live counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    calls: AtomicU64,
    attempts: AtomicU64,
    hedges: AtomicU64,
    early_hedges: AtomicU64,
    hedges_refused: AtomicU64,
}

/// What to count.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Count {
    Call,
    Attempt,
    Hedge { early: bool },
    HedgeRefused,
}

impl Counters {
    /// Count one event.
    pub(crate) fn add(&self, what: Count) {
        let counter = match what {
            Count::Call => &self.calls,
            Count::Attempt => &self.attempts,
            Count::Hedge { early } => {
                if early {
                    self.early_hedges.fetch_add(1, Ordering::Relaxed);
                }
                &self.hedges
            }
            Count::HedgeRefused => &self.hedges_refused,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot; `ejections` and `suspicions` come from the endpoints.
    pub(crate) fn snapshot(&self, ejections: u64, suspicions: u64) -> CallStats {
        CallStats {
            calls: self.calls.load(Ordering::Relaxed),
            attempts: self.attempts.load(Ordering::Relaxed),
            hedges: self.hedges.load(Ordering::Relaxed),
            early_hedges: self.early_hedges.load(Ordering::Relaxed),
            hedges_refused: self.hedges_refused.load(Ordering::Relaxed),
            suspicions,
            ejections,
        }
    }
}
