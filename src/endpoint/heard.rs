//! When a member's long-lived streams last brought news (keep-alive answers, watch events):
//! what tells a member that is slow to answer probes and calls because it is overloaded from
//! one that is gone (no IO, no lock: one atomic).
//!
//! A frozen, killed or cut-off member stops answering everything at once: its streams' last
//! news predates any call still waiting on it. An overloaded leader (every core busy renewing
//! hundreds of thousands of leases) answers a probe's Status late, yet its keep-alive streams
//! keep answering. Ejecting it moves every stream to a follower, which forwards each renewal
//! back to it one at a time: on this project's 2-core box, 300,000 leases on four streams lost
//! ~100,000 that way, to 14 ejections of the live leader. So a late answer blames the member
//! only when its streams fell silent too: nothing heard in the second half of the wait.

use tokio::time::Instant;

use super::atomic_instant::AtomicInstant;

/// The newest news from the member's streams (`None`: nothing heard yet).
#[derive(Debug)]
pub(crate) struct Heard {
    at: AtomicInstant,
}

impl Heard {
    /// Nothing heard yet.
    pub(crate) fn new(now: Instant) -> Self {
        Heard {
            at: AtomicInstant::new(now),
        }
    }

    /// A stream on the member brought news at `now` (called once per burst of answers, so a
    /// hot stream costs one atomic per burst).
    pub(crate) fn news(&self, now: Instant) {
        self.at.set_max(now);
    }

    /// Whether a stream brought news at or after `at`.
    pub(crate) fn since(&self, at: Instant) -> bool {
        self.at.at_or_after(at)
    }

    /// Whether the member kept answering its streams while a request sent at `started` waited
    /// until `now`: news in the second half of that wait. Then the request's silence is load,
    /// not a stall, and it must not eject the member (it may still suspect it). Half, not
    /// all: answers already on the wire when a member froze arrive within a round trip, never
    /// half a probe's timeout later.
    pub(crate) fn still_answering(&self, started: Instant, now: Instant) -> bool {
        self.since(started + now.saturating_duration_since(started) / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_heard_is_never_answering() {
        let heard = Heard::new(Instant::now());
        let started = Instant::now();
        tokio::time::advance(ms(1000)).await;
        assert!(!heard.since(started));
        assert!(!heard.still_answering(started, Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn news_late_in_the_wait_is_load_and_news_early_in_it_is_a_stall() {
        let heard = Heard::new(Instant::now());
        let started = Instant::now();
        // A member frozen 10 ms into the wait: its last answers came then.
        tokio::time::advance(ms(10)).await;
        heard.news(Instant::now());
        tokio::time::advance(ms(990)).await;
        assert!(heard.since(started));
        assert!(!heard.still_answering(started, Instant::now()));
        // An overloaded one keeps answering to the end.
        tokio::time::advance(ms(500)).await;
        heard.news(Instant::now());
        assert!(heard.still_answering(started, Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn older_news_never_replaces_newer() {
        let heard = Heard::new(Instant::now());
        let old = Instant::now();
        tokio::time::advance(ms(100)).await;
        let new = Instant::now();
        heard.news(new);
        heard.news(old);
        assert!(heard.since(new));
    }
}
