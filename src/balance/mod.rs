//! The balancer: the endpoint set, the leader view, what failures teach them, and picking.
//!
//! It sits on `endpoint/` and knows nothing of the calls above it. Background tasks (probers,
//! member sync) and finished requests write what they learn here; a pick only reads snapshots
//! and asks the [`PickPolicy`]. The endpoint set and the leader view are each published through
//! a `tokio::sync::watch` channel, so waiters wake on a change instead of polling.

mod leader;
mod members;
mod outage;
mod outage_rule;
mod pick;
mod pool;

use std::sync::{Arc, Weak};

use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::endpoint::prober::{ProbeSink, ProbeTimers, Prober};
use crate::endpoint::{ClusterId, Dial, Endpoint, EndpointInfo, Failure, HealthConfig, RaftView};
use crate::error::{Error, Result};
use crate::revisions::Revisions;
use crate::rpc::Route;
use crate::token::TokenCell;
use pool::{Candidates, avoid_suspected, kept};

pub(crate) use leader::LeaderView;
#[cfg(test)]
pub(crate) use outage_rule::STOP_HANDOVER;
pub use pick::{Candidate, LeaderFirst, PickPolicy};

/// Timeouts of the leader in a row (since its last success) before it is ejected: one slow
/// answer of a healthy leader must not send every write through a follower.
const LEADER_STRIKES: u32 = 2;

/// What the balancer needs to build and watch endpoints.
#[derive(Clone, Debug)]
pub(crate) struct BalancerConfig {
    /// How members are dialled.
    pub(crate) dial: Dial,
    /// Ejection and readmission tunables.
    pub(crate) health: HealthConfig,
    /// The probers' timers.
    pub(crate) probes: ProbeTimers,
    /// The client's auth token, when it has credentials: shared with the calls, and shown to
    /// members whose Status needs a user (etcd 3.6, 3.5.28+; see `prober.rs`).
    pub(crate) token: Option<Arc<TokenCell>>,
    /// The client's newest revisions: the probes write theirs (see `revisions.rs`).
    pub(crate) revisions: Arc<Revisions>,
}

/// The endpoint set and the leader.
#[derive(Debug)]
pub(crate) struct Balancer {
    /// Replaced whole by member sync (its only writer); readers clone the `Arc`.
    endpoints: watch::Sender<Arc<Vec<Arc<Endpoint>>>>,
    leader: leader::LeaderCell,
    policy: Arc<dyn PickPolicy>,
    config: BalancerConfig,
    /// Wakes every prober at once (a failure hinted that the leader moved or a member died).
    probe_now: Arc<Notify>,
    /// Wakes member sync (a failure hinted that membership may have changed).
    pub(crate) sync_now: Arc<Notify>,
    /// Bumped whenever an endpoint's health changes.
    health_changes: watch::Sender<()>,
    /// The last time the cluster's revision went back (from, to), for the endpoint events.
    rewound: watch::Sender<Option<(i64, i64)>>,
    /// Cancelled when the client goes: stops every prober.
    cancel: CancellationToken,
    /// The cluster this client reached first; endpoints of another cluster are refused.
    cluster_id: ClusterId,
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Balancer {
    /// Dial `urls` (lazily) and start one prober per endpoint.
    pub(crate) fn start(
        urls: &[String],
        config: BalancerConfig,
        policy: Arc<dyn PickPolicy>,
    ) -> Result<Arc<Self>> {
        let balancer = Self::unprobed(urls, config, policy)?;
        for ep in balancer.endpoints().iter() {
            balancer.spawn_prober(ep.clone());
        }
        Ok(balancer)
    }

    /// The endpoint set without probers (tests of the layers above drive health themselves).
    pub(crate) fn unprobed(
        urls: &[String],
        config: BalancerConfig,
        policy: Arc<dyn PickPolicy>,
    ) -> Result<Arc<Self>> {
        let cancel = CancellationToken::new();
        let health_changes = watch::Sender::new(());
        let endpoints = urls
            .iter()
            .map(|u| {
                Ok(Endpoint::new(
                    u.as_str().into(),
                    config.dial.channel(u)?,
                    config.dial.layer.as_ref(),
                    config.health,
                    cancel.child_token(),
                    health_changes.clone(),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Arc::new(Balancer {
            endpoints: watch::Sender::new(Arc::new(endpoints)),
            leader: leader::LeaderCell::default(),
            policy,
            config,
            probe_now: Arc::new(Notify::new()),
            sync_now: Arc::new(Notify::new()),
            health_changes,
            rewound: watch::Sender::new(None),
            cancel,
            cluster_id: ClusterId::default(),
        }))
    }

    fn spawn_prober(self: &Arc<Self>, ep: Arc<Endpoint>) {
        let span = tracing::info_span!("etcd_ha_prober", endpoint = %ep.url);
        let sink: Weak<dyn ProbeSink> = Arc::downgrade(self) as Weak<dyn ProbeSink>;
        let prober = Prober::new(
            ep,
            sink,
            self.probe_now.clone(),
            self.config.probes,
            self.config.token.clone(),
        );
        tokio::spawn(tracing::Instrument::instrument(prober.run(), span));
    }

    /// The client's auth token cell, when it has credentials.
    pub(crate) fn token(&self) -> Option<&Arc<TokenCell>> {
        self.config.token.as_ref()
    }

    /// The endpoints now.
    pub(crate) fn endpoints(&self) -> Arc<Vec<Arc<Endpoint>>> {
        self.endpoints.borrow().clone()
    }

    /// Resolves whenever some endpoint's health changes (and once at once, for changes since
    /// the last look): long-lived streams use it to leave an ejected member without delay.
    pub(crate) fn health_changes(&self) -> watch::Receiver<()> {
        self.health_changes.subscribe()
    }

    /// The endpoint set; member sync's changes wake the receiver.
    pub(crate) fn endpoint_changes(&self) -> watch::Receiver<Arc<Vec<Arc<Endpoint>>>> {
        self.endpoints.subscribe()
    }

    /// The client's newest revisions (see `revisions.rs`).
    pub(crate) fn revisions(&self) -> &Arc<Revisions> {
        &self.config.revisions
    }

    /// The cluster's revision went back from `from` to `to` (see
    /// `Transport::observe_committed`).
    pub(crate) fn history_rewound(&self, from: i64, to: i64) {
        self.rewound.send_replace(Some((from, to)));
    }

    /// The last rewind of the cluster's history; changes wake the receiver.
    pub(crate) fn rewinds(&self) -> watch::Receiver<Option<(i64, i64)>> {
        self.rewound.subscribe()
    }

    /// The leader view; changes wake the receiver.
    pub(crate) fn leader_changes(&self) -> watch::Receiver<LeaderView> {
        self.leader.subscribe()
    }

    /// Wake every prober now.
    pub(crate) fn probe_now(&self) {
        self.probe_now.notify_waiters();
    }

    /// The leader's member id, 0 when unknown.
    pub(crate) fn leader_id(&self) -> u64 {
        self.leader.get().member_id
    }

    /// Record what a Status answer from `ep` says: its raft view on the endpoint, the leader
    /// here. An answer from another cluster than the client's records nothing: the endpoint is
    /// refused (see [`Balancer::refuse`]) and the typed error returned.
    pub(crate) fn record_status(&self, ep: &Endpoint, view: RaftView) -> Result<()> {
        self.check_cluster(ep, view.cluster_id)?;
        ep.set_raft(view);
        if let Some(previous) = self.leader.observe(view.leader_id, view.raft_term) {
            let (from, to) = (previous, view.leader_id);
            let (old, new) = (format!("{from:x}"), format!("{to:x}"));
            tracing::info!(from = %old, to = %new, term = view.raft_term, "leader changed");
            if from != 0 && to != 0 {
                crate::metrics::failover();
            }
        }
        Ok(())
    }

    /// An answer from `ep` says it belongs to cluster `cluster_id` (0: the answer had no
    /// header): an endpoint of another cluster than the client's is refused (see
    /// [`Balancer::refuse`]) and the typed error returned, so that nothing it said is used.
    pub(crate) fn check_cluster(&self, ep: &Endpoint, cluster_id: u64) -> Result<()> {
        if let Err(expected) = self.cluster_id.check(cluster_id) {
            let err = Error::ClusterIdMismatch {
                endpoint: ep.url.to_string(),
                expected,
                found: cluster_id,
            };
            self.refuse(ep, &err);
            return Err(err);
        }
        Ok(())
    }

    /// Take an endpoint of another cluster out of use: ejected at once (its last error says
    /// why), then dropped from the set and its prober stopped, so no call is ever routed to it.
    /// The set is never emptied, which leaves a last endpoint ejected.
    fn refuse(&self, ep: &Endpoint, err: &Error) {
        tracing::warn!(error = %err, "endpoint refused");
        ep.on_failure(Failure::Unreachable, err);
        if self.remove(ep) {
            ep.cancel.cancel();
        }
    }

    /// Take one endpoint out of the set, in one step with respect to member sync's
    /// replacements. Never empties the set; says whether it was removed.
    pub(crate) fn remove(&self, endpoint: &Endpoint) -> bool {
        self.endpoints.send_if_modified(|set| {
            let rest: Vec<Arc<Endpoint>> = set
                .iter()
                .filter(|e| !std::ptr::eq(e.as_ref(), endpoint))
                .cloned()
                .collect();
            if rest.is_empty() || rest.len() == set.len() {
                return false;
            }
            *set = Arc::new(rest);
            true
        })
    }

    /// An answer came from raft term `term`: when it is newer than the leader view's, an
    /// election happened that the probes have not reported yet, so ask them now instead of at
    /// their next interval.
    pub(crate) fn observe_term(&self, term: u64) {
        if term > self.leader.get().term {
            self.probe_now();
        }
    }

    /// Leadership is about to move away from `member_id` (a drain): leader-bound calls wait
    /// for the new leader instead of going through followers that would forward to the old one.
    pub(crate) fn leader_moving(&self, member_id: u64) {
        self.leader.forget(member_id, Instant::now());
    }

    /// A MoveLeader from `from` to `to` is done (etcd answered it, or `to` says it leads): `to`
    /// leads now (see [`LeaderCell::appoint`](leader::LeaderCell::appoint)); the probers are
    /// woken to confirm it.
    pub(crate) fn leader_moved(&self, from: u64, to: u64) {
        if self.leader.appoint(from, to) {
            let (old, new) = (format!("{from:x}"), format!("{to:x}"));
            tracing::info!(from = %old, to = %new, "leader changed (MoveLeader)");
        }
        self.probe_now();
    }

    /// A leader move away from `member_id` failed or was dropped: calls stop waiting for a new
    /// leader and go to the member again (it may still lead; the probers, woken, will say who
    /// does; see [`LeaderCell::end_outage_of`](leader::LeaderCell::end_outage_of)).
    pub(crate) fn leader_stayed(&self, member_id: u64) {
        self.leader.end_outage_of(member_id);
        self.probe_now();
    }

    /// What a failed call teaches (see [`Balancer::teach`]); a call that timed out on the
    /// leader counts as a strike, and the leader is ejected only at the second in a row.
    pub(crate) fn learn(&self, ep: &Endpoint, error: &Error) {
        let member = ep.raft().member_id;
        let was_leader = member != 0 && member == self.leader_id();
        if matches!(error, Error::Timeout) && was_leader && ep.strike() < LEADER_STRIKES {
            // One late answer of the leader: ask the probers, do not eject it yet.
            self.probe_now();
            return;
        }
        self.teach(ep, error);
    }

    /// What a failure teaches: eject or mark the endpoint, forget the leader when it was the
    /// leader that failed, and wake the probers when the leader may have moved. A probe's
    /// failure goes here directly: a dedicated health check that timed out is evidence enough.
    fn teach(&self, ep: &Endpoint, error: &Error) {
        let member = ep.raft().member_id;
        let was_leader = member != 0 && member == self.leader_id();
        match error {
            Error::Transport { .. } | Error::Timeout | Error::StreamClosed => {
                if error.is_connection_refused() {
                    ep.set_refused(Instant::now());
                }
                ep.on_failure(Failure::Unreachable, error);
                if was_leader {
                    self.leader.forget(member, Instant::now());
                }
                self.probe_now();
                self.sync_now.notify_one();
            }
            Error::NoLeader => {
                ep.on_failure(Failure::NoLeader, error);
                if was_leader {
                    self.leader.forget(member, Instant::now());
                }
                self.probe_now();
            }
            // A leader refusing a membership change because a peer is not yet connected
            // ("unhealthy cluster") still leads: forgetting it would start an outage on every
            // retry of the change (seen every 250 ms while a test retried MemberRemove).
            e if e.is_unhealthy_cluster() => {}
            Error::ProposalDropped => {
                if was_leader {
                    // The same instant for both: the outage this starts (or one already on)
                    // began no later than the drop, which keeps it on until a new leader.
                    let now = Instant::now();
                    ep.set_dropped(now);
                    self.leader.forget(member, now);
                }
                self.probe_now();
            }
            Error::LeaderChanged | Error::NotLeader | Error::Unavailable(_) => {
                if was_leader {
                    self.leader.forget(member, Instant::now());
                }
                self.probe_now();
            }
            _ => {}
        }
    }

    /// The endpoint for a request on `route` that already went to `tried` (by URL).
    pub(crate) fn pick(&self, route: Route, tried: &[Arc<str>]) -> Option<Arc<Endpoint>> {
        self.pick_at(route, tried, Instant::now())
    }

    /// [`Balancer::pick`] with the clock read by the caller (the call driver reads it once for
    /// the pick, the hedge delay and the attempt's start).
    pub(crate) fn pick_at(
        &self,
        route: Route,
        tried: &[Arc<str>],
        now: Instant,
    ) -> Option<Arc<Endpoint>> {
        let endpoints = self.endpoints();
        if endpoints.is_empty() {
            return None;
        }
        // One lock per member, for all the pick reads of it.
        let leader = self.leader_id();
        let mut candidates: Candidates =
            endpoints.iter().map(|e| e.candidate(leader, now)).collect();
        // Drained members take no new calls while any other member can. Nothing drains almost
        // always: only then is a filtered copy of the set made.
        let open: Vec<Arc<Endpoint>>;
        let draining = |c: &Candidate| c.draining;
        let pool: &[Arc<Endpoint>] =
            if candidates.iter().any(draining) && !candidates.iter().all(draining) {
                let keep: pool::Flags = candidates.iter().map(|c| !c.draining).collect();
                (open, candidates) = kept(&endpoints, candidates, &keep);
                &open
            } else {
                &endpoints
            };
        // A member suspected of stalling takes no new call that any healthy member can serve
        // as well; see `avoid_suspected`.
        let steady: Vec<Arc<Endpoint>>;
        let pool: &[Arc<Endpoint>] = match avoid_suspected(route, pool, &candidates) {
            Some(keep) => {
                (steady, candidates) = kept(pool, candidates, &keep);
                &steady
            }
            None => pool,
        };
        // A stalled leader that the others are served by (only our link to it broke) takes no
        // leader-bound call: a follower forwards it to the leader instead.
        let forwarded: Vec<Arc<Endpoint>>;
        let pool: &[Arc<Endpoint>] = match self.stalled_but_served(route, pool, &endpoints) {
            Some(stalled) => {
                let keep: Vec<bool> = pool.iter().map(|e| !Arc::ptr_eq(e, &stalled)).collect();
                (forwarded, candidates) = kept(pool, candidates, &keep);
                &forwarded
            }
            None => pool,
        };
        let tried: pool::Flags = pool
            .iter()
            .map(|e| tried.iter().any(|t| **t == *e.url))
            .collect();
        let index = self.policy.pick(route, &candidates, &tried);
        pool.get(index.min(pool.len() - 1)).cloned()
    }

    /// The leader's endpoint, for a leader-bound `route`, when it stalled while another member
    /// in `pool` has served since; `None` almost always (no stall: nothing is filtered).
    fn stalled_but_served(
        &self,
        route: Route,
        pool: &[Arc<Endpoint>],
        endpoints: &[Arc<Endpoint>],
    ) -> Option<Arc<Endpoint>> {
        if route != Route::Leader {
            return None;
        }
        match self.leader_stall_in(endpoints) {
            Some((ep, _, true)) if pool.len() > 1 && pool.iter().any(|e| Arc::ptr_eq(e, &ep)) => {
                Some(ep)
            }
            _ => None,
        }
    }

    /// The endpoint with this normalised URL, if it is in the set.
    pub(crate) fn endpoint(&self, url: &str) -> Option<Arc<Endpoint>> {
        self.endpoints().iter().find(|e| *e.url == *url).cloned()
    }

    /// Snapshots of every endpoint.
    pub(crate) fn infos(&self) -> Vec<EndpointInfo> {
        let leader = self.leader_id();
        self.endpoints().iter().map(|e| e.info(leader)).collect()
    }
}

impl ProbeSink for Balancer {
    fn on_status(&self, ep: &Endpoint, view: RaftView) -> bool {
        self.record_status(ep, view).is_ok()
    }

    fn on_failure(&self, ep: &Endpoint, error: &Error) {
        self.teach(ep, error);
    }

    fn on_revision(&self, revision: i64) {
        self.config.revisions.probed(revision);
    }

    fn on_probed(&self, _ep: &Endpoint) {
        // A probe may have ended the outage (a linearizable read served, or the lost leader
        // healthy again): publish that now, so that waiting calls go at once.
        self.settle_outage();
    }
}
