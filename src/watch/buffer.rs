//! One managed watch's buffer: the batches the hub handed over and its consumer has not read
//! yet, bounded by [`BUFFER`](super::managed::BUFFER) (the hub pauses a watch whose buffer is
//! full), with memory only for what it holds.
//!
//! A tokio `mpsc` channel would do the job, but it allocates a block of 32 slots up front:
//! about 2.3 KiB per watch before any event, most of the memory of a client holding 100,000
//! quiet watches. This queue starts empty and grows with what is waiting.
//!
//! ```text
//!  hub (one sender) --try_send--> [ batches ... ] --poll_recv--> WatchStream (one receiver)
//!  sender dropped: the receiver drains what is left, then reads None (the watch ended)
//!  receiver dropped: try_send answers Closed and nothing is kept
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use super::managed::WatchBatch;
use crate::error::Result;

/// An item of the buffer: a batch, or the error that ends the watch.
type Item = Result<WatchBatch>;

/// Why a batch was not taken (it is dropped: the hub resends from the watch's cursor).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// The buffer holds its bound of batches already.
    Full,
    /// The consumer is gone.
    Closed,
}

/// What the two ends share: they change together, so one lock.
#[derive(Debug, Default)]
struct Queue {
    items: VecDeque<Item>,
    /// The consumer waiting for an item.
    waker: Option<Waker>,
    sender_gone: bool,
    receiver_gone: bool,
}

/// The hub's end.
#[derive(Debug)]
pub(super) struct BatchSender {
    queue: Arc<Mutex<Queue>>,
    bound: usize,
}

/// The consumer's end, held by its [`WatchStream`](super::WatchStream).
#[derive(Debug)]
pub(crate) struct BatchReceiver {
    queue: Arc<Mutex<Queue>>,
}

/// A buffer that holds at most `bound` batches.
pub(super) fn buffer(bound: usize) -> (BatchSender, BatchReceiver) {
    let queue = Arc::new(Mutex::new(Queue::default()));
    (
        BatchSender {
            queue: queue.clone(),
            bound,
        },
        BatchReceiver { queue },
    )
}

fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    // Nothing in the queue can be left half-changed by a panic: recover it.
    queue.lock().unwrap_or_else(|e| e.into_inner())
}

impl BatchSender {
    /// Hand `item` over without waiting.
    pub(super) fn try_send(&self, item: Item) -> std::result::Result<(), Refused> {
        let waker = {
            let mut queue = lock(&self.queue);
            if queue.receiver_gone {
                return Err(Refused::Closed);
            }
            if queue.items.len() >= self.bound {
                return Err(Refused::Full);
            }
            queue.items.push_back(item);
            queue.waker.take()
        };
        // Woken outside the lock: the consumer takes it at once.
        if let Some(waker) = waker {
            waker.wake();
        }
        Ok(())
    }

    /// Batches waiting for the consumer.
    pub(super) fn len(&self) -> usize {
        lock(&self.queue).items.len()
    }
}

impl Drop for BatchSender {
    fn drop(&mut self) {
        let waker = {
            let mut queue = lock(&self.queue);
            queue.sender_gone = true;
            queue.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl BatchReceiver {
    /// The next item; `None` once the sender is gone and everything was read.
    pub(crate) fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        let mut queue = lock(&self.queue);
        if let Some(item) = queue.items.pop_front() {
            if queue.items.is_empty() && queue.items.capacity() > 8 {
                // A burst is over: give its memory back.
                queue.items.shrink_to(8);
            }
            return Poll::Ready(Some(item));
        }
        if queue.sender_gone {
            return Poll::Ready(None);
        }
        match &mut queue.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            waker => *waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Batches waiting to be read.
    pub(crate) fn len(&self) -> usize {
        lock(&self.queue).items.len()
    }
}

impl Drop for BatchReceiver {
    fn drop(&mut self) {
        let mut queue = lock(&self.queue);
        queue.receiver_gone = true;
        // Nobody will read them.
        queue.items = VecDeque::new();
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;

    use super::*;

    fn batch(revision: i64) -> Item {
        Ok(WatchBatch::Progress { revision })
    }

    fn revision(item: Option<Item>) -> Option<i64> {
        item.map(|i| i.expect("a batch").revision())
    }

    #[tokio::test]
    async fn batches_come_out_in_order_and_the_bound_refuses_the_next() {
        let (tx, mut rx) = buffer(2);
        tx.try_send(batch(1)).unwrap();
        tx.try_send(batch(2)).unwrap();
        assert_eq!(tx.try_send(batch(3)), Err(Refused::Full));
        assert_eq!(tx.len(), 2);
        assert_eq!(revision(poll_fn(|cx| rx.poll_recv(cx)).await), Some(1));
        assert_eq!(rx.len(), 1);
        tx.try_send(batch(3)).unwrap();
        assert_eq!(revision(poll_fn(|cx| rx.poll_recv(cx)).await), Some(2));
        assert_eq!(revision(poll_fn(|cx| rx.poll_recv(cx)).await), Some(3));
    }

    #[tokio::test]
    async fn a_waiting_consumer_is_woken_and_reads_the_rest_after_the_sender_is_gone() {
        let (tx, mut rx) = buffer(4);
        let reader = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(item) = poll_fn(|cx| rx.poll_recv(cx)).await {
                seen.push(item.unwrap().revision());
            }
            seen
        });
        tokio::task::yield_now().await;
        tx.try_send(batch(7)).unwrap();
        tx.try_send(batch(8)).unwrap();
        drop(tx);
        assert_eq!(reader.await.unwrap(), vec![7, 8]);
    }

    #[test]
    fn a_gone_consumer_closes_the_buffer() {
        let (tx, rx) = buffer(4);
        tx.try_send(batch(1)).unwrap();
        drop(rx);
        assert_eq!(tx.try_send(batch(2)), Err(Refused::Closed));
        assert_eq!(tx.len(), 0);
    }
}
