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
use crate::maintenance::{self, MOVE_SPACING, ROLLING_DOWN};

/// How long every member stays down in [`Scenario::RestartAll`] (at most the hold): 2 s, longer
/// than an election timeout, so that the restarted cluster has to elect anew.
const DOWN_FOR: Duration = Duration::from_secs(2);

/// The delay the proxy adds to every chunk in [`Scenario::LeaderLinkLatency`]: 100 ms, so a
/// round trip takes 200 ms more, a cross-region link's worth, far above a healthy member's.
const LINK_LATENCY: Duration = Duration::from_millis(100);

/// How many MoveLeaders [`Scenario::LeaderMoves`] makes in a row.
const MOVES: usize = 3;

/// The least fault window of the graceful rolling restarts: 20 s. Each of the three steps takes
/// etcd's own exit (about 1 s for 3.5), [`ROLLING_DOWN`] and a start (about 1 s), and the
/// recovery after the last one needs its 3 s; a shorter window would end mid-script.
const ROLLING_WINDOW: Duration = Duration::from_secs(20);

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
    /// A graceful handover: the leader is asked (Maintenance MoveLeader) to hand leadership to
    /// a follower, as before planned maintenance.
    LeaderMove,
    /// Every member restarted in turn (SIGKILL, start, wait until it serves), followers first
    /// and the leader last, as in a rolling upgrade.
    RollingRestart,
    /// The clients reach the leader only through a [`FaultProxy`] that holds every chunk back
    /// by [`LINK_LATENCY`] for the hold: a slow link, while the cluster itself is fine.
    LeaderLinkLatency,
    /// The leader is cut off from its peers for the hold (network namespaces), while the clients
    /// still reach it: it steps down, the others elect a new leader.
    LeaderPartition,
    /// The leader is cut off from everyone for the hold: from its peers (network namespaces)
    /// and from the clients, whose connections to it a [`FaultProxy`] keeps open while it drops
    /// every byte (it still answers TCP, as a cut-off host behind a live middlebox does).
    LeaderCutOff,
    /// Planned: three MoveLeaders in a row, one second apart, each from whoever leads.
    LeaderMoves,
    /// Planned: SIGTERM of the leader (etcd hands leadership over, then stops); started again
    /// after the hold.
    LeaderSigterm,
    /// Planned: a graceful rolling restart, followers first and the leader last: each member
    /// SIGTERM, down 2 s, started, and the next once it serves.
    RollingSigterm,
    /// Planned: the same rolling restart, with etcd-ha's drain API around each stop (drain
    /// before the SIGTERM, undrain once healthy); the other clients just see the SIGTERMs.
    RollingDrain,
}

impl Scenario {
    /// Every scenario, in the order they run.
    pub const ALL: [Scenario; 14] = [
        Scenario::LeaderKill,
        Scenario::LeaderFreeze,
        Scenario::FollowerKill,
        Scenario::RestartAll,
        Scenario::LeaderLinkBlackhole,
        Scenario::LeaderMove,
        Scenario::RollingRestart,
        Scenario::LeaderLinkLatency,
        Scenario::LeaderPartition,
        Scenario::LeaderCutOff,
        Scenario::LeaderMoves,
        Scenario::LeaderSigterm,
        Scenario::RollingSigterm,
        Scenario::RollingDrain,
    ];

    /// The scenarios of a run that names none: the unplanned faults and the single MoveLeader,
    /// about 6 minutes on 2 cores at 3 trials. The other planned ones (`--all`, or by name)
    /// take longer per trial (a rolling restart needs a 20 s window).
    pub const DEFAULT: [Scenario; 10] = [
        Scenario::LeaderKill,
        Scenario::LeaderFreeze,
        Scenario::FollowerKill,
        Scenario::RestartAll,
        Scenario::LeaderLinkBlackhole,
        Scenario::LeaderMove,
        Scenario::RollingRestart,
        Scenario::LeaderLinkLatency,
        Scenario::LeaderPartition,
        Scenario::LeaderCutOff,
    ];

    /// Short name, used in the report and the JSON file, and to select scenarios.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::LeaderKill => "leader-kill",
            Scenario::LeaderFreeze => "leader-freeze",
            Scenario::FollowerKill => "follower-kill",
            Scenario::RestartAll => "restart-all",
            Scenario::LeaderLinkBlackhole => "leader-link-blackhole",
            Scenario::LeaderMove => "leader-move",
            Scenario::RollingRestart => "rolling-restart",
            Scenario::LeaderLinkLatency => "leader-link-latency",
            Scenario::LeaderPartition => "leader-partition",
            Scenario::LeaderCutOff => "leader-cut-off",
            Scenario::LeaderMoves => "leader-moves",
            Scenario::LeaderSigterm => "leader-sigterm",
            Scenario::RollingSigterm => "rolling-sigterm",
            Scenario::RollingDrain => "rolling-drain",
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
            Scenario::LeaderMove => "MoveLeader: the leader hands over to a follower".to_string(),
            Scenario::RollingRestart => {
                "restart every member in turn, followers first, leader last".to_string()
            }
            Scenario::LeaderLinkLatency => format!(
                "clients reach the leader through a proxy that delays every chunk by {} ms for \
                 {hold}",
                LINK_LATENCY.as_millis()
            ),
            Scenario::LeaderPartition => {
                format!("cut the leader off from its peers for {hold}, then heal")
            }
            Scenario::LeaderCutOff => format!(
                "cut the leader off from its peers and from the clients (a proxy that keeps \
                 their connections and drops every byte) for {hold}, then heal"
            ),
            Scenario::LeaderMoves => format!(
                "MoveLeader {MOVES} times in a row, {} s apart",
                MOVE_SPACING.as_secs()
            ),
            Scenario::LeaderSigterm => format!(
                "SIGTERM the leader (it hands leadership over, then stops); start it again \
                 {hold} after the SIGTERM"
            ),
            Scenario::RollingSigterm => format!(
                "graceful rolling restart, followers first, leader last: SIGTERM, {} s down, \
                 start, wait until it serves",
                ROLLING_DOWN.as_secs()
            ),
            Scenario::RollingDrain => format!(
                "graceful rolling restart as rolling-sigterm, with etcd-ha's drain before each \
                 SIGTERM and undrain once healthy; the etcd-client clients just see the \
                 SIGTERMs ({} s down each)",
                ROLLING_DOWN.as_secs()
            ),
        }
    }

    /// How the cluster is built: partitions need every member in a network namespace.
    pub fn builder(self) -> ClusterBuilder {
        let builder = Cluster::builder().members(3);
        match self {
            Scenario::LeaderPartition | Scenario::LeaderCutOff => builder.isolated_network(true),
            _ => builder,
        }
    }

    /// True if the clients reach the target member through a [`FaultProxy`].
    pub fn needs_proxy(self) -> bool {
        matches!(
            self,
            Scenario::LeaderLinkBlackhole | Scenario::LeaderLinkLatency | Scenario::LeaderCutOff
        )
    }

    /// True for planned maintenance (a handover, a graceful stop): the planned-maintenance
    /// table lists these.
    pub fn is_planned(self) -> bool {
        matches!(
            self,
            Scenario::LeaderMove
                | Scenario::LeaderMoves
                | Scenario::LeaderSigterm
                | Scenario::RollingSigterm
                | Scenario::RollingDrain
        )
    }

    /// The fault window of a trial, given the one asked for (`--window`): longer for the
    /// rolling restarts, whose script needs [`ROLLING_WINDOW`].
    pub fn window(self, asked: Duration) -> Duration {
        match self {
            Scenario::RollingSigterm | Scenario::RollingDrain => asked.max(ROLLING_WINDOW),
            _ => asked,
        }
    }

    /// A note for the report when the scenario departs from the common setup.
    pub fn note(self) -> Option<&'static str> {
        self.needs_proxy().then_some(
            "etcd-ha's member sync keeps the proxy as that member's endpoint, matched by member id",
        )
    }

    /// The member the fault hits, given the current leader; `None` if it hits all of them.
    pub fn target(self, leader: usize, members: usize) -> Option<usize> {
        match self {
            Scenario::FollowerKill => Some((leader + 1) % members),
            Scenario::RestartAll
            | Scenario::RollingRestart
            | Scenario::RollingSigterm
            | Scenario::RollingDrain => None,
            _ => Some(leader),
        }
    }

    /// How the cluster's recovery is judged, given the raft id of the leader before the fault;
    /// `None` when the fault does not move the leader and there is nothing to measure.
    pub fn rule(self, old_leader_id: u64) -> Option<Rule> {
        match self {
            Scenario::LeaderKill
            | Scenario::LeaderFreeze
            | Scenario::LeaderPartition
            | Scenario::LeaderCutOff
            | Scenario::LeaderMove
            | Scenario::LeaderMoves
            | Scenario::LeaderSigterm => Some(Rule::NewLeader { old: old_leader_id }),
            Scenario::RestartAll => Some(Rule::AnyLeader),
            // A rolling restart moves the leader only at its end, after the followers' restarts:
            // that is no election time to compare with.
            Scenario::FollowerKill
            | Scenario::LeaderLinkBlackhole
            | Scenario::LeaderLinkLatency
            | Scenario::RollingRestart
            | Scenario::RollingSigterm
            | Scenario::RollingDrain => None,
        }
    }

    /// The instant part of the fault (nothing for the scripted ones: a move, a SIGTERM, a
    /// rolling restart, whose clocks start as their script does; a SIGTERM takes etcd about a
    /// second to act on, and the clocks start as it is sent).
    pub fn inject(self, rig: &mut Rig, target: Option<usize>) -> Result<(), TestkitError> {
        let target = || target.expect("a fault with a target member");
        match self {
            Scenario::LeaderMove
            | Scenario::LeaderMoves
            | Scenario::LeaderSigterm
            | Scenario::RollingRestart
            | Scenario::RollingSigterm
            | Scenario::RollingDrain => {}
            Scenario::LeaderLinkLatency => rig.proxy().set_mode(Mode::Latency(LINK_LATENCY)),
            Scenario::LeaderKill | Scenario::FollowerKill => rig.cluster.kill(target()),
            Scenario::LeaderFreeze => rig.cluster.stop(target()),
            Scenario::RestartAll => rig.cluster.kill_all(),
            Scenario::LeaderLinkBlackhole => rig.proxy().set_mode(Mode::Blackhole),
            Scenario::LeaderPartition => rig.cluster.partition(target())?,
            Scenario::LeaderCutOff => {
                rig.cluster.partition(target())?;
                rig.proxy().set_mode(Mode::Blackhole);
            }
        }
        Ok(())
    }

    /// The rest of the fault's script, from `injected` on, for a fault held `hold`; returns
    /// when the fault was undone (`None` for a fault that stays). It returns once the script
    /// is done, which may outlast the window only if a restart is slow. `drainer` is the
    /// etcd-ha client under test, told of the maintenance in [`Scenario::RollingDrain`].
    pub async fn follow_up(
        self,
        rig: &mut Rig,
        target: Option<usize>,
        injected: Instant,
        hold: Duration,
        drainer: Option<&etcd_ha::Client>,
    ) -> Result<Option<Instant>, String> {
        let target = || target.expect("a fault with a target member");
        let text = |e: TestkitError| e.to_string();
        match self {
            Scenario::LeaderKill | Scenario::FollowerKill => return Ok(None),
            Scenario::LeaderMove => {
                maintenance::move_leader(&rig.cluster, target()).await?;
                return Ok(None);
            }
            Scenario::LeaderMoves => {
                maintenance::move_leader_repeatedly(&rig.cluster, MOVES).await?;
                return Ok(None);
            }
            Scenario::LeaderSigterm => {
                rig.cluster.terminate(target()).await;
                tokio::time::sleep_until(injected + hold).await;
                rig.cluster.restart(target()).await.map_err(text)?;
            }
            Scenario::RollingSigterm => {
                maintenance::rolling_sigterm(&mut rig.cluster, None).await?
            }
            Scenario::RollingDrain => {
                maintenance::rolling_sigterm(&mut rig.cluster, drainer).await?;
            }
            Scenario::RollingRestart => {
                let leader = rig
                    .cluster
                    .leader(Duration::from_secs(5))
                    .await
                    .map_err(text)?;
                let n = rig.cluster.len();
                for i in (1..=n).map(|k| (leader + k) % n) {
                    rig.cluster.restart(i).await.map_err(text)?;
                }
            }
            Scenario::LeaderLinkLatency => {
                tokio::time::sleep_until(injected + hold).await;
                rig.proxy().set_mode(Mode::Pass);
            }
            Scenario::LeaderFreeze => {
                tokio::time::sleep_until(injected + hold).await;
                rig.cluster.cont(target());
            }
            Scenario::RestartAll => {
                tokio::time::sleep_until(injected + down_for(hold)).await;
                rig.cluster.start_all().await.map_err(text)?;
            }
            Scenario::LeaderLinkBlackhole => {
                tokio::time::sleep_until(injected + hold).await;
                rig.proxy().set_mode(Mode::Pass);
            }
            Scenario::LeaderPartition => {
                tokio::time::sleep_until(injected + hold).await;
                rig.cluster.heal(target()).map_err(text)?;
            }
            Scenario::LeaderCutOff => {
                tokio::time::sleep_until(injected + hold).await;
                rig.proxy().set_mode(Mode::Pass);
                rig.cluster.heal(target()).map_err(text)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_set_is_every_scenario_but_the_long_planned_ones() {
        let left_out: Vec<_> = Scenario::ALL
            .iter()
            .filter(|s| !Scenario::DEFAULT.contains(s))
            .map(|s| s.name())
            .collect();
        assert_eq!(
            left_out,
            [
                "leader-moves",
                "leader-sigterm",
                "rolling-sigterm",
                "rolling-drain"
            ]
        );
        assert!(left_out.iter().all(|name| {
            let s = Scenario::ALL.iter().find(|s| s.name() == *name).unwrap();
            s.is_planned()
        }));
    }

    #[test]
    fn rolling_restarts_get_a_window_their_script_fits_in() {
        let asked = Duration::from_secs(7);
        assert_eq!(Scenario::RollingSigterm.window(asked), ROLLING_WINDOW);
        assert_eq!(Scenario::RollingDrain.window(asked), ROLLING_WINDOW);
        assert_eq!(Scenario::LeaderSigterm.window(asked), asked);
        let longer = Duration::from_secs(30);
        assert_eq!(Scenario::RollingDrain.window(longer), longer);
    }
}
