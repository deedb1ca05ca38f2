//! The recent events of a [`Cache`](super::Cache)'s range, kept in a bounded ring so that its
//! local watches ([`CacheWatchStream`](super::CacheWatchStream)) replay and follow them
//! without a watch of their own on the server.
//!
//! Pure, like the store: the feeding task pushes every applied batch (with the previous
//! values the store knew), readers borrow the ring under the same read lock as the store, so
//! a subscriber's snapshot and the events after it always meet at one revision.
//!
//! The ring holds *every* event of the range after [`History::since`] (up to the store's
//! revision). Past its limit the oldest revisions leave and `since` moves up; a load or
//! reload clears it (the events between two loads are not known, only their result).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::proto::mvccpb::Event;

/// The events of one revision of the range, oldest first, with their previous values.
#[derive(Debug)]
pub(crate) struct Revision {
    pub(crate) revision: i64,
    pub(crate) events: Vec<Event>,
}

/// The ring (see the module docs).
#[derive(Debug)]
pub(crate) struct History {
    revisions: VecDeque<Arc<Revision>>,
    /// Every event of the range after this revision is in the ring.
    since: i64,
    /// Events in the ring now, and the most it keeps.
    events: usize,
    limit: usize,
    /// Bumped by every load: a subscriber made before it has lost its place, even when the
    /// load is at the revision it stood at (a load after a divergence found by the detector
    /// brings back what no event told it).
    generation: u64,
}

impl History {
    /// An empty ring that keeps up to `limit` events (at least one revision, however many
    /// events it has), complete after `since`.
    pub(crate) fn new(limit: usize, since: i64) -> Self {
        History {
            revisions: VecDeque::new(),
            since,
            events: 0,
            limit,
            generation: 0,
        }
    }

    /// The loads so far (see the field).
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Every event after this revision is in the ring: a subscriber that has seen up to it
    /// (or later) can follow; one behind it has lost events.
    pub(crate) fn since(&self) -> i64 {
        self.since
    }

    /// The newest revision in the ring.
    pub(crate) fn newest(&self) -> Option<i64> {
        self.revisions.back().map(|r| r.revision)
    }

    /// Events held.
    pub(crate) fn len(&self) -> usize {
        self.events
    }

    /// Forget everything: the range was loaded again at `revision`.
    pub(crate) fn reset(&mut self, revision: i64) {
        self.revisions.clear();
        self.events = 0;
        self.since = revision;
        self.generation += 1;
    }

    /// Add a batch of applied events (whole revisions, oldest first, each newer than the
    /// ring's), then drop the oldest revisions past the limit.
    pub(crate) fn push(&mut self, events: Vec<Event>) {
        let mut events = events.into_iter().peekable();
        while let Some(first) = events.next() {
            let revision = mod_revision(&first);
            let mut one = vec![first];
            while let Some(next) = events.next_if(|e| mod_revision(e) == revision) {
                one.push(next);
            }
            self.events += one.len();
            self.revisions.push_back(Arc::new(Revision {
                revision,
                events: one,
            }));
        }
        while self.events > self.limit && self.revisions.len() > 1 {
            let Some(oldest) = self.revisions.pop_front() else {
                break;
            };
            self.events -= oldest.events.len();
            self.since = oldest.revision;
        }
    }

    /// The revisions after `after`, oldest first, at most `most` events in all (but at least
    /// one revision if any), for a subscriber placed in `generation`: `None` when some of them
    /// already left the ring, or a load since has replaced it.
    pub(crate) fn after(
        &self,
        after: i64,
        generation: u64,
        most: usize,
    ) -> Option<Vec<Arc<Revision>>> {
        if after < self.since || generation != self.generation {
            return None;
        }
        let first = self.revisions.partition_point(|r| r.revision <= after);
        let mut out = Vec::new();
        let mut n = 0;
        for r in self.revisions.range(first..) {
            if !out.is_empty() && n + r.events.len() > most {
                break;
            }
            n += r.events.len();
            out.push(r.clone());
        }
        Some(out)
    }
}

fn mod_revision(event: &Event) -> i64 {
    event.kv.as_ref().map_or(0, |kv| kv.mod_revision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::mvccpb::KeyValue;

    fn put(key: &str, revision: i64) -> Event {
        Event {
            kv: Some(KeyValue {
                key: key.into(),
                mod_revision: revision,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn revisions(h: &History, after: i64, most: usize) -> Option<Vec<i64>> {
        h.after(after, h.generation(), most)
            .map(|rs| rs.iter().map(|r| r.revision).collect())
    }

    #[test]
    fn batches_are_split_into_revisions_and_read_after_a_revision() {
        let mut h = History::new(100, 10);
        h.push(vec![put("a", 11), put("b", 11), put("c", 12)]);
        h.push(vec![put("a", 14)]);
        assert_eq!(h.len(), 4);
        assert_eq!(revisions(&h, 10, 100), Some(vec![11, 12, 14]));
        assert_eq!(revisions(&h, 11, 100), Some(vec![12, 14]));
        // Between two revisions with events: the next one.
        assert_eq!(revisions(&h, 13, 100), Some(vec![14]));
        assert_eq!(revisions(&h, 14, 100), Some(vec![]));
        // Before the ring's start: lost.
        assert_eq!(revisions(&h, 9, 100), None);
        // A cap never splits a revision, and always gives one.
        assert_eq!(revisions(&h, 10, 1), Some(vec![11]));
        assert_eq!(revisions(&h, 10, 3), Some(vec![11, 12]));
    }

    #[test]
    fn past_the_limit_the_oldest_revisions_leave_and_since_moves() {
        let mut h = History::new(3, 0);
        h.push(vec![put("a", 1), put("b", 1)]);
        h.push(vec![put("a", 2)]);
        h.push(vec![put("a", 3)]);
        assert_eq!(h.since(), 1, "revision 1 left whole");
        assert_eq!(h.len(), 2);
        assert_eq!(revisions(&h, 0, 100), None);
        assert_eq!(revisions(&h, 1, 100), Some(vec![2, 3]));
        // A revision larger than the limit is kept alone.
        h.push(vec![put("a", 4), put("b", 4), put("c", 4), put("d", 4)]);
        assert_eq!(h.since(), 3);
        assert_eq!(revisions(&h, 3, 100), Some(vec![4]));
        let before = h.generation();
        h.reset(9);
        assert_eq!((h.len(), h.since()), (0, 9));
        // A subscriber of the ring before the load has lost its place, even at revision 9.
        assert!(h.after(9, before, 100).is_none());
        assert_eq!(revisions(&h, 9, 100), Some(vec![]));
        assert_eq!(revisions(&h, 8, 100), None);
    }
}
