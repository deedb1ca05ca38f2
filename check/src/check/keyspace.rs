//! The ground truth indexed for the checkers: where each written value appears, and the state of
//! any key (or prefix) at any revision.
//!
//! Why keys start absent: truth holds only the events above `start_revision`, so a key's state
//! before its first event is unknown. The harness writes under a fresh prefix, so "absent" is
//! right; the well-formedness check reports a key whose first event is not a creation, so a
//! reused prefix shows up as such instead of as a pile of false read violations.

use std::collections::{BTreeMap, HashMap};

use crate::history::{EventKind, History, TruthEvent};

/// The truth of one history, indexed.
pub struct Keyspace<'h> {
    pub events: &'h [TruthEvent],
    /// Indices into `events` of each key's events, in revision order.
    by_key: HashMap<&'h str, Vec<usize>>,
    /// Indices into `events` of the puts of each value.
    by_value: HashMap<&'h str, Vec<usize>>,
}

impl<'h> Keyspace<'h> {
    pub fn new(history: &'h History) -> Self {
        let mut by_key: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut by_value: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, e) in history.truth.iter().enumerate() {
            by_key.entry(&e.key).or_default().push(i);
            if let Some(v) = &e.value {
                by_value.entry(v).or_default().push(i);
            }
        }
        Keyspace {
            events: &history.truth,
            by_key,
            by_value,
        }
    }

    /// The puts that wrote `value`.
    pub fn with_value(&self, value: &str) -> Vec<&'h TruthEvent> {
        let found = self.by_value.get(value).map(Vec::as_slice).unwrap_or(&[]);
        found.iter().map(|&i| &self.events[i]).collect()
    }

    /// The indices into `events` of the puts of `value`.
    pub fn value_indices(&self, value: &str) -> &[usize] {
        self.by_value.get(value).map(Vec::as_slice).unwrap_or(&[])
    }

    /// `key`'s events in revision order.
    pub fn key_events(&self, key: &str) -> Vec<&'h TruthEvent> {
        let found = self.by_key.get(key).map(Vec::as_slice).unwrap_or(&[]);
        found.iter().map(|&i| &self.events[i]).collect()
    }

    /// The last event of `key` at or below `revision`.
    pub fn last_at(&self, key: &str, revision: i64) -> Option<&'h TruthEvent> {
        let found = self.by_key.get(key)?;
        let n = found.partition_point(|&i| self.events[i].revision <= revision);
        n.checked_sub(1).map(|j| &self.events[found[j]])
    }

    /// The put that gives `key` its value at `revision`; `None` if absent then.
    pub fn live_at(&self, key: &str, revision: i64) -> Option<&'h TruthEvent> {
        self.last_at(key, revision)
            .filter(|e| e.kind == EventKind::Put)
    }

    /// `key`'s value at `revision`.
    pub fn value_at(&self, key: &str, revision: i64) -> Option<&'h str> {
        self.live_at(key, revision).and_then(|e| e.value.as_deref())
    }

    /// Every live key under `prefix` at `revision`, with the put that set it.
    pub fn live_under(&self, prefix: &str, revision: i64) -> BTreeMap<&'h str, &'h TruthEvent> {
        let mut live = BTreeMap::new();
        for (key, _) in self.by_key.iter().filter(|(k, _)| k.starts_with(prefix)) {
            if let Some(e) = self.live_at(key, revision) {
                live.insert(*key, e);
            }
        }
        live
    }

    /// The events under `prefix`, in revision order.
    pub fn under(&self, prefix: &str) -> Vec<&'h TruthEvent> {
        self.events
            .iter()
            .filter(|e| e.key.starts_with(prefix))
            .collect()
    }

    /// The highest revision the truth reached.
    #[cfg(test)]
    pub fn last_revision(&self) -> Option<i64> {
        self.events.last().map(|e| e.revision)
    }

    /// Whether a read of `key` answering (`value`, `mod_revision`) at `revision` agrees with the
    /// truth; `Err` says what the truth had.
    pub fn judge_read(
        &self,
        key: &str,
        revision: i64,
        value: Option<&str>,
        mod_revision: i64,
    ) -> Result<(), String> {
        let live = self.live_at(key, revision);
        let truth_value = live.and_then(|e| e.value.as_deref());
        let truth_mod = live.map_or(0, |e| e.revision);
        if truth_value == value && truth_mod == mod_revision {
            return Ok(());
        }
        Err(match self.last_at(key, revision) {
            Some(e) => format!("truth at {revision}: {}", super::show::event(e)),
            None => format!("truth at {revision}: {key} absent (no event yet)"),
        })
    }
}
