//! The one table: every etcd v3 RPC, where it should go, and whether it is safe to send twice.
//!
//! Routing and retry decisions read this table and nothing else, so adding an RPC means adding one
//! row here (and, if unary, one in `call/typed.rs`: its request type, answer and method). The idempotency column follows etcd's Go client (`client/v3/retry.go`): reads,
//! keep-alives and lease lookups are *repeatable*; everything that changes the key space, the
//! leases, the membership or the auth store is not, and is only re-sent when it provably never
//! left this client or etcd refused it before doing anything.
//!
//! Why a lease grant or revoke is *not* repeatable, although etcd's Go client retries them: a
//! second grant without an id leaves an orphan lease (alive for its whole TTL, holding whatever
//! the caller never learns about), a second grant with an id answers "lease already exists",
//! and a second revoke answers "lease not found", while the first attempt succeeded. Hedging
//! sends exactly such duplicates, and the duplicate's error can reach the caller first.

use crate::proto::etcdserverpb::{TxnRequest, request_op};

#[path = "rpc_route.rs"]
mod route;
pub use route::Route;

/// Whether sending a request twice can do harm.
///
/// ```
/// use etcd_ha::rpc::{Idempotency, Rpc};
/// assert_eq!(Rpc::Txn { read_only: false }.idempotency(), Idempotency::AtMostOnce);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Idempotency {
    /// Repeating it changes nothing: retried on any transient failure, and hedged when it is
    /// slow.
    Repeatable,
    /// Repeating it may apply it twice: retried only when it never left the client, or when
    /// the server provably rejected it before doing anything ("no leader", "too many requests").
    AtMostOnce,
}

/// Every unary and streaming RPC the client sends.
///
/// ```
/// use etcd_ha::rpc::Rpc;
/// let rpc = Rpc::from_path("/etcdserverpb.Lease/LeaseGrant").unwrap();
/// assert_eq!((rpc.service(), rpc.name()), ("etcdserverpb.Lease", "LeaseGrant"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(missing_docs)]
pub enum Rpc {
    // KV
    Range {
        serializable: bool,
    },
    /// etcd 3.7+: a range answered as a stream of chunks (older members answer Unimplemented).
    RangeStream {
        serializable: bool,
    },
    Put,
    DeleteRange,
    Txn {
        read_only: bool,
    },
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
    Alarm {
        get: bool,
    },
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
    /// Every RPC once, in the order of the `.proto` files. Where a row has a flag, the
    /// conservative one is listed: a Range that must be linearizable, a Txn that may write, an
    /// Alarm that may change something. That is what a request is taken for when only its gRPC
    /// path is known (see [`Rpc::from_path`]).
    ///
    /// ```
    /// use etcd_ha::rpc::Rpc;
    /// assert_eq!(Rpc::ALL.len(), 49);
    /// assert!(Rpc::ALL.contains(&Rpc::Watch));
    /// ```
    pub const ALL: [Rpc; 49] = {
        use Rpc::*;
        [
            Range {
                serializable: false,
            },
            RangeStream {
                serializable: false,
            },
            Put,
            DeleteRange,
            Txn { read_only: false },
            Compact,
            Watch,
            LeaseGrant,
            LeaseRevoke,
            LeaseKeepAlive,
            LeaseTimeToLive,
            LeaseLeases,
            MemberAdd,
            MemberRemove,
            MemberUpdate,
            MemberList,
            MemberPromote,
            Alarm { get: false },
            Status,
            Defragment,
            Hash,
            HashKv,
            Snapshot,
            MoveLeader,
            Downgrade,
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
            Campaign,
            Proclaim,
            Leader,
            Observe,
            Resign,
            Lock,
            Unlock,
        ]
    };

    /// The RPC a gRPC request path names (`/etcdserverpb.KV/Put`), or `None` for a method that
    /// is not etcd's. The path cannot tell a serializable Range, a read-only Txn or an alarm
    /// listing from their stricter kin, so it yields the stricter row of [`Rpc::ALL`]: such
    /// calls go to the leader, which is always correct and only sometimes slower.
    ///
    /// ```
    /// use etcd_ha::rpc::Rpc;
    /// assert_eq!(Rpc::from_path("/etcdserverpb.KV/Put"), Some(Rpc::Put));
    /// assert_eq!(Rpc::from_path("/etcdserverpb.KV/Range"), Some(Rpc::Range { serializable: false }));
    /// assert_eq!(Rpc::from_path("/v3lockpb.Lock/Lock"), Some(Rpc::Lock));
    /// assert_eq!(Rpc::from_path("/grpc.health.v1.Health/Check"), None);
    /// ```
    pub fn from_path(path: &str) -> Option<Rpc> {
        let (service, method) = path.strip_prefix('/')?.split_once('/')?;
        Rpc::ALL
            .into_iter()
            .find(|rpc| rpc.service() == service && rpc.name() == method)
    }

    /// The fully qualified gRPC service that serves this RPC.
    ///
    /// ```
    /// use etcd_ha::rpc::Rpc;
    /// assert_eq!(Rpc::Put.service(), "etcdserverpb.KV");
    /// assert_eq!(Rpc::Campaign.service(), "v3electionpb.Election");
    /// ```
    pub fn service(self) -> &'static str {
        use Rpc::*;
        match self {
            Range { .. } | RangeStream { .. } | Put | DeleteRange | Txn { .. } | Compact => {
                "etcdserverpb.KV"
            }
            Watch => "etcdserverpb.Watch",
            LeaseGrant | LeaseRevoke | LeaseKeepAlive | LeaseTimeToLive | LeaseLeases => {
                "etcdserverpb.Lease"
            }
            MemberAdd | MemberRemove | MemberUpdate | MemberList | MemberPromote => {
                "etcdserverpb.Cluster"
            }
            Alarm { .. }
            | Status
            | Defragment
            | Hash
            | HashKv
            | Snapshot
            | MoveLeader
            | Downgrade => "etcdserverpb.Maintenance",
            AuthEnable | AuthDisable | AuthStatus | Authenticate | UserAdd | UserGet | UserList
            | UserDelete | UserChangePassword | UserGrantRole | UserRevokeRole | RoleAdd
            | RoleGet | RoleList | RoleDelete | RoleGrantPermission | RoleRevokePermission => {
                "etcdserverpb.Auth"
            }
            Campaign | Proclaim | Leader | Observe | Resign => "v3electionpb.Election",
            Lock | Unlock => "v3lockpb.Lock",
        }
    }

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
            Range { serializable: true } | RangeStream { serializable: true } => Route::Any,
            // Member list and status are answered from local state; auth reads are
            // linearizable in etcd, so they stay with the leader.
            MemberList | Status | Hash | HashKv | Snapshot | Defragment | Alarm { .. } => {
                Route::Any
            }
            // Any member serves watches from its own store; spreading them spares the leader.
            Watch => Route::Any,
            // The leader checks that it leads before moving its leadership; a follower refuses.
            MoveLeader => Route::LeaderItself,
            Downgrade => Route::Leader,
            _ => Route::Leader,
        }
    }

    /// Whether the request may be sent again after an ambiguous failure.
    ///
    /// ```
    /// use etcd_ha::rpc::{Idempotency, Rpc};
    /// assert_eq!(Rpc::Range { serializable: false }.idempotency(), Idempotency::Repeatable);
    /// assert_eq!(Rpc::Put.idempotency(), Idempotency::AtMostOnce);
    /// assert_eq!(Rpc::LeaseGrant.idempotency(), Idempotency::AtMostOnce);
    /// ```
    pub fn idempotency(self) -> Idempotency {
        use Rpc::*;
        match self {
            Range { .. }
            | RangeStream { .. }
            | Txn { read_only: true }
            | LeaseKeepAlive
            | LeaseTimeToLive
            | LeaseLeases
            | MemberList
            | Alarm { get: true }
            | Status
            | Hash
            | HashKv
            | Snapshot
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
            // A duplicate grant or revoke answers "lease already exists" / "lease not found"
            // (or leaves an orphan lease) although the first one succeeded: see the module docs.
            | LeaseGrant
            | LeaseRevoke
            | MemberAdd
            | MemberRemove
            | MemberUpdate
            | MemberPromote
            | Alarm { get: false }
            | Defragment
            | Downgrade
            // Sent again after an ambiguous success, it would move leadership a second time.
            | MoveLeader
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

    /// Whether a slow attempt may be sent again to another member while it still runs (a
    /// hedge): a repeatable request, except `Authenticate`, where each attempt costs the
    /// server a bcrypt hash and mints a token of its own.
    ///
    /// ```
    /// use etcd_ha::rpc::Rpc;
    /// assert!(Rpc::Range { serializable: true }.hedgeable());
    /// assert!(!Rpc::Authenticate.hedgeable());
    /// assert!(!Rpc::Put.hedgeable());
    /// ```
    pub fn hedgeable(self) -> bool {
        self.idempotency() == Idempotency::Repeatable && self != Rpc::Authenticate
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
            | RangeStream { serializable: true }
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
            _ => self.route().is_leader_bound(),
        }
    }

    /// Whether the server may hold the call open for long by design: streams (watch, keep-alive,
    /// snapshot, observe) and calls that wait for something (Campaign and Lock wait for their
    /// turn, Defragment rewrites the whole database). Silence from a member on such a call says
    /// nothing about its health.
    ///
    /// ```
    /// use etcd_ha::rpc::Rpc;
    /// assert!(Rpc::Lock.holds_open());
    /// assert!(!Rpc::Put.holds_open());
    /// ```
    pub fn holds_open(self) -> bool {
        use Rpc::*;
        matches!(
            self,
            Watch | LeaseKeepAlive | Snapshot | Observe | Campaign | Lock | Defragment
        )
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
            RangeStream { .. } => "RangeStream",
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

/// Whether every operation of a txn (nested ones included) is a read: such a txn is
/// [`Rpc::Txn`] with `read_only`, repeatable.
pub(crate) fn txn_is_read_only(txn: &TxnRequest) -> bool {
    txn.success
        .iter()
        .chain(&txn.failure)
        .all(|op| match &op.request {
            Some(request_op::Request::RequestRange(_)) | None => true,
            Some(request_op::Request::RequestTxn(inner)) => txn_is_read_only(inner),
            Some(_) => false,
        })
}

#[cfg(test)]
#[path = "rpc_tests.rs"]
mod tests;
