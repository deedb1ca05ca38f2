//! The recorded history of one robustness run: every operation with its invoke and return time,
//! every watch delivery, lease belief, leadership hold and fault, and the ground truth the
//! checkers judge them against.
//!
//! Why this shape: it mirrors what etcd's robustness suite records (`model/history.go`,
//! `client/watch.go`). Times are nanoseconds since the run's one monotonic base instant, so the
//! real-time order of any two records on this machine is known. Every put writes a value no
//! other put writes, so the ground truth tells "applied once", "applied twice" and "not
//! applied" apart. The whole history serializes to JSON: a failing seed leaves it on disk, and
//! the checker self-tests plant bugs into a saved one.

use serde::{Deserialize, Serialize};

/// Nanoseconds since the run started.
pub type Nanos = u64;

/// Everything one seed recorded.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct History {
    /// The seed the workload and the fault schedule were drawn from.
    pub seed: u64,
    /// The etcd version the cluster ran.
    pub etcd_version: String,
    /// The key prefix every workload key lives under (`<prefix>kv/<n>`, `<prefix>lease/...`,
    /// `<prefix>elect/...`).
    pub prefix: String,
    /// KV operations of the workload's logical processes, in invoke order.
    pub ops: Vec<Op>,
    /// The managed watches the workload ran, with what they delivered to the caller.
    pub watches: Vec<WatchLog>,
    /// Leases kept by the workload, with what their holder believed.
    pub leases: Vec<LeaseLog>,
    /// Election, mutex and leadership holds.
    pub holds: Vec<HoldLog>,
    /// Campaigns and locks given up in flight (the caller's timeout) with their session
    /// kept: their key must be gone while the session idles.
    #[serde(default)]
    pub abandoned: Vec<Abandoned>,
    /// The ground truth: every event of the cluster's keyspace under `prefix`, in revision order
    /// (one entry per key changed; a txn changing two keys gives two entries of one revision),
    /// from watch collectors connected to the members directly, not through the fault proxies.
    pub truth: Vec<TruthEvent>,
    /// The cluster's revision when the workload started (every truth event is above it).
    pub start_revision: i64,
    /// The faults injected, in order.
    pub faults: Vec<FaultLog>,
    /// When the workload stopped (the end of every interval still open then).
    pub end: Nanos,
    /// The key of the last write under the prefix, made after the workload stopped, which
    /// every watch still open must deliver before the run ends (`None` in histories recorded
    /// before the liveness check existed: their open watches are not judged for liveness).
    #[serde(default)]
    pub end_marker: Option<String>,
}

/// One KV operation of one logical process. A process runs one operation at a time, so two
/// operations of the same process never overlap.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Op {
    /// Unique in the history.
    pub id: u64,
    /// The logical process that ran it (sequential).
    pub process: u32,
    /// Which `Client` it went through.
    pub client: u32,
    /// When the call was made.
    pub invoke: Nanos,
    /// When it returned; for an `Unknown` outcome this is when the error came back, but the
    /// operation may take effect at any time after `invoke` (linearizability treats its
    /// return as infinitely late).
    pub ret: Nanos,
    /// What was asked.
    pub request: Request,
    /// How it ended (`Unknown` also when the workload dropped the call in flight).
    pub outcome: Outcome,
}

/// What was asked.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Request {
    /// Put a value no other put writes, optionally attached to a lease.
    Put {
        /// The key written.
        key: String,
        /// The value written, unique in the history.
        value: String,
        /// The lease the key is attached to (`None`: no lease).
        lease: Option<i64>,
    },
    /// Delete one key.
    Delete {
        /// The key deleted.
        key: String,
    },
    /// Read one key; `serializable` reads may be answered by any member at any revision it has.
    Get {
        /// The key read.
        key: String,
        /// `true`: a serializable read (the member answers locally); `false`: a linearizable
        /// one.
        serializable: bool,
    },
    /// Txn: if the key's value equals `expect` (`None`: the key does not exist) then put `value`,
    /// else read the key.
    Cas {
        /// The key compared, then written or read.
        key: String,
        /// The value the key must hold for the put (`None`: the key must not exist).
        expect: Option<String>,
        /// The value put if the compare holds, unique in the history.
        value: String,
    },
    /// A write made as holder `hold` (an index into `History::holds`): a txn that puts `value`
    /// at `key` only if the holder's own key still has the create revision it won with.
    FencedPut {
        /// The key written (not the holder's own key).
        key: String,
        /// The value written, unique in the history.
        value: String,
        /// The index into `History::holds` of the hold it was made under.
        hold: usize,
    },
    /// Read one key through a watch-fed `Cache` (answered from the cache's memory, not by a
    /// member).
    CacheGet {
        /// The key read.
        key: String,
        /// `None`: a `Consistent` read (linearizable, judged as a linearizable get);
        /// `Some(token)`: an `AtLeast(token)` read, whose revision must be at least `token`
        /// and whose value the truth's at that revision.
        at_least: Option<i64>,
    },
}

impl Request {
    /// The key the operation reads or writes.
    pub fn key(&self) -> &str {
        match self {
            Request::Put { key, .. }
            | Request::Delete { key }
            | Request::Get { key, .. }
            | Request::CacheGet { key, .. }
            | Request::Cas { key, .. }
            | Request::FencedPut { key, .. } => key,
        }
    }

    /// The unique value it writes, if it writes one.
    pub fn written_value(&self) -> Option<&str> {
        match self {
            Request::Put { value, .. }
            | Request::Cas { value, .. }
            | Request::FencedPut { value, .. } => Some(value),
            Request::Delete { .. } | Request::Get { .. } | Request::CacheGet { .. } => None,
        }
    }

    /// Whether it is a linearizable read: a linearizable get, or a `Consistent` read of a
    /// cache.
    pub fn is_linearizable_read(&self) -> bool {
        matches!(
            self,
            Request::Get {
                serializable: false,
                ..
            } | Request::CacheGet { at_least: None, .. }
        )
    }

    /// Whether it may change the keyspace.
    pub fn is_write(&self) -> bool {
        !matches!(self, Request::Get { .. } | Request::CacheGet { .. })
    }
}

/// How it ended, classified as Jepsen's `definite?` does.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Outcome {
    /// It worked; the answer.
    Ok(Response),
    /// It failed and was definitely not applied (the client or etcd refused it before
    /// proposing anything).
    Fail {
        /// The error, as the client displays it.
        error: String,
    },
    /// It failed and may or may not have been applied (timeout, connection lost after sending).
    Unknown {
        /// The error, as the client displays it (or that the workload dropped the call).
        error: String,
    },
}

/// The answer to a successful operation. `revision` is the response header's revision.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Response {
    /// A put's answer.
    Put {
        /// The revision the put was applied at.
        revision: i64,
    },
    /// A delete's answer.
    Delete {
        /// The delete's revision; when nothing was deleted, the store's revision then (a
        /// delete of nothing makes no revision).
        revision: i64,
        /// How many keys it deleted (0 or 1: it deletes one key).
        deleted: i64,
    },
    /// `value` is `None` when the key does not exist; `mod_revision` is 0 then.
    Get {
        /// The store revision the read was served at.
        revision: i64,
        /// The key's value.
        value: Option<String>,
        /// The revision the key was last written at.
        mod_revision: i64,
    },
    /// `value`: on failure, what the else branch read (`None`: no key).
    Cas {
        /// The put's revision when it succeeded; else the store revision the read was served
        /// at.
        revision: i64,
        /// Whether the compare held, so the put was applied.
        succeeded: bool,
        /// What the else branch read; `None` when the put succeeded.
        value: Option<String>,
    },
    /// A fenced put's answer.
    Fenced {
        /// The put's revision when it succeeded; else the store's revision then.
        revision: i64,
        /// Whether the fence held (the holder's key still had its create revision), so the put
        /// was applied.
        succeeded: bool,
    },
}

impl Response {
    /// The response header's revision.
    pub fn revision(&self) -> i64 {
        match self {
            Response::Put { revision }
            | Response::Delete { revision, .. }
            | Response::Get { revision, .. }
            | Response::Cas { revision, .. }
            | Response::Fenced { revision, .. } => *revision,
        }
    }
}

/// One key changed at one revision, as the members' own watch streams reported it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TruthEvent {
    /// The revision of the change (the key's mod revision; for a delete, the delete's).
    pub revision: i64,
    /// The key changed.
    pub key: String,
    /// Whether the key was put or deleted.
    pub kind: EventKind,
    /// The new value (`None` for a delete).
    pub value: Option<String>,
    /// 0 for a delete.
    pub create_revision: i64,
    /// 0 for a delete.
    pub version: i64,
    /// The lease the key is attached to (0: none).
    pub lease: i64,
    /// When the first collector received it: the change happened at or before this time.
    pub seen_at: Nanos,
}

/// What an event did to its key.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The key was created or given a new value.
    Put,
    /// The key was deleted (by a delete, or by its lease's revoke or expiry).
    Delete,
}

/// One managed watch on a prefix.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WatchLog {
    /// Unique in the history.
    pub id: u32,
    /// The client it was made on (numbered as `Op::client`).
    pub client: u32,
    /// The watched prefix.
    pub prefix: String,
    /// Whether the watch asked for previous key-values.
    pub prev_kv: bool,
    /// The start revision asked for; 0: from now.
    pub start_revision: i64,
    /// For a watch from now: the revision of the creation answer (events start above it).
    /// `None` when the creation never answered.
    pub created_revision: Option<i64>,
    /// When `watch()` was called.
    pub created_at: Nanos,
    /// Whether `watch()` returned a stream (a failed creation is a typed error the caller
    /// retries; a stream that then ends with an error is judged). `false` in histories
    /// recorded before this was: their endings are not judged.
    #[serde(default)]
    pub established: bool,
    /// Everything delivered to the caller, in order.
    pub deliveries: Vec<Delivery>,
    /// How it ended (`None`: still running when the workload stopped).
    pub ended: Option<WatchEnd>,
}

/// One batch the managed watch gave its caller.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Delivery {
    /// When the caller received it.
    pub at: Nanos,
    /// What it was.
    pub batch: Batch,
}

/// What one delivery of a managed watch was, as its `WatchBatch`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Batch {
    /// Events, all of them (the whole of every revision in it), up to `revision`.
    Events {
        /// The revision of the last event.
        revision: i64,
        /// The events, in revision order.
        events: Vec<WatchEvent>,
    },
    /// Nothing else changed in the range up to `revision` (a progress notification).
    Progress {
        /// Every event of the watch up to this revision has been delivered.
        revision: i64,
    },
    /// History up to `compact_revision` was compacted away; the watch ends.
    Compacted {
        /// The revision the cluster was compacted at; events between the watch's last
        /// delivered revision and it are lost.
        compact_revision: i64,
    },
    /// The history was compacted; the watch re-read its range at `revision` (`keys` with their
    /// values) and continues above it.
    Reloaded {
        /// The revision the range was read at.
        revision: i64,
        /// Every key in the range then, with its value.
        keys: Vec<(String, String)>,
    },
}

/// One event as delivered.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct WatchEvent {
    /// The event's revision (the key's mod revision; for a delete, the delete's revision).
    pub revision: i64,
    /// The key changed.
    pub key: String,
    /// Whether the key was put or deleted.
    pub kind: EventKind,
    /// The new value (`None` for a delete).
    pub value: Option<String>,
    /// The key's create revision (0 for a delete).
    pub create_revision: i64,
    /// The key's version (1 when created, one more each put since; 0 for a delete).
    pub version: i64,
    /// The previous value when the watch asked for it; `None` if absent (no key before, or
    /// compacted).
    pub prev_value: Option<String>,
}

/// How a managed watch ended.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum WatchEnd {
    /// The workload cancelled it (it may then start a new watch from the revision it reached:
    /// that one has `start_revision` set).
    Cancelled {
        /// When the workload cancelled it.
        at: Nanos,
    },
    /// It ended with an error.
    Error {
        /// When the error (or the stream's end) reached the caller.
        at: Nanos,
        /// The error as displayed: the creation's when `watch()` failed, "compacted" after a
        /// `Compacted` batch, "stream ended" when the stream closed without an error.
        error: String,
    },
}

/// A lease kept alive by the workload, with the keys put under it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LeaseLog {
    /// The lease's ID.
    pub lease: i64,
    /// The client that granted and kept it (numbered as `Op::client`).
    pub client: u32,
    /// The TTL the server granted, in milliseconds.
    pub ttl_ms: u64,
    /// When the grant was asked for.
    pub granted_at: Nanos,
    /// Keys put under the lease (their puts are ops too).
    pub keys: Vec<String>,
    /// Samples of the holder's belief: at `at`, the keeper said the lease lives until `until`
    /// (its conservative deadline, computed from when the last renewal was sent).
    pub beliefs: Vec<Belief>,
    /// When `lost()` fired, if it did.
    pub lost_at: Option<Nanos>,
    /// When the workload started revoking it on purpose (its keys vanish then, legitimately).
    pub revoked_at: Option<Nanos>,
}

/// One sample of what a lease's keeper believed.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Belief {
    /// When the sample was taken.
    pub at: Nanos,
    /// Until when the keeper said the lease lives (its conservative deadline): the server
    /// must not drop the lease before it.
    pub until: Nanos,
}

/// One time a contender held an election, a mutex or a leadership.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HoldLog {
    /// What was held.
    pub kind: HoldKind,
    /// The election / mutex name or the leadership key: holds of one name must not overlap.
    pub name: String,
    /// The contender (unique per contender task).
    pub contender: u32,
    /// The holder's own key.
    pub key: String,
    /// The create revision `key` won with: the fence every fenced write of the hold compares
    /// against.
    pub create_revision: i64,
    /// When campaign / lock / acquire returned.
    pub acquired_at: Nanos,
    /// When the holder stopped believing it holds: it resigned or unlocked (the call was
    /// made), or it was told it lost. `None`: still held when the workload stopped.
    pub released_at: Option<Nanos>,
    /// Why it ended.
    pub release: Option<Release>,
}

/// Which of the client's primitives a hold is of.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum HoldKind {
    /// An `Election` won by `campaign`.
    Election,
    /// A `Mutex` taken by `lock`.
    Mutex,
    /// A `Leadership` taken by `acquire`.
    Leadership,
}

/// Why a hold ended.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum Release {
    /// The holder gave it up (resign / unlock).
    Resigned,
    /// The client said it was lost (session or lease lost, key gone, etcd unavailable too long).
    Lost,
}

/// One fault: what was done and when it started and ended.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FaultLog {
    /// The fault's name, as `Fault` prints it (`KillLeader`).
    pub kind: String,
    /// Which member(s), if any.
    pub member: Option<usize>,
    /// When the scheduler began injecting it.
    pub start: Nanos,
    /// When it was healed (before the wait for the cluster to be ready again).
    pub end: Nanos,
    /// Anything else worth printing (e.g. the compaction revision).
    pub detail: String,
}

/// A campaign or lock whose caller gave up while it was in flight (a 0-3 ms timeout), its
/// session kept alive afterwards: no key of it may stay behind to block other candidates.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Abandoned {
    /// The contender that gave up (numbered as `HoldLog::contender`).
    pub contender: u32,
    /// The key the campaign would have made (`<name>/<session lease, hex>`).
    pub key: String,
    /// When the caller gave up.
    pub at: Nanos,
    /// When the session, idle since, was used again (or closed): the key must be gone by then.
    pub checked_at: Nanos,
}
