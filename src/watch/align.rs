//! Resuming many watches at once from one start revision, not each from its own: etcd's
//! pace when a stream with thousands of watches moves (no IO; `link.rs` aligns the watches it
//! moves, `hub.rs` sends the creates, `dispatch.rs` undoes an alignment a compaction cut).
//!
//! # Why
//!
//! A watch created at a past revision is *unsynced*: etcd's `syncWatchers` catches such
//! watchers up 512 at a time (`maxWatchersPerSync`), every 100 ms, each pass reading the
//! history from the oldest start among the 512 it took. After a failover, the watches of a busy
//! client stand at revisions spread over the last second of writes (each at its own last
//! event), so each pass reads nearly the whole burst and serves a few hundred watchers.
//! Measured on this project's 2-core box with 100,000 watchers on one bare stream while a put
//! per key runs (`watch-scale-bench`, etcd 3.6.16): resumed each from its own last event, the
//! last event came 51 s after the first create (p99 47 s after each put); resumed all from one
//! revision, 10 s (p99 3.7 s).
//!
//! # The rule
//!
//! When at least [`ALIGN_FROM`] watches resume together, each whose own start lies within
//! [`ALIGN_WINDOW`] revisions above the oldest such start asks for that oldest start instead.
//! Exactness is the cursor's (`resume.rs`): events at or below what a watch has handed over are
//! dropped, so the events it gets again are never delivered twice; the window bounds how many
//! that can be. A watch from "now" not pinned yet (start 0) is never moved. Fewer watches resume
//! as before: one pass takes them all.
//!
//! A compaction may land between the common start and a watch's own: etcd then cancels the
//! watch as compacted although its own history is whole. [`compaction_spares`] tells that case,
//! and the watch is created again from its own start.

/// Fewer watches than this resume from their own starts: etcd syncs up to this many unsynced
/// watchers a pass, so one pass takes them all whatever their starts.
pub(super) const ALIGN_FROM: usize = 512;

/// The most revisions a watch is moved down to the common start: bounds the events it is
/// sent again (and drops) to those of its range in this many revisions. 50,000 is several
/// seconds of the fastest writes this box sustains (~9,000 puts/s); a watch further back
/// (created from an old revision on purpose, or paused long) keeps its own start.
pub(super) const ALIGN_WINDOW: i64 = 50_000;

/// The common start for watches resuming together from `starts` (each one's own start; 0: a
/// watch from "now" not pinned yet), or `None` when they are too few to gain from one: the
/// oldest start within [`ALIGN_WINDOW`] of the newest.
pub(super) fn common_start(starts: impl Iterator<Item = i64> + Clone) -> Option<i64> {
    let pinned = starts.filter(|&s| s > 0);
    if pinned.clone().count() < ALIGN_FROM {
        return None;
    }
    let newest = pinned.clone().max()?;
    pinned.filter(|&s| newest - s <= ALIGN_WINDOW).min()
}

/// The start a watch whose own start is `own` asks for when the watches resuming with it share
/// `common`: `common` when `own` lies within [`ALIGN_WINDOW`] above it, else its own.
pub(super) fn aligned(own: i64, common: i64) -> i64 {
    if own > common && own.checked_sub(common).is_some_and(|d| d <= ALIGN_WINDOW) {
        common
    } else {
        own
    }
}

/// Whether a compaction at `compact_revision` that canceled a watch created from `asked`
/// spared its own start `own`: the create asked for less than its own (an aligned start) and
/// the compaction did not reach its own. Then the watch is created again from `own`.
pub(super) fn compaction_spares(asked: i64, own: i64, compact_revision: i64) -> bool {
    asked < own && compact_revision <= own
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_watches_keep_their_own_starts() {
        let starts = (1..ALIGN_FROM as i64).map(|i| 1000 + i);
        assert_eq!(common_start(starts), None);
        // Watches from now do not count.
        let starts = (0..ALIGN_FROM as i64).map(|i| if i == 0 { 0 } else { 1000 + i });
        assert_eq!(common_start(starts), None);
    }

    #[test]
    fn many_resume_from_the_oldest_start_within_the_window() {
        let starts = (0..ALIGN_FROM as i64).map(|i| 1000 + i);
        assert_eq!(common_start(starts.clone()), Some(1000));
        // One watch far behind (created from an old revision on purpose) does not drag them.
        let behind = std::iter::once(5).chain(starts.map(|s| s + ALIGN_WINDOW));
        assert_eq!(common_start(behind), Some(1000 + ALIGN_WINDOW));
    }

    #[test]
    fn a_watch_is_moved_down_only_within_the_window() {
        assert_eq!(aligned(1500, 1000), 1000);
        assert_eq!(aligned(1000 + ALIGN_WINDOW, 1000), 1000);
        assert_eq!(aligned(1001 + ALIGN_WINDOW, 1000), 1001 + ALIGN_WINDOW);
        assert_eq!(aligned(5, 1000), 5, "never moved up");
        assert_eq!(aligned(i64::MAX, i64::MIN + 1), i64::MAX, "no overflow");
    }

    #[test]
    fn a_compaction_below_its_own_start_spares_an_aligned_watch() {
        // Created from 1000 for its own 1500; compacted at 1200: its own history is whole.
        assert!(compaction_spares(1000, 1500, 1200));
        assert!(
            compaction_spares(1000, 1500, 1500),
            "1500 itself is still there"
        );
        // The compaction reached its own start too, or it was not aligned: compacted.
        assert!(!compaction_spares(1000, 1500, 1501));
        assert!(!compaction_spares(1500, 1500, 1200));
    }
}
