//! Draining a member before planned maintenance: [`Client::drain`] and [`Client::undrain`].
//!
//! A member about to be stopped (an upgrade, a node rotation, a pod eviction) is drained first:
//! if it leads, leadership moves to the healthiest other member (MoveLeader, the graceful
//! handover etcd itself performs on SIGTERM, but done before the stop, under the client's
//! control); it gets no new call or stream while another member can take them; the lease
//! keeper's and the managed watches' streams leave it; and `drain` returns once nothing of this
//! client waits on it any more, which is when it is safe to stop. Calls made meanwhile never
//! see an error: they go elsewhere from the start.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::endpoint::{Endpoint, HealthState};
use crate::error::{Error, Result};

/// How often `drain` looks whether the member is quiet yet: a short, bounded wait (in-flight
/// calls finish within their deadline), not a hot path.
const QUIET_CHECK: Duration = Duration::from_millis(5);

/// How long leadership may take to move after MoveLeader before `drain` gives up on it.
const MOVE_LIMIT: Duration = Duration::from_secs(5);

impl Client {
    /// Drain the member behind `endpoint` (one of the client's endpoints, any accepted
    /// spelling) for planned maintenance, and return once it is safe to stop it: leadership
    /// moved away if it led, no call of this client waiting on it, no keep-alive or watch
    /// stream on it. New calls and streams go to other members until [`undrain`](Self::undrain)
    /// (unless no other member can serve). Bounded by the client's request timeout (5 s when it
    /// has none) for the in-flight calls, plus the leader move.
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
        ep.set_draining(true);
        let member = ep.raft().member_id;
        if member != 0 && member == transport.balancer.leader_id() {
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

    /// Nothing of this client waits on `ep`: no attempt in flight, no supervised stream.
    fn quiet(&self, ep: &Endpoint) -> bool {
        let url = Some(ep.url.to_string());
        ep.in_flight() == 0
            && self.keeper().stream_endpoint() != url
            && self.watch().stream_endpoint() != url
    }

    /// Move leadership from `ep` to the healthiest other member, and wait until the client's
    /// leader view says it moved.
    async fn move_leadership_off(&self, ep: &Arc<Endpoint>) -> Result<()> {
        let transport = self.transport();
        let target = transport
            .balancer
            .endpoints()
            .iter()
            .filter(|e| !Arc::ptr_eq(e, ep) && !e.is_draining() && e.raft().member_id != 0)
            .filter(|e| e.state() == HealthState::Healthy)
            .min_by_key(|e| e.info(0).latency.unwrap_or(Duration::MAX))
            .map(|e| e.raft().member_id)
            .ok_or(Error::NoEndpoints)?;
        let to = format!("{target:x}");
        tracing::info!(endpoint = %ep.url, %to, "drain: moving leadership");
        // From now on leader-bound calls wait for the new leader: the old one drops the
        // proposals that followers forward to it while it hands over (they would hang until
        // their deadline), and answers its own with `raft proposal dropped` (resent).
        transport.balancer.leader_moving(ep.raft().member_id);
        self.maintenance().on(&ep.url)?.move_leader(target).await?;
        let mut view = transport.balancer.leader_changes();
        let until = Instant::now() + MOVE_LIMIT;
        let from = ep.raft().member_id;
        loop {
            let leader = view.borrow_and_update().member_id;
            if leader != 0 && leader != from {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(Error::Timeout);
            }
            // The probers learn the new leader; wake them, and wait for the view to change.
            transport.balancer.probe_now();
            let next_nudge = until.min(Instant::now() + Duration::from_millis(100));
            let _ = tokio::time::timeout_at(next_nudge, view.changed()).await;
        }
    }
}
