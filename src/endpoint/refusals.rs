//! The connections a member refused since it last answered (nothing listens: the process is
//! stopping or gone): when the first and the last came.
//!
//! A leader that refuses connections is not merely cut off from us, so followers that still
//! name it are trusted to forward writes to it only once it has outlived a quick hand-over
//! (see `balance/outage_rule.rs`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// One member's refusals since it last answered.
#[derive(Debug, Default)]
pub(crate) struct RefusalLog {
    refused: Mutex<Option<Refusals>>,
    /// Whether `refused` may hold refusals: lets every answer skip its lock (the common case).
    may_be_refusing: AtomicBool,
}

impl RefusalLog {
    /// A connection to the member was refused at `now`.
    pub(crate) fn refused(&self, now: Instant) {
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let first = refused.map_or(now, |r| r.first);
        *refused = Some(Refusals { first, last: now });
        self.may_be_refusing.store(true, Ordering::Release);
    }

    /// The refusals since the member last answered, if any.
    pub(crate) fn get(&self) -> Option<Refusals> {
        *self.refused.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The member answered: whatever refused before is listening again.
    pub(crate) fn answered(&self) {
        // Set after the refusal is written: a refusal racing this answer is either cleared
        // with it or left with the flag up, never hidden behind a lowered flag.
        if self.may_be_refusing.swap(false, Ordering::AcqRel) {
            *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn the_first_refusal_is_kept_until_an_answer_clears_them() {
        let log = RefusalLog::default();
        assert_eq!(log.get(), None);
        let first = Instant::now();
        log.refused(first);
        tokio::time::advance(Duration::from_millis(30)).await;
        let last = Instant::now();
        log.refused(last);
        assert_eq!(log.get(), Some(Refusals { first, last }));
        log.answered();
        assert_eq!(log.get(), None);
        // Answers with nothing refused cost one atomic and change nothing.
        log.answered();
        log.refused(last);
        assert_eq!(log.get(), Some(Refusals { first: last, last }));
    }
}
