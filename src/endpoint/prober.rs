//! The prober: one task per endpoint that asks its member, on its own timer, whether it is
//! reachable and has a leader, and records the answer.
//!
//! A probe is a Status call (member id, leader id, raft term) followed, when the member names a
//! leader, by a linearizable read of the key `health` with `hasleader=true`, like
//! `etcdctl endpoint health`: only that read proves the member can serve a request that needs
//! the leader right now (a partitioned member still answers Status, a frozen one answers
//! nothing). `permission denied` on the read counts as healthy: it went through consensus.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tonic::Request;

use super::{Endpoint, Failure, HealthState, RaftView};
use crate::error::Error;
use crate::proto::etcdserverpb::{RangeRequest, StatusRequest, StatusResponse};
use crate::transport::Transport;

/// Probes one endpoint until it leaves the set or the client goes away.
pub(crate) struct Prober {
    endpoint: Arc<Endpoint>,
    /// Weak: a prober must not keep the client alive.
    transport: Weak<Transport>,
}

impl Prober {
    pub(crate) fn new(endpoint: Arc<Endpoint>, transport: Weak<Transport>) -> Self {
        Prober {
            endpoint,
            transport,
        }
    }

    pub(crate) async fn run(self) {
        // Probe at once: a new endpoint should not wait an interval to be known.
        let mut delay = Duration::ZERO;
        loop {
            let Some(transport) = self.transport.upgrade() else {
                return;
            };
            let notify = transport.probe_now.clone();
            let interval = transport.options.probe_interval;
            drop(transport);
            let probe_now = notify.notified();
            tokio::select! {
                // The endpoint left the set, or the client is gone.
                () = self.endpoint.cancel.cancelled() => return,
                // Our own timer (the interval, or the end of an ejection).
                () = tokio::time::sleep(delay) => {}
                // A request failure hinted that the leader moved or a member died.
                () = probe_now => {}
            }
            let Some(transport) = self.transport.upgrade() else {
                return;
            };
            probe(&transport, &self.endpoint).await;
            // While ejected, the next probe waits for the ejection to end: that is the linear,
            // capped reconnect backoff (the channel is only dialled by probes meanwhile).
            delay = match self.endpoint.state() {
                HealthState::Ejected => self
                    .endpoint
                    .eject_until()
                    .saturating_duration_since(Instant::now())
                    .max(interval / 4),
                _ => interval,
            };
        }
    }
}

/// Record what a Status answer from `ep` says: its member id and raft view on the endpoint, the
/// leader on the balancer. An answer from another cluster than the client's records nothing:
/// the endpoint is refused (see [`refuse`]) and the typed error returned.
pub(crate) fn record_status(
    transport: &Transport,
    ep: &Endpoint,
    status: &StatusResponse,
) -> Result<RaftView, Error> {
    let found = status.header.as_ref().map_or(0, |h| h.cluster_id);
    if let Err(expected) = transport.cluster_id.check(found) {
        let err = Error::ClusterIdMismatch {
            endpoint: ep.url.to_string(),
            expected,
            found,
        };
        refuse(transport, ep, &err);
        return Err(err);
    }
    let view = RaftView {
        member_id: status.header.as_ref().map(|h| h.member_id).unwrap_or(0),
        leader_id: status.leader,
        raft_term: status.raft_term,
    };
    ep.set_raft(view);
    transport
        .balancer
        .observe_leader(view.leader_id, view.raft_term);
    Ok(view)
}

/// Take an endpoint of another cluster out of use: ejected at once (its last error says why),
/// then dropped from the set and its prober stopped, so no call is ever routed to it. The set
/// is never emptied, which leaves a last endpoint ejected.
fn refuse(transport: &Transport, ep: &Endpoint, err: &Error) {
    tracing::warn!(error = %err, "endpoint refused");
    ep.on_failure(Failure::Unreachable, err);
    if transport.balancer.remove(ep) {
        ep.cancel.cancel();
    }
}

/// One probe of `ep`; records the result on the endpoint and the leader on the balancer.
pub(crate) async fn probe(transport: &Transport, ep: &Endpoint) {
    let timeout = transport.options.probe_timeout;
    let conn = transport.conn(ep);
    let started = Instant::now();

    // Probes carry no auth token: an answer of etcd's auth layer ("user name is empty",
    // "permission denied") comes after the read index, so it proves as much, and probing with
    // the token would keep a simple token alive that should expire.
    let request = Request::new(StatusRequest {});
    let status = match tokio::time::timeout(timeout, conn.maintenance().status(request)).await {
        Ok(Ok(r)) => r.into_inner(),
        Ok(Err(s)) => {
            let err = Error::from_status(s, &ep.url);
            // An answer of etcd's own (e.g. auth) still proves the member is there.
            if err.is_transport() || err.is_retryable() {
                // Through the transport, so that losing the leader is noticed at once.
                transport.learn(ep, &err);
            } else {
                ep.on_probe_ok(true, started.elapsed());
            }
            return;
        }
        Err(_) => {
            transport.learn(ep, &Error::Timeout);
            return;
        }
    };
    let Ok(view) = record_status(transport, ep, &status) else {
        return;
    };
    if view.leader_id == 0 {
        ep.on_probe_ok(false, started.elapsed());
        return;
    }

    let mut request = Request::new(RangeRequest {
        key: b"health".to_vec(),
        ..Default::default()
    });
    request.metadata_mut().insert(
        "hasleader",
        tonic::metadata::AsciiMetadataValue::from_static("true"),
    );
    let remaining = timeout.saturating_sub(started.elapsed());
    match tokio::time::timeout(remaining, conn.kv().range(request)).await {
        Ok(Ok(_)) => {
            ep.set_linearizable_ok(started);
            ep.on_probe_ok(true, started.elapsed())
        }
        Ok(Err(s)) => match Error::from_status(s, &ep.url) {
            // Permission denied went through consensus: healthy (etcdctl endpoint health).
            Error::PermissionDenied | Error::AuthRequired | Error::InvalidAuthToken => {
                ep.set_linearizable_ok(started);
                ep.on_probe_ok(true, started.elapsed())
            }
            e if e.is_transport() => ep.on_failure(Failure::Unreachable, &e),
            e => ep.on_failure(Failure::NoLeader, &e),
        },
        // Status answered but the read did not: reachable, but no working leader behind it.
        Err(_) => ep.on_failure(Failure::NoLeader, &"probe timed out (linearizable read)"),
    }
}
