//! The lease keeper's bookkeeping, with no IO: when each lease is due for renewal, what an
//! answer does to its local expiry, when the keep-alive stream has gone silent, and when a
//! lease is lost.
//!
//! One lease, on one stream:
//!
//! ```text
//!              renewal due (after the last answer: sent_at + TTL/3;
//!              after a stream failure: at once)
//!   +------+ ------------------------------------------> +-----------+
//!   | idle |                                             | in flight |  one request, sent_at
//!   +------+ <------------------------------------------ +-----------+
//!      |      answer ttl > 0: expires_at = sent_at + ttl      |
//!      |                                                      | answer ttl <= 0: lost (gone)
//!      +------ now >= expires_at, no renewal in time ---------+-----> lost (expired)
//! ```
//!
//! # Why expiry counts from the send time
//!
//! The server renews a lease when the leader processes the keep-alive: *after* we sent it, so
//! `sent_at + ttl` is never later than the server's expiry, whatever the network delay (a
//! leader change only adds to the server's side: the new leader extends every lease by an
//! election timeout). Counting from the answer's arrival instead would be late by the answer's
//! whole round trip, and a holder could act on a lease the server has already dropped. This is
//! PD's `start + TTL` rule.
//!
//! # Why the decision is taken under the channel's lock
//!
//! Handles read a lease's [`View`] and the clock to say "lost"; the task writes the view. An
//! answer that arrives just after the local expiry must not bring the lease back for a reader
//! that already saw it expire, so [`Table::answered`] reads the clock inside the watch channel's
//! write lock: any reader that saw `now >= expires_at` did so before that write, with an
//! earlier clock, and the task then sees the expiry too and marks the lease lost.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::queues::{Keys, Queues, Risk, Stage};
use super::ttl::{self, at_risk_from, later};

/// Why a lease is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lost {
    /// The server answered `ttl <= 0`: it expired or was revoked there.
    Gone,
    /// Its local expiry passed without a renewal.
    Expired,
}

/// What handles see of one lease; written only by the keeper task (through [`Table`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct View {
    /// The TTL the server granted (the last answer's), or the caller's guess before that.
    pub(crate) ttl: Duration,
    /// Conservative local expiry: send time of the last answered renewal + `ttl`.
    pub(crate) expires_at: Instant,
    /// Whether `expires_at` is real (a grant or a keep-alive answer set it). A lease kept by id
    /// starts unconfirmed: `expires_at` is then only how long `keep` waits for the first answer.
    pub(crate) confirmed: bool,
    /// Answers with `ttl > 0` so far.
    pub(crate) renewals: u64,
    /// Set once, never cleared.
    pub(crate) lost: Option<Lost>,
}

impl View {
    /// Whether the lease is lost at `now`: marked so, or its local expiry has passed (a handle
    /// does not wait for the task to notice).
    pub(crate) fn is_lost(&self, now: Instant) -> bool {
        #[cfg(feature = "mutants")]
        if crate::mutants::lease_no_local_expiry() {
            return self.lost.is_some();
        }
        self.lost.is_some() || now >= self.expires_at
    }

    /// Whether the lease is at risk at `now`: confirmed, not lost, and less than a third of
    /// its TTL left before its local expiry (its renewals have fallen behind).
    pub(crate) fn is_at_risk(&self, now: Instant) -> bool {
        self.confirmed && !self.is_lost(now) && now >= self.at_risk_at()
    }

    /// When the lease falls at risk if no renewal comes first.
    pub(crate) fn at_risk_at(&self) -> Instant {
        at_risk_from(self.expires_at, self.ttl)
    }
}

/// What a keep-alive answer did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Renewed; the new local expiry.
    Renewed(Instant),
    /// Renewed after it had been reported at risk; the new local expiry.
    Recovered(Instant),
    /// The server says the lease is gone; it was dropped from the table.
    Gone,
    /// Renewed on the server, but after our local expiry: it was already reported lost, so it
    /// stays lost and was dropped from the table.
    Late,
    /// No request of ours was waiting for it (a lease forgotten meanwhile): ignored.
    Unexpected,
}

/// One kept lease.
#[derive(Debug)]
struct Entry {
    /// Which registration this is: a `forget` of an older one must not drop a newer one.
    generation: u64,
    /// Publishes the lease's [`View`] to its handles.
    view: watch::Sender<View>,
    /// Where the table's orderings hold it. One request in flight at a time: etcd answers a
    /// stream's requests in order, so a second one would only queue behind a slow first.
    keys: Keys,
}

/// Every lease the keeper renews, and what the current stream owes.
///
/// No operation walks every lease but [`Table::stream_lost`] (rare): the orderings in
/// [`Queues`] answer the rest in O(log n) each, and [`Table::due_at_most`] in O(k log n) for k
/// leases found due, so the work per renewal does not grow with the number of leases.
#[derive(Debug)]
pub(crate) struct Table {
    leases: HashMap<i64, Entry>,
    queues: Queues,
    /// Since when the current stream owes an answer without having given one (`None`: it owes
    /// nothing, or there is no stream).
    owed_since: Option<Instant>,
    /// Requests sent on the current stream and not yet answered, those of leases dropped
    /// since included: the server still answers them in turn, so they still fill its queue,
    /// and a stream that answers none of them is stalled even once their leases are gone.
    unanswered: usize,
    /// The current stream's recent round trips (for [`ttl::last_send_margin`]).
    round_trips: ttl::RoundTrips,
    /// Longest silence tolerated whatever the TTLs (the request timeout).
    max_silence: Duration,
}

impl Table {
    /// An empty table; a stream silent for `max_silence` with requests owed is dead whatever
    /// the TTLs.
    pub(crate) fn new(max_silence: Duration) -> Self {
        Table {
            leases: HashMap::new(),
            queues: Queues::default(),
            owed_since: None,
            unanswered: 0,
            round_trips: ttl::RoundTrips::default(),
            max_silence,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.leases.len()
    }

    /// Keep `id` (replacing an older registration of it), first renewal at `next_renewal`.
    /// The view comes in not lost (a new registration's).
    pub(crate) fn insert(
        &mut self,
        id: i64,
        generation: u64,
        view: watch::Sender<View>,
        next_renewal: Instant,
    ) {
        let (ttl, expires_at, confirmed) = {
            let v = view.borrow();
            debug_assert!(v.lost.is_none(), "a lost lease is never kept again");
            (v.ttl, v.expires_at, v.confirmed)
        };
        // An older registration's request in flight is no longer ours to wait for.
        self.remove(id);
        let keys = Keys {
            expires_at,
            next_renewal,
            ttl,
            stage: Stage::Waiting,
            risk: if confirmed {
                Risk::Watched
            } else {
                Risk::Unwatched
            },
        };
        self.queues.add(id, &keys);
        self.leases.insert(
            id,
            Entry {
                generation,
                view,
                keys,
            },
        );
    }

    /// Stop keeping `id` if `generation` is the registration kept; whether it was.
    pub(crate) fn forget(&mut self, id: i64, generation: u64) -> bool {
        if self
            .leases
            .get(&id)
            .is_some_and(|e| e.generation == generation)
        {
            // Its request, if one is in flight, is still owed by the stream.
            self.remove(id);
            return true;
        }
        false
    }

    /// The lease to open a stream with: the one closest to expiry that is still sent a
    /// renewal (else the one closest to expiry: a stream opens only with a message).
    pub(crate) fn most_urgent(&self) -> Option<i64> {
        self.queues
            .first_expiry_from(self.send_cutoff(Instant::now()))
            .or_else(|| self.queues.first_expiry())
            .map(|(_, id)| id)
    }

    /// Leases expiring before this instant are no longer sent a renewal
    /// ([`ttl::last_send_margin`]).
    fn send_cutoff(&self, now: Instant) -> Instant {
        let round_trip = self.round_trips.longest(now);
        let margin = self.queues.min_ttl().map_or(Duration::ZERO, |min_ttl| {
            ttl::last_send_margin(min_ttl, round_trip)
        });
        ttl::later(now, margin)
    }

    /// Leases due for a renewal at `now` with none in flight, closest to expiry first.
    #[cfg(test)]
    pub(crate) fn due(&mut self, now: Instant) -> Vec<i64> {
        self.due_at_most(now, usize::MAX)
    }

    /// The first `at_most` leases due for a renewal at `now` with none in flight, closest to
    /// expiry first (the rest stay due, in that order, for the next call), leaving out those
    /// too close to expiry to be saved ([`ttl::last_send_margin`]). Those due within
    /// [`ttl::batch_ahead`] of `now` count as due: they go out with this batch rather than each
    /// on a turn of its own. Costs O(log n) per lease newly found due and per lease returned:
    /// a stream that takes only a few requests per turn does not make each turn walk every
    /// lease still to send.
    pub(crate) fn due_at_most(&mut self, now: Instant, at_most: usize) -> Vec<i64> {
        let ahead = self
            .queues
            .min_ttl()
            .map_or(Duration::ZERO, ttl::batch_ahead);
        let horizon = later(now, ahead);
        while let Some(id) = self.queues.waiting_due(horizon) {
            self.rekey(id, |k| k.stage = Stage::Ready);
        }
        self.queues.ready(self.send_cutoff(now), at_most)
    }

    /// A renewal of `id` went out at `at`.
    pub(crate) fn sent(&mut self, id: i64, at: Instant) {
        if self.rekey(id, |k| k.stage = Stage::InFlight(at)) {
            self.unanswered += 1;
            self.owed_since.get_or_insert(at);
        }
    }

    /// A stream opened at `now`; the request that opened it is owed from now on (the time it
    /// took to open is not silence).
    pub(crate) fn stream_opened(&mut self, now: Instant) {
        self.refresh_owed(now);
    }

    /// The stream is gone: its requests will never be answered; renew everything at once on
    /// the next one (not after the next TTL/3: the etcd#7357 trap). Walks every lease: it
    /// happens once per stream.
    pub(crate) fn stream_lost(&mut self, now: Instant) {
        self.queues = Queues::default();
        for (id, entry) in &mut self.leases {
            entry.keys.stage = Stage::Waiting;
            entry.keys.next_renewal = now;
            self.queues.add(*id, &entry.keys);
        }
        self.owed_since = None;
        self.unanswered = 0;
        self.round_trips = ttl::RoundTrips::default();
    }

    /// The server answered a keep-alive of `id` with `ttl_secs`.
    pub(crate) fn answered(&mut self, id: i64, ttl_secs: i64) -> Answer {
        let now = Instant::now();
        self.unanswered = self.unanswered.saturating_sub(1);
        if let Some(Stage::InFlight(sent_at)) = self.leases.get(&id).map(|e| e.keys.stage) {
            self.round_trips
                .record(now, now.saturating_duration_since(sent_at));
        }
        let outcome = self.apply_answer(id, ttl_secs);
        if matches!(outcome, Answer::Gone | Answer::Late) {
            self.remove(id);
        }
        // Any answer proves the stream alive: what is still owed is owed from now.
        self.refresh_owed(now);
        outcome
    }

    /// What an answer does to the lease's view; a renewed lease waits for its next renewal.
    /// A lost one stays indexed: the caller drops it.
    fn apply_answer(&mut self, id: i64, ttl_secs: i64) -> Answer {
        let Some(entry) = self.leases.get(&id) else {
            return Answer::Unexpected;
        };
        let Stage::InFlight(sent_at) = entry.keys.stage else {
            return Answer::Unexpected;
        };
        // A TTL from the server is clamped to etcd's maximum: no value may overflow the
        // instants below (a panic here would kill the keeper task and every lease with it).
        let Some(ttl) = super::ttl::from_server(ttl_secs) else {
            entry.view.send_modify(|v| {
                v.lost.get_or_insert(Lost::Gone);
            });
            return Answer::Gone;
        };
        let mut outcome = Answer::Late;
        entry.view.send_modify(|v| {
            // The clock is read under the write lock: see the module docs.
            if v.is_lost(Instant::now()) {
                v.lost.get_or_insert(Lost::Expired);
                return;
            }
            let candidate = later(sent_at, ttl);
            // An unconfirmed expiry is only a wait bound: the first answer replaces it.
            if !v.confirmed || candidate > v.expires_at {
                v.expires_at = candidate;
            }
            v.ttl = ttl;
            v.confirmed = true;
            v.renewals += 1;
            outcome = Answer::Renewed(v.expires_at);
        });
        if let Answer::Renewed(expires_at) = outcome {
            let was = entry.keys.risk;
            self.rekey(id, |k| {
                k.expires_at = expires_at;
                k.ttl = ttl;
                k.next_renewal = later(sent_at, ttl / 3);
                k.stage = Stage::Waiting;
                k.risk = Risk::Watched;
            });
            if was == Risk::Reported {
                outcome = Answer::Recovered(expires_at);
            }
        }
        outcome
    }

    /// Mark every watched lease whose renewals have fallen behind at `now` (less than a third
    /// of its TTL left) as at risk; their ids, earliest first. Each is reported once until a
    /// renewal brings it back. O(log n) per lease reported.
    pub(crate) fn fall_at_risk(&mut self, now: Instant) -> Vec<i64> {
        let mut fallen = Vec::new();
        while let Some(id) = self.queues.falling_at_risk(now) {
            self.rekey(id, |k| k.risk = Risk::Reported);
            fallen.push(id);
        }
        fallen
    }

    /// How many kept leases are at risk now.
    pub(crate) fn at_risk(&self) -> usize {
        self.queues.at_risk()
    }

    /// When the next watched lease falls at risk if no renewal comes first.
    pub(crate) fn next_risk(&self) -> Option<Instant> {
        self.queues.next_risk()
    }

    /// Mark every lease whose local expiry has passed at `now` as lost and drop it; their ids,
    /// nearest to expiry first. O(log n) per lease expired.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<i64> {
        let mut expired = Vec::new();
        #[cfg(feature = "mutants")]
        if crate::mutants::lease_no_local_expiry() {
            return expired;
        }
        // No lease in the table is marked lost (it is dropped when marked), so its view is
        // lost at `now` exactly when its expiry has passed.
        while let Some((at, id)) = self.queues.first_expiry() {
            if at > now {
                break;
            }
            let Some(entry) = self.remove(id) else {
                // Cannot happen (the orderings hold only kept leases); never loop on it.
                break;
            };
            entry.view.send_modify(|v| {
                v.lost.get_or_insert(Lost::Expired);
            });
            expired.push(id);
        }
        // Their requests in flight, if any, are still owed by the stream.
        expired
    }

    /// How long the stream may owe an answer before it counts as dead: a third of the shortest
    /// TTL (by then the next renewal is due, and waiting longer eats into the lease), capped by
    /// the request timeout.
    pub(crate) fn silence_limit(&self) -> Duration {
        self.queues
            .min_ttl()
            .map_or(self.max_silence, |ttl| ttl / 3)
            .min(self.max_silence)
    }

    /// Whether the stream has owed an answer for longer than the silence limit at `now`.
    pub(crate) fn is_silent(&self, now: Instant) -> bool {
        self.owed_since
            .is_some_and(|since| now >= later(since, self.silence_limit()))
    }

    /// How many requests the stream owes answers to (those of leases dropped since included).
    pub(crate) fn in_flight(&self) -> usize {
        self.unanswered
    }

    /// How long the stream has owed an answer at `now`.
    pub(crate) fn owed_for(&self, now: Instant) -> Duration {
        self.owed_since
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }

    /// The next moment something happens by itself: a local expiry, and with a stream open
    /// (`stream_up`), a renewal falling due or the stream's silence limit.
    pub(crate) fn next_deadline(&self, stream_up: bool) -> Option<Instant> {
        let mut next = self.queues.first_expiry().map(|(at, _)| at);
        if stream_up {
            let renewals = self.queues.next_renewal(self.send_cutoff(Instant::now()));
            let silence = self.owed_since.map(|s| later(s, self.silence_limit()));
            next = [next, renewals, silence].into_iter().flatten().min();
        }
        next
    }

    /// Whether a deadline of [`next_deadline`](Self::next_deadline) (with a stream open) or
    /// a lease falling at risk has come at `now`.
    pub(crate) fn is_due(&self, now: Instant) -> bool {
        let due = |at: Option<Instant>| at.is_some_and(|at| at <= now);
        due(self.next_deadline(true)) || due(self.next_risk())
    }

    /// What is owed after an answer or a removal: nothing if no request is in flight.
    fn refresh_owed(&mut self, now: Instant) {
        self.owed_since = (self.unanswered > 0).then_some(now);
    }

    /// Drop `id` from the leases and the orderings.
    fn remove(&mut self, id: i64) -> Option<Entry> {
        let entry = self.leases.remove(&id)?;
        self.queues.remove(id, &entry.keys);
        Some(entry)
    }

    /// Change `id`'s keys, keeping the orderings in step; whether it is kept.
    fn rekey(&mut self, id: i64, change: impl FnOnce(&mut Keys)) -> bool {
        let Some(entry) = self.leases.get_mut(&id) else {
            return false;
        };
        let old = entry.keys;
        change(&mut entry.keys);
        self.queues.update(id, &old, &entry.keys);
        true
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "state_risk_tests.rs"]
mod risk_tests;

#[cfg(test)]
#[path = "state_model_tests.rs"]
mod model_tests;
