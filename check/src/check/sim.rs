//! A tiny single-node etcd for the self-tests: it applies each operation at a chosen instant of
//! its interval, in time order, and records what a correct cluster and client would (responses,
//! truth events with `seen_at`), so the histories it makes are consistent by construction.

use std::collections::BTreeMap;

use crate::history::{EventKind, History, Nanos, Op, Outcome, Request, Response, TruthEvent};

pub const MS: Nanos = 1_000_000;

/// How long the collectors take to see an event.
const COLLECTOR_LAG: Nanos = MS;

/// How an operation ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Ok,
    Fail,
    /// Applied (if its condition held), but the client was not told.
    UnknownApplied,
    UnknownLost,
}

/// An operation to run: called at `invoke`, taking effect at `at`, returning at `ret`.
#[derive(Clone, Debug)]
pub struct Plan {
    pub process: u32,
    pub invoke: Nanos,
    pub at: Nanos,
    pub ret: Nanos,
    pub request: Request,
    pub fate: Fate,
}

/// Something that happens to the keyspace.
#[derive(Clone, Debug)]
pub enum Action {
    Op(Plan),
    /// A put by something that is not a workload operation (a campaign, a lock).
    Put {
        key: String,
        value: String,
        lease: i64,
    },
    /// A delete by something else (a resign); nothing if the key is absent.
    Delete {
        key: String,
    },
    /// A lease revoked or expired: its keys go in one revision.
    Expire {
        keys: Vec<String>,
    },
}

#[derive(Clone, Debug)]
struct Live {
    value: String,
    create_revision: i64,
    version: i64,
}

pub struct Sim {
    pub h: History,
    live: BTreeMap<String, Live>,
    /// The newest revision each client was answered (its monotonic-read floor).
    seen: BTreeMap<u32, i64>,
}

impl Sim {
    pub fn new(prefix: &str, start_revision: i64) -> Self {
        let h = History {
            seed: 1,
            etcd_version: "sim".into(),
            prefix: prefix.into(),
            start_revision,
            ..History::default()
        };
        Sim {
            h,
            live: BTreeMap::new(),
            seen: BTreeMap::new(),
        }
    }

    pub fn revision(&self) -> i64 {
        self.h
            .truth
            .last()
            .map_or(self.h.start_revision, |e| e.revision)
    }

    /// Applies `actions` in time order (ties keep their order).
    pub fn run(&mut self, mut actions: Vec<(Nanos, Action)>) {
        actions.sort_by_key(|(t, _)| *t);
        for (at, action) in actions {
            match action {
                Action::Op(plan) => self.apply(plan),
                Action::Put { key, value, lease } => {
                    self.put(at, &key, &value, lease);
                }
                Action::Delete { key } => {
                    self.delete(at, &[key]);
                }
                Action::Expire { keys } => {
                    self.delete(at, &keys);
                }
            }
        }
    }

    /// The history, operations in invoke order with ids to match.
    pub fn finish(mut self, end: Nanos) -> History {
        self.h.ops.sort_by_key(|op| (op.invoke, op.process));
        for (i, op) in self.h.ops.iter_mut().enumerate() {
            op.id = i as u64;
        }
        self.h.end = end;
        self.h
    }

    fn put(&mut self, at: Nanos, key: &str, value: &str, lease: i64) -> i64 {
        let revision = self.revision() + 1;
        let before = self.live.get(key);
        let live = Live {
            value: value.into(),
            create_revision: before.map_or(revision, |l| l.create_revision),
            version: before.map_or(1, |l| l.version + 1),
        };
        self.h.truth.push(TruthEvent {
            revision,
            key: key.into(),
            kind: EventKind::Put,
            value: Some(value.into()),
            create_revision: live.create_revision,
            version: live.version,
            lease,
            seen_at: at + COLLECTOR_LAG,
        });
        self.live.insert(key.into(), live);
        revision
    }

    /// Deletes the present ones of `keys` in one revision; `None` if none was present.
    fn delete(&mut self, at: Nanos, keys: &[String]) -> Option<i64> {
        let revision = self.revision() + 1;
        let mut any = false;
        for key in keys {
            if self.live.remove(key).is_some() {
                any = true;
                self.h.truth.push(TruthEvent {
                    revision,
                    key: key.clone(),
                    kind: EventKind::Delete,
                    value: None,
                    create_revision: 0,
                    version: 0,
                    lease: 0,
                    seen_at: at + COLLECTOR_LAG,
                });
            }
        }
        any.then_some(revision)
    }

    /// `key`'s value and mod revision at `revision`, from the truth so far.
    fn read_at(&self, key: &str, revision: i64) -> (Option<String>, i64) {
        let last = self
            .h
            .truth
            .iter()
            .rev()
            .find(|e| e.key == key && e.revision <= revision);
        match last {
            Some(e) if e.kind == EventKind::Put => (e.value.clone(), e.revision),
            _ => (None, 0),
        }
    }

    fn apply(&mut self, mut plan: Plan) {
        let applies = matches!(plan.fate, Fate::Ok | Fate::UnknownApplied);
        let at = plan.at;
        let current = |sim: &Sim, key: &str| sim.live.get(key).map(|l| l.value.clone());
        let response = match &mut plan.request {
            Request::Put { key, value, lease } => {
                let revision = if applies {
                    self.put(at, key, value, lease.unwrap_or(0))
                } else {
                    0
                };
                Response::Put { revision }
            }
            Request::Delete { key } => match applies
                .then(|| self.delete(at, std::slice::from_ref(key)))
                .flatten()
            {
                Some(revision) => Response::Delete {
                    revision,
                    deleted: 1,
                },
                None => Response::Delete {
                    revision: self.revision(),
                    deleted: 0,
                },
            },
            Request::Get { key, serializable } => {
                // A serializable read may come from a member a few revisions behind, but never
                // from below what its client was answered before (the monotonic guard).
                let lag = if *serializable {
                    i64::from(plan.process % 3)
                } else {
                    0
                };
                let floor = self.seen.get(&(plan.process % 2)).copied().unwrap_or(0);
                let revision = (self.revision() - lag)
                    .max(self.h.start_revision)
                    .max(floor);
                let (value, mod_revision) = self.read_at(key, revision);
                Response::Get {
                    revision,
                    value,
                    mod_revision,
                }
            }
            // A cache answers at the newest revision; an `AtLeast` read's token is a revision
            // already reached (the one it is answered at, the tightest valid token).
            Request::CacheGet { key, at_least } => {
                let revision = self.revision().max(self.h.start_revision);
                if at_least.is_some() {
                    *at_least = Some(revision);
                }
                let (value, mod_revision) = self.read_at(key, revision);
                Response::Get {
                    revision,
                    value,
                    mod_revision,
                }
            }
            Request::Cas { key, expect, value } => {
                let now = current(self, key);
                match (now == *expect, applies) {
                    (true, true) => Response::Cas {
                        revision: self.put(at, key, value, 0),
                        succeeded: true,
                        value: None,
                    },
                    (true, false) => Response::Cas {
                        revision: 0,
                        succeeded: true,
                        value: None,
                    },
                    (false, _) => Response::Cas {
                        revision: self.revision(),
                        succeeded: false,
                        value: now,
                    },
                }
            }
            Request::FencedPut { key, value, hold } => {
                let h = &self.h.holds[*hold];
                let fence = self
                    .live
                    .get(&h.key)
                    .is_some_and(|l| l.create_revision == h.create_revision);
                match (fence, applies) {
                    (true, true) => Response::Fenced {
                        revision: self.put(at, key, value, 0),
                        succeeded: true,
                    },
                    (true, false) => Response::Fenced {
                        revision: 0,
                        succeeded: true,
                    },
                    (false, _) => Response::Fenced {
                        revision: self.revision(),
                        succeeded: false,
                    },
                }
            }
        };
        if plan.fate == Fate::Ok {
            let seen = self.seen.entry(plan.process % 2).or_default();
            *seen = (*seen).max(response.revision());
        }
        let outcome = match plan.fate {
            Fate::Ok => Outcome::Ok(response),
            Fate::Fail => Outcome::Fail {
                error: "sim: refused before sending".into(),
            },
            Fate::UnknownApplied | Fate::UnknownLost => Outcome::Unknown {
                error: "sim: timed out".into(),
            },
        };
        self.h.ops.push(Op {
            id: 0,
            process: plan.process,
            client: plan.process % 2,
            invoke: plan.invoke,
            ret: plan.ret,
            request: plan.request,
            outcome,
        });
    }
}

/// The shape of a random KV workload.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub seed: u64,
    pub keys: usize,
    pub processes: u32,
    pub ops: usize,
    /// The share of writes that end `Unknown` (half of them applied).
    pub unknown_writes: f64,
    /// Pause between a process's operations.
    pub think: Nanos,
    /// The share of operations that hang 0.1 to 2 s (waiting out a fault), overlapping many.
    pub stall: f64,
    pub from: Nanos,
}

/// A random mix of puts, cas, deletes and reads on `<prefix>kv/<n>`, as the harness runs.
pub fn workload(shape: Shape, prefix: &str) -> Vec<(Nanos, Action)> {
    let mut rng = fastrand::Rng::with_seed(shape.seed);
    let mut written: Vec<Vec<String>> = vec![Vec::new(); shape.keys];
    let mut actions = Vec::new();
    let per_process = shape.ops / shape.processes as usize;
    for slot in 0..shape.processes {
        let mut process = slot;
        let mut t = shape.from + rng.u64(0..MS);
        for n in 0..per_process {
            let invoke = t + rng.u64(0..=shape.think);
            let took = match rng.f64() < shape.stall {
                true => rng.u64(100 * MS..2_000 * MS),
                false => rng.u64(MS / 2..8 * MS),
            };
            let ret = invoke + took;
            let k = rng.usize(0..shape.keys);
            let key = format!("{prefix}kv/{k}");
            let value = format!("v{process}-{n}");
            let roll = rng.u32(0..100);
            let request = match roll {
                0..35 => Request::Put {
                    key,
                    value: value.clone(),
                    lease: None,
                },
                35..45 => {
                    let expect = if rng.bool() {
                        written[k].last().cloned()
                    } else {
                        None
                    };
                    Request::Cas {
                        key,
                        expect,
                        value: value.clone(),
                    }
                }
                45..50 => Request::Delete { key },
                50..80 => Request::Get {
                    key,
                    serializable: false,
                },
                80..85 => Request::CacheGet {
                    key,
                    at_least: None,
                },
                85..88 => Request::CacheGet {
                    key,
                    at_least: Some(0),
                },
                _ => Request::Get {
                    key,
                    serializable: true,
                },
            };
            if request.written_value().is_some() {
                written[k].push(value);
            }
            let draw = rng.f64();
            let fate = match request.is_write() {
                true if draw < shape.unknown_writes / 2.0 => Fate::UnknownApplied,
                true if draw < shape.unknown_writes => Fate::UnknownLost,
                true if draw < shape.unknown_writes + 0.03 => Fate::Fail,
                false if draw < 0.02 => Fate::UnknownLost,
                _ => Fate::Ok,
            };
            // An ambiguous write may still land after its caller gave up.
            let at = match fate {
                Fate::UnknownApplied if rng.bool() => ret + rng.u64(0..5 * MS),
                _ => invoke + rng.u64(0..=took),
            };
            actions.push((
                at,
                Action::Op(Plan {
                    process,
                    invoke,
                    at,
                    ret,
                    request,
                    fate,
                }),
            ));
            // After an ambiguous outcome the harness goes on as a new process (Jepsen's rule).
            if matches!(fate, Fate::UnknownApplied | Fate::UnknownLost) {
                process += shape.processes;
            }
            t = ret;
        }
    }
    actions
}
