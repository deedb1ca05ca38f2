//! Draining a member before planned maintenance: [`Client::drain`] and [`Client::undrain`].
//!
//! A member about to be stopped (an upgrade, a node rotation, a pod eviction) is drained first:
//! if it leads, leadership moves to the healthiest other member (MoveLeader, the graceful
//! handover etcd itself performs on SIGTERM, but done before the stop, under the client's
//! control) once the writes other members forward to it are answered (a leader handing over
//! drops those silently); it gets no new call or stream while another member can take them;
//! the lease keeper's and the managed watches' streams leave it; and `drain` returns once
//! nothing of this client waits on it any more, which is when it is safe to stop. Calls made
//! meanwhile never see an error: they go elsewhere from the start.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::endpoint::{Endpoint, HealthState};
use crate::error::{Error, Result};
use crate::proto::etcdserverpb::MoveLeaderResponse;

/// How often `drain` looks whether the member is quiet yet: a short, bounded wait (in-flight
/// calls finish within their deadline), not a hot path.
const QUIET_CHECK: Duration = Duration::from_millis(5);

/// How often the MoveLeader target is asked whether it leads yet. The transfer itself takes
/// 10-40 ms on a healthy cluster, but etcd answers MoveLeader only when it next checks who
/// leads, a raft tick (the heartbeat interval, 100 ms by default) after the request: calls
/// waiting for the new leader go as soon as the target says it leads instead. A Status call is
/// cheap for etcd (no disk, no consensus), and this lasts only while leadership moves.
const TARGET_POLL: Duration = Duration::from_millis(5);

/// How long `drain` waits, before it moves leadership, for the leader-bound attempts that
/// other members forward to the leader: they finish in a round trip or two when the members
/// serve; past this, a member holding them is not serving and waiting longer saves nothing.
const FORWARDED_LIMIT: Duration = Duration::from_millis(500);

/// Undoes a drain that did not finish (it failed, or its caller dropped it): the member takes
/// calls again and, if leadership was moving off it, leader-bound calls stop waiting for a new
/// leader (the probers, woken, say who leads). Without it, the member stayed drained until an
/// `undrain` nobody knew was owed.
struct Undo<'a> {
    ep: Arc<Endpoint>,
    client: &'a Client,
    /// The member id whose leadership was moving.
    moving: Option<u64>,
    armed: bool,
}

impl Undo<'_> {
    /// The drain finished: nothing to undo.
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        tracing::info!(endpoint = %self.ep.url, "drain did not finish: undrained");
        self.ep.set_draining(false);
        if let Some(member) = self.moving {
            self.client.transport().balancer.leader_stayed(member);
        }
    }
}

impl Client {
    /// Drain the member behind `endpoint` (one of the client's endpoints, any accepted
    /// spelling) for planned maintenance, and return once it is safe to stop it: leadership
    /// moved away if it led, no call of this client waiting on it, no keep-alive or watch
    /// stream on it. New calls and streams go to other members until [`undrain`](Self::undrain)
    /// (unless no other member can serve). Bounded by the client's request timeout (5 s when it
    /// has none) for the in-flight calls, plus the leader move.
    ///
    /// Cancel-safe: if it fails, or the caller drops it before it returns, the member is not
    /// left drained (it takes calls again, as after [`undrain`](Self::undrain)). Leadership may
    /// still move: a MoveLeader already sent is carried out by etcd whether or not anyone waits
    /// for its answer, and the client follows the leader wherever it is.
    ///
    /// A zero-error rolling upgrade, one member at a time: `drain`, stop the member (SIGTERM),
    /// upgrade and start it, wait until [`endpoints`](Self::endpoints) shows it healthy again,
    /// `undrain`, next member.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// client.drain("http://10.0.0.1:2379").await?;
    /// // ... stop, upgrade and start the member, wait until it is healthy ...
    /// client.undrain("http://10.0.0.1:2379")?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn drain(&self, endpoint: &str) -> Result<()> {
        let transport = self.transport();
        let ep = transport.endpoint(endpoint)?;
        let member = ep.raft().member_id;
        let leads = member != 0 && member == transport.balancer.leader_id();
        if leads {
            // Leader-bound calls wait for the new leader from now on, and this comes before
            // the member leaves the pool: a call picked in between would go to a follower,
            // which forwards it to this member, which drops it silently once it hands over
            // (the caller waits out its deadline; seen in `tests/drain.rs`, 2 runs in 25).
            transport.balancer.leader_moving(member);
        }
        ep.set_draining(true);
        // Until `drain` returns Ok, a failure or a caller that drops it undoes the drain.
        let undo = Undo {
            ep: ep.clone(),
            client: self,
            moving: leads.then_some(member),
            armed: true,
        };
        if leads {
            self.forwarded_done(&ep).await;
            self.move_leadership_off(&ep).await?;
        }
        let limit = transport
            .options
            .request_timeout
            .unwrap_or(crate::options::DEFAULT_REQUEST_TIMEOUT);
        let until = Instant::now() + limit;
        while !self.quiet(&ep) {
            if Instant::now() >= until {
                tracing::warn!(endpoint = %ep.url, in_flight = ep.in_flight(), "drain: still busy");
                return Err(Error::Timeout);
            }
            tokio::time::sleep(QUIET_CHECK).await;
        }
        tracing::info!(endpoint = %ep.url, "drained: safe to stop");
        undo.disarm();
        Ok(())
    }

    /// End draining the member behind `endpoint`: it takes calls and streams again.
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// client.undrain("http://10.0.0.1:2379")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn undrain(&self, endpoint: &str) -> Result<()> {
        self.transport().endpoint(endpoint)?.set_draining(false);
        Ok(())
    }

    /// Wait (at most [`FORWARDED_LIMIT`]) until no prompt leader-bound attempt is in flight
    /// on a member other than `leader`. New ones wait for the next leader already (`drain`
    /// began the outage), but those sent before went through followers (a detour around a
    /// slow link to the leader, see `balance/pick.rs`) and are forwarded to `leader`, which
    /// drops forwarded proposals silently while it hands over: moved under them, they would
    /// wait out their callers' deadlines (seen once in `tests/drain.rs`: a put that began just
    /// before the drain of a leader timed out after 1 s while every other write went on).
    async fn forwarded_done(&self, leader: &Arc<Endpoint>) {
        let until = Instant::now() + FORWARDED_LIMIT;
        let forwarding = || {
            self.transport()
                .balancer
                .endpoints()
                .iter()
                .any(|e| !Arc::ptr_eq(e, leader) && e.leader_bound_in_flight() > 0)
        };
        // Ticks of tokio's timer (1 ms): the writes wait for the new leader meanwhile.
        while forwarding() && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Nothing of this client waits on `ep`: no attempt in flight, no supervised stream.
    fn quiet(&self, ep: &Endpoint) -> bool {
        let url = Some(ep.url.to_string());
        ep.in_flight() == 0
            && self.keeper().stream_endpoint() != url
            && self.watch().stream_endpoint() != url
    }

    /// Move leadership from `ep` to the healthiest other member, and record the new leader in
    /// the client's leader view as soon as it is known: when the target itself says it leads,
    /// or when etcd answers the MoveLeader, whichever comes first.
    ///
    /// Leader-bound calls already wait for the new leader (`drain` started the outage): the old
    /// one drops the proposals that followers forward to it while it hands over (they would
    /// hang until their deadline), and answers its own with `raft proposal dropped` (resent).
    /// If the move cannot start, the outage ends here.
    async fn move_leadership_off(&self, ep: &Arc<Endpoint>) -> Result<()> {
        let transport = self.transport();
        let from = ep.raft().member_id;
        let target = match self.transferee(ep) {
            Ok(target) => target,
            Err(e) => {
                transport.balancer.leader_stayed(from);
                return Err(e);
            }
        };
        let to = target.raft().member_id;
        let to_hex = format!("{to:x}");
        tracing::info!(endpoint = %ep.url, to = %to_hex, "drain: moving leadership");
        let on_leader = match self.maintenance().on(&ep.url) {
            Ok(on_leader) => on_leader,
            Err(e) => {
                transport.balancer.leader_stayed(from);
                return Err(e);
            }
        };
        let moved = on_leader.move_leader(to);
        let leads = self.until_leading(from, &target);
        tokio::pin!(moved, leads);
        let answer = tokio::select! {
            // etcd's answer: leadership moved, or the transfer failed.
            answer = &mut moved => Some(answer),
            // The target said it leads first; the leader view has it already.
            () = &mut leads => None,
        };
        self.on_moved(from, to, answer)
    }

    /// The member leadership goes to: the healthiest other voting member that is not drained.
    fn transferee(&self, ep: &Arc<Endpoint>) -> Result<Arc<Endpoint>> {
        self.transport()
            .balancer
            .endpoints()
            .iter()
            .filter(|e| !Arc::ptr_eq(e, ep) && e.raft().member_id != 0)
            .filter(|e| {
                let s = e.serving();
                s.health == HealthState::Healthy && !s.draining
            })
            .min_by_key(|e| e.info(0).latency.unwrap_or(Duration::MAX))
            .cloned()
            .ok_or(Error::NoEndpoints)
    }

    /// Ask `target` its status every [`TARGET_POLL`] until it says it leads, then record it
    /// as the leader (as MoveLeader's answer would: a Status answer's raft term is the term of
    /// the member's last applied entry, which lags behind its election). Never ends otherwise:
    /// MoveLeader's own answer or deadline ends the wait.
    async fn until_leading(&self, from: u64, target: &Arc<Endpoint>) {
        let to = target.raft().member_id;
        let Ok(maintenance) = self.maintenance().on(&target.url) else {
            return std::future::pending().await;
        };
        loop {
            if let Ok(status) = maintenance.status().await
                && status.leader == to
            {
                self.transport().balancer.leader_moved(from, to);
                return;
            }
            tokio::time::sleep(TARGET_POLL).await;
        }
    }

    /// What the move's outcome means for the leader view; `None`: the target said it leads.
    fn on_moved(
        &self,
        from: u64,
        to: u64,
        answer: Option<Result<MoveLeaderResponse>>,
    ) -> Result<()> {
        let balancer = &self.transport().balancer;
        match answer {
            None => Ok(()),
            Some(Ok(_)) => {
                balancer.leader_moved(from, to);
                Ok(())
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "drain: leadership did not move");
                balancer.leader_stayed(from);
                Err(e)
            }
        }
    }
}
