//! Which members answered `Unimplemented` for which method, lately: an older etcd asked for a
//! method a newer one added (`KV.RangeStream` is etcd 3.7's; 3.6 and older answer grpc-go's
//! "unknown method"). A table with no IO.
//!
//! # Why remember, and why forget
//!
//! A mixed-version cluster (a rolling upgrade) has members that serve the method and members
//! that do not. Remembered, the ones that do not are the last choice for the method (the
//! driver counts them as already tried), and a caller that finds no member left to ask goes
//! straight to its fallback (`Kv::get_stream` pages with `Range`), instead of one wasted round
//! trip per call. Forgotten after [`FORGET_AFTER`], because the same endpoint may be upgraded
//! under us: a member restarted with a newer binary keeps its URL.
//!
//! Only grpc-go's method-level answers count ("unknown method", "unknown service"): etcd also
//! answers `Unimplemented` for *requests* a method does not take (RangeStream with a custom
//! sort order), which says nothing about the member.
//!
//! The table holds one row per member and method that answered so (a handful): a lookup walks
//! it, which costs nothing next to a call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::Target;
use crate::endpoint::Endpoint;
use crate::rpc::Rpc;

/// How long a member's `Unimplemented` is believed. 60 s: a rolling upgrade replaces a member
/// within about that, and asking an old member again costs one quick refusal per minute.
pub(crate) const FORGET_AFTER: Duration = Duration::from_secs(60);

/// Members (by URL) and the methods they refused, with when.
#[derive(Debug, Default)]
pub(crate) struct Unimplemented {
    rows: Vec<Row>,
}

#[derive(Debug)]
struct Row {
    url: Arc<str>,
    /// `(service, method)`: an `Rpc` with flags (a serializable range) is one method whatever
    /// its flags.
    method: (&'static str, &'static str),
    at: Instant,
}

fn method(rpc: Rpc) -> (&'static str, &'static str) {
    (rpc.service(), rpc.name())
}

/// The table behind its lock, and whether it has rows, so that every call's look at it is one
/// load while no member ever refused a method (almost always).
#[derive(Debug, Default)]
pub(crate) struct Methods {
    /// A std mutex held for a lookup, never across `.await`.
    table: Mutex<Unimplemented>,
    /// Written under the table's lock.
    any: AtomicBool,
}

impl Methods {
    fn table(&self) -> MutexGuard<'_, Unimplemented> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The member `ep` answered `status` to `rpc`: when it says the member does not have the
    /// method, the member is the method's last choice for a while.
    pub(crate) fn learn(&self, ep: &Endpoint, rpc: Rpc, status: &tonic::Status) {
        if crate::error::is_unknown_method(status) {
            tracing::debug!(rpc = rpc.name(), member = %ep.url, "the member lacks the method");
            self.table().refused(&ep.url, rpc, Instant::now());
            self.any.store(true, Ordering::Relaxed);
        }
    }

    /// The members of `endpoints` that lately answered they do not have `rpc`'s method, or
    /// whose version says so (see [`lacks_by_version`]). The set is asked for only for a
    /// method some versions lack (not on a put's or a get's path).
    pub(crate) fn refusing(
        &self,
        rpc: Rpc,
        endpoints: impl FnOnce() -> Arc<Vec<Arc<Endpoint>>>,
    ) -> Vec<Arc<str>> {
        let mut refusing = if self.any.load(Ordering::Relaxed) {
            let mut table = self.table();
            let now = Instant::now();
            if table.forget_old(now) {
                self.any.store(false, Ordering::Relaxed);
            }
            table.refusing(rpc, now)
        } else {
            Vec::new()
        };
        if version_gated(rpc) {
            for ep in endpoints().iter() {
                if lacks_by_version(ep, rpc) && !refusing.contains(&ep.url) {
                    refusing.push(ep.url.clone());
                }
            }
        }
        refusing
    }

    /// Whether a call of `rpc` to `target` may find a member with the method: the member
    /// itself when pinned, else any of `endpoints`, unless each answered lately that it lacks
    /// the method.
    pub(crate) fn may_serve(&self, rpc: Rpc, target: &Target, endpoints: &[Arc<Endpoint>]) -> bool {
        let table = self.table();
        let now = Instant::now();
        let serves =
            |ep: &Endpoint| table.may_serve(&ep.url, rpc, now) && !lacks_by_version(ep, rpc);
        match target {
            Target::Member(ep) => serves(ep),
            Target::Any | Target::Route(_) => endpoints.iter().any(|ep| serves(ep)),
        }
    }
}

/// Whether some member's version may rule out `rpc` (only methods newer than etcd 3.4 are).
fn version_gated(rpc: Rpc) -> bool {
    matches!(rpc, Rpc::RangeStream { .. })
}

/// Whether `ep`'s known version lacks `rpc`'s method: `KV.RangeStream` is etcd 3.7's. An
/// unknown version is asked (its answer teaches the table).
fn lacks_by_version(ep: &Endpoint, rpc: Rpc) -> bool {
    version_gated(rpc) && ep.version().is_some_and(|v| !v.serves_range_stream())
}

impl Unimplemented {
    /// The member at `url` answered that it does not have `rpc`'s method, at `now`.
    pub(crate) fn refused(&mut self, url: &Arc<str>, rpc: Rpc, now: Instant) {
        self.forget_old(now);
        let method = method(rpc);
        match self
            .rows
            .iter_mut()
            .find(|r| r.method == method && r.url == *url)
        {
            Some(row) => row.at = now,
            None => self.rows.push(Row {
                url: url.clone(),
                method,
                at: now,
            }),
        }
    }

    /// Whether the member at `url` may serve `rpc`: it has not refused the method lately.
    pub(crate) fn may_serve(&self, url: &str, rpc: Rpc, now: Instant) -> bool {
        let method = method(rpc);
        !self
            .rows
            .iter()
            .any(|r| r.method == method && *r.url == *url && !expired(r, now))
    }

    /// The members that refused `rpc`'s method lately (nothing to allocate when none did).
    pub(crate) fn refusing(&self, rpc: Rpc, now: Instant) -> Vec<Arc<str>> {
        let method = method(rpc);
        self.rows
            .iter()
            .filter(|r| r.method == method && !expired(r, now))
            .map(|r| r.url.clone())
            .collect()
    }

    /// Drop the rows older than [`FORGET_AFTER`]; whether the table is empty now.
    pub(crate) fn forget_old(&mut self, now: Instant) -> bool {
        self.rows.retain(|r| !expired(r, now));
        self.rows.is_empty()
    }
}

fn expired(row: &Row, now: Instant) -> bool {
    now.saturating_duration_since(row.at) >= FORGET_AFTER
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: Rpc = Rpc::RangeStream {
        serializable: false,
    };

    #[tokio::test(start_paused = true)]
    async fn a_refusal_is_remembered_per_member_and_method_then_forgotten() {
        let mut table = Unimplemented::default();
        let old: Arc<str> = "http://10.0.0.1:2379".into();
        let start = Instant::now();
        table.refused(&old, STREAM, start);
        assert!(!table.may_serve(&old, STREAM, start));
        // The same method whatever its flags; another method or member is not concerned.
        assert!(!table.may_serve(&old, Rpc::RangeStream { serializable: true }, start));
        assert!(table.may_serve(
            &old,
            Rpc::Range {
                serializable: false
            },
            start
        ));
        assert!(table.may_serve("http://10.0.0.2:2379", STREAM, start));
        assert_eq!(table.refusing(STREAM, start), vec![old.clone()]);
        // A member upgraded under the same URL is asked again after FORGET_AFTER.
        let later = start + FORGET_AFTER;
        assert!(table.may_serve(&old, STREAM, later));
        assert!(table.refusing(STREAM, later).is_empty());
        // A refusal again renews the row rather than adding one.
        table.refused(&old, STREAM, start + Duration::from_secs(30));
        table.refused(&old, STREAM, start + Duration::from_secs(40));
        assert_eq!(table.rows.len(), 1);
        assert!(!table.may_serve(&old, STREAM, later));
    }
}
