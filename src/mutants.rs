//! Known client bugs, put back on purpose so the robustness suite can show that it catches
//! them (feature `mutants`, for that suite only: never enable it anywhere else).
//!
//! `ETCD_HA_MUTANT` names the bug to put back, read once per process:
//! - `resend-ambiguous`: send a write again after an ambiguous failure (a timeout, a lost
//!   connection), the bug Jepsen found in jetcd 0.8.2; a write applied by the first attempt is
//!   then applied twice.
//! - `cancel-txns`: cancel a txn in flight when its caller gives up, even on a member that
//!   crashes for it (etcd 3.5.0-3.5.4, issue 14110; see `endpoint/version.rs`).

use std::sync::OnceLock;

/// Whether the `resend-ambiguous` bug is on.
pub(crate) fn resend_ambiguous() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let on = std::env::var("ETCD_HA_MUTANT").is_ok_and(|m| m == "resend-ambiguous");
        if on {
            tracing::warn!("mutant on: writes are sent again after ambiguous failures");
        }
        on
    })
}

/// Whether the `cancel-txns` bug is on.
pub(crate) fn cancel_txns() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let on = std::env::var("ETCD_HA_MUTANT").is_ok_and(|m| m == "cancel-txns");
        if on {
            tracing::warn!("mutant on: txns are canceled in flight on every server version");
        }
        on
    })
}
