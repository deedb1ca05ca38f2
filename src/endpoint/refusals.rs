//! The connections a member refused since it last answered (nothing listens: the process is
//! stopping or gone): when the first and the last came.
//!
//! A leader that refuses connections is not merely cut off from us, so followers that still
//! name it are trusted to forward writes to it only once it has outlived a quick hand-over
//! (see `balance/outage_rule.rs`).

use tokio::time::Instant;

/// Connections to a member refused since it last answered: when the first and the last were.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refusals {
    /// The first refusal since the member last answered: when its listener closed, as far as
    /// we know (a stopping etcd closes it first, a gone one never reopens it).
    pub(crate) first: Instant,
    /// The latest refusal.
    pub(crate) last: Instant,
}

/// One member's refusals since it last answered (part of its state, under its one lock).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RefusalLog(Option<Refusals>);

impl RefusalLog {
    /// A connection to the member was refused at `now`.
    pub(crate) fn refused(&mut self, now: Instant) {
        let first = self.0.map_or(now, |r| r.first);
        self.0 = Some(Refusals { first, last: now });
    }

    /// The refusals since the member last answered, if any.
    pub(crate) fn get(&self) -> Option<Refusals> {
        self.0
    }

    /// The member answered: whatever refused before is listening again.
    pub(crate) fn answered(&mut self) {
        self.0 = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_first_refusal_is_kept_until_an_answer_clears_them() {
        let mut log = RefusalLog::default();
        assert_eq!(log.get(), None);
        let first = Instant::now();
        log.refused(first);
        let last = first + Duration::from_millis(30);
        log.refused(last);
        assert_eq!(log.get(), Some(Refusals { first, last }));
        log.answered();
        assert_eq!(log.get(), None);
        log.answered();
        log.refused(last);
        assert_eq!(log.get(), Some(Refusals { first: last, last }));
    }
}
