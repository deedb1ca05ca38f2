//! The leadership probe: each client holds a leadership (an election of its own, one
//! contender) from before the fault, and campaigns again whenever it loses it. Measured: was
//! the leadership kept through the fault (held at the fault and never lost; what every planned
//! event should give), else the time from the fault to its loss and to the next holder.
//!
//! What holding is for each client:
//!
//! - etcd-ha: [`etcd_ha::concurrency::Leadership`] with its defaults (a 5 s lease of its own,
//!   step down after 3 s without etcd), `acquire()` then `lost()`.
//! - etcd-client (all three): the careful application's session: a 5 s lease kept by the same
//!   loop as the lease probe ([`crate::lease::renew_ec`]; reopened with backoff for
//!   tuned-retry, given up at its first failure otherwise), and the crate's election API
//!   (`campaign(name, value, lease)`). The holder believes it leads until the last answered
//!   renewal's send time plus the TTL (or at once when etcd says the lease is gone); then it
//!   campaigns again with a new lease.

use std::time::Duration;

use etcd_ha::concurrency::Leadership;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::lease::{LEASE_GONE, LEASE_TTL, renew_ec};

/// Pause before campaigning again after a failed grant or campaign: 100 ms, so a dead member
/// is not hammered, and a new holder is still found within a few of the loops' calls.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How often the etcd-client holder looks at its belief: 10 ms, the loops' pace.
const POLL: Duration = Duration::from_millis(10);

/// One spell as holder, in microseconds since the trial's start.
#[derive(Debug, Clone, Copy)]
pub struct Hold {
    /// When the holder learnt it leads.
    pub acquired_us: u64,
    /// When it learnt it no longer does; `None` if it held until the end.
    pub lost_us: Option<u64>,
}

/// What a holder did.
#[derive(Debug, Default)]
pub struct Held {
    /// Every spell as holder, in order.
    pub holds: Vec<Hold>,
    /// Why the last spell ended or the last campaign failed, if any did.
    pub last_problem: Option<String>,
}

/// The probe's numbers for one client in one trial.
#[derive(Debug, Clone, Serialize)]
pub struct LeadershipMetrics {
    /// True if it held the leadership at the fault.
    pub held_at_fault: bool,
    /// True if it held the leadership at the fault and never lost it until the end.
    pub kept: bool,
    /// From the fault to the first loss after it.
    pub lost_after_fault_ms: Option<f64>,
    /// From the fault to the first acquisition after it (after a loss, or when it did not
    /// hold at the fault).
    pub new_holder_after_fault_ms: Option<f64>,
    /// Spells as holder in the whole trial.
    pub holds: u64,
    /// Why the last spell ended or the last campaign failed.
    pub last_problem: Option<String>,
}

/// Microseconds from `start` to now.
fn now_us(start: Instant) -> u64 {
    Instant::now().saturating_duration_since(start).as_micros() as u64
}

/// Holds the leadership of `key` with etcd-ha's [`Leadership`] until `until`.
pub async fn hold_ha(client: etcd_ha::Client, key: String, start: Instant, until: Instant) -> Held {
    let mut out = Held::default();
    let leadership = Leadership::new(&client, key, "etcd-ha-bench");
    while Instant::now() < until {
        let held = match tokio::time::timeout_at(until, leadership.acquire()).await {
            Err(_until) => return out,
            Ok(Err(e)) => {
                out.last_problem = Some(format!("acquire: {e}"));
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            Ok(Ok(held)) => held,
        };
        let acquired_us = now_us(start);
        let lost = tokio::time::timeout_at(until, held.lost()).await;
        let lost_us = match lost {
            Err(_until) => None,
            Ok(reason) => {
                out.last_problem = Some(format!("lost: {reason:?}"));
                Some(now_us(start))
            }
        };
        out.holds.push(Hold {
            acquired_us,
            lost_us,
        });
    }
    out
}

/// Holds the election `name` with etcd-client until `until`, as a careful application does
/// (see the module docs); `resume` for the tuned-retry application's keep-alive loop.
pub async fn hold_ec(
    client: etcd_client::Client,
    name: String,
    start: Instant,
    until: Instant,
    resume: bool,
) -> Held {
    let mut out = Held::default();
    while Instant::now() < until {
        let granted = Instant::now();
        let mut leases = client.lease_client();
        let grant = leases.grant(LEASE_TTL.as_secs() as i64, None);
        let id = match tokio::time::timeout_at(until, grant).await {
            Err(_until) => return out,
            Ok(Err(e)) => {
                out.last_problem = Some(format!("grant: {e}"));
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            Ok(Ok(granted)) => granted.id(),
        };
        // The session: its lease renewed in the background; `alive` carries the instant the
        // holder's belief in it runs out.
        let (alive, belief) = watch::channel(granted + LEASE_TTL);
        let keeper = tokio::spawn(keep_session(
            client.lease_client(),
            id,
            until,
            resume,
            alive,
        ));
        let mut election = client.election_client();
        let campaign = election.campaign(name.clone(), "etcd-ha-bench", id);
        let won = tokio::time::timeout_at(until, campaign).await;
        match won {
            Err(_until) => {
                keeper.abort();
                return out;
            }
            Ok(Err(e)) => {
                keeper.abort();
                out.last_problem = Some(format!("campaign: {e}"));
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            Ok(Ok(_)) => {}
        }
        let acquired_us = now_us(start);
        let lost_us = loop {
            let now = Instant::now();
            if now >= *belief.borrow() {
                out.last_problem = Some("lost: the session's lease ran out".to_string());
                break Some(now_us(start));
            }
            if now >= until {
                break None;
            }
            tokio::time::sleep(POLL).await;
        };
        keeper.abort();
        out.holds.push(Hold {
            acquired_us,
            lost_us,
        });
    }
    out
}

/// Renews lease `id` until `until`, moving `alive` to each answered renewal's send time plus
/// the TTL, and to now when etcd says the lease is gone.
async fn keep_session(
    client: etcd_client::LeaseClient,
    id: i64,
    until: Instant,
    resume: bool,
    alive: watch::Sender<Instant>,
) {
    let (ended, _) = renew_ec(client, id, until, resume, |sent, _answered| {
        alive.send_replace(sent + LEASE_TTL);
    })
    .await;
    if ended.as_deref() == Some(LEASE_GONE) {
        alive.send_replace(Instant::now());
    }
}

/// The probe's numbers for one holder, given the fault's instant.
pub fn evaluate(held: Held, fault_us: u64) -> LeadershipMetrics {
    let at_fault = held
        .holds
        .iter()
        .find(|h| h.acquired_us <= fault_us && h.lost_us.is_none_or(|lost| lost > fault_us));
    let held_at_fault = at_fault.is_some();
    let kept = at_fault.is_some_and(|h| h.lost_us.is_none());
    let ms = |us: u64| us.saturating_sub(fault_us) as f64 / 1000.0;
    let lost_after = held
        .holds
        .iter()
        .filter_map(|h| h.lost_us)
        .find(|&lost| lost >= fault_us);
    let new_holder = held
        .holds
        .iter()
        .map(|h| h.acquired_us)
        .find(|&acquired| acquired > fault_us);
    LeadershipMetrics {
        held_at_fault,
        kept,
        lost_after_fault_ms: lost_after.map(ms),
        new_holder_after_fault_ms: if kept { None } else { new_holder.map(ms) },
        holds: held.holds.len() as u64,
        last_problem: held.last_problem,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(spells: &[(u64, Option<u64>)]) -> Held {
        Held {
            holds: spells
                .iter()
                .map(|&(acquired_us, lost_us)| Hold {
                    acquired_us,
                    lost_us,
                })
                .collect(),
            last_problem: None,
        }
    }

    #[test]
    fn a_holder_that_never_lets_go_kept_it() {
        let m = evaluate(held(&[(500, None)]), 1_000);
        assert!(m.held_at_fault && m.kept);
        assert_eq!(m.lost_after_fault_ms, None);
        assert_eq!(m.new_holder_after_fault_ms, None);
    }

    #[test]
    fn a_loss_after_the_fault_and_the_next_spell_are_timed_from_it() {
        let m = evaluate(held(&[(500, Some(3_000)), (6_000, None)]), 1_000);
        assert!(m.held_at_fault && !m.kept);
        assert_eq!(m.lost_after_fault_ms, Some(2.0));
        assert_eq!(m.new_holder_after_fault_ms, Some(5.0));
        assert_eq!(m.holds, 2);
    }

    #[test]
    fn a_spell_that_ended_before_the_fault_does_not_count_as_held() {
        let m = evaluate(held(&[(100, Some(400))]), 1_000);
        assert!(!m.held_at_fault && !m.kept);
        assert_eq!(m.new_holder_after_fault_ms, None);
    }
}
