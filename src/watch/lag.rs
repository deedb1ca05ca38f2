//! Whether the watch stream keeps up with the cluster, judged by its member's own pace: the
//! rule that moves a stream off a frozen, black-holed or partitioned member within a few
//! hundred milliseconds of the next write (no IO here; `link.rs` sends and moves).
//!
//! # Why not silence alone
//!
//! A watch on a quiet key range carries nothing, so silence proves nothing, and a frozen member
//! (SIGSTOP) or a black-holed one never closes the stream: the fixed rule of `progress.rs` (a
//! progress request every second, the stream dead after 3 s of silence) and the probers'
//! ejection (interval + 1 s timeout) took 1.0-1.3 s to move a watch. A *partitioned* member is
//! worse: it answers everything, at once, but its store stands still, so no silence rule ever
//! fires and its watches see nothing until etcd's own require-leader check cancels them.
//!
//! # What the client knows that the stream does not
//!
//! Every KV answer carries the store revision of the member that served it, and the client
//! keeps the newest (`revisions.rs`): a revision the cluster has committed. A healthy member
//! applies a committed entry within a few milliseconds of the leader, and every answer on a
//! watch stream (events, `created`, progress) carries its member's revision. So when the
//! client has seen revision R, the stream's member should show R (or more) soon after,
//! whether or not the write touched a watched key. That needs no unary traffic to the
//! stream's member at all, only the client's own writes (or any read) going anywhere. A
//! client that writes nothing itself learns the cluster's revision from its probes (every
//! Status answer carries its member's revision; each member is probed every 500 ms by
//! default), so another client's write is noticed within a probe interval:
//!
//! 1. the client sees R above what the stream has shown: a [`Check`] starts;
//! 2. after [`ASK_AFTER`] (the write's own event, or any answer, usually ends it sooner) the
//!    stream is asked: a progress request, answered at once by a live member with its
//!    revision (or a canary create when a progress request is already owed, see
//!    `progress.rs`); an answer that is fresh but still behind asks again an [`ASK_AFTER`]
//!    later (a follower a little behind catches up; a partitioned one never does);
//! 3. if the stream has not shown R within the member's stall limit of the first ask, the
//!    stream is *stalled*: the member is suspected (`Endpoint::suspect`, so new serializable
//!    reads avoid it too) and every watch reopens on another member from its cursor
//!    (`resume.rs`: nothing lost, nothing repeated). The member is not blamed: ejection stays
//!    with the probers and the fixed silence limit, which remain the upper bounds. A stream
//!    that showed newer revisions within the limit, only not `R` yet, is catching up, not
//!    stalled: it is asked again and judged on the next limit, up to [`CATCH_UP_LIMIT`] after
//!    the check began (a frozen, black-holed or partitioned member shows nothing newer).
//!
//! Each ask also sends the member a Status call on the side (its own HTTP/2 stream): a member
//! that answers it with R or more before the deadline *vouches* for itself, and the stream
//! stays. That is the busy member: its answer to the ask is queued behind a large response
//! (3 MiB of fragments can take longer than 100 ms to start on a loaded box), and a needless
//! move is not free: an idle watch whose history was compacted meanwhile resumes into
//! `Compacted`, and etcd syncs a watch that resumes from the past only every 100 ms. A frozen
//! or black-holed member does not answer the Status either, and a partitioned one answers it
//! with its old revision.
//!
//! The same check runs without a new revision when there is another reason to doubt the
//! member: the periodic liveness probe (every [`PROGRESS_INTERVAL`]), or the member becoming
//! suspected by the unary calls (a hedged read). Then any answer after the ask will do.
//!
//! # The member's pace
//!
//! The stall limit is `STALL_FACTOR` (8) times the member's pace, clamped to `STALL_FLOOR`
//! (100 ms; `endpoint/pace.rs`, shared with the lease keeper) and [`STALL_CAP`]. With
//! [`ASK_AFTER`] it puts a move ~125 ms after a write the stream failed to show.
//!
//! The pace is the slowest of the stream's own recent answers to asks (the last
//! [`RTT_SAMPLES`] of them), once it has [`OWN_SAMPLES`]; until then, what the rest of the
//! client knows of the member (the tail of its unary calls, its probes' smoothed latency, both
//! slower than a progress answer: a probe is a Status and a linearizable read). Why the
//! stream's own answers first: a progress answer is what is owed, and on a loaded box the
//! probes' pace (18 ms measured) made the limit 142 ms where the stream's answers (1-3 ms)
//! keep it at the floor. A member answering in 1 ms is stalled after 100 ms; one that a
//! saturated box or a defragment slows to a 100 ms pace gets 800 ms before its watches move,
//! and moving them is all that happens to it (measured: no move at 256 calls in flight
//! through a compaction and a defragment of every member).
//!
//! ```text
//!          seen > shown                 ASK_AFTER               the stall limit
//!   idle ---------------> Check(need) ------------> asked ----------------------> Stalled
//!     ^                        |                      |  fresh answer, behind:
//!     |   an answer with       |                      |  ask again later
//!     +---- revision >= need --+----------------------+
//! ```

use std::time::Duration;

use tokio::time::Instant;

use super::progress::PROGRESS_INTERVAL;
use crate::endpoint::stall_limit;

/// How long the stream may trail a revision the client saw before it is asked for progress.
///
/// 25 ms: a healthy member shows a committed write within a few milliseconds (its own event,
/// if watched), so most checks end before any ask; under a writer the stream does not watch,
/// this sends at most ~40 small progress requests a second. Every millisecond here is one
/// more before a stalled member's watches move (measured under load: the move lands 50-100 ms
/// after the rule fires, the box's scheduling).
pub(crate) const ASK_AFTER: Duration = Duration::from_millis(25);

/// The longest stall limit (also the limit while nothing is known of the member's pace): a
/// slower member is left to the fixed rules (the silence limit, the probers).
pub(crate) const STALL_CAP: Duration = PROGRESS_INTERVAL;

/// How long after a check began a stream that keeps showing newer revisions may still trail
/// the one the check needs. A frozen, black-holed or partitioned member shows nothing newer
/// and is stalled at the first stall limit as before; a member that is only slow to send
/// (a burst of events on a busy box, or tens of thousands of watches resuming on it) gets a
/// longer leash, because moving its stream re-creates every watch on another member that is
/// no less busy (measured: 33,334 watches moved 0.7 s after they resumed on a member that was
/// catching them up, and the round's p99 went from ~100 ms to 1.9 s).
pub(crate) const CATCH_UP_LIMIT: Duration = Duration::from_secs(3);

/// How many of the stream's recent ask-to-answer times make its own pace.
pub(crate) const RTT_SAMPLES: usize = 8;

/// Answers to asks the stream needs before its own pace counts (fewer: the hint's).
pub(crate) const OWN_SAMPLES: u32 = 4;

/// What the stream should do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing.
    Nothing,
    /// Ask the stream for a sign of its revision (a progress request or a canary).
    Ask,
    /// It did not keep up within the member's stall limit: move it.
    Stalled,
    /// It did not keep up, but its member answered a Status with the revision owed: the
    /// member is alive and current, the stream only slow; stay.
    Vouched,
}

/// A check under way: the stream must show `need` by `deadline`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Check {
    /// The revision the stream must show (at least), in an answer that arrives after `since`.
    need: i64,
    /// When the check began.
    since: Instant,
    /// When to ask next (`None`: an ask is owed an answer).
    ask_at: Option<Instant>,
    /// When the last ask went out (for the ask-to-answer time).
    asked: Option<Instant>,
    /// Past this, the stream is stalled; set by the first ask, moved on while it catches up.
    deadline: Option<Instant>,
    /// What the stream had shown when `deadline` was set: showing more by then is catching up.
    shown_then: i64,
    /// The member answered a Status sent after `since` with `need` or more: it is alive and
    /// current, only the stream is slow.
    vouched: bool,
}

/// One stream's lag behind the client's view of the cluster.
#[derive(Clone, Debug)]
pub(crate) struct Lag {
    /// The newest revision any answer on the stream carried.
    shown: i64,
    /// The check under way, if any.
    check: Option<Check>,
    /// Recent ask-to-answer times (zero: no sample yet).
    rtts: [Duration; RTT_SAMPLES],
    /// Where the next sample goes.
    next_rtt: usize,
    /// Samples taken so far (saturating).
    rtt_count: u32,
}

impl Lag {
    /// A stream that just opened (its answers will show its member's revision).
    pub(crate) fn new() -> Self {
        Lag {
            shown: 0,
            check: None,
            rtts: [Duration::ZERO; RTT_SAMPLES],
            next_rtt: 0,
            rtt_count: 0,
        }
    }

    /// The newest revision the stream showed.
    pub(crate) fn shown(&self) -> i64 {
        self.shown
    }

    /// An answer carrying `revision` (0: no header) arrived at `now`.
    pub(crate) fn answered(&mut self, revision: i64, now: Instant) {
        self.shown = self.shown.max(revision);
        let Some(check) = &mut self.check else {
            return;
        };
        if let Some(asked) = check.asked.take() {
            self.rtts[self.next_rtt] = now.saturating_duration_since(asked);
            self.next_rtt = (self.next_rtt + 1) % RTT_SAMPLES;
            self.rtt_count = self.rtt_count.saturating_add(1);
        }
        let check = self.check.as_mut().expect("checked above");
        if now >= check.since && self.shown >= check.need {
            self.check = None;
        } else if check.ask_at.is_none() {
            // Alive but behind: ask again a little later; the deadline stands.
            check.ask_at = Some(now + ASK_AFTER);
        }
    }

    /// Doubt the member at `now` (a periodic probe, or it became suspected): ask now, and
    /// expect any answer within the stall limit.
    pub(crate) fn doubt(&mut self, now: Instant) {
        match &mut self.check {
            Some(check) => {
                if check.asked.is_none() {
                    check.ask_at = Some(now);
                }
            }
            None => {
                self.check = Some(Check {
                    need: self.shown,
                    since: now,
                    ask_at: Some(now),
                    asked: None,
                    deadline: None,
                    shown_then: self.shown,
                    vouched: false,
                })
            }
        }
    }

    /// What is due at `now`, given the newest revision the client has seen and what the rest
    /// of the client knows of the member's pace.
    pub(crate) fn poll(&mut self, seen: i64, hint: Option<Duration>, now: Instant) -> Verdict {
        if self.check.is_none() && seen > self.shown {
            self.check = Some(Check {
                need: seen,
                since: now,
                ask_at: Some(now + ASK_AFTER),
                asked: None,
                deadline: None,
                shown_then: self.shown,
                vouched: false,
            });
        }
        let limit = self.stall_limit(hint);
        let Some(check) = &mut self.check else {
            return Verdict::Nothing;
        };
        if check.deadline.is_some_and(|d| now >= d) {
            let catching_up = self.shown > check.shown_then && now < check.since + CATCH_UP_LIMIT;
            if catching_up && !check.vouched {
                // Alive and moving, only behind: ask again, and judge the next window.
                check.deadline = None;
                check.ask_at = Some(now);
            } else {
                let vouched = check.vouched;
                self.check = None;
                return if vouched {
                    Verdict::Vouched
                } else {
                    Verdict::Stalled
                };
            }
        }
        if check.ask_at.is_some_and(|at| now >= at) {
            check.ask_at = None;
            check.asked = Some(now);
            if check.deadline.is_none() {
                check.deadline = Some(now + limit);
                check.shown_then = self.shown;
            }
            return Verdict::Ask;
        }
        Verdict::Nothing
    }

    /// The member answered a Status sent at `sent` with `revision`.
    pub(crate) fn member_status(&mut self, revision: i64, sent: Instant) {
        if let Some(check) = &mut self.check
            && sent >= check.since
            && revision >= check.need
        {
            check.vouched = true;
        }
    }

    /// When [`poll`](Self::poll) next has something to say (barring new answers or
    /// revisions).
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        let check = self.check.as_ref()?;
        [check.ask_at, check.deadline].into_iter().flatten().min()
    }

    /// How long an ask may stay unanswered: `STALL_FACTOR` times the slowest of the stream's
    /// own recent answers (once it has [`OWN_SAMPLES`], else `hint`), within
    /// `STALL_FLOOR`..[`STALL_CAP`].
    pub(crate) fn stall_limit(&self, hint: Option<Duration>) -> Duration {
        let own = (self.rtt_count >= OWN_SAMPLES)
            .then(|| self.rtts.iter().copied().max())
            .flatten();
        stall_limit(own.or(hint), STALL_CAP)
    }
}

#[cfg(test)]
#[path = "lag_tests.rs"]
mod tests;
