//! The recorder the workload writes its history into: one monotonic base instant, the ops, and
//! how an error from the client is classified (definitely not applied, or maybe applied).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use etcd_ha::Error;
use tokio::time::Instant;

use crate::history::{Nanos, Op, Outcome, Request, Response};

/// The run's clock and the ops recorded so far. Shared by every workload task; its lock is held
/// only to push, never across an await.
pub struct Recorder {
    base: Instant,
    next_op: AtomicU64,
    ops: Mutex<Vec<Op>>,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            base: Instant::now(),
            next_op: AtomicU64::new(0),
            ops: Mutex::new(Vec::new()),
        }
    }

    /// Nanoseconds since the run started.
    pub fn now(&self) -> Nanos {
        self.at(Instant::now())
    }

    /// `instant` on the run's clock (0 if it is before the start).
    pub fn at(&self, instant: Instant) -> Nanos {
        instant.saturating_duration_since(self.base).as_nanos() as Nanos
    }

    /// Run `call` as operation `request` of `process` on `client`, record it, and return its
    /// outcome. If the caller drops the future while the call is in flight, the op is recorded
    /// as `Unknown` (it may have been applied), so nothing sent goes unrecorded.
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

    /// Every op recorded, in invoke order.
    pub fn take_ops(&self) -> Vec<Op> {
        let mut ops = std::mem::take(&mut *self.ops.lock().unwrap());
        ops.sort_by_key(|op| (op.invoke, op.id));
        ops
    }
}

/// What a failed call means for a write, as the client itself says it
/// ([`Error::may_have_applied`]): the suite checks that claim against the truth (a write
/// reported as not applied must never appear).
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
