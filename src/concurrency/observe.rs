//! [`Observe`]: the stream of an election's leaders, fed by a task that follows the oldest key
//! under the election's prefix.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::election::first_created;
use super::keys::show;
use super::queue::{RETRY_PAUSE, follow_key};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::proto::mvccpb::KeyValue;
use crate::{WatchBatch, WatchOptions};

/// Leaders buffered for a slow reader; the observer waits when the buffer is full.
const BUFFER: usize = 16;

/// The leaders of an election, from [`Election::observe`](super::Election::observe): the current
/// leader's key-value first, then one item per change (a new leader, or a value proclaimed).
///
/// A [`Stream`](futures_util::Stream); dropping it stops the task behind it.
///
/// ```no_run
/// # async fn demo(election: etcd_ha::concurrency::Election) -> etcd_ha::Result<()> {
/// use futures_util::StreamExt;
/// let mut leaders = election.observe();
/// let first = leaders.next().await.expect("observing")?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Observe {
    /// Leaders from the task.
    leaders: mpsc::Receiver<Result<KeyValue>>,
    /// The task, aborted on drop.
    task: JoinHandle<()>,
}

impl Observe {
    /// Start observing the election under `prefix`.
    pub(crate) fn start(client: Client, prefix: Vec<u8>) -> Observe {
        let (tx, leaders) = mpsc::channel(BUFFER);
        let span = tracing::debug_span!("etcd_ha::observe", prefix = %show(&prefix));
        let task = tokio::spawn(Observer { client, prefix, tx }.run().instrument(span));
        Observe { leaders, task }
    }
}

impl futures_util::Stream for Observe {
    type Item = Result<KeyValue>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.leaders.poll_recv(cx)
    }
}

impl Drop for Observe {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a followed leader key did.
enum Step {
    /// Still the same leader, with this new value.
    Proclaimed(KeyValue),
    /// Deleted or re-created: find the leader again.
    Gone,
}

/// The task behind [`Observe`].
struct Observer {
    client: Client,
    prefix: Vec<u8>,
    tx: mpsc::Sender<Result<KeyValue>>,
}

impl Observer {
    async fn run(self) {
        if let Err(e) = self.observe().await {
            // Closed receiver: nobody to tell.
            let _ = self.tx.send(Err(e)).await;
        }
    }

    /// Find the leader, report it, follow it until it is gone; again. Returns `Ok` when the
    /// receiver is gone.
    async fn observe(&self) -> Result<()> {
        let mut last: Option<KeyValue> = None;
        loop {
            let (mut leader, revision) = self.find_leader().await?;
            if last.as_ref().is_none_or(|l| !same_view(l, &leader)) {
                if self.tx.send(Ok(leader.clone())).await.is_err() {
                    return Ok(());
                }
                last = Some(leader.clone());
            }
            let mut from = revision.saturating_add(1);
            loop {
                let created = leader.create_revision;
                let current = leader.value.clone();
                let step = follow_key(&self.client, &leader.key, from, |kv| match kv {
                    Some(kv) if kv.create_revision == created => {
                        (kv.value != current).then(|| Step::Proclaimed(kv.clone()))
                    }
                    _ => Some(Step::Gone),
                })
                .await?;
                match step {
                    Step::Proclaimed(kv) => {
                        from = kv.mod_revision.saturating_add(1);
                        leader = kv;
                        if self.tx.send(Ok(leader.clone())).await.is_err() {
                            return Ok(());
                        }
                        last = Some(leader.clone());
                    }
                    Step::Gone => break,
                }
            }
        }
    }

    /// The oldest key under the prefix and the revision it was read at; while there is none,
    /// wait for a put under the prefix.
    async fn find_leader(&self) -> Result<(KeyValue, i64)> {
        loop {
            let resp = match self
                .client
                .kv()
                .get(self.prefix.clone(), first_created())
                .await
            {
                Ok(resp) => resp,
                Err(e) if e.is_retryable() => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let revision = resp.header.as_ref().map_or(0, |h| h.revision);
            if let Some(kv) = resp.kvs.into_iter().next() {
                return Ok((kv, revision));
            }
            self.wait_for_put(revision.saturating_add(1)).await?;
        }
    }

    /// Wait for anything to be put under the prefix from `from_revision` on (then the oldest
    /// key is read again). Recoverable watch failures just end the wait early.
    async fn wait_for_put(&self, from_revision: i64) -> Result<()> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(from_revision)
            .without_deletes();
        let mut stream = match self
            .client
            .watch()
            .watch(self.prefix.clone(), options)
            .await
        {
            Ok(stream) => stream,
            Err(e) if e.is_retryable() => {
                tokio::time::sleep(RETRY_PAUSE).await;
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        while let Some(batch) = stream.next_batch().await {
            match batch {
                Ok(WatchBatch::Events { events, .. }) if !events.is_empty() => return Ok(()),
                Ok(WatchBatch::Compacted { .. } | WatchBatch::Reloaded { .. }) => return Ok(()),
                Ok(_) => {}
                Err(e) if e.is_retryable() || matches!(e, Error::Compacted { .. }) => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Whether two reads of the leader key show the same leader with the same value.
fn same_view(a: &KeyValue, b: &KeyValue) -> bool {
    a.key == b.key && a.create_revision == b.create_revision && a.value == b.value
}
