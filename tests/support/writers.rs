//! Writers for planned-maintenance tests: tasks that put without pause, each call with the
//! application's own deadline, and report every error that reached them, the longest gap
//! between successes, and when each success came (for the gap within one step of a test).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use etcd_ha::{Client, PutOptions};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What one writer saw.
#[derive(Debug)]
pub struct Seen {
    pub ok: u32,
    pub errors: Vec<String>,
    pub longest_gap: Duration,
    /// When each put was acknowledged, in order.
    pub acked_at: Vec<Instant>,
}

impl Seen {
    /// The longest time between two successes that overlaps `from..to`, and when it began.
    pub fn longest_gap_in(&self, from: Instant, to: Instant) -> (Duration, Instant) {
        self.acked_at
            .windows(2)
            .filter(|w| w[1] > from && w[0] < to)
            .map(|w| (w[1] - w[0], w[0]))
            .max()
            .unwrap_or((Duration::ZERO, from))
    }

    /// The longest time writes stood still within `from..to`: a gap that began before `from`
    /// counts from `from` only (it was not caused by what began then).
    pub fn longest_stall_in(&self, from: Instant, to: Instant) -> Duration {
        self.acked_at
            .windows(2)
            .filter(|w| w[1] > from && w[0] < to)
            .map(|w| w[1] - w[0].max(from))
            .max()
            .unwrap_or(Duration::ZERO)
    }
}

/// Running writers; [`Writers::finish`] stops them.
pub struct Writers {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<Seen>>,
}

impl Writers {
    /// Start `n` writers on `client`, each call bounded by `deadline`.
    pub fn start(client: &Client, n: usize, deadline: Duration) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..n)
            .map(|w| {
                let kv = client.kv().with_timeout(deadline);
                let stop = stop.clone();
                tokio::spawn(async move {
                    let key = super::unique("writer");
                    let mut seen = Seen {
                        ok: 0,
                        errors: Vec::new(),
                        longest_gap: Duration::ZERO,
                        acked_at: Vec::new(),
                    };
                    let mut last_ok = Instant::now();
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        i += 1;
                        let value = format!("{w}-{i}");
                        match kv.put(key.as_str(), value, PutOptions::new()).await {
                            Ok(_) => {
                                seen.ok += 1;
                                seen.longest_gap = seen.longest_gap.max(last_ok.elapsed());
                                last_ok = Instant::now();
                                seen.acked_at.push(last_ok);
                            }
                            Err(e) => seen.errors.push(e.to_string()),
                        }
                    }
                    seen
                })
            })
            .collect();
        Writers { stop, tasks }
    }

    /// Stop the writers and return what each saw.
    pub async fn finish(self) -> Vec<Seen> {
        self.stop.store(true, Ordering::Relaxed);
        let mut seen = Vec::new();
        for task in self.tasks {
            seen.push(task.await.expect("writer task"));
        }
        seen
    }
}
