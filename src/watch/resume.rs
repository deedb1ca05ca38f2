//! Where one managed watch stands in the history: the revision it resumes from, fragment
//! reassembly and de-duplication. No IO; the hub drives it (`hub.rs`) and the tests below pin
//! the rules down.
//!
//! The rules (clientv3's `nextRev`, made exact):
//!
//! ```text
//!  start revision S > 0   revision = S - 1            resume from S
//!  start revision 0       revision unknown            create "from now" (0)
//!    created at header H  revision = max(H, F)        resume from that + 1 (pinned: a write
//!                                                     during a failover is not missed; F is
//!                                                     the newest revision the client had seen)
//!  events ..E (complete)  revision = E                resume from E + 1
//!  sound progress P > rev revision = P                resume from P + 1
//!  reloaded at H          revision = H                resume from H + 1
//! ```
//!
//! A response in fragments is held until its last fragment; its size is capped (the client's
//! largest response, `Options::with_max_response_bytes`): each fragment is bounded by gRPC,
//! but a server could send fragments without end. Over the cap the watch ends with
//! [`Error::WatchTooLarge`].
//!
//! `revision` only moves once a batch is in the consumer's buffer ([`Cursor::advance`]), so a
//! batch that could not be handed over is asked for again after a resume. Events at or below
//! `revision` are dropped: a batch is never handed over twice, whatever the server resends.

use prost::Message;

use crate::error::{Error, Result};
use crate::proto::mvccpb::Event;

/// The position of one managed watch.
#[derive(Debug, Default)]
pub(crate) struct Cursor {
    /// Every event of the watch up to this revision has been handed over; `None` for a watch
    /// from "now" until the server confirmed its creation.
    revision: Option<i64>,
    /// Events of a response that arrives in fragments, until its last fragment.
    fragments: Vec<Event>,
    /// Encoded size of `fragments`.
    fragment_bytes: usize,
    /// Most bytes one reassembled response may take.
    max_bytes: usize,
    /// A watch from "now" never delivers at or below this: the newest revision the client
    /// had seen when the watch was asked for (0: none).
    floor: i64,
}

/// The revision an event belongs to.
fn mod_revision(event: &Event) -> i64 {
    event.kv.as_ref().map_or(0, |kv| kv.mod_revision)
}

impl Cursor {
    /// A watch asked to start at `start_revision` (0: from now), whose reassembled responses
    /// may take at most `max_bytes`.
    pub(crate) fn new(start_revision: i64, max_bytes: usize) -> Self {
        Cursor {
            revision: (start_revision > 0).then(|| start_revision - 1),
            fragments: Vec::new(),
            fragment_bytes: 0,
            max_bytes,
            floor: 0,
        }
    }

    /// A watch from "now", asked for when the client had seen revisions up to `floor`: created
    /// "from now" on whichever member serves it, it starts after that member's now or after
    /// `floor`, whichever is later. So it never replays a write the client saw before asking
    /// (which starting at `floor + 1` did when `floor` was old: every write since then came
    /// again, or `Compacted` at once), nor one that a lagging member applies late.
    pub(crate) fn from_now(floor: i64, max_bytes: usize) -> Self {
        #[cfg(feature = "mutants")]
        if crate::mutants::from_now_stale() && floor > 0 {
            return Cursor::new(floor.saturating_add(1), max_bytes);
        }
        Cursor {
            floor: floor.max(0),
            ..Cursor::new(0, max_bytes)
        }
    }

    /// Every event up to this revision has been handed over (`None`: not pinned yet).
    #[cfg(test)]
    pub(crate) fn revision(&self) -> Option<i64> {
        self.revision
    }

    /// The start revision of the next create request: right after what was handed over, or 0
    /// ("from now") while the watch is not pinned yet.
    pub(crate) fn resume_from(&self) -> i64 {
        #[cfg(feature = "mutants")]
        if crate::mutants::resume_at_last() {
            return self.revision.unwrap_or(0);
        }
        // Saturating: a revision is a server's value, and i64::MAX must not panic.
        self.revision.map_or(0, |r| r.saturating_add(1))
    }

    /// The server confirmed a create at `header_revision`. A watch from "now" is pinned to it:
    /// the server delivers what comes after it, so that is where a resume must continue.
    /// Returns the revision the watch now stands at.
    pub(crate) fn created(&mut self, header_revision: i64) -> i64 {
        self.drop_fragments();
        *self.revision.get_or_insert(header_revision.max(self.floor))
    }

    /// One response's events arrived. Returns the batch to hand over, `(last revision,
    /// events)`, once a response is complete (its last fragment arrived) and only with events
    /// newer than [`revision`](Self::revision); `None` while fragments are pending or when
    /// nothing new is left. [`Error::WatchTooLarge`] when the fragments of one response add up
    /// to more than the cap (they are dropped; the watch is to end).
    pub(crate) fn events(
        &mut self,
        events: Vec<Event>,
        fragment: bool,
    ) -> Result<Option<(i64, Vec<Event>)>> {
        if fragment || !self.fragments.is_empty() {
            let bytes: usize = events.iter().map(Message::encoded_len).sum();
            self.fragment_bytes = self.fragment_bytes.saturating_add(bytes);
            if self.fragment_bytes > self.max_bytes {
                self.drop_fragments();
                return Err(Error::WatchTooLarge {
                    limit: self.max_bytes,
                });
            }
        }
        if fragment {
            self.fragments.extend(events);
            return Ok(None);
        }
        let mut all = if self.fragments.is_empty() {
            events
        } else {
            let mut all = std::mem::take(&mut self.fragments);
            self.fragment_bytes = 0;
            all.extend(events);
            all
        };
        #[cfg(feature = "mutants")]
        let trust_the_server = crate::mutants::resume_at_last();
        #[cfg(not(feature = "mutants"))]
        let trust_the_server = false;
        if let Some(floor) = self.revision.filter(|_| !trust_the_server) {
            all.retain(|e| mod_revision(e) > floor);
        }
        let Some(last) = all.last().map(mod_revision) else {
            return Ok(None);
        };
        Ok(Some((last, all)))
    }

    /// A batch up to `revision` is in the consumer's buffer.
    pub(crate) fn advance(&mut self, revision: i64) {
        self.revision = Some(self.revision.map_or(revision, |r| r.max(revision)));
    }

    /// A progress notification that proves every event up to `revision` was sent arrived:
    /// the revision to report, when it says something new (and no fragmented response is half
    /// received).
    pub(crate) fn progress(&self, revision: i64) -> Option<i64> {
        if !self.fragments.is_empty() {
            return None;
        }
        match self.revision {
            Some(r) if revision > r => Some(revision),
            _ => None,
        }
    }

    /// The stream broke or the watch was canceled: a half-received response is dropped (it
    /// comes again, whole, after the resume).
    pub(crate) fn stream_lost(&mut self) {
        self.drop_fragments();
    }

    fn drop_fragments(&mut self) {
        self.fragments = Vec::new();
        self.fragment_bytes = 0;
    }

    /// Whether a fragmented response is half received.
    #[cfg(test)]
    pub(crate) fn has_fragments(&self) -> bool {
        !self.fragments.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::mvccpb::KeyValue;

    /// A cap no test reaches.
    const NO_CAP: usize = usize::MAX;

    fn ev(key: &str, rev: i64) -> Event {
        Event {
            kv: Some(KeyValue {
                key: key.as_bytes().to_vec(),
                mod_revision: rev,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    impl Cursor {
        /// [`Cursor::events`] for tests under no cap.
        fn ev(&mut self, events: Vec<Event>, fragment: bool) -> Option<(i64, Vec<Event>)> {
            self.events(events, fragment).unwrap()
        }
    }

    fn revs(events: &[Event]) -> Vec<i64> {
        events.iter().map(mod_revision).collect()
    }

    #[test]
    fn a_revision_at_the_end_of_the_range_does_not_panic() {
        // A server (or a proxy) may send any value: i64::MAX must not overflow.
        let mut c = Cursor::from_now(0, NO_CAP);
        c.created(i64::MAX);
        assert_eq!(c.resume_from(), i64::MAX);
    }

    #[test]
    fn a_watch_from_now_starts_after_the_members_now_or_what_the_client_saw() {
        // The client saw revision 10 long ago; the member is at 1,010: nothing before is
        // replayed.
        let mut c = Cursor::from_now(10, NO_CAP);
        assert_eq!(c.resume_from(), 0, "created from the member's now");
        assert_eq!(c.created(1010), 1010);
        assert_eq!(c.resume_from(), 1011);
        // A member behind the client's own write (at 8, the client saw 10): the write at 9..10
        // the member applies late is not delivered.
        let mut c = Cursor::from_now(10, NO_CAP);
        assert_eq!(c.created(8), 10);
        assert_eq!(c.resume_from(), 11);
        assert_eq!(c.ev(vec![ev("k", 9), ev("k", 10)], false), None);
        let (last, events) = c.ev(vec![ev("k", 11)], false).unwrap();
        assert_eq!((last, revs(&events)), (11, vec![11]));
    }

    #[test]
    fn start_revision_sets_where_the_watch_resumes() {
        let c = Cursor::new(10, NO_CAP);
        assert_eq!(c.revision(), Some(9));
        assert_eq!(c.resume_from(), 10);
        let c = Cursor::new(0, NO_CAP);
        assert_eq!(c.revision(), None);
        assert_eq!(c.resume_from(), 0);
    }

    #[test]
    fn a_watch_from_now_is_pinned_by_its_first_created_answer() {
        let mut c = Cursor::new(0, NO_CAP);
        assert_eq!(c.created(41), 41);
        assert_eq!(c.resume_from(), 42);
        // A later create (after a failover) does not move it.
        assert_eq!(c.created(50), 41);
        assert_eq!(c.resume_from(), 42);
    }

    #[test]
    fn events_move_the_cursor_only_once_handed_over() {
        let mut c = Cursor::new(5, NO_CAP);
        let (rev, batch) = c.ev(vec![ev("a", 5), ev("b", 7)], false).unwrap();
        assert_eq!((rev, revs(&batch)), (7, vec![5, 7]));
        // Not handed over (buffer full): the resume asks for the same events again.
        assert_eq!(c.resume_from(), 5);
        c.advance(rev);
        assert_eq!(c.resume_from(), 8);
    }

    #[test]
    fn events_at_or_below_the_revision_are_dropped() {
        let mut c = Cursor::new(1, NO_CAP);
        c.advance(7);
        // A resent overlap: only the new revision survives.
        let (rev, batch) = c
            .ev(vec![ev("a", 6), ev("b", 7), ev("c", 8), ev("d", 8)], false)
            .unwrap();
        assert_eq!((rev, revs(&batch)), (8, vec![8, 8]));
        c.advance(rev);
        assert!(c.ev(vec![ev("a", 8)], false).is_none());
        assert!(c.ev(Vec::new(), false).is_none());
        // Advancing backwards never happens.
        c.advance(3);
        assert_eq!(c.revision(), Some(8));
    }

    #[test]
    fn fragments_are_reassembled_into_one_batch() {
        let mut c = Cursor::new(0, NO_CAP);
        c.created(9);
        assert!(c.ev(vec![ev("a", 10), ev("b", 10)], true).is_none());
        assert!(c.has_fragments());
        assert!(c.ev(vec![ev("c", 10)], true).is_none());
        // Progress is not reported in the middle of a fragmented revision.
        assert_eq!(c.progress(12), None);
        let (rev, batch) = c.ev(vec![ev("d", 10)], false).unwrap();
        assert_eq!(rev, 10);
        let keys: Vec<_> = batch
            .iter()
            .map(|e| e.kv.as_ref().unwrap().key.clone())
            .collect();
        assert_eq!(keys, [b"a", b"b", b"c", b"d"]);
        assert!(!c.has_fragments());
    }

    #[test]
    fn a_broken_stream_drops_half_a_fragmented_response() {
        let mut c = Cursor::new(0, NO_CAP);
        c.created(9);
        assert!(c.ev(vec![ev("a", 10)], true).is_none());
        c.stream_lost();
        assert_eq!(c.resume_from(), 10);
        // The whole revision comes again after the resume, once.
        let (_, batch) = c.ev(vec![ev("a", 10), ev("b", 10)], false).unwrap();
        assert_eq!(batch.len(), 2);
    }

    #[test]
    fn progress_reports_only_news() {
        let mut c = Cursor::new(0, NO_CAP);
        // Not pinned yet: nothing to say.
        assert_eq!(c.progress(5), None);
        c.created(5);
        assert_eq!(c.progress(5), None);
        assert_eq!(c.progress(4), None);
        assert_eq!(c.progress(9), Some(9));
        c.advance(9);
        assert_eq!(c.resume_from(), 10);
    }

    #[test]
    fn fragments_over_the_cap_end_the_watch_and_free_their_memory() {
        let one = Message::encoded_len(&ev("a", 10));
        // Room for three events' worth of fragments.
        let mut c = Cursor::new(0, 3 * one);
        c.created(9);
        assert!(
            c.events(vec![ev("a", 10), ev("b", 10)], true)
                .unwrap()
                .is_none()
        );
        assert!(c.events(vec![ev("c", 10)], true).unwrap().is_none());
        match c.events(vec![ev("d", 10)], true) {
            Err(Error::WatchTooLarge { limit }) => assert_eq!(limit, 3 * one),
            other => panic!("{other:?}"),
        }
        assert!(!c.has_fragments());
        // The last fragment counts too: a batch is capped as a whole.
        let mut c = Cursor::new(0, 3 * one);
        c.created(9);
        assert!(
            c.events(vec![ev("a", 10), ev("b", 10)], true)
                .unwrap()
                .is_none()
        );
        assert!(c.events(vec![ev("c", 10), ev("d", 10)], false).is_err());
        // Exactly at the cap is fine, and the count starts again with the next response.
        let mut c = Cursor::new(0, 3 * one);
        c.created(9);
        for _ in 0..2 {
            assert!(
                c.events(vec![ev("a", 10), ev("b", 10)], true)
                    .unwrap()
                    .is_none()
            );
            let (_, batch) = c.events(vec![ev("c", 10)], false).unwrap().unwrap();
            assert_eq!(batch.len(), 3);
        }
        // An unfragmented response is bounded by gRPC alone: the cap is for reassembly.
        let mut c = Cursor::new(0, one);
        c.created(9);
        let many = vec![ev("a", 10), ev("b", 10), ev("c", 10)];
        assert_eq!(c.events(many, false).unwrap().unwrap().1.len(), 3);
    }
}
