//! Each watch's user-visible stream against the truth events under its prefix: etcd's watch
//! guarantees (`validate/watch.go`: ordered, unique, atomic, reliable, resumable, bookmarkable,
//! prev-kv, is-create) plus the managed watch's own contract on compaction (a `Compacted` batch
//! ends it; a `Reloaded` one restarts it from a re-read state).
//!
//! Reliability is judged per segment (from the first expected revision, or from a reload, up to
//! the last revision the segment delivered) as a set difference, so a reordering is reported
//! once, as ordered, and not again as a gap.

use std::collections::HashMap;

use super::keyspace::Keyspace;
use super::report::{Property, Report};
use super::show;
use crate::history::{Batch, History, TruthEvent, WatchEvent, WatchLog};

pub fn check(history: &History, truth: &Keyspace, report: &mut Report) {
    // Without a compaction, a missing previous value is a bug; after one, etcd may drop it.
    let compacted = history
        .faults
        .iter()
        .any(|f| f.kind.to_lowercase().contains("compact"));
    for w in &history.watches {
        report.stats.watches += 1;
        let mut walk = Walk::new(w, truth, compacted);
        walk.run(report);
    }
}

/// The state of one watch's walk through its deliveries.
struct Walk<'a> {
    w: &'a WatchLog,
    truth: &'a Keyspace<'a>,
    compacted: bool,
    /// Truth events under the prefix, and the same by (revision, key).
    expected: Vec<&'a TruthEvent>,
    by_id: HashMap<(i64, &'a str), &'a TruthEvent>,
    /// The current segment's first expected revision (`None`: unknown, the creation never
    /// answered: the first event sets it).
    from: Option<i64>,
    /// Events delivered in the current segment, with the delivery that brought them.
    delivered: HashMap<(i64, &'a str), usize>,
    /// The delivery that first brought each revision (atomicity).
    revision_delivery: HashMap<i64, usize>,
    /// The highest event revision delivered, and the last progress revision.
    last_revision: i64,
    progress: i64,
    events_seen: usize,
    /// Whether the start was judged (by the first event, or skipped by a reload before it).
    start_judged: bool,
}

impl<'a> Walk<'a> {
    fn new(w: &'a WatchLog, truth: &'a Keyspace<'a>, compacted: bool) -> Self {
        let expected = truth.under(&w.prefix);
        let by_id = expected
            .iter()
            .map(|e| ((e.revision, e.key.as_str()), *e))
            .collect();
        let from = match (w.start_revision, w.created_revision) {
            (s, _) if s > 0 => Some(s),
            (_, Some(created)) => Some(created + 1),
            (_, None) => None,
        };
        Walk {
            w,
            truth,
            compacted,
            expected,
            by_id,
            from,
            delivered: HashMap::new(),
            revision_delivery: HashMap::new(),
            last_revision: 0,
            progress: 0,
            events_seen: 0,
            start_judged: false,
        }
    }

    fn header(&self) -> String {
        let w = self.w;
        format!(
            "watch {} on {} (start {}, created {:?}, prev_kv {}):",
            w.id, w.prefix, w.start_revision, w.created_revision, w.prev_kv
        )
    }

    fn violation(&self, report: &mut Report, property: Property, lines: Vec<String>) {
        let mut all = vec![self.header()];
        all.extend(lines);
        report.violation(property, show::lines(all));
    }

    fn run(&mut self, report: &mut Report) {
        let mut ended_at = None;
        for (i, d) in self.w.deliveries.iter().enumerate() {
            if let Some(end) = ended_at {
                let lines = vec![
                    format!("delivery after the compaction of delivery {end}:"),
                    show::delivery(i, d),
                ];
                self.violation(report, Property::WatchCompaction, lines);
                break;
            }
            match &d.batch {
                Batch::Events { events, .. } => {
                    for e in events {
                        self.event(i, e, report);
                    }
                }
                Batch::Progress { revision } => self.progress(i, *revision, report),
                Batch::Compacted { .. } => ended_at = Some(i),
                Batch::Reloaded { revision, keys } => self.reloaded(i, *revision, keys, report),
            }
        }
        self.end_segment(report);
        report.stats.watch_events += self.events_seen;
    }

    fn event(&mut self, i: usize, e: &'a WatchEvent, report: &mut Report) {
        self.events_seen += 1;
        let d = &self.w.deliveries[i];
        let id = (e.revision, e.key.as_str());
        if self.from.is_none() {
            self.from = Some(e.revision);
        }
        if self.w.start_revision > 0 && !self.start_judged {
            self.resumable(i, e, report);
        }
        self.start_judged = true;
        if e.revision < self.last_revision {
            let lines = vec![
                format!("revision {} after {}:", e.revision, self.last_revision),
                show::delivery(i, d),
            ];
            self.violation(report, Property::WatchOrdered, lines);
        }
        if e.revision <= self.progress {
            let lines = vec![
                format!("event at or below the progress revision {}:", self.progress),
                show::delivery(i, d),
            ];
            self.violation(report, Property::WatchBookmarkable, lines);
        }
        if let Some(&first) = self.delivered.get(&id) {
            let lines = vec![
                format!("first in delivery {first}, again in delivery {i}:"),
                show::watch_event(e),
            ];
            self.violation(report, Property::WatchUnique, lines);
            return;
        }
        self.delivered.insert(id, i);
        self.last_revision = self.last_revision.max(e.revision);
        let first = *self.revision_delivery.entry(e.revision).or_insert(i);
        if first != i {
            let lines = vec![
                format!(
                    "revision {} split between deliveries {first} and {i}:",
                    e.revision
                ),
                show::delivery(first, &self.w.deliveries[first]),
                show::delivery(i, d),
            ];
            self.violation(report, Property::WatchAtomic, lines);
        }
        self.content(e, report);
    }

    /// The delivered event against the truth's event of that (revision, key).
    fn content(&self, e: &WatchEvent, report: &mut Report) {
        let Some(t) = self.by_id.get(&(e.revision, e.key.as_str())) else {
            let why = match self.from {
                Some(from) if e.revision < from => {
                    format!("an event before the watch's start {from}:")
                }
                _ => "an event the truth does not have:".to_string(),
            };
            self.violation(
                report,
                Property::WatchReliable,
                vec![why, show::watch_event(e)],
            );
            return;
        };
        if e.kind != t.kind || e.value != t.value {
            let lines = vec![
                "delivered, not as the truth has it:".into(),
                show::watch_event(e),
                show::event(t),
            ];
            self.violation(report, Property::WatchReliable, lines);
        }
        if e.create_revision != t.create_revision || e.version != t.version {
            let lines = vec![
                "create revision or version differ:".into(),
                show::watch_event(e),
                show::event(t),
            ];
            self.violation(report, Property::WatchIsCreate, lines);
        }
        if self.w.prev_kv {
            let before = self.truth.value_at(&e.key, e.revision - 1);
            let allowed =
                e.prev_value.as_deref() == before || (e.prev_value.is_none() && self.compacted);
            if !allowed {
                let lines = vec![
                    format!("previous value should be {}:", show::opt(before)),
                    show::watch_event(e),
                ];
                self.violation(report, Property::WatchPrevKv, lines);
            }
        }
    }

    /// A watch started at a revision begins with the first truth event at or above it.
    fn resumable(&self, i: usize, e: &WatchEvent, report: &mut Report) {
        let first = self
            .expected
            .iter()
            .find(|t| t.revision >= self.w.start_revision);
        if first.is_some_and(|t| (t.revision, t.key.as_str()) != (e.revision, e.key.as_str())) {
            let lines = vec![
                format!(
                    "the first truth event at or above {} is:",
                    self.w.start_revision
                ),
                show::event(first.unwrap()),
                show::delivery(i, &self.w.deliveries[i]),
            ];
            self.violation(report, Property::WatchResumable, lines);
        }
    }

    /// A progress at `revision` vouches that every event up to it was delivered.
    fn progress(&mut self, i: usize, revision: i64, report: &mut Report) {
        if revision < self.progress {
            let lines = vec![
                format!("progress went back from {}:", self.progress),
                show::delivery(i, &self.w.deliveries[i]),
            ];
            self.violation(report, Property::WatchBookmarkable, lines);
        }
        self.progress = self.progress.max(revision);
        let from = self.from.unwrap_or(i64::MAX);
        let missing: Vec<String> = self
            .expected
            .iter()
            .filter(|t| t.revision >= from && t.revision <= revision)
            .filter(|t| !self.delivered.contains_key(&(t.revision, t.key.as_str())))
            .take(5)
            .map(|t| show::event(t))
            .collect();
        if !missing.is_empty() {
            let mut lines = vec![
                show::delivery(i, &self.w.deliveries[i]),
                "before these were delivered:".into(),
            ];
            lines.extend(missing);
            self.violation(report, Property::WatchBookmarkable, lines);
        }
    }

    /// A reload re-reads the prefix at `revision`: its keys are the truth's live ones there,
    /// and events continue above it.
    fn reloaded(
        &mut self,
        i: usize,
        revision: i64,
        keys: &[(String, String)],
        report: &mut Report,
    ) {
        self.end_segment(report);
        self.start_judged = true;
        let live = self.truth.live_under(&self.w.prefix, revision);
        let want: Vec<(&str, &str)> = live
            .iter()
            .map(|(k, e)| (*k, e.value.as_deref().unwrap_or("")))
            .collect();
        let mut got: Vec<(&str, &str)> =
            keys.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        got.sort();
        if got != want {
            let lines = vec![
                show::delivery(i, &self.w.deliveries[i]),
                format!("got {got:?}"),
                format!("truth {want:?}"),
            ];
            self.violation(report, Property::WatchCompaction, lines);
        }
        if revision < self.last_revision {
            let lines = vec![
                format!("reload below the last event {}:", self.last_revision),
                show::delivery(i, &self.w.deliveries[i]),
            ];
            self.violation(report, Property::WatchOrdered, lines);
        }
        self.from = Some(revision + 1);
        self.delivered.clear();
        self.last_revision = self.last_revision.max(revision);
    }

    /// Every truth event from the segment's start to the last revision it delivered was
    /// delivered (no gap).
    fn end_segment(&self, report: &mut Report) {
        let Some(from) = self.from else { return };
        let last = self
            .delivered
            .keys()
            .map(|(r, _)| *r)
            .max()
            .unwrap_or(i64::MIN);
        let missing: Vec<&TruthEvent> = self
            .expected
            .iter()
            .filter(|t| t.revision >= from && t.revision <= last)
            .filter(|t| !self.delivered.contains_key(&(t.revision, t.key.as_str())))
            .copied()
            .collect();
        if let Some(first) = missing.first() {
            let mut lines = vec![format!(
                "{} truth event(s) between {from} and {last} never delivered, first:",
                missing.len()
            )];
            lines.push(show::event(first));
            // The deliveries of the nearest delivered revisions below and above the gap.
            let r = first.revision;
            let below = self
                .delivered
                .iter()
                .filter(|((x, _), _)| *x < r)
                .max_by_key(|((x, _), _)| *x);
            let above = self
                .delivered
                .iter()
                .filter(|((x, _), _)| *x > r)
                .min_by_key(|((x, _), _)| *x);
            let mut near: Vec<usize> = below.into_iter().chain(above).map(|(_, &d)| d).collect();
            near.sort();
            near.dedup();
            lines.push("deliveries around it:".into());
            lines.extend(
                near.iter()
                    .take(3)
                    .map(|&d| show::delivery(d, &self.w.deliveries[d])),
            );
            self.violation(report, Property::WatchReliable, lines);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::fixture::valid_history;
    use super::super::keyspace::Keyspace;
    use super::super::report::Property;
    use crate::history::{Batch, Delivery, History};

    /// The valid history with its second KV watch reloaded: its first `skip` deliveries
    /// replaced by a re-read at the last revision they reached, with `keys` edited by `edit`.
    fn reloaded(skip: usize, edit: impl Fn(&mut Vec<(String, String)>)) -> History {
        let mut h = valid_history();
        let w = h
            .watches
            .iter()
            .position(|w| w.start_revision > 0 && w.prefix.ends_with("kv/"))
            .unwrap();
        let Batch::Events { revision, .. } = h.watches[w].deliveries[skip - 1].batch else {
            panic!("events")
        };
        let truth = Keyspace::new(&h);
        let live = truth.live_under(&h.watches[w].prefix, revision);
        let mut keys: Vec<(String, String)> = live
            .iter()
            .map(|(k, e)| (k.to_string(), e.value.clone().unwrap()))
            .collect();
        edit(&mut keys);
        let at = h.watches[w].deliveries[skip - 1].at;
        let deliveries = &mut h.watches[w].deliveries;
        deliveries.drain(..skip);
        deliveries.insert(
            0,
            Delivery {
                at,
                batch: Batch::Reloaded { revision, keys },
            },
        );
        h
    }

    #[test]
    fn a_reload_with_the_truth_state_continues_the_watch() {
        let report = super::super::check(&reloaded(3, |_| {}), Duration::from_secs(30));
        assert!(report.is_ok(), "{report}");
    }

    #[test]
    fn a_reload_missing_a_key_is_caught() {
        let report = super::super::check(
            &reloaded(3, |keys| drop(keys.pop())),
            Duration::from_secs(30),
        );
        assert!(report.has(Property::WatchCompaction), "{report}");
    }

    #[test]
    fn a_delivery_after_compacted_is_caught() {
        let mut h = valid_history();
        let w = &mut h.watches[0];
        let at = w.deliveries[1].at;
        w.deliveries.insert(
            1,
            Delivery {
                at,
                batch: Batch::Compacted {
                    compact_revision: 90,
                },
            },
        );
        let report = super::super::check(&h, Duration::from_secs(30));
        assert!(report.has(Property::WatchCompaction), "{report}");
    }
}
