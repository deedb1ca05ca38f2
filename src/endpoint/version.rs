//! A member's etcd version, as its Status answer reports it, and what the client may do with a
//! member of that version: the one place that knows which server bugs and features came when.
//!
//! Every capability is a pure predicate of the version, so the rules are tested here alone:
//! - **Canceling a txn in flight** crashes 3.5.0 to 3.5.4: a write txn whose range ran under the
//!   caller's canceled context panics the member (`unexpected error during txn`, etcd issue
//!   14110, fixed in 3.5.5). Txns to such a member are sent without `grpc-timeout` and left to
//!   finish on their own when the caller gives up (see `attempt.rs`).
//! - **Ordered progress answers** (the watch's sound progress, see `watch/progress.rs`): 3.4.25+,
//!   3.5.8+, 3.6+ (etcd 15220).
//! - **`KV.RangeStream`**: 3.7+.
//!
//! An unknown version (no Status answer yet, or one that does not parse) gets the cautious
//! answer of each rule: no reliance on a feature, and the workaround for a bug.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// An etcd server version: `major.minor.patch`, pre-release and build suffixes dropped.
///
/// Read from each member's Status answer by the client's probes, and shown in
/// [`EndpointInfo::version`](crate::EndpointInfo::version).
///
/// ```
/// use etcd_ha::ServerVersion;
/// let v: ServerVersion = "3.5.1".parse().unwrap();
/// assert!(v < ServerVersion::new(3, 6, 0));
/// assert_eq!(v.to_string(), "3.5.1");
/// assert_eq!("3.6.0-rc.1".parse::<ServerVersion>(), Ok(ServerVersion::new(3, 6, 0)));
/// assert!("3.5".parse::<ServerVersion>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerVersion {
    /// The major version (3 for every etcd v3 server).
    pub major: u16,
    /// The minor version.
    pub minor: u16,
    /// The patch version.
    pub patch: u16,
}

/// Why a version string did not parse.
///
/// ```
/// assert!("garbage".parse::<etcd_ha::ServerVersion>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseVersionError;

impl fmt::Display for ParseVersionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not an etcd version (major.minor.patch)")
    }
}

impl std::error::Error for ParseVersionError {}

impl ServerVersion {
    /// The version `major.minor.patch`.
    ///
    /// ```
    /// let v = etcd_ha::ServerVersion::new(3, 6, 16);
    /// assert_eq!(v.to_string(), "3.6.16");
    /// ```
    pub const fn new(major: u16, minor: u16, patch: u16) -> Self {
        ServerVersion {
            major,
            minor,
            patch,
        }
    }

    /// Whether canceling a txn this member is applying may crash it (3.5.0 to 3.5.4, etcd
    /// issue 14110): the client then lets its txns finish after their caller gave up.
    ///
    /// ```
    /// use etcd_ha::ServerVersion;
    /// assert!(ServerVersion::new(3, 5, 1).crashes_on_canceled_txn());
    /// assert!(!ServerVersion::new(3, 5, 5).crashes_on_canceled_txn());
    /// assert!(!ServerVersion::new(3, 4, 23).crashes_on_canceled_txn());
    /// ```
    pub fn crashes_on_canceled_txn(self) -> bool {
        self.major == 3 && self.minor == 5 && self.patch <= 4
    }

    /// Whether this member answers a watch stream's progress requests in order, after every
    /// event pending on the stream (3.4.25+, 3.5.8+, 3.6+; etcd 15220): only then does an
    /// answer prove that nothing up to its revision is left to deliver.
    ///
    /// ```
    /// use etcd_ha::ServerVersion;
    /// assert!(ServerVersion::new(3, 5, 8).orders_progress());
    /// assert!(!ServerVersion::new(3, 5, 7).orders_progress());
    /// assert!(ServerVersion::new(3, 4, 25).orders_progress());
    /// ```
    pub fn orders_progress(self) -> bool {
        match (self.major, self.minor) {
            (3, 4) => self.patch >= 25,
            (3, 5) => self.patch >= 8,
            (3, m) => m >= 6,
            (m, _) => m > 3,
        }
    }

    /// Whether this member serves `KV.RangeStream` (3.7+).
    ///
    /// ```
    /// use etcd_ha::ServerVersion;
    /// assert!(ServerVersion::new(3, 7, 0).serves_range_stream());
    /// assert!(!ServerVersion::new(3, 6, 16).serves_range_stream());
    /// ```
    pub fn serves_range_stream(self) -> bool {
        self >= ServerVersion::new(3, 7, 0)
    }

    /// Packed into one word for [`KnownVersion`] (never 0: major is at least 1 once parsed).
    fn pack(self) -> u64 {
        (u64::from(self.major) << 32) | (u64::from(self.minor) << 16) | u64::from(self.patch)
    }

    fn unpack(word: u64) -> Option<Self> {
        (word != 0).then_some(ServerVersion {
            major: (word >> 32) as u16,
            minor: (word >> 16) as u16,
            patch: word as u16,
        })
    }
}

impl std::str::FromStr for ServerVersion {
    type Err = ParseVersionError;

    /// `3.5.1`, `3.6.0-rc.1`, `3.7.3+dirty`: the first three numbers.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let core = s.split(['-', '+']).next().unwrap_or_default();
        let mut parts = core.split('.').map(|p| p.parse::<u16>());
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(Ok(major)), Some(Ok(minor)), Some(Ok(patch)), None) if major > 0 => {
                Ok(ServerVersion::new(major, minor, patch))
            }
            _ => Err(ParseVersionError),
        }
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// A member's version as last reported, readable on the hot path without a lock (one word,
/// written by the probes; a member upgraded in place reports its new version at the next one).
#[derive(Debug, Default)]
pub(crate) struct KnownVersion(AtomicU64);

impl KnownVersion {
    /// The version last reported, if any.
    pub(crate) fn get(&self) -> Option<ServerVersion> {
        ServerVersion::unpack(self.0.load(Ordering::Relaxed))
    }

    /// Record what a Status answer said.
    pub(crate) fn set(&self, version: ServerVersion) {
        self.0.store(version.pack(), Ordering::Relaxed);
    }

    /// Whether a txn to this member must not be canceled: a version with etcd 14110, or one
    /// not known yet (the first calls of a client may come before the first probe's answer).
    pub(crate) fn txn_must_finish(&self) -> bool {
        self.get()
            .is_none_or(ServerVersion::crashes_on_canceled_txn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_status_reports() {
        assert_eq!("3.5.1".parse(), Ok(ServerVersion::new(3, 5, 1)));
        assert_eq!("3.7.3+git".parse(), Ok(ServerVersion::new(3, 7, 3)));
        assert_eq!("3.6.0-alpha.0".parse(), Ok(ServerVersion::new(3, 6, 0)));
        for bad in [
            "",
            "3.5",
            "3.5.x",
            "garbage",
            "3.5.1.2",
            "0.0.0",
            "99999.0.0",
        ] {
            assert_eq!(
                bad.parse::<ServerVersion>(),
                Err(ParseVersionError),
                "{bad}"
            );
        }
    }

    #[test]
    fn versions_that_order_progress_answers() {
        for v in [
            "3.4.25", "3.4.30", "3.5.8", "3.5.21", "3.6.0", "3.7.3", "4.0.0",
        ] {
            assert!(v.parse::<ServerVersion>().unwrap().orders_progress(), "{v}");
        }
        for v in ["3.4.23", "3.4.24", "3.5.1", "3.5.7", "3.3.27"] {
            assert!(
                !v.parse::<ServerVersion>().unwrap().orders_progress(),
                "{v}"
            );
        }
    }

    #[test]
    fn only_3_5_0_to_3_5_4_crash_on_a_canceled_txn() {
        for v in ["3.5.0", "3.5.1", "3.5.4"] {
            assert!(
                v.parse::<ServerVersion>()
                    .unwrap()
                    .crashes_on_canceled_txn(),
                "{v}"
            );
        }
        for v in ["3.4.23", "3.5.5", "3.5.35", "3.6.16", "3.7.3"] {
            assert!(
                !v.parse::<ServerVersion>()
                    .unwrap()
                    .crashes_on_canceled_txn(),
                "{v}"
            );
        }
    }

    #[test]
    fn a_known_version_round_trips_and_unknown_is_cautious() {
        let known = KnownVersion::default();
        assert_eq!(known.get(), None);
        assert!(known.txn_must_finish(), "unknown: let txns finish");
        known.set(ServerVersion::new(3, 6, 16));
        assert_eq!(known.get(), Some(ServerVersion::new(3, 6, 16)));
        assert!(!known.txn_must_finish());
        known.set(ServerVersion::new(3, 5, 1));
        assert!(known.txn_must_finish());
        known.set(ServerVersion::new(65535, 65535, 65535));
        assert_eq!(known.get(), Some(ServerVersion::new(65535, 65535, 65535)));
    }
}
