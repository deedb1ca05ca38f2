//! The KV service: range, put, delete range, txn and compact, with option builders for each.

use std::sync::Arc;
use std::time::Duration;

use crate::call::{Deadline, Target, Transport};
use crate::error::Result;
use crate::proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest,
    PutResponse, RangeRequest, RangeResponse, TxnResponse,
};
use crate::rpc::Rpc;
use crate::txn::Txn;

pub use crate::proto::etcdserverpb::range_request::{SortOrder, SortTarget};

/// The KV service. Get one with [`Client::kv`](crate::Client::kv).
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use etcd_ha::{GetOptions, PutOptions};
/// let kv = client.kv();
/// kv.put("app/a", "1", PutOptions::new()).await?;
/// kv.put("app/b", "2", PutOptions::new()).await?;
/// let all = kv.get("app/", GetOptions::new().with_prefix()).await?;
/// assert_eq!(all.count, 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Kv {
    transport: Arc<Transport>,
    /// The caller's own deadline for every call made through this handle.
    timeout: Option<Duration>,
}

impl Kv {
    pub(crate) fn new(transport: Arc<Transport>) -> Self {
        Kv {
            transport,
            timeout: None,
        }
    }

    /// The same handle with its own deadline for every call made through it, instead of the
    /// client's request timeout (also for calls that otherwise wait without one, such as a
    /// lock or a campaign). Hedging and retries follow this deadline: a short one still gets
    /// a hedge at a third of it.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// use std::time::Duration;
    /// client.kv().with_timeout(Duration::from_millis(200)).get("k", Default::default()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Read `key` (or the range the options describe).
    ///
    /// ```no_run
    /// # async fn demo(kv: etcd_ha::Kv) -> etcd_ha::Result<()> {
    /// let resp = kv.get("k", etcd_ha::GetOptions::new().with_serializable()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get(&self, key: impl Into<Vec<u8>>, options: GetOptions) -> Result<RangeResponse> {
        self.range(options.into_request(key.into())).await
    }

    /// Send a raw [`RangeRequest`].
    ///
    /// ```no_run
    /// # async fn demo(kv: etcd_ha::Kv) -> etcd_ha::Result<()> {
    /// use etcd_ha::proto::etcdserverpb::RangeRequest;
    /// let resp = kv.range(RangeRequest { key: b"k".to_vec(), ..Default::default() }).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        self.transport
            .unary(
                Rpc::Range {
                    serializable: request.serializable,
                },
                Target::Any,
                Deadline::Default.within(self.timeout),
                request,
                |c, r| async move { c.kv().range(r).await },
            )
            .await
            .inspect(|r| self.transport.observe_header(r.header.as_ref()))
    }

    /// Write `value` at `key`.
    ///
    /// ```no_run
    /// # async fn demo(kv: etcd_ha::Kv) -> etcd_ha::Result<()> {
    /// let resp = kv.put("k", "v", etcd_ha::PutOptions::new().with_prev_kv()).await?;
    /// let previous = resp.prev_kv;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn put(
        &self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
        options: PutOptions,
    ) -> Result<PutResponse> {
        let request = options.into_request(key.into(), value.into());
        self.transport
            .unary(
                Rpc::Put,
                Target::Any,
                Deadline::Default.within(self.timeout),
                request,
                |c, r| async move { c.kv().put(r).await },
            )
            .await
            .inspect(|r| self.transport.observe_header(r.header.as_ref()))
    }

    /// Delete `key` (or the range the options describe).
    ///
    /// ```no_run
    /// # async fn demo(kv: etcd_ha::Kv) -> etcd_ha::Result<()> {
    /// let resp = kv.delete("app/", etcd_ha::DeleteOptions::new().with_prefix()).await?;
    /// println!("deleted {}", resp.deleted);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn delete(
        &self,
        key: impl Into<Vec<u8>>,
        options: DeleteOptions,
    ) -> Result<DeleteRangeResponse> {
        let request = options.into_request(key.into());
        self.transport
            .unary(
                Rpc::DeleteRange,
                Target::Any,
                Deadline::Default.within(self.timeout),
                request,
                |c, r| async move { c.kv().delete_range(r).await },
            )
            .await
            .inspect(|r| self.transport.observe_header(r.header.as_ref()))
    }

    /// Run a transaction.
    ///
    /// ```no_run
    /// # async fn demo(kv: etcd_ha::Kv) -> etcd_ha::Result<()> {
    /// use etcd_ha::{Compare, CompareOp, Txn, TxnOp, PutOptions};
    /// let txn = Txn::new()
    ///     .when([Compare::version("k", CompareOp::Equal, 0)])
    ///     .and_then([TxnOp::put("k", "created", PutOptions::new())]);
    /// let created = kv.txn(txn).await?.succeeded;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        let request = txn.into_request();
        // A txn that only reads is as safe to repeat as a range.
        let rpc = Rpc::Txn {
            read_only: crate::txn::is_read_only(&request),
        };
        self.transport
            .unary(
                rpc,
                Target::Any,
                Deadline::Default.within(self.timeout),
                request,
                |c, r| async move { c.kv().txn(r).await },
            )
            .await
            .inspect(|r| self.transport.observe_header(r.header.as_ref()))
    }

    /// Compact the key-value history up to `revision`. With `physical`, the call returns only
    /// once the compaction is applied to the backend.
    ///
    /// ```no_run
    /// # async fn demo(kv: etcd_ha::Kv) -> etcd_ha::Result<()> {
    /// let rev = kv.get("k", Default::default()).await?.header.unwrap().revision;
    /// kv.compact(rev, true).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn compact(&self, revision: i64, physical: bool) -> Result<CompactionResponse> {
        let request = CompactionRequest { revision, physical };
        self.transport
            .unary(
                Rpc::Compact,
                Target::Any,
                Deadline::Default.within(self.timeout),
                request,
                |c, r| async move { c.kv().compact(r).await },
            )
            .await
    }
}

/// The end of the range of all keys that start with `prefix`: the prefix with its last byte that
/// is not `0xff` incremented; an all-`0xff` (or empty) prefix means "every key" (`"\0"`).
///
/// ```
/// assert_eq!(etcd_ha::prefix_end(b"app/"), b"app0".to_vec());
/// assert_eq!(etcd_ha::prefix_end(b""), vec![0]);
/// ```
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Options of a range read. The defaults read one key, linearizably, at the newest revision.
///
/// ```
/// use etcd_ha::{GetOptions, SortOrder, SortTarget};
/// let options = GetOptions::new()
///     .with_prefix()
///     .with_limit(10)
///     .with_sort(SortTarget::Mod, SortOrder::Descend)
///     .with_serializable()
///     .with_keys_only();
/// ```
#[derive(Clone, Debug, Default)]
pub struct GetOptions {
    request: RangeRequest,
    /// Set by `with_prefix`: the range end is computed from the key when the request is built.
    prefix: bool,
    /// Set by `with_from_key`: every key >= key.
    from_key: bool,
}

impl GetOptions {
    /// Read one key, linearizably.
    ///
    /// ```
    /// let o = etcd_ha::GetOptions::new();
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Read every key that starts with the key.
    ///
    /// ```
    /// let o = etcd_ha::GetOptions::new().with_prefix();
    /// ```
    pub fn with_prefix(mut self) -> Self {
        self.prefix = true;
        self
    }

    /// Read the half-open range `[key, end)`.
    ///
    /// ```
    /// let o = etcd_ha::GetOptions::new().with_range("b");
    /// ```
    pub fn with_range(mut self, end: impl Into<Vec<u8>>) -> Self {
        self.request.range_end = end.into();
        self
    }

    /// Read every key greater than or equal to the key.
    ///
    /// ```
    /// let o = etcd_ha::GetOptions::new().with_from_key();
    /// ```
    pub fn with_from_key(mut self) -> Self {
        self.from_key = true;
        self
    }

    /// Return at most `limit` keys (`more` tells whether there were more).
    ///
    /// ```
    /// let o = etcd_ha::GetOptions::new().with_prefix().with_limit(100);
    /// ```
    pub fn with_limit(mut self, limit: i64) -> Self {
        self.request.limit = limit;
        self
    }

    /// Read at this past revision (fails with [`Error::Compacted`](crate::Error::Compacted) when
    /// it was compacted).
    ///
    /// ```
    /// let o = etcd_ha::GetOptions::new().with_revision(42);
    /// ```
    pub fn with_revision(mut self, revision: i64) -> Self {
        self.request.revision = revision;
        self
    }

    /// Sort the result.
    ///
    /// ```
    /// use etcd_ha::{SortOrder, SortTarget};
    /// let o = etcd_ha::GetOptions::new().with_sort(SortTarget::Create, SortOrder::Ascend);
    /// ```
    pub fn with_sort(mut self, target: SortTarget, order: SortOrder) -> Self {
        self.request.sort_target = target as i32;
        self.request.sort_order = order as i32;
        self
    }

    /// Serve from the member's local state, without a round through the leader: faster, and
    /// available without quorum, but possibly stale.
    ///
    /// ```
    /// let o = etcd_ha::GetOptions::new().with_serializable();
    /// ```
    pub fn with_serializable(mut self) -> Self {
        self.request.serializable = true;
        self
    }

    /// Return keys without values.
    ///
    /// ```
    /// let o = etcd_ha::GetOptions::new().with_prefix().with_keys_only();
    /// ```
    pub fn with_keys_only(mut self) -> Self {
        self.request.keys_only = true;
        self
    }

    /// Return only the count of keys.
    ///
    /// ```
    /// let o = etcd_ha::GetOptions::new().with_prefix().with_count_only();
    /// ```
    pub fn with_count_only(mut self) -> Self {
        self.request.count_only = true;
        self
    }

    /// Only keys whose last modification is at or after `revision`.
    ///
    /// ```
    /// let o = etcd_ha::GetOptions::new().with_prefix().with_min_mod_revision(10);
    /// ```
    pub fn with_min_mod_revision(mut self, revision: i64) -> Self {
        self.request.min_mod_revision = revision;
        self
    }

    /// Only keys whose last modification is at or before `revision`.
    ///
    /// ```
    /// let o = etcd_ha::GetOptions::new().with_prefix().with_max_mod_revision(10);
    /// ```
    pub fn with_max_mod_revision(mut self, revision: i64) -> Self {
        self.request.max_mod_revision = revision;
        self
    }

    /// Only keys created at or after `revision`.
    ///
    /// ```
    /// let o = etcd_ha::GetOptions::new().with_prefix().with_min_create_revision(10);
    /// ```
    pub fn with_min_create_revision(mut self, revision: i64) -> Self {
        self.request.min_create_revision = revision;
        self
    }

    /// Only keys created at or before `revision`.
    ///
    /// ```
    /// let o = etcd_ha::GetOptions::new().with_prefix().with_max_create_revision(10);
    /// ```
    pub fn with_max_create_revision(mut self, revision: i64) -> Self {
        self.request.max_create_revision = revision;
        self
    }

    /// The request these options make for `key`.
    pub(crate) fn into_request(self, key: Vec<u8>) -> RangeRequest {
        let mut request = self.request;
        request.range_end = range_end(&key, request.range_end, self.prefix, self.from_key);
        request.key = key;
        request
    }
}

/// The range end a key and its options mean: explicit end, prefix, or from-key.
fn range_end(key: &[u8], explicit: Vec<u8>, prefix: bool, from_key: bool) -> Vec<u8> {
    if prefix {
        prefix_end(key)
    } else if from_key {
        // "\0" as range end means "every key >= key".
        vec![0]
    } else {
        explicit
    }
}

/// Options of a put.
///
/// ```
/// let o = etcd_ha::PutOptions::new().with_lease(0x1234).with_prev_kv();
/// ```
#[derive(Clone, Debug, Default)]
pub struct PutOptions {
    request: PutRequest,
}

impl PutOptions {
    /// A plain put.
    ///
    /// ```
    /// let o = etcd_ha::PutOptions::new();
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Attach the key to this lease; it is deleted when the lease expires.
    ///
    /// ```
    /// let o = etcd_ha::PutOptions::new().with_lease(7587869318296120589);
    /// ```
    pub fn with_lease(mut self, lease: i64) -> Self {
        self.request.lease = lease;
        self
    }

    /// Return the previous key-value pair.
    ///
    /// ```
    /// let o = etcd_ha::PutOptions::new().with_prev_kv();
    /// ```
    pub fn with_prev_kv(mut self) -> Self {
        self.request.prev_kv = true;
        self
    }

    /// Keep the current value (only the lease changes); fails if the key does not exist.
    ///
    /// ```
    /// let o = etcd_ha::PutOptions::new().with_ignore_value().with_lease(1);
    /// ```
    pub fn with_ignore_value(mut self) -> Self {
        self.request.ignore_value = true;
        self
    }

    /// Keep the current lease (only the value changes); fails if the key does not exist.
    ///
    /// ```
    /// let o = etcd_ha::PutOptions::new().with_ignore_lease();
    /// ```
    pub fn with_ignore_lease(mut self) -> Self {
        self.request.ignore_lease = true;
        self
    }

    pub(crate) fn into_request(self, key: Vec<u8>, value: Vec<u8>) -> PutRequest {
        PutRequest {
            key,
            value,
            ..self.request
        }
    }
}

/// Options of a delete.
///
/// ```
/// let o = etcd_ha::DeleteOptions::new().with_prefix().with_prev_kv();
/// ```
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    request: DeleteRangeRequest,
    prefix: bool,
    from_key: bool,
}

impl DeleteOptions {
    /// Delete one key.
    ///
    /// ```
    /// let o = etcd_ha::DeleteOptions::new();
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Delete every key that starts with the key.
    ///
    /// ```
    /// let o = etcd_ha::DeleteOptions::new().with_prefix();
    /// ```
    pub fn with_prefix(mut self) -> Self {
        self.prefix = true;
        self
    }

    /// Delete the half-open range `[key, end)`.
    ///
    /// ```
    /// let o = etcd_ha::DeleteOptions::new().with_range("z");
    /// ```
    pub fn with_range(mut self, end: impl Into<Vec<u8>>) -> Self {
        self.request.range_end = end.into();
        self
    }

    /// Delete every key greater than or equal to the key.
    ///
    /// ```
    /// let o = etcd_ha::DeleteOptions::new().with_from_key();
    /// ```
    pub fn with_from_key(mut self) -> Self {
        self.from_key = true;
        self
    }

    /// Return the deleted key-value pairs.
    ///
    /// ```
    /// let o = etcd_ha::DeleteOptions::new().with_prev_kv();
    /// ```
    pub fn with_prev_kv(mut self) -> Self {
        self.request.prev_kv = true;
        self
    }

    pub(crate) fn into_request(self, key: Vec<u8>) -> DeleteRangeRequest {
        let mut request = self.request;
        request.range_end = range_end(&key, request.range_end, self.prefix, self.from_key);
        request.key = key;
        request
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_cases() {
        assert_eq!(prefix_end(b"a"), b"b");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
        assert_eq!(prefix_end(b""), vec![0]);
    }

    #[test]
    fn get_options_build_requests() {
        let r = GetOptions::new()
            .with_prefix()
            .with_limit(3)
            .into_request(b"k/".to_vec());
        assert_eq!(r.key, b"k/");
        assert_eq!(r.range_end, b"k0");
        assert_eq!(r.limit, 3);
        let r = GetOptions::new()
            .with_from_key()
            .into_request(b"m".to_vec());
        assert_eq!(r.range_end, vec![0]);
        let r = GetOptions::new()
            .with_sort(SortTarget::Mod, SortOrder::Descend)
            .into_request(b"m".to_vec());
        assert_eq!(r.sort_target, SortTarget::Mod as i32);
        assert_eq!(r.sort_order, SortOrder::Descend as i32);
    }

    #[test]
    fn delete_options_build_requests() {
        let r = DeleteOptions::new()
            .with_prefix()
            .with_prev_kv()
            .into_request(b"x".to_vec());
        assert_eq!(r.range_end, b"y");
        assert!(r.prev_kv);
    }
}
