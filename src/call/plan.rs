//! The call plan: what one call does next, decided from events and the clock alone (no IO).
//!
//! The driver ([`super::driver`]) owns the IO: it launches attempts, waits on them and on the
//! plan's next timer, and feeds every failure and timer here (a success is always the answer).
//! The plan answers with a [`Step`]: fail, keep waiting, retry after a backoff, hedge to another member, renew
//! the token and resend, or count a late answer against a member. Because nothing here sleeps
//! or dials, every rule below has a fast test with a fake clock:
//!
//! - a repeatable call is hedged once its attempt is overdue by its member's own pace (the
//!   member's hedge delay, a multiple of its recent tail latency: an input, measured by the
//!   driver's endpoints), and at the latest at the cap `min(attempt timeout, remaining
//!   deadline / 3)`, computed from the call's own deadline, so a short per-call deadline still
//!   gets a hedge;
//! - a due hedge goes when the hedge budget consents, or over budget when the attempt's member
//!   is stalled, not slow ([`Plan::hedge_goes`]); a refused hedge before the cap (an *early*
//!   one) waits for the cap, one at the cap looks again a cap later ([`Plan::hedge_refused`]);
//! - a retry waits for the next leader instead of its backoff when that wait can be longer
//!   ([`retry_wait`]);
//! - an attempt to a member of unknown pace hedges at the slowest known pace of the others,
//!   not at the cap ([`hedge_pace`]);
//! - a definite answer (success, or an error that is not retryable) from any attempt wins;
//! - a mutation is never sent again after an ambiguous failure (the retry policy says so);
//! - the token is renewed at most once per call;
//! - a member is blamed only by the client's own timers: an attempt that owes its answer past
//!   the attempt timeout, or at the call's deadline. A caller that drops the call blames
//!   nobody, since the plan is simply gone.

use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use tokio::time::Instant;

use crate::error::Error;
use crate::retry::{Decision, RetryPolicy};
use crate::rpc::Rpc;

/// At most this many attempts of one repeatable call are in flight at once (the original plus
/// one hedge): enough to route around one stuck member without doubling the load.
pub(crate) const MAX_IN_FLIGHT: usize = 2;

/// How soon a call looks again for a member to hedge to when there was none: short next to
/// the attempt timeout, so a member that comes back (readmitted, no longer suspected) takes
/// the hedge within this, and long enough that a call with nowhere to go wakes only a few
/// times.
const LOOK_AGAIN: Duration = Duration::from_millis(25);

/// The resolution of tokio's timers: a deadline nearer than this is checked on the clock, not
/// left to a timer.
const TIMER_TICK: Duration = Duration::from_millis(1);

/// Names one attempt of a call.
pub(crate) type AttemptId = u32;

/// What shapes a call's plan, fixed when it starts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlanConfig {
    pub(crate) rpc: Rpc,
    /// Pinned to one member: never sent elsewhere, only resent when it never left.
    pub(crate) pinned: bool,
    /// Send a slow repeatable call to a second member too.
    pub(crate) hedging: bool,
    /// The call is expected to answer promptly (not a Lock or Campaign that waits by design):
    /// an answer owed past the attempt timeout counts against the member.
    pub(crate) prompt: bool,
    /// The client's attempt timeout.
    pub(crate) attempt_timeout: Duration,
    /// Give up on one attempt after this long and try elsewhere (stream opens); `None` waits.
    pub(crate) attempt_limit: Option<Duration>,
    /// Whether a token can be renewed at all.
    pub(crate) has_token: bool,
    pub(crate) retry: RetryPolicy,
}

/// How an attempt failed. (A success needs no plan: it is always the call's answer.)
#[derive(Debug)]
pub(crate) struct Failed {
    pub(crate) error: Error,
    /// The request never left the client.
    pub(crate) unsent: bool,
    /// A fresh token may make it pass.
    pub(crate) wants_login: bool,
}

/// The plan's timers; the driver sleeps until the earliest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Time to hedge.
    Hedge,
    /// This attempt owes its answer past the attempt timeout.
    Late(AttemptId),
    /// This attempt reached its limit: abandon it.
    Limit(AttemptId),
    /// The call's deadline.
    Deadline,
}

/// What the driver does next.
#[derive(Debug)]
pub(crate) enum Step {
    /// The call fails with this error; `blame` lists the attempts still owing an answer past
    /// the attempt timeout (count them against their members).
    Fail { error: Error, blame: Vec<AttemptId> },
    /// Keep waiting on the attempts in flight.
    Wait,
    /// Sleep `after`, then send a new attempt to another member; `error` is the last failure.
    Retry { after: Duration, error: Error },
    /// Send a new attempt to another member now (if there is one; else [`Plan::no_hedge`]).
    /// `early`: before the cap, on the member's own pace. Any hedge needs the budget's
    /// consent (else [`Plan::hedge_refused`]).
    Hedge { early: bool },
    /// Renew the token (within the deadline), then send this attempt's request again to the
    /// same member.
    Renew,
    /// Count this attempt's late answer against its member, and keep waiting.
    Blame(AttemptId),
}

#[derive(Clone, Copy, Debug)]
struct InFlight {
    id: AttemptId,
    started: Instant,
    /// Already counted late by [`Timer::Late`].
    late: bool,
}

/// One call's state.
#[derive(Debug)]
pub(crate) struct Plan {
    config: PlanConfig,
    deadline: Option<Instant>,
    in_flight: Vec<InFlight>,
    next_id: AttemptId,
    /// Attempts launched, the first included (renewals are not counted).
    attempts: u32,
    renewed: bool,
    hedge_at: Option<Instant>,
    /// The latest time to hedge the last attempt: its cap. A hedge before it is early.
    hedge_cap_at: Option<Instant>,
}

impl Plan {
    /// A call starting now, ending at `deadline` (`None`: it waits by design).
    pub(crate) fn new(config: PlanConfig, deadline: Option<Instant>) -> Self {
        Plan {
            config,
            deadline,
            in_flight: Vec::new(),
            next_id: 0,
            attempts: 0,
            renewed: false,
            hedge_at: None,
            hedge_cap_at: None,
        }
    }

    /// The deadline of the whole call.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// The longest wait before hedging an attempt sent at `now` (the cap): the attempt timeout,
    /// but at most a third of what is left, so that the hedge itself has time to answer.
    pub(crate) fn hedge_delay(&self, now: Instant) -> Duration {
        match self.deadline {
            Some(d) => self
                .config
                .attempt_timeout
                .min(d.saturating_duration_since(now) / 3),
            None => self.config.attempt_timeout,
        }
    }

    /// An attempt was sent at `now` (the first, a retry, a hedge or a resend after renewal) to
    /// a member with no known pace; returns its id.
    #[cfg(test)]
    pub(crate) fn launched(&mut self, now: Instant, renewal: bool) -> AttemptId {
        self.launched_to(now, renewal, None)
    }

    /// An attempt was sent at `now` to a member whose own hedge delay is `paced` (`None`: not
    /// known yet); returns its id. It is hedged after that delay, at the latest at the cap.
    pub(crate) fn launched_to(
        &mut self,
        now: Instant,
        renewal: bool,
        paced: Option<Duration>,
    ) -> AttemptId {
        let id = self.next_id;
        self.next_id += 1;
        if !renewal {
            self.attempts += 1;
        }
        self.in_flight.push(InFlight {
            id,
            started: now,
            late: false,
        });
        let cap = self.hedge_delay(now);
        self.hedge_cap_at = Some(now + cap);
        self.hedge_at = Some(now + paced.map_or(cap, |d| d.min(cap)));
        id
    }

    /// A hedge was due but there was no other member to send it to: look again soon (a member
    /// may be readmitted or stop being suspected any moment), at the latest at a new cap.
    pub(crate) fn no_hedge(&mut self, now: Instant) {
        let cap = self.hedge_delay(now);
        self.hedge_cap_at = Some(now + cap);
        self.hedge_at = Some(now + cap.min(LOOK_AGAIN));
    }

    /// A hedge was due but the budget refused it: an early one waits for the cap, one at the
    /// cap looks again a cap later (the budget refills as calls go on; looking sooner would
    /// only be refused again).
    pub(crate) fn hedge_refused(&mut self, now: Instant) {
        match self.hedge_cap_at.filter(|cap| *cap > now) {
            Some(cap) => self.hedge_at = Some(cap),
            None => {
                let at = now + self.hedge_delay(now);
                self.hedge_cap_at = Some(at);
                self.hedge_at = Some(at);
            }
        }
    }

    /// Whether a due hedge goes out: when the budget consents (asked first, so a hedge that
    /// goes takes its share), or whatever the budget says when it is recovery rather than
    /// speculation: at the cap (not `early`), the attempt in flight went to a member whose own
    /// pace (`pace`, its hedge delay when known) is at most half the attempt timeout, so it is
    /// stalled, not slow. Without the second, calls stuck on a black-holed leader
    /// (leader-bound, so suspicion cannot steer them away) used the whole budget and a read to
    /// it then waited out its deadline.
    pub(crate) fn hedge_goes(
        &self,
        early: bool,
        pace: Option<Duration>,
        budget: impl FnOnce() -> bool,
    ) -> bool {
        let stalled = !early && pace.is_some_and(|p| p * 2 <= self.config.attempt_timeout);
        budget() || stalled
    }

    /// Whether the call's deadline has passed, so that nothing more is sent: judged at `now`
    /// (the call's own clock reading, taken when it started), or on a fresh reading from
    /// `clock` when the deadline is within a timer tick of `now`. tokio's timer wheel ticks in
    /// milliseconds, so a fast answer could otherwise beat a deadline that passed before the
    /// request left (a 1 us per-call timeout was answered once the call's start time served
    /// this check: `tests/call_options.rs`).
    pub(crate) fn expired(&self, now: Instant, clock: impl FnOnce() -> Instant) -> bool {
        match self.deadline {
            None => false,
            Some(at) if at <= now => true,
            Some(at) if at <= now + TIMER_TICK => at <= clock(),
            Some(_) => false,
        }
    }

    fn can_hedge(&self) -> bool {
        self.config.hedging
            && !self.in_flight.is_empty()
            && self.in_flight.len() < MAX_IN_FLIGHT
            && self.attempts < self.config.retry.max_attempts
    }

    /// The earliest timer, if any.
    pub(crate) fn next_timer(&self) -> Option<(Instant, Timer)> {
        let mut next: Option<(Instant, Timer)> = self.deadline.map(|d| (d, Timer::Deadline));
        let mut consider = |at: Instant, timer: Timer| {
            if next.is_none_or(|(n, _)| at < n) {
                next = Some((at, timer));
            }
        };
        if let Some(at) = self.hedge_at.filter(|_| self.can_hedge()) {
            consider(at, Timer::Hedge);
        }
        for a in &self.in_flight {
            if let Some(limit) = self.config.attempt_limit {
                consider(a.started + limit, Timer::Limit(a.id));
            }
            if self.config.prompt && !a.late {
                consider(a.started + self.config.attempt_timeout, Timer::Late(a.id));
            }
        }
        next
    }

    /// A timer fired at `now`.
    pub(crate) fn fire(&mut self, timer: Timer, now: Instant) -> Step {
        match timer {
            Timer::Hedge => {
                self.hedge_at = None;
                if self.can_hedge() {
                    Step::Hedge {
                        early: self.hedge_cap_at.is_some_and(|cap| now < cap),
                    }
                } else {
                    Step::Wait
                }
            }
            Timer::Late(id) => match self.in_flight.iter_mut().find(|a| a.id == id) {
                Some(a) => {
                    a.late = true;
                    Step::Blame(id)
                }
                None => Step::Wait,
            },
            Timer::Limit(id) => self.failed(
                id,
                Failed {
                    error: Error::Timeout,
                    unsent: false,
                    wants_login: false,
                },
                now,
            ),
            Timer::Deadline => Step::Fail {
                error: Error::Timeout,
                blame: self.owed_late(now),
            },
        }
    }

    /// The attempts in flight that owe their answer past the attempt timeout (prompt calls).
    fn owed_late(&self, now: Instant) -> Vec<AttemptId> {
        if !self.config.prompt {
            return Vec::new();
        }
        self.in_flight
            .iter()
            .filter(|a| now.saturating_duration_since(a.started) >= self.config.attempt_timeout)
            .map(|a| a.id)
            .collect()
    }

    /// Attempt `id` failed at `now`.
    pub(crate) fn failed(&mut self, id: AttemptId, failed: Failed, now: Instant) -> Step {
        let Some(i) = self.in_flight.iter().position(|a| a.id == id) else {
            return Step::Wait;
        };
        self.in_flight.swap_remove(i);
        let Failed {
            error,
            unsent,
            wants_login,
        } = failed;
        if wants_login && !self.renewed && self.config.has_token {
            self.renewed = true;
            return Step::Renew;
        }
        let decision = if self.config.pinned && !unsent {
            Decision::Stop
        } else {
            self.config
                .retry
                .decide(self.config.rpc, &error, unsent, self.attempts)
        };
        if decision == Decision::Stop {
            // Another attempt may still succeed; a definite answer from any member is the
            // answer.
            if self.in_flight.is_empty() || !error.is_retryable() {
                return Step::Fail {
                    error,
                    blame: Vec::new(),
                };
            }
            return Step::Wait;
        }
        if !self.in_flight.is_empty() {
            // The hedge is still running; let it answer.
            return Step::Wait;
        }
        let after = self.config.retry.backoff();
        if self.deadline.is_some_and(|d| now + after >= d) {
            return Step::Fail {
                error,
                blame: Vec::new(),
            };
        }
        Step::Retry { after, error }
    }
}

/// How a call waits before its retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RetryWait {
    /// For the next leader, until this instant at the latest: the wait ends the moment one is
    /// known.
    Leader(Instant),
    /// The plan's backoff, then for a leader if the route needs one and none is known.
    Backoff,
}

/// How to wait `after` a failure at `now`, when the balancer would wait for a new leader until
/// `leader_until` (`None`: a leader is known, or the route needs none). The leader is being
/// replaced (it dropped this proposal, say, while handing over): waiting for the next one is
/// the backoff, and it ends the moment that leader is known, where a fixed backoff first
/// added up to 25 ms to writes after a leader move. Only when that wait can last longer than
/// the backoff: a retry comes sooner only because the next leader is known, so a failing
/// member is not hammered.
pub(crate) fn retry_wait(
    after: Duration,
    leader_until: Option<Instant>,
    now: Instant,
) -> RetryWait {
    match leader_until {
        Some(until) if until >= now + after => RetryWait::Leader(until),
        _ => RetryWait::Backoff,
    }
}

/// The hedge delay of an attempt to a member whose own is `own` (`None`: too few recent
/// answers to know its pace, as for a new member, or one silent for the latency window: a
/// stalled member that was ejected and came back), where the other members' are `others`: its
/// own when known, else the slowest known of the others, and `None` (the cap) when no member's
/// pace is known. Not the cap for a member of unknown pace: a read sent to it while it still
/// stalls would wait the whole attempt timeout (the 300 ms outliers issue 12's tests saw).
pub(crate) fn hedge_pace<I>(own: Option<Duration>, others: impl FnOnce() -> I) -> Option<Duration>
where
    I: IntoIterator<Item = Option<Duration>>,
{
    own.or_else(|| others().into_iter().flatten().max())
}

/// Members a call went to (by URL), inline up to a cluster's usual size: no allocation for a
/// call's bookkeeping unless it tries more members than that.
pub(crate) type Tried = SmallVec<[Arc<str>; 4]>;

/// Before a retry picks its member: once the call has tried every one of `members`, a new
/// round begins that avoids only `failed`, the member that just failed (a retry goes round
/// again, not straight back to it); until then every member tried is avoided.
pub(crate) fn retry_round<'a>(
    tried: &mut Tried,
    mut members: impl Iterator<Item = &'a str>,
    failed: Option<Arc<str>>,
) {
    if members.all(|m| tried.iter().any(|t| **t == *m)) {
        tried.clear();
        tried.extend(failed);
    }
}

/// Whether a failed call should log in again and be retried once: etcd rejected the token
/// (expired, or older than an auth change), or the call went without one (auth was off when the
/// client last logged in) and etcd now wants a user.
pub(crate) fn wants_login(err: &Error, sent_token: bool) -> bool {
    match err {
        Error::InvalidAuthToken | Error::AuthRequired => true,
        // Without a token, `--client-cert-auth` makes the certificate's CN the user; its denial
        // says nothing about what our own user may do.
        Error::PermissionDenied => !sent_token,
        _ => false,
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
