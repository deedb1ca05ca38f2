//! One member's recent latency: a small decaying histogram of its answers, read as a quantile
//! (no IO here).
//!
//! Why a histogram and not the smoothed average the pick policy uses: a hedge must wait past
//! the member's *tail*, and an average says nothing about the tail (a member answering in 0.2 ms
//! with a 5 ms hiccup every hundred calls averages 0.25 ms). Why not hdrhistogram: two
//! generations of 48 counters, two per octave from 1 µs to 16 s, are all a hedge delay needs
//! (its answer is multiplied by a factor and clamped anyway), cost 384 bytes per member and
//! never allocate.
//!
//! Decay works like tower's `RotatingHistogram`: samples go into the current generation; every
//! [`GENERATION`] it becomes the previous one and the one before is forgotten. A quantile reads
//! both, so it always covers the last one to two generations: a member whose pace changes (a
//! compaction, a loaded box) is judged by its new pace within 4 s, and an old spike is
//! forgotten as fast. Unlike tower's, a generation too thin to judge by (an ejected or frozen
//! member) does not push out the one before; that one fades by half per generation instead, so
//! a member that comes back is judged by the pace it last showed (see `rotate`).

use std::time::Duration;

use tokio::time::Instant;

/// Counters per generation: two per octave of microseconds, 1 µs to 2^24 µs (16.8 s).
const BUCKETS: usize = 48;

/// How long one generation collects samples.
///
/// 2 s: long enough that a member serving a few hundred calls a second fills a window with
/// enough samples for a p99, short enough that the window follows a change of pace in seconds.
pub(crate) const GENERATION: Duration = Duration::from_secs(2);

/// Samples needed before a quantile means anything; fewer answers `None`.
///
/// 32: with fewer, a p99 is just the maximum of a handful, and one slow answer would set the
/// member's pace for seconds.
pub(crate) const MIN_SAMPLES: u32 = 32;

/// A member's recent latencies.
///
/// ```text
/// record(12 µs) -> current[bucket(12 µs)] += 1
/// every GENERATION: previous = current, current = 0
/// quantile(q)   -> upper bound of the bucket holding the q-th of previous + current
/// ```
#[derive(Clone, Debug)]
pub(crate) struct LatencyWindow {
    /// Samples since the last rotation.
    current: [u32; BUCKETS],
    /// Samples of the generation before.
    previous: [u32; BUCKETS],
    current_n: u32,
    previous_n: u32,
    /// The highest bucket either generation may hold a sample in (none above it): a tail
    /// quantile is read downwards from here, a few buckets instead of the ~40 below it.
    top: usize,
    /// When `current` started collecting.
    rotated_at: Instant,
    /// The last quantile read (`q`'s bits, its answer), until a sample or a rotation changes
    /// the window: every hedging call reads the tail before it is sent, and most read the
    /// window as its answer left it.
    memo: Option<(u64, Option<Duration>)>,
}

/// The bucket of a latency: `2 * floor(log2 µs)`, plus one in the upper half of the octave.
fn bucket(latency: Duration) -> usize {
    let us = u64::try_from(latency.as_micros())
        .unwrap_or(u64::MAX)
        .max(1);
    let octave = (63 - us.leading_zeros()) as usize;
    let upper_half = octave > 0 && (us >> (octave - 1)) & 1 == 1;
    (2 * octave + usize::from(upper_half)).min(BUCKETS - 1)
}

/// The (exclusive) upper bound of bucket `i`: a quantile errs on the slow side, so a hedge
/// waits a little longer rather than a little too short.
fn upper_bound(i: usize) -> Duration {
    let base = 1u64 << (i / 2);
    let us = if i.is_multiple_of(2) {
        base + base / 2
    } else {
        base * 2
    };
    Duration::from_micros(us.max(1))
}

impl LatencyWindow {
    /// An empty window whose first generation starts at `now`.
    pub(crate) fn new(now: Instant) -> Self {
        LatencyWindow {
            current: [0; BUCKETS],
            previous: [0; BUCKETS],
            current_n: 0,
            previous_n: 0,
            top: 0,
            rotated_at: now,
            memo: None,
        }
    }

    /// Age the window to `now`. At the end of each generation, the current one becomes the
    /// previous one when it holds enough samples to judge by; otherwise (a member that was
    /// ejected, suspected or frozen and served nearly nothing) its few samples join a previous
    /// generation that fades to half. Each further generation without a sample fades it again.
    ///
    /// Why fade and not forget: the last pace a member showed is the best guess for it when it
    /// comes back. A member forgotten outright is hedged only at the cap (300 ms) until it has
    /// answered [`MIN_SAMPLES`] calls, so the first reads a thawed or readmitted member answers
    /// slowly cost callers that long (147 ms seen in CI). A faded window still knows its pace
    /// for seconds (a member that answered 1,000 calls a generation keeps a quantile for five
    /// idle generations) and is replaced as soon as a generation is full again.
    fn rotate(&mut self, now: Instant) {
        let age = now.saturating_duration_since(self.rotated_at);
        if age < GENERATION {
            return;
        }
        if self.current_n >= MIN_SAMPLES {
            self.previous = self.current;
            self.previous_n = self.current_n;
        } else {
            self.fade();
            for (p, c) in self.previous.iter_mut().zip(self.current) {
                *p = p.saturating_add(c);
            }
            self.previous_n = self.previous_n.saturating_add(self.current_n);
        }
        // Generations that passed with no sample at all (capped: 32 halvings empty any count).
        let idle = (age.as_millis() / GENERATION.as_millis()).min(33) as u32;
        for _ in 1..idle {
            self.fade();
        }
        self.current = [0; BUCKETS];
        self.current_n = 0;
        self.top = self.previous.iter().rposition(|&c| c > 0).unwrap_or(0);
        self.rotated_at = now;
        self.memo = None;
    }

    /// Halve the previous generation's counts.
    fn fade(&mut self) {
        if self.previous_n == 0 {
            return;
        }
        let mut n = 0u32;
        for p in &mut self.previous {
            *p /= 2;
            n = n.saturating_add(*p);
        }
        self.previous_n = n;
    }

    /// One answer took `latency`, seen at `now`.
    pub(crate) fn record(&mut self, latency: Duration, now: Instant) {
        self.rotate(now);
        self.memo = None;
        let b = bucket(latency);
        self.top = self.top.max(b);
        self.current[b] = self.current[b].saturating_add(1);
        self.current_n = self.current_n.saturating_add(1);
    }

    /// Samples in the window at `now`.
    pub(crate) fn samples(&mut self, now: Instant) -> u32 {
        self.rotate(now);
        self.current_n.saturating_add(self.previous_n)
    }

    /// The `q` quantile (0 < q <= 1) of the window at `now`, rounded up to its bucket's upper
    /// bound; `None` with fewer than [`MIN_SAMPLES`].
    pub(crate) fn quantile(&mut self, q: f64, now: Instant) -> Option<Duration> {
        let n = self.samples(now);
        if let Some((bits, known)) = self.memo
            && bits == q.to_bits()
        {
            return known;
        }
        let known = self.count_quantile(q, n);
        self.memo = Some((q.to_bits(), known));
        known
    }

    /// [`quantile`](Self::quantile) of the window as it is, with `n` samples.
    fn count_quantile(&self, q: f64, n: u32) -> Option<Duration> {
        if n < MIN_SAMPLES {
            return None;
        }
        // The rank of the q-th sample, 1-based: ceil(q * n), at least 1. Its bucket is the
        // lowest one with at most `n - rank` samples above it. Read from the top, since every
        // quantile asked for is a tail: per call, this was a scan of some 40 buckets up from
        // 1 µs, twice (~690 instructions of a linearizable get, counted by `call-cost`).
        let rank = ((q * f64::from(n)).ceil() as u32).clamp(1, n);
        let allowed_above = n - rank;
        let mut above = 0u32;
        let mut i = self.top;
        while i > 0 {
            let here = self.current[i].saturating_add(self.previous[i]);
            above = above.saturating_add(here);
            if above > allowed_above {
                break;
            }
            i -= 1;
        }
        Some(upper_bound(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn buckets_are_two_per_octave_and_bounds_contain_their_samples() {
        assert_eq!(bucket(us(0)), 0);
        assert_eq!(bucket(us(1)), 0);
        assert_eq!(bucket(us(2)), 2);
        assert_eq!(bucket(us(3)), 3);
        assert_eq!(bucket(us(200)), 15); // 128..192 is 14, 192..256 is 15
        assert_eq!(bucket(Duration::from_secs(3600)), BUCKETS - 1);
        for n in [
            1, 2, 3, 5, 100, 150, 199, 200, 1_000, 4_999, 300_000, 10_000_000,
        ] {
            let b = bucket(us(n));
            assert!(us(n) < upper_bound(b) || n == 1, "{n} µs in bucket {b}");
            assert!(
                upper_bound(b) <= us(n) * 2 + us(1),
                "{n} µs: bound too loose"
            );
        }
    }

    /// The quantile as first written: counted up from the fastest bucket.
    fn quantile_from_below(w: &LatencyWindow, q: f64) -> Duration {
        let n = w.current_n + w.previous_n;
        let rank = ((q * f64::from(n)).ceil() as u32).clamp(1, n);
        let mut seen = 0;
        for i in 0..BUCKETS {
            seen += w.current[i] + w.previous[i];
            if seen >= rank {
                return upper_bound(i);
            }
        }
        upper_bound(BUCKETS - 1)
    }

    #[tokio::test(start_paused = true)]
    async fn reading_from_the_top_finds_what_counting_from_below_does() {
        // Windows of many shapes (a xorshift, so every run checks the same ones), through
        // rotations and fades that leave `top` above the highest sample.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200 {
            let mut w = LatencyWindow::new(Instant::now());
            let spread = 1 + next() % 24;
            for round in 0..3 {
                for _ in 0..(next() % 400) {
                    let octave = next() % spread;
                    w.record(
                        us((1u64 << octave) + next() % (1u64 << octave)),
                        Instant::now(),
                    );
                }
                let n = w.samples(Instant::now());
                if n >= MIN_SAMPLES {
                    for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
                        assert_eq!(
                            w.quantile(q, Instant::now()),
                            Some(quantile_from_below(&w, q)),
                            "q {q}, round {round}, {n} samples"
                        );
                    }
                }
                tokio::time::advance(GENERATION * (1 + (next() % 3) as u32)).await;
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_remembered_quantile_is_forgotten_by_a_sample_or_a_rotation() {
        let (fast, slow) = (us(200), us(5_000));
        let mut w = LatencyWindow::new(Instant::now());
        for _ in 0..100 {
            w.record(slow, Instant::now());
        }
        tokio::time::advance(GENERATION).await;
        for _ in 0..100 {
            w.record(fast, Instant::now());
        }
        // Half of the window is slow: its median is fast, its p99 slow (another quantile is
        // not the remembered one), read twice (the second from memory).
        let slow_tail = Some(upper_bound(bucket(slow)));
        assert_eq!(
            w.quantile(0.5, Instant::now()),
            Some(upper_bound(bucket(fast)))
        );
        assert_eq!(w.quantile(0.99, Instant::now()), slow_tail);
        assert_eq!(w.quantile(0.99, Instant::now()), slow_tail);
        // The rotation forgets the slow generation: the tail is fast now.
        tokio::time::advance(GENERATION).await;
        let fast_tail = Some(upper_bound(bucket(fast)));
        assert_eq!(w.quantile(0.99, Instant::now()), fast_tail);
        // A sample changes it again.
        for _ in 0..10 {
            w.record(slow, Instant::now());
        }
        assert_eq!(w.quantile(0.99, Instant::now()), slow_tail);
    }

    #[tokio::test(start_paused = true)]
    async fn no_quantile_until_enough_samples() {
        let mut w = LatencyWindow::new(Instant::now());
        for _ in 0..MIN_SAMPLES - 1 {
            w.record(us(200), Instant::now());
        }
        assert_eq!(w.quantile(0.99, Instant::now()), None);
        w.record(us(200), Instant::now());
        assert_eq!(w.quantile(0.99, Instant::now()), Some(us(256)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_tail_is_the_slow_percent_not_the_average() {
        let mut w = LatencyWindow::new(Instant::now());
        // 990 fast answers and 10 slow ones (1 %): p99 is still fast, p99.9 is the slow one.
        for _ in 0..990 {
            w.record(us(200), Instant::now());
        }
        for _ in 0..10 {
            w.record(Duration::from_millis(5), Instant::now());
        }
        assert_eq!(w.quantile(0.99, Instant::now()), Some(us(256)));
        assert_eq!(w.quantile(0.999, Instant::now()), Some(us(6144)));
        // 2 % slow: the p99 is slow.
        for _ in 0..10 {
            w.record(Duration::from_millis(5), Instant::now());
        }
        assert_eq!(w.quantile(0.99, Instant::now()), Some(us(6144)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_member_is_judged_by_its_last_two_generations() {
        let mut w = LatencyWindow::new(Instant::now());
        for _ in 0..100 {
            w.record(Duration::from_millis(50), Instant::now());
        }
        // One generation later the old pace still counts (previous generation)...
        tokio::time::advance(GENERATION).await;
        for _ in 0..100 {
            w.record(us(200), Instant::now());
        }
        assert_eq!(w.samples(Instant::now()), 200);
        assert_eq!(w.quantile(0.99, Instant::now()), Some(us(65_536)));
        // ...and is gone after the next rotation, since the new generation is full.
        tokio::time::advance(GENERATION).await;
        assert_eq!(w.samples(Instant::now()), 100);
        assert_eq!(w.quantile(0.99, Instant::now()), Some(us(256)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_member_keeps_its_pace_fading_by_half_each_generation() {
        let mut w = LatencyWindow::new(Instant::now());
        for _ in 0..1_000 {
            w.record(us(200), Instant::now());
        }
        // Frozen for 3 s (the CI failure's fault): its pace is still known when it thaws.
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(w.samples(Instant::now()), 1_000);
        assert_eq!(w.quantile(0.99, Instant::now()), Some(us(256)));
        tokio::time::advance(GENERATION).await;
        assert_eq!(w.samples(Instant::now()), 500);
        // Silent for long: below MIN_SAMPLES, nothing is known any more.
        tokio::time::advance(GENERATION * 5).await;
        assert_eq!(w.samples(Instant::now()), 15);
        assert_eq!(w.quantile(0.99, Instant::now()), None);
        // Silent for an hour: empty, and the loop that fades it stays short.
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(w.samples(Instant::now()), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_joins_the_faded_generation_instead_of_replacing_it() {
        let mut w = LatencyWindow::new(Instant::now());
        for _ in 0..200 {
            w.record(us(200), Instant::now());
        }
        // One generation: the full one moves to previous.
        tokio::time::advance(GENERATION).await;
        // A handful of slow answers in the next generation (too few to judge by)...
        for _ in 0..4 {
            w.record(Duration::from_millis(50), Instant::now());
        }
        tokio::time::advance(GENERATION).await;
        // ...join the faded 100: the pace is still the fast one at p99 (4 of 104 is the p96).
        assert_eq!(w.samples(Instant::now()), 104);
        assert_eq!(w.quantile(0.95, Instant::now()), Some(us(256)));
        assert_eq!(w.quantile(0.99, Instant::now()), Some(us(65_536)));
    }
}
