//! Starts member processes from one long-lived thread, so the kernel kills them if the test process dies.
//!
//! `Drop` of a [`Cluster`](super::Cluster) kills its members when a test ends or panics. It cannot
//! run when the test process itself is killed (a CI timeout, `panic = "abort"`, Ctrl-C on a
//! hung test). For that case each member is started with Linux's `PR_SET_PDEATHSIG = SIGKILL`,
//! which kills the child when its parent *thread* exits. A tokio worker or blocking-pool thread
//! can exit long before the process does (and a cluster may live in a `static` shared by many
//! tests), so the children are forked from one dedicated thread that lives as long as the process.

use std::io;
use std::process::{Child, Command};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Mutex, OnceLock};

/// A request to the spawner thread: the command, and where to send the started child.
type Request = (Command, Sender<io::Result<Child>>);

/// The spawner thread's inbox; the thread is started on first use.
static SPAWNER: OnceLock<Mutex<Sender<Request>>> = OnceLock::new();

/// Starts `command` from the spawner thread and returns the running child.
pub(crate) fn spawn(mut command: Command) -> io::Result<Child> {
    die_with_parent(&mut command);
    let inbox = SPAWNER.get_or_init(|| {
        let (tx, rx) = channel::<Request>();
        let started = std::thread::Builder::new()
            .name("etcd-ha-testkit-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    // The caller may have given up waiting; then the child is dropped (not
                    // killed) here and still dies with the process.
                    let _ = reply.send(command.spawn());
                }
            });
        if let Err(e) = started {
            // Without the thread we cannot spawn at all; report it on every call below.
            eprintln!("etcd-ha testkit: cannot start the spawner thread: {e}");
        }
        Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = channel();
    inbox
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .send((command, reply_tx))
        .map_err(|_| io::Error::other("the testkit spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("the testkit spawner thread is gone"))?
}

/// Asks the kernel to SIGKILL the child when the thread that forked it (our spawner) exits.
#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls prctl(2), which is
    // async-signal-safe; it touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Other Unixes have no parent-death signal; `Drop` of the cluster remains the only teardown.
#[cfg(not(target_os = "linux"))]
fn die_with_parent(_command: &mut Command) {}
