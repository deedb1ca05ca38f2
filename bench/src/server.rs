//! Which etcd the local clusters run (`--etcd-version`): the binary that provides a version,
//! found or built by the project's own scripts, and checked to report that version.
//!
//! | asked      | from                                                                 |
//! |------------|----------------------------------------------------------------------|
//! | 3.4.23     | `scripts/etcd-3.4.sh` (Debian's `etcd-server` package, unpacked)     |
//! | 3.5.1      | the testkit's own (its cache, else its download from PyPI)           |
//! | any other  | `scripts/etcd-go.sh` (built from etcd's Go modules, then cached)     |
//!
//! Without `--etcd-version` none of this runs and the testkit finds etcd as it always does
//! (`ETCD_BIN`, `PATH`, its cache, its download).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::plan::EtcdServer;

/// The version the testkit provisions itself.
const TESTKIT_VERSION: &str = "3.5.1";

/// The one 3.4 release `scripts/etcd-3.4.sh` provides.
const DEBIAN_VERSION: &str = "3.4.23";

/// The binary of etcd `version` ("3.6.16", a leading `v` allowed), found or built, and checked
/// to say that version. Scripts print their progress on stderr, which goes to the user.
pub fn resolve(version: &str) -> Result<EtcdServer, String> {
    let version = version.trim().trim_start_matches('v').to_string();
    let parts: Vec<&str> = version.split('.').collect();
    if parts.len() != 3 || parts.iter().any(|p| p.parse::<u32>().is_err()) {
        return Err(format!(
            "--etcd-version {version}: not a release such as 3.6.16"
        ));
    }
    let binary = if version == TESTKIT_VERSION {
        testkit_binary()?
    } else if version == DEBIAN_VERSION {
        script("etcd-3.4.sh", &[])?
    } else if parts[..2] == ["3", "4"] {
        return Err(format!(
            "--etcd-version {version}: of etcd 3.4 only {DEBIAN_VERSION} (Debian's package)"
        ));
    } else {
        script("etcd-go.sh", &[&version])?
    };
    let said = reported_version(&binary)?;
    if said != version {
        return Err(format!(
            "{} says it is etcd {said}, not {version}",
            binary.display()
        ));
    }
    Ok(EtcdServer { version, binary })
}

/// The testkit's etcd 3.5.1: its cache (the same place the testkit keeps it), else whatever it
/// finds or downloads, which must then be 3.5.1.
fn testkit_binary() -> Result<PathBuf, String> {
    let cache = match std::env::var_os(etcd_ha::testkit::CACHE_ENV).filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => repo().join(".etcd-cache"),
    };
    let cached = cache.join(format!("etcd-v{TESTKIT_VERSION}/etcd"));
    if cached.is_file() {
        return Ok(cached);
    }
    let found = etcd_ha::testkit::etcd_binary().map_err(|e| e.to_string())?;
    let said = reported_version(&found)?;
    if said != TESTKIT_VERSION {
        return Err(format!(
            "the testkit finds etcd {said} at {} (ETCD_BIN or PATH), not {TESTKIT_VERSION}: \
             unset ETCD_BIN, or move that etcd off PATH",
            found.display()
        ));
    }
    Ok(found)
}

/// Runs `scripts/<name> <args>`, whose stdout is the binary's path.
fn script(name: &str, args: &[&str]) -> Result<PathBuf, String> {
    let path = repo().join("scripts").join(name);
    let output = Command::new(&path)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} {} failed ({}; its output is above)",
            path.display(),
            args.join(" "),
            output.status
        ));
    }
    let printed = String::from_utf8_lossy(&output.stdout).trim().to_string();
    Ok(PathBuf::from(printed))
}

/// What `binary --version` says: "3.6.16" from "etcd Version: 3.6.16".
fn reported_version(binary: &Path) -> Result<String, String> {
    let output = Command::new(binary)
        .arg("--version")
        .output()
        .map_err(|e| format!("{}: {e}", binary.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    parse_version(&text).ok_or_else(|| format!("{} --version: {text}", binary.display()))
}

/// "3.6.16" out of etcd's `--version` output.
fn parse_version(text: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.strip_prefix("etcd Version:"))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The repository's root (the bench crate's parent).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_releases() {
        assert!(resolve("3.6").is_err());
        assert!(resolve("latest").is_err());
        let err = resolve("3.4.22").unwrap_err();
        assert!(err.contains("3.4.23"), "{err}");
    }

    #[test]
    fn reads_etcds_version_line() {
        let text = "etcd Version: 3.6.16\nGit SHA: GitNotFound\nGo Version: go1.26.8\n";
        assert_eq!(parse_version(text).as_deref(), Some("3.6.16"));
        assert_eq!(parse_version("nothing"), None);
    }
}
