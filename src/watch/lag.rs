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
//!    with the probers and the fixed silence limit, which remain the upper bounds.
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
    /// Past this, the stream is stalled; set by the first ask.
    deadline: Option<Instant>,
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
                vouched: false,
            });
        }
        let limit = self.stall_limit(hint);
        let Some(check) = &mut self.check else {
            return Verdict::Nothing;
        };
        if check.deadline.is_some_and(|d| now >= d) {
            let vouched = check.vouched;
            self.check = None;
            return if vouched {
                Verdict::Vouched
            } else {
                Verdict::Stalled
            };
        }
        if check.ask_at.is_some_and(|at| now >= at) {
            check.ask_at = None;
            check.asked = Some(now);
            check.deadline.get_or_insert(now + limit);
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
mod tests {
    use super::*;
    use crate::endpoint::{STALL_FACTOR, STALL_FLOOR};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    const FAST: Option<Duration> = Some(Duration::from_millis(1));

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_shows_the_write_needs_no_ask() {
        let mut lag = Lag::new();
        lag.answered(10, Instant::now());
        assert_eq!(lag.poll(10, FAST, Instant::now()), Verdict::Nothing);
        assert_eq!(lag.next_wake(), None);
        // A write elsewhere: a check starts; the write's own event ends it.
        assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Nothing);
        assert_eq!(lag.next_wake(), Some(Instant::now() + ASK_AFTER));
        tokio::time::advance(ms(2)).await;
        lag.answered(11, Instant::now());
        assert_eq!(lag.next_wake(), None);
        assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Nothing);
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_stream_behind_is_asked_and_a_live_member_answers() {
        let mut lag = Lag::new();
        lag.answered(10, Instant::now());
        assert_eq!(lag.poll(12, FAST, Instant::now()), Verdict::Nothing);
        tokio::time::advance(ASK_AFTER).await;
        assert_eq!(lag.poll(12, FAST, Instant::now()), Verdict::Ask);
        assert_eq!(lag.poll(12, FAST, Instant::now()), Verdict::Nothing);
        tokio::time::advance(ms(1)).await;
        lag.answered(12, Instant::now());
        assert_eq!(lag.poll(12, FAST, Instant::now()), Verdict::Nothing);
        assert_eq!(lag.next_wake(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_frozen_member_is_stalled_at_the_floor_after_the_ask() {
        let mut lag = Lag::new();
        lag.answered(10, Instant::now());
        let write = Instant::now();
        lag.poll(11, FAST, write);
        tokio::time::advance(ASK_AFTER).await;
        assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Ask);
        // 8 x 1 ms is under the floor.
        tokio::time::advance(STALL_FLOOR - ms(1)).await;
        assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Nothing);
        tokio::time::advance(ms(1)).await;
        assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Stalled);
        assert_eq!(Instant::now() - write, ASK_AFTER + STALL_FLOOR);
    }

    #[tokio::test(start_paused = true)]
    async fn a_partitioned_member_answers_but_never_catches_up() {
        let mut lag = Lag::new();
        lag.answered(10, Instant::now());
        let write = Instant::now();
        lag.poll(11, FAST, write);
        let mut asks = 0;
        let verdict = loop {
            let v = lag.poll(11, FAST, Instant::now());
            if v == Verdict::Ask {
                asks += 1;
                // It answers at once, with its old revision.
                tokio::time::advance(ms(1)).await;
                lag.answered(10, Instant::now());
            }
            if v == Verdict::Stalled {
                break v;
            }
            tokio::time::sleep_until(lag.next_wake().unwrap()).await;
        };
        assert_eq!(verdict, Verdict::Stalled);
        assert!(asks >= 2, "asked again while behind: {asks}");
        assert_eq!(Instant::now() - write, ASK_AFTER + STALL_FLOOR);
    }

    #[tokio::test(start_paused = true)]
    async fn a_follower_a_little_behind_catches_up_in_time() {
        let mut lag = Lag::new();
        lag.answered(10, Instant::now());
        lag.poll(12, FAST, Instant::now());
        tokio::time::advance(ASK_AFTER).await;
        assert_eq!(lag.poll(12, FAST, Instant::now()), Verdict::Ask);
        lag.answered(11, Instant::now());
        tokio::time::advance(ASK_AFTER).await;
        assert_eq!(lag.poll(12, FAST, Instant::now()), Verdict::Ask);
        lag.answered(12, Instant::now());
        assert_eq!(lag.next_wake(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_doubt_is_cleared_by_any_later_answer_or_stalls() {
        let mut lag = Lag::new();
        lag.answered(10, Instant::now());
        lag.doubt(Instant::now());
        assert_eq!(lag.poll(10, FAST, Instant::now()), Verdict::Ask);
        tokio::time::advance(ms(3)).await;
        lag.answered(10, Instant::now());
        assert_eq!(lag.next_wake(), None);
        // Unanswered: stalled after the limit.
        lag.doubt(Instant::now());
        assert_eq!(lag.poll(10, FAST, Instant::now()), Verdict::Ask);
        tokio::time::advance(STALL_FLOOR).await;
        assert_eq!(lag.poll(10, FAST, Instant::now()), Verdict::Stalled);
    }

    /// Asks answered after `rtt` each, `n` times.
    async fn asked_and_answered(lag: &mut Lag, rtt: Duration, n: u32) {
        for _ in 0..n {
            lag.doubt(Instant::now());
            assert_eq!(lag.poll(0, FAST, Instant::now()), Verdict::Ask);
            tokio::time::advance(rtt).await;
            lag.answered(lag.shown(), Instant::now());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_member_that_answers_a_status_with_the_revision_stays() {
        let mut lag = Lag::new();
        lag.answered(10, Instant::now());
        lag.poll(11, FAST, Instant::now());
        tokio::time::advance(ASK_AFTER).await;
        assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Ask);
        let sent = Instant::now();
        // A partitioned member's old revision vouches for nothing...
        lag.member_status(10, sent);
        // ...a current one does.
        lag.member_status(11, sent);
        tokio::time::advance(STALL_FLOOR).await;
        assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Vouched);
        // The next check starts afresh (and must be vouched for again).
        tokio::time::advance(ms(1)).await;
        assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Nothing);
        tokio::time::advance(ASK_AFTER).await;
        assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Ask);
        lag.member_status(10, Instant::now());
        tokio::time::advance(STALL_FLOOR).await;
        assert_eq!(lag.poll(11, FAST, Instant::now()), Verdict::Stalled);
    }

    #[tokio::test(start_paused = true)]
    async fn a_status_sent_before_the_check_vouches_for_nothing() {
        let mut lag = Lag::new();
        lag.answered(10, Instant::now());
        let early = Instant::now();
        tokio::time::advance(ms(1)).await;
        lag.doubt(Instant::now());
        assert_eq!(lag.poll(10, FAST, Instant::now()), Verdict::Ask);
        lag.member_status(10, early);
        tokio::time::advance(STALL_FLOOR).await;
        assert_eq!(lag.poll(10, FAST, Instant::now()), Verdict::Stalled);
    }

    #[tokio::test(start_paused = true)]
    async fn the_stall_limit_follows_the_pace_within_its_bounds() {
        let mut lag = Lag::new();
        assert_eq!(lag.stall_limit(None), STALL_CAP);
        assert_eq!(lag.stall_limit(FAST), STALL_FLOOR);
        assert_eq!(lag.stall_limit(Some(ms(50))), ms(400));
        assert_eq!(lag.stall_limit(Some(ms(500))), STALL_CAP);
        // Too few answers of its own: the hint still decides.
        asked_and_answered(&mut lag, ms(1), OWN_SAMPLES - 1).await;
        assert_eq!(lag.stall_limit(Some(ms(50))), ms(400));
        // Enough: the stream's own (fast) progress answers decide, not a slow probe's pace.
        asked_and_answered(&mut lag, ms(1), 1).await;
        assert_eq!(lag.stall_limit(Some(ms(50))), STALL_FLOOR);
        // The slowest of its recent answers sets it.
        asked_and_answered(&mut lag, ms(30), 1).await;
        assert_eq!(lag.stall_limit(None), ms(240));
        // ...until RTT_SAMPLES newer ones push it out.
        asked_and_answered(&mut lag, ms(1), RTT_SAMPLES as u32).await;
        assert_eq!(lag.stall_limit(None), STALL_FLOOR);
    }

    #[tokio::test(start_paused = true)]
    async fn a_loaded_member_gets_its_own_longer_limit() {
        let mut lag = Lag::new();
        lag.answered(10, Instant::now());
        lag.poll(11, Some(ms(60)), Instant::now());
        tokio::time::advance(ASK_AFTER).await;
        assert_eq!(lag.poll(11, Some(ms(60)), Instant::now()), Verdict::Ask);
        tokio::time::advance(ms(300)).await;
        assert_eq!(lag.poll(11, Some(ms(60)), Instant::now()), Verdict::Nothing);
        // Answered at its (slow) pace: no move, and once the stream has enough answers of its
        // own, that slow one lengthens its limit.
        lag.answered(11, Instant::now());
        asked_and_answered(&mut lag, ms(1), OWN_SAMPLES - 1).await;
        assert_eq!(lag.stall_limit(FAST), STALL_CAP.min(ms(300) * STALL_FACTOR));
    }
}
