//! The KV calls' option builders (get, put, delete) and the range rules they share.

use crate::proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use crate::proto::etcdserverpb::{DeleteRangeRequest, PutRequest, RangeRequest};

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
    /// Keys per `Range` page of [`Kv::get_stream`](crate::Kv::get_stream); `None`: the default.
    page_size: Option<i64>,
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

    /// Keys per page when [`Kv::get_stream`](crate::Kv::get_stream) reads in `Range` pages
    /// (on members without `RangeStream`, and for the first page always); 1000 by default
    /// (etcd's own mirror syncer's batch). Smaller pages for large values keep each answer
    /// under the client's response size limit. Other reads ignore it.
    ///
    /// ```
    /// let o = etcd_ha::GetOptions::new().with_prefix().with_page_size(200);
    /// ```
    pub fn with_page_size(mut self, keys: u32) -> Self {
        self.page_size = Some(i64::from(keys));
        self
    }

    /// Keys per page of a paged read.
    pub(crate) fn page_size(&self) -> i64 {
        self.page_size.unwrap_or(super::pager::DEFAULT_PAGE_SIZE)
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
pub(crate) fn range_end(key: &[u8], explicit: Vec<u8>, prefix: bool, from_key: bool) -> Vec<u8> {
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
