//! The explicit way around a cache that cannot be made fresh in time
//! ([`CacheOptions::with_etcd_fallback`](super::CacheOptions::with_etcd_fallback)): the same
//! range read from etcd itself, linearizably, page by page at one revision.
//!
//! Never taken on the cache's own initiative: under load, reads that fall back to etcd are
//! what overloads it (Kubernetes saw fallbacks cascade), so the caller opts in, per cache.

use std::sync::Arc;

use crate::error::Result;
use crate::kv::{GetOptions, Kv};
use crate::proto::mvccpb::KeyValue;

use super::CacheRead;

/// The keys from `start` up to `end` (`None`: to the last key) as etcd holds them now: the
/// first page is a linearizable read, the others read at its revision.
pub(super) async fn range(
    kv: &Kv,
    start: &[u8],
    end: Option<&[u8]>,
    page_size: u32,
) -> Result<CacheRead<Vec<Arc<KeyValue>>>> {
    let options = GetOptions::new()
        .with_range(end.map_or_else(|| vec![0], <[u8]>::to_vec))
        .with_page_size(page_size);
    let mut pages = kv.get_stream(start.to_vec(), options);
    let mut value = Vec::new();
    while let Some(page) = pages.page().await? {
        value.extend(page.into_iter().map(Arc::new));
    }
    Ok(CacheRead {
        revision: pages.revision().unwrap_or(0),
        value,
    })
}
