//! What the checkers found: each violation with the property it breaks and the smallest piece
//! of history that shows it, and how much was checked (a pass over nothing is no pass).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// The property a violation breaks: one per check, named as etcd's robustness suite and the
/// research notes (b.3 to b.5) name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Property {
    /// The recorded operations are not what the harness promises (ids, sequential processes,
    /// unique values, a response of the request's kind): every other verdict would be moot.
    HistoryWellFormed,
    /// The ground truth contradicts itself (revision order, create revision, version).
    TruthWellFormed,
    /// A write acknowledged as applied is not in the ground truth.
    LostWrite,
    /// A unique value appears more than once in the ground truth: a write was re-sent.
    DuplicateWrite,
    /// An acknowledged write is in the truth, but not at the revision (or key, lease) reported.
    WriteRevision,
    /// A write reported as not applied (`Fail`, or `succeeded = false`) is in the truth.
    FailedWriteApplied,
    /// A write that started after another returned got a lower revision.
    WriteRealTime,
    /// A delete's `deleted` count disagrees with the truth at its revision.
    DeleteRevision,
    /// One key's operations have no linearization (Wing & Gong / Lowe search).
    Linearizability,
    /// The linearizability search ran out of its time or state budget: not a pass.
    LinearizabilityTimeout,
    /// A linearizable read's revision is below one of an operation that completed before it.
    StaleRead,
    /// A linearizable read's value is not the truth's at the revision it reports.
    ReadValue,
    /// A serializable read's value is not the truth's at the revision it reports.
    SerializableRead,
    /// A cache read `AtLeast(token)` reported a revision below its token, or a value that is
    /// not the truth's at the revision it reports.
    CacheAtLeast,
    /// A read of one client reported a revision below one an earlier operation of the same
    /// client had already returned (the client's monotonic guard let an older member answer).
    MonotonicRead,
    /// A truth delete of a KV key that no delete of the workload explains: a delete applied
    /// twice (resent), or by nobody.
    DeleteUnexplained,
    /// A watch delivered an event with a lower revision than one before it.
    WatchOrdered,
    /// A watch delivered one (revision, key) twice.
    WatchUnique,
    /// A watch split one revision's events across deliveries.
    WatchAtomic,
    /// A watch skipped a truth event, or delivered one the truth does not have.
    WatchReliable,
    /// A watch started from a revision did not start with the first truth event at or above it.
    WatchResumable,
    /// A progress notification came before the events it vouches for, or went backwards.
    WatchBookmarkable,
    /// A watch's previous value is not the truth's.
    WatchPrevKv,
    /// A watch event's create revision or version is not the truth's.
    WatchIsCreate,
    /// A compacted or reloaded watch broke its contract (delivery after the end, reload state).
    WatchCompaction,
    /// A watch said `Compacted` although no compaction passed the revision it had reached.
    WatchFalseCompaction,
    /// A watch that was running ended with an error other than a true compaction.
    WatchEnded,
    /// A watch from "now" delivered an event written before it was asked for.
    WatchFromNow,
    /// A watch still open at the end of the run had not delivered every event up to the
    /// run's last write under its prefix (the end marker) when the run gave up waiting.
    WatchLive,
    /// A lease holder believed its lease alive after the server had dropped its keys.
    LeaseBelief,
    /// `lost()` fired late (or never) for a lease the server dropped.
    LeaseLost,
    /// Two holds of one name overlap in belief.
    HoldOverlap,
    /// A fenced write applied while its holder's key did not own the name.
    FencedWrite,
    /// A hold was acquired with a key the truth does not show alive.
    HoldAcquire,
    /// A campaign or lock given up in flight left its key behind while its session lived on.
    OrphanKey,
}

/// One broken property, with the few operations and events that show it.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    /// The property broken.
    pub property: Property,
    /// The smallest violating piece of history, one record a line.
    pub detail: String,
}

/// How much each checker judged.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Operations checked, by kind and outcome ("put ok", "get unknown", ...).
    pub ops: BTreeMap<String, usize>,
    /// Writes with an `Unknown` outcome.
    pub unknown_writes: usize,
    /// Of those, how many the truth shows applied.
    pub unknown_applied: usize,
    /// Ground-truth events.
    pub truth_events: usize,
    /// Keys (partitions) given to the linearizability search.
    pub linearizable_keys: usize,
    /// Operations given to it, over all keys.
    pub linearizable_ops: usize,
    /// Wall time of the linearizability check (partitioning and search, all keys).
    pub search_time: Duration,
    /// States the search memoized, over all keys.
    pub states_explored: u64,
    /// Reads judged against the truth at their revision.
    pub reads_checked: usize,
    /// Managed watches judged (one per `WatchLog`: every watch made, failed creations too).
    pub watches: usize,
    /// Events those watches delivered, all told.
    pub watch_events: usize,
    /// Leases judged.
    pub leases: usize,
    /// Leases a key of which the server dropped on its own (no workload delete or revoke
    /// explains it): those whose holder's belief and `lost()` were judged.
    pub lease_keys_dropped: usize,
    /// Of those, dropped by a thawed leader's stale revoke: etcd's bug, not judged (see
    /// `lease::STALE_LEADER_REVOKE`).
    pub stale_leader_revokes: usize,
    /// Election, mutex and leadership holds judged.
    pub holds: usize,
    /// Fenced puts judged against their hold's ownership of the name.
    pub fenced_puts: usize,
    /// Serializable reads judged against their client's earlier answers.
    pub monotonic_reads: usize,
    /// Truth deletes of KV keys matched to a workload delete.
    pub deletes_explained: usize,
    /// Watches "from now" (start revision 0) judged for replaying older writes.
    pub from_now_watches: usize,
    /// Watches still open at the end judged for liveness (made before the end marker was
    /// written, and not already past it).
    pub live_watches: usize,
    /// Watches ended by `Compacted`, each judged for whether the compaction was true.
    pub compacted_watches: usize,
    /// Campaigns and locks given up in flight whose key reached the server at all.
    pub abandoned_put: usize,
    /// Campaigns and locks given up in flight that were judged (no fault while the session
    /// idled).
    pub abandoned_judged: usize,
}

/// At most this many violations of one property are printed: the first ones are the story,
/// the rest would drown it (they are still counted).
const SHOWN_PER_PROPERTY: usize = 10;

/// The verdict on one history.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The seed of the history judged.
    pub seed: u64,
    /// The violations shown, in the order found: the first few of each property.
    pub violations: Vec<Violation>,
    /// Violations beyond the first few of each property (those are shown), counted by property.
    pub suppressed: BTreeMap<Property, usize>,
    /// How much each checker judged (a pass over nothing is no pass).
    pub stats: Stats,
}

impl Report {
    /// No property was broken.
    pub fn is_ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// Whether `property` was reported.
    pub fn has(&self, property: Property) -> bool {
        self.violations.iter().any(|v| v.property == property)
    }

    /// Records a violation.
    pub fn violation(&mut self, property: Property, detail: impl Into<String>) {
        let shown = self
            .violations
            .iter()
            .filter(|v| v.property == property)
            .count();
        if shown >= SHOWN_PER_PROPERTY {
            *self.suppressed.entry(property).or_default() += 1;
            return;
        }
        let detail = detail.into();
        self.violations.push(Violation { property, detail });
    }

    /// Counts one checked operation of `kind`.
    pub fn count_op(&mut self, kind: &str) {
        *self.stats.ops.entry(kind.to_string()).or_default() += 1;
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.stats;
        let total = self.violations.len() + self.suppressed.values().sum::<usize>();
        writeln!(f, "seed {}: {} violation(s)", self.seed, total)?;
        let ops: Vec<String> = s.ops.iter().map(|(k, n)| format!("{k} {n}")).collect();
        writeln!(f, "  ops: {}", ops.join(", "))?;
        writeln!(
            f,
            "  unknown writes {} (applied {}), truth events {}, reads judged {}",
            s.unknown_writes, s.unknown_applied, s.truth_events, s.reads_checked
        )?;
        writeln!(
            f,
            "  linearizability: {} keys, {} ops, {:?}, {} states",
            s.linearizable_keys, s.linearizable_ops, s.search_time, s.states_explored
        )?;
        writeln!(
            f,
            "  watches {} ({} events), leases {} ({} keys dropped by the server, {} of them by a \
             thawed leader's stale revoke: etcd's bug 15247), holds {} ({} fenced puts)",
            s.watches,
            s.watch_events,
            s.leases,
            s.lease_keys_dropped,
            s.stale_leader_revokes,
            s.holds,
            s.fenced_puts
        )?;
        writeln!(
            f,
            "  monotonic reads {}, deletes explained {}, watches from now {}, open to the end {}, \
             compacted {}, given-up campaigns whose key was put {}, judged {}",
            s.monotonic_reads,
            s.deletes_explained,
            s.from_now_watches,
            s.live_watches,
            s.compacted_watches,
            s.abandoned_put,
            s.abandoned_judged
        )?;
        for v in &self.violations {
            writeln!(f, "VIOLATION {:?}:", v.property)?;
            for line in v.detail.lines() {
                writeln!(f, "    {line}")?;
            }
        }
        for (property, n) in &self.suppressed {
            writeln!(f, "VIOLATION {property:?}: {n} more not shown")?;
        }
        Ok(())
    }
}
