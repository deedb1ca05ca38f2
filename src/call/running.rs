//! The attempts of one call in flight: the first one held in place, a set for more only once a
//! hedge or a retry adds one.
//!
//! Almost every call makes one attempt. A `FuturesUnordered` for it cost two allocations to
//! make, a third to push, and its own wake-up bookkeeping on every poll: some 4,500
//! instructions of a put's ~97,000 (`call-cost`, callgrind). The first attempt is polled
//! directly; the set is made when a second attempt starts.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::stream::{FuturesUnordered, StreamExt};

/// Attempts in flight. `first` is pinned where the call's future lives (`std::pin::pin!`).
pub(super) struct Running<'a, F> {
    first: Pin<&'a mut Option<F>>,
    more: Option<FuturesUnordered<F>>,
}

impl<'a, F: Future> Running<'a, F> {
    /// No attempt yet, the first to go into `first`.
    pub(super) fn new(first: Pin<&'a mut Option<F>>) -> Self {
        Running { first, more: None }
    }

    /// Start waiting on `attempt` too.
    pub(super) fn push(&mut self, attempt: F) {
        if self.first.is_none() {
            self.first.set(Some(attempt));
        } else {
            self.more
                .get_or_insert_with(FuturesUnordered::new)
                .push(attempt);
        }
    }

    /// Drop every attempt in flight.
    pub(super) fn clear(&mut self) {
        self.first.set(None);
        self.more = None;
    }

    /// The next attempt to finish; `None` at once when none is in flight (as a
    /// `FuturesUnordered`, so a `select!` branch on it is disabled, not woken forever).
    pub(super) async fn next(&mut self) -> Option<F::Output> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<F::Output>> {
        if let Some(first) = self.first.as_mut().as_pin_mut()
            && let Poll::Ready(out) = first.poll(cx)
        {
            self.first.set(None);
            return Poll::Ready(Some(out));
        }
        match &mut self.more {
            Some(more) if !more.is_empty() => match more.poll_next_unpin(cx) {
                Poll::Ready(Some(out)) => Poll::Ready(Some(out)),
                // Only when empty, which was checked: treat as pending on `first`.
                Poll::Ready(None) | Poll::Pending => Poll::Pending,
            },
            _ if self.first.is_none() => Poll::Ready(None),
            _ => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::sleep;

    /// An attempt that answers `n` after `ms`.
    async fn after(ms: u64, n: u32) -> u32 {
        sleep(Duration::from_millis(ms)).await;
        n
    }

    #[tokio::test(start_paused = true)]
    async fn answers_come_in_the_order_they_finish_and_none_when_empty() {
        let first = std::pin::pin!(None);
        let mut running = Running::new(first);
        assert_eq!(running.next().await, None, "nothing in flight");
        running.push(after(30, 1));
        running.push(after(10, 2));
        running.push(after(20, 3));
        assert_eq!(running.next().await, Some(2));
        assert_eq!(running.next().await, Some(3));
        // The first slot is free again: a new attempt goes there.
        running.push(after(5, 4));
        assert_eq!(running.next().await, Some(4));
        assert_eq!(running.next().await, Some(1));
        assert_eq!(running.next().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn clear_drops_every_attempt() {
        let first = std::pin::pin!(None);
        let mut running = Running::new(first);
        running.push(after(10, 1));
        running.push(after(10, 2));
        running.clear();
        assert_eq!(running.next().await, None);
        running.push(after(10, 3));
        assert_eq!(running.next().await, Some(3));
    }
}
