//! The keeper's keep-alive streams: one task and one stream per slot, and which slot a new
//! lease joins.
//!
//! # Why more than one stream
//!
//! etcd answers a stream's keep-alives one at a time (`v3rpc/lease.go`), and on the leader
//! each renewal first waits for the apply of everything already committed
//! (`waitAppliedIndex` in `v3_server.go`), so one stream has a ceiling of its own, below the
//! leader's: on this project's 2-core box, 168,000-208,000 renewals/s on one stream to an
//! etcd 3.5.1 or 3.6.16 leader against 248,000-334,000 on four, and 28,000-52,000 against
//! 55,000-56,000 on etcd 3.4.23 (`lease-scale-bench`). A renewal held in the server holds up
//! only its own stream's. A keeper whose leases need more than a stream's share opens another
//! stream, each on the leader: after a leader kill, when every lease is renewed at once on the
//! next leader, 60,000 leases of TTL 6 s on 3.4.23 had 13,028 at risk on one stream and none
//! on three; 300,000 on 3.5.1 lost 40,179 on one stream and none on four.
//!
//! # The rule
//!
//! A lease joins the first slot whose renewals per second, with it, stay within a stream's
//! share ([`DEFAULT_KEEP_ALIVE_STREAM_RATE`] unless set); when every slot is that full, the
//! least loaded one. A slot's task starts
//! with its first lease and stops with its last, so a client with few leases keeps one stream,
//! as before. Leases never move between slots: each slot's task owns its leases' bookkeeping
//! (what its stream owes, in the order it owes it), and a lease that moved would be owed by
//! two streams at once. A slot's load counts a lease from its registration to the drop of its
//! last handle, lost or not: a load read high only opens a stream early.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::mpsc;

use super::task::Command;
#[cfg(doc)]
use crate::options::DEFAULT_KEEP_ALIVE_STREAM_RATE;

/// Thousandths of a renewal per second: a lease of TTL `t` is renewed every `t / 3`.
const MILLI: u64 = 1000;

/// One keep-alive stream's place: its task's command sender and what the task publishes.
#[derive(Default)]
pub(super) struct Slot {
    /// The running task's command sender; `None` while no task runs. Senders and the task's
    /// exit handshake take this lock, so a command never lands in a stopping task.
    task: Mutex<Option<mpsc::UnboundedSender<Command>>>,
    /// Renewals per second due from the leases registered here, in thousandths.
    load: AtomicU64,
    /// Kept leases at risk now, as the task last counted them.
    pub(super) at_risk: AtomicUsize,
    /// URL of the member serving the stream now, for tests and debugging.
    stream_endpoint: Mutex<Option<Arc<str>>>,
}

impl Slot {
    pub(super) fn lock_task(&self) -> MutexGuard<'_, Option<mpsc::UnboundedSender<Command>>> {
        self.task.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn lock_stream_endpoint(&self) -> MutexGuard<'_, Option<Arc<str>>> {
        self.stream_endpoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// A lease renewed at `rate` (see [`rate`]) joined the slot.
    pub(super) fn add(&self, rate: u64) {
        self.load.fetch_add(rate, Ordering::Relaxed);
    }

    /// A lease renewed at `rate` left the slot.
    pub(super) fn remove(&self, rate: u64) {
        // Never below zero, whatever the order of adds and removes.
        let _ = self
            .load
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| {
                Some(l.saturating_sub(rate))
            });
    }
}

/// The slots of a keeper that opens at most `streams` streams.
pub(super) fn slots(streams: usize) -> Box<[Slot]> {
    (0..streams.max(1)).map(|_| Slot::default()).collect()
}

/// The renewals per second a lease of `ttl` needs, in thousandths (at least 1).
pub(super) fn rate(ttl: Duration) -> u64 {
    let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
    (3 * MILLI * 1000 / millis).max(1)
}

/// The slot a lease needing `rate` joins: the first whose load stays within `per_stream`
/// renewals a second with it, else the least loaded (the first of equals).
pub(super) fn choose(slots: &[Slot], rate: u64, per_stream: u32) -> usize {
    let loads = slots.iter().map(|s| s.load.load(Ordering::Relaxed));
    pick(loads, rate, u64::from(per_stream) * MILLI)
}

/// [`choose`] over plain loads, with the budget per slot.
fn pick(loads: impl Iterator<Item = u64> + Clone, rate: u64, budget: u64) -> usize {
    loads
        .clone()
        .position(|load| load.saturating_add(rate) <= budget)
        .or_else(|| {
            loads
                .enumerate()
                .min_by_key(|&(i, load)| (load, i))
                .map(|(i, _)| i)
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_renewed_three_times_a_ttl() {
        assert_eq!(rate(Duration::from_secs(3)), 1000, "one renewal a second");
        assert_eq!(rate(Duration::from_secs(6)), 500);
        assert_eq!(rate(Duration::from_secs(10)), 300);
        // Never zero, never a division by zero or an overflow.
        assert_eq!(rate(Duration::from_secs(100_000_000)), 1);
        assert_eq!(rate(Duration::ZERO), 3_000_000);
        assert_eq!(rate(Duration::MAX), 1);
    }

    #[test]
    fn leases_fill_the_first_stream_before_the_next() {
        // Budget 10: the first slot takes leases until it is full, then the second.
        assert_eq!(pick([0, 0, 0].into_iter(), 3, 10), 0);
        assert_eq!(pick([9, 0, 0].into_iter(), 3, 10), 1);
        assert_eq!(pick([10, 7, 0].into_iter(), 3, 10), 1, "exactly full fits");
        assert_eq!(pick([10, 8, 0].into_iter(), 3, 10), 2);
        // A slot emptied by expiries is filled again first.
        assert_eq!(pick([10, 10, 0, 4].into_iter(), 3, 10), 2);
    }

    #[test]
    fn past_every_budget_the_least_loaded_takes_it() {
        assert_eq!(pick([30, 12, 20].into_iter(), 3, 10), 1);
        assert_eq!(pick([12, 12].into_iter(), 3, 10), 0, "the first of equals");
        assert_eq!(pick([u64::MAX, 5].into_iter(), 10, 10), 1, "no overflow");
        assert_eq!(pick(std::iter::empty(), 3, 10), 0);
    }

    #[test]
    fn a_slot_load_follows_its_leases_and_never_goes_below_zero() {
        let slots = slots(2);
        slots[0].add(40_000 * MILLI);
        assert_eq!(choose(&slots, 1, 40_000), 1, "the first slot is full");
        slots[0].remove(40_000 * MILLI);
        assert_eq!(choose(&slots, 1, 40_000), 0);
        slots[1].remove(5);
        assert_eq!(slots[1].load.load(Ordering::Relaxed), 0);
        assert_eq!(super::slots(0).len(), 1, "always one slot");
    }
}
