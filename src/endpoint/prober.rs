//! The prober: one task per endpoint that asks its member, on its own timer, whether it is
//! reachable and has a leader, and records the answer.
//!
//! A probe is a Status call (member id, leader id, raft term) followed, when the member names a
//! leader, by a linearizable read of the key `health` with `hasleader=true`, like
//! `etcdctl endpoint health`: only that read proves the member can serve a request that needs
//! the leader right now (a partitioned member still answers Status, a frozen one answers
//! nothing). `permission denied` on the read counts as healthy: it went through consensus.
//!
//! A Status answer owed past the member's stall limit (8 x its own pace, at least 100 ms; see
//! `pace.rs`) makes it suspected before the probe's fixed timeout ejects it; and the timeout
//! ejects only a member whose own recent calls are much faster than the timeout (the same
//! rule as for a late call, `Endpoint::is_overdue`), so that a saturated box or a defragment
//! does not eject a healthy member.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tonic::Request;

use super::{Endpoint, Failure, HealthState, RaftView};
use crate::error::Error;
use crate::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use crate::proto::etcdserverpb::{RangeRequest, StatusRequest, kv_client::KvClient};
use crate::token::TokenCell;

/// Where a prober reports what it learns beyond the endpoint's own health: implemented by the
/// layer above (the balancer), so that this layer knows nothing of leaders or routing.
pub(crate) trait ProbeSink: Send + Sync + 'static {
    /// A Status answer: the member's id, the leader it follows, its raft term and cluster.
    /// `false`: the answer was refused (another cluster's member); the probe stops there.
    fn on_status(&self, ep: &Endpoint, view: RaftView) -> bool;
    /// The probe failed the way a request can fail (unreachable, timed out, no leader).
    fn on_failure(&self, ep: &Endpoint, error: &Error);
    /// A probe ended; its outcome is on the endpoint (health, linearizable read time).
    fn on_probed(&self, ep: &Endpoint);
    /// A Status answer carried the member's store revision: a revision the cluster has
    /// committed (the watch hub expects its stream to show it soon, see `watch/lag.rs`).
    fn on_revision(&self, _revision: i64) {}
}

/// A prober's timers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProbeTimers {
    /// Between probes of a member that is not ejected.
    pub(crate) interval: Duration,
    /// Bound on one probe (Status and the read together).
    pub(crate) timeout: Duration,
}

/// Probes one endpoint until it leaves the set or the sink goes away.
pub(crate) struct Prober {
    endpoint: Arc<Endpoint>,
    /// Weak: a prober must not keep the client alive.
    sink: Weak<dyn ProbeSink>,
    /// Wakes every prober at once (a failure hinted that the leader moved or a member died).
    probe_now: Arc<Notify>,
    timers: ProbeTimers,
    /// The client's token, for members whose Status needs a user.
    token: Option<Arc<TokenCell>>,
}

impl Prober {
    pub(crate) fn new(
        endpoint: Arc<Endpoint>,
        sink: Weak<dyn ProbeSink>,
        probe_now: Arc<Notify>,
        timers: ProbeTimers,
        token: Option<Arc<TokenCell>>,
    ) -> Self {
        Prober {
            endpoint,
            sink,
            probe_now,
            timers,
            token,
        }
    }

    pub(crate) async fn run(self) {
        // Probe at once: a new endpoint should not wait an interval to be known.
        let mut delay = Duration::ZERO;
        let mut suspected = self.endpoint.suspected_news();
        loop {
            let probe_now = self.probe_now.notified();
            tokio::select! {
                // The endpoint left the set, or the client is gone.
                () = self.endpoint.cancel.cancelled() => return,
                // Our own timer (the interval, or the end of an ejection).
                () = tokio::time::sleep(delay) => {}
                // A request failure hinted that the leader moved or a member died.
                () = probe_now => {}
                // A call here was overdue by the member's own pace: look now, so that a link
                // that turned slow is measured within a probe, not after an interval.
                Ok(()) = suspected.changed() => {}
                // A stream asks whether its leaderless member is still so.
                () = self.endpoint.probe_asked() => {}
            }
            // An ejection whose wait just ended is over: say so now, not at the probe's end.
            self.endpoint.tick(Instant::now());
            let Some(sink) = self.sink.upgrade() else {
                return;
            };
            let token = self.token.as_deref();
            let recheck = probe(&self.endpoint, self.timers.timeout, token, &*sink).await;
            sink.on_probed(&self.endpoint);
            drop(sink);
            // A suspicion raised meanwhile (by this probe's own Status check, or a call) is
            // answered by this probe: no news.
            suspected.borrow_and_update();
            // While ejected, the next probe waits for the ejection to end: that is the linear,
            // capped reconnect backoff (the channel is only dialled by probes meanwhile). A read
            // clearly slower than the one before is checked again at once: a link that turned
            // slow moves leader-bound calls after two reads, not two intervals.
            delay = match self.endpoint.state() {
                HealthState::Ejected => self
                    .endpoint
                    .eject_until()
                    .saturating_duration_since(Instant::now())
                    .max(self.timers.interval / 4),
                _ if recheck => Duration::ZERO,
                _ => self.timers.interval,
            };
        }
    }
}

/// One probe of `ep`; records the result on the endpoint and reports the rest to `sink`.
/// Returns whether its linearizable read was clearly slower than the one before (probe again
/// at once to confirm it).
pub(crate) async fn probe(
    ep: &Endpoint,
    timeout: Duration,
    token: Option<&TokenCell>,
    sink: &dyn ProbeSink,
) -> bool {
    let started = Instant::now();
    // The probe ends in a linearizable read: until one is served, the member owes it (what
    // tells a leader-bound call that the leader stalled, see `silence.rs`).
    ep.owe(Instant::now());

    // The linearizable read carries no auth token: an answer of etcd's auth layer ("user name
    // is empty", "permission denied") comes after the read index, so it proves as much. Status
    // needs a user on etcd 3.6 and 3.5.28+ with auth on: without one it answers nothing of
    // raft or version, and the client would not know the leader. So a member that refused an
    // anonymous Status is asked with the client's token from then on (which also keeps a
    // simple token alive: it expires only when the client is gone or its user changed).
    let mut request = Request::new(StatusRequest {});
    if let Some(token) = token.filter(|_| ep.status_needs_token()) {
        token.attach(request.metadata_mut());
    }
    let mut maintenance = MaintenanceClient::new(ep.channel.clone());
    let call = maintenance.status(request);
    tokio::pin!(call);
    // Overdue by the member's own pace: suspected at once (new serializable reads avoid it,
    // its watch stream checks itself); ejected only if the fixed timeout runs out too.
    let early = super::stall_limit(ep.pace_hint(), timeout);
    let answer = match tokio::time::timeout(early, &mut call).await {
        Ok(answer) => Ok(answer),
        Err(_) => {
            ep.suspect();
            tokio::time::timeout(timeout.saturating_sub(early), call).await
        }
    };
    let status = match answer {
        Ok(Ok(r)) => r.into_inner(),
        Ok(Err(s)) => {
            let err = Error::from_status(s, &ep.url);
            if matches!(err, Error::AuthRequired) && token.is_some() && !ep.status_needs_token() {
                // Ask again at once, with the token: see above.
                ep.set_status_needs_token();
                return Box::pin(probe(
                    ep,
                    timeout.saturating_sub(started.elapsed()),
                    token,
                    sink,
                ))
                .await;
            }
            // An answer of etcd's own (e.g. auth) still proves the member is there.
            if err.is_transport() || err.is_retryable() {
                // Through the sink, so that losing the leader is noticed at once.
                sink.on_failure(ep, &err);
            } else {
                ep.on_probe_ok(true, started.elapsed());
            }
            return false;
        }
        // The fixed timeout ran out: ejected, unless the member's own recent calls are so slow
        // that this is the box (a saturated machine, a defragment), not a stall: then it stays
        // suspected, and the next probe judges again. A stalled member's window fades by half
        // each 2 s generation without answers (see `latency.rs`): it is ejected once too few
        // samples are left to judge by (within 8 s for a member that answered ~500 calls a
        // generation), or at once if its last pace was fast. Nor is a member ejected whose
        // streams kept answering through the probe's second half: an overloaded leader, not a
        // gone one (see `heard.rs`).
        Err(_) if !ep.is_overdue(timeout) || ep.heard.still_answering(started, Instant::now()) => {
            tracing::debug!(endpoint = %ep.url, "probe timed out on a slow member; suspected");
            ep.suspect();
            return false;
        }
        Err(_) => {
            sink.on_failure(ep, &Error::Timeout);
            return false;
        }
    };
    let view = RaftView::from_status(&status);
    if !sink.on_status(ep, view) {
        return false;
    }
    if let Some(header) = &status.header {
        sink.on_revision(header.revision);
    }
    if view.leader_id == 0 {
        ep.on_probe_ok(false, started.elapsed());
        return false;
    }

    let mut request = Request::new(RangeRequest {
        key: b"health".to_vec(),
        ..Default::default()
    });
    request.metadata_mut().insert(
        "hasleader",
        tonic::metadata::AsciiMetadataValue::from_static("true"),
    );
    // The read alone is timed too: what a leader-bound call costs through this member (the
    // pick's detour around a slow link to the leader compares it across members).
    let read_started = Instant::now();
    let remaining = timeout.saturating_sub(read_started - started);
    match tokio::time::timeout(remaining, KvClient::new(ep.channel.clone()).range(request)).await {
        Ok(Ok(_)) => {
            ep.served();
            let recheck = ep.set_linearizable_ok(started, read_started.elapsed());
            ep.on_probe_ok(true, started.elapsed());
            recheck
        }
        Ok(Err(s)) => match Error::from_status(s, &ep.url) {
            // Permission denied went through consensus: healthy (etcdctl endpoint health).
            Error::PermissionDenied | Error::AuthRequired | Error::InvalidAuthToken => {
                ep.served();
                let recheck = ep.set_linearizable_ok(started, read_started.elapsed());
                ep.on_probe_ok(true, started.elapsed());
                recheck
            }
            e if e.is_transport() => {
                ep.on_failure(Failure::Unreachable, &e);
                false
            }
            e => {
                ep.on_failure(Failure::NoLeader, &e);
                false
            }
        },
        // Status answered but the read did not: reachable, but no working leader behind it.
        Err(_) => {
            ep.on_failure(Failure::NoLeader, &"probe timed out (linearizable read)");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::{HealthConfig, STALL_FLOOR};
    use tokio_util::sync::CancellationToken;

    /// Records failures on the endpoint, like the balancer.
    struct Sink;

    impl ProbeSink for Sink {
        fn on_status(&self, _ep: &Endpoint, _view: RaftView) -> bool {
            true
        }
        fn on_failure(&self, ep: &Endpoint, error: &Error) {
            ep.on_failure(Failure::Unreachable, error);
        }
        fn on_probed(&self, _ep: &Endpoint) {}
    }

    /// An endpoint on a listener that never accepts: the connection opens (the kernel's
    /// backlog), nothing ever answers, like a frozen member. Keep the listener alive.
    fn silent_member() -> (Arc<Endpoint>, std::net::TcpListener) {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", silent.local_addr().unwrap());
        let channel = tonic::transport::Channel::from_shared(url.clone())
            .unwrap()
            .connect_lazy();
        let (changes, _) = tokio::sync::watch::channel(());
        let ep = Endpoint::new(
            url.as_str().into(),
            channel,
            None,
            HealthConfig::default(),
            CancellationToken::new(),
            changes,
        );
        (ep, silent)
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_timeout_does_not_eject_a_member_slow_at_its_own_pace() {
        let (ep, silent) = silent_member();
        ep.on_probe_ok(true, Duration::from_millis(400));
        ep.on_probe_ok(true, Duration::from_millis(400));
        // Its calls take 400 ms (a saturated box): a 1 s probe timeout is not 4 x its tail.
        for _ in 0..100 {
            ep.on_success(
                Duration::from_millis(400),
                Some(Duration::from_secs(1)),
                Instant::now(),
            );
        }
        probe(&ep, Duration::from_secs(1), None, &Sink).await;
        assert_ne!(ep.state(), HealthState::Ejected);
        assert!(ep.is_suspected());
        drop(silent);
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_timeout_does_not_eject_a_member_whose_streams_keep_answering() {
        let (ep, silent) = silent_member();
        // A fast member by its calls (its pace alone would eject it at the timeout)...
        ep.on_probe_ok(true, Duration::from_millis(1));
        let probing = tokio::spawn({
            let ep = ep.clone();
            async move { probe(&ep, Duration::from_secs(1), None, &Sink).await }
        });
        // ...whose keep-alive stream answers every 10 ms all along: overloaded, not gone.
        for _ in 0..110 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            ep.heard.news(Instant::now());
        }
        probing.await.unwrap();
        assert_ne!(ep.state(), HealthState::Ejected);
        assert!(ep.is_suspected());
        drop(silent);
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_whose_streams_fell_silent_with_it_is_ejected_at_the_timeout() {
        let (ep, silent) = silent_member();
        ep.on_probe_ok(true, Duration::from_millis(1));
        // Its stream's last answers came just as the probe went out (frozen then).
        ep.heard.news(Instant::now());
        probe(&ep, Duration::from_secs(1), None, &Sink).await;
        assert_eq!(ep.state(), HealthState::Ejected);
        drop(silent);
    }

    #[tokio::test(start_paused = true)]
    async fn a_member_that_does_not_answer_is_suspected_at_its_pace_and_ejected_at_the_timeout() {
        let (ep, silent) = silent_member();
        // A member answering in 1 ms: its stall limit is the floor.
        ep.on_probe_ok(true, Duration::from_millis(1));
        ep.on_probe_ok(true, Duration::from_millis(1));
        let timeout = Duration::from_secs(1);
        let probing = tokio::spawn({
            let ep = ep.clone();
            async move { probe(&ep, timeout, None, &Sink).await }
        });
        tokio::time::sleep(STALL_FLOOR + Duration::from_millis(1)).await;
        assert!(ep.is_suspected(), "suspected at the member's pace");
        assert_ne!(ep.state(), HealthState::Ejected, "not ejected yet");
        probing.await.unwrap();
        assert_eq!(
            ep.state(),
            HealthState::Ejected,
            "ejected at the fixed timeout"
        );
        drop(silent);
    }
}
