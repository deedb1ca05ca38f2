//! The recorder a workload writes its history into: one monotonic base instant, the ops, and
//! how an error from the client is classified (definitely not applied, or maybe applied).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use etcd_ha::proto::etcdserverpb::ResponseHeader;
use etcd_ha::proto::etcdserverpb::response_op::Response as OpResponse;
use etcd_ha::{Client, Compare, CompareOp, DeleteOptions, Error, GetOptions, PutOptions};
use etcd_ha::{Txn, TxnOp};
use tokio::time::Instant;

use crate::history::{Nanos, Op, Outcome, Request, Response};

/// The run's clock and the ops recorded so far. Shared by every workload task; its lock is held
/// only to push, never across an await.
///
/// ```no_run
/// use etcd_ha_check::history::Request;
/// # async fn demo(client: etcd_ha::Client) {
/// let recorder = etcd_ha_check::Recorder::new();
/// let put = Request::Put { key: "rb/1/kv/a".into(), value: "unique-1".into(), lease: None };
/// let outcome = recorder.kv(&client, 0, 0, put).await;
/// # }
/// ```
#[derive(Debug)]
pub struct Recorder {
    base: Instant,
    next_op: AtomicU64,
    ops: Mutex<Vec<Op>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// A recorder whose clock starts now.
    ///
    /// ```
    /// let recorder = etcd_ha_check::Recorder::new();
    /// assert!(recorder.take_ops().is_empty());
    /// ```
    pub fn new() -> Recorder {
        Recorder {
            base: Instant::now(),
            next_op: AtomicU64::new(0),
            ops: Mutex::new(Vec::new()),
        }
    }

    /// Nanoseconds since the run started.
    ///
    /// ```
    /// let recorder = etcd_ha_check::Recorder::new();
    /// let t = recorder.now();
    /// assert!(recorder.now() >= t);
    /// ```
    pub fn now(&self) -> Nanos {
        self.at(Instant::now())
    }

    /// `instant` on the run's clock (0 if it is before the start).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let before = tokio::time::Instant::now();
    /// let recorder = etcd_ha_check::Recorder::new();
    /// assert_eq!(recorder.at(before), 0);
    /// # }
    /// ```
    pub fn at(&self, instant: Instant) -> Nanos {
        instant.saturating_duration_since(self.base).as_nanos() as Nanos
    }

    /// Send `request` through `client` as an operation of the logical process `process` (one
    /// operation at a time per process) on the client numbered `client_id`, record it, and
    /// return its outcome. Every put must write a value no other put writes.
    ///
    /// ```no_run
    /// use etcd_ha_check::history::Request;
    /// # async fn demo(recorder: etcd_ha_check::Recorder, client: etcd_ha::Client) {
    /// let get = Request::Get { key: "rb/1/kv/a".into(), serializable: true };
    /// println!("{:?}", recorder.kv(&client, 1, 0, get).await);
    /// # }
    /// ```
    pub async fn kv(
        &self,
        client: &Client,
        process: u32,
        client_id: u32,
        request: Request,
    ) -> Outcome {
        let call = send(client, &request);
        // `op` owns its copy of the request; `send` borrows this one.
        self.op(process, client_id, request.clone(), call).await
    }

    /// Run `call` as operation `request` of `process` on client `client`, record it, and
    /// return its outcome: for a call of your own that [`kv`](Self::kv) does not make. If the
    /// caller drops the future while the call is in flight, the op is recorded as `Unknown`
    /// (it may have been applied), so nothing sent goes unrecorded.
    ///
    /// ```no_run
    /// use etcd_ha_check::history::{Request, Response};
    /// # async fn demo(recorder: etcd_ha_check::Recorder, client: etcd_ha::Client) {
    /// let request = Request::Delete { key: "rb/1/kv/a".into() };
    /// let call = async {
    ///     let r = client.kv().delete("rb/1/kv/a", etcd_ha::DeleteOptions::new()).await?;
    ///     let revision = r.header.map_or(0, |h| h.revision);
    ///     Ok(Response::Delete { revision, deleted: r.deleted })
    /// };
    /// recorder.op(0, 0, request, call).await;
    /// # }
    /// ```
    pub async fn op<F>(&self, process: u32, client: u32, request: Request, call: F) -> Outcome
    where
        F: Future<Output = Result<Response, Error>>,
    {
        let mut pending = Pending {
            recorder: self,
            op: Some(Op {
                id: self.next_op.fetch_add(1, Ordering::Relaxed),
                process,
                client,
                invoke: self.now(),
                ret: 0,
                request,
                outcome: Outcome::Unknown {
                    error: "dropped by the workload in flight".into(),
                },
            }),
        };
        let result = call.await;
        let outcome = match result {
            Ok(response) => Outcome::Ok(response),
            Err(e) => classify(&e),
        };
        if let Some(op) = pending.op.as_mut() {
            op.outcome = outcome.clone();
        }
        drop(pending);
        outcome
    }

    /// Every op recorded, in invoke order (taken: the recorder is empty after).
    ///
    /// ```
    /// let recorder = etcd_ha_check::Recorder::new();
    /// assert!(recorder.take_ops().is_empty());
    /// ```
    pub fn take_ops(&self) -> Vec<Op> {
        let mut ops = std::mem::take(&mut *self.ops.lock().unwrap());
        ops.sort_by_key(|op| (op.invoke, op.id));
        ops
    }
}

/// What a failed call means for a write, as the client itself says it
/// ([`Error::may_have_applied`]): the checkers hold that claim against the truth (a write
/// reported as not applied must never appear).
///
/// ```
/// use etcd_ha_check::history::Outcome;
/// let outcome = etcd_ha_check::record::classify(&etcd_ha::Error::Timeout);
/// assert!(matches!(outcome, Outcome::Unknown { .. }));
/// ```
pub fn classify(error: &Error) -> Outcome {
    let text = error.to_string();
    if error.may_have_applied() {
        Outcome::Unknown { error: text }
    } else {
        Outcome::Fail { error: text }
    }
}

/// An op being run; recorded when dropped, with whatever outcome it has by then.
struct Pending<'a> {
    recorder: &'a Recorder,
    op: Option<Op>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(mut op) = self.op.take() {
            op.ret = self.recorder.now();
            self.recorder
                .ops
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(op);
        }
    }
}

/// Send `request` through `client` as the checkers read it: a put (with its lease), a
/// delete, a get (linearizable or serializable), a compare-and-swap txn. A fenced put is a
/// holder's write, made by the holder (it panics here).
///
/// ```no_run
/// use etcd_ha_check::history::Request;
/// # async fn demo(client: etcd_ha::Client) -> etcd_ha::Result<()> {
/// let cas = Request::Cas { key: "rb/1/kv/a".into(), expect: None, value: "first".into() };
/// let response = etcd_ha_check::record::send(&client, &cas).await?;
/// # Ok(())
/// # }
/// ```
pub async fn send(client: &Client, request: &Request) -> etcd_ha::Result<Response> {
    let kv = client.kv();
    match request {
        Request::Put { key, value, lease } => {
            let mut options = PutOptions::new();
            if let Some(lease) = lease {
                options = options.with_lease(*lease);
            }
            let r = kv.put(key.as_str(), value.as_str(), options).await?;
            Ok(Response::Put {
                revision: revision(&r.header),
            })
        }
        Request::Delete { key } => {
            let r = kv.delete(key.as_str(), DeleteOptions::new()).await?;
            Ok(Response::Delete {
                revision: revision(&r.header),
                deleted: r.deleted,
            })
        }
        Request::Get { key, serializable } => {
            let mut options = GetOptions::new();
            if *serializable {
                options = options.with_serializable();
            }
            let r = kv.get(key.as_str(), options).await?;
            let kv = r.kvs.first();
            Ok(Response::Get {
                revision: revision(&r.header),
                value: kv.map(|kv| text(&kv.value)),
                mod_revision: kv.map_or(0, |kv| kv.mod_revision),
            })
        }
        Request::Cas { key, expect, value } => {
            let compare = match expect {
                Some(expect) => Compare::value(key.as_str(), CompareOp::Equal, expect.as_str()),
                None => Compare::create_revision(key.as_str(), CompareOp::Equal, 0),
            };
            let txn = Txn::new()
                .when([compare])
                .and_then([TxnOp::put(key.as_str(), value.as_str(), PutOptions::new())])
                .or_else([TxnOp::get(key.as_str(), GetOptions::new())]);
            let r = kv.txn(txn).await?;
            let value = r.responses.first().and_then(|op| match &op.response {
                Some(OpResponse::ResponseRange(range)) => {
                    range.kvs.first().map(|kv| text(&kv.value))
                }
                _ => None,
            });
            Ok(Response::Cas {
                revision: revision(&r.header),
                succeeded: r.succeeded,
                value: if r.succeeded { None } else { value },
            })
        }
        Request::FencedPut { .. } => panic!("a fenced put is made by its holder, not sent"),
        Request::CacheGet { .. } => panic!("a cache read is made through its cache, not sent"),
    }
}

/// The revision of an answer's header (0 without one).
///
/// ```
/// assert_eq!(etcd_ha_check::record::revision(&None), 0);
/// ```
pub fn revision(header: &Option<ResponseHeader>) -> i64 {
    header.as_ref().map_or(0, |h| h.revision)
}

/// A value as the history keeps it (lossy UTF-8: the workload writes text).
///
/// ```
/// assert_eq!(etcd_ha_check::record::text(b"v1"), "v1");
/// ```
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
