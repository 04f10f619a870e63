//! Running one docker-machine command: argv only (never a shell), a deadline after which the
//! child gets SIGKILL, cancellation, and every output line logged with its operation and
//! machine name. Each command runs in its own process group, and a deadline or cancellation
//! kills the whole group: docker-machine runs its driver plugins as child processes, which
//! would otherwise outlive it.
//!
//! stdin is not connected (reads see EOF, as upstream), the environment is inherited, and
//! stdout/stderr are read line by line while the command runs so long creates stream their
//! progress into the log. Deciding what an exit status means is the caller's job (`ops.rs`).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use drover_protocol::bounded::{read_line, skip_line, Line, MAX_LINE};
use tokio::io::{AsyncRead, BufReader};
use tokio::process::Command;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Captured output is cut at this many bytes per stream (the log still sees every line, each
/// cut at [`MAX_LINE`] bytes).
const CAPTURE_LIMIT: usize = 1 << 20;

/// How loudly a stream's lines are logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Debug level (output upstream discards).
    Debug,
    /// Info level (create's and rm's stdout).
    Info,
    /// Error level (stderr of commands whose stderr upstream logs).
    Error,
}

/// The log levels for a command's two streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Levels {
    /// For stdout lines.
    pub stdout: Level,
    /// For stderr lines.
    pub stderr: Level,
}

/// Upstream's levels for create/stop/rm: stdout info, stderr error.
pub const LOUD: Levels = Levels {
    stdout: Level::Info,
    stderr: Level::Error,
};
/// For commands whose stdout is a value (url, inspect -f): stdout debug, stderr error.
pub const VALUE: Levels = Levels {
    stdout: Level::Debug,
    stderr: Level::Error,
};
/// For `config`, whose output upstream discards entirely.
pub const QUIET: Levels = Levels {
    stdout: Level::Debug,
    stderr: Level::Debug,
};

/// A finished command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// The exit code; `None` when killed by a signal.
    pub code: Option<i32>,
    /// stdout.
    pub stdout: String,
    /// stderr.
    pub stderr: String,
    /// What was cut from the output: one message per line longer than
    /// [`MAX_LINE`], naming the command, the stream and the limit.
    pub cut: Vec<String>,
}

impl Output {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// The last non-empty stderr lines, for an error message.
    pub fn error_text(&self) -> String {
        let text = self.stderr.trim();
        if text.is_empty() {
            match self.code {
                Some(c) => format!("docker-machine exited with status {c}"),
                None => "docker-machine was killed by a signal".to_string(),
            }
        } else {
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .collect::<Vec<_>>()
                .join(" / ")
        }
    }
}

/// Why a command did not finish by itself.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The executable could not be started.
    #[error("cannot run {}: {source}; set --docker-machine to the docker-machine executable", .program.display())]
    Spawn {
        /// The executable.
        program: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The deadline passed; the child was killed with SIGKILL.
    #[error("docker-machine {op} {name} did not finish within {}s and was killed", .after.as_secs())]
    Timeout {
        /// Operation.
        op: String,
        /// Machine.
        name: String,
        /// The deadline.
        after: Duration,
    },
    /// Cancelled; the child was killed with SIGKILL.
    #[error("docker-machine {op} {name} was cancelled and killed")]
    Cancelled {
        /// Operation.
        op: String,
        /// Machine.
        name: String,
    },
}

/// Runs docker-machine.
#[derive(Debug, Clone)]
pub struct Exec {
    program: PathBuf,
    env: Vec<(String, String)>,
}

impl Exec {
    /// Runs `program` with `env` added to the inherited environment.
    pub fn new(program: impl Into<PathBuf>, env: Vec<(String, String)>) -> Self {
        Exec {
            program: program.into(),
            env,
        }
    }

    /// Runs `program argv…` for operation `op` on machine `name`.
    pub async fn run(
        &self,
        op: &str,
        name: &str,
        argv: &[String],
        timeout: Duration,
        cancel: &CancellationToken,
        levels: Levels,
    ) -> Result<Output, ExecError> {
        tracing::debug!(operation = %op, name = %name, argv = ?argv, "running docker-machine");
        let mut child = Command::new(&self.program)
            .process_group(0)
            .args(argv)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| ExecError::Spawn {
                program: self.program.clone(),
                source,
            })?;
        // Kills the group if this future is dropped before the command was reaped (the pgid
        // stays reserved until then, so it cannot name another group).
        let mut group = GroupGuard(child.id());
        let out = child
            .stdout
            .take()
            .map(|s| reader(s, op, name, "stdout", levels.stdout));
        let err = child
            .stderr
            .take()
            .map(|s| reader(s, op, name, "stderr", levels.stderr));

        let status = tokio::select! {
            s = child.wait() => s.ok(),
            _ = tokio::time::sleep(timeout) => {
                group.kill();
                let _ = child.start_kill();
                let _ = child.wait().await;
                tracing::error!(operation = %op, name = %name, "docker-machine killed after {}s", timeout.as_secs());
                finish(out).await;
                finish(err).await;
                return Err(ExecError::Timeout { op: op.into(), name: name.into(), after: timeout });
            }
            _ = cancel.cancelled() => {
                group.kill();
                let _ = child.start_kill();
                let _ = child.wait().await;
                tracing::warn!(operation = %op, name = %name, "docker-machine killed: cancelled");
                finish(out).await;
                finish(err).await;
                return Err(ExecError::Cancelled { op: op.into(), name: name.into() });
            }
        };
        // Reaped: the group id may be reused from now on.
        group.0 = None;
        let (stdout, mut cut) = finish(out).await;
        let (stderr, stderr_cut) = finish(err).await;
        cut.extend(stderr_cut);
        Ok(Output {
            code: status.and_then(|s| s.code()),
            stdout,
            stderr,
            cut,
        })
    }
}

/// The process group of a running command (its leader's pid), killed with SIGKILL by
/// [`GroupGuard::kill`] or on drop, unless the leader was reaped (`None`).
struct GroupGuard(Option<u32>);

impl GroupGuard {
    fn kill(&mut self) {
        if let Some(pgid) = self.0.take().and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: kill(2) with a negative pid signals that process group; it has no
            // memory-safety preconditions.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What one stream left: its captured text and what was cut from it.
type Captured = (String, Vec<String>);

fn reader<R: AsyncRead + Unpin + Send + 'static>(
    stream: R,
    op: &str,
    name: &str,
    which: &'static str,
    level: Level,
) -> JoinHandle<Captured> {
    let op = op.to_string();
    let name = name.to_string();
    tokio::spawn(async move {
        let mut captured = String::new();
        let mut cut = Vec::new();
        let mut stream = BufReader::new(stream);
        while let Ok(Some(line)) = read_line(&mut stream, MAX_LINE).await {
            let text = line.text();
            match level {
                Level::Debug => {
                    tracing::debug!(operation = %op, name = %name, stream = which, "{text}")
                }
                Level::Info => {
                    tracing::info!(operation = %op, name = %name, stream = which, "{text}")
                }
                Level::Error => {
                    tracing::error!(operation = %op, name = %name, stream = which, "{text}")
                }
            }
            if captured.len() < CAPTURE_LIMIT {
                captured.push_str(text);
                captured.push('\n');
            }
            if let Line::Cut(_) = line {
                // Drain the rest of the line (the command may still be writing it).
                let dropped = skip_line(&mut stream).await.unwrap_or(0);
                let note = format!(
                    "docker-machine {op} {name} wrote a {which} line longer than {MAX_LINE} bytes (the limit); {dropped} bytes after the limit were cut"
                );
                tracing::error!(operation = %op, name = %name, stream = which, "{note}");
                if cut.len() < 16 {
                    cut.push(note);
                }
            }
        }
        (captured, cut)
    })
}

/// Collects a reader's capture; a grandchild keeping the pipe open cannot block us for long.
async fn finish(h: Option<JoinHandle<Captured>>) -> Captured {
    let Some(mut h) = h else {
        return Captured::default();
    };
    match tokio::time::timeout(Duration::from_secs(2), &mut h).await {
        Ok(Ok(c)) => c,
        _ => {
            h.abort();
            Captured::default()
        }
    }
}
