//! The table against a naive model of itself: the previous algorithm, which walks every lease
//! for every answer, driven by the same seeded random operations; every answer must agree.

use std::collections::HashMap;

use super::*;

/// The bookkeeping as it was before the orderings: every query walks every lease.
struct Naive {
    leases: HashMap<i64, NaiveEntry>,
    owed_since: Option<Instant>,
    /// Requests sent on the stream and not answered (dropped leases' included).
    unanswered: usize,
    round_trips: super::super::ttl::RoundTrips,
    max_silence: Duration,
}

struct NaiveEntry {
    generation: u64,
    view: watch::Sender<View>,
    ttl: Duration,
    next_renewal: Instant,
    in_flight: Option<Instant>,
    /// Found due by `due` and not sent since (the table's `Stage::Ready`).
    ready: bool,
}

impl NaiveEntry {
    fn expires_at(&self) -> Instant {
        self.view.borrow().expires_at
    }
}

impl Naive {
    fn insert(&mut self, id: i64, generation: u64, view: watch::Sender<View>, next: Instant) {
        let ttl = view.borrow().ttl;
        let entry = NaiveEntry {
            generation,
            view,
            ttl,
            next_renewal: next,
            in_flight: None,
            ready: false,
        };
        self.leases.insert(id, entry);
    }

    fn forget(&mut self, id: i64, generation: u64) -> bool {
        if self
            .leases
            .get(&id)
            .is_some_and(|e| e.generation == generation)
        {
            self.leases.remove(&id);
            return true;
        }
        false
    }

    /// Leases expiring before this are not sent a renewal (the table's rule, walked).
    fn send_cutoff(&self, now: Instant) -> Instant {
        let shortest = self.leases.values().map(|e| e.ttl).min();
        let trip = self.round_trips.longest(now);
        let margin = shortest.map_or(Duration::ZERO, |ttl| {
            super::super::ttl::last_send_margin(ttl, trip)
        });
        later(now, margin)
    }

    /// Ties broken by id, as the table's ordering does (the old code left them unspecified).
    fn most_urgent(&self) -> Option<i64> {
        let cutoff = self.send_cutoff(Instant::now());
        let by_expiry = |(id, e): (&i64, &NaiveEntry)| (e.expires_at(), *id);
        let sendable = self
            .leases
            .iter()
            .map(by_expiry)
            .filter(|(at, _)| *at >= cutoff);
        let urgent = sendable
            .min()
            .or_else(|| self.leases.iter().map(by_expiry).min());
        urgent.map(|(_, id)| id)
    }

    fn due(&mut self, now: Instant) -> Vec<i64> {
        let cutoff = self.send_cutoff(now);
        // Those due within the batch's reach go with it (the table's rule, walked).
        let shortest = self.leases.values().map(|e| e.ttl).min();
        let horizon = later(
            now,
            shortest.map_or(Duration::ZERO, super::super::ttl::batch_ahead),
        );
        for e in self.leases.values_mut() {
            if e.in_flight.is_none() && e.next_renewal <= horizon {
                e.ready = true;
            }
        }
        let mut due: Vec<(Instant, i64)> = self
            .leases
            .iter()
            .filter(|(_, e)| e.ready && e.expires_at() >= cutoff)
            .map(|(id, e)| (e.expires_at(), *id))
            .collect();
        due.sort_unstable();
        due.into_iter().map(|(_, id)| id).collect()
    }

    fn sent(&mut self, id: i64, at: Instant) {
        if let Some(entry) = self.leases.get_mut(&id) {
            entry.in_flight = Some(at);
            entry.ready = false;
            self.unanswered += 1;
            self.owed_since.get_or_insert(at);
        }
    }

    fn stream_opened(&mut self, now: Instant) {
        self.refresh_owed(now);
    }

    fn stream_lost(&mut self, now: Instant) {
        for entry in self.leases.values_mut() {
            entry.in_flight = None;
            entry.ready = false;
            entry.next_renewal = now;
        }
        self.owed_since = None;
        self.unanswered = 0;
        self.round_trips = Default::default();
    }

    fn answered(&mut self, id: i64, ttl_secs: i64) -> Answer {
        let now = Instant::now();
        self.unanswered = self.unanswered.saturating_sub(1);
        if let Some(sent) = self.leases.get(&id).and_then(|e| e.in_flight) {
            self.round_trips.record(now, now - sent);
        }
        let outcome = self.apply_answer(id, ttl_secs);
        if matches!(outcome, Answer::Gone | Answer::Late) {
            self.leases.remove(&id);
        }
        self.refresh_owed(now);
        outcome
    }

    fn apply_answer(&mut self, id: i64, ttl_secs: i64) -> Answer {
        let Some(entry) = self.leases.get_mut(&id) else {
            return Answer::Unexpected;
        };
        let Some(sent_at) = entry.in_flight.take() else {
            return Answer::Unexpected;
        };
        let Some(ttl) = super::super::ttl::from_server(ttl_secs) else {
            entry.view.send_modify(|v| {
                v.lost.get_or_insert(Lost::Gone);
            });
            return Answer::Gone;
        };
        let mut outcome = Answer::Late;
        entry.view.send_modify(|v| {
            if v.is_lost(Instant::now()) {
                v.lost.get_or_insert(Lost::Expired);
                return;
            }
            let candidate = later(sent_at, ttl);
            if !v.confirmed || candidate > v.expires_at {
                v.expires_at = candidate;
            }
            v.ttl = ttl;
            v.confirmed = true;
            v.renewals += 1;
            outcome = Answer::Renewed(v.expires_at);
        });
        entry.ttl = ttl;
        entry.next_renewal = later(sent_at, ttl / 3);
        outcome
    }

    /// Sorted (the old code returned them in hash order).
    fn expire(&mut self, now: Instant) -> Vec<i64> {
        let mut expired: Vec<i64> = self
            .leases
            .iter()
            .filter(|(_, e)| e.view.borrow().is_lost(now))
            .map(|(id, _)| *id)
            .collect();
        expired.sort_unstable();
        for id in &expired {
            if let Some(entry) = self.leases.remove(id) {
                entry.view.send_modify(|v| {
                    v.lost.get_or_insert(Lost::Expired);
                });
            }
        }
        expired
    }

    fn silence_limit(&self) -> Duration {
        let shortest = self.leases.values().map(|e| e.ttl / 3).min();
        shortest.unwrap_or(self.max_silence).min(self.max_silence)
    }

    fn is_silent(&self, now: Instant) -> bool {
        self.owed_since
            .is_some_and(|since| now >= later(since, self.silence_limit()))
    }

    fn owed_for(&self, now: Instant) -> Duration {
        self.owed_since
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }

    fn next_deadline(&self, stream_up: bool) -> Option<Instant> {
        let mut next = self.leases.values().map(NaiveEntry::expires_at).min();
        if stream_up {
            // Found-due leases count only while one of them is still sent a renewal.
            let cutoff = self.send_cutoff(Instant::now());
            let sendable = self
                .leases
                .values()
                .any(|e| e.ready && e.expires_at() >= cutoff);
            let idle = self
                .leases
                .values()
                .filter(|e| e.in_flight.is_none() && (sendable || !e.ready));
            let renewals = idle.map(|e| e.next_renewal).min();
            let silence = self.owed_since.map(|s| later(s, self.silence_limit()));
            next = [next, renewals, silence].into_iter().flatten().min();
        }
        next
    }

    fn refresh_owed(&mut self, now: Instant) {
        self.owed_since = (self.unanswered > 0).then_some(now);
    }
}

/// xorshift64: a seeded, dependency-free source of operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// In `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A view for both tables, the same for each.
fn view(ttl: Duration, confirmed: bool) -> View {
    View {
        ttl,
        expires_at: Instant::now() + ttl,
        confirmed,
        renewals: 0,
        lost: None,
    }
}

/// Everything either table says at `now`, compared.
fn agree(t: &Table, n: &Naive, now: Instant, step: usize) {
    assert_eq!(t.len(), n.leases.len(), "len at step {step}");
    assert_eq!(
        t.most_urgent(),
        n.most_urgent(),
        "most_urgent at step {step}"
    );
    assert_eq!(
        t.silence_limit(),
        n.silence_limit(),
        "silence_limit at step {step}"
    );
    assert_eq!(
        t.is_silent(now),
        n.is_silent(now),
        "is_silent at step {step}"
    );
    assert_eq!(t.owed_for(now), n.owed_for(now), "owed_for at step {step}");
    for up in [false, true] {
        let (got, want) = (t.next_deadline(up), n.next_deadline(up));
        assert_eq!(got, want, "next_deadline({up}) at step {step}");
    }
    // The orderings, kept by partial updates, are what indexing every lease afresh gives.
    let mut rebuilt = Queues::default();
    for (id, entry) in &t.leases {
        rebuilt.add(*id, &entry.keys);
    }
    assert_eq!(t.queues, rebuilt, "orderings at step {step}");
}

async fn run_against_the_model(seed: u64) {
    let mut rng = Rng(seed);
    let mut t = Table::new(Duration::from_secs(5));
    let mut n = Naive {
        leases: HashMap::new(),
        owed_since: None,
        unanswered: 0,
        round_trips: Default::default(),
        max_silence: Duration::from_secs(5),
    };
    // Each lease's receivers (table's, model's) and its latest generation.
    let mut views: HashMap<i64, (watch::Receiver<View>, watch::Receiver<View>)> = HashMap::new();
    let mut generations: HashMap<i64, u64> = HashMap::new();
    let mut generation = 0;
    for step in 0..4000 {
        let now = Instant::now();
        let id = i64::try_from(rng.below(40)).unwrap_or(0);
        match rng.below(100) {
            0..=14 => {
                let ms = rng.below(2500);
                tokio::time::advance(Duration::from_millis(ms)).await;
            }
            15..=24 => {
                generation += 1;
                let ttl = Duration::from_secs(2 + rng.below(9));
                let confirmed = rng.below(4) != 0;
                let next = if confirmed { now + ttl / 3 } else { now };
                let (tx_t, rx_t) = watch::channel(view(ttl, confirmed));
                let (tx_n, rx_n) = watch::channel(view(ttl, confirmed));
                t.insert(id, generation, tx_t, next);
                n.insert(id, generation, tx_n, next);
                views.insert(id, (rx_t, rx_n));
                generations.insert(id, generation);
            }
            25..=29 => {
                // The kept registration or an older one.
                let kept = generations.get(&id).copied().unwrap_or(0);
                let g = kept.saturating_sub(rng.below(2));
                assert_eq!(t.forget(id, g), n.forget(id, g), "forget at step {step}");
            }
            30..=49 => {
                let due = t.due_at_most(now, usize::MAX);
                assert_eq!(due, n.due(now), "due at step {step}");
                // A stream that takes only some of them.
                let take = usize::try_from(rng.below(due.len() as u64 + 1)).unwrap_or(0);
                assert_eq!(t.due_at_most(now, take), due[..take], "due_at_most {step}");
                for id in &due[..take] {
                    t.sent(*id, now);
                    n.sent(*id, now);
                }
            }
            50..=52 => {
                // The first request of a new stream (possibly already in flight: replaced).
                let first = t.most_urgent();
                if let Some(id) = first {
                    t.sent(id, now);
                    n.sent(id, now);
                }
            }
            53..=79 => {
                let ttl = match rng.below(20) {
                    0 => 0,
                    1 => -1,
                    2 => i64::MAX,
                    _ => i64::try_from(2 + rng.below(9)).unwrap_or(2),
                };
                assert_eq!(
                    t.answered(id, ttl),
                    n.answered(id, ttl),
                    "answer at step {step}"
                );
            }
            80..=89 => {
                let mut expired = t.expire(now);
                expired.sort_unstable();
                assert_eq!(expired, n.expire(now), "expire at step {step}");
            }
            90..=94 => {
                t.stream_lost(now);
                n.stream_lost(now);
            }
            _ => {
                t.stream_opened(now);
                n.stream_opened(now);
            }
        }
        agree(&t, &n, Instant::now(), step);
        if let Some((rx_t, rx_n)) = views.get(&id) {
            let (a, b) = (*rx_t.borrow(), *rx_n.borrow());
            assert_eq!(
                (a.ttl, a.expires_at, a.confirmed, a.renewals, a.lost),
                (b.ttl, b.expires_at, b.confirmed, b.renewals, b.lost),
                "view of {id} at step {step}",
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_table_agrees_with_the_naive_model() {
    for seed in [1, 0x9e37_79b9_7f4a_7c15, 42, 7_777_777, 0xdead_beef] {
        run_against_the_model(seed).await;
    }
}
