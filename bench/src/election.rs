//! The cluster's own recovery time, measured in the same run as the clients: how long after the
//! fault the surviving members report a leader again.
//!
//! Every 50 ms each watched member is asked for its Maintenance Status on a fresh channel
//! (never one of the clients', and never reused: a member killed and restarted under the same
//! URL must not be judged by an old connection), each answer bounded by 200 ms. The first
//! answer that satisfies the [`Rule`] stops the clock.

use std::time::Duration;

use etcd_ha::proto::etcdserverpb::StatusRequest;
use etcd_ha::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use futures_util::future::join_all;
use serde::Serialize;
use tokio::time::{Instant, MissedTickBehavior};

use crate::access::Access;

/// Time between two polling rounds: 50 ms, the resolution of the reported time; an etcd
/// election takes 1-2 s with its default timings.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Bound on one Status call, connect included: 200 ms, ample on loopback; a frozen or
/// leaderless member must not hold up the next round.
const POLL_TIMEOUT: Duration = Duration::from_millis(200);

/// What counts as "the cluster has a leader again".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "rule", rename_all = "kebab-case")]
pub enum Rule {
    /// A watched member reports a leader that is neither none (0) nor `old` (the faulted
    /// leader's raft id): the leader moved.
    NewLeader {
        /// The raft member id of the leader before the fault.
        old: u64,
    },
    /// A watched member reports any leader (after a restart of every member, the old leader may
    /// well win again).
    AnyLeader,
}

impl Rule {
    /// True if a member reporting `leader` satisfies the rule.
    fn satisfied_by(self, leader: u64) -> bool {
        match self {
            Rule::NewLeader { old } => leader != 0 && leader != old,
            Rule::AnyLeader => leader != 0,
        }
    }

    /// The rule in words, for the report.
    pub fn describe(self) -> &'static str {
        match self {
            Rule::NewLeader { .. } => "until a surviving member reports a new leader",
            Rule::AnyLeader => "until any member reports a leader",
        }
    }
}

/// What the poller saw: how long after the fault, and which leader (raft member id).
#[derive(Debug, Clone, Copy)]
pub struct Reelection {
    /// From the fault to the first answer that satisfied the rule.
    pub after: Duration,
    /// The leader that answer named.
    pub leader: u64,
}

/// Polls the members at `urls` from `since` (the moment of the fault) until one satisfies
/// `rule` or `give_up` passes.
pub async fn measure(
    access: Access,
    urls: Vec<String>,
    rule: Rule,
    since: Instant,
    give_up: Instant,
) -> Option<Reelection> {
    let mut rounds = tokio::time::interval(POLL_INTERVAL);
    rounds.set_missed_tick_behavior(MissedTickBehavior::Delay);
    while Instant::now() < give_up {
        rounds.tick().await;
        let leaders = join_all(urls.iter().map(|url| leader_seen_by(&access, url))).await;
        let found = leaders
            .into_iter()
            .flatten()
            .find(|&leader| rule.satisfied_by(leader));
        if let Some(leader) = found {
            let after = since.elapsed();
            return Some(Reelection { after, leader });
        }
    }
    None
}

/// The leader id that the member at `url` reports, or `None` if it does not answer in time.
async fn leader_seen_by(access: &Access, url: &str) -> Option<u64> {
    status_of(access, url).await.map(|status| status.leader)
}

/// What a member says of itself in a Status call.
#[derive(Debug, Clone)]
pub struct NodeStatus {
    /// Its raft member id.
    pub member: u64,
    /// The leader it knows of (0 for none).
    pub leader: u64,
    /// Its etcd version.
    pub version: String,
}

/// The Status of the member at `url`, or `None` if it does not answer within
/// [`POLL_TIMEOUT`]. With auth on, etcd 3.6 answers Status only with a token: the run's shared
/// one goes with it (see [`Access::channel`]).
pub async fn status_of(access: &Access, url: &str) -> Option<NodeStatus> {
    let call = async {
        let channel = access.channel(url, POLL_TIMEOUT).await.ok()?;
        let mut maintenance = MaintenanceClient::new(channel);
        let status = access
            .check(maintenance.status(StatusRequest {}).await)
            .ok()?;
        let status = status.into_inner();
        Some(NodeStatus {
            member: status.header.map_or(0, |h| h.member_id),
            leader: status.leader,
            version: status.version,
        })
    };
    tokio::time::timeout(POLL_TIMEOUT, call)
        .await
        .ok()
        .flatten()
}
