//! The call driver: runs a [`Plan`] against real members. Its `select!` only binds the next
//! event (an attempt's answer or the plan's timer); what to do about it is the plan's, and the
//! IO that follows (pick, launch, backoff, token renewal, what a failure teaches) is here.
//!
//! A call whose caller drops it simply stops: nothing runs on drop, so it blames no member.

use std::future::Future;
use std::sync::Arc;

use smallvec::SmallVec;
use tokio::time::Instant;
use tonic::Request;

use super::attempt::{self, Sent};
use super::plan::{self, AttemptId, Failed, Plan, PlanConfig, RetryWait, Step, Timer, Tried};
use super::running::Running;
use super::stats::Count;
use super::{Call, Conn, Target, Transport, wants_login};
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::rpc::Route;
use crate::rpc::{Idempotency, Rpc};

/// One attempt's result, with what the driver needs to judge it.
struct Answer<T> {
    id: AttemptId,
    ep: Arc<Endpoint>,
    started: Instant,
    generation: u64,
    sent_token: bool,
    /// The message alone: its metadata is dropped where it arrives, not moved with the
    /// answer through the driver's `select!` and match.
    result: std::result::Result<T, tonic::Status>,
}

/// What woke the driver.
enum Event<T> {
    Answer(Answer<T>),
    Timer(Timer),
}

/// Which member each attempt in flight went to, and when.
struct Attempts {
    members: SmallVec<[(AttemptId, Arc<Endpoint>, Instant); 2]>,
    /// Members this call went to (by URL), so that retries and hedges go elsewhere.
    tried: Tried,
}

impl Attempts {
    /// The member of attempt `id`, when its silence counts against it (see
    /// [`attempt::silent`]).
    fn blamed(&self, id: AttemptId) -> Option<&Arc<Endpoint>> {
        let now = Instant::now();
        self.members
            .iter()
            .find(|(i, _, _)| *i == id)
            .filter(|(_, ep, started)| attempt::silent(ep, *started, now))
            .map(|(_, e, _)| e)
    }
}

impl Transport {
    fn plan_config(&self, rpc: Rpc, target: &Target, stream: bool, bounded: bool) -> PlanConfig {
        let pinned = matches!(target, Target::Member(_));
        let repeatable = rpc.idempotency() == Idempotency::Repeatable;
        PlanConfig {
            rpc,
            pinned,
            hedging: !stream && !pinned && rpc.hedgeable(),
            prompt: !stream && !rpc.holds_open(),
            attempt_timeout: self.options.attempt_timeout,
            // At least 1 s: opening a stream may wait for its first message (a snapshot chunk,
            // a watch's created answer) on a busy member. Streams without a deadline (observe)
            // wait by design: no attempt limit either.
            attempt_limit: (stream && repeatable && !pinned && bounded).then(|| {
                self.options
                    .attempt_timeout
                    .max(std::time::Duration::from_secs(1))
            }),
            has_token: self.has_token(),
            retry: self.options.retry,
        }
    }

    /// The endpoint for a retry: one this call has not tried yet; when all were tried, any but
    /// the one that just failed (see [`plan::retry_round`]).
    fn next_endpoint(
        &self,
        route: Route,
        target: &Target,
        tried: &mut Tried,
    ) -> Result<Arc<Endpoint>> {
        let failed = tried.last().cloned();
        plan::retry_round(
            tried,
            self.balancer.endpoints().iter().map(|e| &*e.url),
            failed,
        );
        let next = self.pick(route, target, tried, Instant::now())?;
        if !tried.contains(&next.url) {
            tried.push(next.url.clone());
        }
        Ok(next)
    }

    /// Make one call with retries, hedging and token renewal, as its plan says. `call` sends
    /// the request built by `make` (a unary message is cloned; a stream body is made anew for
    /// each attempt) to a member.
    pub(super) async fn drive<Body, Resp, M, F, Fut>(
        &self,
        rpc: Rpc,
        how: Call,
        stream: bool,
        make: M,
        call: F,
    ) -> Result<(Arc<Endpoint>, Resp)>
    where
        M: Fn() -> Body,
        F: Fn(Conn, Request<Body>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<Resp>, tonic::Status>>,
    {
        crate::metrics::request(rpc.name());
        // One clock read for the budget and the deadline.
        let start = Instant::now();
        self.ledger.call(start);
        let Call {
            target,
            deadline,
            require_leader,
            avoid,
        } = how;
        let route = Call::route_of(&target, rpc);
        let deadline = self.deadline_from(deadline, start);
        let config = self.plan_config(rpc, &target, stream, deadline.is_some());
        let mut plan = Plan::new(config, deadline);
        // The member's hedge delay, for the calls that hedge (the others need none), as
        // `plan::hedge_pace` says.
        let cap = self.options.attempt_timeout;
        let paced = |ep: &Endpoint, now: Instant| {
            if !config.hedging {
                return None;
            }
            plan::hedge_pace(ep.hedge_delay(cap, now), || {
                let endpoints = self.balancer.endpoints();
                endpoints
                    .iter()
                    .map(|other| other.hedge_delay(cap, now))
                    .collect::<SmallVec<[_; 8]>>()
            })
        };
        let owes = attempt::owes(route, config.prompt);
        let launch = |id: AttemptId, ep: Arc<Endpoint>, now: Instant| {
            let sent = Sent::start(&ep, owes, now);
            let mut request = Request::new(make());
            let (generation, sent_token) = self.decorate(rpc, require_leader, &mut request);
            // A txn to a member that crashes when one is canceled is let finish (no deadline
            // told, no cancel when dropped; see `endpoint/version.rs`).
            let finish = matches!(rpc, Rpc::Txn { .. }) && ep.txn_must_finish();
            #[cfg(feature = "mutants")]
            let finish = finish && !crate::mutants::cancel_txns();
            // No `grpc-timeout`: the call's own timer ends it, and dropping the attempt resets
            // its stream, which cancels the server's work (etcd also bounds every request by
            // its own request timeout). The header cost more than the rest of the typed
            // layer's bookkeeping: its value is new on every call, so HPACK indexes each one
            // and evicts the entries the other headers use, and tonic arms a second timer for
            // it. Counted with callgrind (`call-cost`): ~7,500 instructions of a put's ~93,000.
            let conn = self.conn(&ep);
            let fut = call(if finish { conn.must_finish() } else { conn }, request);
            async move {
                let result = fut.await.map(tonic::Response::into_inner);
                let started = sent.started();
                drop(sent);
                Answer {
                    id,
                    ep,
                    started,
                    generation,
                    sent_token,
                    result,
                }
            }
        };
        let mut attempts = Attempts {
            members: SmallVec::new(),
            // Members that said lately they lack the method count as tried: the last choice.
            tried: SmallVec::from_vec(self.methods.refusing(rpc, || self.balancer.endpoints())),
        };
        // Members the caller leaves for last count as tried too.
        if let Some(avoid) = avoid {
            attempts.tried.extend(avoid.iter().cloned());
        }
        let first_slot = std::pin::pin!(None);
        let mut running = Running::new(first_slot);

        // One clock read for the pick, the member's pace and the attempt's start: the call's
        // own unless it waited for a leader (a clock read costs ~70 instructions of a call's
        // ~85,000; `call-cost`).
        let now = if self.await_leader(route, plan.deadline()).await {
            Instant::now()
        } else {
            start
        };
        // A deadline already past (a tiny per-call timeout, or one spent waiting for a leader)
        // sends nothing.
        if plan.expired(now, Instant::now) {
            return Err(Error::Timeout);
        }
        let first = self.pick(route, &target, &attempts.tried, now)?;
        attempts.tried.push(first.url.clone());
        let id = plan.launched_to(now, false, paced(&first, now));
        self.ledger.count(Count::Attempt);
        attempts.members.push((id, first.clone(), now));
        running.push(launch(id, first, now));

        loop {
            let timer = plan.next_timer();
            let event = tokio::select! {
                // An answer that is here wins over a timer that fired in the same poll: after
                // the process or the machine stood still (a scheduler stall, a paused VM), both
                // are ready at once, and an applied write's answer must not become a timeout.
                biased;
                Some(answer) = running.next() => Event::Answer(answer),
                () = sleep_until(timer.map(|(at, _)| at)) => Event::Timer(timer.expect("armed").1),
            };
            let step = match event {
                Event::Answer(answer) => {
                    attempts.members.retain(|(i, _, _)| *i != answer.id);
                    match answer.result {
                        Ok(response) => {
                            let pace_cap = config.hedging.then_some(cap);
                            attempt::answered(&answer.ep, answer.started, owes, pace_cap);
                            return Ok((answer.ep, response));
                        }
                        Err(status) => {
                            let (error, unsent) = self.refused(&answer.ep, Some(rpc), status);
                            let failed = Failed {
                                wants_login: wants_login(&error, answer.sent_token),
                                error,
                                unsent,
                            };
                            match plan.failed(answer.id, failed, Instant::now()) {
                                Step::Renew => {
                                    self.renew_within(
                                        answer.generation,
                                        &answer.ep,
                                        plan.deadline(),
                                    )
                                    .await?;
                                    let now = Instant::now();
                                    let again = plan.launched_to(now, true, paced(&answer.ep, now));
                                    attempts.members.push((again, answer.ep.clone(), now));
                                    running.push(launch(again, answer.ep, now));
                                    continue;
                                }
                                step => step,
                            }
                        }
                    }
                }
                Event::Timer(Timer::Limit(id)) => {
                    // Only stream opens have a limit, and they run one attempt at a time:
                    // abandoning it means dropping every attempt.
                    // Its member is blamed as any unanswered attempt's is: only when its
                    // streams fell silent too (an open held up on a saturated member is slow,
                    // not lost).
                    if let Some(ep) = attempts.blamed(id) {
                        self.learn(ep, &Error::Timeout);
                    }
                    running.clear();
                    attempts.members.clear();
                    plan.fire(Timer::Limit(id), Instant::now())
                }
                Event::Timer(timer) => plan.fire(timer, Instant::now()),
            };
            match step {
                Step::Renew | Step::Wait => {}
                Step::Fail { error, blame } => {
                    for id in blame {
                        if let Some(ep) = attempts.blamed(id) {
                            self.learn(ep, &Error::Timeout);
                        }
                    }
                    return Err(error);
                }
                Step::Blame(id) => {
                    if let Some(ep) = attempts.blamed(id) {
                        self.learn(ep, &Error::Timeout);
                    }
                }
                Step::Hedge { early } => {
                    // The attempt in flight is overdue by its member's own pace: new calls
                    // avoid that member while it is suspected.
                    for (_, ep, _) in &attempts.members {
                        ep.suspect();
                    }
                    let now = Instant::now();
                    let Ok(next) = self.pick(route, &target, &attempts.tried, now) else {
                        plan.no_hedge(Instant::now());
                        continue;
                    };
                    if attempts.tried.contains(&next.url) {
                        // Nowhere else to go; keep waiting on what is in flight.
                        plan.no_hedge(Instant::now());
                        continue;
                    }
                    // The pace of the member of the attempt in flight: its own, not the
                    // fallback `paced` gives a member with none known.
                    let pace = attempts
                        .members
                        .last()
                        .and_then(|(_, ep, _)| ep.hedge_delay(cap, now));
                    if !plan.hedge_goes(early, pace, || self.ledger.hedge()) {
                        // Over budget: an early hedge waits for the cap, one at the cap looks
                        // again one cap later (the budget refills as calls go on).
                        self.ledger.count(Count::HedgeRefused);
                        plan.hedge_refused(Instant::now());
                        continue;
                    }
                    tracing::debug!(
                        rpc = rpc.name(),
                        to = %next.url,
                        early,
                        "hedging a slow request"
                    );
                    crate::metrics::retry(rpc.name());
                    self.ledger.count(Count::Hedge { early });
                    self.ledger.count(Count::Attempt);
                    attempts.tried.push(next.url.clone());
                    let id = plan.launched_to(now, false, paced(&next, now));
                    attempts.members.push((id, next.clone(), now));
                    running.push(launch(id, next, now));
                }
                Step::Retry { after, error } => {
                    let leader_until = self.leader_wait(route, plan.deadline());
                    match plan::retry_wait(after, leader_until, Instant::now()) {
                        RetryWait::Leader(until) => {
                            self.balancer.await_leader(until, super::LEADER_NUDGE).await;
                        }
                        RetryWait::Backoff => {
                            tokio::time::sleep(after).await;
                            self.await_leader(route, plan.deadline()).await;
                        }
                    }
                    let next = self.next_endpoint(route, &target, &mut attempts.tried)?;
                    tracing::debug!(rpc = rpc.name(), to = %next.url, %error, "retrying");
                    crate::metrics::retry(rpc.name());
                    self.ledger.count(Count::Attempt);
                    let now = Instant::now();
                    let id = plan.launched_to(now, false, paced(&next, now));
                    attempts.members.push((id, next.clone(), now));
                    running.push(launch(id, next, now));
                }
            }
        }
    }

    /// Renew the token, bounded by the call's deadline: a call never waits longer than it was
    /// allowed to for a login (nor for other callers' login ahead of it).
    async fn renew_within(
        &self,
        generation: u64,
        refused_by: &Arc<Endpoint>,
        deadline: Option<Instant>,
    ) -> Result<()> {
        let renew = self.renew_token(generation, Some(refused_by));
        match deadline {
            Some(d) => tokio::time::timeout_at(d, renew)
                .await
                .map_err(|_| Error::Timeout)?,
            None => renew.await,
        }
    }

    /// Make one unary call with retries, hedging and token renewal; see [`Transport::drive`].
    pub(super) async fn unary<Req, Resp, F, Fut>(
        &self,
        rpc: Rpc,
        how: Call,
        message: Req,
        call: F,
    ) -> Result<Resp>
    where
        Req: prost::Message + Clone,
        Resp: super::Headed,
        F: Fn(Conn, Request<Req>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<Resp>, tonic::Status>>,
    {
        if message.encoded_len() > self.options.max_request_bytes {
            return Err(Error::RequestTooLarge);
        }
        let (ep, response) = self
            .drive(rpc, how, false, || message.clone(), call)
            .await?;
        // An answer from another cluster's member is refused with the member, whatever it says;
        // any other answer's revision is one the client has seen (the monotonic floor).
        if let Some(header) = response.header() {
            self.balancer.check_cluster(&ep, header.cluster_id)?;
            self.observe_header(Some(header));
        }
        Ok(response)
    }
}

/// Sleep until `at`, or forever without a timer.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
#[path = "driver_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "driver_leader_tests.rs"]
mod leader_tests;
