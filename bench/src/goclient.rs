//! Go's clientv3 as an optional client (`--clients ...,go-clientv3`): etcd's own Go client
//! (etcd 3.4, from Debian's `golang-etcd-server-dev`) in a small driver, `bench/go/driver.go`,
//! built offline in GOPATH mode the first time a run asks for it, started once per trial and
//! spoken to over a line protocol on its stdin and stdout. Without a Go toolchain or the etcd
//! sources the client is left out of the run, with the reason printed.
//!
//! It runs the put and get loops only: the watch, lease and leadership probes are the Rust
//! clients'.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};

use crate::clients::ErrorKind;

/// Where Debian's Go packages put their sources (GOPATH mode); `ETCD_HA_BENCH_GOPATH`
/// overrides it.
const DEBIAN_GOPATH: &str = "/usr/share/gocode";

/// How long the driver may take to connect and make its first read.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// What a call answers when the driver is gone.
const GONE: &str = "go driver gone";

/// The built driver, or why there is none; built once per process.
static DRIVER: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// The driver's path, built on first use (blocking: call it before the run, or from
/// `spawn_blocking`); an error says why it cannot be had.
pub fn driver() -> Result<PathBuf, String> {
    DRIVER.get_or_init(build).clone()
}

/// Builds `bench/go/driver.go` next to the running binary, unless a build newer than the
/// source is there already.
fn build() -> Result<PathBuf, String> {
    let gopath = std::env::var("ETCD_HA_BENCH_GOPATH").unwrap_or_else(|_| DEBIAN_GOPATH.into());
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("go/driver.go");
    let exe = std::env::current_exe().map_err(|e| format!("where am I: {e}"))?;
    let out = exe.with_file_name("go-clientv3-driver");
    let go = std::process::Command::new("go").arg("version").output();
    if !go.is_ok_and(|o| o.status.success()) {
        return Err("no Go toolchain (`go` not on PATH; Debian: golang-go)".into());
    }
    let clientv3 = Path::new(&gopath).join("src/go.etcd.io/etcd/clientv3");
    if !clientv3.is_dir() {
        return Err(format!(
            "no etcd clientv3 sources at {} (Debian: golang-etcd-server-dev)",
            clientv3.display()
        ));
    }
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if let (Some(built), Some(src)) = (modified(&out), modified(&source))
        && built >= src
    {
        return Ok(out);
    }
    let built = std::process::Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&out)
        .arg(&source)
        .env("GO111MODULE", "off")
        .env("GOPATH", &gopath)
        .env("GOFLAGS", "")
        .output()
        .map_err(|e| format!("running go build: {e}"))?;
    if !built.status.success() {
        let err = String::from_utf8_lossy(&built.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        return Err(format!("go build failed: {}", tail.join(" | ")));
    }
    Ok(out)
}

/// One running driver; clones share it. Dropping the last clone kills the process.
#[derive(Clone)]
pub struct GoClient {
    /// The shared state.
    inner: Arc<Inner>,
}

/// What the clones share.
struct Inner {
    /// Request lines for the writer task.
    requests: mpsc::UnboundedSender<String>,
    /// Calls waiting for their answer, by id; a plain mutex, never held across an `.await`.
    pending: Mutex<HashMap<u64, oneshot::Sender<Result<(), ErrorKind>>>>,
    /// The next call's id.
    next: AtomicU64,
    /// The process, killed when this is dropped.
    _child: Mutex<Child>,
}

impl GoClient {
    /// Starts a driver for `endpoints` and waits until its first read succeeded.
    pub async fn connect(endpoints: &[String]) -> Result<GoClient, String> {
        let path = tokio::task::spawn_blocking(driver)
            .await
            .map_err(|e| format!("building the driver: {e}"))??;
        let mut child = Command::new(path)
            .arg(endpoints.join(","))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting the go driver: {e}"))?;
        let stdin = child.stdin.take().expect("a piped stdin");
        let stdout = child.stdout.take().expect("a piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        match tokio::time::timeout(READY_TIMEOUT, lines.next_line()).await {
            Ok(Ok(Some(line))) if line == "ready" => {}
            Ok(Ok(Some(line))) => return Err(format!("go driver: {line}")),
            Ok(_) => return Err("go driver exited before it was ready".into()),
            Err(_) => return Err("go driver not ready within 10 s".into()),
        }
        let (requests, mut to_write) = mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            let mut stdin = BufWriter::new(stdin);
            while let Some(line) = to_write.recv().await {
                if stdin.write_all(line.as_bytes()).await.is_err() {
                    return;
                }
                // Write what else is queued before one flush: one syscall per burst.
                while let Ok(line) = to_write.try_recv() {
                    if stdin.write_all(line.as_bytes()).await.is_err() {
                        return;
                    }
                }
                if stdin.flush().await.is_err() {
                    return;
                }
            }
        });
        let inner = Arc::new(Inner {
            requests,
            pending: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            _child: Mutex::new(child),
        });
        let weak = Arc::downgrade(&inner);
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let Some((id, result)) = parse_answer(&line) else {
                    continue;
                };
                let Some(inner) = weak.upgrade() else { return };
                let waiting = inner.pending.lock().expect("pending calls").remove(&id);
                if let Some(waiting) = waiting {
                    // The caller may have given up at its deadline already.
                    let _ = waiting.send(result);
                }
            }
        });
        Ok(GoClient { inner })
    }

    /// Put `value` at `key`, bounded by `deadline` on the Go side too.
    pub async fn put(&self, key: &[u8], value: &[u8], deadline: Duration) -> Result<(), ErrorKind> {
        self.call("put", key, value, deadline).await
    }

    /// Read `key`, linearizably or serializably.
    pub async fn get(
        &self,
        key: &[u8],
        serializable: bool,
        deadline: Duration,
    ) -> Result<(), ErrorKind> {
        let op = if serializable {
            "get-serializable"
        } else {
            "get-linearizable"
        };
        self.call(op, key, b"", deadline).await
    }

    /// Sends one request and waits for its answer.
    async fn call(
        &self,
        op: &str,
        key: &[u8],
        value: &[u8],
        deadline: Duration,
    ) -> Result<(), ErrorKind> {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        self.inner
            .pending
            .lock()
            .expect("pending calls")
            .insert(id, answer);
        let line = format!(
            "{id}\t{op}\t{}\t{}\t{}\n",
            deadline.as_millis(),
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(value)
        );
        if self.inner.requests.send(line).is_err() {
            self.inner
                .pending
                .lock()
                .expect("pending calls")
                .remove(&id);
            return Err(GONE.into());
        }
        answered.await.unwrap_or_else(|_| Err(GONE.into()))
    }
}

/// `<id>\tok` or `<id>\terr\t<kind>`; `None` for anything else.
fn parse_answer(line: &str) -> Option<(u64, Result<(), ErrorKind>)> {
    let mut fields = line.splitn(3, '\t');
    let id = fields.next()?.parse().ok()?;
    match (fields.next()?, fields.next()) {
        ("ok", None) => Some((id, Ok(()))),
        ("err", Some(kind)) => Some((id, Err(format!("go {kind}")))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse() {
        assert_eq!(parse_answer("7\tok"), Some((7, Ok(()))));
        assert_eq!(
            parse_answer("8\terr\tgrpc Unavailable"),
            Some((8, Err("go grpc Unavailable".to_string())))
        );
        assert_eq!(parse_answer("ready"), None);
        assert_eq!(parse_answer("9\tmaybe"), None);
    }
}
