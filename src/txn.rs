//! The Txn builder: compares, then the success branch, else the failure branch; branches may nest.

use crate::kv::{DeleteOptions, GetOptions, PutOptions};
use crate::proto::etcdserverpb::{
    Compare as RawCompare, RequestOp, TxnRequest,
    compare::{CompareResult, CompareTarget, TargetUnion},
    request_op,
};

/// How a compare relates the key's field to the given operand.
///
/// ```
/// use etcd_ha::{Compare, CompareOp};
/// let c = Compare::mod_revision("k", CompareOp::Less, 100);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CompareOp {
    /// `==`
    Equal,
    /// `>`
    Greater,
    /// `<`
    Less,
    /// `!=`
    NotEqual,
}

impl CompareOp {
    fn raw(self) -> CompareResult {
        match self {
            CompareOp::Equal => CompareResult::Equal,
            CompareOp::Greater => CompareResult::Greater,
            CompareOp::Less => CompareResult::Less,
            CompareOp::NotEqual => CompareResult::NotEqual,
        }
    }
}

/// One condition of a transaction. A key that does not exist has version, create revision, mod
/// revision and lease 0 (so `version == 0` means "absent").
///
/// ```
/// use etcd_ha::{Compare, CompareOp};
/// let absent = Compare::create_revision("leader", CompareOp::Equal, 0);
/// let mine = Compare::value("leader", CompareOp::Equal, "node-1");
/// let any_under = Compare::version("jobs/", CompareOp::Greater, 0).with_prefix();
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Compare(RawCompare);

impl Compare {
    fn new(
        key: impl Into<Vec<u8>>,
        op: CompareOp,
        target: CompareTarget,
        operand: TargetUnion,
    ) -> Self {
        Compare(RawCompare {
            result: op.raw() as i32,
            target: target as i32,
            key: key.into(),
            range_end: Vec::new(),
            target_union: Some(operand),
        })
    }

    /// Compare the key's value.
    ///
    /// ```
    /// let c = etcd_ha::Compare::value("k", etcd_ha::CompareOp::Equal, "v");
    /// ```
    pub fn value(key: impl Into<Vec<u8>>, op: CompareOp, value: impl Into<Vec<u8>>) -> Self {
        Self::new(
            key,
            op,
            CompareTarget::Value,
            TargetUnion::Value(value.into()),
        )
    }

    /// Compare the key's version (number of writes since creation; 0 when absent).
    ///
    /// ```
    /// let c = etcd_ha::Compare::version("k", etcd_ha::CompareOp::Equal, 0);
    /// ```
    pub fn version(key: impl Into<Vec<u8>>, op: CompareOp, version: i64) -> Self {
        Self::new(
            key,
            op,
            CompareTarget::Version,
            TargetUnion::Version(version),
        )
    }

    /// Compare the revision at which the key was created.
    ///
    /// ```
    /// let c = etcd_ha::Compare::create_revision("k", etcd_ha::CompareOp::Equal, 0);
    /// ```
    pub fn create_revision(key: impl Into<Vec<u8>>, op: CompareOp, revision: i64) -> Self {
        Self::new(
            key,
            op,
            CompareTarget::Create,
            TargetUnion::CreateRevision(revision),
        )
    }

    /// Compare the revision of the key's last modification.
    ///
    /// ```
    /// let c = etcd_ha::Compare::mod_revision("k", etcd_ha::CompareOp::Less, 10);
    /// ```
    pub fn mod_revision(key: impl Into<Vec<u8>>, op: CompareOp, revision: i64) -> Self {
        Self::new(
            key,
            op,
            CompareTarget::Mod,
            TargetUnion::ModRevision(revision),
        )
    }

    /// Compare the lease the key is attached to (0 for none).
    ///
    /// ```
    /// let c = etcd_ha::Compare::lease("k", etcd_ha::CompareOp::Equal, 0);
    /// ```
    pub fn lease(key: impl Into<Vec<u8>>, op: CompareOp, lease: i64) -> Self {
        Self::new(key, op, CompareTarget::Lease, TargetUnion::Lease(lease))
    }

    /// Apply the compare to every key in `[key, end)`; it holds when it holds for all of them.
    ///
    /// ```
    /// let c = etcd_ha::Compare::version("a", etcd_ha::CompareOp::Greater, 0).with_range("c");
    /// ```
    pub fn with_range(mut self, end: impl Into<Vec<u8>>) -> Self {
        self.0.range_end = end.into();
        self
    }

    /// Apply the compare to every key that starts with the key.
    ///
    /// ```
    /// let c = etcd_ha::Compare::version("a/", etcd_ha::CompareOp::Greater, 0).with_prefix();
    /// ```
    pub fn with_prefix(mut self) -> Self {
        self.0.range_end = crate::kv::prefix_end(&self.0.key);
        self
    }

    /// The wire message.
    ///
    /// ```
    /// let raw = etcd_ha::Compare::version("k", etcd_ha::CompareOp::Equal, 0).into_raw();
    /// assert_eq!(raw.key, b"k");
    /// ```
    pub fn into_raw(self) -> RawCompare {
        self.0
    }
}

/// One operation in a branch of a transaction.
///
/// ```
/// use etcd_ha::{TxnOp, PutOptions, GetOptions, DeleteOptions, Txn};
/// let ops = [
///     TxnOp::put("a", "1", PutOptions::new()),
///     TxnOp::get("b", GetOptions::new()),
///     TxnOp::delete("c", DeleteOptions::new()),
///     TxnOp::txn(Txn::new()),
/// ];
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TxnOp(RequestOp);

impl TxnOp {
    /// A put.
    ///
    /// ```
    /// let op = etcd_ha::TxnOp::put("k", "v", etcd_ha::PutOptions::new());
    /// ```
    pub fn put(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, options: PutOptions) -> Self {
        let put = options.into_request(key.into(), value.into());
        TxnOp(RequestOp {
            request: Some(request_op::Request::RequestPut(put)),
        })
    }

    /// A range read.
    ///
    /// ```
    /// let op = etcd_ha::TxnOp::get("k", etcd_ha::GetOptions::new());
    /// ```
    pub fn get(key: impl Into<Vec<u8>>, options: GetOptions) -> Self {
        TxnOp(RequestOp {
            request: Some(request_op::Request::RequestRange(
                options.into_request(key.into()),
            )),
        })
    }

    /// A delete.
    ///
    /// ```
    /// let op = etcd_ha::TxnOp::delete("k", etcd_ha::DeleteOptions::new());
    /// ```
    pub fn delete(key: impl Into<Vec<u8>>, options: DeleteOptions) -> Self {
        TxnOp(RequestOp {
            request: Some(request_op::Request::RequestDeleteRange(
                options.into_request(key.into()),
            )),
        })
    }

    /// A nested transaction (etcd 3.3 and later).
    ///
    /// ```
    /// let op = etcd_ha::TxnOp::txn(etcd_ha::Txn::new());
    /// ```
    pub fn txn(txn: Txn) -> Self {
        TxnOp(RequestOp {
            request: Some(request_op::Request::RequestTxn(txn.into_request())),
        })
    }
}

/// A transaction: if every compare holds, run `and_then`, else run `or_else`, atomically.
///
/// ```
/// use etcd_ha::{Compare, CompareOp, Txn, TxnOp, PutOptions, GetOptions};
/// let txn = Txn::new()
///     .when([Compare::value("config/mode", CompareOp::Equal, "old")])
///     .and_then([TxnOp::put("config/mode", "new", PutOptions::new())])
///     .or_else([TxnOp::get("config/mode", GetOptions::new())]);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Txn {
    request: TxnRequest,
}

impl Txn {
    /// An empty transaction (no compares: `and_then` runs).
    ///
    /// ```
    /// let txn = etcd_ha::Txn::new();
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Add compares; all must hold for `and_then` to run.
    ///
    /// ```
    /// let txn = etcd_ha::Txn::new().when([etcd_ha::Compare::version("k", etcd_ha::CompareOp::Equal, 0)]);
    /// ```
    pub fn when(mut self, compares: impl IntoIterator<Item = Compare>) -> Self {
        self.request
            .compare
            .extend(compares.into_iter().map(|c| c.0));
        self
    }

    /// Add operations to run when the compares hold.
    ///
    /// ```
    /// let txn = etcd_ha::Txn::new().and_then([etcd_ha::TxnOp::put("k", "v", Default::default())]);
    /// ```
    pub fn and_then(mut self, ops: impl IntoIterator<Item = TxnOp>) -> Self {
        self.request.success.extend(ops.into_iter().map(|o| o.0));
        self
    }

    /// Add operations to run when a compare fails.
    ///
    /// ```
    /// let txn = etcd_ha::Txn::new().or_else([etcd_ha::TxnOp::get("k", Default::default())]);
    /// ```
    pub fn or_else(mut self, ops: impl IntoIterator<Item = TxnOp>) -> Self {
        self.request.failure.extend(ops.into_iter().map(|o| o.0));
        self
    }

    /// The wire message.
    ///
    /// ```
    /// let raw = etcd_ha::Txn::new().into_request();
    /// assert!(raw.compare.is_empty());
    /// ```
    pub fn into_request(self) -> TxnRequest {
        self.request
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_nested_txn() {
        let inner = Txn::new().and_then([TxnOp::put("b", "2", PutOptions::new())]);
        let txn = Txn::new()
            .when([Compare::lease("a", CompareOp::NotEqual, 5).with_prefix()])
            .and_then([TxnOp::txn(inner)])
            .or_else([TxnOp::delete("a", DeleteOptions::new())]);
        let raw = txn.into_request();
        assert_eq!(raw.compare[0].target, CompareTarget::Lease as i32);
        assert_eq!(raw.compare[0].result, CompareResult::NotEqual as i32);
        assert_eq!(raw.compare[0].range_end, b"b");
        assert!(matches!(
            raw.success[0].request,
            Some(request_op::Request::RequestTxn(_))
        ));
        assert_eq!(raw.failure.len(), 1);
        assert!(!crate::rpc::txn_is_read_only(&raw));
        let reads = Txn::new()
            .when([Compare::version("a", CompareOp::Equal, 0)])
            .and_then([
                TxnOp::get("a", GetOptions::new()),
                TxnOp::txn(Txn::new().or_else([TxnOp::get("b", GetOptions::new())])),
            ])
            .into_request();
        assert!(crate::rpc::txn_is_read_only(&reads));
    }
}
