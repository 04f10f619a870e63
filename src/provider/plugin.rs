//! Spawning a provider plugin executable and speaking the protocol with it over stdio.
//!
//! [`Plugin`] owns one child process at a time: it starts it on first use, performs the
//! handshake (checking the protocol version), matches responses to requests by id, relays the
//! plugin's stderr lines to `tracing`, and enforces a deadline and a cancellation token on
//! every call. A plugin that cannot `cancel` is killed when a call is abandoned, and a new one
//! is started on the next call. This module knows nothing about scaling; the manager drives it
//! (through [`super::Provider`]) and the conformance suite probes it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::sync::{mpsc, oneshot, Mutex, Semaphore};
use tokio_util::sync::CancellationToken;

use super::error::ProviderError;
use super::protocol::{
    Cancel, HandshakeParams, Operation, PluginInfo, Request, Response, CAP_CANCEL, CAP_CONCURRENT,
    PROTOCOL_VERSION,
};
use crate::bounded::{read_line, skip_line, Line, MAX_LINE};

/// How long a plugin gets to answer the handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Extra time drover waits beyond the `timeout_ms` it sends, so the plugin can report its own
/// timeout (after killing what it started) before drover gives up on it.
pub const GRACE: Duration = Duration::from_secs(5);

/// What to run: the plugin executable, its arguments, and the handshake settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginCommand {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments (the part after `--` in `drover provider test PATH -- ARGS`).
    pub args: Vec<String>,
    /// Extra environment variables for the plugin (the rest of drover's is inherited).
    pub env: Vec<(String, String)>,
    /// The machine-name prefix sent at the handshake; the plugin refuses to remove others.
    pub name_prefix: Option<String>,
}

impl PluginCommand {
    /// A command running `program` with `args` and no name prefix.
    pub fn new(program: impl Into<PathBuf>, args: Vec<String>) -> Self {
        PluginCommand {
            program: program.into(),
            args,
            env: Vec::new(),
            name_prefix: None,
        }
    }
}

type Pending = Arc<StdMutex<HashMap<u64, oneshot::Sender<Response>>>>;

/// One running plugin process.
struct Running {
    info: PluginInfo,
    writer: mpsc::UnboundedSender<String>,
    pending: Pending,
    serial: Option<Arc<Semaphore>>,
    kill: CancellationToken,
    dead: CancellationToken,
    /// Why the reader stopped the plugin, when it broke the protocol (a line over the limit).
    fault: Fault,
}

type Fault = Arc<StdMutex<Option<String>>>;

/// A provider plugin, started on demand and restarted after it dies or is killed.
pub struct Plugin {
    cmd: PluginCommand,
    running: Mutex<Option<Arc<Running>>>,
    next_id: AtomicU64,
    stray_lines: Arc<AtomicU64>,
    spawns: AtomicU64,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin").field("cmd", &self.cmd).finish()
    }
}

fn lock<T>(m: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Plugin {
    /// A plugin that will be started by the first call.
    pub fn new(cmd: PluginCommand) -> Self {
        Plugin {
            cmd,
            running: Mutex::new(None),
            next_id: AtomicU64::new(1),
            stray_lines: Arc::new(AtomicU64::new(0)),
            spawns: AtomicU64::new(0),
        }
    }

    /// Starts the plugin (if it is not running) and returns its handshake answer.
    pub async fn start(&self) -> Result<PluginInfo, ProviderError> {
        Ok(self.ensure_running().await?.info.clone())
    }

    /// What this plugin runs.
    pub fn command(&self) -> &PluginCommand {
        &self.cmd
    }

    /// How many stdout lines were not protocol JSON (a conformance failure).
    pub fn stray_lines(&self) -> u64 {
        self.stray_lines.load(Ordering::Relaxed)
    }

    /// How many times a plugin process was started.
    pub fn spawn_count(&self) -> u64 {
        self.spawns.load(Ordering::Relaxed)
    }

    /// Closes the plugin's stdin and waits up to `wait` for it to exit, then kills it.
    /// Returns whether it exited by itself (or was not running).
    pub async fn shutdown(&self, wait: Duration) -> bool {
        let taken = self.running.lock().await.take();
        let Some(running) = taken else {
            return true;
        };
        let dead = running.dead.clone();
        let kill = running.kill.clone();
        drop(running);
        if tokio::time::timeout(wait, dead.cancelled()).await.is_ok() {
            return true;
        }
        kill.cancel();
        dead.cancelled().await;
        false
    }

    async fn ensure_running(&self) -> Result<Arc<Running>, ProviderError> {
        let mut slot = self.running.lock().await;
        if let Some(r) = slot.as_ref() {
            if !r.dead.is_cancelled() {
                return Ok(r.clone());
            }
        }
        *slot = None;
        let r = Arc::new(self.spawn().await?);
        *slot = Some(r.clone());
        Ok(r)
    }

    async fn spawn(&self) -> Result<Running, ProviderError> {
        let program = self.cmd.program.clone();
        let mut command = Command::new(&program);
        command
            .args(&self.cmd.args)
            .envs(self.cmd.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| ProviderError::Spawn {
            program: program.clone(),
            message: e.to_string(),
        })?;
        self.spawns.fetch_add(1, Ordering::Relaxed);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(ProviderError::Spawn {
                program,
                message: "stdio pipes missing".into(),
            });
        };
        let label = program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| program.display().to_string());

        let pending: Pending = Arc::new(StdMutex::new(HashMap::new()));
        let fault: Fault = Arc::new(StdMutex::new(None));
        let kill = CancellationToken::new();
        let dead = CancellationToken::new();

        // Writer: one line per message, in order.
        let (writer, mut rx) = mpsc::unbounded_channel::<String>();
        let mut stdin = stdin;
        tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                if stdin.write_all(line.as_bytes()).await.is_err()
                    || stdin.write_all(b"\n").await.is_err()
                    || stdin.flush().await.is_err()
                {
                    break;
                }
            }
        });

        // Reader: responses to their waiting callers. A line over the limit is no answer:
        // the plugin is stopped and its waiting callers get the reason.
        {
            let pending = pending.clone();
            let dead = dead.clone();
            let kill = kill.clone();
            let fault = fault.clone();
            let stray = self.stray_lines.clone();
            let label = label.clone();
            tokio::spawn(async move {
                let mut stdout = BufReader::new(stdout);
                while let Ok(Some(line)) = read_line(&mut stdout, MAX_LINE).await {
                    let line = match line {
                        Line::Complete(line) => line,
                        Line::Cut(start) => {
                            let reason = format!(
                                "provider plugin {label} wrote a stdout line longer than {MAX_LINE} bytes (the limit for one protocol message; it starts {:?}); drover stopped the plugin",
                                start.chars().take(80).collect::<String>()
                            );
                            tracing::error!(plugin = %label, "{reason}");
                            *lock(&fault) = Some(reason);
                            kill.cancel();
                            break;
                        }
                    };
                    if line.trim().is_empty() {
                        continue;
                    }
                    match serde_json::from_str::<Response>(&line) {
                        Ok(resp) => {
                            let waiter = lock(&pending).remove(&resp.id);
                            match waiter {
                                Some(tx) => {
                                    let _ = tx.send(resp);
                                }
                                None => tracing::debug!(
                                    plugin = %label, id = resp.id,
                                    "response to an abandoned or unknown request"
                                ),
                            }
                        }
                        Err(e) => {
                            stray.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(plugin = %label, error = %e, line = %line,
                                "provider plugin wrote a non-protocol line on stdout");
                        }
                    }
                }
                dead.cancel();
                lock(&pending).clear();
            });
        }

        // Stderr: the plugin's log lines, each cut at the limit.
        {
            let label = label.clone();
            tokio::spawn(async move {
                let mut stderr = BufReader::new(stderr);
                while let Ok(Some(line)) = read_line(&mut stderr, MAX_LINE).await {
                    match line {
                        Line::Complete(line) => relay_stderr(&label, &line),
                        Line::Cut(start) => {
                            tracing::info!(plugin = %label, "{start}");
                            let dropped = skip_line(&mut stderr).await.unwrap_or(0);
                            tracing::warn!(plugin = %label,
                                "provider plugin wrote a stderr line longer than {MAX_LINE} bytes; {dropped} bytes after the limit were cut");
                        }
                    }
                }
            });
        }

        // Reaper: wait for exit, or kill on request.
        {
            let kill = kill.clone();
            let dead = dead.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = child.wait() => {}
                    _ = kill.cancelled() => {
                        let _ = child.kill().await;
                    }
                }
                dead.cancel();
            });
        }

        let mut running = Running {
            info: PluginInfo {
                protocol_version: 0,
                name: label,
                version: String::new(),
                capabilities: Vec::new(),
            },
            writer,
            pending,
            serial: None,
            kill,
            dead,
            fault,
        };
        let hs = Operation::Handshake(HandshakeParams {
            protocol_version: PROTOCOL_VERSION,
            drover_version: env!("CARGO_PKG_VERSION").to_string(),
            name_prefix: self.cmd.name_prefix.clone(),
        });
        let outcome = self
            .exchange(&running, hs, HANDSHAKE_TIMEOUT, &CancellationToken::new())
            .await;
        let result = match outcome.and_then(|r| into_result("handshake", None, r)) {
            Ok(v) => v,
            Err(e) => {
                running.kill.cancel();
                return Err(e);
            }
        };
        let info: PluginInfo = match serde_json::from_value(result) {
            Ok(i) => i,
            Err(e) => {
                running.kill.cancel();
                return Err(ProviderError::Protocol {
                    op: "handshake",
                    message: format!("bad handshake result: {e}"),
                });
            }
        };
        if info.protocol_version != PROTOCOL_VERSION {
            running.kill.cancel();
            return Err(ProviderError::IncompatibleVersion {
                plugin: info.name,
                theirs: info.protocol_version,
                ours: PROTOCOL_VERSION,
            });
        }
        if !info.has(CAP_CONCURRENT) {
            running.serial = Some(Arc::new(Semaphore::new(1)));
        }
        running.info = info;
        Ok(running)
    }

    /// Sends one request and waits for its response, the deadline (`timeout` plus
    /// [`GRACE`]) or the cancellation, whichever comes first.
    async fn exchange(
        &self,
        running: &Running,
        op: Operation,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<Response, ProviderError> {
        let name = op.name();
        let machine = op.machine().map(str::to_string);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let req = Request {
            id,
            timeout_ms: Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
            op,
        };
        let line = serde_json::to_string(&req).map_err(|e| ProviderError::Protocol {
            op: name,
            message: e.to_string(),
        })?;
        self.send_line(running, id, line, name, machine, timeout, cancel)
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn send_line(
        &self,
        running: &Running,
        id: u64,
        line: String,
        name: &'static str,
        machine: Option<String>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<Response, ProviderError> {
        let _permit = match &running.serial {
            Some(s) => {
                Some(
                    s.clone()
                        .acquire_owned()
                        .await
                        .map_err(|_| ProviderError::Exited {
                            op: name,
                            machine: machine.clone(),
                        })?,
                )
            }
            None => None,
        };
        let (tx, rx) = oneshot::channel();
        lock(&running.pending).insert(id, tx);
        if running.dead.is_cancelled() || running.writer.send(line).is_err() {
            lock(&running.pending).remove(&id);
            return Err(ProviderError::Exited { op: name, machine });
        }
        let abandon = |running: &Running| {
            lock(&running.pending).remove(&id);
            if running.info.has(CAP_CANCEL) {
                if let Ok(l) = serde_json::to_string(&Cancel::new(id)) {
                    let _ = running.writer.send(l);
                }
            } else {
                // Mark it dead now, so the next call starts a fresh process instead of
                // racing the reaper.
                running.dead.cancel();
                running.kill.cancel();
            }
        };
        tokio::select! {
            r = rx => r.map_err(|_| match lock(&running.fault).clone() {
                Some(message) => ProviderError::Protocol { op: name, message },
                None => ProviderError::Exited { op: name, machine },
            }),
            _ = tokio::time::sleep(deadline(timeout)) => {
                abandon(running);
                Err(ProviderError::Timeout { op: name, machine, after: timeout })
            }
            _ = cancel.cancelled() => {
                abandon(running);
                Err(ProviderError::Cancelled { op: name, machine })
            }
        }
    }

    /// Performs `op` and returns the raw `result` object of a successful answer; a plugin
    /// error becomes [`ProviderError::Plugin`].
    pub async fn call(
        &self,
        op: Operation,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<serde_json::Value, ProviderError> {
        let name = op.name();
        let machine = op.machine().map(str::to_string);
        let resp = self.call_raw_op(op, timeout, cancel).await?;
        into_result(name, machine, resp)
    }

    async fn call_raw_op(
        &self,
        op: Operation,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<Response, ProviderError> {
        let running = self.ensure_running().await?;
        self.exchange(&running, op, timeout, cancel).await
    }

    /// Sends an arbitrary JSON object (its `id` is set here) and returns the raw response.
    /// For the conformance suite: unknown operations, unknown fields.
    pub async fn call_json(
        &self,
        mut object: serde_json::Map<String, serde_json::Value>,
        timeout: Duration,
    ) -> Result<Response, ProviderError> {
        let running = self.ensure_running().await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        object.insert("id".into(), id.into());
        let line = serde_json::Value::Object(object).to_string();
        self.send_line(
            &running,
            id,
            line,
            "raw",
            None,
            timeout,
            &CancellationToken::new(),
        )
        .await
    }
}

fn into_result(
    op: &'static str,
    machine: Option<String>,
    resp: Response,
) -> Result<serde_json::Value, ProviderError> {
    if resp.ok {
        return Ok(resp
            .result
            .unwrap_or_else(|| serde_json::Value::Object(Default::default())));
    }
    match resp.error {
        Some(e) => Err(ProviderError::Plugin {
            op,
            machine,
            kind: e.kind,
            message: e.message,
        }),
        None => Err(ProviderError::Protocol {
            op,
            message: "response has ok=false but no error".into(),
        }),
    }
}

/// How long to wait for the answer to a request given `timeout`: the timeout plus [`GRACE`],
/// saturating, so a huge timeout from a library caller (`Duration::MAX`) waits "forever"
/// (tokio caps the sleep) instead of overflowing.
fn deadline(timeout: Duration) -> Duration {
    timeout.saturating_add(GRACE)
}

/// One stderr line of a provider plugin, as upstream relays docker-machine's output
/// (spec upstream-logs.md §2.2): the message with its `driver`, `name` and `operation`
/// fields, at the plugin line's own level. A line in `tracing`'s default shape
/// (`<time>  INFO target: message k=v…`, which legacy-driver-shim writes) is taken apart;
/// any other line is relayed whole at info. `plugin` names the plugin either way.
fn relay_stderr(label: &str, line: &str) {
    let r = PluginLine::parse(line);
    let (driver, name, operation) = (r.driver, r.name, r.operation);
    match r.level {
        "ERROR" => tracing::error!(driver, name, operation, plugin = %label, "{}", r.msg),
        "WARN" => tracing::warn!(driver, name, operation, plugin = %label, "{}", r.msg),
        "DEBUG" | "TRACE" => tracing::debug!(driver, name, operation, plugin = %label, "{}", r.msg),
        _ => tracing::info!(driver, name, operation, plugin = %label, "{}", r.msg),
    }
}

/// A plugin's stderr line taken apart (see [`relay_stderr`]).
#[derive(Debug, PartialEq)]
struct PluginLine<'a> {
    level: &'a str,
    msg: &'a str,
    driver: Option<&'a str>,
    name: Option<&'a str>,
    operation: Option<&'a str>,
}

impl<'a> PluginLine<'a> {
    fn parse(line: &'a str) -> PluginLine<'a> {
        let whole = PluginLine {
            level: "INFO",
            msg: line,
            driver: None,
            name: None,
            operation: None,
        };
        let Some((stamp, rest)) = line.split_once(' ') else {
            return whole;
        };
        if !(stamp.starts_with(|c: char| c.is_ascii_digit()) && stamp.contains('T')) {
            return whole;
        }
        let rest = rest.trim_start();
        let Some((level, rest)) = rest.split_once(' ') else {
            return whole;
        };
        if !matches!(level, "TRACE" | "DEBUG" | "INFO" | "WARN" | "ERROR") {
            return whole;
        }
        let Some((target, mut msg)) = rest.trim_start().split_once(": ") else {
            return whole;
        };
        if target.contains(' ') {
            return whole;
        }
        let mut out = PluginLine {
            level,
            msg,
            driver: None,
            name: None,
            operation: None,
        };
        // Trailing `key=value` fields, last first.
        while let Some((head, last)) = msg.trim_end().rsplit_once(' ') {
            let Some((k, v)) = last.split_once('=') else {
                break;
            };
            let v = v.trim_matches('"');
            match k {
                "driver" => out.driver = Some(v),
                "name" => out.name = Some(v),
                "operation" => out.operation = Some(v),
                "stream" => {}
                _ => break,
            }
            msg = head;
        }
        out.msg = msg.trim_end();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_lines_are_taken_apart_as_upstream_relays_docker_machine() {
        let l = PluginLine::parse("2026-11-28T03:29:51.373144Z  INFO legacy_driver_shim::exec: Running pre-create checks... operation=create name=runner-a-1 stream=\"stdout\"");
        assert_eq!(
            l,
            PluginLine {
                level: "INFO",
                msg: "Running pre-create checks...",
                driver: None,
                name: Some("runner-a-1"),
                operation: Some("create"),
            }
        );
        let l = PluginLine::parse("2026-11-28T03:29:54.405390Z ERROR legacy_driver_shim::exec: hosts without a driver cannot be stopped operation=stop name=m stream=\"stderr\"");
        assert_eq!(
            (l.level, l.msg, l.operation),
            (
                "ERROR",
                "hosts without a driver cannot be stopped",
                Some("stop")
            )
        );
        let l = PluginLine::parse("plain text: a=b");
        assert_eq!((l.level, l.msg, l.name), ("INFO", "plain text: a=b", None));
    }

    #[test]
    fn the_deadline_is_the_timeout_plus_grace() {
        assert_eq!(deadline(Duration::from_secs(10)), Duration::from_secs(15));
    }

    #[test]
    fn a_huge_timeout_saturates_instead_of_overflowing() {
        assert_eq!(deadline(Duration::MAX), Duration::MAX);
        assert_eq!(deadline(Duration::MAX - GRACE / 2), Duration::MAX);
    }
}
