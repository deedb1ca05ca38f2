//! The mixed workload of one seed: KV processes, managed watches (bookmarked, quiet and "from
//! now"), kept leases, election, mutex and leadership contenders and readers of a watch-fed
//! cache, spread over the run's clients, and a slow writer under the quiet watches' prefix.

pub mod cache;
pub mod hold;
pub mod kv;
pub mod lease;
pub mod watch;

use std::sync::{Arc, Mutex};

use etcd_ha::Client;
use tokio::task::JoinSet;

use etcd_ha_check::history::{Abandoned, HoldLog, LeaseLog, WatchLog};
use etcd_ha_check::record::Recorder;

/// KV processes per client.
pub const PROCESSES_PER_CLIENT: u32 = 4;

/// Churn processes (a delete, a put, again) per client, and the first one's process id.
pub const CHURN_PER_CLIENT: u32 = 3;
pub const CHURN_PROCESS: u32 = 150;

/// What every workload task shares.
#[derive(Clone)]
pub struct Ctx {
    pub seed: u64,
    pub prefix: String,
    pub recorder: Arc<Recorder>,
    pub stop: tokio::sync::watch::Receiver<bool>,
    /// Set when the run stops waiting for open watches to reach the end marker.
    pub finish: tokio::sync::watch::Receiver<bool>,
    pub watches: Arc<Mutex<Vec<WatchLog>>>,
    pub leases: Arc<Mutex<Vec<LeaseLog>>>,
    pub holds: Arc<Mutex<Vec<HoldLog>>>,
    pub abandoned: Arc<Mutex<Vec<Abandoned>>>,
}

impl Ctx {
    /// Whether the workload was told to stop.
    pub fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Completes when the workload is told to stop.
    pub async fn until_stopped(&self) {
        let mut stop = self.stop.clone();
        let _ = stop.wait_for(|s| *s).await;
    }

    /// Whether the run stopped waiting for the watches.
    pub fn finished(&self) -> bool {
        *self.finish.borrow()
    }

    /// Completes when the run stops waiting for the watches.
    pub async fn until_finished(&self) {
        let mut finish = self.finish.clone();
        let _ = finish.wait_for(|s| *s).await;
    }

    /// A generator for one task, derived from the seed (so a seed replays the same choices).
    pub fn rng(&self, task: u64) -> fastrand::Rng {
        fastrand::Rng::with_seed(self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ task)
    }
}

/// Start every workload task; they run until `ctx.stop` says so (open watches until they
/// reach the end marker or `ctx.finish` says so). `idle` is a client of its own for the
/// watches "from now": it reads once before each, so what it has seen is always old.
pub fn start(ctx: &Ctx, clients: &[Client], idle: &Client) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    tasks.spawn(kv::quiet_writer(ctx.clone(), clients[0].clone(), 0));
    let idle_id = clients.len() as u32;
    tasks.spawn(watch::watcher(
        ctx.clone(),
        idle.clone(),
        idle_id,
        watch::Kind::FromNow,
    ));
    for (c, client) in clients.iter().enumerate() {
        let c = c as u32;
        for p in 0..PROCESSES_PER_CLIENT {
            let process = c * PROCESSES_PER_CLIENT + p;
            tasks.spawn(kv::process(ctx.clone(), client.clone(), c, process));
        }
        for k in 0..CHURN_PER_CLIENT {
            let process = CHURN_PROCESS + c * CHURN_PER_CLIENT + k;
            tasks.spawn(kv::churn(ctx.clone(), client.clone(), c, process));
        }
        for kind in [watch::Kind::Bookmarked, watch::Kind::Quiet] {
            tasks.spawn(watch::watcher(ctx.clone(), client.clone(), c, kind));
        }
        tasks.spawn(lease::keeper(ctx.clone(), client.clone(), c));
        tasks.spawn(cache::cache(ctx.clone(), client.clone(), c));
        for kind in hold::KINDS {
            tasks.spawn(hold::contender(ctx.clone(), client.clone(), c, kind));
        }
    }
    tasks
}
