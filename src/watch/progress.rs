//! Two rules about one shared watch stream, kept apart from the IO (`hub.rs`) so they can be
//! tested with paused time: *is the stream alive* ([`Liveness`]) and *what does a progress
//! answer prove* ([`ProgressGate`]).
//!
//! # Liveness
//!
//! A watch stream on a quiet key range carries nothing, so silence alone says nothing; and a
//! member that is frozen (SIGSTOP, a hung disk in the gRPC path) or black-holed never runs
//! etcd's own require-leader check, so the server never cancels the stream. Every
//! [`PROGRESS_INTERVAL`] the hub therefore asks for progress; anything that arrives counts as
//! life. If nothing at all arrives for [`SILENCE_LIMIT`], the stream is dead. etcd 3.4.25+,
//! 3.5.8+ and 3.6+ answer a progress request only when every watch on the stream has caught
//! up, and *drop* one that arrives while a watch replays history (`progressIfSync` in
//! `watchable_store.go`: nothing is held back for later; 3.5.8-3.5.12 also forget to answer
//! for a new watch that matches no event, etcd#17507). So every probe sends a new request,
//! whatever became of the last one, and when requests stay unanswered for an interval the hub
//! also sends a *canary*: a create for a watch from "now" and its cancel, which every version
//! answers at once.
//!
//! # What a progress answer proves
//!
//! A progress answer at revision R is meant to say "every event up to R was sent". That holds
//! for the server's own per-watch notifications (`progress_notify`, watch id = the watch's):
//! they go out through the same queue as the watch's events, and only once it is synced. It
//! does **not** hold for answers to progress requests (watch id -1) on etcd before 3.4.25 and
//! 3.5.8: those go out on a separate queue, at once, and can overtake events still queued for
//! a watch, even one that is synced (etcd#15220, fixed by etcd#15237). So the rule is:
//!
//! - a per-watch notification is reported to its watch (if it is news);
//! - an answer to a progress request is reported only when the member's version is known to
//!   order it after pending events ([`orders_progress`], asked once per stream with a Status
//!   call), and only to watches whose `created` answer carries a revision below R. etcd
//!   handles a stream's requests in order and stamps a `created` answer with the revision
//!   read after registering the watch, so a watch created after the request was handled reads
//!   at least R (it may still owe events below R); one created before was caught up at R.
//!   Answers need no pairing with requests: several may be in flight, and a dropped one
//!   leaves nothing behind;
//! - otherwise it only proves the stream is alive.

use std::time::Duration;

use tokio::time::Instant;

/// How often an open stream is asked for progress (PD's `RequestProgressInterval`).
pub(crate) const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// A stream on which nothing at all arrived for this long is dead: three progress requests
/// went unanswered. Long enough for a busy member on a loaded box, short enough that a frozen
/// member costs a few seconds, not the 10 s of PD's `WatchChTimeoutDuration`.
pub(crate) const SILENCE_LIMIT: Duration = Duration::from_secs(3);

/// Whether etcd `version` (as Status reports it, e.g. `3.5.8`) sends answers to progress
/// requests through the watch queue, after pending events and only once every watch on the
/// stream is synced: 3.4.25+, 3.5.8+ and 3.6+.
pub(crate) fn orders_progress(version: &str) -> bool {
    // The rule itself lives with the other version rules (`endpoint/version.rs`).
    version
        .parse::<crate::ServerVersion>()
        .is_ok_and(crate::ServerVersion::orders_progress)
}

/// What the liveness rule asks for now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Due {
    /// Nothing to do yet.
    Nothing,
    /// Time to ask the stream for a sign of life.
    Probe,
    /// Nothing arrived for [`SILENCE_LIMIT`]: the stream is dead.
    Dead,
}

/// When the stream last said anything, and when to ask it again.
#[derive(Debug)]
pub(crate) struct Liveness {
    last_heard: Instant,
    next_probe: Instant,
}

impl Liveness {
    /// A stream that just opened (its first answer is on the way).
    pub(crate) fn new(now: Instant) -> Self {
        Liveness {
            last_heard: now,
            next_probe: now + PROGRESS_INTERVAL,
        }
    }

    /// Anything arrived on the stream.
    pub(crate) fn heard(&mut self, now: Instant) {
        self.last_heard = now;
    }

    /// What is due at `now`; a probe is due once per [`PROGRESS_INTERVAL`].
    pub(crate) fn poll(&mut self, now: Instant) -> Due {
        if now.saturating_duration_since(self.last_heard) >= SILENCE_LIMIT {
            return Due::Dead;
        }
        if now >= self.next_probe {
            self.next_probe = now + PROGRESS_INTERVAL;
            return Due::Probe;
        }
        Due::Nothing
    }

    /// When [`poll`](Self::poll) next has something to say.
    pub(crate) fn next_wake(&self) -> Instant {
        self.next_probe.min(self.last_heard + SILENCE_LIMIT)
    }

    /// How long the stream has been silent.
    pub(crate) fn silent_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_heard)
    }
}

/// The progress requests of one stream: whether their answers prove anything, and since when
/// they have gone unanswered (a canary's cue).
#[derive(Debug, Default)]
pub(crate) struct ProgressGate {
    /// Whether the member orders progress answers after pending events; `None` until its
    /// version is known (and treated as "no").
    ordered: Option<bool>,
    /// When the oldest request that no answer has followed went out.
    unanswered_since: Option<Instant>,
}

impl ProgressGate {
    /// The member's version became known.
    pub(crate) fn set_ordered(&mut self, ordered: bool) {
        self.ordered = Some(ordered);
    }

    /// Whether answers to progress requests prove anything on this stream; `None` until the
    /// member's version is known.
    pub(crate) fn ordered(&self) -> Option<bool> {
        self.ordered
    }

    /// Whether answers to progress requests prove anything on this stream.
    pub(crate) fn is_ordered(&self) -> bool {
        self.ordered == Some(true)
    }

    /// A progress request went out at `now`.
    pub(crate) fn sent(&mut self, now: Instant) {
        self.unanswered_since.get_or_insert(now);
    }

    /// Whether the probe at `now` also sends a canary: requests have gone unanswered for an
    /// interval (dropped during a replay, or a member that no longer answers at all).
    pub(crate) fn wants_canary(&self, now: Instant) -> bool {
        self.unanswered_since
            .is_some_and(|at| now.saturating_duration_since(at) >= PROGRESS_INTERVAL)
    }

    /// An answer to a progress request arrived at `revision`. Returns the revision it proves
    /// for the watches whose `created` answer carried a revision below it, or `None` when it
    /// proves nothing (the member may let it overtake events).
    pub(crate) fn answered(&mut self, revision: i64) -> Option<i64> {
        self.unanswered_since = None;
        self.is_ordered().then_some(revision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_that_order_progress_answers() {
        for v in [
            "3.4.25",
            "3.4.30",
            "3.5.8",
            "3.5.21",
            "3.6.0",
            "3.6.0-rc.1",
            "4.0.0",
        ] {
            assert!(orders_progress(v), "{v}");
        }
        for v in [
            "3.4.23", "3.4.24", "3.5.1", "3.5.7", "3.3.27", "", "3.5", "garbage",
        ] {
            assert!(!orders_progress(v), "{v}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn probes_every_interval_and_dies_after_the_silence_limit() {
        let start = Instant::now();
        let mut l = Liveness::new(start);
        assert_eq!(l.poll(start), Due::Nothing);
        assert_eq!(l.next_wake(), start + PROGRESS_INTERVAL);
        tokio::time::sleep(PROGRESS_INTERVAL).await;
        assert_eq!(l.poll(Instant::now()), Due::Probe);
        assert_eq!(l.poll(Instant::now()), Due::Nothing);
        // An answer keeps it alive past the limit.
        l.heard(Instant::now());
        tokio::time::sleep(SILENCE_LIMIT - Duration::from_millis(1)).await;
        assert_ne!(l.poll(Instant::now()), Due::Dead);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(l.poll(Instant::now()), Due::Dead);
        assert_eq!(l.silent_for(Instant::now()), SILENCE_LIMIT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_canary_once_requests_go_unanswered_for_an_interval() {
        let mut g = ProgressGate::default();
        let now = Instant::now();
        assert!(
            !g.wants_canary(now + PROGRESS_INTERVAL),
            "nothing asked yet"
        );
        g.sent(now);
        assert!(!g.wants_canary(now));
        // A dropped request is followed by others; the oldest unanswered one counts.
        g.sent(now + PROGRESS_INTERVAL / 2);
        assert!(g.wants_canary(now + PROGRESS_INTERVAL));
        // Version unknown: an answer proves nothing, but ends the wait.
        assert_eq!(g.answered(7), None);
        assert!(!g.wants_canary(now + PROGRESS_INTERVAL * 2));
    }

    #[test]
    fn only_an_ordering_members_answers_prove_a_revision() {
        let mut g = ProgressGate::default();
        g.sent(Instant::now());
        assert_eq!(g.answered(9), None, "version unknown");
        g.set_ordered(true);
        assert_eq!(g.answered(9), Some(9), "no pairing with a request needed");
        g.set_ordered(false);
        assert_eq!(g.answered(10), None);
    }
}
