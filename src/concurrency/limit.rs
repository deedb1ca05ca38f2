//! The campaign frequency guard: at most N won campaigns in a sliding window (PD: 3 in 5 min).
//!
//! # Why count wins and not attempts
//!
//! PD counts every campaign attempt, but a PD member campaigns only while it is the etcd raft
//! leader, so only one member ever campaigns. Here every candidate may campaign; after each
//! leader change all of them try at once and all but one lose. Counting those lost attempts
//! would lock every candidate out after a few leader changes, leaving no leader at all. A
//! candidate that keeps *winning* and losing leadership, though, is the one that flaps (its
//! link to etcd is bad, or it cannot keep its lease): the guard stops that one and lets the
//! others lead. Losing attempts are bounded anyway: a loser watches the winner and campaigns
//! again only once the winner is gone.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// Wins within the window, oldest first. No IO; the caller passes the time.
#[derive(Debug)]
pub(crate) struct CampaignLimit {
    /// At most this many wins in `window`; `None` turns the guard off.
    max: Option<usize>,
    /// The sliding window.
    window: Duration,
    /// When each recent win happened, oldest first; never longer than `max`.
    wins: VecDeque<Instant>,
}

impl CampaignLimit {
    /// At most `max` wins in `window`.
    pub(crate) fn new(max: usize, window: Duration) -> Self {
        CampaignLimit {
            max: Some(max),
            window,
            wins: VecDeque::new(),
        }
    }

    /// No limit.
    pub(crate) fn off() -> Self {
        CampaignLimit {
            max: None,
            window: Duration::ZERO,
            wins: VecDeque::new(),
        }
    }

    /// The limit and its window, if on.
    pub(crate) fn settings(&self) -> Option<(usize, Duration)> {
        self.max.map(|max| (max, self.window))
    }

    /// May a campaign start at `now`? `Err(retry_after)` if `max` wins already happened in the
    /// window: the time until the oldest of them leaves it.
    pub(crate) fn check(&mut self, now: Instant) -> Result<(), Duration> {
        let Some(max) = self.max else { return Ok(()) };
        while self
            .wins
            .front()
            .is_some_and(|&won| now.saturating_duration_since(won) >= self.window)
        {
            self.wins.pop_front();
        }
        match self.wins.front() {
            Some(&oldest) if self.wins.len() >= max => {
                Err(self.window - now.saturating_duration_since(oldest))
            }
            _ => Ok(()),
        }
    }

    /// Record a win at `now`.
    pub(crate) fn record(&mut self, now: Instant) {
        let Some(max) = self.max else { return };
        self.wins.push_back(now);
        while self.wins.len() > max {
            self.wins.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn fourth_win_within_the_window_is_refused_until_the_oldest_ages_out() {
        let mut limit = CampaignLimit::new(3, 5 * MIN);
        let start = Instant::now();
        for i in 0..3 {
            let now = start + i * MIN;
            assert_eq!(limit.check(now), Ok(()));
            limit.record(now);
        }
        // Three wins at 0, 1 and 2 min: the oldest leaves the window at 5 min.
        assert_eq!(limit.check(start + 3 * MIN), Err(2 * MIN));
        assert_eq!(
            limit.check(start + 5 * MIN - Duration::from_secs(1)),
            Err(Duration::from_secs(1))
        );
        assert_eq!(limit.check(start + 5 * MIN), Ok(()));
        limit.record(start + 5 * MIN);
        // Now 1, 2 and 5 min: the next opening is at 6 min.
        assert_eq!(limit.check(start + 5 * MIN), Err(MIN));
    }

    #[test]
    fn off_never_refuses() {
        let mut limit = CampaignLimit::off();
        let now = Instant::now();
        for _ in 0..100 {
            limit.record(now);
            assert_eq!(limit.check(now), Ok(()));
        }
        assert_eq!(limit.settings(), None);
    }
}
