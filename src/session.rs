//! [`Session`]: a lease kept alive by the client's [`Keeper`](crate::Keeper), the liveness that
//! locks, elections and leadership hang their keys on; it ends when the lease is lost or when
//! it is closed (which revokes the lease, deleting its keys at once).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::concurrency::Cleanups;
use crate::error::{Error, Result};
use crate::keeper::KeptLease;

/// A lease and its keeper: keys put with [`lease_id`](Self::lease_id) live as long as the
/// session. Clones share the session.
///
/// [`done`](Self::done) completes when the session ends for any reason, [`lost`](Self::lost)
/// only when the lease was lost (expired locally, or gone on the server) rather than closed.
/// Dropping every clone without [`close`](Self::close) stops renewing without revoking: the
/// lease and its keys then go after the TTL.
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use std::time::Duration;
/// use etcd_ha::{PutOptions, Session};
///
/// let session = Session::new(&client, Duration::from_secs(10)).await?;
/// client
///     .kv()
///     .put("services/api/me", "10.0.0.7:8080", PutOptions::new().with_lease(session.lease_id()))
///     .await?;
/// tokio::select! {
///     () = session.lost() => eprintln!("registration lost"),
///     () = tokio::time::sleep(Duration::from_secs(60)) => session.close().await?,
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Session {
    /// The client the session's requests go through (close revokes with it).
    client: Client,
    /// The kept lease; its last clone stops the renewal.
    lease: KeptLease,
    /// Cancelled by `close`: ends `done` for every clone and keeps `lost` from firing after.
    closed: CancellationToken,
    /// Deletions of this session's election and lock keys still running in the background:
    /// its next campaign or lock of the same key waits for them (they would delete its key).
    cleanups: Cleanups,
}

impl Session {
    /// Grant a lease of `ttl` (rounded up to whole seconds; etcd raises it to its minimum,
    /// 2 s with default timing) and keep it alive.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// let session = etcd_ha::Session::new(&client, std::time::Duration::from_secs(10)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn new(client: &Client, ttl: Duration) -> Result<Session> {
        let lease = client.keeper().grant(ttl).await?;
        Ok(Session::from_lease(client, lease))
    }

    /// A session on an existing lease of TTL `ttl`; fails with [`Error::LeaseNotFound`] if it
    /// expired or was revoked (see [`Keeper::keep`](crate::Keeper::keep)).
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// let id = client.lease().grant(10, None).await?.id;
    /// let session =
    ///     etcd_ha::Session::with_lease(&client, id, std::time::Duration::from_secs(10)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_lease(client: &Client, lease_id: i64, ttl: Duration) -> Result<Session> {
        let lease = client.keeper().keep(lease_id, ttl).await?;
        Ok(Session::from_lease(client, lease))
    }

    fn from_lease(client: &Client, lease: KeptLease) -> Session {
        Session {
            client: client.clone(),
            lease,
            closed: CancellationToken::new(),
            cleanups: Cleanups::default(),
        }
    }

    /// The kept lease: its local expiry, TTL, lost signal.
    ///
    /// ```no_run
    /// # fn demo(session: etcd_ha::Session) {
    /// println!("safe until {:?}", session.lease().expires_at());
    /// # }
    /// ```
    pub fn lease(&self) -> &KeptLease {
        &self.lease
    }

    /// The lease id, to attach keys to the session.
    ///
    /// ```no_run
    /// # async fn demo(session: etcd_ha::Session) -> etcd_ha::Result<()> {
    /// let opts = etcd_ha::PutOptions::new().with_lease(session.lease_id());
    /// session.client().kv().put("me", "here", opts).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lease_id(&self) -> i64 {
        self.lease.id()
    }

    /// The client the session was made with.
    ///
    /// ```no_run
    /// # async fn demo(session: etcd_ha::Session) -> etcd_ha::Result<()> {
    /// let kv = session.client().kv();
    /// # Ok(())
    /// # }
    /// ```
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The background deletions of this session's queue keys (see `concurrency/cleanup.rs`).
    pub(crate) fn cleanups(&self) -> &Cleanups {
        &self.cleanups
    }

    /// Completes when the session has ended: its lease was lost, or it was closed (through
    /// any clone).
    ///
    /// ```no_run
    /// # async fn demo(session: etcd_ha::Session) {
    /// session.done().await;
    /// # }
    /// ```
    pub async fn done(&self) {
        tokio::select! {
            () = self.closed.cancelled() => {}
            () = self.lease.lost() => {}
        }
    }

    /// Completes when the session's lease was lost (see [`KeptLease::lost`]), not when it was
    /// closed: after [`close`](Self::close) this never completes.
    ///
    /// ```no_run
    /// # async fn demo(session: etcd_ha::Session) {
    /// session.lost().await;
    /// eprintln!("session lost: give up what it held");
    /// # }
    /// ```
    pub async fn lost(&self) {
        tokio::select! {
            // Closing stops the renewal, so the lease soon "expires": that is not a loss.
            biased;
            () = self.closed.cancelled() => {}
            () = self.lease.lost() => {
                if !self.closed.is_cancelled() {
                    return;
                }
            }
        }
        std::future::pending().await
    }

    /// End the session for every clone: stop renewing and revoke the lease, which deletes its
    /// keys at once (a lease already gone counts as revoked). Bounded by the request timeout.
    ///
    /// ```no_run
    /// # async fn demo(session: etcd_ha::Session) -> etcd_ha::Result<()> {
    /// session.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn close(self) -> Result<()> {
        self.closed.cancel();
        self.lease.stop();
        match self.client.lease().revoke(self.lease.id()).await {
            Ok(_) | Err(Error::LeaseNotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
