//! What a local watch of a [`Cache`](super::Cache) follows and from where
//! ([`CacheWatchOptions`]), checked against the cache's own range.

use std::time::Duration;

use super::options::{KeyRange, range_end};
use crate::error::{Error, Result};

/// How long a caught-up subscriber made with
/// [`with_progress_notify`](CacheWatchOptions::with_progress_notify) goes without a batch
/// before it is told its revision.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// What a [`Cache::watch`](super::Cache::watch) follows, and from where.
///
/// ```
/// use etcd_ha::CacheWatchOptions;
/// let options = CacheWatchOptions::new()
///     .with_prefix()
///     .with_start_revision(42)
///     .with_prev_kv()
///     .with_reload_on_lag();
/// # let _ = options;
/// ```
#[derive(Clone, Debug, Default)]
pub struct CacheWatchOptions {
    pub(super) prefix: bool,
    pub(super) range_end: Option<Vec<u8>>,
    pub(super) start_revision: i64,
    pub(super) prev_kv: bool,
    pub(super) progress_notify: bool,
    pub(super) reload_on_lag: bool,
}

impl CacheWatchOptions {
    /// One key, from now.
    ///
    /// ```
    /// let options = etcd_ha::CacheWatchOptions::new();
    /// # let _ = options;
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Every key that starts with the watched key (inside the cache's range).
    ///
    /// ```
    /// let options = etcd_ha::CacheWatchOptions::new().with_prefix();
    /// # let _ = options;
    /// ```
    pub fn with_prefix(mut self) -> Self {
        self.prefix = true;
        self
    }

    /// The keys from the watched key up to `end` (exclusive; inside the cache's range).
    ///
    /// ```
    /// let options = etcd_ha::CacheWatchOptions::new().with_range("jobs/m");
    /// # let _ = options;
    /// ```
    pub fn with_range(mut self, end: impl Into<Vec<u8>>) -> Self {
        self.range_end = Some(end.into());
        self
    }

    /// Start at `revision` (its events are the first delivered), replayed from the cache's
    /// history while it still holds it. 0 (the default) is "now": the watch begins after a
    /// consistent read of the cache, so it sees every write that completes after the call
    /// and none that completed before it.
    ///
    /// ```
    /// let options = etcd_ha::CacheWatchOptions::new().with_start_revision(100);
    /// # let _ = options;
    /// ```
    pub fn with_start_revision(mut self, revision: i64) -> Self {
        self.start_revision = revision;
        self
    }

    /// Give every event the key's previous value (exact: the cache holds the whole range).
    ///
    /// ```
    /// let options = etcd_ha::CacheWatchOptions::new().with_prev_kv();
    /// # let _ = options;
    /// ```
    pub fn with_prev_kv(mut self) -> Self {
        self.prev_kv = true;
        self
    }

    /// Deliver [`WatchBatch::Progress`](crate::WatchBatch::Progress) when the watch has had nothing for
    /// [`PROGRESS_EVERY`] and the cache has moved on.
    ///
    /// ```
    /// let options = etcd_ha::CacheWatchOptions::new().with_progress_notify();
    /// # let _ = options;
    /// ```
    pub fn with_progress_notify(mut self) -> Self {
        self.progress_notify = true;
        self
    }

    /// When the events this watch needs are no longer in the cache's history (it fell
    /// behind the ring, or the cache loaded its range again), deliver the watched keys as
    /// the cache holds them ([`WatchBatch::Reloaded`](crate::WatchBatch::Reloaded)) and go on. Without it the watch
    /// delivers [`WatchBatch::Compacted`](crate::WatchBatch::Compacted) and ends.
    ///
    /// ```
    /// let options = etcd_ha::CacheWatchOptions::new().with_reload_on_lag();
    /// # let _ = options;
    /// ```
    pub fn with_reload_on_lag(mut self) -> Self {
        self.reload_on_lag = true;
        self
    }

    pub(crate) fn start_revision(&self) -> i64 {
        self.start_revision
    }

    /// The watched keys, which must lie inside the cache's range `cache`.
    pub(crate) fn resolve(&self, key: Vec<u8>, cache: &KeyRange) -> Result<KeyRange> {
        if self.prefix && self.range_end.is_some() {
            return Err(Error::InvalidOptions {
                option: "with_prefix",
                reason: "a cache watch is of a prefix or of a range: pick one",
            });
        }
        if self.start_revision < 0 {
            return Err(Error::InvalidOptions {
                option: "with_start_revision",
                reason: "must not be negative",
            });
        }
        let range_end = range_end(&key, self.prefix, self.range_end.as_deref())?;
        let range = KeyRange { key, range_end };
        let inside = cache.contains(&range.key)
            && match (range.end(), cache.end()) {
                (_, None) => true,
                (Some(end), Some(limit)) => end <= limit,
                (None, Some(_)) => false,
            };
        if !inside {
            return Err(Error::InvalidOptions {
                option: "key",
                reason: "a cache watch must lie inside the cache's range",
            });
        }
        Ok(range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_must_lie_inside_the_cache() {
        let whole = KeyRange {
            key: b"a/".to_vec(),
            range_end: b"a0".to_vec(),
        };
        let ok = |o: CacheWatchOptions, key: &str| o.resolve(key.into(), &whole).is_ok();
        assert!(ok(CacheWatchOptions::new(), "a/x"));
        assert!(ok(CacheWatchOptions::new().with_prefix(), "a/"));
        assert!(ok(CacheWatchOptions::new().with_range("a/z"), "a/b"));
        assert!(!ok(CacheWatchOptions::new(), "b"));
        assert!(!ok(CacheWatchOptions::new().with_prefix(), "a"));
        assert!(!ok(CacheWatchOptions::new().with_range("b"), "a/b"));
        assert!(!ok(CacheWatchOptions::new().with_range("\0"), "a/b"));
        assert!(!ok(CacheWatchOptions::new().with_range("a/a"), "a/b"));
        assert!(!ok(
            CacheWatchOptions::new().with_prefix().with_range("a/z"),
            "a/"
        ));
        assert!(!ok(CacheWatchOptions::new().with_start_revision(-1), "a/x"));
    }
}
