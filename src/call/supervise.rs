//! The stream supervisor's rules, shared by the two tasks that own a long-lived stream (the
//! lease keeper's keep-alive stream and the managed watches' shared stream): how a stream is
//! opened, when it should leave its member, and how long to wait before opening it again.
//!
//! Both tasks keep their own stream state (what they send and what the answers mean differ);
//! what must not drift between them lives here once: the open (through the call path, bounded),
//! the "better elsewhere" test, the reopen backoff and the rule that a stream that dies young
//! counts as a failed open.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Transport;
use super::streamed::BidiRpc;
use crate::endpoint::{Endpoint, HealthState};
use crate::error::{Error, Result};
use crate::stream::ResponseStream;

/// First wait after a failed open; the n-th consecutive failure waits n times as long, up to
/// [`MAX_REOPEN_BACKOFF`]. Each open already retried across members for a request timeout, so
/// this only keeps a dead cluster from being hammered; short, so a recovered one is found fast.
pub(crate) const REOPEN_BACKOFF: Duration = Duration::from_millis(100);

/// Longest wait between failed opens.
pub(crate) const MAX_REOPEN_BACKOFF: Duration = Duration::from_millis(500);

/// A stream that dies sooner than this after opening counts as a failed open for the backoff
/// (a member that accepts streams and drops them at once must not be reopened in a tight loop).
pub(crate) const MIN_STREAM_LIFE: Duration = Duration::from_secs(1);

/// How long a require-leader stream's member must have gone without a leader before the
/// stream leaves it. An election after a leader's death leaves the followers leaderless for
/// some 10-300 ms (and a re-run vote for another election timeout); a member cut off from its
/// peers stays so. Leaving at once re-created 100,000 watches on a member that had its new
/// leader 100 ms later (`watch-scale-bench`); etcd itself waits three election timeouts
/// (~3 s) before it cancels such streams, as reopening costs more than waiting.
pub(crate) const NO_LEADER_GRACE: Duration = Duration::from_secs(1);

/// Past the grace, how often a stream looks again for the probe it asked for.
const NO_LEADER_POLL: Duration = Duration::from_millis(100);

/// When a stream's request channel is full (it pushes back), try again this much later.
pub(crate) const FULL_RETRY: Duration = Duration::from_millis(10);

/// An open stream: its request sender, its answers, the member serving it.
pub(crate) type Opened<Req, Resp> = (mpsc::Sender<Req>, ResponseStream<Resp>, Arc<Endpoint>);

/// A stream being opened.
pub(crate) type Opening<Req, Resp> =
    Pin<Box<dyn Future<Output = Result<Opened<Req, Resp>>> + Send>>;

/// When to try opening again, after how many failures in a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reopen {
    pub(crate) at: Instant,
    pub(crate) failures: u32,
}

/// The supervisor of one task's stream: the transport it opens through (weakly: the task must
/// not keep the client alive) and the bound on one open.
#[derive(Clone, Debug)]
pub(crate) struct Supervisor {
    transport: Weak<Transport>,
    open_limit: Duration,
    /// Room for requests queued on the stream before the task must wait for it to drain.
    request_buffer: usize,
}

impl Supervisor {
    /// A supervisor opening through `transport`, each open bounded by the request timeout
    /// (its default when the client has none: a background stream must not wait forever).
    pub(crate) fn new(transport: &Arc<Transport>) -> Self {
        Supervisor {
            transport: Arc::downgrade(transport),
            open_limit: transport
                .options
                .request_timeout
                .unwrap_or(crate::options::DEFAULT_REQUEST_TIMEOUT),
            request_buffer: super::streams::STREAM_REQUEST_BUFFER,
        }
    }

    /// Queue up to `requests` on each stream before sends wait for it to drain: a task that
    /// pipelines many small requests (the keeper's renewals) must be able to put a whole
    /// window out in one turn, as it is woken only by answers and deadlines.
    pub(crate) fn with_request_buffer(mut self, requests: usize) -> Self {
        self.request_buffer = requests.max(1);
        self
    }

    /// Start opening the stream `first` is the first message of (its row and method: the RPC
    /// table's, `streamed.rs`), routed, retried and bounded by the call path.
    pub(crate) fn open<Req: BidiRpc>(&self, first: Req) -> Opening<Req, Req::Response> {
        self.open_avoiding(first, None)
    }

    /// [`open`](Self::open), leaving the members in `avoid` for last.
    pub(crate) fn open_avoiding<Req: BidiRpc>(
        &self,
        first: Req,
        avoid: Option<Arc<[Arc<str>]>>,
    ) -> Opening<Req, Req::Response> {
        let transport = self.transport.clone();
        let (limit, buffer) = (self.open_limit, self.request_buffer);
        Box::pin(async move {
            let transport = transport.upgrade().ok_or(Error::Shutdown)?;
            transport.open_supervised(first, limit, buffer, avoid).await
        })
    }

    /// The stream on `endpoint` is left (`error`: what went wrong with its member, taught to
    /// the balancer so the next pick avoids it). When to open again: at once, unless the
    /// stream died young, which counts as one more failed open.
    pub(crate) fn lost(
        &self,
        endpoint: &Endpoint,
        error: Option<&Error>,
        opened: Instant,
        failures: u32,
        now: Instant,
    ) -> Reopen {
        if let (Some(error), Some(transport)) = (error, self.transport.upgrade()) {
            transport.learn(endpoint, error);
        }
        if now - opened < MIN_STREAM_LIFE {
            failed_open(failures, now)
        } else {
            Reopen {
                at: now,
                failures: 0,
            }
        }
    }

    /// Whether the stream opened on `endpoint` at `opened` should leave it for another at
    /// `now`: the probers or other requests found it dead, frozen or cut off (ejected) before
    /// the stream's own silence limit did, and some other member is not; or, for a
    /// require-leader stream, its member lost its leader since the stream opened and a probe
    /// still found it without one [`NO_LEADER_GRACE`] later, while another has one; or the
    /// operator drains it.
    ///
    /// Why "since the stream opened": a require-leader stream opens only on a member that has
    /// a leader, so a "no leader" seen before the open is refuted by the open itself. Read
    /// anyway, it sent streams opened during an election away from members that had just
    /// found their new leader, and back to them (three moves in 40 ms, 33,333 watches
    /// re-created each time, in a `watch-scale-bench` run).
    pub(crate) fn better_elsewhere(&self, endpoint: &Arc<Endpoint>, opened: Instant) -> bool {
        let Some(transport) = self.transport.upgrade() else {
            return false;
        };
        let require_leader = transport.options.require_leader;
        let here = endpoint.serving();
        let wanted: fn(HealthState) -> bool = match here.health {
            HealthState::Ejected => |s| s != HealthState::Ejected,
            HealthState::NoLeader
                if require_leader
                    && here.since > opened
                    && here.heard >= here.since + NO_LEADER_GRACE =>
            {
                |s| s == HealthState::Healthy
            }
            // Drained by the operator: any member that is not ejected will do.
            _ if here.draining => |s| s != HealthState::Ejected,
            _ => return false,
        };
        transport.balancer.endpoints().iter().any(|e| {
            let there = e.serving();
            !Arc::ptr_eq(e, endpoint) && !there.draining && wanted(there.health)
        })
    }
}

impl Supervisor {
    /// When [`better_elsewhere`](Self::better_elsewhere) must be asked again for the stream
    /// opened on `endpoint` at `opened`, though no health changes (`None`: nothing pending):
    /// its member lost its leader since the open, and the grace runs out then; or it ran out
    /// with no probe since, and one is asked for now (a member probed every second may have
    /// found its leader a moment after its last probe: the grace counts what was heard, not
    /// how long nobody looked).
    pub(crate) fn recheck_at(
        &self,
        endpoint: &Endpoint,
        opened: Instant,
        now: Instant,
    ) -> Option<Instant> {
        let here = endpoint.serving();
        if here.health != HealthState::NoLeader || here.since <= opened {
            return None;
        }
        let grace_over = here.since + NO_LEADER_GRACE;
        if now < grace_over {
            return Some(grace_over);
        }
        if here.heard >= grace_over {
            // Heard leaderless past the grace: the rule has decided.
            return None;
        }
        endpoint.probe_soon();
        Some(now + NO_LEADER_POLL)
    }

    /// Whether another member could take `endpoint`'s stream now: healthy, not suspected, not
    /// drained. A stream overdue by its member's pace moves only then (with nowhere to go, the
    /// fixed rules decide).
    pub(crate) fn healthy_elsewhere(&self, endpoint: &Arc<Endpoint>) -> bool {
        self.transport.upgrade().is_some_and(|t| {
            t.balancer
                .endpoints()
                .iter()
                .any(|e| !Arc::ptr_eq(e, endpoint) && e.serving().takes_streams())
        })
    }

    /// Whether a member healthy for at least `settled` serves none of the streams in `taken`
    /// (by URL) and is not `also`: a stream that shares its member with a sibling could have
    /// one of its own.
    pub(crate) fn free_member(
        &self,
        taken: &[Arc<str>],
        also: Option<&str>,
        settled: Duration,
        now: Instant,
    ) -> bool {
        self.transport.upgrade().is_some_and(|t| {
            t.balancer.endpoints().iter().any(|e| {
                let there = e.serving();
                !taken.iter().any(|u| **u == *e.url)
                    && also != Some(&*e.url)
                    && there.takes_streams()
                    && now.saturating_duration_since(there.since) >= settled
            })
        })
    }

    /// Whether the client knows a leader and it is not `endpoint`'s member: a leader-bound
    /// stream that leaves `endpoint` goes there.
    pub(crate) fn leader_elsewhere(&self, endpoint: &Endpoint) -> bool {
        self.transport.upgrade().is_some_and(|t| {
            let leader = t.balancer.leader_id();
            leader != 0 && leader != endpoint.raft().member_id
        })
    }
}

impl Supervisor {
    /// Whether a leader-bound stream on `endpoint`, a follower, should move to the leader: the
    /// client knows the leader, and finds it healthy, unsuspected and not drained. A follower
    /// forwards each keep-alive to the leader one at a time (etcd's `LeaseRenew` over the peer
    /// link), so a keep-alive stream there renews some 30 times fewer leases per second than
    /// on the leader; one left there after a failover (opened while no leader was known)
    /// starves once the leases due outnumber what it renews.
    pub(crate) fn healthy_leader_elsewhere(&self, endpoint: &Endpoint) -> bool {
        self.transport.upgrade().is_some_and(|t| {
            let leader = t.balancer.leader_id();
            leader != 0
                && leader != endpoint.raft().member_id
                && t.balancer
                    .endpoints()
                    .iter()
                    .any(|e| e.raft().member_id == leader && e.serving().takes_streams())
        })
    }
}

/// An open failed after `failures` failures in a row before it: when to try again.
pub(crate) fn failed_open(failures: u32, now: Instant) -> Reopen {
    let failures = failures + 1;
    Reopen {
        at: now + backoff(failures),
        failures,
    }
}

/// Wait after the n-th consecutive failed open.
pub(crate) fn backoff(failures: u32) -> Duration {
    (REOPEN_BACKOFF * failures).min(MAX_REOPEN_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reopen_backoff_is_short_and_capped() {
        assert_eq!(backoff(1), REOPEN_BACKOFF);
        assert_eq!(backoff(3), Duration::from_millis(300));
        assert_eq!(backoff(100), MAX_REOPEN_BACKOFF);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_that_dies_young_counts_as_a_failed_open() {
        let urls = [
            "http://127.0.0.1:1".to_owned(),
            "http://127.0.0.1:2".to_owned(),
        ];
        let transport = Transport::unprobed(&urls, crate::options::Options::default());
        let supervisor = Supervisor::new(&transport);
        let ep = transport.balancer.endpoints()[0].clone();
        let opened = Instant::now();
        tokio::time::advance(Duration::from_millis(200)).await;
        let young = supervisor.lost(&ep, None, opened, 2, Instant::now());
        assert_eq!(young.failures, 3);
        assert_eq!(young.at, Instant::now() + Duration::from_millis(300));
        tokio::time::advance(MIN_STREAM_LIFE).await;
        let lived = supervisor.lost(&ep, None, opened, 2, Instant::now());
        assert_eq!(
            lived,
            Reopen {
                at: Instant::now(),
                failures: 0
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_bound_stream_can_leave_a_follower_only_for_a_known_leader() {
        let urls = [
            "http://127.0.0.1:1".to_owned(),
            "http://127.0.0.1:2".to_owned(),
        ];
        let transport = Transport::unprobed(&urls, crate::options::Options::default());
        let supervisor = Supervisor::new(&transport);
        let eps = transport.balancer.endpoints();
        assert!(!supervisor.leader_elsewhere(&eps[1]), "no leader known");
        for (i, ep) in eps.iter().enumerate() {
            let view = crate::endpoint::RaftView {
                member_id: i as u64 + 1,
                leader_id: 1,
                raft_term: 1,
                cluster_id: 7,
                ..Default::default()
            };
            transport.balancer.record_status(ep, view).unwrap();
        }
        assert!(supervisor.leader_elsewhere(&eps[1]), "on a follower");
        assert!(!supervisor.leader_elsewhere(&eps[0]), "on the leader");
        // Somewhere healthy to go: only while the other member is healthy and unsuspected.
        for ep in eps.iter() {
            ep.on_probe_ok(true, Duration::from_millis(1));
            ep.on_probe_ok(true, Duration::from_millis(1));
        }
        assert!(supervisor.healthy_elsewhere(&eps[0]));
        assert!(
            supervisor.healthy_leader_elsewhere(&eps[1]),
            "a follower, the leader healthy"
        );
        assert!(
            !supervisor.healthy_leader_elsewhere(&eps[0]),
            "on the leader"
        );
        eps[0].suspect();
        assert!(
            !supervisor.healthy_leader_elsewhere(&eps[1]),
            "the leader is suspected: stay on the follower"
        );
        eps[1].suspect();
        assert!(
            !supervisor.healthy_elsewhere(&eps[0]),
            "the other is suspected"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn streams_leave_an_ejected_or_leaderless_member_when_another_is_better() {
        let urls = [
            "http://127.0.0.1:1".to_owned(),
            "http://127.0.0.1:2".to_owned(),
        ];
        let transport = Transport::unprobed(&urls, crate::options::Options::default());
        let supervisor = Supervisor::new(&transport);
        let eps = transport.balancer.endpoints();
        for ep in eps.iter() {
            ep.on_probe_ok(true, Duration::from_millis(1));
            ep.on_probe_ok(true, Duration::from_millis(1));
        }
        let opened = Instant::now();
        let now = Instant::now;
        tokio::time::advance(Duration::from_millis(10)).await;
        assert!(
            !supervisor.better_elsewhere(&eps[0], opened),
            "healthy: stay"
        );
        assert_eq!(supervisor.recheck_at(&eps[0], opened, now()), None);
        eps[0].on_probe_ok(false, Duration::from_millis(1));
        assert_eq!(eps[0].state(), HealthState::NoLeader);
        let lost = now();
        assert!(
            !supervisor.better_elsewhere(&eps[0], opened),
            "lost its leader just now: an election may end in a moment"
        );
        assert_eq!(
            supervisor.recheck_at(&eps[0], opened, now()),
            Some(lost + NO_LEADER_GRACE)
        );
        tokio::time::advance(NO_LEADER_GRACE).await;
        assert!(
            !supervisor.better_elsewhere(&eps[0], opened),
            "the grace is over, but nobody looked since: its leader may be back"
        );
        assert_eq!(
            supervisor.recheck_at(&eps[0], opened, now()),
            Some(now() + NO_LEADER_POLL),
            "a probe is asked for, and the stream looks again soon"
        );
        tokio::time::timeout(Duration::from_millis(1), eps[0].probe_asked())
            .await
            .expect("the prober was asked to look");
        eps[0].on_probe_ok(false, Duration::from_millis(1));
        assert!(
            supervisor.better_elsewhere(&eps[0], opened),
            "heard leaderless past the grace, the other has a leader"
        );
        assert_eq!(
            supervisor.recheck_at(&eps[0], opened, now()),
            None,
            "decided: nothing left to look at"
        );
        assert!(
            !supervisor.better_elsewhere(&eps[0], now()),
            "a stream opened after the member was seen leaderless: the open proved a leader"
        );
        assert_eq!(supervisor.recheck_at(&eps[0], now(), now()), None);
        eps[0].on_failure(crate::endpoint::Failure::Unreachable, &"reset");
        assert!(
            supervisor.better_elsewhere(&eps[0], now()),
            "ejected, the other is healthy"
        );
        eps[1].on_failure(crate::endpoint::Failure::Unreachable, &"reset");
        assert!(
            !supervisor.better_elsewhere(&eps[0], opened),
            "nowhere better to go"
        );
    }
}
