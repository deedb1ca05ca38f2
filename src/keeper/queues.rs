//! The keeper table's orderings, kept incrementally so that no answer and no turn of the task
//! walks every lease: leases by local expiry, idle ones by next renewal, those found due by
//! urgency, watched ones by the moment they fall at risk, the TTLs (for the silence limit) and
//! how many leases are at risk.
//!
//! Each lease is indexed by its [`Keys`]; the table changes a lease's keys only by taking it
//! out ([`Queues::remove`]) and putting it back ([`Queues::add`]), so the orderings never
//! disagree with the leases. Every operation here is O(log n).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use super::ttl::at_risk_from;

/// Where a lease is in its renewal cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    /// Idle, its next renewal not yet found due.
    Waiting,
    /// Idle and found due (by `Table::due_at_most`), not yet sent: a stream pushing back
    /// leaves it here, still in order of urgency, for the next turn.
    Ready,
    /// One request in flight, sent at this instant.
    InFlight(Instant),
}

/// Whether a lease's fall behind is watched for (see [`at_risk_from`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Risk {
    /// Not watched: a lease kept by id before its first answer (its expiry is only a wait
    /// bound, not a renewal's).
    Unwatched,
    /// Renewed in time so far; it falls at risk at [`Keys::at_risk_at`].
    Watched,
    /// Reported at risk; a renewal brings it back to `Watched`.
    Reported,
}

/// What the orderings know of one lease.
#[derive(Clone, Copy, Debug)]
pub(super) struct Keys {
    /// Mirror of the view's `expires_at` (only the table writes it).
    pub(super) expires_at: Instant,
    /// When to send the next renewal (if none is in flight).
    pub(super) next_renewal: Instant,
    /// Mirror of the view's `ttl`, for the cadence and the silence limit.
    pub(super) ttl: Duration,
    pub(super) stage: Stage,
    pub(super) risk: Risk,
}

impl Keys {
    /// When the lease falls at risk if no renewal comes first.
    pub(super) fn at_risk_at(&self) -> Instant {
        at_risk_from(self.expires_at, self.ttl)
    }
}

/// The orderings of every kept lease. Ids break ties, so each set holds one item per lease.
#[derive(Debug, Default)]
#[cfg_attr(test, derive(PartialEq))]
pub(super) struct Queues {
    /// Every lease by local expiry: what `expire`, `next_deadline` and `most_urgent` read.
    by_expiry: BTreeSet<(Instant, i64)>,
    /// Waiting leases by next renewal: the next one falls due first.
    waiting: BTreeSet<(Instant, i64)>,
    /// Ready leases by local expiry: the one nearest to expiry is sent first, so under
    /// overload every lease is renewed once before any is renewed twice.
    ready: BTreeSet<(Instant, i64)>,
    /// Ready leases by next renewal (all past): the next wake stays what it was before they
    /// were found due.
    ready_renewals: BTreeSet<(Instant, i64)>,
    /// Watched leases by the moment they fall at risk: the next one to report.
    by_risk: BTreeSet<(Instant, i64)>,
    /// How many leases have each TTL: the smallest sets the silence limit.
    ttls: BTreeMap<Duration, usize>,
    /// Leases reported at risk.
    at_risk: usize,
}

impl Queues {
    /// Index lease `id` under `keys`.
    pub(super) fn add(&mut self, id: i64, keys: &Keys) {
        self.by_expiry.insert((keys.expires_at, id));
        *self.ttls.entry(keys.ttl).or_insert(0) += 1;
        self.add_risk(id, keys);
        self.add_stage(id, keys);
    }

    /// Take lease `id`, indexed under `keys`, out of every ordering.
    pub(super) fn remove(&mut self, id: i64, keys: &Keys) {
        self.by_expiry.remove(&(keys.expires_at, id));
        self.remove_ttl(keys.ttl);
        self.remove_risk(id, keys);
        self.remove_stage(id, keys);
    }

    /// Move lease `id` from `old` keys to `new` ones, touching only the orderings whose key
    /// changed: a send changes only the stage, an answer the expiry, the risk and the stage.
    /// Every ordering rekeyed on every change cost a renewal ~20 tree operations, a fifth of
    /// the keeper's CPU at 150,000 leases.
    pub(super) fn update(&mut self, id: i64, old: &Keys, new: &Keys) {
        if old.expires_at != new.expires_at {
            self.by_expiry.remove(&(old.expires_at, id));
            self.by_expiry.insert((new.expires_at, id));
        }
        if old.ttl != new.ttl {
            self.remove_ttl(old.ttl);
            *self.ttls.entry(new.ttl).or_insert(0) += 1;
        }
        if (old.risk, old.expires_at, old.ttl) != (new.risk, new.expires_at, new.ttl) {
            self.remove_risk(id, old);
            self.add_risk(id, new);
        }
        if (old.stage, old.next_renewal, old.expires_at)
            != (new.stage, new.next_renewal, new.expires_at)
        {
            self.remove_stage(id, old);
            self.add_stage(id, new);
        }
    }

    fn remove_ttl(&mut self, ttl: Duration) {
        if let Some(count) = self.ttls.get_mut(&ttl) {
            *count -= 1;
            if *count == 0 {
                self.ttls.remove(&ttl);
            }
        }
    }

    fn add_risk(&mut self, id: i64, keys: &Keys) {
        match keys.risk {
            Risk::Unwatched => {}
            Risk::Watched => {
                self.by_risk.insert((keys.at_risk_at(), id));
            }
            Risk::Reported => self.at_risk += 1,
        }
    }

    fn remove_risk(&mut self, id: i64, keys: &Keys) {
        match keys.risk {
            Risk::Unwatched => {}
            Risk::Watched => {
                self.by_risk.remove(&(keys.at_risk_at(), id));
            }
            Risk::Reported => self.at_risk = self.at_risk.saturating_sub(1),
        }
    }

    fn add_stage(&mut self, id: i64, keys: &Keys) {
        match keys.stage {
            Stage::Waiting => {
                self.waiting.insert((keys.next_renewal, id));
            }
            Stage::Ready => {
                self.ready.insert((keys.expires_at, id));
                self.ready_renewals.insert((keys.next_renewal, id));
            }
            Stage::InFlight(_) => {}
        }
    }

    fn remove_stage(&mut self, id: i64, keys: &Keys) {
        match keys.stage {
            Stage::Waiting => {
                self.waiting.remove(&(keys.next_renewal, id));
            }
            Stage::Ready => {
                self.ready.remove(&(keys.expires_at, id));
                self.ready_renewals.remove(&(keys.next_renewal, id));
            }
            Stage::InFlight(_) => {}
        }
    }

    /// The lease nearest to local expiry, and that expiry.
    pub(super) fn first_expiry(&self) -> Option<(Instant, i64)> {
        self.by_expiry.first().copied()
    }

    /// A waiting lease whose renewal is due at `now`, if any (the earliest).
    pub(super) fn waiting_due(&self, now: Instant) -> Option<i64> {
        self.waiting
            .first()
            .filter(|(at, _)| *at <= now)
            .map(|(_, id)| *id)
    }

    /// Up to `at_most` ready leases expiring at `cutoff` or later, nearest to expiry first.
    pub(super) fn ready(&self, cutoff: Instant, at_most: usize) -> Vec<i64> {
        self.ready
            .range((cutoff, i64::MIN)..)
            .take(at_most)
            .map(|(_, id)| *id)
            .collect()
    }

    /// The lease nearest to local expiry among those expiring at `cutoff` or later.
    pub(super) fn first_expiry_from(&self, cutoff: Instant) -> Option<(Instant, i64)> {
        self.by_expiry.range((cutoff, i64::MIN)..).next().copied()
    }

    /// The earliest next renewal of an idle lease (waiting, or ready and expiring at `cutoff`
    /// or later: the others are no longer sent, and wait only for their expiry).
    pub(super) fn next_renewal(&self, cutoff: Instant) -> Option<Instant> {
        let waiting = self.waiting.first().map(|(at, _)| *at);
        let sendable = self.ready.range((cutoff, i64::MIN)..).next().is_some();
        let ready = sendable
            .then(|| self.ready_renewals.first().map(|(at, _)| *at))
            .flatten();
        waiting.into_iter().chain(ready).min()
    }

    /// A watched lease that is at risk at `now`, if any (the earliest to fall).
    pub(super) fn falling_at_risk(&self, now: Instant) -> Option<i64> {
        self.by_risk
            .first()
            .filter(|(at, _)| *at <= now)
            .map(|(_, id)| *id)
    }

    /// When the next watched lease falls at risk.
    pub(super) fn next_risk(&self) -> Option<Instant> {
        self.by_risk.first().map(|(at, _)| *at)
    }

    /// How many leases are reported at risk.
    pub(super) fn at_risk(&self) -> usize {
        self.at_risk
    }

    /// The shortest TTL kept.
    pub(super) fn min_ttl(&self) -> Option<Duration> {
        self.ttls.first_key_value().map(|(ttl, _)| *ttl)
    }
}
