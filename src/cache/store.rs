//! What a [`Cache`](super::Cache) holds: the keys of its range at one revision, kept within
//! its limits, and the rule that says whether that state is fresh enough for a read.
//!
//! Pure: the task (`task.rs`) feeds it snapshots and watch batches, readers borrow it under a
//! read lock; nothing here waits or does IO.
//!
//! # Freshness
//!
//! A read that must see revision `R` (obtained from a quorum read after the read began) is
//! served when the store holds every event of its range up to `R`. Two proofs give that:
//!
//! - **The store's revision is at least `R`**: events and sound progress answers move it.
//! - **The range did not change since the store's revision `C`** (for members whose progress
//!   answers prove nothing, see `watch/progress.rs`): a quorum read at `R` of the range's key
//!   count and its newest mod revision `M`. If `M <= C` every key present at `R` was last
//!   written at or before `C` and not touched since, so it is in the store with the same value;
//!   if the counts are also equal, the store holds exactly the range at `R`.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use super::check::Digest;
use crate::error::{Error, Result};
use crate::proto::mvccpb::{Event, KeyValue, event::EventType};

/// Bytes a key costs beyond its key and value: the map's node share, the `Arc`, the
/// `KeyValue`'s own fields. An estimate; the limit it serves is a bound, not an account.
pub(crate) const OVERHEAD: usize = 96;

/// A quorum read's proof of what a fresh store holds (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Proof {
    /// The cluster's revision: the store must reach it.
    Revision(i64),
    /// The cluster's revision, the range's key count and its newest mod revision then (0 for
    /// an empty range): the store is fresh once it reaches `revision`, or once it reaches
    /// `newest` holding `count` keys.
    Unchanged {
        /// The cluster's revision when the range was read.
        revision: i64,
        /// Keys in the range at `revision`.
        count: usize,
        /// The newest mod revision among them.
        newest: i64,
    },
}

impl Proof {
    /// The cluster revision the proof was read at.
    pub(crate) fn revision(&self) -> i64 {
        match *self {
            Proof::Revision(revision) | Proof::Unchanged { revision, .. } => revision,
        }
    }
}

/// The limits of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Most keys.
    pub(crate) keys: usize,
    /// Most bytes (keys, values and [`OVERHEAD`] per key).
    pub(crate) bytes: usize,
}

/// The keys of the range at one revision.
#[derive(Debug)]
pub(crate) struct Store {
    kvs: BTreeMap<Vec<u8>, Arc<KeyValue>>,
    bytes: usize,
    /// Every event of the range up to this revision is in `kvs`.
    revision: i64,
    limits: Limits,
}

fn cost(kv: &KeyValue) -> usize {
    kv.key.len() + kv.value.len() + OVERHEAD
}

impl Store {
    /// An empty store at revision 0.
    pub(crate) fn new(limits: Limits) -> Self {
        Store {
            kvs: BTreeMap::new(),
            bytes: 0,
            revision: 0,
            limits,
        }
    }

    /// A store of `kvs` (the whole range) read at `revision`, or the limit they exceed.
    pub(crate) fn loaded(limits: Limits, kvs: Vec<KeyValue>, revision: i64) -> Result<Self> {
        let mut store = Store::new(limits);
        for kv in kvs {
            store.insert(kv)?;
        }
        store.revision = revision;
        Ok(store)
    }

    /// Every event up to this revision is applied.
    pub(crate) fn revision(&self) -> i64 {
        self.revision
    }

    /// Keys held.
    pub(crate) fn len(&self) -> usize {
        self.kvs.len()
    }

    /// Bytes held, by the estimate the limit uses.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Apply one batch of events (whole revisions, oldest first) up to `revision`; the events
    /// come back with the previous values the store held (`prev_kv`: exact, since the store
    /// holds the whole range), for the history. On a limit the store is left part-way and
    /// must not serve again.
    pub(crate) fn apply(&mut self, events: Vec<Event>, revision: i64) -> Result<Vec<Event>> {
        let mut applied = Vec::with_capacity(events.len());
        for mut event in events {
            let Some(kv) = &event.kv else { continue };
            let before = if event.r#type == EventType::Delete as i32 {
                let old = self.kvs.remove(&kv.key);
                if let Some(old) = &old {
                    self.bytes -= cost(old);
                }
                old
            } else {
                let old = self.kvs.get(&kv.key).cloned();
                self.insert(kv.clone())?;
                old
            };
            event.prev_kv = before.map(Arc::unwrap_or_clone);
            applied.push(event);
        }
        self.advance(revision);
        Ok(applied)
    }

    /// Nothing else happened in the range up to `revision` (a sound progress answer).
    pub(crate) fn advance(&mut self, revision: i64) {
        self.revision = self.revision.max(revision);
    }

    /// Add or replace one key (a loaded page's, or a put event's).
    pub(crate) fn insert(&mut self, kv: KeyValue) -> Result<()> {
        let added = cost(&kv);
        let old = self.kvs.get(&kv.key).map_or(0, |old| cost(old));
        let bytes = self.bytes - old + added;
        if old == 0 && self.kvs.len() >= self.limits.keys {
            return Err(Error::CacheLimit {
                what: "keys",
                limit: self.limits.keys,
            });
        }
        if bytes > self.limits.bytes {
            return Err(Error::CacheLimit {
                what: "bytes",
                limit: self.limits.bytes,
            });
        }
        self.bytes = bytes;
        self.kvs.insert(kv.key.clone(), Arc::new(kv));
        Ok(())
    }

    /// Whether the store is fresh by `proof` (see the module docs).
    pub(crate) fn is_fresh(&self, proof: &Proof) -> bool {
        match *proof {
            Proof::Revision(revision) => self.revision >= revision,
            Proof::Unchanged {
                revision,
                count,
                newest,
            } => self.revision >= revision || (self.revision >= newest && self.kvs.len() == count),
        }
    }

    /// Whether the store is fresh by `proof`; if it is, it holds the range as of the proof's
    /// revision too (nothing in the range changed up to it), so its revision moves up to
    /// that: a reader told the store's revision then never sees one below the quorum read's,
    /// which other keys' answers may already have returned.
    pub(crate) fn prove(&mut self, proof: &Proof) -> bool {
        let fresh = self.is_fresh(proof);
        if fresh {
            self.advance(proof.revision());
        }
        fresh
    }

    /// The digest of every key with its mod revision, in key order (for the inconsistency
    /// detector, `check.rs`).
    pub(crate) fn digest(&self) -> Digest {
        let mut d = Digest::default();
        for kv in self.kvs.values() {
            d.add(&kv.key, kv.mod_revision);
        }
        d
    }

    /// Drop `key` without an event: a divergence, for the detector's tests.
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn forget(&mut self, key: &[u8]) -> bool {
        match self.kvs.remove(key) {
            Some(old) => {
                self.bytes -= cost(&old);
                true
            }
            None => false,
        }
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Arc<KeyValue>> {
        self.kvs.get(key).cloned()
    }

    /// The keys from `start` to `end` (exclusive; `None`: to the end of the store), in key
    /// order.
    pub(crate) fn range(&self, start: &[u8], end: Option<&[u8]>) -> Vec<Arc<KeyValue>> {
        let upper = match end {
            Some(end) if end <= start => return Vec::new(),
            Some(end) => Bound::Excluded(end),
            None => Bound::Unbounded,
        };
        self.kvs
            .range::<[u8], _>((Bound::Included(start), upper))
            .map(|(_, kv)| kv.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str, mod_revision: i64) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: value.into(),
            mod_revision,
            ..Default::default()
        }
    }

    fn put(key: &str, value: &str, revision: i64) -> Event {
        Event {
            r#type: EventType::Put as i32,
            kv: Some(kv(key, value, revision)),
            prev_kv: None,
        }
    }

    fn delete(key: &str, revision: i64) -> Event {
        Event {
            r#type: EventType::Delete as i32,
            kv: Some(kv(key, "", revision)),
            prev_kv: None,
        }
    }

    const ROOMY: Limits = Limits {
        keys: 100,
        bytes: 1 << 20,
    };

    #[test]
    fn events_put_and_delete_keys_and_move_the_revision() {
        let mut s = Store::loaded(ROOMY, vec![kv("a", "1", 2), kv("b", "2", 3)], 5).unwrap();
        let applied = s.apply(vec![put("c", "3", 6), delete("a", 6)], 6).unwrap();
        // The previous values come back with the events.
        let prev: Vec<_> = applied.iter().map(|e| e.prev_kv.clone()).collect();
        assert_eq!(prev, vec![None, Some(kv("a", "1", 2))]);
        assert_eq!(s.revision(), 6);
        assert_eq!(s.len(), 2);
        assert!(s.get(b"a").is_none());
        assert_eq!(s.get(b"c").unwrap().value, b"3");
        let applied = s.apply(vec![put("c", "4", 7)], 7).unwrap();
        assert_eq!(applied[0].prev_kv, Some(kv("c", "3", 6)));
        let keys: Vec<_> = s.range(b"b", None).iter().map(|k| k.key.clone()).collect();
        assert_eq!(keys, vec![b"b".to_vec(), b"c".to_vec()]);
        assert!(s.range(b"b", Some(b"c")).len() == 1);
        assert!(s.range(b"c", Some(b"b")).is_empty());
        // Deleting an absent key (a delete of a key never cached) changes nothing.
        s.apply(vec![delete("zz", 8)], 8).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s.bytes(), 2 * (2 + OVERHEAD));
        // Progress moves the revision forward only.
        s.advance(4);
        assert_eq!(s.revision(), 8);
    }

    #[test]
    fn limits_are_typed_errors() {
        let two = Limits {
            keys: 2,
            bytes: 1 << 20,
        };
        let err = Store::loaded(two, vec![kv("a", "", 1), kv("b", "", 1), kv("c", "", 1)], 1);
        assert!(matches!(
            err,
            Err(Error::CacheLimit {
                what: "keys",
                limit: 2
            })
        ));
        let mut s = Store::loaded(two, vec![kv("a", "", 1), kv("b", "", 1)], 1).unwrap();
        // Overwriting a key adds no key.
        s.apply(vec![put("a", "x", 2)], 2).unwrap();
        let small = Limits {
            keys: 10,
            bytes: OVERHEAD + 10,
        };
        let mut s = Store::loaded(small, vec![kv("a", "123456789", 1)], 1).unwrap();
        assert!(matches!(
            s.apply(vec![put("a", "1234567890", 2)], 2),
            Err(Error::CacheLimit { what: "bytes", .. })
        ));
    }

    #[test]
    fn fresh_by_revision_or_by_an_unchanged_range() {
        let s = Store::loaded(ROOMY, vec![kv("a", "1", 2), kv("b", "2", 4)], 10).unwrap();
        assert!(s.is_fresh(&Proof::Revision(10)));
        assert!(!s.is_fresh(&Proof::Revision(11)));
        // Others wrote elsewhere: the range is as the store has it.
        let unchanged = Proof::Unchanged {
            revision: 20,
            count: 2,
            newest: 4,
        };
        assert!(s.is_fresh(&unchanged));
        // A key of the range was written after the store's revision.
        let written = Proof::Unchanged {
            revision: 20,
            count: 2,
            newest: 15,
        };
        assert!(!s.is_fresh(&written));
        // A key was deleted since (the newest is unchanged, the count is not).
        let deleted = Proof::Unchanged {
            revision: 20,
            count: 1,
            newest: 4,
        };
        assert!(!s.is_fresh(&deleted));
        assert_eq!(deleted.revision(), 20);
    }

    #[test]
    fn a_store_proven_fresh_takes_the_proofs_revision() {
        let mut s = Store::loaded(ROOMY, vec![kv("a", "1", 2), kv("b", "2", 4)], 10).unwrap();
        let written = Proof::Unchanged {
            revision: 20,
            count: 2,
            newest: 15,
        };
        assert!(!s.prove(&written));
        assert_eq!(s.revision(), 10, "not proven: unchanged");
        let unchanged = Proof::Unchanged {
            revision: 20,
            count: 2,
            newest: 4,
        };
        assert!(s.prove(&unchanged));
        assert_eq!(s.revision(), 20);
        // An older proof never moves it back.
        assert!(s.prove(&Proof::Revision(12)));
        assert_eq!(s.revision(), 20);
    }
}
