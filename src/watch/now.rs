//! The cluster's "now" for watches made from now: one quorum read shared by every watch asked
//! for while it was on its way, so that making 100,000 watches costs a few reads, not 100,000.
//!
//! A watch from now must deliver every write acknowledged before it was asked for, and none
//! at or below the revision it starts after; any linearizable read that *started after the
//! watch was asked for* gives such a revision. So a caller never takes a read that was already
//! in flight when it arrived (that one may predate a write the caller saw acknowledged): it
//! waits for it to end, then takes the next one, started by whichever waiter comes first.
//!
//! ```text
//!  caller A  ──arrives── starts read 1 ─────────────── 1 answers: A gets it
//!  caller B        ──arrives (read 1 in flight) ─ waits ─ starts read 2 ── 2 answers: B, C get it
//!  caller C                        ──arrives ─────── waits ──────────────┘
//! ```
//!
//! A read that fails or whose caller gave up is published as such; a waiter that needed it
//! reads on its own, so one failure costs each waiter one read of its own, never a hang.

use std::future::Future;
use std::sync::Mutex;

use tokio::sync::watch;

use crate::error::Result;

/// Shared "now" reads for one client's managed watches.
#[derive(Debug)]
pub(crate) struct ClusterNow {
    /// Reads started so far, and whether one is on its way: they change together.
    state: Mutex<Started>,
    /// The newest read that ended: its number and its revision (`None`: it failed or its
    /// caller gave up).
    ended: watch::Sender<(u64, Option<i64>)>,
}

#[derive(Debug, Default)]
struct Started {
    reads: u64,
    in_flight: bool,
}

impl Default for ClusterNow {
    fn default() -> Self {
        ClusterNow {
            state: Mutex::new(Started::default()),
            ended: watch::Sender::new((0, None)),
        }
    }
}

/// Ends the leader's read when its future is dropped before the answer, so waiters do not
/// wait for a read nobody will finish.
struct Leading<'a> {
    now: &'a ClusterNow,
    read: u64,
    revision: Option<i64>,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.now
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .in_flight = false;
        self.now.ended.send_replace((self.read, self.revision));
    }
}

impl ClusterNow {
    /// A revision at least the cluster's when this was called: from a read started after the
    /// call (another caller's, or `read` itself).
    pub(crate) async fn get<F, Fut>(&self, read: F) -> Result<i64>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<i64>>,
    {
        let mut ended = self.ended.subscribe();
        let arrived = self.lock().reads;
        loop {
            // Any read started after the arrival serves.
            let (number, revision) = *ended.borrow_and_update();
            if number > arrived {
                match revision {
                    Some(revision) => return Ok(revision),
                    // It failed or was dropped: read alone, once.
                    None => return read().await,
                }
            }
            let lead = {
                let mut state = self.lock();
                if state.in_flight {
                    None
                } else {
                    state.in_flight = true;
                    state.reads += 1;
                    Some(state.reads)
                }
            };
            let Some(number) = lead else {
                if ended.changed().await.is_err() {
                    return read().await;
                }
                continue;
            };
            let mut leading = Leading {
                now: self,
                read: number,
                revision: None,
            };
            let result = read().await;
            leading.revision = result.as_ref().ok().copied();
            drop(leading);
            return result;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Started> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
    use std::time::Duration;

    use tokio::sync::Notify;

    use super::*;
    use crate::error::Error;

    /// A fake cluster: each read takes 10 ms and answers the revision at its start.
    struct Fake {
        revision: AtomicI64,
        reads: AtomicUsize,
    }

    impl Fake {
        fn new() -> Arc<Self> {
            Arc::new(Fake {
                revision: AtomicI64::new(100),
                reads: AtomicUsize::new(0),
            })
        }

        async fn read(&self) -> Result<i64> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            let at_start = self.revision.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok(at_start)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn callers_during_a_read_share_the_next_one() {
        let (now, fake) = (Arc::new(ClusterNow::default()), Fake::new());
        let first = {
            let (now, fake) = (now.clone(), fake.clone());
            tokio::spawn(async move { now.get(|| fake.read()).await })
        };
        tokio::time::sleep(Duration::from_millis(2)).await;
        // A write acknowledged while read 1 is on its way: the callers after it must see it.
        fake.revision.store(101, Ordering::SeqCst);
        let later: Vec<_> = (0..50)
            .map(|_| {
                let (now, fake) = (now.clone(), fake.clone());
                tokio::spawn(async move { now.get(|| fake.read()).await })
            })
            .collect();
        assert_eq!(first.await.unwrap().unwrap(), 100);
        for caller in later {
            assert_eq!(caller.await.unwrap().unwrap(), 101);
        }
        assert_eq!(fake.reads.load(Ordering::SeqCst), 2, "one read each wave");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_or_dropped_read_sends_each_waiter_to_read_alone() {
        let (now, fake) = (Arc::new(ClusterNow::default()), Fake::new());
        let gate = Arc::new(Notify::new());
        let leader = {
            let (now, gate) = (now.clone(), gate.clone());
            tokio::spawn(async move {
                now.get(|| async move {
                    gate.notified().await;
                    Err::<i64, _>(Error::Timeout)
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(1)).await;
        // Waits for read 1, then leads read 2, which is dropped with its caller.
        let dropped = {
            let (now, fake) = (now.clone(), fake.clone());
            tokio::spawn(async move {
                now.get(|| async move {
                    fake.reads.fetch_add(1, Ordering::SeqCst);
                    std::future::pending::<Result<i64>>().await
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(1)).await;
        let waiter = {
            let (now, fake) = (now.clone(), fake.clone());
            tokio::spawn(async move { now.get(|| fake.read()).await })
        };
        tokio::time::sleep(Duration::from_millis(1)).await;
        gate.notify_one();
        assert!(leader.await.unwrap().is_err());
        tokio::time::sleep(Duration::from_millis(1)).await;
        dropped.abort();
        let _ = dropped.await;
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(1), waiter)
                .await
                .expect("the waiter does not hang")
                .unwrap()
                .unwrap(),
            100
        );
    }
}
