//! The cache's inconsistency detector: at intervals (and on [`Cache::check`]), the store's
//! digest at its revision `R` (every key with its mod revision) against a keys-only range of
//! etcd at the same `R`. A mismatch means the cache diverged (a lost event, a bug, a server that
//! lost its own consistency): it is counted, logged, put in the metrics
//! (`etcd_ha_cache_mismatches_total`), and the range is loaded again.
//!
//! Both sides are read at one revision, so a cache that moves on while etcd answers is still
//! compared fairly; a revision already compacted away is not checked (the next one will be).
//!
//! [`Cache::check`]: super::Cache::check

use std::hash::{DefaultHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::task::Shared;
use crate::error::Result;
use crate::kv::{GetOptions, Kv};

/// What a check of a [`Cache`](super::Cache) against etcd found.
///
/// ```no_run
/// # async fn demo(cache: etcd_ha::Cache) -> etcd_ha::Result<()> {
/// let found = cache.check().await?;
/// if !found.consistent {
///     eprintln!("the cache diverged at revision {}; it reloads", found.revision);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheCheck {
    /// The revision both sides were read at.
    pub revision: i64,
    /// Keys the cache held then.
    pub cached: usize,
    /// Keys etcd held then.
    pub etcd: usize,
    /// Whether every key and its mod revision matched.
    pub consistent: bool,
}

/// An order-sensitive digest of `(key, mod revision)` pairs taken in key order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Digest {
    pub(super) keys: usize,
    hash: u64,
}

impl Digest {
    pub(super) fn add(&mut self, key: &[u8], mod_revision: i64) {
        // Each pair hashed alone, then chained: the same pairs in the same order give the
        // same digest (SipHash with fixed keys: the same in every process).
        let mut h = DefaultHasher::new();
        h.write_u64(self.hash);
        h.write_usize(key.len());
        h.write(key);
        h.write_i64(mod_revision);
        self.hash = h.finish();
        self.keys += 1;
    }
}

/// Compare the store with etcd once (see the module docs); a mismatch asks the feeding task
/// to load the range again.
pub(super) async fn check(shared: &Shared, kv: &Kv, page_size: u32) -> Result<CacheCheck> {
    let (revision, mine) = shared.read(|s| (s.revision(), s.digest()))?;
    let range = &shared.range;
    let options = GetOptions::new()
        .with_range(range.range_end.clone())
        .with_keys_only()
        .with_revision(revision)
        .with_page_size(page_size);
    let mut pages = kv.get_stream(range.key.clone(), options);
    let mut theirs = Digest::default();
    while let Some(page) = pages.page().await? {
        for kv in page {
            theirs.add(&kv.key, kv.mod_revision);
        }
    }
    shared.stats.checks.fetch_add(1, Ordering::Relaxed);
    let found = CacheCheck {
        revision,
        cached: mine.keys,
        etcd: theirs.keys,
        consistent: mine == theirs,
    };
    if !found.consistent {
        shared.stats.mismatches.fetch_add(1, Ordering::Relaxed);
        crate::metrics::cache_mismatch();
        tracing::warn!(
            revision,
            cached = mine.keys,
            etcd = theirs.keys,
            "the cache differs from etcd at one revision; loading its range again"
        );
        shared.reload();
    }
    Ok(found)
}

/// Check every `interval` until `cancel`.
pub(super) async fn every(
    shared: Arc<Shared>,
    kv: Kv,
    interval: Duration,
    page_size: u32,
    cancel: CancellationToken,
) {
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
        // A failed check (compacted, unavailable) proves nothing either way: the next one
        // tries again.
        if let Err(error) = check(&shared, &kv, page_size).await {
            tracing::debug!(%error, "cache check not made");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(pairs: &[(&str, i64)]) -> Digest {
        let mut d = Digest::default();
        for (k, r) in pairs {
            d.add(k.as_bytes(), *r);
        }
        d
    }

    #[test]
    fn a_digest_tells_keys_and_mod_revisions_apart() {
        let base = digest(&[("a", 1), ("b", 2)]);
        assert_eq!(base, digest(&[("a", 1), ("b", 2)]));
        assert_eq!(base.keys, 2);
        assert_ne!(base, digest(&[("a", 1), ("b", 3)]), "a mod revision");
        assert_ne!(base, digest(&[("a", 1)]), "a key missing");
        assert_ne!(base, digest(&[("a", 1), ("c", 2)]), "another key");
        // Key boundaries count: ("ab", "c") is not ("a", "bc").
        assert_ne!(
            digest(&[("ab", 1), ("c", 1)]),
            digest(&[("a", 1), ("bc", 1)])
        );
        assert_eq!(Digest::default(), digest(&[]));
    }
}
