//! etcd's Go client (clientv3) as a benchmark client: a small Go driver (`bench/go/`) runs one
//! shared clientv3 client and takes one command per line, so calls, watches and leases of the
//! trial run in it exactly as they would in a Go service, while the trial times them from here.
//!
//! Two drivers speak the same line protocol:
//!
//! - [`Driver::Current`] (`go-clientv3`, in the default run): clientv3 3.6
//!   (`go.etcd.io/etcd/client/v3`, what Go services use today: gRPC's own round-robin
//!   balancer, the 3.5+ retry interceptor), built in module mode from `bench/go/clientv3/`,
//!   whose committed `go.mod` and `go.sum` pin every module. The first build fetches them
//!   from the Go module proxy into `target/go-clientv3/mod` and takes a minute or two; Go's
//!   build cache (`target/go-clientv3/cache`) makes later ones take about a second.
//! - [`Driver::Debian34`] (`go-clientv3-3.4`, only when named): clientv3 3.4.23, built offline
//!   in GOPATH mode from `bench/go/src/` against Debian's `golang-etcd-server-dev` (its sources
//!   under `/usr/share/gocode`), for comparison with the client most deployments ran until 3.5.
//!
//! ```text
//! go version                                          # Go 1.26+: go-clientv3 builds
//! apt-get install golang-go golang-etcd-server-dev    # and go-clientv3-3.4 too
//! ```
//!
//! A driver that cannot be built is left out with the reason (see the binary for when that
//! stops the run). Each call also crosses a pipe both ways and the driver's goroutine scheduling (tens of
//! microseconds), nothing next to the failover gaps and re-election times the report is about;
//! its steady-state latencies are not comparable with the in-process clients'.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::access::Access;
use crate::clients::ErrorKind;
use crate::leadership::{Held, Hold};
use crate::lease::{Kept, Renewal};
use crate::watch::{Seen, Watched};

/// Where clientv3 and its dependencies live on Debian (`golang-etcd-server-dev`).
const SYSTEM_GOPATH: &str = "/usr/share/gocode";

/// The 3.4 driver's package, under `bench/go/src/`.
const GOPATH_PACKAGE: &str = "etcdhabench/clientv3driver";

/// The 3.6 driver's module directory, under `bench/`.
const MODULE_DIR: &str = "go/clientv3";

/// How long the driver may take to start and connect.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Which clientv3 a driver is built from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// clientv3 3.6 from the Go module proxy, as pinned by `bench/go/clientv3/go.mod`.
    Current,
    /// clientv3 3.4 from Debian's `golang-etcd-server-dev`, in GOPATH mode.
    Debian34,
}

/// A driver built for this run: its binary, and the clientv3 version it says it has.
#[derive(Debug, Clone)]
struct Built {
    binary: PathBuf,
    version: String,
}

/// The drivers built for this run, or why not (each set once by [`prepare`]).
static CURRENT: OnceLock<Result<Built, String>> = OnceLock::new();
static DEBIAN34: OnceLock<Result<Built, String>> = OnceLock::new();

impl Driver {
    /// Its slot among the built drivers.
    fn slot(self) -> &'static OnceLock<Result<Built, String>> {
        match self {
            Driver::Current => &CURRENT,
            Driver::Debian34 => &DEBIAN34,
        }
    }

    /// The file name of its binary under `target/go-clientv3/`.
    fn binary_name(self) -> &'static str {
        match self {
            Driver::Current => "clientv3driver-3.6",
            Driver::Debian34 => "clientv3driver-3.4",
        }
    }
}

/// Builds `driver` (incremental: Go's build cache makes a rebuild take about a second) and
/// remembers the outcome for [`GoClient::start`]. Returns why that Go client cannot run, if so.
pub fn prepare(driver: Driver) -> Result<(), String> {
    driver
        .slot()
        .get_or_init(|| build(driver))
        .as_ref()
        .map(drop)
        .map_err(Clone::clone)
}

/// The clientv3 version of `driver` ("3.6.16"), once [`prepare`] built it.
pub fn version(driver: Driver) -> Option<String> {
    match driver.slot().get() {
        Some(Ok(built)) => Some(built.version.clone()),
        _ => None,
    }
}

/// `go build` of `driver` into the workspace's `target/go-clientv3/`, then its `-version`.
fn build(driver: Driver) -> Result<Built, String> {
    let bench = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out_dir = bench.join("../target/go-clientv3");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let binary = out_dir.join(driver.binary_name());
    let mut go = std::process::Command::new("go");
    go.args(["build", "-o"]).arg(&binary);
    match driver {
        Driver::Current => {
            // Module mode in the module's own directory. The module and build caches live in
            // target/ (a `cargo clean` starts afresh, and nothing lands in the user's GOPATH);
            // -modcacherw leaves them removable; -mod=readonly makes a go.sum that lacks a
            // module an error rather than an edit of the committed file.
            go.arg(".")
                .current_dir(bench.join(MODULE_DIR))
                .env("GO111MODULE", "on")
                .env("GOMODCACHE", out_dir.join("mod"))
                .env("GOCACHE", out_dir.join("cache"))
                .env("GOFLAGS", "-modcacherw -mod=readonly -buildvcs=false");
            // The first build is silent for a minute or two: say why the run waits.
            eprintln!(
                "building go-clientv3's driver (bench/{MODULE_DIR}; the first build fetches \
                 clientv3 from the Go module proxy and takes a minute or two)"
            );
        }
        Driver::Debian34 => {
            let clientv3 = Path::new(SYSTEM_GOPATH).join("src/go.etcd.io/etcd/clientv3");
            if !clientv3.is_dir() {
                return Err(format!(
                    "clientv3 3.4's sources are not at {} (apt-get install \
                     golang-etcd-server-dev)",
                    clientv3.display()
                ));
            }
            let gopath = format!("{}:{SYSTEM_GOPATH}", bench.join("go").display());
            go.arg(GOPATH_PACKAGE)
                .env("GOPATH", gopath)
                .env("GO111MODULE", "off")
                .env("GOFLAGS", "");
        }
    }
    let output = go.output().map_err(|e| {
        format!("no Go toolchain (`go`: {e}; install Go 1.26 or later, e.g. from go.dev/dl)")
    })?;
    if !output.status.success() {
        return Err(format!(
            "the clientv3 driver did not build: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let asked = std::process::Command::new(&binary)
        .arg("-version")
        .output()
        .map_err(|e| format!("{}: {e}", binary.display()))?;
    let version = String::from_utf8_lossy(&asked.stdout).trim().to_string();
    if !asked.status.success() || version.is_empty() {
        return Err(format!("{} -version said nothing", binary.display()));
    }
    Ok(Built { binary, version })
}

/// Who waits for the driver's lines about one command.
enum Waiter {
    /// A call: its one answer.
    Once(oneshot::Sender<String>),
    /// A watch or a lease: every line until `end`.
    Stream(mpsc::UnboundedSender<(Instant, String)>),
}

/// Waiters by command id, shared with the task that reads the driver's output.
type Waiters = Arc<Mutex<HashMap<u64, Waiter>>>;

/// One running driver: one clientv3 client. Cheap to clone; the driver is killed when the
/// last clone goes.
#[derive(Clone)]
pub struct GoClient {
    inner: Arc<Inner>,
}

struct Inner {
    /// Command lines to the task that writes the driver's stdin.
    commands: mpsc::UnboundedSender<String>,
    waiters: Waiters,
    next_id: AtomicU64,
    /// The driver process, killed on drop.
    _child: Child,
}

impl GoClient {
    /// Starts `driver` connected to `endpoints` through `access` (TLS flags, and the password
    /// in its environment, never its arguments), with `deadline` on every call it makes.
    pub async fn start(
        driver: Driver,
        endpoints: &[String],
        access: &Access,
        deadline: Duration,
    ) -> Result<GoClient, String> {
        let binary = match driver.slot().get() {
            Some(Ok(built)) => built.binary.clone(),
            Some(Err(why)) => return Err(why.clone()),
            None => return Err("the clientv3 driver was not prepared".into()),
        };
        let mut command = Command::new(binary);
        command
            .arg("--endpoints")
            .arg(endpoints.join(","))
            .arg("--deadline")
            .arg(format!("{}ms", deadline.as_millis()))
            .args(access.go_args());
        if let Some((name, password)) = access.go_env() {
            command.env(name, password);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("the clientv3 driver did not start: {e}"))?;
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let (Some(mut stdin), Some(stdout)) = (stdin, stdout) else {
            return Err("the clientv3 driver has no pipes".into());
        };
        let (commands, mut queue) = mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            while let Some(line) = queue.recv().await {
                if stdin.write_all(line.as_bytes()).await.is_err() {
                    return;
                }
            }
        });
        let waiters: Waiters = Arc::default();
        let (ready_tx, ready) = oneshot::channel();
        waiters.lock().unwrap().insert(0, Waiter::Once(ready_tx));
        tokio::spawn(dispatch(BufReader::new(stdout), waiters.clone()));
        match tokio::time::timeout(START_TIMEOUT, ready).await {
            Ok(Ok(_)) => {}
            Ok(Err(_)) => return Err("the clientv3 driver exited (see its stderr)".into()),
            Err(_) => return Err("the clientv3 driver did not connect in 10 s".into()),
        }
        Ok(GoClient {
            inner: Arc::new(Inner {
                commands,
                waiters,
                next_id: AtomicU64::new(1),
                _child: child,
            }),
        })
    }

    /// Sends `command` under a new id, after registering `waiter` for its answers.
    fn send(&self, command: &str, waiter: Waiter) -> u64 {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        self.inner.waiters.lock().unwrap().insert(id, waiter);
        // A closed queue means the driver is gone: the waiter's channel closes with it.
        let _ = self.inner.commands.send(format!("{id} {command}\n"));
        id
    }

    /// One call: `Ok` on the driver's `ok`, its error kind otherwise.
    async fn call(&self, command: &str) -> Result<(), ErrorKind> {
        self.ask(command).await.map(drop)
    }

    /// One call whose answer carries words: those after the driver's `ok` (empty if none),
    /// its error kind otherwise (`DriverGone` once the driver has exited).
    pub(crate) async fn ask(&self, command: &str) -> Result<String, ErrorKind> {
        let (tx, rx) = oneshot::channel();
        self.send(command, Waiter::Once(tx));
        match rx.await {
            Ok(answer) if answer == "ok" => Ok(String::new()),
            Ok(answer) => match answer.strip_prefix("ok ") {
                Some(words) => Ok(words.to_string()),
                None => Err(answer.strip_prefix("err ").unwrap_or(&answer).to_string()),
            },
            Err(_) => Err("DriverGone".into()),
        }
    }

    /// Put `value` at `key` (both printable, without spaces, as the benchmark's are).
    pub async fn put(&self, key: &[u8], value: &[u8]) -> Result<(), ErrorKind> {
        let (key, value) = (String::from_utf8_lossy(key), String::from_utf8_lossy(value));
        self.call(&format!("put {key} {value}")).await
    }

    /// Read `key`, serializable or linearizable.
    pub async fn get(&self, key: &[u8], serializable: bool) -> Result<(), ErrorKind> {
        let mode = if serializable { "s" } else { "l" };
        self.call(&format!("get {} {mode}", String::from_utf8_lossy(key)))
            .await
    }

    /// Sends a streaming `command` and hands each of its lines (the words after the id) with
    /// its arrival to `on_line` until `until`, until `on_line` breaks (at the command's `end`),
    /// or until the driver is gone, which it returns as `Err`.
    async fn follow(
        &self,
        command: &str,
        until: Instant,
        mut on_line: impl FnMut(Instant, &str) -> ControlFlow<()>,
    ) -> Result<(), String> {
        let (tx, mut lines) = mpsc::unbounded_channel();
        self.send(command, Waiter::Stream(tx));
        loop {
            match tokio::time::timeout_at(until, lines.recv()).await {
                Err(_until) => return Ok(()),
                Ok(None) => return Err("DriverGone".into()),
                Ok(Some((at, line))) => {
                    if on_line(at, &line).is_break() {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Watches `prefix` as a Go service does (one `Watch` whose channel clientv3 keeps open
    /// and resumes itself) until `until`, times from `start`.
    pub async fn watch(self, prefix: String, start: Instant, until: Instant) -> Watched {
        let mut out = Watched::default();
        let followed = self
            .follow(&format!("watch {prefix}"), until, |at, line| {
                let mut words = line.split(' ');
                match (words.next(), words.next(), words.next()) {
                    (Some("ev"), Some(key), Some(revision)) => {
                        let seq = key
                            .strip_prefix(prefix.as_str())
                            .and_then(|s| s.parse().ok());
                        if let (Some(seq), Ok(revision)) = (seq, revision.parse()) {
                            out.seen.push(Seen {
                                seq,
                                revision,
                                at_us: micros(start, at),
                            });
                        }
                    }
                    (Some("end"), reason, _) => {
                        out.ended = Some(reason.unwrap_or("ended").to_string());
                        return ControlFlow::Break(());
                    }
                    _ => {}
                }
                ControlFlow::Continue(())
            })
            .await;
        if let Err(gone) = followed {
            out.ended = Some(gone);
        }
        out
    }

    /// Grants a lease of `ttl` and keeps it with clientv3's `KeepAlive` until `until`, times
    /// from `start`. clientv3 does not say when it sent a renewal: its answer's arrival stands
    /// for both, so a renewal in flight at the fault counts from its answer.
    pub async fn keep(self, ttl: Duration, start: Instant, until: Instant) -> Kept {
        let mut out = Kept::default();
        let followed = self
            .follow(&format!("lease {}", ttl.as_secs()), until, |at, line| {
                let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
                match word {
                    "granted" => out.lease_id = rest.parse().ok(),
                    "renewed" => out.renewals.push(Renewal {
                        sent_us: micros(start, at),
                        answered_us: micros(start, at),
                    }),
                    "end" => {
                        out.ended = Some(rest.to_string());
                        return ControlFlow::Break(());
                    }
                    _ => {}
                }
                ControlFlow::Continue(())
            })
            .await;
        if let Err(gone) = followed {
            out.ended = Some(gone);
        }
        out
    }

    /// Holds the leadership of `key` as a Go service does with clientv3's concurrency package
    /// (a 5 s session, `Campaign`, held until the session is done, then again) until `until`,
    /// times from `start`.
    pub async fn hold(self, key: String, start: Instant, until: Instant) -> Held {
        let mut out = Held::default();
        let followed = self
            .follow(&format!("elect {key}"), until, |at, line| {
                let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
                match word {
                    "elected" => out.holds.push(Hold {
                        acquired_us: micros(start, at),
                        lost_us: None,
                    }),
                    "lost" => {
                        if let Some(hold) = out.holds.last_mut().filter(|h| h.lost_us.is_none()) {
                            hold.lost_us = Some(micros(start, at));
                        }
                        out.last_problem = Some(rest.to_string());
                    }
                    _ => {}
                }
                ControlFlow::Continue(())
            })
            .await;
        if let Err(gone) = followed {
            out.last_problem = Some(gone);
        }
        out
    }
}

/// Microseconds from `start` to `at`.
fn micros(start: Instant, at: Instant) -> u64 {
    at.saturating_duration_since(start).as_micros() as u64
}

/// Reads the driver's lines (`<id> <answer>`) and hands each to its waiter, stamped with its
/// arrival; a call's waiter and a stream's at its `end` are removed.
async fn dispatch(output: impl tokio::io::AsyncBufRead + Unpin, waiters: Waiters) {
    let mut lines = output.lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let at = Instant::now();
        let Some((id, answer)) = line.split_once(' ') else {
            continue;
        };
        let Ok(id) = id.parse::<u64>() else {
            continue;
        };
        let mut waiters = waiters.lock().unwrap();
        let done = answer.starts_with("end");
        match waiters.get(&id) {
            Some(Waiter::Stream(tx)) => {
                let _ = tx.send((at, answer.to_string()));
                if done {
                    waiters.remove(&id);
                }
            }
            Some(Waiter::Once(_)) => {
                if let Some(Waiter::Once(tx)) = waiters.remove(&id) {
                    let _ = tx.send(answer.to_string());
                }
            }
            None => {}
        }
    }
    // The driver is gone: every waiter's channel closes, so nobody waits forever.
    waiters.lock().unwrap().clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two drivers share their access code as two copies of one file (GOPATH and module
    /// mode cannot share a package); a fix to one must reach the other.
    #[test]
    fn both_drivers_share_one_access_file() {
        let current = include_str!("../go/clientv3/access.go");
        let debian = include_str!("../go/src/etcdhabench/clientv3driver/access.go");
        assert_eq!(current, debian);
    }

    /// The driver's lines reach the right waiters: a call's one answer, a stream's lines up to
    /// its `end`, after which its waiter is gone; lines for nobody are dropped.
    #[tokio::test]
    async fn lines_reach_their_waiters() {
        let waiters: Waiters = Arc::default();
        let (call_tx, call) = oneshot::channel();
        let (stream_tx, mut stream) = mpsc::unbounded_channel();
        waiters.lock().unwrap().insert(1, Waiter::Once(call_tx));
        waiters.lock().unwrap().insert(2, Waiter::Stream(stream_tx));
        let text: &[u8] = b"2 ev p/7 12\n9 ok\n1 err Timeout\n2 end channel-closed\n2 ev p/8 13\n";
        dispatch(BufReader::new(text), waiters.clone()).await;
        assert_eq!(call.await.unwrap(), "err Timeout");
        let mut seen = Vec::new();
        while let Some((_, line)) = stream.recv().await {
            seen.push(line);
        }
        assert_eq!(seen, ["ev p/7 12", "end channel-closed"]);
        assert!(waiters.lock().unwrap().is_empty());
    }
}
