//! The scenarios: which member is hit, how, for how long, and how the cluster's own recovery is
//! judged.
//!
//! Each fault is split in two: [`Scenario::inject`], the instant action (a signal, a proxy
//! mode, a detached link), after which the clocks start; and [`Scenario::follow_up`], the rest
//! of the script (thaw, heal or restart), run while the loops go on.

use std::time::Duration;

use etcd_ha::testkit::{Cluster, ClusterBuilder, FaultProxy, Mode, TestkitError};
use tokio::time::Instant;

use crate::election::Rule;

/// How long a fault that is undone lasts: a freeze, a blackhole, a partition.
const FAULT_FOR: Duration = Duration::from_secs(10);

/// How long every member stays down in [`Scenario::RestartAll`].
const DOWN_FOR: Duration = Duration::from_secs(2);

/// The fault window of every scenario: 12 s, a 10 s fault plus 2 s to see the clients recover
/// once it is undone; for kills, long enough to see the steady state after failover.
pub const FAULT_WINDOW: Duration = Duration::from_secs(12);

/// One fault scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// SIGKILL the leader; it stays down for the rest of the scenario.
    LeaderKill,
    /// SIGSTOP the leader for 10 s, then SIGCONT: its sockets stay open, it answers nothing.
    LeaderFreeze,
    /// SIGKILL a follower; it stays down. The leader does not move.
    FollowerKill,
    /// SIGKILL every member, wait 2 s, start them all again (a power loss).
    RestartAll,
    /// The clients reach the leader only through a [`FaultProxy`], which swallows every byte
    /// for 10 s: a dead client link, while the cluster itself is fine.
    LeaderLinkBlackhole,
    /// The leader is cut off from its peers for 10 s (network namespaces), while the clients
    /// still reach it: it steps down, the others elect a new leader.
    LeaderPartition,
}

impl Scenario {
    /// Every scenario, in the order they run.
    pub const ALL: [Scenario; 6] = [
        Scenario::LeaderKill,
        Scenario::LeaderFreeze,
        Scenario::FollowerKill,
        Scenario::RestartAll,
        Scenario::LeaderLinkBlackhole,
        Scenario::LeaderPartition,
    ];

    /// Short name, used in the report and the JSON file, and to select scenarios.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::LeaderKill => "leader-kill",
            Scenario::LeaderFreeze => "leader-freeze",
            Scenario::FollowerKill => "follower-kill",
            Scenario::RestartAll => "restart-all",
            Scenario::LeaderLinkBlackhole => "leader-link-blackhole",
            Scenario::LeaderPartition => "leader-partition",
        }
    }

    /// What happens, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Scenario::LeaderKill => "SIGKILL the leader; it stays down",
            Scenario::LeaderFreeze => "SIGSTOP the leader for 10 s, then SIGCONT",
            Scenario::FollowerKill => "SIGKILL a follower; it stays down",
            Scenario::RestartAll => "SIGKILL every member, 2 s later start them all",
            Scenario::LeaderLinkBlackhole => {
                "clients reach the leader through a proxy that drops every byte for 10 s"
            }
            Scenario::LeaderPartition => "cut the leader off from its peers for 10 s, then heal",
        }
    }

    /// How the cluster is built: partitions need every member in a network namespace.
    pub fn builder(self) -> ClusterBuilder {
        let builder = Cluster::builder().members(3);
        match self {
            Scenario::LeaderPartition => builder.isolated_network(true),
            _ => builder,
        }
    }

    /// True if the clients reach the target member through a [`FaultProxy`].
    pub fn needs_proxy(self) -> bool {
        self == Scenario::LeaderLinkBlackhole
    }

    /// etcd-ha's options in this scenario: the defaults. Behind a proxy too: member sync
    /// matches endpoints to members by member id, so the proxy stays the leader's endpoint and
    /// the fault stays in the path.
    pub fn ha_options(self) -> etcd_ha::Options {
        etcd_ha::Options::default()
    }

    /// A note for the report when the scenario departs from the common setup.
    pub fn note(self) -> Option<&'static str> {
        self.needs_proxy().then_some(
            "every client reaches the leader only through the proxy; etcd-ha's member sync keeps \
             the proxy as that member's endpoint (matched by member id)",
        )
    }

    /// The member the fault hits, given the current leader; `None` if it hits all of them.
    pub fn target(self, leader: usize, members: usize) -> Option<usize> {
        match self {
            Scenario::FollowerKill => Some((leader + 1) % members),
            Scenario::RestartAll => None,
            _ => Some(leader),
        }
    }

    /// How the cluster's recovery is judged, given the raft id of the leader before the fault;
    /// `None` when the fault does not move the leader and there is nothing to measure.
    pub fn rule(self, old_leader_id: u64) -> Option<Rule> {
        match self {
            Scenario::LeaderKill | Scenario::LeaderFreeze | Scenario::LeaderPartition => {
                Some(Rule::NewLeader { old: old_leader_id })
            }
            Scenario::RestartAll => Some(Rule::AnyLeader),
            Scenario::FollowerKill | Scenario::LeaderLinkBlackhole => None,
        }
    }

    /// The instant part of the fault.
    pub fn inject(self, rig: &mut Rig, target: Option<usize>) -> Result<(), TestkitError> {
        let target = || target.expect("a fault with a target member");
        match self {
            Scenario::LeaderKill | Scenario::FollowerKill => rig.cluster.kill(target()),
            Scenario::LeaderFreeze => rig.cluster.stop(target()),
            Scenario::RestartAll => rig.cluster.kill_all(),
            Scenario::LeaderLinkBlackhole => rig.proxy().set_mode(Mode::Blackhole),
            Scenario::LeaderPartition => rig.cluster.partition(target())?,
        }
        Ok(())
    }

    /// The rest of the fault's script, from `injected` on; returns once the script is done
    /// (it may outlast the window only if a restart is slow).
    pub async fn follow_up(
        self,
        rig: &mut Rig,
        target: Option<usize>,
        injected: Instant,
    ) -> Result<(), TestkitError> {
        let target = || target.expect("a fault with a target member");
        match self {
            Scenario::LeaderKill | Scenario::FollowerKill => {}
            Scenario::LeaderFreeze => {
                tokio::time::sleep_until(injected + FAULT_FOR).await;
                rig.cluster.cont(target());
            }
            Scenario::RestartAll => {
                tokio::time::sleep_until(injected + DOWN_FOR).await;
                rig.cluster.start_all().await?;
            }
            Scenario::LeaderLinkBlackhole => {
                tokio::time::sleep_until(injected + FAULT_FOR).await;
                rig.proxy().set_mode(Mode::Pass);
            }
            Scenario::LeaderPartition => {
                tokio::time::sleep_until(injected + FAULT_FOR).await;
                rig.cluster.heal(target())?;
            }
        }
        Ok(())
    }
}

/// What a fault acts on: the cluster, and the proxy in front of the target member if the
/// scenario uses one.
pub struct Rig {
    /// The running cluster.
    pub cluster: Cluster,
    /// The proxy the clients use instead of the target member's URL.
    pub proxy: Option<FaultProxy>,
}

impl Rig {
    /// The proxy; only called by scenarios that asked for one.
    fn proxy(&self) -> &FaultProxy {
        self.proxy
            .as_ref()
            .expect("this scenario runs behind a proxy")
    }
}
