//! [`CacheOptions`]: the key range a [`Cache`](super::Cache) follows and the limits it keeps.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::kv::prefix_end;

/// Most keys a cache holds by default.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;
/// Most bytes (keys, values and a per-key overhead) a cache holds by default: 1 GiB.
pub const DEFAULT_MAX_BYTES: usize = 1 << 30;
/// Keys per page of the reads that load a cache.
const DEFAULT_PAGE_SIZE: u32 = 1000;

/// Events a cache keeps for its local watches unless [`CacheOptions::with_history`] says
/// otherwise.
pub const DEFAULT_HISTORY: usize = 10_000;

/// How often a cache compares itself with etcd unless
/// [`CacheOptions::with_check_interval`] says otherwise.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(60);

/// What a [`Cache`](super::Cache) follows and within what limits.
///
/// ```
/// use std::time::Duration;
/// let options = etcd_ha::CacheOptions::new()
///     .with_prefix()
///     .with_max_keys(100_000)
///     .with_max_bytes(64 << 20)
///     .with_read_timeout(Duration::from_secs(2));
/// ```
#[derive(Clone, Debug, Default)]
pub struct CacheOptions {
    prefix: bool,
    from_key: bool,
    range_end: Option<Vec<u8>>,
    max_keys: Option<usize>,
    max_bytes: Option<usize>,
    page_size: Option<u32>,
    read_timeout: Option<Duration>,
    history: Option<usize>,
    check_interval: Option<Option<Duration>>,
    etcd_fallback: bool,
}

/// The key range a cache follows, in etcd's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyRange {
    /// The first key.
    pub(crate) key: Vec<u8>,
    /// The end as etcd takes it (`[0]`: every key from `key`).
    pub(crate) range_end: Vec<u8>,
}

impl KeyRange {
    /// The exclusive end, `None` for "to the last key".
    pub(crate) fn end(&self) -> Option<&[u8]> {
        (self.range_end != [0]).then_some(self.range_end.as_slice())
    }

    /// Whether `key` is in the range.
    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        key >= self.key.as_slice() && self.end().is_none_or(|end| key < end)
    }
}

impl CacheOptions {
    /// A cache of one key, with the default limits.
    ///
    /// ```
    /// let options = etcd_ha::CacheOptions::new();
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Follow every key that starts with the key given to [`Cache::new`](super::Cache::new).
    ///
    /// ```
    /// let options = etcd_ha::CacheOptions::new().with_prefix();
    /// ```
    pub fn with_prefix(mut self) -> Self {
        self.prefix = true;
        self
    }

    /// Follow the keys from the key given to [`Cache::new`](super::Cache::new) up to `end`
    /// (exclusive).
    ///
    /// ```
    /// let options = etcd_ha::CacheOptions::new().with_range("jobs/m");
    /// ```
    pub fn with_range(mut self, end: impl Into<Vec<u8>>) -> Self {
        self.range_end = Some(end.into());
        self
    }

    /// Follow every key from the key given to [`Cache::new`](super::Cache::new) on.
    ///
    /// ```
    /// let options = etcd_ha::CacheOptions::new().with_from_key();
    /// ```
    pub fn with_from_key(mut self) -> Self {
        self.from_key = true;
        self
    }

    /// Hold at most `keys` keys (default [`DEFAULT_MAX_KEYS`]); a range that grows past it
    /// ends the cache with [`Error::CacheLimit`].
    ///
    /// ```
    /// let options = etcd_ha::CacheOptions::new().with_prefix().with_max_keys(10_000);
    /// ```
    pub fn with_max_keys(mut self, keys: usize) -> Self {
        self.max_keys = Some(keys);
        self
    }

    /// Hold at most `bytes` of keys and values, counting a small overhead per key (default
    /// [`DEFAULT_MAX_BYTES`]); past it the cache ends with [`Error::CacheLimit`].
    ///
    /// ```
    /// let options = etcd_ha::CacheOptions::new().with_prefix().with_max_bytes(16 << 20);
    /// ```
    pub fn with_max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = Some(bytes);
        self
    }

    /// Keys per page when loading the range (default 1000).
    ///
    /// ```
    /// let options = etcd_ha::CacheOptions::new().with_prefix().with_page_size(500);
    /// ```
    pub fn with_page_size(mut self, keys: u32) -> Self {
        self.page_size = Some(keys);
        self
    }

    /// The most events the cache keeps for its local watches ([`Cache::watch`]; default
    /// [`DEFAULT_HISTORY`]), with their previous values: a local watch that falls further
    /// behind is reloaded or told ([`CacheWatchOptions::with_reload_on_lag`]). Outside the
    /// byte limit. Must be above 0.
    ///
    /// [`Cache::watch`]: super::Cache::watch
    /// [`CacheWatchOptions::with_reload_on_lag`]: super::CacheWatchOptions::with_reload_on_lag
    ///
    /// ```
    /// let options = etcd_ha::CacheOptions::new().with_prefix().with_history(100_000);
    /// ```
    pub fn with_history(mut self, events: usize) -> Self {
        self.history = Some(events);
        self
    }

    /// How often the cache compares itself with etcd (its keys and mod revisions against a
    /// keys-only range at the same revision) and reloads when they differ (default
    /// [`DEFAULT_CHECK_INTERVAL`]; `None`: never, [`Cache::check`] still can). Each check
    /// costs etcd a keys-only read of the range.
    ///
    /// [`Cache::check`]: super::Cache::check
    ///
    /// ```
    /// use std::time::Duration;
    /// let options = etcd_ha::CacheOptions::new().with_check_interval(Some(Duration::from_secs(10)));
    /// ```
    pub fn with_check_interval(mut self, interval: Option<Duration>) -> Self {
        self.check_interval = Some(interval);
        self
    }

    /// How long a read that must be fresh waits for the cache to catch up before it fails
    /// with [`Error::NotFresh`] (default: the client's request timeout, or 5 s without one).
    ///
    /// ```
    /// let options = etcd_ha::CacheOptions::new().with_read_timeout(std::time::Duration::from_millis(500));
    /// ```
    pub fn with_read_timeout(mut self, timeout: Duration) -> Self {
        self.read_timeout = Some(timeout);
        self
    }

    /// Let a [`Consistent`](super::Freshness::Consistent) or
    /// [`AtLeast`](super::Freshness::AtLeast) read that cannot be made fresh within the read
    /// timeout read etcd itself (linearizably, paged at one revision) instead of failing with
    /// [`Error::NotFresh`]; counted in [`CacheStats::fallbacks`](super::CacheStats::fallbacks).
    /// Off by default: when the cache falls behind because etcd is slow, every reader falling
    /// back to it at once makes etcd slower (Kubernetes saw such fallbacks cascade). An
    /// at-least read whose token etcd has not reached still fails.
    ///
    /// ```
    /// let options = etcd_ha::CacheOptions::new().with_prefix().with_etcd_fallback();
    /// ```
    pub fn with_etcd_fallback(mut self) -> Self {
        self.etcd_fallback = true;
        self
    }

    /// The options checked, for `key`.
    pub(crate) fn resolve(
        &self,
        key: Vec<u8>,
        request_timeout: Option<Duration>,
    ) -> Result<Resolved> {
        let ways = usize::from(self.prefix)
            + usize::from(self.from_key)
            + usize::from(self.range_end.is_some());
        if ways > 1 {
            return Err(Error::InvalidOptions {
                option: "with_prefix",
                reason: "a cache range is a prefix, a range or from a key: pick one",
            });
        }
        let range_end = match self.from_key {
            true => vec![0],
            false => range_end(&key, self.prefix, self.range_end.as_deref())?,
        };
        let max_keys = self.max_keys.unwrap_or(DEFAULT_MAX_KEYS);
        let max_bytes = self.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
        if max_keys == 0 {
            return Err(Error::InvalidOptions {
                option: "with_max_keys",
                reason: "must be above 0",
            });
        }
        if max_bytes == 0 {
            return Err(Error::InvalidOptions {
                option: "with_max_bytes",
                reason: "must be above 0",
            });
        }
        let page_size = self.page_size.unwrap_or(DEFAULT_PAGE_SIZE);
        if page_size == 0 {
            return Err(Error::InvalidOptions {
                option: "with_page_size",
                reason: "must be above 0",
            });
        }
        let read_timeout = self
            .read_timeout
            .or(request_timeout)
            .unwrap_or(Duration::from_secs(5));
        if read_timeout.is_zero() {
            return Err(Error::InvalidOptions {
                option: "with_read_timeout",
                reason: "must be above 0",
            });
        }
        let history = self.history.unwrap_or(DEFAULT_HISTORY);
        if history == 0 {
            return Err(Error::InvalidOptions {
                option: "with_history",
                reason: "must be above 0",
            });
        }
        let check_interval = self.check_interval.unwrap_or(Some(DEFAULT_CHECK_INTERVAL));
        if check_interval.is_some_and(|i| i.is_zero()) {
            return Err(Error::InvalidOptions {
                option: "with_check_interval",
                reason: "must be above 0 (None turns the checks off)",
            });
        }
        Ok(Resolved {
            check_interval,
            history,
            range: KeyRange { key, range_end },
            limits: super::store::Limits {
                keys: max_keys,
                bytes: max_bytes,
            },
            page_size,
            read_timeout,
            etcd_fallback: self.etcd_fallback,
        })
    }
}

/// Options checked and filled in.
#[derive(Clone, Debug)]
pub(crate) struct Resolved {
    pub(crate) range: KeyRange,
    pub(crate) limits: super::store::Limits,
    pub(crate) page_size: u32,
    pub(crate) read_timeout: Duration,
    /// Events kept for local watches.
    pub(crate) history: usize,
    /// How often the detector runs (`None`: never).
    pub(crate) check_interval: Option<Duration>,
    /// Reads that cannot be made fresh in time read etcd instead.
    pub(crate) etcd_fallback: bool,
}

/// The end of the range a key and its options name: every key with the prefix, up to an
/// explicit end (which must come after the key; `\0` is "to the end"), or the key alone.
pub(crate) fn range_end(key: &[u8], prefix: bool, end: Option<&[u8]>) -> Result<Vec<u8>> {
    match end {
        _ if prefix => Ok(prefix_end(key)),
        Some(end) if end <= key && end != [0] => Err(Error::InvalidOptions {
            option: "with_range",
            reason: "the end must come after the key",
        }),
        Some(end) => Ok(end.to_vec()),
        None => {
            let mut end = key.to_vec();
            end.push(0);
            Ok(end)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_bad_options() {
        let r = CacheOptions::new()
            .with_prefix()
            .resolve(b"a/".to_vec(), None)
            .unwrap();
        assert_eq!(r.range.range_end, b"a0");
        assert!(r.range.contains(b"a/x") && !r.range.contains(b"b"));
        assert_eq!(r.read_timeout, Duration::from_secs(5));
        let one = CacheOptions::new()
            .resolve(b"k".to_vec(), Some(Duration::from_secs(1)))
            .unwrap();
        assert!(one.range.contains(b"k") && !one.range.contains(b"k0"));
        assert_eq!(one.read_timeout, Duration::from_secs(1));
        let all = CacheOptions::new()
            .with_from_key()
            .resolve(b"m".to_vec(), None)
            .unwrap();
        assert_eq!(all.range.end(), None);
        assert!(all.range.contains(b"zzz") && !all.range.contains(b"a"));
        for bad in [
            CacheOptions::new().with_prefix().with_from_key(),
            CacheOptions::new().with_range("a"),
            CacheOptions::new().with_max_keys(0),
            CacheOptions::new().with_max_bytes(0),
            CacheOptions::new().with_page_size(0),
            CacheOptions::new().with_read_timeout(Duration::ZERO),
            CacheOptions::new().with_history(0),
            CacheOptions::new().with_check_interval(Some(Duration::ZERO)),
        ] {
            assert!(
                matches!(
                    bad.resolve(b"b".to_vec(), None),
                    Err(Error::InvalidOptions { .. })
                ),
                "{bad:?}"
            );
        }
    }
}
