//! A valid history for the self-tests: a random KV workload with ambiguous writes, two election
//! holds handing over with fenced puts, a lease that expires after its holder stopped renewing,
//! and three watches (one resumed by a second, one from a saved revision over everything).
//!
//! The planted-bug tests mutate a copy of it; they find what they change, so a real recorded
//! history (`serde_json::from_str::<History>`) can take its place.

use super::keyspace::Keyspace;
use super::sim::{Action, Fate, MS, Plan, Shape, Sim, workload};
use crate::history::{
    Batch, Belief, Delivery, History, HoldKind, HoldLog, LeaseLog, Nanos, Release, Request,
    WatchEnd, WatchEvent, WatchLog,
};

const PREFIX: &str = "/rb/";
const ELECTION: &str = "/rb/elect/leader";
const LEASE: i64 = 7;
const TTL: Nanos = 1_000 * MS;
const END: Nanos = 2_000 * MS;
/// A workload seed whose mix has every outcome (checked by the self-tests).
const SEED: u64 = 4;

pub fn valid_history() -> History {
    valid_history_seeded(SEED)
}

pub fn valid_history_seeded(seed: u64) -> History {
    let mut sim = Sim::new(PREFIX, 100);
    let a = format!("{ELECTION}/a1");
    let b = format!("{ELECTION}/b2");
    // The two contenders' campaign keys: the first to create owns the election.
    sim.run(vec![
        (
            10 * MS,
            Action::Put {
                key: a.clone(),
                value: "contender 1".into(),
                lease: 11,
            },
        ),
        (
            20 * MS,
            Action::Put {
                key: b.clone(),
                value: "contender 2".into(),
                lease: 12,
            },
        ),
    ]);
    let hold = |contender, key: &str, create_revision, acquired_at, released_at| HoldLog {
        kind: HoldKind::Election,
        name: ELECTION.into(),
        contender,
        key: key.into(),
        create_revision,
        acquired_at,
        released_at,
        release: released_at.map(|_| Release::Resigned),
    };
    sim.h.holds.push(hold(1, &a, 101, 15 * MS, Some(400 * MS)));
    sim.h.holds.push(hold(2, &b, 102, 410 * MS, None));

    let shape = Shape {
        seed,
        keys: 4,
        processes: 4,
        ops: 100,
        unknown_writes: 0.2,
        think: 60 * MS,
        stall: 0.05,
        from: 50 * MS,
    };
    let mut actions = workload(shape, PREFIX);
    let fenced = |n: u32, hold: usize, at: Nanos| {
        let request = Request::FencedPut {
            key: format!("{PREFIX}kv/fenced"),
            value: format!("f{hold}-{n}"),
            hold,
        };
        let plan = Plan {
            process: 90 + hold as u32,
            invoke: at,
            at: at + MS,
            ret: at + 3 * MS,
            request,
            fate: Fate::Ok,
        };
        (at + MS, Action::Op(plan))
    };
    for n in 0..3 {
        actions.push(fenced(n, 0, (100 + 100 * n as Nanos) * MS));
        actions.push(fenced(n, 1, (500 + 100 * n as Nanos) * MS));
    }
    // Contender 1 resigns at 400 ms; contender 2 sees its key gone and takes over.
    actions.push((401 * MS, Action::Delete { key: a.clone() }));
    for (n, key) in ["a", "b"].iter().enumerate() {
        let request = Request::Put {
            key: format!("{PREFIX}lease/{key}"),
            value: format!("lease-{key}"),
            lease: Some(LEASE),
        };
        let invoke = (40 + 5 * n as Nanos) * MS;
        let plan = Plan {
            process: 95,
            invoke,
            at: invoke + MS,
            ret: invoke + 2 * MS,
            request,
            fate: Fate::Ok,
        };
        actions.push((invoke + MS, Action::Op(plan)));
    }
    // The keeper's last renewal went out at 696 ms; the server revokes at 1.9 s.
    let lease_keys = vec![format!("{PREFIX}lease/a"), format!("{PREFIX}lease/b")];
    actions.push((
        1_900 * MS,
        Action::Expire {
            keys: lease_keys.clone(),
        },
    ));
    sim.run(actions);
    sim.h.leases.push(lease_log(lease_keys));
    let mut h = sim.finish(END);
    h.watches = watches(&h);
    h
}

/// Renewals sent every TTL/3 until 696 ms; the belief sampled every 100 ms; lost() at the
/// believed deadline.
fn lease_log(keys: Vec<String>) -> LeaseLog {
    let sent = [30 * MS, 363 * MS, 696 * MS];
    let beliefs = (0..17)
        .map(|i| {
            let at = (50 + 100 * i) * MS;
            let last = sent
                .iter()
                .rev()
                .find(|&&s| s <= at)
                .copied()
                .unwrap_or(30 * MS);
            Belief {
                at,
                until: last + TTL,
            }
        })
        .collect();
    LeaseLog {
        lease: LEASE,
        client: 0,
        ttl_ms: TTL / MS,
        granted_at: 30 * MS,
        keys,
        beliefs,
        lost_at: Some(696 * MS + TTL + 2 * MS),
        revoked_at: None,
    }
}

/// A watch of the KV keys from now, cancelled at 900 ms and resumed from the next revision;
/// a watch of everything from a saved revision.
fn watches(h: &History) -> Vec<WatchLog> {
    let truth = Keyspace::new(h);
    let kv = format!("{PREFIX}kv/");
    let created = 102;
    let mut first = deliveries(&truth, &kv, created + 1, 1, false, 30 * MS, |t| {
        t < 900 * MS
    });
    let reached = first.iter().filter_map(|d| match &d.batch {
        Batch::Events { revision, .. } => Some(*revision),
        _ => None,
    });
    let reached = reached.max().unwrap_or(created);
    // A progress notification in the middle: everything up to it was delivered.
    if first.len() > 5 {
        let (at, revision) = (first[4].at, first[4].batch_revision());
        first.insert(
            5,
            Delivery {
                at,
                batch: Batch::Progress { revision },
            },
        );
    }
    let mut second = deliveries(&truth, &kv, reached + 1, 2, true, 950 * MS, |_| true);
    let last = truth.last_revision().unwrap_or(h.start_revision);
    second.push(Delivery {
        at: END - 5 * MS,
        batch: Batch::Progress { revision: last },
    });
    let all = deliveries(
        &truth,
        PREFIX,
        h.start_revision + 1,
        3,
        true,
        5 * MS,
        |_| true,
    );
    let log = |id,
               prefix: &str,
               prev_kv,
               start_revision,
               created_revision,
               created_at,
               deliveries,
               ended| WatchLog {
        id,
        client: id % 2,
        prefix: prefix.into(),
        prev_kv,
        start_revision,
        created_revision,
        created_at,
        established: true,
        deliveries,
        ended,
    };
    vec![
        log(
            0,
            &kv,
            false,
            0,
            Some(created),
            30 * MS,
            first,
            Some(WatchEnd::Cancelled { at: 900 * MS }),
        ),
        log(1, &kv, true, reached + 1, None, 950 * MS, second, None),
        log(
            2,
            PREFIX,
            true,
            h.start_revision + 1,
            None,
            5 * MS,
            all,
            None,
        ),
    ]
}

trait BatchRevision {
    fn batch_revision(&self) -> i64;
}

impl BatchRevision for Delivery {
    fn batch_revision(&self) -> i64 {
        match &self.batch {
            Batch::Events { revision, .. }
            | Batch::Progress { revision }
            | Batch::Reloaded { revision, .. } => *revision,
            Batch::Compacted { compact_revision } => *compact_revision,
        }
    }
}

/// The truth events under `prefix` from revision `from`, `per_batch` revisions a delivery,
/// delivered 1 ms after a collector saw them (not before `not_before`), while `keep(seen_at)`.
fn deliveries(
    truth: &Keyspace,
    prefix: &str,
    from: i64,
    per_batch: usize,
    prev_kv: bool,
    not_before: Nanos,
    keep: impl Fn(Nanos) -> bool,
) -> Vec<Delivery> {
    let mut revisions: Vec<(i64, Vec<WatchEvent>, Nanos)> = Vec::new();
    for e in truth
        .under(prefix)
        .into_iter()
        .filter(|e| e.revision >= from && keep(e.seen_at))
    {
        let event = WatchEvent {
            revision: e.revision,
            key: e.key.clone(),
            kind: e.kind,
            value: e.value.clone(),
            create_revision: e.create_revision,
            version: e.version,
            prev_value: prev_kv
                .then(|| truth.value_at(&e.key, e.revision - 1).map(String::from))
                .flatten(),
        };
        match revisions.last_mut() {
            Some((r, events, _)) if *r == e.revision => events.push(event),
            _ => revisions.push((e.revision, vec![event], e.seen_at)),
        }
    }
    revisions
        .chunks(per_batch)
        .map(|chunk| {
            let (revision, _, seen) = chunk.last().unwrap();
            Delivery {
                at: (*seen).max(not_before) + MS,
                batch: Batch::Events {
                    revision: *revision,
                    events: chunk.iter().flat_map(|(_, e, _)| e.clone()).collect(),
                },
            }
        })
        .collect()
}
