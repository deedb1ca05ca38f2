//! What a [`Leadership`](super::Leadership) campaign and read see: the [`CurrentLeader`] as
//! read from etcd, and a [`Campaign`]'s outcome.

use super::fence::Fence;
use super::hold::LeadershipHeld;
use crate::proto::mvccpb::KeyValue;

/// The leader as read from etcd: its key-value and the revision it was read at (where a watch
/// of it starts).
///
/// ```no_run
/// # async fn demo(leadership: etcd_ha::concurrency::Leadership) -> etcd_ha::Result<()> {
/// if let Some(leader) = leadership.current().await? {
///     println!("led by {}", String::from_utf8_lossy(leader.value()));
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct CurrentLeader {
    /// The leader key as read.
    pub(super) kv: KeyValue,
    /// The revision of the read.
    pub(super) revision: i64,
}

impl CurrentLeader {
    /// The leader key-value (key, value, create revision, lease).
    ///
    /// ```no_run
    /// # fn demo(leader: etcd_ha::concurrency::CurrentLeader) {
    /// println!("lease {:x}", leader.kv().lease);
    /// # }
    /// ```
    pub fn kv(&self) -> &KeyValue {
        &self.kv
    }

    /// The leader's value (what it campaigned with).
    ///
    /// ```no_run
    /// # fn demo(leader: etcd_ha::concurrency::CurrentLeader) {
    /// let who = String::from_utf8_lossy(leader.value());
    /// # }
    /// ```
    pub fn value(&self) -> &[u8] {
        &self.kv.value
    }

    /// The revision at which this was read.
    ///
    /// ```no_run
    /// # fn demo(leader: etcd_ha::concurrency::CurrentLeader) {
    /// let seen_at = leader.revision();
    /// # }
    /// ```
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The leader's fence: writes guarded by it succeed only while this leader leads.
    ///
    /// ```no_run
    /// # fn demo(leader: etcd_ha::concurrency::CurrentLeader) {
    /// let compare = leader.fence().compare();
    /// # }
    /// ```
    pub fn fence(&self) -> Fence {
        Fence::new(self.kv.key.clone(), self.kv.create_revision)
    }
}

/// The outcome of one [`Leadership::campaign`](super::Leadership::campaign).
///
/// ```no_run
/// # async fn demo(leadership: etcd_ha::concurrency::Leadership) -> etcd_ha::Result<()> {
/// use etcd_ha::concurrency::Campaign;
/// match leadership.campaign().await? {
///     Campaign::Won(held) => println!("leading at revision {}", held.create_revision()),
///     Campaign::Lost(leader) => println!("following {:?}", leader.value()),
///     // Campaign is #[non_exhaustive]: a later version may tell more outcomes apart.
///     _ => {}
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use]
#[non_exhaustive]
pub enum Campaign {
    /// We created the leader key: we lead.
    Won(LeadershipHeld),
    /// Somebody else holds the leader key.
    Lost(CurrentLeader),
}
