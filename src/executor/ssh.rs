//! The Docker API over SSH: one authenticated `ssh2` session per [`super::connect::Engine`],
//! each HTTP connection an SSH channel running `docker system dial-stdio` on the machine (as
//! docker-autoscaler does), spoken to by bollard through a hyper client whose connector hands
//! out those channels.
//!
//! libssh2 is blocking and not meant to be shared between threads, so a session lives on one
//! thread of its own, in non-blocking mode, moving bytes between its channels and the async
//! side through small bounded queues ([`QUEUE_CHUNKS`] chunks of at most [`CHUNK`] bytes each
//! way per channel). When a queue towards drover is full the thread stops reading that channel,
//! the SSH window closes and the machine's `dial-stdio` waits: nothing in the tunnel grows
//! without bound. The thread sleeps in `poll(2)` on the socket and on a wake pipe the async
//! side writes to when it queued or took a chunk. Two channels are kept started ahead of need
//! (a `dial-stdio` takes longer to start than a request to send), and ACKs go out at once
//! (`TCP_QUICKACK`) since sshd leaves Nagle's algorithm on for sessions without a terminal.
//!
//! The host key is checked before authenticating: against the key the provider vouches for,
//! else a known-hosts file (the provider's, else `~/.ssh/known_hosts`); anything else is
//! refused. Keepalives go out every [`KEEPALIVE`] as upstream's connector does; connecting,
//! the handshake and authentication together are bounded by the caller's timeout.

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::PollSender;

/// The command run on the machine for each connection to its Engine.
pub const DIAL_STDIO: &str = "docker system dial-stdio";

/// Largest chunk moved through a channel queue.
pub const CHUNK: usize = 32 * 1024;

/// Chunks a channel queue holds in each direction.
pub const QUEUE_CHUNKS: usize = 4;

/// SSH keepalive interval (upstream's connector default is 30 s).
pub const KEEPALIVE: Duration = Duration::from_secs(30);

/// How long the session thread pauses when the socket keeps being readable but nothing moves.
const IDLE_BACKOFF: Duration = Duration::from_millis(20);

/// Readable-but-idle wake-ups in a row tolerated before backing off.
const IDLE_RUNS_BEFORE_BACKOFF: u32 = 64;

/// How long opening one channel and starting `dial-stdio` may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Channels kept started ahead of need per session (each a `dial-stdio` process).
const SPARES: usize = 2;

/// Streams handed out at once per session, at most; more dials wait for one to end. OpenSSH
/// serves at most 10 channels per connection by default (`MaxSessions`) and refuses more; this
/// leaves room for the spares and for one channel still closing.
pub const MAX_IN_USE: usize = 10 - SPARES - 1;

/// How long a dial waits for one of those streams to end.
const SLOT_WAIT: Duration = Duration::from_secs(60);

/// Idle pooled connections kept per session (each is a `dial-stdio` process on the machine).
const POOL_IDLE: usize = 4;

/// How long an idle pooled connection is kept.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Where and how to reach a machine over SSH (the provider's `ssh` endpoint).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SshTarget {
    /// `host:port` (port 22 when absent).
    pub address: String,
    /// The login user.
    pub username: String,
    /// A private key file.
    pub key_path: Option<PathBuf>,
    /// A private key in OpenSSH/PEM form (takes precedence over `key_path`).
    pub key: Option<drover_protocol::PrivateKey>,
    /// The host key the provider vouches for: `ssh-ed25519 AAAA…` (a `.pub` or known-hosts
    /// key), or just the base64 part.
    pub host_key: Option<String>,
    /// A known-hosts file to check the host key against when none is vouched for.
    pub known_hosts: Option<PathBuf>,
}

impl SshTarget {
    /// `ssh://user@host:port`, for messages.
    pub fn display(&self) -> String {
        format!("ssh://{}@{}", self.username, self.address)
    }

    fn host_port(&self) -> Result<(String, u16), SshError> {
        let bad = || SshError::Address(self.address.clone());
        let a = self.address.trim();
        if a.is_empty() {
            return Err(bad());
        }
        // `[v6]:port`, `host:port`, or a bare host.
        if let Some(rest) = a.strip_prefix('[') {
            let (h, p) = rest.split_once(']').ok_or_else(bad)?;
            let port = match p.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| bad())?,
                None if p.is_empty() => 22,
                None => return Err(bad()),
            };
            return Ok((h.to_string(), port));
        }
        match a.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => {
                let port = p.parse().map_err(|_| bad())?;
                if h.is_empty() {
                    return Err(bad());
                }
                Ok((h.to_string(), port))
            }
            Some(_) => Ok((a.to_string(), 22)),
            None => Ok((a.to_string(), 22)),
        }
    }
}

/// Why an SSH connection could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SshError {
    /// The address is not `host:port`.
    #[error("SSH address {0:?} is not host:port")]
    Address(String),
    /// TCP connect or the SSH handshake failed.
    #[error("cannot reach SSH at {target}: {message}; is sshd running and the port open?")]
    Connect {
        /// `ssh://user@host:port`.
        target: String,
        /// What failed.
        message: String,
    },
    /// The server's host key is not the one expected.
    #[error("host key of {target} ({found}) does not match {expected}; refusing to connect (the machine was replaced, or someone is in the middle): check the provider's host_key / the known-hosts file")]
    HostKeyMismatch {
        /// `ssh://user@host:port`.
        target: String,
        /// The key type and SHA-256 fingerprint the server showed.
        found: String,
        /// What it was checked against.
        expected: String,
    },
    /// No host key to check against.
    #[error("host key of {target} ({found}) cannot be checked: {why}; the provider must vouch for a host_key or name a known_hosts file")]
    HostKeyUnknown {
        /// `ssh://user@host:port`.
        target: String,
        /// The key type and fingerprint the server showed.
        found: String,
        /// Why no check was possible.
        why: String,
    },
    /// The server refused every credential tried.
    #[error("SSH authentication as {user:?} at {target} failed with {method}: {message}; check the key and the machine's authorized_keys")]
    Auth {
        /// `ssh://user@host:port`.
        target: String,
        /// The user.
        user: String,
        /// `key file /path`, `key`, `agent`.
        method: String,
        /// libssh2's message.
        message: String,
    },
}

/// A live SSH session: the handle the async side keeps; the session itself lives on its thread.
#[derive(Debug)]
pub struct Session {
    target: String,
    /// `None` only while dropping.
    open: Option<mpsc::Sender<OpenRequest>>,
    wake: Arc<Waker>,
    /// [`MAX_IN_USE`] permits; each stream handed out holds one.
    slots: Arc<tokio::sync::Semaphore>,
    /// How long a dial waits for a permit.
    slot_wait: Duration,
}

/// A dial: where to send the stream, and the session's permit for it (see [`MAX_IN_USE`]), which
/// the thread keeps with the channel until the server confirmed its close.
type OpenRequest = (
    oneshot::Sender<io::Result<SshStream>>,
    tokio::sync::OwnedSemaphorePermit,
);

type Slot = Option<tokio::sync::OwnedSemaphorePermit>;

/// Connects, checks the host key, authenticates and starts the session's thread. Blocking:
/// run it with `spawn_blocking`.
pub fn connect_blocking(t: &SshTarget, timeout: Duration) -> Result<Session, SshError> {
    let target = t.display();
    let (host, port) = t.host_port()?;
    let fail = |message: String| SshError::Connect {
        target: target.clone(),
        message,
    };
    let deadline = Instant::now() + timeout;
    let addrs: Vec<_> = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| fail(format!("resolving {host}: {e}")))?
        .collect();
    let mut last = format!("{host} resolves to no address");
    let mut tcp = None;
    for addr in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => last = format!("{addr}: {e}"),
        }
    }
    let tcp = tcp.ok_or_else(|| fail(last))?;
    let _ = tcp.set_nodelay(true);
    let fd_holder = tcp.try_clone().map_err(|e| fail(format!("socket: {e}")))?;
    let mut session = ssh2::Session::new().map_err(|e| fail(e.to_string()))?;
    let left = deadline.saturating_duration_since(Instant::now());
    session.set_timeout(u32::try_from(left.as_millis().max(1)).unwrap_or(u32::MAX));
    session.set_tcp_stream(tcp);
    session
        .handshake()
        .map_err(|e| fail(format!("SSH handshake: {e}")))?;
    check_host_key(&session, t, &host, port, &target)?;
    authenticate(&session, t, &target)?;
    session.set_keepalive(false, KEEPALIVE.as_secs() as u32);
    session.set_timeout(0);
    session.set_blocking(false);
    let (wake_rx, wake_tx) = UnixStream::pair().map_err(|e| fail(format!("wake pipe: {e}")))?;
    wake_rx
        .set_nonblocking(true)
        .and_then(|_| wake_tx.set_nonblocking(true))
        .map_err(|e| fail(format!("wake pipe: {e}")))?;
    let wake = Arc::new(Waker(wake_tx));
    let (open_tx, open_rx) = mpsc::channel(8);
    let pump = Pump {
        session,
        socket: fd_holder,
        wake_rx,
        wake: Arc::clone(&wake),
        open: open_rx,
        channels: Vec::new(),
        closing: Vec::new(),
        spares: VecDeque::new(),
        next_id: 0,
        target: target.clone(),
    };
    std::thread::Builder::new()
        .name("drover-ssh".into())
        .spawn(move || pump.run())
        .map_err(|e| fail(format!("starting the session thread: {e}")))?;
    Ok(Session {
        target,
        open: Some(open_tx),
        wake,
        slots: Arc::new(tokio::sync::Semaphore::new(MAX_IN_USE)),
        slot_wait: SLOT_WAIT,
    })
}

fn fingerprint(session: &ssh2::Session) -> (Vec<u8>, String) {
    match session.host_key() {
        Some((key, kind)) => {
            let fp = session
                .host_key_hash(ssh2::HashType::Sha256)
                .map(|h| base64::engine::general_purpose::STANDARD_NO_PAD.encode(h))
                .unwrap_or_default();
            (key.to_vec(), format!("{kind:?} SHA256:{fp}"))
        }
        None => (Vec::new(), "no host key".to_string()),
    }
}

/// The base64 key blob of `ssh-ed25519 AAAA… comment`, `AAAA…`, or a known-hosts line.
fn vouched_blob(s: &str) -> Option<Vec<u8>> {
    let std = base64::engine::general_purpose::STANDARD;
    s.split_whitespace()
        .filter(|w| w.starts_with("AAAA"))
        .find_map(|w| std.decode(w).ok())
}

fn check_host_key(
    session: &ssh2::Session,
    t: &SshTarget,
    host: &str,
    port: u16,
    target: &str,
) -> Result<(), SshError> {
    let (key, found) = fingerprint(session);
    if key.is_empty() {
        return Err(SshError::HostKeyUnknown {
            target: target.to_string(),
            found,
            why: "the server showed no host key".into(),
        });
    }
    if let Some(v) = t.host_key.as_deref().filter(|v| !v.trim().is_empty()) {
        return match vouched_blob(v) {
            Some(blob) if blob == key => Ok(()),
            Some(_) => Err(SshError::HostKeyMismatch {
                target: target.to_string(),
                found,
                expected: "the host key the provider vouched for".into(),
            }),
            None => Err(SshError::HostKeyUnknown {
                target: target.to_string(),
                found,
                why: format!("the vouched host_key {v:?} holds no base64 key"),
            }),
        };
    }
    let file = match &t.known_hosts {
        Some(f) => f.clone(),
        None => match std::env::var_os("HOME") {
            Some(h) => Path::new(&h).join(".ssh/known_hosts"),
            None => {
                return Err(SshError::HostKeyUnknown {
                    target: target.to_string(),
                    found,
                    why: "no host_key, no known_hosts and no HOME".into(),
                })
            }
        },
    };
    let unknown = |why: String| SshError::HostKeyUnknown {
        target: target.to_string(),
        found: found.clone(),
        why,
    };
    let mut kh = session
        .known_hosts()
        .map_err(|e| unknown(format!("known-hosts: {e}")))?;
    kh.read_file(&file, ssh2::KnownHostFileKind::OpenSSH)
        .map_err(|e| unknown(format!("reading {}: {e}", file.display())))?;
    match kh.check_port(host, port, &key) {
        ssh2::CheckResult::Match => Ok(()),
        ssh2::CheckResult::Mismatch => Err(SshError::HostKeyMismatch {
            target: target.to_string(),
            found,
            expected: format!("the entry in {}", file.display()),
        }),
        ssh2::CheckResult::NotFound => Err(unknown(format!(
            "{} has no entry for {host}:{port}",
            file.display()
        ))),
        ssh2::CheckResult::Failure => Err(unknown(format!("checking {} failed", file.display()))),
    }
}

fn authenticate(session: &ssh2::Session, t: &SshTarget, target: &str) -> Result<(), SshError> {
    let err = |method: String, e: ssh2::Error| SshError::Auth {
        target: target.to_string(),
        user: t.username.clone(),
        method,
        message: e.message().to_string(),
    };
    if let Some(key) = t
        .key
        .as_ref()
        .map(|k| k.0.as_str())
        .filter(|k| !k.trim().is_empty())
    {
        session
            .userauth_pubkey_memory(&t.username, None, key, None)
            .map_err(|e| err("the provider's key".into(), e))?;
    } else if let Some(path) = &t.key_path {
        session
            .userauth_pubkey_file(&t.username, None, path, None)
            .map_err(|e| err(format!("key file {}", path.display()), e))?;
    } else {
        session
            .userauth_agent(&t.username)
            .map_err(|e| err("the SSH agent (no key given)".into(), e))?;
    }
    if session.authenticated() {
        Ok(())
    } else {
        Err(SshError::Auth {
            target: target.to_string(),
            user: t.username.clone(),
            method: "every method".into(),
            message: "not authenticated".into(),
        })
    }
}

/// The write end of a session's wake pipe.
#[derive(Debug)]
struct Waker(UnixStream);

impl Waker {
    fn wake(&self) {
        // A full pipe already holds a wake-up; any other error means the thread is gone.
        let _ = (&self.0).write(&[1]);
    }
}

impl Session {
    /// The same session with dials waiting at most `wait` for one of the [`MAX_IN_USE`]
    /// streams to end (default 60 s).
    pub fn with_slot_wait(mut self, wait: Duration) -> Self {
        self.slot_wait = wait;
        self
    }

    /// Opens a channel running [`DIAL_STDIO`]: a byte stream to the machine's Engine.
    pub async fn dial(&self) -> io::Result<SshStream> {
        let gone = || {
            io::Error::new(
                io::ErrorKind::BrokenPipe,
                format!("the SSH session to {} is closed", self.target),
            )
        };
        // Calls beyond the cap wait for a stream to end, but not forever: a job that keeps more
        // streams open at once (attached containers, log streams) than the server serves gets
        // a clear error instead of hanging.
        let slot =
            match tokio::time::timeout(self.slot_wait, Arc::clone(&self.slots).acquire_owned())
                .await
            {
                Ok(Ok(slot)) => slot,
                Ok(Err(_)) => return Err(gone()),
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "{MAX_IN_USE} Docker connections to {} over SSH stayed busy for {} s: \
                         OpenSSH serves at most 10 channels per connection (MaxSessions); \
                         use fewer services or log streams at once",
                            self.target,
                            self.slot_wait.as_secs()
                        ),
                    ))
                }
            };
        let (tx, rx) = oneshot::channel();
        let open = self.open.as_ref().ok_or_else(gone)?;
        open.send((tx, slot)).await.map_err(|_| gone())?;
        self.wake.wake();
        rx.await.map_err(|_| gone())?
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // The thread may be asleep until the next keepalive: let it see it is done now
        // (closing its spares and the connection).
        drop(self.open.take());
        self.wake.wake();
    }
}

/// One `dial-stdio` channel, as an async byte stream.
pub struct SshStream {
    to_remote: PollSender<Bytes>,
    from_remote: mpsc::Receiver<io::Result<Bytes>>,
    buf: Bytes,
    wake: Arc<Waker>,
}

impl fmt::Debug for SshStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SshStream").finish_non_exhaustive()
    }
}

impl AsyncRead for SshStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.buf.is_empty() {
            match self.from_remote.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                Poll::Ready(Some(Ok(b))) => {
                    self.buf = b;
                    // A slot is free: the thread may read this channel again.
                    self.wake.wake();
                }
            }
        }
        let n = self.buf.len().min(out.remaining());
        let chunk = self.buf.split_to(n);
        out.put_slice(&chunk);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for SshStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let closed = || io::Error::new(io::ErrorKind::BrokenPipe, "SSH channel closed");
        match self.to_remote.poll_reserve(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(_)) => return Poll::Ready(Err(closed())),
            Poll::Ready(Ok(())) => {}
        }
        let n = data.len().min(CHUNK);
        self.to_remote
            .send_item(Bytes::copy_from_slice(&data[..n]))
            .map_err(|_| closed())?;
        self.wake.wake();
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.to_remote.close();
        self.wake.wake();
        Poll::Ready(Ok(()))
    }
}

impl Drop for SshStream {
    fn drop(&mut self) {
        self.to_remote.close();
        self.from_remote.close();
        self.wake.wake();
    }
}

/// One channel on the session thread.
struct Chan {
    /// Tells spares apart.
    id: u64,
    ch: ssh2::Channel,
    to_remote: mpsc::Receiver<Bytes>,
    pending: Bytes,
    input_done: bool,
    eof_sent: bool,
    from_remote: Option<mpsc::Sender<io::Result<Bytes>>>,
    /// The start of what `dial-stdio` printed on stderr (bounded), for the log.
    stderr: Vec<u8>,
    /// The dial's permit, once a dial took this channel (a spare has none until then).
    slot: Slot,
}

struct Pump {
    session: ssh2::Session,
    socket: TcpStream,
    wake_rx: UnixStream,
    wake: Arc<Waker>,
    open: mpsc::Receiver<OpenRequest>,
    channels: Vec<Chan>,
    closing: Vec<(ssh2::Channel, Slot)>,
    /// Channels opened ahead of need, handed out by the next dials.
    spares: VecDeque<(u64, SshStream)>,
    next_id: u64,
    target: String,
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

fn ssh_would_block(e: &ssh2::Error) -> bool {
    matches!(e.code(), ssh2::ErrorCode::Session(-37))
}

impl Pump {
    fn run(mut self) {
        let mut next_keepalive = Instant::now() + KEEPALIVE;
        let mut idle_readable = false;
        let mut idle_runs = 0u32;
        loop {
            let mut drained = [0u8; 64];
            while matches!((&self.wake_rx).read(&mut drained), Ok(n) if n > 0) {}
            if let Err(e) = self.accept_opens() {
                self.fail_all(e);
                return;
            }
            if self.open.is_closed() && self.channels.is_empty() && self.open.is_empty() {
                // Every handle is gone: say goodbye and end.
                self.finish_closing();
                self.session.set_blocking(true);
                self.session.set_timeout(2000);
                let _ = self.session.disconnect(None, "drover is done", None);
                return;
            }
            // Move bytes until nothing moves; libssh2 may hold data read for a channel visited
            // earlier in the pass, which poll(2) would not see.
            loop {
                match self.pass() {
                    Ok(true) => {
                        idle_readable = false;
                        continue;
                    }
                    Ok(false) => break,
                    Err(e) => {
                        self.fail_all(e);
                        return;
                    }
                }
            }
            self.finish_closing();
            if Instant::now() >= next_keepalive {
                match self.session.keepalive_send() {
                    Ok(secs) => {
                        next_keepalive =
                            Instant::now() + Duration::from_secs(u64::from(secs.max(1)))
                    }
                    Err(e) if ssh_would_block(&e) => {
                        next_keepalive = Instant::now() + Duration::from_secs(1)
                    }
                    Err(e) => {
                        self.fail_all(io::Error::other(format!("keepalive: {e}")));
                        return;
                    }
                }
            }
            if idle_readable {
                // The socket was readable yet no channel's bytes moved: libssh2 took a control
                // packet (window adjust, close, …), or the peer is gone. Every pass reads each
                // channel's stderr, which drains the socket, so this does not repeat unless
                // something is wrong; a run of them backs off instead of spinning.
                if self.peer_closed() {
                    let e = self.lost("read", "the server closed the connection");
                    self.fail_all(e);
                    return;
                }
                idle_runs += 1;
                if idle_runs > IDLE_RUNS_BEFORE_BACKOFF {
                    std::thread::sleep(IDLE_BACKOFF);
                }
            } else {
                idle_runs = 0;
            }
            let mut wait = next_keepalive.saturating_duration_since(Instant::now());
            if self.has_buffered() {
                // libssh2 read packets for a channel while serving another (or while closing
                // or sending a keepalive): they are off the socket, so poll(2) would not wake
                // for them until the next keepalive. Look again almost at once.
                wait = Duration::from_millis(1);
            }
            match self.sleep(wait) {
                Ok(readable) => idle_readable = readable,
                Err(e) => {
                    self.fail_all(e);
                    return;
                }
            }
        }
    }

    fn lost(&self, what: &str, e: impl fmt::Display) -> io::Error {
        io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!("SSH connection to {} lost ({what}: {e})", self.target),
        )
    }

    /// A started spare channel whose `dial-stdio` is still there, if any; it keeps `slot`.
    fn take_spare(&mut self, slot: &mut Slot) -> Option<SshStream> {
        while let Some((id, stream)) = self.spares.pop_front() {
            let alive = self
                .channels
                .iter_mut()
                .find(|c| c.id == id && c.from_remote.is_some() && !c.ch.eof());
            if let Some(c) = alive {
                c.slot = slot.take();
                return Some(stream);
            }
            // Dropping the stream lets the next pass close its channel.
        }
        None
    }

    fn accept_opens(&mut self) -> io::Result<()> {
        if self.open.is_closed() {
            // Every handle is gone: the spares will never be asked for.
            self.spares.clear();
        }
        let mut served = false;
        while let Ok((reply, permit)) = self.open.try_recv() {
            if reply.is_closed() {
                continue;
            }
            served = true;
            let mut slot = Some(permit);
            if let Some(stream) = self.take_spare(&mut slot) {
                let _ = reply.send(Ok(stream));
                continue;
            }
            match self.open_channel() {
                Ok((mut chan, stream)) => {
                    chan.slot = slot;
                    if let Err(Ok(_)) = reply.send(Ok(stream)) {
                        // The caller gave up; the stream's drop closed the queues.
                    }
                    self.channels.push(chan);
                }
                Err(e) => {
                    let fatal = self.session_dead();
                    let msg = e.to_string();
                    let _ = reply.send(Err(e));
                    if fatal {
                        return Err(self.lost("opening a channel", msg));
                    }
                }
            }
        }
        // Keep channels started ahead of need: `dial-stdio` (a docker CLI process on the
        // machine) takes longer to start than a request takes to send.
        while served && !self.open.is_closed() && self.spares.len() < SPARES {
            match self.open_channel() {
                Ok((chan, stream)) => {
                    self.spares.push_back((chan.id, stream));
                    self.channels.push(chan);
                }
                Err(e) if self.session_dead() => {
                    return Err(self.lost("opening a channel", e));
                }
                Err(e) => {
                    tracing::debug!(target = %self.target, error = %e, "no spare SSH channel");
                    break;
                }
            }
        }
        Ok(())
    }

    /// Whether libssh2's last error was about the connection itself, not one channel.
    fn session_broken(&self) -> bool {
        const SOCKET_OR_TRANSPORT: [i32; 12] =
            [-1, -2, -3, -4, -7, -12, -13, -14, -30, -43, -44, -45];
        match ssh2::Error::last_session_error(&self.session).map(|e| e.code()) {
            Some(ssh2::ErrorCode::Session(c)) => SOCKET_OR_TRANSPORT.contains(&c),
            _ => false,
        }
    }

    /// Acknowledges what arrives at once instead of after Linux's delayed-ACK timer: sshd does
    /// not disable Nagle's algorithm for a session without a terminal, so a small response
    /// held back until our ACK would otherwise cost up to 40 ms per request. The kernel clears
    /// the flag again by itself, hence after every wake-up.
    fn quick_ack(&self) {
        let one: libc::c_int = 1;
        // SAFETY: a valid socket and an int option.
        unsafe {
            libc::setsockopt(
                self.socket.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_QUICKACK,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }

    /// Whether the peer closed the TCP connection (readable, and a peek finds its end).
    fn peer_closed(&self) -> bool {
        let mut b = [0u8; 1];
        // SAFETY: a valid socket and a one-byte buffer.
        let n = unsafe {
            libc::recv(
                self.socket.as_raw_fd(),
                b.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        n == 0
    }

    fn session_dead(&self) -> bool {
        // A socket that reports an error or hang-up ends the session.
        let mut p = libc::pollfd {
            fd: self.socket.as_raw_fd(),
            events: 0,
            revents: 0,
        };
        // SAFETY: one valid pollfd, zero timeout.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        r > 0 && (p.revents & (libc::POLLERR | libc::POLLHUP)) != 0
    }

    /// Opens a channel and starts `dial-stdio`, blocking (bounded) meanwhile.
    fn open_channel(&mut self) -> io::Result<(Chan, SshStream)> {
        self.session.set_blocking(true);
        self.session.set_timeout(OPEN_TIMEOUT.as_millis() as u32);
        let opened = self.session.channel_session().and_then(|mut ch| {
            ch.exec(DIAL_STDIO)?;
            Ok(ch)
        });
        self.session.set_timeout(0);
        self.session.set_blocking(false);
        let ch = opened.map_err(|e| {
            io::Error::other(format!(
                "opening an SSH channel to {} for `{DIAL_STDIO}`: {e}",
                self.target
            ))
        })?;
        self.next_id += 1;
        let (to_tx, to_rx) = mpsc::channel(QUEUE_CHUNKS);
        let (from_tx, from_rx) = mpsc::channel(QUEUE_CHUNKS);
        Ok((
            Chan {
                id: self.next_id,
                ch,
                to_remote: to_rx,
                pending: Bytes::new(),
                input_done: false,
                eof_sent: false,
                from_remote: Some(from_tx),
                stderr: Vec::new(),
                slot: None,
            },
            SshStream {
                to_remote: PollSender::new(to_tx),
                from_remote: from_rx,
                buf: Bytes::new(),
                wake: Arc::clone(&self.wake),
            },
        ))
    }

    /// One pass over every channel; whether any byte moved.
    fn pass(&mut self) -> io::Result<bool> {
        let mut moved = false;
        let mut i = 0;
        while i < self.channels.len() {
            let (m, done) = match self.step(i) {
                Ok(r) => r,
                Err(e) if self.session_broken() => return Err(e),
                Err(e) => {
                    // This channel alone failed (its `dial-stdio` went away): tell its reader.
                    if let Some(tx) = self.channels[i].from_remote.take() {
                        let _ = tx.try_send(Err(e));
                    }
                    (true, true)
                }
            };
            moved |= m;
            if done {
                let c = self.channels.swap_remove(i);
                if !c.stderr.is_empty() {
                    tracing::debug!(target = %self.target, stderr = %String::from_utf8_lossy(&c.stderr), "dial-stdio said");
                }
                self.closing.push((c.ch, c.slot));
            } else {
                i += 1;
            }
        }
        Ok(moved)
    }

    /// Moves what can move on channel `i`: (moved, finished).
    fn step(&mut self, i: usize) -> io::Result<(bool, bool)> {
        let target = self.target.clone();
        let lost = |what: &str, e: &dyn fmt::Display| {
            io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("SSH connection to {target} lost ({what}: {e})"),
            )
        };
        let c = &mut self.channels[i];
        let mut moved = false;
        // drover → machine.
        loop {
            if c.pending.is_empty() && !c.input_done {
                match c.to_remote.try_recv() {
                    Ok(b) => c.pending = b,
                    Err(mpsc::error::TryRecvError::Empty) => {}
                    Err(mpsc::error::TryRecvError::Disconnected) => c.input_done = true,
                }
            }
            if c.pending.is_empty() {
                break;
            }
            match c.ch.write(&c.pending) {
                Ok(0) => break,
                Ok(n) => {
                    let _ = c.pending.split_to(n);
                    moved = true;
                }
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(lost("write", &e)),
            }
        }
        if c.input_done && c.pending.is_empty() && !c.eof_sent {
            match c.ch.send_eof() {
                Ok(()) => {
                    c.eof_sent = true;
                    moved = true;
                }
                Err(e) if ssh_would_block(&e) => {}
                Err(e) => return Err(lost("eof", &e)),
            }
        }
        // machine → drover, only while the queue has room.
        loop {
            let Some(tx) = c.from_remote.clone() else {
                break;
            };
            let permit = match tx.try_reserve() {
                Ok(p) => p,
                Err(mpsc::error::TrySendError::Full(())) => break,
                Err(mpsc::error::TrySendError::Closed(())) => {
                    c.from_remote = None;
                    break;
                }
            };
            let mut buf = vec![0u8; CHUNK];
            match c.ch.read(&mut buf) {
                Ok(0) => {
                    drop(permit);
                    if c.ch.eof() {
                        c.from_remote = None;
                        moved = true;
                    }
                    break;
                }
                Ok(n) => {
                    buf.truncate(n);
                    permit.send(Ok(Bytes::from(buf)));
                    moved = true;
                }
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(lost("read", &e)),
            }
        }
        // stderr: keep the first 4 KiB, drop the rest so the window never stalls.
        let mut err_buf = [0u8; 4096];
        loop {
            match c.ch.stderr().read(&mut err_buf) {
                Ok(0) => break,
                Ok(n) => {
                    let room = 4096usize.saturating_sub(c.stderr.len());
                    c.stderr.extend_from_slice(&err_buf[..n.min(room)]);
                    moved = true;
                }
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(lost("stderr", &e)),
            }
        }
        // Finished when drover dropped both ends, or the machine closed and drover read all.
        let drover_gone = c.from_remote.is_none() && (c.input_done || c.to_remote.is_closed());
        Ok((moved, drover_gone))
    }

    /// Whether a channel whose reader has room has data or its end already queued inside
    /// libssh2 (taken off the socket while another channel was served).
    fn has_buffered(&self) -> bool {
        self.channels.iter().any(|c| {
            c.from_remote.as_ref().is_some_and(|tx| tx.capacity() > 0)
                && (c.ch.read_window().available > 0 || c.ch.eof())
        })
    }

    fn finish_closing(&mut self) {
        self.closing
            .retain_mut(|(ch, _)| matches!(ch.close(), Err(e) if ssh_would_block(&e)));
    }

    /// Waits for the socket or a wake-up; whether the socket was readable.
    fn sleep(&self, wait: Duration) -> io::Result<bool> {
        let dirs = self.session.block_directions();
        // Without channels nothing reads the socket: watching it for input would spin on any
        // packet the server sends meanwhile (the next dial reads it).
        let mut sock_events = if self.channels.is_empty() {
            0
        } else {
            libc::POLLIN
        };
        if matches!(
            dirs,
            ssh2::BlockDirections::Outbound | ssh2::BlockDirections::Both
        ) {
            sock_events |= libc::POLLOUT;
        }
        let mut fds = [
            libc::pollfd {
                fd: self.socket.as_raw_fd(),
                events: sock_events,
                revents: 0,
            },
            libc::pollfd {
                fd: self.wake_rx.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = i32::try_from(wait.as_millis().max(1)).unwrap_or(i32::MAX);
        // SAFETY: two valid pollfds.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        self.quick_ack();
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(self.lost("poll", e));
            }
            return Ok(false);
        }
        Ok(r > 0 && fds[0].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
    }

    fn fail_all(&mut self, e: io::Error) {
        tracing::warn!(target = %self.target, error = %e, "SSH session ended");
        for c in self.channels.drain(..) {
            if let Some(tx) = c.from_remote {
                let _ = tx.try_send(Err(io::Error::new(e.kind(), e.to_string())));
            }
        }
        self.open.close();
        while let Ok((reply, _)) = self.open.try_recv() {
            let _ = reply.send(Err(io::Error::new(e.kind(), e.to_string())));
        }
    }
}

use super::connect::BollardBody;

#[derive(Clone)]
struct Connector(Arc<Session>);

impl tower_service::Service<http::Uri> for Connector {
    type Response = hyper_util::rt::TokioIo<SshStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn std::future::Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: http::Uri) -> Self::Future {
        let s = Arc::clone(&self.0);
        Box::pin(async move { s.dial().await.map(hyper_util::rt::TokioIo::new) })
    }
}

impl hyper_util::client::legacy::connect::Connection for SshStream {
    fn connected(&self) -> hyper_util::client::legacy::connect::Connected {
        hyper_util::client::legacy::connect::Connected::new()
    }
}

/// A bollard client speaking to the machine's Engine through `session`. Connections are
/// pooled (a few idle ones for a short while) since each is a process on the machine.
pub fn docker_client(
    session: Session,
    timeout_secs: u64,
) -> Result<bollard::Docker, bollard::errors::Error> {
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let client: Client<_, BollardBody> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(POOL_IDLE)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .build(Connector(Arc::new(session)));
    super::connect::custom_transport(client, "http://docker-over-ssh", timeout_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_with_default_port() {
        let t = |a: &str| {
            SshTarget {
                address: a.into(),
                ..Default::default()
            }
            .host_port()
            .ok()
        };
        assert_eq!(t("10.0.0.5:2222"), Some(("10.0.0.5".into(), 2222)));
        assert_eq!(t("m1"), Some(("m1".into(), 22)));
        assert_eq!(t("[::1]:22"), Some(("::1".into(), 22)));
        assert_eq!(t("[::1]"), Some(("::1".into(), 22)));
        assert_eq!(t(""), None);
        assert_eq!(t(":22"), None);
        assert_eq!(t("h:port"), None);
    }

    #[test]
    fn vouched_keys_are_read_in_every_spelling() {
        let blob = base64::engine::general_purpose::STANDARD.encode(b"\0\0\0\x0bssh-ed25519xyz");
        let want = Some(b"\0\0\0\x0bssh-ed25519xyz".to_vec());
        assert_eq!(vouched_blob(&format!("ssh-ed25519 {blob} root@m")), want);
        assert_eq!(vouched_blob(&blob), want);
        assert_eq!(vouched_blob(&format!("[m]:22 ssh-ed25519 {blob}")), want);
        assert_eq!(vouched_blob("ssh-ed25519"), None);
    }

    #[test]
    fn the_key_is_not_in_debug_output() {
        let t = SshTarget {
            key: Some(drover_protocol::PrivateKey(
                "-----BEGIN OPENSSH PRIVATE KEY-----secret".into(),
            )),
            ..Default::default()
        };
        let d = format!("{t:?}");
        assert!(!d.contains("secret") && d.contains("redacted"), "{d}");
    }
}
