//! Kept leases: grant one, put a key under it, sample what the keeper believes (its
//! conservative expiry) every 50 ms, then either revoke it or stop renewing and let it expire.

use std::time::Duration;

use etcd_ha::Client;

use super::Ctx;
use super::kv;
use etcd_ha_check::history::{Belief, LeaseLog, Request};

/// Keep leases one after another until the workload stops.
pub async fn keeper(ctx: Ctx, client: Client, client_id: u32) {
    let mut rng = ctx.rng(3000 + u64::from(client_id));
    let process = 100 + client_id;
    let mut n = 0u32;
    while !ctx.stopped() {
        n += 1;
        let ttl = Duration::from_secs(rng.u64(2..=4));
        let granted_at = ctx.recorder.now();
        let kept = match client.keeper().grant(ttl).await {
            Ok(kept) => kept,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let mut log = LeaseLog {
            lease: kept.id(),
            client: client_id,
            ttl_ms: kept.ttl().as_millis() as u64,
            granted_at,
            keys: Vec::new(),
            beliefs: vec![belief(&ctx, &kept)],
            lost_at: None,
            revoked_at: None,
        };
        // Two keys under the lease: its expiry or revoke deletes both at one revision, so
        // watches see multi-event revisions (what atomic delivery is about).
        for part in ["a", "b"] {
            let key = format!("{}lease/{client_id}-{n}{part}", ctx.prefix);
            let request = Request::Put {
                key: key.clone(),
                value: format!("l{client_id}-{n}{part}"),
                lease: Some(kept.id()),
            };
            log.keys.push(key);
            let put = kv::run(&client, &request);
            ctx.recorder
                .op(process, client_id, request.clone(), put)
                .await;
        }

        // Kept for a while, then revoked (half the time) or left to expire.
        let keep_for = Duration::from_millis(rng.u64(500..4_000));
        let revoke = rng.bool();
        let kept_until = tokio::time::Instant::now() + keep_for;
        let mut stopped_renewing = false;
        loop {
            let tick = tokio::time::sleep(Duration::from_millis(50));
            tokio::select! {
                () = kept.lost() => {
                    log.lost_at = Some(ctx.recorder.now());
                    break;
                }
                () = tick => {}
            }
            if kept.is_expired() {
                continue;
            }
            log.beliefs.push(belief(&ctx, &kept));
            if ctx.stopped() && stopped_renewing {
                // Left to expire: followed until lost() fires (within its TTL) or the run
                // stops waiting, so the server's drop of its keys is in the truth and the
                // checker can judge the belief against it.
                if ctx.finished() {
                    break;
                }
                continue;
            }
            if stopped_renewing || (tokio::time::Instant::now() < kept_until && !ctx.stopped()) {
                continue;
            }
            if revoke || ctx.stopped() {
                log.revoked_at = Some(ctx.recorder.now());
                kept.stop();
                let _ = client.lease().revoke(kept.id()).await;
                break;
            }
            kept.stop();
            stopped_renewing = true;
        }
        ctx.leases.lock().unwrap().push(log);
    }
}

fn belief(ctx: &Ctx, kept: &etcd_ha::KeptLease) -> Belief {
    Belief {
        at: ctx.recorder.now(),
        until: ctx.recorder.at(kept.expires_at()),
    }
}
