//! One STM attempt's bookkeeping: what it read (and at which revision), what it will write, and the commit txn that checks the reads (no IO).

use std::collections::BTreeMap;

use crate::kv::{DeleteOptions, GetOptions, PutOptions};
use crate::proto::etcdserverpb::{RangeResponse, TxnResponse, response_op};
use crate::txn::{Compare, CompareOp, Txn, TxnOp};

/// How much of the world an STM transaction may see change under it. Weakest to strongest:
/// [`ReadCommitted`](Self::ReadCommitted), [`RepeatableRead`](Self::RepeatableRead),
/// [`Serializable`](Self::Serializable), [`SerializableSnapshot`](Self::SerializableSnapshot)
/// (the default, as in etcd's Go client).
///
/// ```
/// use etcd_ha::concurrency::stm::Isolation;
/// assert_eq!(Isolation::default(), Isolation::SerializableSnapshot);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Isolation {
    /// Every read is of the snapshot at the revision of the transaction's first read, and the
    /// commit fails (and the transaction runs again) if any key it read *or wrote* changed
    /// after that revision. Transactions behave as if they ran one at a time, at the snapshot.
    #[default]
    SerializableSnapshot,
    /// Reads are of the snapshot at the revision of the first read; the commit fails if any key
    /// read changed since. Keys only written are not checked.
    Serializable,
    /// Each key is read at the newest revision when the transaction first reads it (later
    /// reads of it return the same value); the commit fails if any key read changed since.
    RepeatableRead,
    /// Reads are of the newest revision and nothing is checked at commit: the writes are
    /// applied whatever happened in between (no retry, ever).
    ReadCommitted,
}

/// What one read saw of a key.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Read {
    /// The value; `None` when the key did not exist.
    pub(crate) value: Option<Vec<u8>>,
    /// Its mod revision; 0 when the key did not exist.
    pub(crate) mod_revision: i64,
}

impl Read {
    fn of(resp: &RangeResponse) -> Read {
        match resp.kvs.first() {
            Some(kv) => Read {
                value: Some(kv.value.clone()),
                mod_revision: kv.mod_revision,
            },
            None => Read {
                value: None,
                mod_revision: 0,
            },
        }
    }
}

/// One attempt's reads and writes.
#[derive(Debug)]
pub(crate) struct State {
    isolation: Isolation,
    /// Every key read, in key order (the order of the prefetching gets at commit).
    reads: BTreeMap<Vec<u8>, Read>,
    /// The snapshot revision (serializable isolations): the first read's; reads after it are
    /// made at this revision.
    snapshot: Option<i64>,
    /// Buffered writes in key order: `Some(value)` a put, `None` a delete.
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// A snapshot read failed because its revision was compacted: the attempt conflicts (it
    /// runs again from a fresh snapshot) whatever the closure does with the error.
    pub(crate) compacted: bool,
}

impl State {
    pub(crate) fn new(isolation: Isolation) -> State {
        State {
            isolation,
            reads: BTreeMap::new(),
            snapshot: None,
            writes: BTreeMap::new(),
            compacted: false,
        }
    }

    fn serializable(&self) -> bool {
        matches!(
            self.isolation,
            Isolation::Serializable | Isolation::SerializableSnapshot
        )
    }

    /// What a read of `key` returns without asking etcd: the attempt's own write, else an
    /// earlier read. `Some(None)` means "absent (or deleted by this attempt)".
    pub(crate) fn cached(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        if let Some(write) = self.writes.get(key) {
            return Some(write.clone());
        }
        self.reads.get(key).map(|r| r.value.clone())
    }

    /// The mod revision of `key` as read (`None`: not read yet).
    pub(crate) fn cached_revision(&self, key: &[u8]) -> Option<i64> {
        self.reads.get(key).map(|r| r.mod_revision)
    }

    /// How to read a key not read yet: at the snapshot revision once there is one. Always
    /// linearizable: a serializable read at the snapshot could meet a member that has not
    /// applied it yet ("future revision").
    pub(crate) fn read_options(&self) -> GetOptions {
        match self.snapshot {
            Some(revision) => GetOptions::new().with_revision(revision),
            None => GetOptions::new(),
        }
    }

    /// Remember what a read of `key` answered; returns what the read saw (an earlier read of
    /// the same key, made concurrently, wins: reads stay repeatable).
    pub(crate) fn record(&mut self, key: Vec<u8>, resp: &RangeResponse) -> Read {
        if self.serializable() && self.snapshot.is_none() {
            self.snapshot = resp.header.as_ref().map(|h| h.revision);
        }
        self.reads
            .entry(key)
            .or_insert_with(|| Read::of(resp))
            .clone()
    }

    pub(crate) fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.writes.insert(key, Some(value));
    }

    pub(crate) fn delete(&mut self, key: Vec<u8>) {
        self.writes.insert(key, None);
    }

    /// The commit: if what was read is still what etcd holds (as the isolation defines it),
    /// apply the writes; else read every key read again (the next attempt starts from those
    /// answers instead of reading them one by one).
    pub(crate) fn commit(&self) -> Txn {
        let mut compares = Vec::new();
        if self.isolation != Isolation::ReadCommitted {
            compares.extend(self.reads.iter().map(|(key, read)| {
                Compare::mod_revision(key.clone(), CompareOp::Equal, read.mod_revision)
            }));
        }
        if let (Isolation::SerializableSnapshot, Some(snapshot)) = (self.isolation, self.snapshot) {
            compares.extend(self.writes.keys().map(|key| {
                Compare::mod_revision(key.clone(), CompareOp::Less, snapshot.saturating_add(1))
            }));
        }
        let writes = self.writes.iter().map(|(key, write)| match write {
            Some(value) => TxnOp::put(key.clone(), value.clone(), PutOptions::new()),
            None => TxnOp::delete(key.clone(), DeleteOptions::new()),
        });
        let rereads = self
            .reads
            .keys()
            .map(|key| TxnOp::get(key.clone(), GetOptions::new()));
        Txn::new().when(compares).and_then(writes).or_else(rereads)
    }

    /// The state the next attempt starts from after `failed` (the commit's answer when its
    /// compares failed): the keys read, as the failure branch read them again, with the
    /// commit's revision as the snapshot.
    pub(crate) fn after_conflict(&self, failed: &TxnResponse) -> State {
        let mut next = State::new(self.isolation);
        let answers = failed.responses.iter().map(|op| match &op.response {
            Some(response_op::Response::ResponseRange(r)) => Some(r),
            _ => None,
        });
        let all: Option<Vec<&RangeResponse>> = answers.collect();
        // Only a complete set of answers (one per key read, in key order) is a consistent
        // prefetch; anything else starts from scratch.
        match all {
            Some(answers) if answers.len() == self.reads.len() && !answers.is_empty() => {
                if self.serializable() {
                    next.snapshot = failed.header.as_ref().map(|h| h.revision);
                }
                for (key, resp) in self.reads.keys().zip(answers) {
                    next.reads.insert(key.clone(), Read::of(resp));
                }
            }
            _ => {}
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::etcdserverpb::{
        ResponseHeader, ResponseOp, TxnRequest, compare::CompareResult, compare::TargetUnion,
        request_op,
    };
    use crate::proto::mvccpb::KeyValue;

    fn answer(revision: i64, kv: Option<(&str, &str, i64)>) -> RangeResponse {
        RangeResponse {
            header: Some(ResponseHeader {
                revision,
                ..Default::default()
            }),
            kvs: kv
                .map(|(k, v, m)| KeyValue {
                    key: k.into(),
                    value: v.into(),
                    mod_revision: m,
                    ..Default::default()
                })
                .into_iter()
                .collect(),
            count: kv.is_some() as i64,
            more: false,
        }
    }

    /// (key, result, mod revision operand) of each compare.
    fn compares(txn: &TxnRequest) -> Vec<(String, CompareResult, i64)> {
        txn.compare
            .iter()
            .map(|c| {
                let Some(TargetUnion::ModRevision(rev)) = c.target_union else {
                    panic!("{c:?}")
                };
                (String::from_utf8(c.key.clone()).unwrap(), c.result(), rev)
            })
            .collect()
    }

    fn state_with_reads(isolation: Isolation) -> State {
        let mut s = State::new(isolation);
        s.record(b"a".to_vec(), &answer(10, Some(("a", "1", 7))));
        s.record(b"b".to_vec(), &answer(12, None));
        s.put(b"a".to_vec(), b"2".to_vec());
        s.delete(b"c".to_vec());
        s
    }

    #[test]
    fn reads_see_the_attempts_own_writes_then_its_earlier_reads() {
        let s = state_with_reads(Isolation::RepeatableRead);
        assert_eq!(s.cached(b"a"), Some(Some(b"2".to_vec())), "own put");
        assert_eq!(s.cached(b"c"), Some(None), "own delete");
        assert_eq!(s.cached(b"b"), Some(None), "read as absent");
        assert_eq!(s.cached(b"d"), None, "never read");
        assert_eq!(s.cached_revision(b"a"), Some(7));
    }

    #[test]
    fn serializable_reads_after_the_first_are_at_its_revision() {
        let s = state_with_reads(Isolation::SerializableSnapshot);
        assert_eq!(s.snapshot, Some(10));
        assert_eq!(s.read_options().into_request(b"x".to_vec()).revision, 10);
        let s = state_with_reads(Isolation::RepeatableRead);
        assert_eq!(s.read_options().into_request(b"x".to_vec()).revision, 0);
    }

    #[test]
    fn a_second_read_of_a_key_keeps_the_first_answer() {
        let mut s = State::new(Isolation::RepeatableRead);
        s.record(b"a".to_vec(), &answer(10, Some(("a", "1", 7))));
        let again = s.record(b"a".to_vec(), &answer(11, Some(("a", "9", 11))));
        assert_eq!(again.value, Some(b"1".to_vec()));
    }

    #[test]
    fn the_commit_checks_what_the_isolation_promises() {
        use CompareResult::{Equal, Less};
        let snapshot = state_with_reads(Isolation::SerializableSnapshot)
            .commit()
            .into_request();
        assert_eq!(
            compares(&snapshot),
            [
                ("a".into(), Equal, 7),
                ("b".into(), Equal, 0),
                ("a".into(), Less, 11),
                ("c".into(), Less, 11)
            ]
        );
        for isolation in [Isolation::Serializable, Isolation::RepeatableRead] {
            let txn = state_with_reads(isolation).commit().into_request();
            assert_eq!(
                compares(&txn),
                [("a".into(), Equal, 7), ("b".into(), Equal, 0)]
            );
        }
        let committed = state_with_reads(Isolation::ReadCommitted)
            .commit()
            .into_request();
        assert!(committed.compare.is_empty());
        // The writes, and the reads again on failure, in key order.
        let ops: Vec<_> = snapshot
            .success
            .iter()
            .map(|op| match &op.request {
                Some(request_op::Request::RequestPut(p)) => {
                    format!("put {}", String::from_utf8_lossy(&p.key))
                }
                Some(request_op::Request::RequestDeleteRange(d)) => {
                    format!("del {}", String::from_utf8_lossy(&d.key))
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(ops, ["put a", "del c"]);
        assert_eq!(snapshot.failure.len(), 2);
    }

    #[test]
    fn a_conflict_prefetches_the_reads_for_the_next_attempt() {
        let s = state_with_reads(Isolation::SerializableSnapshot);
        let range = |r: RangeResponse| ResponseOp {
            response: Some(response_op::Response::ResponseRange(r)),
        };
        let failed = TxnResponse {
            header: Some(ResponseHeader {
                revision: 20,
                ..Default::default()
            }),
            succeeded: false,
            responses: vec![
                range(answer(20, Some(("a", "5", 15)))),
                range(answer(20, Some(("b", "new", 19)))),
            ],
        };
        let next = s.after_conflict(&failed);
        assert_eq!(next.snapshot, Some(20));
        assert_eq!(next.cached(b"a"), Some(Some(b"5".to_vec())));
        assert_eq!(next.cached_revision(b"b"), Some(19));
        assert!(
            next.writes.is_empty(),
            "writes are the closure's to make again"
        );
        // An incomplete answer is no prefetch.
        let partial = TxnResponse {
            responses: failed.responses[..1].to_vec(),
            ..failed
        };
        let next = s.after_conflict(&partial);
        assert_eq!((next.snapshot, next.reads.len()), (None, 0));
    }
}
