//! One endpoint's health: a small state machine fed by probes and by real requests (no IO here).
//!
//! ```text
//!                 failure (transport error, timeout)
//!   +---------+ ------------------------------------> +---------+
//!   | Healthy |                                       | Ejected | <---------+
//!   +---------+ <--+                                  +---------+           |
//!     |  ^         | readmit_probes probe successes       | ejection time over  | failure
//!     |  |         |                                      v                     |
//!     |  |         +------------------------------- +-----------+ -------------+
//!     |  |                                          | Probation |
//!     |  | probe sees a leader                      +-----------+
//!     v  |
//!   +----------+   no leader (probe or "etcdserver: no leader" answer)
//!   | NoLeader |   reachable, serves serializable reads only
//!   +----------+
//! ```
//!
//! Ejection time grows linearly with consecutive ejections and is capped (not gRPC's exponential
//! backoff that reaches two minutes); the count decays once the endpoint has been healthy for a
//! while, so a flapping member keeps getting longer ejections while a member that failed once
//! comes back quickly.

use std::time::Duration;

use tokio::time::Instant;

/// The health of an endpoint as the balancer sees it.
///
/// ```no_run
/// # fn demo(client: etcd_ha::Client) {
/// use etcd_ha::HealthState;
/// let healthy = client.endpoints().iter().filter(|e| e.health == HealthState::Healthy).count();
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HealthState {
    /// Reachable and part of a cluster with a leader: takes any request.
    Healthy,
    /// Reachable, but its member has no leader (partitioned or electing): takes serializable
    /// reads only while a healthy endpoint exists.
    NoLeader,
    /// Failed recently: takes no requests while a healthy endpoint exists.
    Ejected,
    /// Ejection time is over: the prober is checking it; second choice after healthy ones.
    Probation,
}

/// Tunables of the state machine (from [`Options`](crate::Options)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct HealthConfig {
    /// First ejection lasts this long; the n-th lasts n times as long.
    pub(crate) eject_base: Duration,
    /// Longest ejection.
    pub(crate) eject_max: Duration,
    /// Successful probes in a row needed to leave probation.
    pub(crate) readmit_probes: u32,
    /// Healthy this long without a failure resets the ejection count.
    pub(crate) stable_after: Duration,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            eject_base: Duration::from_millis(250),
            eject_max: Duration::from_secs(2),
            readmit_probes: 2,
            stable_after: Duration::from_secs(10),
        }
    }
}

/// What a failed request or probe tells about the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Transport failure or no answer in time: the member may be dead, frozen or cut off.
    Unreachable,
    /// The member answered that it has no leader.
    NoLeader,
}

/// The state machine for one endpoint.
#[derive(Clone, Debug)]
pub(crate) struct Health {
    config: HealthConfig,
    state: HealthState,
    /// When `state` was entered.
    since: Instant,
    /// When something last said the endpoint is in `state`: its entry, or a probe or a
    /// failure that entered it again (only "no leader" is told again while it holds: a
    /// leaderless member stays so between probes only as far as anyone knows).
    heard: Instant,
    /// Ejections without a stable healthy period in between (drives the linear backoff).
    ejections: u32,
    /// End of the current ejection.
    eject_until: Instant,
    /// Successful probes in a row while in probation.
    probe_streak: u32,
    /// Smoothed latency of successful requests and probes.
    latency: Option<Duration>,
    /// The last failure, for [`Client::endpoints`](crate::Client::endpoints).
    last_error: Option<String>,
}

/// Weight of the newest sample in the latency average, in tenths (0.3): reacts within a few
/// requests. Integer arithmetic: `Duration::mul_f64` costs ~90 instructions a call, and this
/// runs on every answer.
const LATENCY_ALPHA_TENTHS: u32 = 3;

impl Health {
    /// A new endpoint: in probation until the first probe says otherwise, so the first request
    /// does not wait for it but may still use it when nothing better is known.
    pub(crate) fn new(config: HealthConfig, now: Instant) -> Self {
        Health {
            config,
            state: HealthState::Probation,
            since: now,
            heard: now,
            ejections: 0,
            eject_until: now,
            probe_streak: 0,
            latency: None,
            last_error: None,
        }
    }

    pub(crate) fn state(&self) -> HealthState {
        self.state
    }

    /// The state at `now` as [`tick`](Self::tick) would leave it, changing nothing: an
    /// ejection that ran out reads as probation. Readers use this, so that looking at an
    /// endpoint never moves its state machine (only events and the prober's ticks do).
    pub(crate) fn state_at(&self, now: Instant) -> HealthState {
        if self.ejection_over(now) {
            HealthState::Probation
        } else {
            self.state
        }
    }

    /// Since when the endpoint has been in [`state_at`](Self::state_at) `now`.
    pub(crate) fn since_at(&self, now: Instant) -> Instant {
        if self.ejection_over(now) {
            self.eject_until
        } else {
            self.since
        }
    }

    /// When something last said the endpoint is in [`state_at`](Self::state_at) `now`.
    pub(crate) fn heard_at(&self, now: Instant) -> Instant {
        if self.ejection_over(now) {
            self.eject_until
        } else {
            self.heard
        }
    }

    fn ejection_over(&self, now: Instant) -> bool {
        self.state == HealthState::Ejected && now >= self.eject_until
    }

    pub(crate) fn latency(&self) -> Option<Duration> {
        self.latency
    }

    pub(crate) fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// Until when the endpoint is ejected (in the past when it is not).
    pub(crate) fn eject_until(&self) -> Instant {
        self.eject_until
    }

    /// `state` is what the latest evidence at `now` says: entered if new, confirmed if not.
    fn enter(&mut self, state: HealthState, now: Instant) {
        if self.state != state {
            self.state = state;
            self.since = now;
            self.heard = now;
        } else {
            self.heard = self.heard.max(now);
        }
    }

    fn sample(&mut self, latency: Duration) {
        self.latency = Some(match self.latency {
            None => latency,
            Some(avg) => {
                let old = avg.saturating_mul(10 - LATENCY_ALPHA_TENTHS);
                old.saturating_add(latency.saturating_mul(LATENCY_ALPHA_TENTHS)) / 10
            }
        });
    }

    /// Move from Ejected to Probation once the ejection time is over.
    pub(crate) fn tick(&mut self, now: Instant) {
        if self.ejection_over(now) {
            self.probe_streak = 0;
            // Entered when the ejection ended, not when someone looked: `since_at` agrees.
            let ended = self.eject_until;
            self.enter(HealthState::Probation, ended);
        }
        if self.state == HealthState::Healthy
            && self.ejections > 0
            && now.duration_since(self.since) >= self.config.stable_after
        {
            self.ejections = 0;
        }
    }

    /// A real request succeeded here. It proves reachability, not leadership, so it does not
    /// shorten probation: only probes readmit (hysteresis against flapping).
    pub(crate) fn on_success(&mut self, latency: Duration, now: Instant) {
        self.sample(latency);
        self.tick(now);
    }

    /// A request or probe failed here.
    pub(crate) fn on_failure(&mut self, failure: Failure, error: String, now: Instant) {
        // An ejection that ran out is over: this failure starts the next, longer one.
        self.tick(now);
        self.last_error = Some(error);
        match failure {
            Failure::Unreachable => self.eject(now),
            Failure::NoLeader => {
                if self.state != HealthState::Ejected {
                    self.probe_streak = 0;
                    self.enter(HealthState::NoLeader, now);
                }
            }
        }
    }

    fn eject(&mut self, now: Instant) {
        if self.state == HealthState::Ejected {
            return;
        }
        self.ejections = self.ejections.saturating_add(1);
        let backoff = self
            .config
            .eject_base
            .saturating_mul(self.ejections)
            .min(self.config.eject_max);
        self.eject_until = now + backoff;
        self.probe_streak = 0;
        self.enter(HealthState::Ejected, now);
    }

    /// A probe answered in `latency`; `has_leader` says whether its member has a leader and
    /// served a linearizable read.
    pub(crate) fn on_probe_ok(&mut self, has_leader: bool, latency: Duration, now: Instant) {
        self.sample(latency);
        self.tick(now);
        if !has_leader {
            self.probe_streak = 0;
            if self.state != HealthState::Ejected {
                self.enter(HealthState::NoLeader, now);
            }
            return;
        }
        match self.state {
            HealthState::Healthy => {}
            // Still serving its ejection: the probe proves nothing until the time is over.
            HealthState::Ejected => {}
            HealthState::Probation | HealthState::NoLeader => {
                self.probe_streak += 1;
                // A member that only lacked a leader was reachable all along: one good probe
                // is enough. One that was ejected earns its way back.
                let needed = if self.state == HealthState::NoLeader || self.ejections == 0 {
                    1
                } else {
                    self.config.readmit_probes
                };
                if self.probe_streak >= needed {
                    self.enter(HealthState::Healthy, now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn first_probe_makes_a_new_endpoint_healthy() {
        let mut h = Health::new(HealthConfig::default(), Instant::now());
        assert_eq!(h.state(), HealthState::Probation);
        h.on_probe_ok(true, ms(3), Instant::now());
        assert_eq!(h.state(), HealthState::Healthy);
        assert_eq!(h.latency(), Some(ms(3)));
    }

    #[tokio::test(start_paused = true)]
    async fn failure_ejects_and_readmission_needs_probes() {
        let cfg = HealthConfig::default();
        let mut h = Health::new(cfg, Instant::now());
        h.on_probe_ok(true, ms(1), Instant::now());
        h.on_failure(Failure::Unreachable, "refused".into(), Instant::now());
        assert_eq!(h.state(), HealthState::Ejected);
        assert_eq!(h.last_error(), Some("refused"));
        // A probe during the ejection changes nothing.
        h.on_probe_ok(true, ms(1), Instant::now());
        assert_eq!(h.state(), HealthState::Ejected);
        tokio::time::advance(cfg.eject_base).await;
        h.tick(Instant::now());
        assert_eq!(h.state(), HealthState::Probation);
        // Requests do not readmit; two probes do.
        h.on_success(ms(1), Instant::now());
        assert_eq!(h.state(), HealthState::Probation);
        h.on_probe_ok(true, ms(1), Instant::now());
        assert_eq!(h.state(), HealthState::Probation);
        h.on_probe_ok(true, ms(1), Instant::now());
        assert_eq!(h.state(), HealthState::Healthy);
    }

    #[tokio::test(start_paused = true)]
    async fn flapping_gets_linearly_longer_ejections_capped() {
        let cfg = HealthConfig::default();
        let mut h = Health::new(cfg, Instant::now());
        let mut lengths = Vec::new();
        for _ in 0..12 {
            let now = Instant::now();
            h.on_failure(Failure::Unreachable, "x".into(), now);
            lengths.push(h.eject_until() - now);
            tokio::time::advance(h.eject_until() - now).await;
            h.tick(Instant::now());
            h.on_probe_ok(true, ms(1), Instant::now());
            h.on_probe_ok(true, ms(1), Instant::now());
            assert_eq!(h.state(), HealthState::Healthy);
        }
        assert_eq!(lengths[0], ms(250));
        assert_eq!(lengths[1], ms(500));
        assert_eq!(lengths[2], ms(750));
        assert_eq!(*lengths.last().unwrap(), cfg.eject_max);
        // Stable for a while: the count resets.
        tokio::time::advance(cfg.stable_after).await;
        h.tick(Instant::now());
        let now = Instant::now();
        h.on_failure(Failure::Unreachable, "x".into(), now);
        assert_eq!(h.eject_until() - now, ms(250));
    }

    #[tokio::test(start_paused = true)]
    async fn no_leader_is_not_ejection() {
        let mut h = Health::new(HealthConfig::default(), Instant::now());
        h.on_probe_ok(true, ms(1), Instant::now());
        h.on_failure(
            Failure::NoLeader,
            "etcdserver: no leader".into(),
            Instant::now(),
        );
        assert_eq!(h.state(), HealthState::NoLeader);
        let lost = Instant::now();
        tokio::time::advance(ms(700)).await;
        h.on_probe_ok(false, ms(1), Instant::now());
        assert_eq!(h.state(), HealthState::NoLeader);
        // Still the same loss, heard again later: the grace rule counts what was heard.
        assert_eq!(h.since_at(Instant::now()), lost);
        assert_eq!(h.heard_at(Instant::now()), lost + ms(700));
        h.on_probe_ok(true, ms(1), Instant::now());
        assert_eq!(h.state(), HealthState::Healthy);
    }

    #[tokio::test(start_paused = true)]
    async fn reading_an_ejection_that_ran_out_changes_nothing() {
        let mut h = Health::new(HealthConfig::default(), Instant::now());
        h.on_failure(Failure::Unreachable, "refused".into(), Instant::now());
        let until = h.eject_until();
        tokio::time::advance(until - Instant::now() + ms(7)).await;
        let now = Instant::now();
        // Read as probation since the ejection's end, but still ejected inside.
        assert_eq!(h.state_at(now), HealthState::Probation);
        assert_eq!(h.since_at(now), until);
        assert_eq!(h.state(), HealthState::Ejected);
        // A tick (the prober's) moves it, dated when the ejection ended.
        h.tick(now);
        assert_eq!(h.state(), HealthState::Probation);
        assert_eq!(h.since_at(now), until);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_after_an_ejection_ran_out_ejects_again_for_longer() {
        let mut h = Health::new(HealthConfig::default(), Instant::now());
        h.on_failure(Failure::Unreachable, "refused".into(), Instant::now());
        let first = h.eject_until() - Instant::now();
        tokio::time::advance(first).await;
        // Nobody ticked since: the failure itself ends the old ejection first.
        h.on_failure(Failure::Unreachable, "refused".into(), Instant::now());
        assert_eq!(h.state_at(Instant::now()), HealthState::Ejected);
        assert!(
            h.eject_until() - Instant::now() > first,
            "a longer ejection"
        );
    }
}
