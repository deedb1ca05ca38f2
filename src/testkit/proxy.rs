//! [`FaultProxy`]: a TCP proxy in front of one member's client port that passes, blackholes, resets or delays the traffic.
//!
//! Killing or freezing a member hits every client and every peer at once. The proxy hits only
//! the connections that go through it, and it can do what a process signal cannot: answer
//! nothing while keeping the connection open for as long as the test likes (a frozen peer, a
//! dead NAT entry), refuse every new connection while the member is in fact fine, or slow one
//! path down. It works at the TCP level, so TLS passes through untouched.
//!
//! # Modes
//!
//! ```text
//!            set_mode(Blackhole)                 set_mode(Pass / Latency)
//!   Pass ─────────────────────────▶ Blackhole ──────────────────────────▶ blackholed
//!   Latency   (bytes are read and       │                                 connections are
//!     ▲        dropped, both ways)      │ set_mode(Reset)                 reset; new ones
//!     │                                 ▼                                 forward
//!     └──────────────────────────── Reset (every connection RST, new ones accepted then RST)
//! ```
//!
//! A connection that was blackholed never forwards again: bytes were lost, so the two ends
//! no longer agree on the stream (HTTP/2 frames, TLS records). It is reset when the mode
//! leaves `Blackhole`, as a peer that "comes back" after a partition finds its old connections
//! dead. Bytes queued by `Latency` when a fault starts are dropped, as on a real network.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use tracing::Instrument;

/// Bytes read from a socket in one go; one chunk is what `Latency` delays as a unit.
const CHUNK_BYTES: usize = 16 * 1024;

/// Chunks in flight per direction under `Latency` or `Loss` before reading pauses: enough for
/// a few MiB/s at 100 ms, and a bound on memory if the far end stops reading.
const QUEUE_CHUNKS: usize = 64;

/// Pause after a failed accept (e.g. out of file descriptors), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// What the proxy does with traffic; see [`FaultProxy::set_mode`].
///
/// ```no_run
/// # fn demo(proxy: etcd_ha::testkit::FaultProxy) {
/// use etcd_ha::testkit::Mode;
/// proxy.set_mode(Mode::Latency(std::time::Duration::from_millis(50)));
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mode {
    /// Forward both ways, unchanged. The initial mode.
    Pass,
    /// Keep every connection, existing and new, open, and silently drop every byte in both
    /// directions: a frozen or half-open peer. New connections are accepted and never reach
    /// the member.
    Blackhole,
    /// Reset every existing connection (RST) and reset each new one right after accepting it:
    /// a peer that refuses, fast.
    Reset,
    /// Forward both ways, each chunk held back by this long: a slow link. A request and its
    /// response are both delayed, so a round trip takes at least twice this.
    Latency(Duration),
    /// Forward both ways, but hold `percent` % of the chunks (drawn at random) back by
    /// `retransmit`: a lossy link as TCP shows it to the application, a lost segment sent
    /// again after the retransmission timeout while everything behind it waits (TCP delivers
    /// in order). Nothing is dropped: the stream stays intact, its calls stall now and then.
    Loss {
        /// How many chunks in a hundred are held back (at most 100).
        percent: u8,
        /// How long each one is held: the retransmission timeout (200 ms at least on Linux).
        retransmit: Duration,
    },
}

impl Mode {
    /// Blackhole and Reset end forwarding on a connection; Pass, Latency and Loss keep it.
    fn is_fault(self) -> bool {
        matches!(self, Mode::Blackhole | Mode::Reset)
    }
}

/// A TCP proxy on 127.0.0.1 in front of one address, usually a member's client port, whose
/// behaviour a test switches at any time with [`set_mode`](Self::set_mode).
///
/// Needs a Tokio runtime; its tasks run there. Dropping it stops accepting and closes every
/// connection (within a moment: the tasks notice on their next wake-up).
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use etcd_ha::testkit::{Cluster, FaultProxy, Mode};
///
/// # async fn demo() {
/// let cluster = Cluster::start(1).await.unwrap();
/// let proxy = FaultProxy::start(cluster.client_addr(0)).unwrap();
/// let client = etcd_ha::Client::connect([proxy.url("http")], Default::default()).await.unwrap();
/// proxy.set_mode(Mode::Blackhole);
/// // ... requests through the proxy now hang ...
/// proxy.set_mode(Mode::Pass);
/// # drop(client);
/// # }
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    /// Where clients connect: 127.0.0.1 and a port the kernel picked.
    addr: SocketAddr,
    /// Where the proxy connects to.
    target: SocketAddr,
    /// The current mode; every task watches it. Dropping it tells them all to close.
    mode: watch::Sender<Mode>,
    /// Counters shared with the tasks.
    stats: Arc<Stats>,
    /// The accept loop, aborted on drop so that the port closes.
    accept: JoinHandle<()>,
}

/// What the proxy has done so far.
#[derive(Debug, Default)]
struct Stats {
    /// Connections accepted, in any mode.
    accepted: AtomicU64,
    /// Bytes written to either side, i.e. forwarded.
    forwarded: AtomicU64,
}

impl FaultProxy {
    /// Binds 127.0.0.1 on a free port and starts forwarding to `target` in [`Mode::Pass`].
    ///
    /// Errors if there is no Tokio runtime or the bind fails. The proxy connects to `target`
    /// only when a client connects (in `Pass`, `Latency` or `Loss`); if that fails, the
    /// client's connection is reset, as the member itself would refuse it.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let member: std::net::SocketAddr = "127.0.0.1:2379".parse().unwrap();
    /// let proxy = etcd_ha::testkit::FaultProxy::start(member).unwrap();
    /// assert_eq!(proxy.target(), member);
    /// # }
    /// ```
    pub fn start(target: SocketAddr) -> io::Result<FaultProxy> {
        let runtime = tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let listener = {
            let _entered = runtime.enter();
            TcpListener::from_std(listener)?
        };
        let (mode, watcher) = watch::channel(Mode::Pass);
        let stats = Arc::new(Stats::default());
        let accept = AcceptLoop {
            listener,
            target,
            mode: watcher,
            stats: stats.clone(),
        };
        let span = tracing::debug_span!("fault_proxy", %addr, %target);
        let accept = runtime.spawn(accept.run().instrument(span));
        Ok(FaultProxy {
            addr,
            target,
            mode,
            stats,
            accept,
        })
    }

    /// The address clients connect to.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo(proxy: etcd_ha::testkit::FaultProxy) {
    /// assert!(proxy.addr().ip().is_loopback());
    /// # }
    /// ```
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address the proxy forwards to.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo(cluster: etcd_ha::testkit::Cluster, proxy: etcd_ha::testkit::FaultProxy) {
    /// assert_eq!(proxy.target(), cluster.client_addr(0));
    /// # }
    /// ```
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// The proxy as an endpoint URL, e.g. "http://127.0.0.1:41234" for `scheme` "http". With
    /// "https", the testkit's server certificate still matches: it is valid for 127.0.0.1.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo(proxy: etcd_ha::testkit::FaultProxy) {
    /// assert!(proxy.url("http").starts_with("http://127.0.0.1:"));
    /// # }
    /// ```
    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://{}", self.addr)
    }

    /// Switches the mode; takes effect for every byte read or written after this returns.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo(proxy: etcd_ha::testkit::FaultProxy) {
    /// use std::time::Duration;
    /// use etcd_ha::testkit::Mode;
    /// proxy.set_mode(Mode::Latency(Duration::from_millis(200)));
    /// proxy.set_mode(Mode::Pass);
    /// # }
    /// ```
    pub fn set_mode(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// The current mode.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo(proxy: etcd_ha::testkit::FaultProxy) {
    /// assert_eq!(proxy.mode(), etcd_ha::testkit::Mode::Pass);
    /// # }
    /// ```
    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// Connections accepted so far, in any mode.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo(proxy: etcd_ha::testkit::FaultProxy) {
    /// println!("{} connections", proxy.accepted());
    /// # }
    /// ```
    pub fn accepted(&self) -> u64 {
        self.stats.accepted.load(Ordering::Relaxed)
    }

    /// Bytes forwarded so far, both directions together.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn demo(proxy: etcd_ha::testkit::FaultProxy) {
    /// println!("{} bytes forwarded", proxy.bytes_forwarded());
    /// # }
    /// ```
    pub fn bytes_forwarded(&self) -> u64 {
        self.stats.forwarded.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    /// Stops accepting; the connection tasks see the mode channel close and drop their sockets.
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// The task that accepts clients and starts a [`Connection`] for each.
struct AcceptLoop {
    /// The proxy's socket.
    listener: TcpListener,
    /// Passed on to each connection.
    target: SocketAddr,
    /// The mode; closed when the [`FaultProxy`] is dropped.
    mode: watch::Receiver<Mode>,
    /// Counters.
    stats: Arc<Stats>,
}

impl AcceptLoop {
    async fn run(mut self) {
        loop {
            let client = tokio::select! {
                // The FaultProxy was dropped (normally the abort gets here first).
                changed = self.mode.changed() => match changed {
                    Ok(()) => continue,
                    Err(_) => return,
                },
                // A client connected.
                accepted = self.listener.accept() => match accepted {
                    Ok((client, _)) => client,
                    Err(error) => {
                        tracing::debug!(%error, "accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                        continue;
                    }
                },
            };
            self.stats.accepted.fetch_add(1, Ordering::Relaxed);
            let mode = *self.mode.borrow();
            if mode == Mode::Reset {
                reset(client);
                continue;
            }
            let _ = client.set_nodelay(true);
            let connection = Connection {
                client,
                target: self.target,
                mode: self.mode.clone(),
                stats: self.stats.clone(),
            };
            tokio::spawn(connection.run().in_current_span());
        }
    }
}

/// One client connection: forwards it, blackholes it or resets it as the mode says.
struct Connection {
    /// The accepted socket.
    client: TcpStream,
    /// The member, dialled in `Pass`, `Latency` and `Loss`.
    target: SocketAddr,
    /// The mode; closed when the [`FaultProxy`] is dropped.
    mode: watch::Receiver<Mode>,
    /// Counters.
    stats: Arc<Stats>,
}

/// Why forwarding ended.
enum Ended {
    /// Both sides closed, or one failed: nothing more to do.
    Closed,
    /// The mode became a fault.
    Fault(Mode),
    /// The proxy was dropped.
    Dropped,
}

impl Connection {
    async fn run(mut self) {
        let mut upstream = None;
        let mode = *self.mode.borrow_and_update();
        if !mode.is_fault() {
            match TcpStream::connect(self.target).await {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    upstream = Some(stream);
                }
                Err(error) => {
                    tracing::debug!(%error, "member refused; resetting the client");
                    return reset(self.client);
                }
            }
        }
        let ended = match upstream.as_mut() {
            Some(upstream) => self.forward(upstream).await,
            None => Ended::Fault(mode),
        };
        match ended {
            Ended::Closed | Ended::Dropped => {}
            Ended::Fault(Mode::Blackhole) => {
                self.blackhole(upstream.as_mut()).await;
                reset(self.client);
            }
            Ended::Fault(_) => reset(self.client),
        }
    }

    /// Copies both ways until both sides close, one fails, or a fault begins.
    async fn forward(&mut self, upstream: &mut TcpStream) -> Ended {
        let (mut client_read, mut client_write) = self.client.split();
        let (mut upstream_read, mut upstream_write) = upstream.split();
        let mode = &self.mode;
        let stats = &*self.stats;
        let up = pipe(&mut client_read, &mut upstream_write, mode, stats);
        let down = pipe(&mut upstream_read, &mut client_write, mode, stats);
        let mut watcher = self.mode.clone();
        tokio::select! {
            // Both directions finished (EOF both ways), one failed, or one dropped a chunk
            // because of a fault (which the watcher may have missed if the mode flipped back).
            piped = async { tokio::try_join!(up, down) } => match piped {
                Err(Stop::Fault(mode)) => Ended::Fault(mode),
                Err(Stop::Io(error)) => {
                    tracing::debug!(%error, "connection failed");
                    Ended::Closed
                }
                Ok(_) => Ended::Closed,
            },
            // A fault began: stop at once; chunks still queued are lost.
            fault = watcher.wait_for(|mode| mode.is_fault()) => match fault {
                Ok(mode) => Ended::Fault(*mode),
                Err(_) => Ended::Dropped,
            },
        }
    }

    /// Reads and drops everything from both sides until the mode is no longer `Blackhole`,
    /// the client leaves, or the proxy is dropped.
    async fn blackhole(&mut self, mut upstream: Option<&mut TcpStream>) {
        let mut client_buf = vec![0; CHUNK_BYTES];
        let mut upstream_buf = vec![0; CHUNK_BYTES];
        loop {
            let from_upstream = async {
                match upstream.as_mut() {
                    Some(upstream) => upstream.read(&mut upstream_buf).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // The mode changed (or the proxy is gone): the blackhole is over.
                changed = self.mode.changed() => {
                    if changed.is_err() || *self.mode.borrow() != Mode::Blackhole {
                        return;
                    }
                }
                // The client sent something, into the void; or it left, and there is
                // nothing left to hold open.
                read = self.client.read(&mut client_buf) => {
                    if matches!(read, Ok(0) | Err(_)) {
                        return;
                    }
                }
                // The member sent something (an HTTP/2 ping, say), into the void too; if it
                // closed, only the client side is left to hold.
                read = from_upstream => {
                    if matches!(read, Ok(0) | Err(_)) {
                        upstream = None;
                    }
                }
            }
        }
    }
}

/// Why a [`pipe`] stopped early.
enum Stop {
    /// A socket failed.
    Io(io::Error),
    /// A chunk was dropped because the mode was this fault: the stream is broken from here on.
    Fault(Mode),
}

impl From<io::Error> for Stop {
    fn from(error: io::Error) -> Self {
        Stop::Io(error)
    }
}

/// Copies `reader` to `writer` through a queue that holds each chunk back by the `Latency` of
/// the moment it was read (zero in `Pass`), and passes the EOF on. Stops with the fault if a
/// chunk is read or falls due while the mode is one.
async fn pipe<R, W>(
    reader: &mut R,
    writer: &mut W,
    mode: &watch::Receiver<Mode>,
    stats: &Stats,
) -> Result<(), Stop>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (queue, mut due) = mpsc::channel::<(Instant, Vec<u8>)>(QUEUE_CHUNKS);
    let read = async move {
        let mut buf = vec![0; CHUNK_BYTES];
        loop {
            let n = reader.read(&mut buf).await?;
            if n == 0 {
                // Dropping `queue` lets the writer drain it, then pass the EOF on.
                return Ok::<_, Stop>(());
            }
            let delay = match *mode.borrow() {
                Mode::Pass => Duration::ZERO,
                Mode::Latency(delay) => delay,
                Mode::Loss {
                    percent,
                    retransmit,
                } if fastrand::u8(..100) < percent => retransmit,
                Mode::Loss { .. } => Duration::ZERO,
                fault @ (Mode::Blackhole | Mode::Reset) => return Err(Stop::Fault(fault)),
            };
            if queue
                .send((Instant::now() + delay, buf[..n].to_vec()))
                .await
                .is_err()
            {
                return Ok(());
            }
        }
    };
    let write = async {
        while let Some((at, chunk)) = due.recv().await {
            if at > Instant::now() {
                sleep_until(at).await;
            }
            let current = *mode.borrow();
            if current.is_fault() {
                return Err(Stop::Fault(current));
            }
            writer.write_all(&chunk).await?;
            stats
                .forwarded
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
        writer.shutdown().await?;
        Ok(())
    };
    tokio::try_join!(read, write).map(drop)
}

/// Closes `socket` with an RST rather than a FIN (SO_LINGER 0): the peer's next read or write
/// fails with "connection reset", at once.
fn reset(socket: TcpStream) {
    let _ = socket.set_zero_linger();
    drop(socket);
}
