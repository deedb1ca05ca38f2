//! The watch probe: how each client's watch lives through the fault. A neutral writer (a
//! separate etcd-ha client) puts `<root>watch/<seq>` every [`WRITE_PACE`]; every client under
//! test watches that prefix. Measured per client: the time from the fault to the delivery of
//! the first event of a write *started* after it, and the events lost (acknowledged writes
//! never delivered, from the first one the watcher saw), repeated or out of order.
//!
//! What each client's watch is:
//!
//! - etcd-ha: the managed watch (`client.watch().watch(prefix, ..)`), which fails over and
//!   resumes by itself.
//! - etcd-client default and tuned: the crate's watch stream as given; when it ends or fails,
//!   the watch is over (the crate has no resume, etcd-client #17).
//! - etcd-client tuned-retry: the careful application's loop around it: on an error or an end,
//!   create the watch again from the revision after the last one delivered, with backoff.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;
use tokio::time::{Instant, MissedTickBehavior};

/// Least time between two writes of the probe's writer: 10 ms, as the loops.
pub const WRITE_PACE: Duration = Duration::from_millis(10);

/// The writer's bound on one put: 1 s; a put that takes longer is abandoned and not counted
/// as acknowledged.
const WRITE_DEADLINE: Duration = Duration::from_secs(1);

/// First and longest backoff of the tuned-retry application's watch loop (as its call loop).
const RESUME_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(50), Duration::from_millis(400));

/// One put of the writer.
#[derive(Debug, Clone)]
pub struct Write {
    /// Its number, also the key's suffix.
    pub seq: u64,
    /// When it started, in microseconds since the trial's start.
    pub start_us: u64,
    /// True if etcd acknowledged it within [`WRITE_DEADLINE`].
    pub acked: bool,
}

/// One event as a watcher got it.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    /// The write's number, from the key.
    pub seq: u64,
    /// The event's mod revision: the order the cluster applied the writes in (a put the
    /// writer gave up on may be applied after a later one, so `seq` order is not it).
    pub revision: i64,
    /// When the watcher got it, in microseconds since the trial's start.
    pub at_us: u64,
}

/// What a watcher saw, and why it stopped early if it did.
#[derive(Debug, Default)]
pub struct Watched {
    /// Every event, in delivery order.
    pub seen: Vec<Seen>,
    /// Set if the watch ended before the end of the probe (an error, an end of stream).
    pub ended: Option<String>,
    /// How often the application's loop had to create the watch again (tuned-retry only).
    pub recreated: u64,
}

/// The probe's numbers for one client in one trial.
#[derive(Debug, Clone, Serialize)]
pub struct WatchMetrics {
    /// From the fault to the delivery of the first event of a write started after it; `None`
    /// if none arrived.
    pub first_event_after_fault_ms: Option<f64>,
    /// Events delivered.
    pub delivered: u64,
    /// Acknowledged writes whose event never arrived.
    pub lost: u64,
    /// Events delivered more than once.
    pub repeated: u64,
    /// Events delivered after an event of a higher revision.
    pub out_of_order: u64,
    /// Why the watch ended early, if it did.
    pub ended: Option<String>,
    /// Times the application's loop created the watch again.
    pub recreated: u64,
}

/// The key of write `seq` under `prefix`.
fn key(prefix: &str, seq: u64) -> String {
    format!("{prefix}{seq:08}")
}

/// The write number in `key`, if it is one of the probe's.
fn seq_of(key: &[u8], prefix: &str) -> Option<u64> {
    std::str::from_utf8(key)
        .ok()?
        .strip_prefix(prefix)?
        .parse()
        .ok()
}

/// Microseconds from `start` to now.
fn since(start: Instant) -> u64 {
    start.elapsed().as_micros() as u64
}

/// Puts a new key under `prefix` every [`WRITE_PACE`] from now until `stop_at`.
pub async fn write(
    kv: etcd_ha::Kv,
    prefix: String,
    start: Instant,
    stop_at: Instant,
) -> Vec<Write> {
    let mut writes = Vec::new();
    let mut pace = tokio::time::interval(WRITE_PACE);
    pace.set_missed_tick_behavior(MissedTickBehavior::Delay);
    for seq in 0.. {
        pace.tick().await;
        if Instant::now() >= stop_at {
            break;
        }
        let start_us = since(start);
        let put = kv.put(
            key(&prefix, seq),
            seq.to_string(),
            etcd_ha::PutOptions::new(),
        );
        let acked = matches!(tokio::time::timeout(WRITE_DEADLINE, put).await, Ok(Ok(_)));
        writes.push(Write {
            seq,
            start_us,
            acked,
        });
    }
    writes
}

/// Watches `prefix` with etcd-ha's managed watch until `until`.
pub async fn watch_ha(
    watch: etcd_ha::Watch,
    prefix: String,
    start: Instant,
    until: Instant,
) -> Watched {
    let mut out = Watched::default();
    let options = etcd_ha::WatchOptions::new().with_prefix();
    let mut stream = match watch.watch(prefix.clone(), options).await {
        Ok(stream) => stream,
        Err(e) => {
            out.ended = Some(format!("could not watch: {e}"));
            return out;
        }
    };
    loop {
        let batch = match tokio::time::timeout_at(until, stream.next_batch()).await {
            Err(_until) => return out,
            Ok(None) => {
                out.ended = Some("stream ended".to_string());
                return out;
            }
            Ok(Some(Err(e))) => {
                out.ended = Some(format!("{e}"));
                return out;
            }
            Ok(Some(Ok(batch))) => batch,
        };
        if let etcd_ha::WatchBatch::Events { events, .. } = batch {
            let at_us = since(start);
            let seen = events.iter().filter_map(|e| {
                let kv = e.kv.as_ref()?;
                let seq = seq_of(&kv.key, &prefix)?;
                Some(Seen {
                    seq,
                    revision: kv.mod_revision,
                    at_us,
                })
            });
            out.seen.extend(seen);
        }
    }
}

/// Watches `prefix` with etcd-client until `until`; with `resume`, as the careful application
/// does, creating the watch again from the revision after the last one delivered.
pub async fn watch_ec(
    mut client: etcd_client::WatchClient,
    prefix: String,
    start: Instant,
    until: Instant,
    resume: bool,
) -> Watched {
    let mut out = Watched::default();
    let mut next_revision = 0;
    let mut backoff = RESUME_BACKOFF.0;
    loop {
        let mut options = etcd_client::WatchOptions::new().with_prefix();
        if next_revision > 0 {
            options = options.with_start_revision(next_revision);
        }
        let created = tokio::time::timeout_at(until, client.watch(prefix.clone(), Some(options)));
        let reason = match created.await {
            Err(_until) => return out,
            Ok(Err(e)) => format!("could not watch: {e}"),
            Ok(Ok(mut stream)) => loop {
                let message = match tokio::time::timeout_at(until, stream.message()).await {
                    Err(_until) => return out,
                    Ok(message) => message,
                };
                let response = match message {
                    Ok(Some(response)) => response,
                    Ok(None) => break "stream ended".to_string(),
                    Err(e) => break e.to_string(),
                };
                if response.canceled() {
                    break format!("canceled: {}", response.cancel_reason());
                }
                let at_us = since(start);
                for kv in response.events().iter().filter_map(|e| e.kv()) {
                    next_revision = next_revision.max(kv.mod_revision() + 1);
                    if let Some(seq) = seq_of(kv.key(), &prefix) {
                        let revision = kv.mod_revision();
                        out.seen.push(Seen {
                            seq,
                            revision,
                            at_us,
                        });
                    }
                }
                backoff = RESUME_BACKOFF.0;
            },
        };
        if !resume {
            out.ended = Some(reason);
            return out;
        }
        out.recreated += 1;
        tokio::time::sleep(backoff.min(until.saturating_duration_since(Instant::now()))).await;
        backoff = (backoff * 2).min(RESUME_BACKOFF.1);
        if Instant::now() >= until {
            return out;
        }
    }
}

/// The probe's numbers for one watcher, given the writer's writes and the fault's instant.
pub fn evaluate(writes: &[Write], watched: Watched, fault_us: u64) -> WatchMetrics {
    let started: HashMap<u64, u64> = writes.iter().map(|w| (w.seq, w.start_us)).collect();
    let mut count: HashMap<u64, u64> = HashMap::new();
    let (mut out_of_order, mut highest) = (0, None);
    for s in &watched.seen {
        *count.entry(s.seq).or_insert(0) += 1;
        if highest.is_some_and(|h| s.revision < h) {
            out_of_order += 1;
        }
        highest = highest.max(Some(s.revision));
    }
    // The writer starts with the watchers, whose watches are made "from now": a write applied
    // before a watch existed is not that watch's to deliver (seen in every run: the first one
    // or two writes, for etcd-ha and etcd-client alike, 2 s before any fault). The writer is
    // sequential, so every write numbered below the first one a watcher saw was applied before
    // it, and only those are left out. A watcher that saw nothing lost everything.
    let watched_from = watched.seen.iter().map(|s| s.seq).min();
    let first = watched
        .seen
        .iter()
        .filter(|s| started.get(&s.seq).is_some_and(|&t| t >= fault_us))
        .map(|s| s.at_us.saturating_sub(fault_us))
        .min();
    WatchMetrics {
        first_event_after_fault_ms: first.map(|us| us as f64 / 1000.0),
        delivered: watched.seen.len() as u64,
        lost: writes
            .iter()
            .filter(|w| w.acked && !count.contains_key(&w.seq))
            .filter(|w| watched_from.is_none_or(|first| w.seq > first))
            .count() as u64,
        repeated: count.values().map(|&n| n.saturating_sub(1)).sum(),
        out_of_order,
        ended: watched.ended,
        recreated: watched.recreated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_repeated_and_first_after_fault() {
        let writes: Vec<Write> = (0..4)
            .map(|seq| Write {
                seq,
                start_us: seq * 1000,
                acked: true,
            })
            .collect();
        // Write 1 was applied after write 2 (revision 12 after 11): no reorder; the repeat of
        // write 2 and the event at revision 10 after 12 are.
        let seen = [
            (0, 9, 500),
            (2, 11, 2500),
            (1, 12, 2700),
            (2, 11, 2800),
            (3, 10, 2900),
        ]
        .map(|(seq, revision, at_us)| Seen {
            seq,
            revision,
            at_us,
        })
        .to_vec();
        let watched = Watched {
            seen,
            ..Watched::default()
        };
        let m = evaluate(&writes, watched, 1500);
        assert_eq!(m.first_event_after_fault_ms, Some(1.0));
        assert_eq!((m.lost, m.repeated, m.out_of_order), (0, 1, 2));
        assert_eq!(seq_of(b"p/00000012", "p/"), Some(12));
    }

    #[test]
    fn writes_before_the_first_seen_predate_the_watch_and_later_gaps_are_lost() {
        let writes: Vec<Write> = (0..6)
            .map(|seq| Write {
                seq,
                start_us: seq * 1000,
                acked: true,
            })
            .collect();
        let seen = |seqs: &[u64]| Watched {
            seen: seqs
                .iter()
                .map(|&seq| Seen {
                    seq,
                    revision: seq as i64 + 10,
                    at_us: seq * 1000 + 500,
                })
                .collect(),
            ..Watched::default()
        };
        // Writes 0 and 1 came before the watch; 4 is lost.
        assert_eq!(evaluate(&writes, seen(&[2, 3, 5]), 1500).lost, 1);
        // A watch that saw nothing lost every acknowledged write.
        assert_eq!(evaluate(&writes, seen(&[]), 1500).lost, 6);
    }
}
