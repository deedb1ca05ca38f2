//! The lost-leader outage rule as a pure function of what each member shows: whether the
//! outage that began when we lost the leader is over (no IO, no lock, no clock: `outage.rs`
//! gathers the facts and ends the outage when this says so).
//!
//! ```text
//!  lost leader draining, dropped our proposal, or refusing us and not a held-open stop
//!      -> on, whatever else (only a new leader ends it: `LeaderCell::observe`)
//!  another member served a linearizable read begun after the loss,
//!  or the lost leader is healthy again (or a held-open stop)
//!      -> over
//!  else
//!      -> on (no proof yet)
//! ```

use std::time::Duration;

use tokio::time::Instant;

use crate::endpoint::Proofs;

/// How long a stopping leader takes to hand over when nothing holds its stop up: etcd closes
/// its client listeners, then transfers leadership at once; the new leader is elected and
/// reported by the followers within tens of ms (52-54 ms measured on etcd 3.6.16 with two
/// clients). A leader that still leads past it is one whose stop waits for something else.
///
/// Why not longer: every leader-bound call waits this long (plus a probe's read) at a held-open
/// stop, and Go's clientv3, which never waits, lost no call through etcd 3.6.16's quick stops
/// at up to 256 in flight, so writes forwarded during a quick hand-over are rarely dropped
/// there. With 500 ms, etcd-ha's longest gap at a held-open stop was 524-619 ms at 1-16 calls
/// in flight; with 150 ms, 168-209 ms, and the quick-stop tests (`tests/leader_sigterm.rs`,
/// etcd 3.4.23, 3.5.1, 3.5.35, 3.6.16) still saw no write fail after the close.
pub(crate) const STOP_HANDOVER: Duration = Duration::from_millis(150);

/// Whether the outage of leader `lost_id`, lost at `since`, is over by what `members` show.
pub(super) fn outage_over(lost_id: u64, since: Instant, members: &[Proofs]) -> bool {
    let lost = members.iter().filter(|m| m.member_id == lost_id);
    // A leader handing over for a drain is healthy and serves reads until the transfer ends,
    // but drops the proposals followers forward to it: only a new leader ends that outage.
    //
    // The same holds for a leader whose process is stopping (SIGTERM: etcd closes its client
    // listeners first, and only then hands leadership over and drops what followers forward
    // during the transfer) or gone: it refuses connections, while the followers still name it
    // and may even serve linearizable reads through it for a while. A refused connection since
    // the loss says so; a leader merely cut off from us (a broken link) accepts them. See
    // [`stopping_but_leading`] for the one way such an outage ends early.
    //
    // And for a leader that dropped our proposal since the loss (someone else's MoveLeader, or
    // etcd's own transfer at a graceful stop): it is healthy and followers can read through
    // it, but it drops their forwarded writes until a new leader takes over.
    let held = lost.clone().any(|m| {
        m.draining
            || m.dropped_at.is_some_and(|t| t >= since)
            || (m.refusals.is_some_and(|r| r.last >= since)
                && !m.healthy()
                && !stopping_but_leading(m, members))
    });
    if held {
        return false;
    }
    // A member served a linearizable read that started after we lost the leader: the
    // cluster's leader is alive and reachable through it (only our link to the leader broke),
    // so calls can go through followers now. Or the same member leads again and answers: the
    // outage was short (a brief freeze).
    members
        .iter()
        .any(|m| m.member_id != lost_id && m.linearizable_ok.is_some_and(|t| t > since))
        || lost
            .clone()
            .any(|m| m.healthy() || stopping_but_leading(m, members))
}

/// Whether `leader`, which refuses our connections, has been stopping for longer than a quick
/// hand-over and still leads: another member served a linearizable read that began
/// [`STOP_HANDOVER`] after the first refusal.
///
/// etcd's graceful stop (SIGTERM) closes the client listeners, then waits for the RPCs in
/// flight, other clients' watch and keep-alive streams included, up to its request timeout
/// (7 s with default timing), and only then hands leadership over. For all that time the
/// member refuses us but leads, and its followers forward writes to it as usual: waiting for
/// a new leader would hold every leader-bound call to its deadline (etcd 3.6.16: a 2 s gap and
/// errors at 1 call in flight, where Go's clientv3 lost nothing), so calls go through the
/// followers. A quick stop hands over within [`STOP_HANDOVER`], before any read can prove
/// this, and is waited out as before: writes forwarded during the transfer would be dropped.
fn stopping_but_leading(leader: &Proofs, members: &[Proofs]) -> bool {
    let Some(refusals) = leader.refusals else {
        return false;
    };
    let held_open = refusals.first + STOP_HANDOVER;
    members.iter().any(|m| {
        m.member_id != leader.member_id && m.linearizable_ok.is_some_and(|t| t >= held_open)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::{HealthState, Refusals};

    const LOST: u64 = 1;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The lost leader (unhealthy, nothing else known) and two followers that served nothing.
    fn cluster() -> [Proofs; 3] {
        [1, 2, 3].map(|member_id| Proofs {
            member_id,
            health: if member_id == LOST {
                HealthState::Ejected
            } else {
                HealthState::Healthy
            },
            dropped_at: None,
            refusals: None,
            linearizable_ok: None,
            draining: false,
        })
    }

    #[test]
    fn no_proof_keeps_the_outage_on() {
        let since = Instant::now();
        assert!(!outage_over(LOST, since, &cluster()));
        // A read that began before the loss proves nothing about the leader since.
        let mut m = cluster();
        m[1].linearizable_ok = Some(since);
        assert!(!outage_over(LOST, since, &m));
    }

    #[test]
    fn a_read_served_elsewhere_after_the_loss_or_the_leader_healthy_again_ends_it() {
        let since = Instant::now();
        let mut m = cluster();
        m[2].linearizable_ok = Some(since + ms(1));
        assert!(
            outage_over(LOST, since, &m),
            "the leader is alive behind a follower"
        );
        let mut m = cluster();
        m[0].health = HealthState::Healthy;
        assert!(outage_over(LOST, since, &m), "a brief freeze ended");
        // The lost leader's own read is not a follower's proof.
        let mut m = cluster();
        m[0].linearizable_ok = Some(since + ms(1));
        assert!(!outage_over(LOST, since, &m));
    }

    #[test]
    fn a_draining_or_dropping_leader_holds_it_whatever_the_reads() {
        let since = Instant::now();
        let mut m = cluster();
        m[0].health = HealthState::Healthy;
        m[1].linearizable_ok = Some(since + ms(5));
        m[0].draining = true;
        assert!(!outage_over(LOST, since, &m), "draining");
        m[0].draining = false;
        m[0].dropped_at = Some(since);
        assert!(
            !outage_over(LOST, since, &m),
            "dropped our proposal since the loss"
        );
        m[0].dropped_at = Some(since - ms(1));
        assert!(
            outage_over(LOST, since, &m),
            "a drop before the loss is old news"
        );
    }

    #[test]
    fn a_refusing_leader_holds_it_until_a_read_proves_a_held_open_stop() {
        let since = Instant::now();
        let first = since + ms(10);
        let mut m = cluster();
        m[0].refusals = Some(Refusals { first, last: first });
        // A follower read soon after the close: a quick hand-over may still be under way.
        m[1].linearizable_ok = Some(first + STOP_HANDOVER - ms(1));
        assert!(!outage_over(LOST, since, &m), "within a quick hand-over");
        // A read that began past the hand-over: the stop is held open and it still leads.
        m[1].linearizable_ok = Some(first + STOP_HANDOVER);
        assert!(outage_over(LOST, since, &m));
        // Refusals that ended before the loss do not hold it.
        let mut m = cluster();
        m[0].refusals = Some(Refusals {
            first: since - ms(20),
            last: since - ms(10),
        });
        m[2].linearizable_ok = Some(since + ms(1));
        assert!(outage_over(LOST, since, &m));
    }
}
