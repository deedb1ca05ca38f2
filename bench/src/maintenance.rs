//! The planned-maintenance scripts: MoveLeader (once or several times in a row), and the
//! graceful rolling restart (SIGTERM, down for a while, start, wait until it serves), with or
//! without etcd-ha's drain API around each stop.
//!
//! With drain, only etcd-ha is told of the maintenance (`Client::drain` before each stop,
//! `undrain` once it is healthy again): the etcd-client clients have no such API and just see
//! the SIGTERMs, as they would in the same rolling upgrade run by an operator who drains for
//! etcd-ha's sake.

use std::time::Duration;

use etcd_ha::proto::etcdserverpb::MoveLeaderRequest;
use etcd_ha::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use etcd_ha::testkit::{Cluster, TestkitError};

/// How long a member stays down in a rolling restart: 2 s, longer than an election timeout,
/// as an upgrade's binary swap would.
pub const ROLLING_DOWN: Duration = Duration::from_secs(2);

/// Bound on the MoveLeader call: 5 s; etcd waits for the transferee to catch up and win, which
/// takes about an election timeout.
const MOVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Time between two MoveLeaders in a row: 1 s, so each transfer's effect on the clients shows
/// apart from the next one's.
pub const MOVE_SPACING: Duration = Duration::from_secs(1);

/// How long the drained client may take to see a restarted member healthy again before it is
/// undrained anyway (its probes run every few hundred ms; a restart takes about 1 s).
const HEALTHY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the cluster may take to name a leader between two steps.
const LEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// Asks the leader (member `leader`) to hand leadership to the next member, over a fresh
/// channel; returns once etcd says the transfer is done.
pub async fn move_leader(cluster: &Cluster, leader: usize) -> Result<(), String> {
    let transferee = (leader + 1) % cluster.len();
    let target_id = cluster
        .member_id(transferee)
        .await
        .map_err(|e| e.to_string())?;
    let channel = tonic::transport::Endpoint::from_shared(cluster.endpoint(leader))
        .map_err(|e| e.to_string())?
        .timeout(MOVE_TIMEOUT)
        .connect()
        .await
        .map_err(|e| format!("connecting to the leader: {e}"))?;
    MaintenanceClient::new(channel)
        .move_leader(MoveLeaderRequest { target_id })
        .await
        .map(drop)
        .map_err(|s| format!("MoveLeader: {:?}: {}", s.code(), s.message()))
}

/// `times` MoveLeaders in a row, [`MOVE_SPACING`] apart, each from whoever leads then.
pub async fn move_leader_repeatedly(cluster: &Cluster, times: usize) -> Result<(), String> {
    for n in 0..times {
        if n > 0 {
            tokio::time::sleep(MOVE_SPACING).await;
        }
        let leader = cluster
            .leader(LEADER_TIMEOUT)
            .await
            .map_err(|e| e.to_string())?;
        move_leader(cluster, leader).await?;
    }
    Ok(())
}

/// A graceful rolling restart: every member in turn, followers first and the leader last,
/// SIGTERM (etcd hands leadership over if it leads), [`ROLLING_DOWN`] down, started again,
/// and the next one only once it serves. With `drainer`, that etcd-ha client drains each
/// member before its SIGTERM and undrains it once it sees it healthy again.
pub async fn rolling_sigterm(
    cluster: &mut Cluster,
    drainer: Option<&etcd_ha::Client>,
) -> Result<(), String> {
    let text = |e: TestkitError| e.to_string();
    let leader = cluster.leader(LEADER_TIMEOUT).await.map_err(text)?;
    let n = cluster.len();
    for i in (1..=n).map(|k| (leader + k) % n) {
        let url = cluster.endpoint(i);
        if let Some(client) = drainer {
            client
                .drain(&url)
                .await
                .map_err(|e| format!("drain of {url}: {e}"))?;
        }
        cluster.terminate(i).await;
        tokio::time::sleep(ROLLING_DOWN).await;
        cluster.restart(i).await.map_err(text)?;
        if let Some(client) = drainer {
            healthy(client, &url).await;
            client
                .undrain(&url)
                .map_err(|e| format!("undrain of {url}: {e}"))?;
        }
    }
    Ok(())
}

/// Waits until `client` sees the endpoint `url` healthy, at most [`HEALTHY_TIMEOUT`]: an
/// operator undrains a member once the client can use it again.
async fn healthy(client: &etcd_ha::Client, url: &str) {
    let give_up = tokio::time::Instant::now() + HEALTHY_TIMEOUT;
    while tokio::time::Instant::now() < give_up {
        let ready = client
            .endpoints()
            .iter()
            .any(|e| e.url == url && e.health == etcd_ha::HealthState::Healthy);
        if ready {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
