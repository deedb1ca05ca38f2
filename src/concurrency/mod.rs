//! Coordination recipes on top of keys, leases and watches: a queued [`Election`] (etcd's
//! client-side recipe), PD-style [`Leadership`] with a `lost` signal, and a [`Mutex`]; each holder
//! gets a [`Fence`] to guard its writes. [`stm`] runs read-modify-write closures as transactions.
//!
//! # Which one to use
//!
//! - [`Leadership`] (the PD style): one leader key, created with a lease of its own if absent.
//!   There is no queue; a follower watches the current leader and campaigns again when it is
//!   gone. The holder gets [`LeadershipHeld::lost`], which completes quickly on *anything* that
//!   makes its leadership doubtful: the key deleted or changed, the lease lost or past its
//!   conservative local expiry, or etcd unavailable for longer than a bound. Use it for a
//!   singleton service that must step down before anybody else can step up.
//! - [`Election`] (etcd's `concurrency.Election`): candidates queue under a prefix, each waiting
//!   only for its predecessor (no thundering herd); the leader can [`proclaim`](Leader::proclaim)
//!   a new value and others can [`observe`](Election::observe) the leader. Bound to a
//!   [`Session`](crate::Session).
//! - [`Mutex`] (etcd's `concurrency.Mutex`): the same queue, as a lock.
//! - [`stm::Stm`] (etcd's `concurrency.NewSTM`): no holder at all; a read-modify-write runs
//!   optimistically and again when another writer got in between. Use it for updates of a few
//!   keys that must be atomic (counters, transfers, indexes) rather than for a role.
//!
//! # Fencing
//!
//! A leader or lock holder can be paused (GC, a frozen VM, a slow network) for longer than its
//! lease and wake up believing it still holds. Guard every write that only the holder may make
//! with its [`Fence`]: the write happens only if the holder's key still exists with the create
//! revision it had when it was won. A new holder's key always has a newer create revision, so an
//! ex-holder's fenced write fails instead of clobbering the new holder's work.
//!
//! ```no_run
//! # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
//! use etcd_ha::concurrency::Leadership;
//! use etcd_ha::{PutOptions, Txn, TxnOp};
//!
//! let leadership = Leadership::new(&client, "service/leader", "node-a");
//! let held = leadership.acquire().await?;
//! let write = held.txn(Txn::new().and_then([TxnOp::put("service/state", "x", PutOptions::new())]));
//! if !client.kv().txn(write).await?.succeeded {
//!     // No longer the leader: the write did not happen.
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Waiting in a queue
//!
//! [`Election::campaign`] and [`Mutex::lock`] put a key under the prefix (`prefix/<lease id in
//! hex>`, as etcd's Go client does, so the two interoperate) and then wait until no key created
//! before theirs is left. Each waiter watches only the newest key created before its own (its
//! predecessor), through the managed watch with require-leader, and checks the whole queue again
//! after each delete: a predecessor that gave up is skipped without waking anybody else.

mod cleanup;
mod current;
mod election;
mod fence;
mod health;
mod hold;
mod keys;
mod leadership;
mod limit;
mod mutex;
mod observe;
mod pending;
mod queue;
pub mod stm;

pub(crate) use cleanup::Cleanups;
pub use current::{Campaign, CurrentLeader};
pub use election::{Election, Leader};
pub use fence::Fence;
pub use hold::{LeadershipHeld, LostReason};
pub use leadership::{
    DEFAULT_CAMPAIGN_LIMIT, DEFAULT_CAMPAIGN_WINDOW, DEFAULT_LEADERSHIP_TTL,
    DEFAULT_UNAVAILABLE_BOUND, Leadership,
};
pub use mutex::{Mutex, MutexGuard};
pub use observe::Observe;
