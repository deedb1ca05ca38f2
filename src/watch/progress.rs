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
//! life. If nothing at all arrives for [`SILENCE_LIMIT`], the stream is dead. etcd 3.4.25+ and
//! 3.5.8+ hold a progress answer back while a watch on the stream is catching up (and
//! 3.5.8-3.5.12 forget to answer at all for a new watch that matches no event, etcd#17507), so
//! when a progress request stays unanswered for an interval the hub also sends a *canary*: a
//! create for a watch from "now" and its cancel, which every version answers at once.
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
//!   call), and only to watches whose `created` answer arrived before the request went out
//!   (a watch created later may still owe events below R);
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

/// What a probe should send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// A progress request (none is outstanding).
    Progress,
    /// A canary create + cancel: a progress request has been outstanding for an interval.
    Canary,
    /// Nothing: the outstanding request is still young.
    Wait,
}

/// The progress requests of one stream: one outstanding at a time (newer etcd answers several
/// held-back requests with one answer, so only one-at-a-time keeps answers and requests
/// paired), and whether their answers prove anything.
#[derive(Debug, Default)]
pub(crate) struct ProgressGate {
    /// Whether the member orders progress answers after pending events; `None` until its
    /// version is known (and treated as "no").
    ordered: Option<bool>,
    /// Progress requests sent on this stream so far.
    sent: u64,
    /// The request awaiting its answer: its number and when it went out.
    outstanding: Option<(u64, Instant)>,
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

    /// The stamp a watch gets when its `created` answer arrives: it is covered by the answers
    /// to requests sent after now.
    pub(crate) fn stamp(&self) -> u64 {
        self.sent
    }

    /// What a probe at `now` should send.
    pub(crate) fn probe(&self, now: Instant) -> Probe {
        match self.outstanding {
            None => Probe::Progress,
            Some((_, at)) if now.saturating_duration_since(at) >= PROGRESS_INTERVAL => {
                Probe::Canary
            }
            Some(_) => Probe::Wait,
        }
    }

    /// A progress request went out at `now`.
    pub(crate) fn sent(&mut self, now: Instant) {
        self.sent += 1;
        self.outstanding = Some((self.sent, now));
    }

    /// An answer to a progress request arrived. Returns the stamp bound of the watches it
    /// proves something for (those whose stamp is below it), or `None` when it proves nothing:
    /// the member may let it overtake events, or no request was outstanding.
    pub(crate) fn answered(&mut self) -> Option<u64> {
        let (number, _) = self.outstanding.take()?;
        self.is_ordered().then_some(number)
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
    async fn one_progress_request_at_a_time_then_a_canary() {
        let mut g = ProgressGate::default();
        let now = Instant::now();
        assert_eq!(g.probe(now), Probe::Progress);
        g.sent(now);
        assert_eq!(g.probe(now), Probe::Wait);
        assert_eq!(g.probe(now + PROGRESS_INTERVAL), Probe::Canary);
        // Version unknown: the answer proves nothing, but frees the slot.
        assert_eq!(g.answered(), None);
        assert_eq!(g.probe(now), Probe::Progress);
        // No request outstanding: a stray answer proves nothing either.
        assert_eq!(g.answered(), None);
    }

    #[test]
    fn answers_cover_watches_created_before_the_request() {
        let mut g = ProgressGate::default();
        g.set_ordered(true);
        let now = Instant::now();
        let early = g.stamp();
        g.sent(now);
        let late = g.stamp();
        let bound = g.answered().unwrap();
        assert!(early < bound, "created before the request: covered");
        assert!(
            late >= bound,
            "created after the request went out: not covered"
        );
        g.set_ordered(false);
        g.sent(now);
        assert_eq!(g.answered(), None);
    }
}
