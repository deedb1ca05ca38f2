//! Extra etcd members started by a test (the testkit cannot add members yet), and helpers for
//! membership changes.

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use etcd_ha::proto::etcdserverpb::Member;
use etcd_ha::testkit::etcd_binary;

/// Runs a membership change until etcd stops refusing it as "unhealthy cluster".
#[allow(unused_imports)]
pub use etcd_ha_check::faults::settled;

/// A port on 127.0.0.1 that is free now, for a member a test starts itself: drawn below the
/// kernel's ephemeral range (32768-60999 here), so no outgoing connection and no port-0 bind
/// (the testkit's, the proxies') can take it between this check and the member's own bind.
/// That race made the learner tests fail now and then ("connection refused": the member had
/// exited, its port taken). Never the same port twice in one test process.
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        let port = fastrand::u16(20_000..32_000);
        if handed_out.contains(&port) {
            continue;
        }
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            handed_out.push(port);
            return port;
        }
    }
    panic!("no free port in 20000-32000 after 1000 tries");
}

pub fn peer_url() -> String {
    format!("http://127.0.0.1:{}", free_port())
}

/// An etcd process started by this test (the testkit cannot add members to its clusters); killed
/// and reaped on drop, also when the test panics.
pub struct ExtraMember(Child);

impl ExtraMember {
    /// Starts `name` joining the cluster whose members (with their names) are `existing`.
    pub fn start(name: &str, dir: &Path, peer: &str, client: &str, existing: &[Member]) -> Self {
        let mut initial: Vec<String> = existing
            .iter()
            .filter(|m| !m.name.is_empty())
            .map(|m| format!("{}={}", m.name, m.peer_ur_ls[0]))
            .collect();
        initial.push(format!("{name}={peer}"));
        std::fs::create_dir_all(dir).unwrap();
        let log = std::fs::File::create(dir.join("etcd.log")).unwrap();
        let mut command = Command::new(etcd_binary().expect("etcd binary"));
        command
            .arg("--name")
            .arg(name)
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen-client-urls", client])
            .args(["--advertise-client-urls", client])
            .args(["--listen-peer-urls", peer])
            .args(["--initial-advertise-peer-urls", peer])
            .args(["--initial-cluster", &initial.join(",")])
            .args(["--initial-cluster-state", "existing"])
            .args(["--logger", "zap", "--log-level", "error"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // etcd reads ETCD_* variables as flags; ETCD_BIN (set for the 3.4 run) is not one.
        for (key, _) in std::env::vars_os() {
            if key.to_str().is_some_and(|k| k.starts_with("ETCD_")) {
                command.env_remove(key);
            }
        }
        // If the test process is killed outright (no Drop), the member dies with the thread
        // that started it rather than lingering.
        // SAFETY: prctl(2) is async-signal-safe and touches no memory of ours.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        ExtraMember(command.spawn().expect("start the extra etcd member"))
    }
}

impl ExtraMember {
    /// Whether the process has exited (e.g. a port of its was taken), and its log then.
    pub fn exited(&mut self, dir: &Path) -> Option<String> {
        match self.0.try_wait() {
            Ok(Some(_)) => Some(std::fs::read_to_string(dir.join("etcd.log")).unwrap_or_default()),
            _ => None,
        }
    }
}

impl Drop for ExtraMember {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
