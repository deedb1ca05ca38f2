//! The newest revisions this client knows of, in one place: what its own answers showed (the monotonic floor, and where a watch "from now" starts) and what its probes saw.
//!
//! Writers: every unary answer's header (`call/driver.rs`), the pages of a large range
//! (`kv/pages.rs`), delivered watch events (`watch/dispatch.rs`), and the probers' Status
//! answers (through the balancer's probe sink). Readers: the monotonic guard (`kv/`), the
//! "from now" start (`watch/mod.rs`) and the watch stream's lag rule (`watch/link.rs`), which
//! wakes on [`Revisions::subscribe`].
//!
//! Two values, because they promise different things. `seen` is a revision this client was
//! shown, so a later read below it would go back in time: it is the floor. `newest` also takes
//! what probes saw: a revision the cluster committed (some member applied it), which tells a
//! client that writes nothing that other clients did, so its watch stream should show it soon,
//! but which its caller never saw, so it does not raise the floor.

use std::sync::atomic::{AtomicI64, Ordering};

use tokio::sync::watch;

/// The client's newest revisions (see the module docs).
#[derive(Debug)]
pub(crate) struct Revisions {
    /// The newest store revision in an answer or a delivered watch event: the floor.
    seen: AtomicI64,
    /// The newest of `seen` and the probes' revisions; notified when an answer or a probe
    /// raises it (not for delivered events: the watch stream showed those itself).
    newest: watch::Sender<i64>,
}

impl Default for Revisions {
    fn default() -> Self {
        Revisions {
            seen: AtomicI64::new(0),
            newest: watch::Sender::new(0),
        }
    }
}

impl Revisions {
    /// The floor: the newest revision this client was shown (0: none yet).
    pub(crate) fn seen(&self) -> i64 {
        self.seen.load(Ordering::Relaxed)
    }

    /// The newest revision known to be committed (from answers, events or probes); the
    /// receiver wakes when an answer or a probe raises it.
    pub(crate) fn subscribe(&self) -> watch::Receiver<i64> {
        self.newest.subscribe()
    }

    /// An answer carried `revision`.
    pub(crate) fn answered(&self, revision: i64) {
        if self.seen.fetch_max(revision, Ordering::Relaxed) < revision {
            self.raise(revision, true);
        }
    }

    /// The watch stream delivered events (or a sound progress) up to `revision`.
    pub(crate) fn delivered(&self, revision: i64) {
        if self.seen.fetch_max(revision, Ordering::Relaxed) < revision {
            self.raise(revision, false);
        }
    }

    /// A probe's Status answer carried `revision` (its member applied it).
    pub(crate) fn probed(&self, revision: i64) {
        self.raise(revision, true);
    }

    /// An answer that went through consensus, sent when the floor was `floor`, came back at
    /// `revision` below it: the cluster's history went back (a restore under the same cluster
    /// id). The floor comes down to it, once per old floor: returns the floor it replaced, or
    /// `None` if the floor was already below `floor` (another answer brought it down first).
    pub(crate) fn rewind(&self, floor: i64, revision: i64) -> Option<i64> {
        let mut seen = self.seen.load(Ordering::Relaxed);
        // Only what is still at or above the old floor is the old history's.
        while seen >= floor {
            match self
                .seen
                .compare_exchange(seen, revision, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    // The probes' view of the old history goes too, or the lag rule would
                    // wait for revisions no member will reach again.
                    self.newest.send_replace(revision);
                    return Some(seen);
                }
                Err(now) => seen = now,
            }
        }
        None
    }

    fn raise(&self, revision: i64, notify: bool) {
        // Nobody listens (no watch stream is open): the value still moves, but without the
        // wake-up, which on a put-heavy client is paid on every answer (~400 instructions a
        // call, `call-cost`). A receiver subscribed later reads the newest value at once.
        let notify = notify && self.newest.receiver_count() > 0;
        self.newest.send_if_modified(|newest| {
            let news = revision > *newest;
            if news {
                *newest = revision;
            }
            news && notify
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_takes_answers_and_events_and_the_newest_takes_probes_too() {
        let r = Revisions::default();
        let mut woken = r.subscribe();
        r.answered(10);
        assert_eq!((r.seen(), *r.newest.borrow()), (10, 10));
        assert!(woken.has_changed().unwrap());
        woken.borrow_and_update();
        r.probed(30);
        assert_eq!(
            (r.seen(), *r.newest.borrow()),
            (10, 30),
            "a probe is no floor"
        );
        assert!(woken.has_changed().unwrap());
        woken.borrow_and_update();
        r.delivered(40);
        assert_eq!((r.seen(), *r.newest.borrow()), (40, 40));
        assert!(!woken.has_changed().unwrap(), "the stream showed it itself");
        r.answered(20);
        r.delivered(20);
        assert_eq!((r.seen(), *r.newest.borrow()), (40, 40), "never lower");
        assert!(!woken.has_changed().unwrap());
    }

    #[test]
    fn a_history_that_went_back_rewinds_both_once() {
        let r = Revisions::default();
        r.answered(1000);
        r.probed(1200);
        // A linearizable read sent at floor 1000 answered at 50.
        assert_eq!(r.rewind(1000, 50), Some(1000));
        assert_eq!((r.seen(), *r.newest.borrow()), (50, 50));
        // A second stale answer sent at the same old floor changes nothing more.
        assert_eq!(r.rewind(1000, 45), None);
        assert_eq!(r.seen(), 50);
    }
}
