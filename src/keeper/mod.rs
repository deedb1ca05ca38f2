//! The lease keeper: keeps any number of leases alive over one keep-alive stream and says, for
//! each, the moment it can no longer be trusted.
//!
//! How it keeps a lease and when one counts as lost is told on [`Keeper`], for users. The files:
//! `state.rs` is the bookkeeping (no IO, tested with paused time), `queues.rs` its orderings
//! (so that no renewal walks every lease), `task.rs` the task that drives it with the stream,
//! `kept.rs` the lease handles, this file the keeper handle.

mod answers;
mod kept;
mod link;
mod queues;
mod report;
mod state;
mod task;
mod ttl;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::Instrument;

use crate::call::Transport;
use crate::error::{Error, Result};
use crate::lease::Lease;
use kept::Handle;
pub use kept::KeptLease;
use state::View;
use task::{Command, KeeperTask};
pub use ttl::MAX_LEASE_TTL;
pub(crate) use ttl::checked_secs as checked_ttl_secs;

/// Below this many registrations `register` does not sweep dropped ones: a small map costs
/// nothing to keep.
const SWEEP_FLOOR: usize = 64;

/// Keeps leases alive: any number of them, over one keep-alive stream, renewing each at a third
/// of its TTL and failing over to another member at once when the stream breaks.
///
/// Get the client's shared keeper with [`Client::keeper`](crate::Client::keeper); clones share
/// it.
///
/// # How it keeps a lease
///
/// One background task per [`Client`](crate::Client) owns one `LeaseKeepAlive` stream
/// (leader-routed, with require-leader, so a member cut off from the leader refuses it instead
/// of hanging). Each lease is renewed a third of its TTL after the send time of its last
/// answered renewal, one request in flight at a time. When the stream fails, stays silent with
/// a renewal owed for longer than a third of the shortest TTL, or its member is ejected, the
/// task tells the transport (so the member is avoided), opens a new stream on another member
/// and renews **every** lease at once: not after the next TTL/3, the trap etcd's Go client fell
/// into (etcd#7357).
///
/// # When a lease counts as lost
///
/// A lease's local expiry is *the send time of its last answered renewal + its TTL*. The server
/// renews after we send, so this is never later than the server's own expiry (a leader change
/// only extends the server's side). [`KeptLease::lost`] completes at that instant if no renewal
/// came in time, or as soon as the server answers that the lease is gone (`ttl <= 0`: it
/// expired or was revoked). A lost lease is no longer renewed. Holders of a lock or leadership
/// should stop acting on it when `lost` completes: until then the lease cannot have expired on
/// the server (as long as both clocks run at the same rate).
///
/// # Example
///
/// ```no_run
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// use std::time::Duration;
///
/// let lease = client.keeper().grant(Duration::from_secs(5)).await?;
/// client
///     .kv()
///     .put("workers/me", "alive", etcd_ha::PutOptions::new().with_lease(lease.id()))
///     .await?;
/// // ... work while the lease is kept; stop when it is lost.
/// lease.lost().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Keeper {
    shared: Arc<Shared>,
}

/// What the keeper's handles and its task share.
struct Shared {
    /// Weak: the keeper lives inside the client's transport and must not keep it alive.
    transport: Weak<Transport>,
    /// The running task's command sender; `None` while no task runs. Senders and the task's
    /// exit handshake take this lock, so a command never lands in a stopping task.
    task: Mutex<Option<mpsc::UnboundedSender<Command>>>,
    /// Lease id -> its registration, so that keeping a lease twice shares one renewal.
    kept: Mutex<HashMap<i64, (u64, Weak<Handle>)>>,
    /// Tells registrations of the same lease id apart.
    next_generation: AtomicU64,
    /// The size of `kept` at which `register` next sweeps it of dropped handles; read and
    /// written only under the `kept` lock.
    sweep_at: AtomicUsize,
    /// Keep-alive streams opened so far (one, unless failures forced reopening).
    streams_opened: AtomicU64,
    /// Kept leases at risk now, as the task last counted them.
    at_risk: AtomicUsize,
    /// Keep-alive streams that the server ended or that failed, as opposed to those the keeper
    /// left for a better member (silence, ill health, a stall).
    streams_broken: AtomicU64,
    /// URL of the member serving the stream now, for tests and debugging.
    stream_endpoint: Mutex<Option<Arc<str>>>,
}

impl Keeper {
    pub(crate) fn new(transport: Weak<Transport>) -> Keeper {
        Keeper {
            shared: Arc::new(Shared {
                transport,
                task: Mutex::new(None),
                kept: Mutex::new(HashMap::new()),
                next_generation: AtomicU64::new(1),
                sweep_at: AtomicUsize::new(SWEEP_FLOOR),
                streams_opened: AtomicU64::new(0),
                at_risk: AtomicUsize::new(0),
                streams_broken: AtomicU64::new(0),
                stream_endpoint: Mutex::new(None),
            }),
        }
    }

    /// Grant a lease of `ttl` (rounded up to whole seconds; etcd may raise it to its minimum,
    /// 2 s with default timing) and keep it alive.
    ///
    /// Its first local expiry counts from the moment the grant was sent.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseTtlTooLarge`] if `ttl` is above [`MAX_LEASE_TTL`] seconds.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// let lease = client.keeper().grant(std::time::Duration::from_secs(10)).await?;
    /// println!("lease {:x}, ttl {:?}", lease.id(), lease.ttl());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn grant(&self, ttl: Duration) -> Result<KeptLease> {
        let transport = self.shared.transport()?;
        let sent = Instant::now();
        let granted = Lease::new(transport, None)
            .grant(ttl::whole_seconds(ttl)?, None)
            .await?;
        // A grant answers a positive TTL; anything else is taken as the shortest there is.
        let ttl = ttl::from_server(granted.ttl).unwrap_or(Duration::from_secs(1));
        let view = View {
            ttl,
            expires_at: ttl::later(sent, ttl),
            confirmed: true,
            renewals: 0,
            lost: None,
        };
        let mut kept = self.shared.lock_kept();
        let handle =
            self.shared
                .register(&mut kept, granted.id, view, ttl::later(sent, ttl / 3))?;
        Ok(KeptLease { handle })
    }

    /// Keep an existing lease alive; `ttl` is its granted TTL.
    ///
    /// Renews it at once and returns after the server's answer, from which the local expiry
    /// counts (and whose TTL replaces `ttl`). Waits for that answer at most `ttl` or the
    /// request timeout, whichever is shorter. Keeping a lease that is already kept returns
    /// another handle on the same renewal.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseNotFound`] if the lease expired or was revoked; [`Error::Timeout`] if no
    /// answer came in time; [`Error::Shutdown`] if the client is gone;
    /// [`Error::LeaseTtlTooLarge`] if `ttl` is above [`MAX_LEASE_TTL`] seconds.
    ///
    /// ```no_run
    /// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
    /// use std::time::Duration;
    /// let id = client.lease().grant(30, None).await?.id;
    /// let lease = client.keeper().keep(id, Duration::from_secs(30)).await?;
    /// assert!(!lease.is_expired());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn keep(&self, lease_id: i64, ttl: Duration) -> Result<KeptLease> {
        let ttl = ttl::checked(ttl)?;
        let handle = {
            let mut kept = self.shared.lock_kept();
            let existing = kept
                .get(&lease_id)
                .and_then(|(_, weak)| weak.upgrade())
                .filter(|h| !h.view.borrow().is_lost(Instant::now()));
            match existing {
                Some(handle) => handle,
                None => {
                    let transport = self.shared.transport()?;
                    let wait = transport
                        .options
                        .request_timeout
                        .map_or(ttl, |t| t.min(ttl));
                    drop(transport);
                    let now = Instant::now();
                    let view = View {
                        ttl,
                        expires_at: ttl::later(now, wait),
                        confirmed: false,
                        renewals: 0,
                        lost: None,
                    };
                    self.shared.register(&mut kept, lease_id, view, now)?
                }
            }
        };
        handle.confirmed().await?;
        Ok(KeptLease { handle })
    }

    /// How many kept leases are at risk now: confirmed, not lost, with less than a third of
    /// their TTL left before their local expiry, because their renewals have fallen behind (a
    /// stream down longer than a failover takes, a server or link too slow for the number of
    /// leases). Each lease falling at risk is also logged (`warn`) and counted
    /// (`etcd_ha_leases_at_risk_total`, with the gauge `etcd_ha_leases_at_risk`; feature
    /// `metrics`), before it is lost: the time left is what an alert has to act on.
    ///
    /// Counted by the keeper's task as it wakes for each lease's moment, so it can trail
    /// [`KeptLease::is_at_risk`] by a scheduler tick.
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// if client.keeper().leases_at_risk() > 0 {
    ///     eprintln!("lease renewals are falling behind");
    /// }
    /// # }
    /// ```
    pub fn leases_at_risk(&self) -> usize {
        self.shared.at_risk.load(Ordering::Relaxed)
    }

    /// How many keep-alive streams this keeper has opened (for tests: one, unless failures
    /// forced it to reopen).
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// assert!(client.keeper().streams_opened() <= 1);
    /// # }
    /// ```
    #[doc(hidden)]
    pub fn streams_opened(&self) -> u64 {
        self.shared.streams_opened.load(Ordering::Relaxed)
    }

    /// How many keep-alive streams ended by the server's doing: closed by it or failed with an
    /// error (for tests: a stream the keeper moved to a better member does not count).
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// assert_eq!(client.keeper().streams_broken(), 0);
    /// # }
    /// ```
    #[doc(hidden)]
    pub fn streams_broken(&self) -> u64 {
        self.shared.streams_broken.load(Ordering::Relaxed)
    }

    /// The endpoint URL of the member serving the keep-alive stream now, if one is open (for
    /// tests: which member to fail).
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// println!("keep-alives go to {:?}", client.keeper().stream_endpoint());
    /// # }
    /// ```
    #[doc(hidden)]
    pub fn stream_endpoint(&self) -> Option<String> {
        self.shared
            .lock_stream_endpoint()
            .as_deref()
            .map(str::to_owned)
    }
}

impl fmt::Debug for Keeper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keeper")
            .field(
                "leases",
                &self
                    .shared
                    .lock_kept()
                    .values()
                    .filter(|(_, weak)| weak.strong_count() > 0)
                    .count(),
            )
            .field("at_risk", &self.leases_at_risk())
            .field("streams_opened", &self.streams_opened())
            .field("streams_broken", &self.streams_broken())
            .finish()
    }
}

impl Shared {
    fn transport(&self) -> Result<Arc<Transport>> {
        self.transport.upgrade().ok_or(Error::Shutdown)
    }

    fn lock_kept(&self) -> MutexGuard<'_, HashMap<i64, (u64, Weak<Handle>)>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_stream_endpoint(&self) -> MutexGuard<'_, Option<Arc<str>>> {
        self.stream_endpoint
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Record which member serves the stream (`None`: no stream).
    fn set_stream_endpoint(&self, url: Option<Arc<str>>) {
        *self.lock_stream_endpoint() = url;
    }

    fn lock_task(&self) -> MutexGuard<'_, Option<mpsc::UnboundedSender<Command>>> {
        self.task.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new registration of `id`, handed to the task; replaces an older one in `kept`.
    fn register(
        self: &Arc<Self>,
        kept: &mut HashMap<i64, (u64, Weak<Handle>)>,
        id: i64,
        view: View,
        next_renewal: Instant,
    ) -> Result<Arc<Handle>> {
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = watch::channel(view);
        let handle = Arc::new(Handle {
            id,
            generation,
            view: rx,
            shared: self.clone(),
        });
        self.send(Command::Keep {
            id,
            generation,
            view: tx,
            next_renewal,
        })?;
        // Dropped handles leave their entries behind (see `forget`): sweep them once the map
        // has doubled since the last sweep. Sweeping on every grant walked every registration
        // per grant, so granting n leases cost n²; this way each costs O(1) amortized.
        if kept.len() >= self.sweep_at.load(Ordering::Relaxed) {
            kept.retain(|_, (_, weak)| weak.strong_count() > 0);
            let next = kept.len().saturating_mul(2).max(SWEEP_FLOOR);
            self.sweep_at.store(next, Ordering::Relaxed);
        }
        kept.insert(id, (generation, Arc::downgrade(&handle)));
        Ok(handle)
    }

    /// Stop renewing registration `generation` of `id` (by [`KeptLease::stop`]): a later
    /// `keep` of the id makes a new registration.
    fn stop(&self, id: i64, generation: u64) {
        {
            let mut kept = self.lock_kept();
            if kept.get(&id).is_some_and(|(g, _)| *g == generation) {
                kept.remove(&id);
            }
        }
        self.forget(id, generation);
    }

    /// Tell the task to stop renewing registration `generation` of `id`. Takes no lock but the
    /// task slot's: it runs when a handle drops, which may happen under the `kept` lock.
    fn forget(&self, id: i64, generation: u64) {
        // No task means nothing is renewed: nothing to stop.
        let _ = self.send_if_running(Command::Forget { id, generation });
    }

    /// Hand `command` to the running task; gives it back if none runs.
    fn send_if_running(&self, command: Command) -> std::result::Result<(), Command> {
        let slot = self.lock_task();
        match slot.as_ref() {
            Some(tx) => tx.send(command).map_err(|e| e.0),
            None => Err(command),
        }
    }

    /// Hand `command` to the task, starting one if none runs (it stops when nothing is kept).
    fn send(self: &Arc<Self>, command: Command) -> Result<()> {
        let mut slot = self.lock_task();
        let command = match slot.as_ref() {
            Some(tx) => match tx.send(command) {
                Ok(()) => return Ok(()),
                // It stopped without clearing the slot (the client went away).
                Err(e) => e.0,
            },
            None => command,
        };
        let transport = self.transport()?;
        if transport.cancel.is_cancelled() {
            return Err(Error::Shutdown);
        }
        let (tx, rx) = mpsc::unbounded_channel();
        // Cannot fail: the receiver is right here.
        let _ = tx.send(command);
        let task = KeeperTask::new(self.clone(), &transport, rx);
        tokio::spawn(
            task.run()
                .instrument(tracing::info_span!("etcd_ha_lease_keeper")),
        );
        *slot = Some(tx);
        Ok(())
    }
}
