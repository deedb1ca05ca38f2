//! The deletions of a session's queue keys still running in the background, so that the
//! session's next campaign or lock waits for them instead of racing them.
//!
//! A campaign or lock that is dropped (the `timeout(d, election.campaign(..))` the docs show)
//! or fails withdraws its key in a background task: `Drop` cannot wait. The session's next
//! campaign under the same name uses the *same* key (`name/<lease id>`). Without an order
//! between the two, the late withdrawal deletes the key the next campaign has just put or
//! taken over, and that campaign fails with "lease not found" though the lease is alive (seen
//! in CI: `tests/canceled_txn.rs`, 150 campaigns at 0-2 ms on one session). So each background
//! deletion holds a [`Cleanup`] for its key until it is done, and [`Cleanups::settled`] waits
//! for every one of them before a new put of that key goes out.
//!
//! The deletions are bounded (each is a few client calls under the request timeout), so the
//! wait is too; the caller's own timeout bounds it as well.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

/// A session's background deletions in flight, per key. Clones share them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cleanups {
    /// Per key, the number of deletions in flight, published to the waiters. An entry goes
    /// when its count is back to zero, so the map holds only keys being cleaned up.
    in_flight: Arc<Mutex<HashMap<Vec<u8>, watch::Sender<usize>>>>,
}

/// One background deletion of a key: the key counts as being cleaned up until this is dropped.
#[derive(Debug)]
pub(crate) struct Cleanup {
    cleanups: Cleanups,
    key: Vec<u8>,
}

impl Cleanups {
    /// A deletion of `key` starts (synchronously, so that `Drop` can register it before any
    /// later campaign looks).
    pub(crate) fn begin(&self, key: &[u8]) -> Cleanup {
        let mut map = self.lock();
        map.entry(key.to_vec())
            .or_insert_with(|| watch::Sender::new(0))
            .send_modify(|n| *n += 1);
        Cleanup {
            cleanups: self.clone(),
            key: key.to_vec(),
        }
    }

    /// Completes once no deletion of `key` begun before this call is still running.
    pub(crate) async fn settled(&self, key: &[u8]) {
        let waiting = self.lock().get(key).map(watch::Sender::subscribe);
        if let Some(mut count) = waiting {
            // The sender goes only after it published zero, so a closed channel means done.
            let _ = count.wait_for(|n| *n == 0).await;
        }
    }

    /// Whether a deletion of `key` is in flight.
    #[cfg(test)]
    fn busy(&self, key: &[u8]) -> bool {
        self.lock().contains_key(key)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, watch::Sender<usize>>> {
        // The map is consistent between statements: a panic elsewhere cannot leave it half made.
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let mut map = self.cleanups.lock();
        let Some(count) = map.get(&self.key) else {
            return;
        };
        count.send_modify(|n| *n = n.saturating_sub(1));
        if *count.borrow() == 0 {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_key_with_nothing_in_flight_is_settled_at_once() {
        let cleanups = Cleanups::default();
        tokio::time::timeout(Duration::from_millis(1), cleanups.settled(b"k"))
            .await
            .expect("nothing to wait for");
    }

    #[tokio::test(start_paused = true)]
    async fn settled_waits_for_every_deletion_of_its_key_and_no_other() {
        let cleanups = Cleanups::default();
        let first = cleanups.begin(b"k");
        let second = cleanups.begin(b"k");
        let other = cleanups.begin(b"other");
        let waiter = tokio::spawn({
            let cleanups = cleanups.clone();
            async move { cleanups.settled(b"k").await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished(), "two deletions of k run");
        drop(first);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished(), "one deletion of k still runs");
        drop(second);
        tokio::time::timeout(Duration::from_millis(10), waiter)
            .await
            .expect("settled once both are done")
            .unwrap();
        assert!(
            !cleanups.busy(b"k"),
            "the entry goes with its last deletion"
        );
        assert!(cleanups.busy(b"other"), "another key's deletion is its own");
        drop(other);
        assert!(!cleanups.busy(b"other"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_deletion_begun_after_the_wait_began_is_waited_for_too() {
        // The count is per key, not per waiter: a waiter sees zero only when all are done.
        let cleanups = Cleanups::default();
        let first = cleanups.begin(b"k");
        let waiter = tokio::spawn({
            let cleanups = cleanups.clone();
            async move { cleanups.settled(b"k").await }
        });
        tokio::time::sleep(Duration::from_millis(1)).await;
        let second = cleanups.begin(b"k");
        drop(first);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiter.is_finished());
        drop(second);
        tokio::time::timeout(Duration::from_millis(10), waiter)
            .await
            .expect("settled")
            .unwrap();
    }
}
