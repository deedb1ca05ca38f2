//! Endpoint events: the health and leader transitions that [`Client::endpoints`] shows as a
//! snapshot, as a stream, for users who route or alert on them.
//!
//! Built on the balancer's watch channels (endpoint health, leader view, endpoint set): each
//! change wakes the stream, which compares a fresh snapshot with the last one and yields one
//! event per difference. Changes that follow each other faster than the stream is read are
//! seen as one transition from the first state to the last (a watch channel keeps only the
//! newest value), so an event says where things stand now, never something stale.
//!
//! [`Client::endpoints`]: crate::Client::endpoints

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use tokio::sync::watch;

use crate::balance::{Balancer, LeaderView};
use crate::endpoint::{Endpoint, EndpointInfo, HealthState};

/// One transition of the client's view of the cluster.
///
/// ```
/// use etcd_ha::{EndpointEvent, HealthState};
///
/// fn alert(event: &EndpointEvent) -> Option<String> {
///     match event {
///         EndpointEvent::Health { url, to: HealthState::Ejected, error, .. } => {
///             Some(format!("{url} ejected: {}", error.as_deref().unwrap_or("?")))
///         }
///         EndpointEvent::Leader { to: None, .. } => Some("no leader known".into()),
///         _ => None,
///     }
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndpointEvent {
    /// An endpoint's health changed.
    Health {
        /// The endpoint's URL.
        url: String,
        /// Its member id, once known.
        member_id: Option<u64>,
        /// The state it left.
        from: HealthState,
        /// The state it is in now.
        to: HealthState,
        /// The last error it saw, if any.
        error: Option<String>,
    },
    /// The leader changed (`None`: unknown, during an election or after losing it).
    Leader {
        /// The previous leader's member id.
        from: Option<u64>,
        /// The new leader's member id.
        to: Option<u64>,
        /// The raft term the new view comes from.
        term: u64,
    },
    /// Member sync added an endpoint.
    Added {
        /// The new endpoint's URL.
        url: String,
    },
    /// Member sync removed an endpoint.
    Removed {
        /// The removed endpoint's URL.
        url: String,
    },
    /// A write or linearizable read answered at a revision below one the client had seen:
    /// the cluster's history went back (a restore from a backup). The client's monotonic floor
    /// came down to `to`; what it saw between `to` and `from` is gone from the cluster.
    HistoryRewound {
        /// The newest revision the client had seen.
        from: i64,
        /// The cluster's revision now.
        to: i64,
    },
}

/// The stream of [`EndpointEvent`]s of one client; get it with
/// [`Client::endpoint_events`](crate::Client::endpoint_events). It ends when the client is
/// dropped.
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) {
/// let mut events = client.endpoint_events();
/// while let Some(event) = events.next().await {
///     println!("{event:?}");
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct EndpointEvents {
    balancer: Weak<Balancer>,
    health: watch::Receiver<()>,
    leader: watch::Receiver<LeaderView>,
    endpoints: watch::Receiver<Arc<Vec<Arc<Endpoint>>>>,
    rewinds: watch::Receiver<Option<(i64, i64)>>,
    last_rewind: Option<(i64, i64)>,
    last_infos: Vec<EndpointInfo>,
    last_leader: LeaderView,
    pending: VecDeque<EndpointEvent>,
}

impl EndpointEvents {
    pub(crate) fn new(balancer: &Arc<Balancer>) -> Self {
        let mut health = balancer.health_changes();
        let mut leader = balancer.leader_changes();
        health.borrow_and_update();
        let last_leader = *leader.borrow_and_update();
        let mut endpoints = balancer.endpoint_changes();
        endpoints.borrow_and_update();
        let mut rewinds = balancer.rewinds();
        let last_rewind = *rewinds.borrow_and_update();
        EndpointEvents {
            balancer: Arc::downgrade(balancer),
            health,
            leader,
            endpoints,
            rewinds,
            last_rewind,
            last_infos: balancer.infos(),
            last_leader,
            pending: VecDeque::new(),
        }
    }

    /// The next event; `None` once the client is gone.
    pub async fn next(&mut self) -> Option<EndpointEvent> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            // Wake on either channel; a closed channel means the client is gone.
            let woke = tokio::select! {
                changed = self.health.changed() => changed,
                changed = self.leader.changed() => changed,
                changed = self.endpoints.changed() => changed,
                changed = self.rewinds.changed() => changed,
            };
            woke.ok()?;
            let rewind = *self.rewinds.borrow_and_update();
            if rewind != self.last_rewind {
                self.last_rewind = rewind;
                if let Some((from, to)) = rewind {
                    self.pending
                        .push_back(EndpointEvent::HistoryRewound { from, to });
                }
            }
            let balancer = self.balancer.upgrade()?;
            self.health.borrow_and_update();
            self.endpoints.borrow_and_update();
            let leader = *self.leader.borrow_and_update();
            let infos = balancer.infos();
            drop(balancer);
            self.compare(infos, leader);
        }
    }

    /// Queue one event per difference between the last snapshot and this one.
    fn compare(&mut self, infos: Vec<EndpointInfo>, leader: LeaderView) {
        for now in &infos {
            match self.last_infos.iter().find(|e| e.url == now.url) {
                Some(before) if before.health != now.health => {
                    self.pending.push_back(EndpointEvent::Health {
                        url: now.url.clone(),
                        member_id: now.member_id,
                        from: before.health,
                        to: now.health,
                        error: now.last_error.clone(),
                    });
                }
                Some(_) => {}
                None => self.pending.push_back(EndpointEvent::Added {
                    url: now.url.clone(),
                }),
            }
        }
        for before in &self.last_infos {
            if !infos.iter().any(|e| e.url == before.url) {
                self.pending.push_back(EndpointEvent::Removed {
                    url: before.url.clone(),
                });
            }
        }
        if leader.member_id != self.last_leader.member_id {
            let id = |m: u64| (m != 0).then_some(m);
            self.pending.push_back(EndpointEvent::Leader {
                from: id(self.last_leader.member_id),
                to: id(leader.member_id),
                term: leader.term,
            });
        }
        self.last_infos = infos;
        self.last_leader = leader;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::call::Transport;
    use crate::endpoint::{Failure, RaftView};
    use crate::options::Options;

    fn header(revision: i64) -> crate::proto::etcdserverpb::ResponseHeader {
        crate::proto::etcdserverpb::ResponseHeader {
            revision,
            ..Default::default()
        }
    }

    /// Issue 18: after a restore to an older revision, the first consensus answer below the
    /// floor brings the floor down (serializable reads and "from now" watches work again) and
    /// says so, once; a concurrent write's newer revision, or a serializable answer, does not.
    #[tokio::test(start_paused = true)]
    async fn a_consensus_answer_below_the_floor_rewinds_it_once_and_says_so() {
        let urls = vec!["http://127.0.0.1:1".to_string()];
        let transport = Transport::unprobed(&urls, Options::default());
        let mut events = EndpointEvents::new(&transport.balancer);
        transport.observe_header(Some(&header(1000)));
        // A serializable answer from a lagging member says nothing of the cluster.
        transport.observe_header(Some(&header(40)));
        assert_eq!(transport.revisions.seen(), 1000);
        // A linearizable read sent at floor 1000 answered at 50: the history went back.
        transport.observe_committed(Some(&header(50)), 1000);
        assert_eq!(transport.revisions.seen(), 50);
        assert_eq!(
            events.next().await.unwrap(),
            EndpointEvent::HistoryRewound { from: 1000, to: 50 }
        );
        // A second stale answer sent at the same old floor changes nothing more.
        transport.observe_committed(Some(&header(45)), 1000);
        assert_eq!(transport.revisions.seen(), 50);
        // An answer at or above its own floor is ordinary: nothing to do here (`unary` has
        // observed its header already).
        transport.observe_committed(Some(&header(60)), 50);
        assert_eq!(transport.revisions.seen(), 50);
    }

    #[tokio::test(start_paused = true)]
    async fn health_and_leader_transitions_arrive_in_order() {
        let urls: Vec<String> = (1..=2).map(|p| format!("http://127.0.0.1:{p}")).collect();
        let transport = Transport::unprobed(&urls, Options::default());
        let balancer = transport.balancer.clone();
        let mut events = EndpointEvents::new(&balancer);
        let ep = balancer.endpoints()[0].clone();

        let view = RaftView {
            member_id: 1,
            leader_id: 1,
            raft_term: 3,
            cluster_id: 7,
            ..Default::default()
        };
        balancer.record_status(&ep, view).unwrap();
        let next = events.next().await.unwrap();
        assert_eq!(
            next,
            EndpointEvent::Leader {
                from: None,
                to: Some(1),
                term: 3
            }
        );

        ep.on_failure(Failure::Unreachable, &"connection refused");
        match events.next().await.unwrap() {
            EndpointEvent::Health {
                url,
                member_id,
                from,
                to,
                error,
            } => {
                assert_eq!(url, urls[0]);
                assert_eq!(member_id, Some(1));
                assert_eq!((from, to), (HealthState::Probation, HealthState::Ejected));
                assert_eq!(error.as_deref(), Some("connection refused"));
            }
            other => panic!("{other:?}"),
        }

        // Member sync drops the second endpoint.
        balancer.apply_members(vec![urls[0].clone()]);
        assert_eq!(
            events.next().await.unwrap(),
            EndpointEvent::Removed {
                url: urls[1].clone()
            }
        );

        // The stream ends with the client.
        drop(transport);
        drop(balancer);
        drop(ep);
        let end = tokio::time::timeout(Duration::from_secs(1), events.next()).await;
        assert_eq!(end.unwrap(), None);
    }
}
