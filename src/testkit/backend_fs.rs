//! A filesystem of its own for one member's backend (bbolt), so a test can freeze it: the member's apply stalls while its raft log (the WAL, elsewhere) goes on.
//!
//! etcd applies committed entries to its backend in a goroutine of its own, apart from the
//! raft loop that writes the WAL and learns the commit index. When the backend cannot write,
//! the backend's periodic commit blocks holding the batch lock, so every apply waits, while
//! the member keeps appending and committing what its leader sends. Once the committed index
//! runs more than 5,000 entries ahead of the applied one, the member refuses new requests with
//! `etcdserver: too many requests` (`maxGapBetweenApplyAndCommitIndex`). A slow or failing
//! disk under the database does this in production; here it is a loop-mounted ext4 image that
//! `fsfreeze` holds, with the WAL outside it (`--wal-dir`). Needs root.
//!
//! The image and its mount point carry the creating process's pid (`mN.backend-PID`): a test
//! process killed while a backend is frozen cannot thaw or unmount it, and the next freezable
//! cluster on the machine does (see [`sweep`]).

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

use super::TestkitError;

/// The image's size: sparse, so only what the member writes takes space. Larger than the
/// default quota (2 GiB), so the backend is never refused for the filesystem's sake.
const IMAGE_BYTES: u64 = 4 << 30;

/// One member's backend filesystem: mounted on creation, thawed and unmounted on drop.
#[derive(Debug)]
pub(crate) struct BackendFs {
    /// The mount point; the member's `--data-dir` is its `data` subdirectory.
    mount: PathBuf,
    image: PathBuf,
    frozen: AtomicBool,
}

impl BackendFs {
    /// Makes an ext4 image for member `name` in `dir` and mounts it.
    pub(crate) fn create(dir: &Path, name: &str) -> Result<BackendFs, TestkitError> {
        // SAFETY: geteuid(2) cannot fail and touches no memory.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            return Err(TestkitError::FreezableBackendNeedsRoot { euid });
        }
        sweep();
        let base = format!("{name}.backend-{}", std::process::id());
        let image = dir.join(format!("{base}.img"));
        let mount = dir.join(&base);
        let file = std::fs::File::create(&image)
            .map_err(|e| TestkitError::io("create backend image", &image, e))?;
        file.set_len(IMAGE_BYTES)
            .map_err(|e| TestkitError::io("size backend image", &image, e))?;
        drop(file);
        std::fs::create_dir_all(&mount)
            .map_err(|e| TestkitError::io("create backend mount point", &mount, e))?;
        // No journal: the member's own fsyncs are what matter, and the WAL is elsewhere.
        run("mkfs.ext4", &["-q", "-F", "-O", "^has_journal"], &[&image])?;
        run("mount", &["-o", "loop"], &[&image, &mount])?;
        Ok(BackendFs {
            mount,
            image,
            frozen: AtomicBool::new(false),
        })
    }

    /// Where the member keeps its data dir.
    pub(crate) fn data_dir(&self) -> PathBuf {
        self.mount.join("data")
    }

    /// Blocks every write to the backend (`fsfreeze -f`); readers of what is cached go on.
    pub(crate) fn freeze(&self) -> Result<(), TestkitError> {
        if self.frozen.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        run("fsfreeze", &["-f"], &[&self.mount]).inspect_err(|_| {
            self.frozen.store(false, Ordering::SeqCst);
        })
    }

    /// Lets the writes through again (`fsfreeze -u`); a no-op when not frozen.
    pub(crate) fn thaw(&self) -> Result<(), TestkitError> {
        if self.frozen.swap(false, Ordering::SeqCst) {
            run("fsfreeze", &["-u"], &[&self.mount])?;
        }
        Ok(())
    }
}

impl Drop for BackendFs {
    /// Thaws (a process blocked on a frozen filesystem cannot even die), unmounts and removes
    /// the image; best effort, never panics.
    fn drop(&mut self) {
        let _ = self.thaw();
        // Lazy: a member killed a moment ago may still hold a file open.
        let _ = run("umount", &["-l"], &[&self.mount]);
        let _ = std::fs::remove_file(&self.image);
        let _ = std::fs::remove_dir(&self.mount);
    }
}

/// Thaws and unmounts backend filesystems whose creating process is gone; best effort.
fn sweep() {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return;
    };
    for line in mounts.lines() {
        // "/dev/loop3 /tmp/etcd-ha-testkit-Ab12/m0.backend-4711 ext4 rw,relatime 0 0"
        let Some(target) = line.split_whitespace().nth(1) else {
            continue;
        };
        let Some(pid) = owner_pid(target) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run("fsfreeze", &["-u"], &[Path::new(target)]);
            let _ = run("umount", &["-l"], &[Path::new(target)]);
        }
    }
}

/// The pid in a backend mount point's name (`.../etcd-ha-testkit-*/mN.backend-PID`).
fn owner_pid(target: &str) -> Option<u32> {
    let path = Path::new(target);
    let parent = path.parent()?.file_name()?.to_str()?;
    if !parent.starts_with("etcd-ha-testkit-") {
        return None;
    }
    let name = path.file_name()?.to_str()?;
    let (member, pid) = name.split_once(".backend-")?;
    if !member.starts_with('m') {
        return None;
    }
    pid.parse().ok()
}

/// Runs `program flags... paths...`, its output captured; a failure says what it printed.
fn run(program: &str, flags: &[&str], paths: &[&Path]) -> Result<(), TestkitError> {
    let output = Command::new(program)
        .args(flags)
        .args(paths)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => TestkitError::ToolMissing {
                tool: program.to_string(),
                source: e,
            },
            _ => TestkitError::io("run", program, e),
        })?;
    if !output.status.success() {
        let command = std::iter::once(program.to_string())
            .chain(flags.iter().map(|f| f.to_string()))
            .chain(paths.iter().map(|p| p.display().to_string()))
            .collect::<Vec<_>>()
            .join(" ");
        return Err(TestkitError::Command {
            command,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::owner_pid;

    #[test]
    fn mount_points_name_their_owner() {
        assert_eq!(
            owner_pid("/tmp/etcd-ha-testkit-Ab12/m0.backend-4711"),
            Some(4711)
        );
        assert_eq!(owner_pid("/tmp/etcd-ha-testkit-Ab12/m0.backend-x"), None);
        assert_eq!(owner_pid("/tmp/other/m0.backend-4711"), None);
        assert_eq!(owner_pid("/tmp/etcd-ha-testkit-Ab12/data"), None);
    }
}
