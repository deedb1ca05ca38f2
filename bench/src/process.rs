//! This process's own cost, for the benchmarks that report a client's CPU and memory: the
//! etcd members are other processes, so what is counted here is the client's (and the bench's
//! bookkeeping, which is small next to it).
//!
//! ```
//! let before = etcd_ha_bench::process::cpu_time();
//! let rss = etcd_ha_bench::process::status_kb("VmRSS");
//! assert!(etcd_ha_bench::process::cpu_time() >= before);
//! assert!(rss.is_some_and(|kb| kb > 0));
//! ```

use std::time::Duration;

/// User plus system CPU time of this process so far (`getrusage`).
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct it is given, which is plain data.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| {
        Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_usec).unwrap_or(0) * 1000,
        )
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// A line of /proc/self/status ("VmRSS", "VmHWM") in kB, if there is one.
pub fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU time so far of this process's threads whose name starts with `prefix` (from
/// /proc/self/task; a tokio runtime names its workers with `thread_name`), so a client on a
/// runtime of its own is measured apart from the bench's other work.
///
/// Read from each thread's `schedstat` (time on a CPU, in nanoseconds) where the kernel keeps
/// it, else from `stat`'s user and system time, which count whole clock ticks (10 ms): a
/// client that spends a few ms in a round would read as 0 or 10 ms there.
///
/// ```
/// let main = etcd_ha_bench::process::threads_cpu_time("no-such-thread");
/// assert_eq!(main, std::time::Duration::ZERO);
/// ```
pub fn threads_cpu_time(prefix: &str) -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let mut total = Duration::ZERO;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ...": the name may hold spaces, so split at the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !stat[open + 1..close].starts_with(prefix) {
            continue;
        }
        let on_cpu = std::fs::read_to_string(task.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok());
        total += match on_cpu {
            Some(ns) => Duration::from_nanos(ns),
            None => ticks_of(&stat[close + 1..]),
        };
    }
    total
}

/// User plus system time from the fields of a `stat` line after the thread's name.
fn ticks_of(fields: &str) -> Duration {
    // SAFETY: sysconf only reads a constant of the system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = u64::try_from(ticks).unwrap_or(100).max(1);
    // After the name: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = fields.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let total = field(14).unwrap_or(0) + field(15).unwrap_or(0);
    Duration::from_millis(total * 1000 / ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_is_counted_finer_than_a_clock_tick() {
        let busy = std::thread::Builder::new()
            .name("cpu-time-probe".into())
            .spawn(|| {
                let start = std::time::Instant::now();
                let mut x = 0u64;
                while start.elapsed() < Duration::from_millis(3) {
                    x = x.wrapping_add(std::hint::black_box(1));
                }
                // Still alive (and named) while it is read.
                let counted = threads_cpu_time("cpu-time-probe");
                (x, counted)
            })
            .unwrap();
        let (_, counted) = busy.join().unwrap();
        // Clock ticks would read 0 or a multiple of 10 ms; nanoseconds read what ran (however
        // much of the 3 ms the thread got on a busy machine).
        assert!(
            counted > Duration::ZERO && counted.as_nanos() % 10_000_000 != 0,
            "3 ms of spinning read as {counted:?}"
        );
    }
}
