//! The keeper's lost and at-risk leases, logged one line per kind and turn of the task.
//!
//! A fall behind at 100,000 leases puts tens of thousands at risk, or loses them, in one turn.
//! A warning per lease wrote 295 MB of log lines in one benchmark run, and the time spent
//! writing them was time the task needed to catch up. So each turn writes one warning per
//! kind (how many, and the first lease's id), and each lease's id only at `debug`.

use crate::metrics;

/// A lease id as etcd's tools print it (hex), formatted only when a log line is written.
pub(super) struct LeaseId(pub(super) i64);

impl std::fmt::Display for LeaseId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// What befell a lease in a turn of the task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Change {
    /// A third of its TTL left and not yet renewed.
    AtRisk,
    /// Its local expiry passed without a renewal.
    Expired,
    /// The server says it expired or was revoked.
    Gone,
    /// Renewed, but only after its local expiry.
    Late,
}

impl Change {
    const ALL: [Change; 4] = [Change::AtRisk, Change::Expired, Change::Gone, Change::Late];

    fn what(self) -> &'static str {
        match self {
            Change::AtRisk => {
                "leases at risk: their renewals have fallen behind (a third of the TTL left)"
            }
            Change::Expired => "leases lost: their local expiry passed without a renewal",
            Change::Gone => "leases lost: the server says they expired or were revoked",
            Change::Late => "leases lost: renewed only after their local expiry",
        }
    }
}

/// The leases that changed in the current turn, by kind, until [`Report::flush`].
#[derive(Debug, Default)]
pub(super) struct Report {
    changed: [Vec<i64>; 4],
}

impl Report {
    /// Note one lease.
    pub(super) fn add(&mut self, change: Change, id: i64) {
        self.changed[change as usize].push(id);
    }

    /// Note several leases.
    pub(super) fn extend(&mut self, change: Change, ids: impl IntoIterator<Item = i64>) {
        self.changed[change as usize].extend(ids);
    }

    /// Count them in the metrics and write one line per kind; forget them.
    pub(super) fn flush(&mut self) {
        for change in Change::ALL {
            let ids = &mut self.changed[change as usize];
            let Some(&first) = ids.first() else { continue };
            match change {
                Change::AtRisk => metrics::leases_fell_at_risk(ids.len()),
                Change::Expired | Change::Late => metrics::leases_lost("expired", ids.len()),
                Change::Gone => metrics::leases_lost("gone", ids.len()),
            }
            tracing::warn!(count = ids.len(), first = %LeaseId(first), "{}", change.what());
            for &id in ids.iter() {
                tracing::debug!(lease = %LeaseId(id), ?change, "lease changed");
            }
            ids.clear();
            // A collapse's worth of ids is not kept for the quiet turns after it.
            ids.shrink_to(1024);
        }
    }

    /// How many leases of this kind wait for the next flush.
    #[cfg(test)]
    fn pending(&self, change: Change) -> usize {
        self.changed[change as usize].len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_forgets_every_kind_and_keeps_little_room() {
        let mut report = Report::default();
        report.extend(Change::AtRisk, 0..100_000);
        report.add(Change::Gone, 7);
        report.add(Change::Late, 8);
        report.add(Change::Expired, 9);
        assert_eq!(report.pending(Change::AtRisk), 100_000);
        assert_eq!(report.pending(Change::Gone), 1);
        report.flush();
        for change in Change::ALL {
            assert_eq!(report.pending(change), 0, "{change:?}");
        }
        assert!(report.changed[Change::AtRisk as usize].capacity() < 100_000);
    }

    #[test]
    fn lease_ids_print_as_etcd_prints_them() {
        assert_eq!(
            LeaseId(0x5df2_a248_0c00_8e9c).to_string(),
            "5df2a2480c008e9c"
        );
    }
}
