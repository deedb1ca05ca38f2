//! Where a request should be served: the route column of the RPC table (`rpc.rs`), which the
//! balancer's pick policy reads.

/// Where a request should be served.
///
/// ```
/// use etcd_ha::rpc::{Route, Rpc};
/// assert_eq!(Rpc::Range { serializable: true }.route(), Route::Any);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Route {
    /// Needs the raft leader's agreement (writes, linearizable reads, lease, election, lock):
    /// the leader if it is healthy, else the healthiest, fastest member (which forwards).
    Leader,
    /// Only the leader itself can serve it (`MoveLeader`: a follower answers "not leader"
    /// instead of forwarding). As [`Route::Leader`], but never through a follower's forward,
    /// not even around a slow link to the leader.
    ///
    /// ```
    /// use etcd_ha::rpc::{Route, Rpc};
    /// assert_eq!(Rpc::MoveLeader.route(), Route::LeaderItself);
    /// assert!(Route::LeaderItself.is_leader_bound());
    /// ```
    LeaderItself,
    /// Can be served from any member's local state: the fastest healthy member, load spread.
    Any,
    /// A call about one particular member (maintenance pinned with `on()`).
    Pinned,
}

impl Route {
    /// Whether the call needs the raft leader: [`Route::Leader`] or [`Route::LeaderItself`].
    ///
    /// ```
    /// use etcd_ha::rpc::Route;
    /// assert!(Route::Leader.is_leader_bound());
    /// assert!(!Route::Any.is_leader_bound());
    /// ```
    pub fn is_leader_bound(self) -> bool {
        matches!(self, Route::Leader | Route::LeaderItself)
    }
}
