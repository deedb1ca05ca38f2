//! What an auth refusal of a watch create does: check the permission with a read; if the user
//! may read the range, renew the token, reopen the shared stream and resume every watch.
//!
//! # Why the stream must be reopened
//!
//! etcd reads the auth token of a watch stream from the stream's metadata, fixed when the
//! stream opened, and checks it again for *every* create on it (`isWatchPermitted`). Once that
//! token expires (`--auth-token-ttl`, 300 s by default, counted from its last use) or the auth
//! store moves on (a user or role changed), each new, resumed or re-created watch on the stream
//! is refused with `canceled=true`. etcd 3.4 and 3.5 give the same reason for a stale token as
//! for a key the user may not read (`etcdserver: permission denied`); later versions may say
//! `etcdserver: invalid auth token`. Watches already running keep going.
//!
//! So a refusal may mean either, and the hub finds out which, without ever looping:
//!
//! 1. A refused watch is checked with a read of its range (count only) through the call path.
//!    etcd permits it by the same rule (`IsRangePermitted`), but there an unknown or expired
//!    token is reported as such (`invalid auth token`), and the call path renews the token and
//!    retries. A denial ends the watch with [`Error::PermissionDenied`], and the stream and its
//!    other watches are left alone.
//! 2. A permitted read means the stream's token is stale. If the watch's stream is still the
//!    one that refused it, the hub renews the token (skipped when another caller, such as the
//!    read, already renewed that generation), leaves the stream and opens a new one carrying
//!    the fresh token; every watch resumes from its cursor, so no event is lost or repeated.
//! 3. After [`MAX_AUTH_REFUSALS`] refusals in a row the watch ends with the refusal, whatever
//!    the checks said (a fresh token may reach the stream's member a moment after the login
//!    answered, since etcd issues it through raft: one more try covers that).
//!
//! ```text
//!   Up --(create refused: permission denied / invalid token)--> Verifying (a count-only read)
//!   Verifying --(denied)--> the watch ends; the stream stays
//!   Verifying --(permitted, same stream)--> Paused (renewing) --> Down --> Opening
//!   Opening --> Up (all resumed)
//! ```
//!
//! The lease keep-alive stream does not have this problem: etcd renews a lease without
//! looking at the stream's token (`LeaseRenew` has no auth check in 3.4 and 3.5).

use std::future::Future;
use std::pin::Pin;
use tokio::time::Instant;

use tracing::Instrument;

use super::hub::{HubTask, Internal, State};
use super::link::{Link, Up, fatal_copy};
use crate::call::supervise;
use crate::error::{Error, Result};
use crate::kv::Kv;
use crate::proto::etcdserverpb::RangeRequest;

/// A token renewal under way.
pub(super) type Renewal = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// Refusals of one watch's create in a row after which it ends, whatever the permission
/// checks say: 3 covers an expired token and then a fresh one not yet known to the stream's
/// member, and never loops on a refusal that no read explains.
pub(super) const MAX_AUTH_REFUSALS: u8 = 3;

/// What to do about a refused create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Check the permission with a read of the watch's range.
    Verify,
    /// End the watch with the refusal.
    Final,
}

impl Refusal {
    /// The answer to `error` for a watch refused `refusals` times in a row before, on a client
    /// that can (`can_renew`) or cannot renew a token.
    pub(super) fn of(error: &Error, refusals: u8, can_renew: bool) -> Refusal {
        if is_auth_refusal(error) && can_renew && refusals < MAX_AUTH_REFUSALS {
            Refusal::Verify
        } else {
            Refusal::Final
        }
    }
}

/// The refusals a stale token causes.
fn is_auth_refusal(error: &Error) -> bool {
    matches!(
        error,
        Error::PermissionDenied | Error::InvalidAuthToken | Error::AuthRequired
    )
}

impl HubTask {
    /// A watch refused on `up` may read its range: leave the stream (every watch on it is
    /// queued to resume from its cursor) and renew the token it was opened with.
    pub(super) fn relogin(&mut self, up: Box<Up>, now: Instant) -> Link {
        let generation = up.token_generation;
        let endpoint = up.stream.endpoint.url.clone();
        let refused_by = up.stream.endpoint.clone();
        // No blame: the member did nothing wrong.
        let reopen = self.leave(up, None, now);
        tracing::info!(
            %endpoint,
            watches = self.entries.len(),
            "watch stream's auth token is stale; renewing it and reopening the stream",
        );
        let transport = self.transport.clone();
        let renew: Renewal = Box::pin(async move {
            let transport = transport.upgrade().ok_or(Error::Shutdown)?;
            transport.renew_token(generation, Some(&refused_by)).await
        });
        Link::Paused {
            pause: renew,
            retry_at: reopen.at,
            failures: reopen.failures,
        }
    }

    /// The renewal finished: open the stream again, or end every watch if the credentials
    /// themselves are refused.
    pub(super) fn renewed(
        &mut self,
        result: Result<()>,
        retry_at: Instant,
        failures: u32,
        now: Instant,
    ) -> Link {
        match result {
            Ok(()) => Link::Down { retry_at, failures },
            Err(error) => {
                if let Some(fatal) = fatal_copy(&error) {
                    tracing::warn!(%error, "auth token cannot be renewed; ending every watch");
                    self.end_all(fatal);
                }
                let reopen = supervise::failed_open(failures, now);
                tracing::warn!(%error, "auth token renewal failed; the watch stream retries");
                Link::Down {
                    retry_at: reopen.at.max(retry_at),
                    failures: reopen.failures,
                }
            }
        }
    }

    /// Read the range of watch `key` (count only): whether its user may read it. The result
    /// comes back as [`Internal::Permission`].
    pub(super) fn spawn_permission_check(&self, key: u64) {
        let Some(entry) = self.entries.get(&key) else {
            return;
        };
        let request = RangeRequest {
            key: entry.create.key.clone(),
            range_end: entry.create.range_end.clone(),
            count_only: true,
            limit: 1,
            ..Default::default()
        };
        let transport = self.transport.clone();
        let report = self.internal_tx.clone();
        tokio::spawn(
            async move {
                let result = match transport.upgrade() {
                    Some(t) => Kv::new(t, None).range(request).await.map(|_| ()),
                    None => Err(Error::Shutdown),
                };
                let _ = report.send(Internal::Permission { key, result });
            }
            .in_current_span(),
        );
    }

    /// The permission check of watch `key` finished: end it on a denial; else (permitted, or
    /// not known) create it again, on a new stream with a renewed token if the stream that
    /// refused it is still the current one.
    pub(super) fn permission_checked(&mut self, key: u64, result: Result<()>, link: &mut Link) {
        let Some(State::Verifying { stream }) = self.entries.get(&key).map(|e| e.state) else {
            return;
        };
        match result {
            Err(error) if !error.is_retryable() => {
                tracing::debug!(%error, "watch refused: its user may not read its range");
                self.end(key, Err(error));
            }
            result => {
                tracing::debug!(?result, "watch refused though its range is readable");
                self.enqueue(key);
                if !matches!(link, Link::Up(up) if up.generation == stream) {
                    // That stream is gone already; the next one carries a newer token.
                    return;
                }
                let now = Instant::now();
                let taken = std::mem::replace(
                    link,
                    Link::Down {
                        retry_at: now,
                        failures: 0,
                    },
                );
                *link = match taken {
                    Link::Up(up) => self.relogin(up, now),
                    other => other,
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_checked_a_few_times_then_final() {
        let denied = Error::PermissionDenied;
        assert_eq!(Refusal::of(&denied, 0, true), Refusal::Verify);
        assert_eq!(
            Refusal::of(&Error::InvalidAuthToken, 0, true),
            Refusal::Verify
        );
        assert_eq!(
            Refusal::of(&denied, MAX_AUTH_REFUSALS - 1, true),
            Refusal::Verify
        );
        assert_eq!(
            Refusal::of(&denied, MAX_AUTH_REFUSALS, true),
            Refusal::Final
        );
        assert_eq!(Refusal::of(&denied, u8::MAX, true), Refusal::Final);
        // Without credentials there is no token to blame.
        assert_eq!(Refusal::of(&denied, 0, false), Refusal::Final);
        // Other refusals are final at once.
        let other = Error::WatchCanceled {
            watch_id: 1,
            reason: "etcdserver: mvcc: required revision is a future revision".into(),
        };
        assert_eq!(Refusal::of(&other, 0, true), Refusal::Final);
    }
}
