//! One member's pace: how long a call waits for its answer before hedging elsewhere, and whether
//! it is suspected of stalling, both judged against its own recent latency (no IO here).
//!
//! A fixed hedge delay (the 300 ms attempt timeout) is right for no member: a member answering
//! serializable reads in 0.2 ms that says nothing for 300 ms stalled long ago, and one that
//! always takes 200 ms under a heavy range is not stalled at all. So the delay follows the
//! member: [`TAIL_FACTOR`] times its recent [`TAIL_QUANTILE`] latency, clamped between
//! [`HEDGE_FLOOR`] and the caller's cap (the attempt timeout, or a third of what is left of the
//! deadline); with too few samples, the cap.
//!
//! An attempt still owed past that delay makes its member *suspected*: the balancer sends it
//! no new calls while a healthy member can take them. Suspicion is not ejection: it costs the
//! member nothing but traffic, clears on the first timely answer, and lapses by itself after
//! [`SUSPECT_HOLD`]; ejection stays with the fixed timers (probe timeout, attempt timeout),
//! which are the upper bound on how long a stalled member is used.
//!
//! ```text
//!            an attempt here is overdue (owed past this member's hedge delay)
//!   +-------+ ---------------------------------------------------> +-----------+
//!   | Clear |                                                      | Suspected |
//!   +-------+ <--------------------------------------------------- +-----------+
//!          a call answered within the hedge delay, a probe sent after the
//!          suspicion answered, or SUSPECT_HOLD is over
//! ```

use std::time::Duration;

use tokio::time::Instant;

use super::latency::LatencyWindow;

/// Which latency is the member's tail: 1 call in 100 is slower.
pub(crate) const TAIL_QUANTILE: f64 = 0.99;

/// The hedge waits this many times the tail: by then a call is slower than 99 % of the
/// member's recent calls by a wide margin, so in steady state well under 1 % of calls hedge
/// (the histogram rounds its quantile up too, by up to half a bucket).
pub(crate) const TAIL_FACTOR: u32 = 2;

/// The shortest hedge delay.
///
/// 5 ms: below a few milliseconds, lateness is mostly the box and not the member: a
/// scheduler time slice on a loaded machine, a tokio timer tick (1 ms), a GC or fsync hiccup of
/// the server. Hedging sooner would copy healthy calls for nothing; 5 ms still keeps a stalled
/// member's cost to a read far below the 30 ms that an application notices.
pub(crate) const HEDGE_FLOOR: Duration = Duration::from_millis(5);

/// How long a suspicion lasts without news.
///
/// 500 ms: the probe interval. By then a probe sent after the suspicion has answered (and
/// cleared it) or is still owed, and the prober's own timeout ejects the member within its
/// bound; a member wrongly suspected loses its share of calls for at most this long.
pub(crate) const SUSPECT_HOLD: Duration = Duration::from_millis(500);

/// An answer owed this many times the member's tail counts against it (ejects it): twice the
/// hedge's margin, since ejection costs far more than a hedge. A member answering in 0.2 ms is
/// blamed by the fixed timers as before; one that a saturated box slows to a 400 ms tail is not
/// blamed for a 500 ms answer.
pub(crate) const BLAME_FACTOR: u32 = 4;

/// Times a member's pace that a long-lived stream (watch, keep-alive) may owe it an answer
/// before the stream counts as stalled and moves: a wide margin, since a move reopens the
/// stream (a hedge copies one call; it waits [`TAIL_FACTOR`] times the tail).
pub(crate) const STALL_FACTOR: u32 = 8;

/// The shortest stall limit: below it, lateness is the box (a scheduler slice, an fsync
/// hiccup), not the member.
pub(crate) const STALL_FLOOR: Duration = Duration::from_millis(100);

/// How long a stream may owe an answer from a member whose pace is `pace` before it is
/// stalled: [`STALL_FACTOR`] times the pace within [`STALL_FLOOR`]..`cap`; `cap` (the stream's
/// fixed rule) while the pace is unknown.
pub(crate) fn stall_limit(pace: Option<Duration>, cap: Duration) -> Duration {
    match pace {
        Some(pace) => (pace * STALL_FACTOR).max(STALL_FLOOR).min(cap),
        None => cap,
    }
}

/// A member's latency window and suspicion, changed together behind one lock.
#[derive(Clone, Debug)]
pub(crate) struct Pace {
    window: LatencyWindow,
    /// When the current suspicion began; `None`: not suspected.
    suspected_at: Option<Instant>,
}

impl Pace {
    /// A member with no history, not suspected.
    pub(crate) fn new(now: Instant) -> Self {
        Pace {
            window: LatencyWindow::new(now),
            suspected_at: None,
        }
    }

    /// How long an attempt sent here at `now` may take before it is overdue, at most `cap`;
    /// `None` until the member has answered enough calls to know its tail.
    pub(crate) fn hedge_delay(&mut self, cap: Duration, now: Instant) -> Option<Duration> {
        let tail = self.window.quantile(TAIL_QUANTILE, now)?;
        Some(tail.saturating_mul(TAIL_FACTOR).max(HEDGE_FLOOR).min(cap))
    }

    /// The member's recent tail latency (its p99), once it has answered enough calls.
    pub(crate) fn tail(&mut self, now: Instant) -> Option<Duration> {
        self.window.quantile(TAIL_QUANTILE, now)
    }

    /// Whether an answer owed for `age` at `now` is overdue by this member's own pace: past
    /// [`BLAME_FACTOR`] times its tail, or at all while its pace is unknown. (The caller's
    /// fixed timer, the attempt timeout, has run out too: this only spares a member that is
    /// slow all the time.)
    pub(crate) fn is_overdue(&mut self, age: Duration, now: Instant) -> bool {
        self.window
            .quantile(TAIL_QUANTILE, now)
            .is_none_or(|tail| age >= tail.saturating_mul(BLAME_FACTOR))
    }

    /// A call here answered in `latency` at `now`: one more sample, and an answer within the
    /// hedge delay (`cap` without history) clears a suspicion.
    pub(crate) fn answered(&mut self, latency: Duration, cap: Duration, now: Instant) {
        self.window.record(latency, now);
        // The hedge delay only when there is a suspicion to clear: the window's quantile is
        // read once a call (before it is sent), not twice.
        if self.suspected_at.is_some() {
            let due = self.hedge_delay(cap, now).unwrap_or(cap);
            if latency <= due {
                self.suspected_at = None;
            }
        }
    }

    /// A probe sent at `started` answered: the member answers requests sent after the
    /// suspicion began, so it is not stalled now.
    pub(crate) fn probe_answered(&mut self, started: Instant) {
        if self.suspected_at.is_some_and(|at| started >= at) {
            self.suspected_at = None;
        }
    }

    /// An attempt here is overdue at `now`: suspect the member. Returns whether that is news
    /// (it was not suspected already).
    pub(crate) fn suspect(&mut self, now: Instant) -> bool {
        if self.is_suspected(now) {
            return false;
        }
        self.suspected_at = Some(now);
        true
    }

    /// Whether the member is suspected at `now`.
    pub(crate) fn is_suspected(&self, now: Instant) -> bool {
        self.suspected_at.is_some_and(|at| now < at + SUSPECT_HOLD)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: Duration = Duration::from_millis(300);

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn fed(latency: Duration, n: u32) -> Pace {
        let mut p = Pace::new(Instant::now());
        for _ in 0..n {
            p.answered(latency, CAP, Instant::now());
        }
        p
    }

    #[tokio::test(start_paused = true)]
    async fn the_cap_until_the_member_has_a_history() {
        let mut p = fed(us(200), super::super::latency::MIN_SAMPLES - 1);
        assert_eq!(p.hedge_delay(CAP, Instant::now()), None);
        p.answered(us(200), CAP, Instant::now());
        assert!(p.hedge_delay(CAP, Instant::now()).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_fast_member_is_hedged_at_the_floor() {
        // p99 200 µs (bucket bound 256 µs) x 2 is well under the floor.
        let mut p = fed(us(200), 100);
        assert_eq!(p.hedge_delay(CAP, Instant::now()), Some(HEDGE_FLOOR));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slower_member_is_hedged_at_a_multiple_of_its_tail_within_the_cap() {
        // 12 ms answers: bucket bound 12.288 ms, doubled.
        let mut p = fed(ms(12), 100);
        assert_eq!(p.hedge_delay(CAP, Instant::now()), Some(us(24_576)));
        // A short deadline's cap wins.
        assert_eq!(p.hedge_delay(ms(10), Instant::now()), Some(ms(10)));
        // A member that takes longer than the cap is hedged at the cap.
        let mut slow = fed(ms(400), 100);
        assert_eq!(slow.hedge_delay(CAP, Instant::now()), Some(CAP));
    }

    #[tokio::test(start_paused = true)]
    async fn the_delay_follows_a_change_of_pace() {
        let mut p = fed(ms(12), 100);
        tokio::time::advance(super::super::latency::GENERATION).await;
        for _ in 0..100 {
            p.answered(us(200), CAP, Instant::now());
        }
        tokio::time::advance(super::super::latency::GENERATION).await;
        assert_eq!(p.hedge_delay(CAP, Instant::now()), Some(HEDGE_FLOOR));
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_answer_is_overdue_unless_the_member_is_always_that_slow() {
        // Unknown pace: the fixed timers decide.
        let mut p = Pace::new(Instant::now());
        assert!(p.is_overdue(CAP, Instant::now()));
        // A fast member owing 300 ms is overdue.
        let mut fast = fed(us(200), 100);
        assert!(fast.is_overdue(CAP, Instant::now()));
        // A member whose tail is 400 ms (a saturated box) is not, until 4 x its tail.
        let mut loaded = fed(ms(400), 100);
        assert!(!loaded.is_overdue(ms(500), Instant::now()));
        assert!(!loaded.is_overdue(ms(1500), Instant::now()));
        assert!(loaded.is_overdue(ms(2100), Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn suspicion_clears_on_a_timely_answer_only() {
        let mut p = fed(us(200), 100);
        assert!(!p.is_suspected(Instant::now()));
        assert!(p.suspect(Instant::now()));
        assert!(!p.suspect(Instant::now()), "not news the second time");
        assert!(p.is_suspected(Instant::now()));
        // A late answer (past the 5 ms delay) does not clear it...
        p.answered(ms(40), CAP, Instant::now());
        assert!(p.is_suspected(Instant::now()));
        // ...a timely one does.
        p.answered(us(300), CAP, Instant::now());
        assert!(!p.is_suspected(Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_probe_sent_after_the_suspicion_clears_it() {
        let mut p = Pace::new(Instant::now());
        let before = Instant::now();
        tokio::time::advance(ms(10)).await;
        p.suspect(Instant::now());
        p.probe_answered(before);
        assert!(p.is_suspected(Instant::now()), "that probe was sent before");
        tokio::time::advance(ms(1)).await;
        p.probe_answered(Instant::now());
        assert!(!p.is_suspected(Instant::now()));
    }

    #[test]
    fn a_stream_stalls_at_a_multiple_of_its_members_pace_within_bounds() {
        assert_eq!(stall_limit(None, CAP), CAP);
        assert_eq!(stall_limit(Some(us(200)), CAP), STALL_FLOOR);
        assert_eq!(stall_limit(Some(ms(20)), CAP), ms(160));
        assert_eq!(stall_limit(Some(ms(200)), CAP), CAP);
        // A cap under the floor wins: the stream's fixed rule is the upper bound.
        assert_eq!(stall_limit(Some(us(200)), ms(50)), ms(50));
    }

    #[tokio::test(start_paused = true)]
    async fn suspicion_lapses_after_the_hold() {
        let mut p = Pace::new(Instant::now());
        p.suspect(Instant::now());
        tokio::time::advance(SUSPECT_HOLD - ms(1)).await;
        assert!(p.is_suspected(Instant::now()));
        tokio::time::advance(ms(1)).await;
        assert!(!p.is_suspected(Instant::now()));
        // Overdue again: suspected again, a fresh hold.
        assert!(p.suspect(Instant::now()));
        assert!(p.is_suspected(Instant::now()));
    }
}
