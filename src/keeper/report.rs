//! The keeper's lost, at-risk and recovered leases, logged one line per kind at most once a
//! second.
//!
//! A fall behind at 250,000 leases puts tens of thousands at risk, or loses them, within a
//! second. A line per lease wrote 295 MB of logs in one benchmark run, and one line per kind
//! and turn of the task still 300 MB (a turn takes a burst of answers), time the task needed
//! to catch up. So a kind's first change after a quiet second is written at once, the ones
//! after it are counted and written together a second later (how many, and the first lease's
//! id), and each lease's id only at `debug`.

use std::time::Duration;

use tokio::time::Instant;

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
    /// Renewed again after being at risk.
    Recovered,
    /// Its local expiry passed without a renewal.
    Expired,
    /// The server says it expired or was revoked.
    Gone,
    /// Renewed, but only after its local expiry.
    Late,
}

impl Change {
    const ALL: [Change; 5] = [
        Change::AtRisk,
        Change::Recovered,
        Change::Expired,
        Change::Gone,
        Change::Late,
    ];

    fn what(self) -> &'static str {
        match self {
            Change::AtRisk => {
                "leases at risk: their renewals have fallen behind (a third of the TTL left)"
            }
            Change::Recovered => "leases renewed again after being at risk",
            Change::Expired => "leases lost: their local expiry passed without a renewal",
            Change::Gone => "leases lost: the server says they expired or were revoked",
            Change::Late => "leases lost: renewed only after their local expiry",
        }
    }

    fn count_in_metrics(self, count: usize) {
        match self {
            Change::AtRisk => metrics::leases_fell_at_risk(count),
            Change::Recovered => {}
            Change::Expired | Change::Late => metrics::leases_lost("expired", count),
            Change::Gone => metrics::leases_lost("gone", count),
        }
    }
}

/// Changes of one kind not yet written.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    count: usize,
    first: i64,
}

/// The leases changed since the last line, by kind.
#[derive(Debug, Default)]
pub(super) struct Report {
    pending: [Tally; 5],
    /// When the next line may be written (`None`: at once).
    next_line: Option<Instant>,
}

/// At most one line per kind this often.
const LINE_EVERY: Duration = Duration::from_secs(1);

impl Report {
    /// Note one lease (counted in the metrics at once).
    pub(super) fn add(&mut self, change: Change, id: i64) {
        change.count_in_metrics(1);
        self.note(change, id);
    }

    /// Note several leases.
    pub(super) fn extend(&mut self, change: Change, ids: Vec<i64>) {
        if ids.is_empty() {
            return;
        }
        change.count_in_metrics(ids.len());
        for id in ids {
            self.note(change, id);
        }
    }

    fn note(&mut self, change: Change, id: i64) {
        tracing::debug!(lease = %LeaseId(id), ?change, "lease changed");
        let tally = &mut self.pending[change as usize];
        if tally.count == 0 {
            tally.first = id;
        }
        tally.count += 1;
    }

    /// Write what is pending, unless a line was written less than a second ago.
    pub(super) fn flush(&mut self, now: Instant) {
        if self.next_line.is_some_and(|at| now < at) || self.pending.iter().all(|t| t.count == 0) {
            return;
        }
        for change in Change::ALL {
            let tally = std::mem::take(&mut self.pending[change as usize]);
            if tally.count == 0 {
                continue;
            }
            let (count, first) = (tally.count, LeaseId(tally.first));
            if change == Change::Recovered {
                tracing::info!(count, %first, "{}", change.what());
            } else {
                tracing::warn!(count, %first, "{}", change.what());
            }
        }
        self.next_line = Some(now + LINE_EVERY);
    }

    /// Write what is pending now, however recent the last line: the task is stopping.
    pub(super) fn flush_all(&mut self, now: Instant) {
        self.next_line = None;
        self.flush(now);
    }

    /// How many leases of this kind wait for a line.
    #[cfg(test)]
    fn pending(&self, change: Change) -> usize {
        self.pending[change as usize].count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_per_kind_at_most_once_a_second() {
        let start = Instant::now();
        let mut report = Report::default();
        report.add(Change::Gone, 7);
        // The first change after a quiet second is written at once.
        report.flush(start);
        assert_eq!(report.pending(Change::Gone), 0);
        // Those within the second after it wait, counted.
        report.extend(Change::AtRisk, (0..100_000).collect());
        report.add(Change::Late, 8);
        report.flush(start + Duration::from_millis(999));
        assert_eq!(report.pending(Change::AtRisk), 100_000);
        assert_eq!(report.pending(Change::Late), 1);
        report.add(Change::Recovered, 9);
        report.flush(start + LINE_EVERY);
        for change in Change::ALL {
            assert_eq!(report.pending(change), 0, "{change:?}");
        }
        // And a quiet report writes nothing and starts no new second.
        report.flush(start + 3 * LINE_EVERY);
        assert_eq!(report.next_line, Some(start + 2 * LINE_EVERY));
        // A stopping task writes what is pending at once.
        report.add(Change::Expired, 10);
        report.flush(start + 2 * LINE_EVERY + Duration::from_millis(1));
        report.add(Change::Expired, 11);
        report.flush(start + 2 * LINE_EVERY + Duration::from_millis(2));
        assert_eq!(report.pending(Change::Expired), 1);
        report.flush_all(start + 2 * LINE_EVERY + Duration::from_millis(3));
        assert_eq!(report.pending(Change::Expired), 0);
    }

    #[test]
    fn lease_ids_print_as_etcd_prints_them() {
        assert_eq!(
            LeaseId(0x5df2_a248_0c00_8e9c).to_string(),
            "5df2a2480c008e9c"
        );
    }
}
