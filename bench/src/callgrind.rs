//! Instructions and allocations counted around a stretch of code: valgrind's callgrind client
//! requests (zero the counters, dump them) and a counting global allocator, for `call-cost`.
//!
//! Callgrind counts instructions, not seconds, so the same binary on the same inputs gives the
//! same count on a noisy machine. A program run under `valgrind --tool=callgrind` zeroes the
//! counters where its measurement begins and dumps them where it ends; each dump is a file of
//! its own whose `totals:` line is the instructions of every thread since the zeroing.
//!
//! ```no_run
//! use etcd_ha_bench::callgrind;
//! assert!(callgrind::running_on_valgrind() || true);
//! callgrind::zero_stats();
//! // ... the work to count ...
//! callgrind::dump_stats();
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// valgrind.h: the request that answers how many valgrinds the program runs under (0 natively).
const RUNNING_ON_VALGRIND: usize = 0x1001;
/// callgrind.h: `VG_USERREQ_TOOL_BASE('C','T')`, the first of callgrind's own requests.
const CALLGRIND_BASE: usize = (b'C' as usize) << 24 | (b'T' as usize) << 16;
/// callgrind.h: write the counters since the last zeroing to a dump file of its own.
const DUMP_STATS: usize = CALLGRIND_BASE;
/// callgrind.h: set every counter (of every thread) to zero.
const ZERO_STATS: usize = CALLGRIND_BASE + 1;

/// One client request: natively a few rotations of a register that leave it as it was and a
/// no-op exchange, which valgrind's JIT recognizes and turns into the request. Returns
/// `default` when not under valgrind.
#[cfg(target_arch = "x86_64")]
fn client_request(default: usize, request: usize, arg: usize) -> usize {
    let args: [usize; 6] = [request, arg, 0, 0, 0, 0];
    let mut result = default;
    // SAFETY: the sequence is valgrind's documented "special instruction preamble" for amd64.
    // Natively rdi is rotated by 3 + 13 + 61 + 51 = 128 bits, back to its value, and
    // `xchg rbx, rbx` changes nothing; under valgrind the request reads `args` (alive for the
    // whole statement) and writes the answer into rdx.
    unsafe {
        std::arch::asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            inout("rdx") result,
            in("rax") args.as_ptr(),
            out("rdi") _,
        );
    }
    result
}

/// Client requests are wired for x86_64 only; elsewhere every request is a no-op, and
/// [`running_on_valgrind`] says false, which `call-cost` reports as an error.
#[cfg(not(target_arch = "x86_64"))]
fn client_request(default: usize, _request: usize, _arg: usize) -> usize {
    default
}

/// Whether this process runs under valgrind (and so whether the requests below do anything).
pub fn running_on_valgrind() -> bool {
    client_request(0, RUNNING_ON_VALGRIND, 0) > 0
}

/// Set callgrind's counters to zero: what follows is counted from here.
pub fn zero_stats() {
    client_request(0, ZERO_STATS, 0);
}

/// Write callgrind's counters since the last [`zero_stats`] to the next dump file
/// (`<out-file>.1`, `.2`, ... in the order of the dumps).
pub fn dump_stats() {
    client_request(0, DUMP_STATS, 0);
}

/// The instructions a callgrind dump file counted (its `totals:` line, else `summary:`).
///
/// ```no_run
/// let ir = etcd_ha_bench::callgrind::totals(std::path::Path::new("cg.out.1")).unwrap();
/// ```
pub fn totals(path: &Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let line = text
        .lines()
        .find(|l| l.starts_with("totals:"))
        .or_else(|| text.lines().find(|l| l.starts_with("summary:")))
        .ok_or_else(|| format!("{}: no totals line", path.display()))?;
    line.split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("{}: unreadable totals line {line:?}", path.display()))
}

/// A global allocator that counts allocations (and their bytes) on top of the system's.
///
/// ```no_run
/// #[global_allocator]
/// static ALLOC: etcd_ha_bench::callgrind::Counting = etcd_ha_bench::callgrind::Counting::new();
/// let before = ALLOC.snapshot();
/// let v = vec![0u8; 10];
/// let (allocs, bytes) = ALLOC.snapshot().since(before);
/// ```
pub struct Counting {
    allocs: AtomicU64,
    bytes: AtomicU64,
}

/// The allocations counted so far: how many, and how many bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Allocated {
    /// Allocations (a reallocation counts as one).
    pub allocs: u64,
    /// Bytes asked for by them.
    pub bytes: u64,
}

impl Allocated {
    /// What was allocated since `earlier`: (allocations, bytes).
    pub fn since(self, earlier: Allocated) -> (u64, u64) {
        (
            self.allocs.saturating_sub(earlier.allocs),
            self.bytes.saturating_sub(earlier.bytes),
        )
    }
}

impl Counting {
    /// A counter at zero.
    pub const fn new() -> Self {
        Counting {
            allocs: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    /// The counts now.
    pub fn snapshot(&self) -> Allocated {
        Allocated {
            allocs: self.allocs.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }

    fn count(&self, size: usize) {
        self.allocs.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(size as u64, Ordering::Relaxed);
    }
}

impl Default for Counting {
    fn default() -> Self {
        Counting::new()
    }
}

// SAFETY: every call is passed to the system allocator unchanged; the counters are atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.count(layout.size());
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.count(layout.size());
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.count(new_size);
        // SAFETY: as for `alloc`; `ptr` came from this allocator, so from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_no_ops_natively() {
        // `cargo test` does not run under valgrind: the preamble must leave the program as it
        // was, and say so.
        assert!(!running_on_valgrind());
        zero_stats();
        dump_stats();
    }

    #[test]
    fn totals_reads_a_dump() {
        let dir = std::env::temp_dir().join(format!("callgrind-totals-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("cg.1");
        std::fs::write(&file, "version: 1\nevents: Ir\nfl=x\n1 5\ntotals: 12345\n").unwrap();
        assert_eq!(totals(&file), Ok(12345));
        std::fs::write(&file, "events: Ir\nsummary: 77\n").unwrap();
        assert_eq!(totals(&file), Ok(77));
        std::fs::write(&file, "events: Ir\n").unwrap();
        assert!(totals(&file).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
