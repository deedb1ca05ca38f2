//! Where a trial runs and how its fault is made: a fresh local testkit cluster hurt by a
//! [`Scenario`], or the user's own cluster (`--endpoints`) hurt by `--fault-cmd` and healed by
//! `--heal-cmd`.
//!
//! Both are prepared the same way (find the leader, name the members, decide where clients
//! connect and how re-election is judged) so that the trial itself does not know which it has.

use std::path::Path;
use std::time::Duration;

use etcd_ha::testkit::FaultProxy;
use futures_util::future::join_all;
use tokio::time::Instant;

use crate::access::Access;
use crate::election::{self, Rule};
use crate::scenario::{Rig, Scenario};

/// How long a fresh local cluster may take to agree on a leader.
const LEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the benchmark's own Authenticate may take on a user's cluster: 5 s, room for a
/// bcrypt of etcd's default cost on a loaded member.
const AUTH_TIMEOUT: Duration = Duration::from_secs(5);

/// The user's cluster and the commands that hurt and heal it.
#[derive(Debug, Clone)]
pub struct External {
    /// Client URLs of its members.
    pub endpoints: Vec<String>,
    /// TLS and the user, for every client and the benchmark's own calls.
    pub access: Access,
    /// Shell command run at the fault instant; `None` for a run without a fault.
    pub fault_cmd: Option<String>,
    /// Shell command run at the heal instant; `None` for a fault that stays.
    pub heal_cmd: Option<String>,
}

/// What a trial is run against.
#[derive(Debug, Clone)]
pub enum Fault {
    /// A fresh local cluster per trial and one of the built-in scenarios.
    Local(Scenario),
    /// The user's cluster and shell hooks.
    External(External),
}

impl Fault {
    /// The name in the report and in file names.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::Local(scenario) => scenario.name(),
            Fault::External(_) => "your-cluster",
        }
    }

    /// True for planned maintenance (the planned-maintenance table lists these).
    pub fn is_planned(&self) -> bool {
        matches!(self, Fault::Local(scenario) if scenario.is_planned())
    }

    /// The fault window of its trials, given the one asked for.
    pub fn window(&self, asked: Duration) -> Duration {
        match self {
            Fault::Local(scenario) => scenario.window(asked),
            Fault::External(_) => asked,
        }
    }

    /// What happens, in words.
    pub fn describe(&self, hold: Duration) -> String {
        match self {
            Fault::Local(scenario) => match scenario.note() {
                Some(note) => format!("{}; {note}", scenario.describe(hold)),
                None => scenario.describe(hold),
            },
            Fault::External(e) => format!(
                "your cluster ({}; {}); fault: {}; heal after {:.1} s: {}",
                e.endpoints.join(","),
                e.access.describe(),
                e.fault_cmd.as_deref().unwrap_or("none"),
                hold.as_secs_f64(),
                e.heal_cmd.as_deref().unwrap_or("none (the fault stays)")
            ),
        }
    }
}

/// The cluster a trial hurts, and what is known of it before the fault.
pub struct Site {
    /// What the fault acts on.
    kind: SiteKind,
    /// The members' own URLs, for the re-election poller and the read-back.
    pub endpoints: Vec<String>,
    /// What the clients are given: the same, except a proxy's URL for a proxied member.
    pub client_endpoints: Vec<String>,
    /// The etcd version the members run.
    pub etcd_version: String,
    /// How every client reaches the members (TLS, user); none for a local cluster.
    pub access: Access,
    /// Name of the leader before the fault.
    pub old_leader: String,
    /// Name of the member the fault hits ("all" for every one, "?" for a user's command).
    pub target: String,
    /// How re-election is judged; `None` when the fault does not move the leader.
    pub rule: Option<Rule>,
    /// The URLs the re-election poller asks (the target's excepted).
    pub watched: Vec<String>,
    /// Member ids and names, to name the new leader.
    names: Vec<(u64, String)>,
}

/// The two kinds of site.
enum SiteKind {
    /// A testkit cluster, the scenario and the index of the member it hits.
    Local {
        rig: Box<Rig>,
        scenario: Scenario,
        target: Option<usize>,
    },
    /// The user's cluster and hooks, with the leader's URL for the hooks' environment.
    External { hooks: External, leader_url: String },
}

impl Site {
    /// Prepares a trial: starts a fresh cluster (local; of `etcd_bin` if given, else the
    /// testkit's etcd) or finds the leader (external).
    pub async fn prepare(
        fault: &Fault,
        data_dir: Option<&Path>,
        etcd_bin: Option<&Path>,
    ) -> Result<Site, String> {
        match fault {
            Fault::Local(scenario) => prepare_local(*scenario, data_dir, etcd_bin).await,
            Fault::External(hooks) => prepare_external(hooks.clone()).await,
        }
    }

    /// The name of the member with raft id `id`, or the id in hex.
    pub fn member_name(&self, id: u64) -> String {
        self.names
            .iter()
            .find(|(member, _)| *member == id)
            .map_or_else(|| format!("{id:x}"), |(_, name)| name.clone())
    }

    /// The instant part of the fault.
    pub async fn inject(&mut self) -> Result<(), String> {
        match &mut self.kind {
            SiteKind::Local {
                rig,
                scenario,
                target,
            } => scenario.inject(rig, *target).map_err(|e| e.to_string()),
            SiteKind::External { hooks, leader_url } => match &hooks.fault_cmd {
                Some(cmd) => shell(cmd, &hooks.endpoints, leader_url).await,
                None => Ok(()),
            },
        }
    }

    /// The rest of the fault's script; returns when the fault was undone (`None` if it stays).
    /// `drainer` is the etcd-ha client under test, for the scenarios that drain with it.
    pub async fn follow_up(
        &mut self,
        injected: Instant,
        hold: Duration,
        drainer: Option<&etcd_ha::Client>,
    ) -> Result<Option<Instant>, String> {
        match &mut self.kind {
            SiteKind::Local {
                rig,
                scenario,
                target,
            } => {
                scenario
                    .follow_up(rig, *target, injected, hold, drainer)
                    .await
            }
            SiteKind::External { hooks, leader_url } => match &hooks.heal_cmd {
                Some(cmd) => {
                    tokio::time::sleep_until(injected + hold).await;
                    shell(cmd, &hooks.endpoints, leader_url).await?;
                    Ok(Some(Instant::now()))
                }
                None => Ok(None),
            },
        }
    }

    /// True for the user's cluster, whose keys must be cleaned up after a trial.
    pub fn is_external(&self) -> bool {
        matches!(self.kind, SiteKind::External { .. })
    }
}

/// A fresh local cluster for `scenario`, its leader, and a proxy in front of the target if the
/// scenario needs one.
async fn prepare_local(
    scenario: Scenario,
    data_dir: Option<&Path>,
    etcd_bin: Option<&Path>,
) -> Result<Site, String> {
    let text = |e: etcd_ha::testkit::TestkitError| e.to_string();
    let mut builder = scenario.builder();
    if let Some(dir) = data_dir {
        builder = builder.data_dir_in(dir);
    }
    if let Some(etcd) = etcd_bin {
        builder = builder.etcd_bin(etcd);
    }
    let cluster = builder.start().await.map_err(text)?;
    let leader = cluster.leader(LEADER_TIMEOUT).await.map_err(text)?;
    let mut names = Vec::new();
    for i in 0..cluster.len() {
        let id = cluster.member_id(i).await.map_err(text)?;
        names.push((id, cluster.member_name(i).to_string()));
    }
    let leader_id = names[leader].0;
    let target = scenario.target(leader, cluster.len());
    let endpoints = cluster.endpoints();
    let mut client_endpoints = endpoints.clone();
    let proxy = match target.filter(|_| scenario.needs_proxy()) {
        Some(i) => {
            let proxy = FaultProxy::start(cluster.client_addr(i))
                .map_err(|e| format!("starting the fault proxy: {e}"))?;
            client_endpoints[i] = proxy.url("http");
            Some(proxy)
        }
        None => None,
    };
    let watched = (0..endpoints.len())
        .filter(|&i| Some(i) != target)
        .map(|i| endpoints[i].clone())
        .collect();
    Ok(Site {
        etcd_version: cluster.etcd_version().to_string(),
        access: Access::none(),
        old_leader: cluster.member_name(leader).to_string(),
        target: target.map_or_else(|| "all".to_string(), |i| cluster.member_name(i).to_string()),
        rule: scenario.rule(leader_id),
        kind: SiteKind::Local {
            rig: Box::new(Rig { cluster, proxy }),
            scenario,
            target,
        },
        endpoints,
        client_endpoints,
        watched,
        names,
    })
}

/// The user's cluster as it is now: every member's Status, the leader and its URL.
async fn prepare_external(hooks: External) -> Result<Site, String> {
    hooks
        .access
        .authenticate(&hooks.endpoints, AUTH_TIMEOUT)
        .await?;
    let access = &hooks.access;
    let statuses = join_all(
        hooks
            .endpoints
            .iter()
            .map(|u| election::status_of(access, u)),
    )
    .await;
    let mut names = Vec::new();
    let (mut leader_url, mut leader_id, mut version) = (None, 0, String::new());
    for (url, status) in hooks.endpoints.iter().zip(&statuses) {
        let Some(status) = status else { continue };
        names.push((status.member, url.clone()));
        version.clone_from(&status.version);
        if status.leader != 0 && status.leader == status.member {
            (leader_url, leader_id) = (Some(url.clone()), status.member);
        }
    }
    let Some(leader_url) = leader_url else {
        return Err(format!(
            "none of {} answered Status as the leader",
            hooks.endpoints.join(",")
        ));
    };
    Ok(Site {
        endpoints: hooks.endpoints.clone(),
        client_endpoints: hooks.endpoints.clone(),
        etcd_version: version,
        access: hooks.access.clone(),
        old_leader: leader_url.clone(),
        target: "(your fault command)".to_string(),
        rule: hooks
            .fault_cmd
            .is_some()
            .then_some(Rule::NewLeader { old: leader_id }),
        watched: hooks.endpoints.clone(),
        names,
        kind: SiteKind::External { hooks, leader_url },
    })
}

/// Runs `cmd` with `sh -c`, with the endpoints and the leader's URL in its environment
/// (`ETCD_HA_BENCH_ENDPOINTS`, `ETCD_HA_BENCH_LEADER`); errors unless it exits with 0.
async fn shell(cmd: &str, endpoints: &[String], leader_url: &str) -> Result<(), String> {
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .env("ETCD_HA_BENCH_ENDPOINTS", endpoints.join(","))
        .env("ETCD_HA_BENCH_LEADER", leader_url)
        .status()
        .await
        .map_err(|e| format!("running `{cmd}`: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{cmd}` exited with {status}"))
    }
}
