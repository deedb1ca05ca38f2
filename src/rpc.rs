//! The one table: every etcd v3 RPC, where it should go, and whether it is safe to send twice.
//!
//! Routing and retry decisions read this table and nothing else, so adding an RPC means adding one
//! row here. The idempotency column follows etcd's Go client (`client/v3/retry.go`): reads and
//! lease bookkeeping are *repeatable*; everything that changes the key space, the membership or
//! the auth store is not, and is only re-sent when it provably never left this client.

/// Where a request should be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// Needs the raft leader's agreement (writes, linearizable reads, lease, election, lock):
    /// the leader if it is healthy, else the healthiest, fastest member (which forwards).
    Leader,
    /// Can be served from any member's local state: the fastest healthy member, load spread.
    Any,
    /// A call about one particular member (maintenance pinned with `on()`).
    Pinned,
}

/// Whether sending a request twice can do harm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Idempotency {
    /// Repeating it changes nothing (or only creates garbage that expires, like a second
    /// lease grant): retried on any transient failure, and hedged when it is slow.
    Repeatable,
    /// Repeating it may apply it twice: retried only when it never left the client, or when
    /// the server provably rejected it before doing anything ("no leader", "too many requests").
    AtMostOnce,
}

/// Every unary and streaming RPC the client sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(missing_docs)]
pub enum Rpc {
    // KV
    Range { serializable: bool },
    Put,
    DeleteRange,
    Txn { read_only: bool },
    Compact,
    // Watch and Lease streams
    Watch,
    LeaseGrant,
    LeaseRevoke,
    LeaseKeepAlive,
    LeaseTimeToLive,
    LeaseLeases,
    // Cluster
    MemberAdd,
    MemberRemove,
    MemberUpdate,
    MemberList,
    MemberPromote,
    // Maintenance
    Alarm { get: bool },
    Status,
    Defragment,
    Hash,
    HashKv,
    Snapshot,
    MoveLeader,
    Downgrade,
    // Auth
    AuthEnable,
    AuthDisable,
    AuthStatus,
    Authenticate,
    UserAdd,
    UserGet,
    UserList,
    UserDelete,
    UserChangePassword,
    UserGrantRole,
    UserRevokeRole,
    RoleAdd,
    RoleGet,
    RoleList,
    RoleDelete,
    RoleGrantPermission,
    RoleRevokePermission,
    // v3election and v3lock
    Campaign,
    Proclaim,
    Leader,
    Observe,
    Resign,
    Lock,
    Unlock,
}

impl Rpc {
    /// Where this request should go.
    ///
    /// ```
    /// use etcd_ha::rpc::{Route, Rpc};
    /// assert_eq!(Rpc::Put.route(), Route::Leader);
    /// assert_eq!(Rpc::Range { serializable: true }.route(), Route::Any);
    /// ```
    pub fn route(self) -> Route {
        use Rpc::*;
        match self {
            Range { serializable: true } => Route::Any,
            // Member list and status are answered from local state; auth reads are
            // linearizable in etcd, so they stay with the leader.
            MemberList | Status | Hash | HashKv | Snapshot | Defragment | Alarm { .. } => {
                Route::Any
            }
            // Any member serves watches from its own store; spreading them spares the leader.
            Watch => Route::Any,
            Downgrade | MoveLeader => Route::Leader,
            _ => Route::Leader,
        }
    }

    /// Whether the request may be sent again after an ambiguous failure.
    ///
    /// ```
    /// use etcd_ha::rpc::{Idempotency, Rpc};
    /// assert_eq!(Rpc::Range { serializable: false }.idempotency(), Idempotency::Repeatable);
    /// assert_eq!(Rpc::Put.idempotency(), Idempotency::AtMostOnce);
    /// ```
    pub fn idempotency(self) -> Idempotency {
        use Rpc::*;
        match self {
            Range { .. }
            | Txn { read_only: true }
            | LeaseGrant
            | LeaseRevoke
            | LeaseKeepAlive
            | LeaseTimeToLive
            | LeaseLeases
            | MemberList
            | Alarm { get: true }
            | Status
            | Hash
            | HashKv
            | Snapshot
            | MoveLeader
            | AuthStatus
            | Authenticate
            | UserGet
            | UserList
            | RoleGet
            | RoleList
            | Leader
            | Observe
            | Watch => Idempotency::Repeatable,
            Put
            | DeleteRange
            | Txn { read_only: false }
            | Compact
            | MemberAdd
            | MemberRemove
            | MemberUpdate
            | MemberPromote
            | Alarm { get: false }
            | Defragment
            | Downgrade
            | AuthEnable
            | AuthDisable
            | UserAdd
            | UserDelete
            | UserChangePassword
            | UserGrantRole
            | UserRevokeRole
            | RoleAdd
            | RoleDelete
            | RoleGrantPermission
            | RoleRevokePermission
            | Campaign
            | Proclaim
            | Resign
            | Lock
            | Unlock => Idempotency::AtMostOnce,
        }
    }

    /// Whether the request carries `hasleader=true` when require-leader is on: every call that
    /// needs a leader to succeed, so a member that lost its leader refuses it at once instead of
    /// holding it for etcd's 7 s request timeout.
    ///
    /// ```
    /// use etcd_ha::rpc::Rpc;
    /// assert!(Rpc::Put.requires_leader());
    /// assert!(!Rpc::Range { serializable: true }.requires_leader());
    /// ```
    pub fn requires_leader(self) -> bool {
        use Rpc::*;
        match self {
            Range { serializable: true }
            | MemberList
            | Status
            | Hash
            | HashKv
            | Snapshot
            | Defragment
            | Alarm { .. }
            | Authenticate => false,
            // A watch on a member cut off from the leader would silently stop: with
            // require-leader etcd cancels it after three election timeouts instead.
            Watch => true,
            _ => self.route() == Route::Leader,
        }
    }

    /// The gRPC method name, for logs and metrics.
    ///
    /// ```
    /// assert_eq!(etcd_ha::rpc::Rpc::Put.name(), "Put");
    /// ```
    pub fn name(self) -> &'static str {
        use Rpc::*;
        match self {
            Range { .. } => "Range",
            Put => "Put",
            DeleteRange => "DeleteRange",
            Txn { .. } => "Txn",
            Compact => "Compact",
            Watch => "Watch",
            LeaseGrant => "LeaseGrant",
            LeaseRevoke => "LeaseRevoke",
            LeaseKeepAlive => "LeaseKeepAlive",
            LeaseTimeToLive => "LeaseTimeToLive",
            LeaseLeases => "LeaseLeases",
            MemberAdd => "MemberAdd",
            MemberRemove => "MemberRemove",
            MemberUpdate => "MemberUpdate",
            MemberList => "MemberList",
            MemberPromote => "MemberPromote",
            Alarm { .. } => "Alarm",
            Status => "Status",
            Defragment => "Defragment",
            Hash => "Hash",
            HashKv => "HashKV",
            Snapshot => "Snapshot",
            MoveLeader => "MoveLeader",
            Downgrade => "Downgrade",
            AuthEnable => "AuthEnable",
            AuthDisable => "AuthDisable",
            AuthStatus => "AuthStatus",
            Authenticate => "Authenticate",
            UserAdd => "UserAdd",
            UserGet => "UserGet",
            UserList => "UserList",
            UserDelete => "UserDelete",
            UserChangePassword => "UserChangePassword",
            UserGrantRole => "UserGrantRole",
            UserRevokeRole => "UserRevokeRole",
            RoleAdd => "RoleAdd",
            RoleGet => "RoleGet",
            RoleList => "RoleList",
            RoleDelete => "RoleDelete",
            RoleGrantPermission => "RoleGrantPermission",
            RoleRevokePermission => "RoleRevokePermission",
            Campaign => "Campaign",
            Proclaim => "Proclaim",
            Leader => "Leader",
            Observe => "Observe",
            Resign => "Resign",
            Lock => "Lock",
            Unlock => "Unlock",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_at_most_once() {
        for rpc in [
            Rpc::Put,
            Rpc::DeleteRange,
            Rpc::Txn { read_only: false },
            Rpc::Compact,
            Rpc::MemberAdd,
            Rpc::Lock,
        ] {
            assert_eq!(rpc.idempotency(), Idempotency::AtMostOnce, "{rpc:?}");
            assert!(rpc.requires_leader(), "{rpc:?}");
        }
    }

    #[test]
    fn watches_spread_but_require_a_leader() {
        assert_eq!(Rpc::Watch.route(), Route::Any);
        assert!(Rpc::Watch.requires_leader());
        assert_eq!(Rpc::Watch.idempotency(), Idempotency::Repeatable);
    }

    #[test]
    fn serializable_reads_go_anywhere_without_leader() {
        let r = Rpc::Range { serializable: true };
        assert_eq!(r.route(), Route::Any);
        assert!(!r.requires_leader());
        let l = Rpc::Range {
            serializable: false,
        };
        assert_eq!(l.route(), Route::Leader);
        assert!(l.requires_leader());
        assert_eq!(l.idempotency(), Idempotency::Repeatable);
    }
}
