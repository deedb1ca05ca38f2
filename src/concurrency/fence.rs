//! [`Fence`]: a holder's key and create revision, turned into the compare that guards its writes.

use crate::txn::{Compare, CompareOp, Txn};

/// Proof of holding a leadership or lock: the holder's key and the revision at which it was
/// created.
///
/// A key's create revision changes every time the key is deleted and created again, and grows
/// with every new holder, so "this key still has this create revision" holds exactly as long as
/// this holder holds. Put [`compare`](Fence::compare) into every write only the holder may make
/// (or let [`guard`](Fence::guard) do it): an ex-holder's write then fails atomically in etcd,
/// however late it arrives.
///
/// ```
/// use etcd_ha::concurrency::Fence;
/// use etcd_ha::{PutOptions, Txn, TxnOp};
///
/// let fence = Fence::new("jobs/leader/694d7a2c1e3f0b11", 42);
/// let txn = fence.guard(Txn::new().and_then([TxnOp::put("jobs/state", "done", PutOptions::new())]));
/// assert_eq!(txn.into_request().compare.len(), 1);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The holder's key.
    key: Vec<u8>,
    /// The revision at which the holder created it.
    create_revision: i64,
}

impl Fence {
    /// A fence on `key` as created at `create_revision`.
    ///
    /// ```
    /// let fence = etcd_ha::concurrency::Fence::new("lock/694d7a2c1e3f0b11", 7);
    /// assert_eq!(fence.create_revision(), 7);
    /// ```
    pub fn new(key: impl Into<Vec<u8>>, create_revision: i64) -> Fence {
        Fence {
            key: key.into(),
            create_revision,
        }
    }

    /// The holder's key.
    ///
    /// ```
    /// let fence = etcd_ha::concurrency::Fence::new("lock/1", 7);
    /// assert_eq!(fence.key(), b"lock/1");
    /// ```
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The revision at which the holder's key was created.
    ///
    /// ```
    /// let fence = etcd_ha::concurrency::Fence::new("lock/1", 7);
    /// assert_eq!(fence.create_revision(), 7);
    /// ```
    pub fn create_revision(&self) -> i64 {
        self.create_revision
    }

    /// The compare that holds while the holder holds: `create_revision(key) == create_revision`.
    ///
    /// ```
    /// use etcd_ha::Txn;
    /// let fence = etcd_ha::concurrency::Fence::new("lock/1", 7);
    /// let txn = Txn::new().when([fence.compare()]);
    /// ```
    pub fn compare(&self) -> Compare {
        Compare::create_revision(self.key.clone(), CompareOp::Equal, self.create_revision)
    }

    /// `txn` with the fence added to its compares: its `and_then` branch runs only if the holder
    /// still holds (and the txn's own compares hold); otherwise `or_else` runs and the response
    /// says `succeeded == false`.
    ///
    /// ```
    /// use etcd_ha::{DeleteOptions, Txn, TxnOp};
    /// let fence = etcd_ha::concurrency::Fence::new("lock/1", 7);
    /// let txn = fence.guard(Txn::new().and_then([TxnOp::delete("queue/head", DeleteOptions::new())]));
    /// ```
    pub fn guard(&self, txn: Txn) -> Txn {
        txn.when([self.compare()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};

    #[test]
    fn guard_adds_one_create_revision_compare() {
        let fence = Fence::new("k", 9);
        let raw = fence
            .guard(Txn::new().when([Compare::version("other", CompareOp::Greater, 0)]))
            .into_request();
        assert_eq!(raw.compare.len(), 2);
        let c = &raw.compare[1];
        assert_eq!(c.key, b"k");
        assert_eq!(c.target, CompareTarget::Create as i32);
        assert_eq!(c.result, CompareResult::Equal as i32);
        assert_eq!(c.target_union, Some(TargetUnion::CreateRevision(9)));
    }
}
