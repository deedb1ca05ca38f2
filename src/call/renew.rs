//! Token renewal: one login for every caller that found the token stale, at the member that
//! refused it first, through the same attempt bookkeeping as any call (`attempt.rs`).

use std::sync::Arc;

use tokio::time::Instant;
use tonic::Request;

use super::{Transport, attempt};
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::proto::etcdserverpb::AuthenticateRequest;
use crate::rpc::{Route, Rpc};

impl Transport {
    /// Authenticate again, unless another caller already replaced the token of `stale`'s
    /// generation; at `refused_by` first, the member that refused the old token, when known.
    ///
    /// Why there: etcd's simple tokens (its default) live in each member's memory, added when
    /// the member applies the Authenticate entry, and the member that served Authenticate has
    /// applied it before it answers. Another member may apply it up to a heartbeat later (a
    /// follower learns the commit from the leader's next message), or later still when its
    /// apply lags, and until then refuses the new token too. The call that was refused is sent
    /// to the same member again, so logging in there is what makes that retry sure to carry a
    /// token the member knows; a login elsewhere made it fail now and then on a loaded box,
    /// and each such failure cost another login (a bcrypt hash on the server).
    pub(crate) async fn renew_token(
        &self,
        stale: u64,
        refused_by: Option<&Arc<Endpoint>>,
    ) -> Result<()> {
        let (Some(cell), Some(credentials)) = (&self.token, &self.options.credentials) else {
            return Ok(());
        };
        let _renewing = cell.renewing.lock().await;
        if cell.generation() != stale {
            return Ok(());
        }
        let message = AuthenticateRequest {
            name: credentials.user.clone(),
            password: credentials.password.clone(),
        };
        // Authenticate hashes the password with bcrypt on the server: allow it some time.
        let limit = self
            .options
            .request_timeout
            .unwrap_or(self.options.connect_timeout * 2);
        let mut last = Error::NoEndpoints;
        let mut tried: Vec<Arc<str>> = Vec::new();
        let mut first = refused_by.cloned();
        for _ in 0..self.balancer.endpoints().len().max(1) {
            let Some(ep) = first
                .take()
                .or_else(|| self.balancer.pick(Route::Any, &tried))
            else {
                break;
            };
            tried.push(ep.url.clone());
            let mut auth = self.conn(&ep).auth();
            let call = auth.authenticate(Request::new(message.clone()));
            // Counted in flight like any attempt (`attempt.rs`), but its latency teaches the
            // member's pace nothing: most of it is the server's bcrypt hash, not the member's
            // pace, and a pace learned from it would delay every hedge away from the member.
            let sent = attempt::Sent::start(&ep, false, Instant::now());
            let outcome = tokio::time::timeout(limit, call).await;
            let started = sent.started();
            drop(sent);
            match outcome {
                Ok(Ok(response)) => {
                    let token = response.into_inner().token;
                    let value = token.parse().map_err(|_| Error::InvalidAuthToken)?;
                    cell.store(value);
                    tracing::debug!("auth token renewed");
                    return Ok(());
                }
                Ok(Err(status)) => {
                    last = self.refused(&ep, Some(Rpc::Authenticate), status).0;
                    if matches!(last, Error::AuthNotEnabled) {
                        // Auth is off (or was turned off): call without a token, as etcd's
                        // clientv3 does; etcd 3.4/3.5 reject a token from before AuthDisable.
                        cell.clear();
                        tracing::debug!("auth is not enabled; calling without a token");
                        return Ok(());
                    }
                    if !last.is_retryable() {
                        return Err(last);
                    }
                }
                Err(_) => {
                    // Blamed as any unanswered attempt is: only when its streams fell silent
                    // too (a box busy hashing passwords is slow, not down).
                    last = Error::Timeout;
                    if attempt::silent(&ep, started, Instant::now()) {
                        self.learn(&ep, &last);
                    }
                }
            }
        }
        Err(last)
    }
}
