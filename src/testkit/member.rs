//! One etcd member process: its flags, directories and ports, and how to start, signal and kill it.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use super::{TestkitError, spawner};

/// How much of a member's log an error shows: enough for etcd's fatal message and its context.
const LOG_TAIL_BYTES: u64 = 4096;

/// A member of a testkit cluster, running or not.
#[derive(Debug)]
pub(crate) struct Member {
    /// "m0", "m1", ...: the etcd `--name`, also used in errors.
    pub(crate) name: String,
    /// etcd's `--data-dir`; kept across restarts so a restarted member rejoins with its data.
    pub(crate) data_dir: PathBuf,
    /// Where stdout and stderr go (appended across restarts), so etcd noise stays out of test output.
    pub(crate) log: PathBuf,
    /// The client URL etcd listens on and advertises, e.g. "https://127.0.0.1:41234".
    pub(crate) client_url: String,
    /// The client address (from `client_url`), to tell when the process has bound its sockets.
    pub(crate) client_addr: SocketAddr,
    /// The unix socket URL it also serves clients on (`ClusterBuilder::unix_sockets`), with
    /// the socket's absolute path; etcd runs in the member's directory then.
    pub(crate) unix_url: Option<String>,
    /// The network namespace to run in (`/var/run/netns/<name>`), for isolated clusters.
    netns: Option<PathBuf>,
    /// Set between `Cluster::partition` and `Cluster::heal`: the member is cut off from its
    /// peers, so its view of the leader is its own and not the cluster's.
    pub(crate) partitioned: AtomicBool,
    /// The binary to run.
    binary: PathBuf,
    /// Every flag of the command line; identical for the first start and restarts (etcd ignores
    /// the `--initial-cluster*` flags once the data dir holds a member).
    args: Vec<OsString>,
    /// The running process; `None` while killed. A mutex so `&self` methods can reap a member
    /// that died on its own.
    child: Mutex<Option<Child>>,
    /// Set between SIGSTOP and SIGCONT: a frozen member is not asked anything.
    stopped: AtomicBool,
    /// The raft member id, learnt from the first Status answer; stable across restarts.
    pub(crate) id: OnceLock<u64>,
    /// The user and password the testkit's own probes log in with once auth is on (etcd 3.6
    /// and 3.5.28+ answer Status only to a user), and the token they last got.
    pub(crate) login: OnceLock<(String, String)>,
    pub(crate) token: Mutex<Option<String>>,
}

impl Member {
    /// Describes a member; nothing is started yet.
    pub(crate) fn new(
        name: String,
        dir: &Path,
        binary: PathBuf,
        client_url: String,
        client_addr: SocketAddr,
        netns: Option<PathBuf>,
        args: Vec<OsString>,
    ) -> Member {
        Member {
            name,
            data_dir: dir.join("data"),
            log: dir.join("etcd.log"),
            client_url,
            client_addr,
            unix_url: None,
            netns,
            partitioned: AtomicBool::new(false),
            binary,
            args,
            child: Mutex::new(None),
            stopped: AtomicBool::new(false),
            id: OnceLock::new(),
            login: OnceLock::new(),
            token: Mutex::new(None),
        }
    }

    /// Starts the process (if not running), logging to the member's log file.
    pub(crate) fn spawn(&self) -> Result<(), TestkitError> {
        let mut child = self.child();
        if child.is_some() {
            return Ok(());
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| TestkitError::io("open log", &self.log, e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| TestkitError::io("open log", &self.log, e))?;
        let mut command = Command::new(&self.binary);
        command
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        // etcd reads every ETCD_* variable as a flag; the caller's (ETCD_BIN, ETCD_DATA_DIR, ...)
        // must not leak into a test cluster. ETCD_UNSUPPORTED_ARCH is the one that is needed to
        // run etcd at all on some platforms, so it stays.
        for (key, _) in std::env::vars_os() {
            let is_etcd = key.to_str().is_some_and(|k| k.starts_with("ETCD_"));
            if is_etcd && key != "ETCD_UNSUPPORTED_ARCH" {
                command.env_remove(key);
            }
        }
        // etcd 3.5 takes a unix listen URL only as `unix://host:port`, the socket being the file
        // "host:port" in its working directory: run it in the member's directory.
        if self.unix_url.is_some()
            && let Some(dir) = self.data_dir.parent()
        {
            command.current_dir(dir);
        }
        if let Some(netns) = &self.netns {
            super::netns::enter_in_child(&mut command, netns)
                .map_err(|e| TestkitError::io("open network namespace", netns, e))?;
        }
        let started =
            spawner::spawn(command).map_err(|e| TestkitError::io("start", &self.binary, e))?;
        *child = Some(started);
        self.stopped.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// SIGKILLs the process (frozen or not) and reaps it; a no-op when it is not running.
    pub(crate) fn kill(&self) {
        if let Some(mut child) = self.child().take() {
            // Errors mean it is already dead; wait() then reaps it all the same.
            let _ = child.kill();
            let _ = child.wait();
        }
        self.stopped.store(false, Ordering::SeqCst);
    }

    /// Stops the process the way an operator does, with SIGTERM (etcd hands leadership over
    /// and closes its connections gracefully), and reaps it; SIGKILLs it if it has not exited
    /// after `grace`. A no-op when it is not running.
    pub(crate) async fn terminate(&self, grace: std::time::Duration) {
        if self.pid().is_none() {
            return;
        }
        // A frozen process cannot handle SIGTERM: thaw it first.
        self.cont();
        self.signal(libc::SIGTERM);
        let give_up = tokio::time::Instant::now() + grace;
        while self.pid().is_some() && self.exited().is_none() {
            if tokio::time::Instant::now() >= give_up {
                self.kill();
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Freezes the process with SIGSTOP: it keeps its sockets but answers nothing.
    pub(crate) fn stop(&self) {
        if self.signal(libc::SIGSTOP) {
            self.stopped.store(true, Ordering::SeqCst);
            // kill(2) returns once the signal is sent, not once every thread has stopped: on a
            // busy box the member could still answer a request made right after (the testkit
            // test of a frozen member saw a Status answered). Wait for the whole group stop.
            if let Some(pid) = self.pid() {
                wait_stopped(pid, STOP_WAIT);
            }
        }
    }

    /// Thaws a frozen process with SIGCONT.
    pub(crate) fn cont(&self) {
        if self.signal(libc::SIGCONT) {
            self.stopped.store(false, Ordering::SeqCst);
        }
    }

    /// The pid while the process runs (frozen included).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child().as_ref().map(Child::id)
    }

    /// True if the process runs and is not frozen: the members worth asking.
    pub(crate) fn is_live(&self) -> bool {
        self.pid().is_some() && !self.stopped.load(Ordering::SeqCst)
    }

    /// True between `Cluster::partition` and `Cluster::heal`.
    pub(crate) fn is_partitioned(&self) -> bool {
        self.partitioned.load(Ordering::SeqCst)
    }

    /// If the process ended on its own, reaps it and returns how it ended.
    pub(crate) fn exited(&self) -> Option<ExitStatus> {
        let mut child = self.child();
        let status = child.as_mut()?.try_wait().ok()??;
        *child = None;
        self.stopped.store(false, Ordering::SeqCst);
        Some(status)
    }

    /// The error for a member that exited, with the end of its log.
    pub(crate) fn exited_error(&self, status: ExitStatus) -> TestkitError {
        TestkitError::MemberExited {
            member: self.name.clone(),
            status,
            log_tail: self.log_tail(),
        }
    }

    /// The last few KiB of the member's log, for error messages.
    pub(crate) fn log_tail(&self) -> String {
        let Ok(mut file) = std::fs::File::open(&self.log) else {
            return String::from("(no log file)");
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = file.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)));
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Sends `signal` to the running process; false if there is none.
    fn signal(&self, signal: libc::c_int) -> bool {
        // Hold the lock while signalling: nobody can reap the child meanwhile, so the pid
        // cannot have been reused by an unrelated process.
        let child = self.child();
        let Some(pid) = child.as_ref().map(Child::id) else {
            return false;
        };
        // SAFETY: kill(2) takes plain integers and touches no memory of ours.
        unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
    }

    fn child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The longest [`Member::stop`] waits for the process's threads to stop.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// Wait until every thread of process `pid` is stopped (state `T` in `/proc`), at most `limit`;
/// also returns when the process is gone or `/proc` cannot tell.
fn wait_stopped(pid: u32, limit: Duration) {
    let until = std::time::Instant::now() + limit;
    let tasks = format!("/proc/{pid}/task");
    while std::time::Instant::now() < until {
        let Ok(entries) = std::fs::read_dir(&tasks) else {
            return;
        };
        let all_stopped = entries.flatten().all(|task| {
            // The state follows the command name, which is in parentheses and may hold spaces.
            std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    // Stopped, or a thread already gone.
                    .is_some_and(|state| matches!(state, "T" | "t" | "Z" | "X"))
            })
        });
        if all_stopped {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    tracing::warn!(pid, ?limit, "the member's threads did not all stop in time");
}

impl Drop for Member {
    /// Teardown must not depend on anyone calling a method: SIGKILL and reap.
    fn drop(&mut self) {
        self.kill();
    }
}
