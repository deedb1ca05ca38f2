//! Known client bugs, put back on purpose so the robustness suite can show that it catches
//! them (feature `mutants`, for that suite only: never enable it anywhere else).
//!
//! `ETCD_HA_MUTANT` names the bug to put back, read once per process:
//! - `resend-ambiguous`: send a write again after an ambiguous failure (a timeout, a lost
//!   connection), the bug Jepsen found in jetcd 0.8.2; a write applied by the first attempt is
//!   then applied twice.
//! - `resend-deletes`: the same for deletes only, as a client does that takes a delete for
//!   idempotent (it is not: a resent delete removes a value written in between).
//! - `resume-at-last`: a managed watch resumes *at* the last revision it delivered instead of
//!   the one after it, and trusts the server's events to be new, so that revision's events
//!   come twice.
//! - `skip-monotonic-guard`: serializable reads take whatever a member answers, even below a
//!   revision the client has already seen.
//! - `lease-no-local-expiry`: a kept lease is believed alive past its local expiry, until a
//!   server says otherwise (which a stopped keeper never hears).
//! - `from-now-stale`: a watch "from now" starts right after the client's last seen revision,
//!   however old, and replays what was written since (the defect of issue 18).
//! - `cancel-txns`: cancel a txn in flight when its caller gives up, even on a member that
//!   crashes for it (etcd 3.5.0-3.5.4, issue 14110; see `endpoint/version.rs`).
//! - `cache-skip-fresh`: a [`Cache`](crate::Cache) serves `Consistent` and `AtLeast` reads from
//!   whatever it holds, without waiting to be fresh (the bug a cache without a freshness
//!   round has: a read misses writes that completed before it began).
//! - `cache-watch-skip`: a local cache watch that fell behind the history jumps to where the
//!   history starts instead of being reloaded, silently skipping the events it lost.

use std::sync::OnceLock;

/// Every mutant this build knows, by the name `ETCD_HA_MUTANT` gives it.
const KNOWN: [&str; 9] = [
    "resend-ambiguous",
    "resend-deletes",
    "resume-at-last",
    "skip-monotonic-guard",
    "lease-no-local-expiry",
    "from-now-stale",
    "cancel-txns",
    "cache-skip-fresh",
    "cache-watch-skip",
];

/// The mutant named by `ETCD_HA_MUTANT`, read once; a name no mutant has is a mistake in the
/// run's setup, so it stops the process instead of silently testing the correct client.
fn chosen() -> Option<&'static str> {
    static CHOSEN: OnceLock<Option<&'static str>> = OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let name = std::env::var("ETCD_HA_MUTANT").ok()?;
        let Some(known) = KNOWN.iter().find(|k| **k == name) else {
            panic!("ETCD_HA_MUTANT={name:?} is no mutant; known: {KNOWN:?}");
        };
        tracing::warn!(mutant = known, "a known client bug is put back on purpose");
        Some(known)
    })
}

fn is(name: &str) -> bool {
    chosen() == Some(name)
}

/// Whether the `resend-ambiguous` bug is on.
pub(crate) fn resend_ambiguous() -> bool {
    is("resend-ambiguous")
}

/// Whether the `resend-deletes` bug is on.
pub(crate) fn resend_deletes() -> bool {
    is("resend-deletes")
}

/// Whether the `resume-at-last` bug is on.
pub(crate) fn resume_at_last() -> bool {
    is("resume-at-last")
}

/// Whether the `skip-monotonic-guard` bug is on.
pub(crate) fn skip_monotonic_guard() -> bool {
    is("skip-monotonic-guard")
}

/// Whether the `lease-no-local-expiry` bug is on.
pub(crate) fn lease_no_local_expiry() -> bool {
    is("lease-no-local-expiry")
}

/// Whether the `from-now-stale` bug is on.
pub(crate) fn from_now_stale() -> bool {
    is("from-now-stale")
}

/// Whether the `cancel-txns` bug is on.
pub(crate) fn cancel_txns() -> bool {
    is("cancel-txns")
}

/// Whether the `cache-skip-fresh` bug is on.
pub(crate) fn cache_skip_fresh() -> bool {
    is("cache-skip-fresh")
}

/// Whether the `cache-watch-skip` bug is on.
pub(crate) fn cache_watch_skip() -> bool {
    is("cache-watch-skip")
}
