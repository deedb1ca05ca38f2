//! The lease probe: how each client keeps a lease alive through the fault. Each client grants
//! a lease of [`LEASE_TTL`] before the warm-up and keeps it; measured: the time from the fault
//! to the answer of the first renewal *sent* after it, and whether the lease still exists at
//! the end (asked of the cluster over a fresh channel, not of the client).
//!
//! What keeping is for each client:
//!
//! - etcd-ha: the `Keeper` (`client.keeper().grant(ttl)`), renewals every TTL/3 over one
//!   stream that fails over; a renewal shows as a new local expiry (`expires_at`).
//! - etcd-client default and tuned: the loop an application writes with the crate's
//!   keep-alive stream: every TTL/3 send a keep-alive and read its answer; on an error or an
//!   end of stream the loop is over (the crate has no failover for it).
//! - etcd-client tuned-retry: the careful application's loop: the same, with each answer
//!   bounded by TTL/3, and the stream opened again (with backoff) when it fails.

use std::time::Duration;

use etcd_ha::proto::etcdserverpb::LeaseTimeToLiveRequest;
use etcd_ha::proto::etcdserverpb::lease_client::LeaseClient;
use serde::Serialize;
use tokio::time::Instant;

use crate::access::Access;

/// The lease's TTL: 5 s, a common choice for service registration and leader keys; long
/// enough to outlive an election (1-2 s) if renewals resume at once, short enough that one
/// that stops is lost within the fault window.
pub const LEASE_TTL: Duration = Duration::from_secs(5);

/// How often etcd-ha's lease is looked at for a new expiry: 10 ms, the loops' pace.
const POLL: Duration = Duration::from_millis(10);

/// First and longest backoff of the tuned-retry application's keep-alive loop.
const REOPEN_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(50), Duration::from_millis(400));

/// Bound on the end-of-trial existence check.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// One answered renewal, in microseconds since the trial's start.
#[derive(Debug, Clone, Copy)]
pub struct Renewal {
    /// When it was sent.
    pub sent_us: u64,
    /// When its answer arrived.
    pub answered_us: u64,
}

/// What a keeper did.
#[derive(Debug, Default)]
pub struct Kept {
    /// The lease, if it was granted.
    pub lease_id: Option<i64>,
    /// Every renewal answered.
    pub renewals: Vec<Renewal>,
    /// Why keeping stopped before the end, if it did.
    pub ended: Option<String>,
    /// Times the application's loop opened the keep-alive stream again (tuned-retry only).
    pub reopened: u64,
}

/// The probe's numbers for one client in one trial.
#[derive(Debug, Clone, Serialize)]
pub struct LeaseMetrics {
    /// From the fault to the answer of the first renewal sent after it.
    pub first_renewal_after_fault_ms: Option<f64>,
    /// Renewals answered.
    pub renewals: u64,
    /// True if the lease no longer existed at the end of the trial; `None` if unknown.
    pub lost: Option<bool>,
    /// Why keeping stopped early, if it did.
    pub ended: Option<String>,
    /// Times the application's loop opened the keep-alive stream again.
    pub reopened: u64,
}

/// Microseconds from `start` to `t` (0 before it).
fn micros(start: Instant, t: Instant) -> u64 {
    t.saturating_duration_since(start).as_micros() as u64
}

/// Keeps a new lease with etcd-ha's `Keeper` until `until`.
pub async fn keep_ha(keeper: etcd_ha::Keeper, start: Instant, until: Instant) -> Kept {
    let mut out = Kept::default();
    let lease = match keeper.grant(LEASE_TTL).await {
        Ok(lease) => lease,
        Err(e) => {
            out.ended = Some(format!("grant failed: {e}"));
            return out;
        }
    };
    out.lease_id = Some(lease.id());
    let ttl = lease.ttl();
    let mut last = lease.expires_at();
    while Instant::now() < until {
        tokio::time::sleep(POLL).await;
        let expiry = lease.expires_at();
        if expiry != last {
            // The expiry is the renewal's send time plus the TTL.
            let sent_us = micros(start, expiry - ttl);
            let answered_us = micros(start, Instant::now());
            out.renewals.push(Renewal {
                sent_us,
                answered_us,
            });
            last = expiry;
        }
        if lease.is_expired() {
            out.ended = Some("the keeper says the lease is lost".to_string());
            break;
        }
    }
    out
}

/// Keeps a new lease with etcd-client's keep-alive stream until `until`; with `resume`, as
/// the careful application does (answers bounded, stream opened again).
pub async fn keep_ec(
    mut client: etcd_client::LeaseClient,
    start: Instant,
    until: Instant,
    resume: bool,
) -> Kept {
    let mut out = Kept::default();
    let id = match client.grant(LEASE_TTL.as_secs() as i64, None).await {
        Ok(granted) => granted.id(),
        Err(e) => {
            out.ended = Some(format!("grant failed: {e}"));
            return out;
        }
    };
    out.lease_id = Some(id);
    let mut renewals = Vec::new();
    let (ended, reopened) = renew_ec(client, id, until, resume, |sent, answered| {
        renewals.push(Renewal {
            sent_us: micros(start, sent),
            answered_us: micros(start, answered),
        });
    })
    .await;
    out.renewals = renewals;
    out.ended = ended;
    out.reopened = reopened;
    out
}

/// The application's keep-alive loop around etcd-client's stream for lease `id`, until
/// `until`: every TTL/3 a keep-alive and its answer, `renewed(sent, answered)` on each live
/// one. Without `resume` the loop ends at the stream's first failure; with it, answers are
/// bounded by TTL/3 and the stream is opened again with backoff. Returns why it stopped early
/// (`None` if it lasted until `until`) and how often the stream was opened again.
pub async fn renew_ec(
    mut client: etcd_client::LeaseClient,
    id: i64,
    until: Instant,
    resume: bool,
    mut renewed: impl FnMut(Instant, Instant),
) -> (Option<String>, u64) {
    let period = LEASE_TTL / 3;
    let mut backoff = REOPEN_BACKOFF.0;
    let mut reopened = 0;
    loop {
        let reason = match tokio::time::timeout_at(until, client.keep_alive(id)).await {
            Err(_until) => return (None, reopened),
            Ok(Err(e)) => format!("keep-alive stream: {e}"),
            Ok(Ok((mut keeper, mut stream))) => loop {
                if tokio::time::timeout_at(until, tokio::time::sleep(period))
                    .await
                    .is_err()
                {
                    return (None, reopened);
                }
                let sent = Instant::now();
                let renew = async {
                    keeper.keep_alive().await?;
                    stream.message().await
                };
                let answer = if resume {
                    match tokio::time::timeout(period, renew).await {
                        Ok(answer) => answer,
                        Err(_) => break "renewal unanswered".to_string(),
                    }
                } else {
                    match tokio::time::timeout_at(until, renew).await {
                        Ok(answer) => answer,
                        Err(_until) => return (None, reopened),
                    }
                };
                match answer {
                    Ok(Some(r)) if r.ttl() > 0 => {
                        renewed(sent, Instant::now());
                        backoff = REOPEN_BACKOFF.0;
                    }
                    Ok(Some(_)) => {
                        return (Some(LEASE_GONE.to_string()), reopened);
                    }
                    Ok(None) => break "keep-alive stream ended".to_string(),
                    Err(e) => break e.to_string(),
                }
            },
        };
        if !resume {
            return (Some(reason), reopened);
        }
        reopened += 1;
        tokio::time::sleep(backoff.min(until.saturating_duration_since(Instant::now()))).await;
        backoff = (backoff * 2).min(REOPEN_BACKOFF.1);
        if Instant::now() >= until {
            return (None, reopened);
        }
    }
}

/// Why a keep-alive loop stopped when etcd answered that the lease no longer exists.
pub const LEASE_GONE: &str = "etcd says the lease is gone";

/// True if lease `id` no longer exists, asked of the first of `urls` that answers.
pub async fn is_gone(access: &Access, urls: &[String], id: i64) -> Option<bool> {
    for url in urls {
        let call = async {
            let channel = access.channel(url, CHECK_TIMEOUT).await.ok()?;
            let request = LeaseTimeToLiveRequest { id, keys: false };
            let mut leases = LeaseClient::new(channel);
            let answer = access
                .check(leases.lease_time_to_live(request).await)
                .ok()?;
            Some(answer.into_inner().ttl <= 0)
        };
        if let Ok(Some(gone)) = tokio::time::timeout(CHECK_TIMEOUT, call).await {
            return Some(gone);
        }
    }
    None
}

/// The probe's numbers for one keeper, given the fault's instant and the existence check.
pub fn evaluate(kept: Kept, fault_us: u64, gone: Option<bool>) -> LeaseMetrics {
    let first = kept
        .renewals
        .iter()
        .filter(|r| r.sent_us >= fault_us)
        .map(|r| r.answered_us.saturating_sub(fault_us))
        .min();
    LeaseMetrics {
        first_renewal_after_fault_ms: first.map(|us| us as f64 / 1000.0),
        renewals: kept.renewals.len() as u64,
        lost: gone,
        ended: kept.ended,
        reopened: kept.reopened,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_renewal_counts_only_renewals_sent_after_the_fault() {
        let renewals = [(900, 2500), (1800, 1900), (3000, 3100)]
            .map(|(sent_us, answered_us)| Renewal {
                sent_us,
                answered_us,
            })
            .to_vec();
        let kept = Kept {
            renewals,
            ..Kept::default()
        };
        let m = evaluate(kept, 1000, Some(false));
        assert_eq!(m.first_renewal_after_fault_ms, Some(0.9));
        assert_eq!(m.renewals, 3);
    }
}
