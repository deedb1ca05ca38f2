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
