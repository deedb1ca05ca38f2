//! The local scenarios: which member of a testkit cluster is hit, how, for how long, and how
//! the cluster's own recovery is judged.
//!
//! Each fault is split in two: [`Scenario::inject`], the instant action (a signal, a proxy
//! mode, a detached link), after which the clocks start; and [`Scenario::follow_up`], the rest
//! of the script (thaw, heal or restart), run while the loops go on. Faults that are undone
//! last [`crate::plan::Timing::hold`].

use std::time::Duration;

use clap::ValueEnum;
use etcd_ha::testkit::{Cluster, ClusterBuilder, FaultProxy, Mode, TestkitError};
use serde::Serialize;
use tokio::time::Instant;

use crate::election::Rule;

/// How long every member stays down in [`Scenario::RestartAll`] (at most the hold): 2 s, longer
/// than an election timeout, so that the restarted cluster has to elect anew.
const DOWN_FOR: Duration = Duration::from_secs(2);

/// One fault scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// SIGKILL the leader; it stays down for the rest of the scenario.
    LeaderKill,
    /// SIGSTOP the leader for the hold, then SIGCONT: its sockets stay open, it answers nothing.
    LeaderFreeze,
    /// SIGKILL a follower; it stays down. The leader does not move.
    FollowerKill,
    /// SIGKILL every member, wait 2 s, start them all again (a power loss).
    RestartAll,
    /// The clients reach the leader only through a [`FaultProxy`], which swallows every byte
    /// for the hold: a dead client link, while the cluster itself is fine.
    LeaderLinkBlackhole,
    /// The leader is cut off from its peers for the hold (network namespaces), while the clients
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

    /// What happens, in words, for a fault held `hold`.
    pub fn describe(self, hold: Duration) -> String {
        let down = down_for(hold).as_secs_f64();
        let hold = format!("{:.1} s", hold.as_secs_f64());
        match self {
            Scenario::LeaderKill => "SIGKILL the leader; it stays down".to_string(),
            Scenario::LeaderFreeze => format!("SIGSTOP the leader for {hold}, then SIGCONT"),
            Scenario::FollowerKill => "SIGKILL a follower; it stays down".to_string(),
            Scenario::RestartAll => {
                format!("SIGKILL every member, {down:.1} s later start them all")
            }
            Scenario::LeaderLinkBlackhole => {
                format!("clients reach the leader through a proxy that drops every byte for {hold}")
            }
            Scenario::LeaderPartition => {
                format!("cut the leader off from its peers for {hold}, then heal")
            }
        }
    }

    /// True if the fault is undone within the window (a thaw, a heal, a restart); false if it
    /// stays (a kill), and recovery is then judged from the fault itself.
    pub fn heals(self) -> bool {
        !matches!(self, Scenario::LeaderKill | Scenario::FollowerKill)
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

    /// The rest of the fault's script, from `injected` on, for a fault held `hold`; returns
    /// when the fault was undone (`None` for a fault that stays). It returns once the script
    /// is done, which may outlast the window only if a restart is slow.
    pub async fn follow_up(
        self,
        rig: &mut Rig,
        target: Option<usize>,
        injected: Instant,
        hold: Duration,
    ) -> Result<Option<Instant>, TestkitError> {
        let target = || target.expect("a fault with a target member");
        match self {
            Scenario::LeaderKill | Scenario::FollowerKill => return Ok(None),
            Scenario::LeaderFreeze => {
                tokio::time::sleep_until(injected + hold).await;
                rig.cluster.cont(target());
            }
            Scenario::RestartAll => {
                tokio::time::sleep_until(injected + down_for(hold)).await;
                rig.cluster.start_all().await?;
            }
            Scenario::LeaderLinkBlackhole => {
                tokio::time::sleep_until(injected + hold).await;
                rig.proxy().set_mode(Mode::Pass);
            }
            Scenario::LeaderPartition => {
                tokio::time::sleep_until(injected + hold).await;
                rig.cluster.heal(target())?;
            }
        }
        Ok(Some(Instant::now()))
    }
}

/// How long every member stays down in [`Scenario::RestartAll`] when faults are held `hold`.
fn down_for(hold: Duration) -> Duration {
    DOWN_FOR.min(hold)
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
