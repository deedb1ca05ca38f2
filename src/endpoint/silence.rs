//! A member's silence: since when it has owed an answer that needs the leader without giving
//! one, so that a leader-bound call about to be sent can see at once that the leader stalled
//! (no IO, no lock: one atomic).
//!
//! A debt starts when a prompt leader-bound attempt or a probe goes out while nothing is owed,
//! and ends only when the member *serves* such a request (a write or linearizable read
//! answered, a probe's linearizable read done). A call that its caller drops leaves its debt
//! behind: the member never answered it, and that is the one thing the next call must know
//! (an application that times out its own calls drops every call it sends to a frozen leader,
//! and nothing else would tell the client). The debt blames nobody: it never ejects, it only
//! makes leader-bound calls wait for the leader to answer again or for the next leader (see
//! `Balancer::leader_stall`), and a waiting call wakes the probers, whose next read on a
//! healthy member ends it within a round trip.
//!
//! ```text
//!            owe (nothing owed)                    owed longer than the stall limit
//!   +-------+ -----------------> +-------+ ---------------------------------------> +---------+
//!   | Clear |                    | Owing |                                         | Stalled |
//!   +-------+ <----------------- +-------+ <--------------------------------------- +---------+
//!                 served                                   served
//! ```

use std::time::Duration;

use tokio::time::Instant;

use super::atomic_instant::AtomicInstant;

/// A member owing past this many times its pace (the slower of its calls' tail and its
/// smoothed latency) has stalled. 2, not the 8 of a stream's stall limit: a wrong judgment
/// only makes leader-bound calls wait until the member serves the next request (a probe's
/// read, a round trip away, since a waiting call wakes the probers), while a late one sends
/// them to a frozen leader. On a loaded box (a 100 ms tail), 8 x pace reached the 1 s cap,
/// as long as an application's own deadline, and the second put went to the frozen leader.
pub(crate) const SILENCE_FACTOR: u32 = 2;

/// The shortest silence judged a stall: below it, lateness is the box (a scheduler slice, an
/// fsync hiccup), not the member.
pub(crate) const SILENCE_FLOOR: Duration = Duration::from_millis(100);

/// The longest: a member that has owed answers this long has stalled, however slow it was
/// before; half of a typical 1 s application deadline, so that a call made then still has time
/// to reach the next leader.
pub(crate) const SILENCE_CAP: Duration = Duration::from_millis(500);

/// How long a member whose pace is `pace` may owe answers before it has stalled.
pub(crate) fn silence_limit(pace: Option<Duration>) -> Duration {
    pace.map_or(SILENCE_CAP, |p| {
        (p * SILENCE_FACTOR).clamp(SILENCE_FLOOR, SILENCE_CAP)
    })
}

/// The oldest unanswered debt (`None`: nothing owed).
#[derive(Debug)]
pub(crate) struct Silence {
    owed_since: AtomicInstant,
}

impl Silence {
    /// Nothing owed.
    pub(crate) fn new(now: Instant) -> Self {
        Silence {
            owed_since: AtomicInstant::new(now),
        }
    }

    /// A request that needs the leader went out at `now`: a debt starts unless one is on.
    pub(crate) fn owe(&self, now: Instant) {
        self.owed_since.set_if_none(now);
    }

    /// The member served a request that needed the leader: nothing is owed.
    pub(crate) fn served(&self) {
        self.owed_since.clear();
    }

    /// Whether the member owes an answer at all (one atomic load: callers check it before
    /// reading the clock, which costs more than the load on the hot path).
    pub(crate) fn owes(&self) -> bool {
        self.owed_since.is_set()
    }

    /// Since when the member has owed an answer, if for at least `limit` at `now`.
    pub(crate) fn stalled_since(&self, limit: Duration, now: Instant) -> Option<Instant> {
        let since = self.owed_since.get()?;
        (now.saturating_duration_since(since) >= limit).then_some(since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_millis(100);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_limit_is_twice_the_pace_within_bounds() {
        assert_eq!(silence_limit(None), SILENCE_CAP);
        assert_eq!(silence_limit(Some(ms(2))), SILENCE_FLOOR);
        assert_eq!(silence_limit(Some(ms(100))), ms(200));
        assert_eq!(silence_limit(Some(ms(400))), SILENCE_CAP);
    }

    #[tokio::test(start_paused = true)]
    async fn a_debt_stalls_the_member_at_the_limit_and_serving_ends_it() {
        let s = Silence::new(Instant::now());
        assert_eq!(s.stalled_since(LIMIT, Instant::now()), None, "nothing owed");
        tokio::time::advance(ms(5)).await;
        let sent = Instant::now();
        s.owe(sent);
        tokio::time::advance(LIMIT - ms(1)).await;
        assert_eq!(s.stalled_since(LIMIT, Instant::now()), None, "not yet");
        tokio::time::advance(ms(1)).await;
        assert_eq!(s.stalled_since(LIMIT, Instant::now()), Some(sent));
        s.served();
        assert_eq!(s.stalled_since(LIMIT, Instant::now()), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_debt_counts_and_a_later_one_does_not_move_it() {
        let s = Silence::new(Instant::now());
        let first = Instant::now();
        s.owe(first);
        tokio::time::advance(ms(60)).await;
        s.owe(Instant::now());
        tokio::time::advance(ms(40)).await;
        assert_eq!(s.stalled_since(LIMIT, Instant::now()), Some(first));
    }

    #[tokio::test(start_paused = true)]
    async fn a_debt_outlives_the_call_that_made_it_until_the_member_serves() {
        // The caller dropped its call long ago; the member never answered anything since.
        let s = Silence::new(Instant::now());
        s.owe(Instant::now());
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(s.stalled_since(LIMIT, Instant::now()).is_some());
        s.served();
        s.owe(Instant::now());
        assert_eq!(s.stalled_since(LIMIT, Instant::now()), None, "a new debt");
    }
}
