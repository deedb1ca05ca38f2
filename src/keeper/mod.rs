//! The lease keeper: keeps any number of leases alive over one keep-alive stream (a few, when
//! they need more than one stream's share) and says, for each, the moment it can no longer be
//! trusted.
//!
//! How it keeps a lease and when one counts as lost is told on [`Keeper`], for users. The files:
//! `state.rs` is the bookkeeping (no IO, tested with paused time), `queues.rs` its orderings
//! (so that no renewal walks every lease), `task.rs` the task that drives it with one stream,
//! `streams.rs` which stream's task a lease joins, `kept.rs` the lease handles, this file the
//! keeper handle.

mod answers;
mod kept;
mod queues;
mod report;
mod state;
mod streams;
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

#[cfg(doc)]
use crate::Options;
use crate::call::Transport;
use crate::error::{Error, Result};
use crate::lease::Lease;
use kept::Handle;
pub use kept::KeptLease;
use state::View;
use streams::Slot;
use task::{Command, KeeperTask};
pub use ttl::MAX_LEASE_TTL;
pub(crate) use ttl::checked_secs as checked_ttl_secs;

/// Below this many registrations `register` does not sweep dropped ones: a small map costs
/// nothing to keep.
const SWEEP_FLOOR: usize = 64;

/// Keeps leases alive: any number of them, over one keep-alive stream (a few once their
/// renewals need more than one stream's share), renewing each at a third of its TTL and
/// failing over to another member at once when the stream breaks.
///
/// Get the client's shared keeper with [`Client::keeper`](crate::Client::keeper); clones share
/// it.
///
/// # How it keeps a lease
///
/// One background task per [`Client`](crate::Client) owns one `LeaseKeepAlive` stream
/// (leader-routed, with require-leader, so a member cut off from the leader refuses it instead
/// of hanging). etcd answers a stream's keep-alives one at a time, so once the leases need more
/// renewals a second than one stream is given, new leases go to a second task and stream, and
/// so on up to a maximum (see [`Options::with_keep_alive_streams`]); a lease stays on its
/// stream. Each lease is renewed a third of its TTL after the send time of its last answered
/// renewal, one request in flight at a time. When the stream fails, stays silent with
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
    /// One per keep-alive stream the keeper may open (`streams.rs`): its task and what the
    /// task publishes.
    slots: Box<[Slot]>,
    /// The renewals a second one stream is given before a lease joins the next.
    per_stream: u32,
    /// Lease id -> its registration, so that keeping a lease twice shares one renewal.
    kept: Mutex<HashMap<i64, (u64, Weak<Handle>)>>,
    /// Tells registrations of the same lease id apart.
    next_generation: AtomicU64,
    /// The size of `kept` at which `register` next sweeps it of dropped handles; read and
    /// written only under the `kept` lock.
    sweep_at: AtomicUsize,
    /// Keep-alive streams opened so far (one per slot in use, unless failures forced
    /// reopening).
    streams_opened: AtomicU64,
    /// Keep-alive streams that the server ended or that failed, as opposed to those the keeper
    /// left for a better member (silence, ill health, a stall).
    streams_broken: AtomicU64,
}

impl Keeper {
    /// A keeper of the client behind `transport`, which opens at most `streams` keep-alive
    /// streams, one more per `per_stream` renewals a second.
    pub(crate) fn new(transport: Weak<Transport>, streams: usize, per_stream: u32) -> Keeper {
        Keeper {
            shared: Arc::new(Shared::new(transport, streams, per_stream)),
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
        self.shared.at_risk()
    }

    /// How many keep-alive streams this keeper has opened (for tests: one, unless failures
    /// forced it to reopen or its leases need more than one stream's share, see
    /// [`Options::with_keep_alive_streams`](crate::Options::with_keep_alive_streams)).
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
    /// tests: which member to fail); with several streams, the first one's.
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// println!("keep-alives go to {:?}", client.keeper().stream_endpoint());
    /// # }
    /// ```
    #[doc(hidden)]
    pub fn stream_endpoint(&self) -> Option<String> {
        self.shared
            .slots
            .iter()
            .find_map(|slot| slot.lock_stream_endpoint().as_deref().map(str::to_owned))
    }
}

impl Keeper {
    /// The endpoint URL of each keep-alive stream's member, one entry per slot the keeper may
    /// use (`None`: no stream open there), for tests: see
    /// [`Options::with_keep_alive_streams`](crate::Options::with_keep_alive_streams).
    ///
    /// ```no_run
    /// # fn demo(client: etcd_ha::Client) {
    /// let open = client.keeper().stream_endpoints().iter().flatten().count();
    /// println!("{open} keep-alive streams open");
    /// # }
    /// ```
    #[doc(hidden)]
    pub fn stream_endpoints(&self) -> Vec<Option<String>> {
        self.shared
            .slots
            .iter()
            .map(|slot| slot.lock_stream_endpoint().as_deref().map(str::to_owned))
            .collect()
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
    fn new(transport: Weak<Transport>, streams: usize, per_stream: u32) -> Shared {
        Shared {
            transport,
            slots: streams::slots(streams),
            per_stream,
            kept: Mutex::new(HashMap::new()),
            next_generation: AtomicU64::new(1),
            sweep_at: AtomicUsize::new(SWEEP_FLOOR),
            streams_opened: AtomicU64::new(0),
            streams_broken: AtomicU64::new(0),
        }
    }

    /// Kept leases at risk now, over every stream.
    fn at_risk(&self) -> usize {
        self.slots
            .iter()
            .map(|slot| slot.at_risk.load(Ordering::Relaxed))
            .sum()
    }

    fn transport(&self) -> Result<Arc<Transport>> {
        self.transport.upgrade().ok_or(Error::Shutdown)
    }

    fn lock_kept(&self) -> MutexGuard<'_, HashMap<i64, (u64, Weak<Handle>)>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Record which member serves `slot`'s stream (`None`: no stream).
    fn set_stream_endpoint(&self, slot: usize, url: Option<Arc<str>>) {
        *self.slots[slot].lock_stream_endpoint() = url;
    }

    /// A new registration of `id`, handed to a slot's task (the one already renewing `id`, if
    /// any, else the one [`streams::choose`] picks); replaces an older one in `kept`.
    fn register(
        self: &Arc<Self>,
        kept: &mut HashMap<i64, (u64, Weak<Handle>)>,
        id: i64,
        view: View,
        next_renewal: Instant,
    ) -> Result<Arc<Handle>> {
        let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
        let rate = streams::rate(view.ttl);
        // Replacing a registration of the same id in the same task keeps one renewal of it.
        let slot = kept
            .get(&id)
            .and_then(|(_, weak)| weak.upgrade())
            .map_or_else(
                || streams::choose(&self.slots, rate, self.per_stream),
                |h| h.slot,
            );
        let (tx, rx) = watch::channel(view);
        let handle = Arc::new(Handle {
            id,
            generation,
            slot,
            rate,
            view: rx,
            shared: self.clone(),
        });
        self.send(
            slot,
            Command::Keep {
                id,
                generation,
                view: tx,
                next_renewal,
            },
        )?;
        self.slots[slot].add(rate);
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
    fn stop(&self, slot: usize, id: i64, generation: u64) {
        {
            let mut kept = self.lock_kept();
            if kept.get(&id).is_some_and(|(g, _)| *g == generation) {
                kept.remove(&id);
            }
        }
        self.forget(slot, id, generation);
    }

    /// Tell `slot`'s task to stop renewing registration `generation` of `id`. Takes no lock
    /// but the task slot's: it runs when a handle drops, which may happen under the `kept`
    /// lock.
    fn forget(&self, slot: usize, id: i64, generation: u64) {
        // No task means nothing is renewed: nothing to stop.
        let _ = self.send_if_running(slot, Command::Forget { id, generation });
    }

    /// Hand `command` to `slot`'s running task; gives it back if none runs.
    fn send_if_running(&self, slot: usize, command: Command) -> std::result::Result<(), Command> {
        let slot = self.slots[slot].lock_task();
        match slot.as_ref() {
            Some(tx) => tx.send(command).map_err(|e| e.0),
            None => Err(command),
        }
    }

    /// Hand `command` to `index`'s task, starting one if none runs (it stops when nothing is
    /// kept there).
    fn send(self: &Arc<Self>, index: usize, command: Command) -> Result<()> {
        let mut slot = self.slots[index].lock_task();
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
        let task = KeeperTask::new(self.clone(), index, &transport, rx);
        tokio::spawn(
            task.run()
                .instrument(tracing::info_span!("etcd_ha_lease_keeper", stream = index)),
        );
        *slot = Some(tx);
        Ok(())
    }
}
