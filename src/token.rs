//! The auth token: held for every call, renewed once for all concurrent callers when etcd rejects it.

use std::fmt;
use std::sync::RwLock;

use tonic::metadata::{AsciiMetadataValue, MetadataMap};

/// Metadata key etcd reads the auth token from.
pub(crate) const TOKEN_KEY: &str = "token";

/// The current token and a generation counter.
///
/// A caller remembers the generation it sent; when etcd says the token is invalid, the caller asks
/// for a refresh *of that generation*. Only the first such caller authenticates again; the others
/// find a newer generation and simply retry with it. This keeps a burst of failures from turning
/// into a burst of Authenticate calls.
#[derive(Default)]
pub(crate) struct TokenCell {
    /// `(generation, token)`; a std lock because it is never held across `.await`.
    current: RwLock<(u64, Option<AsciiMetadataValue>)>,
    /// Serialises renewals (held across the Authenticate call, hence tokio's mutex).
    pub(crate) renewing: tokio::sync::Mutex<()>,
}

impl TokenCell {
    /// Put the current token (if any) on a request; returns the generation used.
    pub(crate) fn attach(&self, metadata: &mut MetadataMap) -> u64 {
        let guard = self.current.read().unwrap_or_else(|e| e.into_inner());
        if let Some(token) = &guard.1 {
            metadata.insert(TOKEN_KEY, token.clone());
        }
        guard.0
    }

    /// The generation of the token now held.
    pub(crate) fn generation(&self) -> u64 {
        self.current.read().unwrap_or_else(|e| e.into_inner()).0
    }

    /// Store a freshly issued token.
    pub(crate) fn store(&self, token: AsciiMetadataValue) {
        self.replace(Some(token));
    }

    /// Forget the token: etcd said authentication is not enabled, so calls go without one
    /// (etcd 3.4 and 3.5 reject a token from before an AuthDisable as invalid). A new generation, so
    /// that callers waiting on the old one retry rather than renew again.
    pub(crate) fn clear(&self) {
        self.replace(None);
    }

    fn replace(&self, token: Option<AsciiMetadataValue>) {
        let mut guard = self.current.write().unwrap_or_else(|e| e.into_inner());
        guard.0 += 1;
        guard.1 = token;
    }
}

impl fmt::Debug for TokenCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never show the token itself: it is a bearer credential.
        f.debug_struct("TokenCell")
            .field("generation", &self.generation())
            .field("token", &"<redacted>")
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_and_generations() {
        let cell = TokenCell::default();
        let mut md = MetadataMap::new();
        assert_eq!(cell.attach(&mut md), 0);
        assert!(md.get(TOKEN_KEY).is_none());
        cell.store("abc.def".parse().unwrap());
        assert_eq!(cell.attach(&mut md), 1);
        assert_eq!(md.get(TOKEN_KEY).unwrap(), "abc.def");
        assert!(!format!("{cell:?}").contains("abc.def"));
        cell.clear();
        let mut md = MetadataMap::new();
        assert_eq!(cell.attach(&mut md), 2);
        assert!(md.get(TOKEN_KEY).is_none());
    }
}
