//! Running one stage in a container, as upstream does: attach (before start, so nothing is
//! lost), start, write the script to stdin and half-close it, stream the demultiplexed output
//! into the trace, and wait for the exit code. When the stage's stop signal fires (cancel,
//! abort, timeout) the build container's processes get SIGTERM through an exec, then the
//! container is stopped; the caller then removes it.

use std::future::Future;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::query_parameters::{
    AttachContainerOptions, StopContainerOptions, WaitContainerOptions,
};
use bollard::Docker;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::executor::error::{not_found, SystemError};
use crate::executor::trace::{Stream, Trace};

/// Why a stage was stopped from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Hard cancel (abort): nothing more runs.
    Aborted,
    /// The job timeout: nothing more runs.
    JobTimeout,
    /// Graceful cancel of the user script: after_script still runs.
    Canceled,
    /// `RUNNER_SCRIPT_TIMEOUT` / `RUNNER_AFTER_SCRIPT_TIMEOUT`.
    StageTimeout,
    /// `prepare_timeout` / `get_sources_timeout`: nothing more runs.
    PhaseTimeout,
}

/// How a stage ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageEnd {
    /// The shell exited with this code.
    Exited(i64),
    /// The stop signal fired.
    Stopped(StopReason),
}

/// A POSIX shell script that sends SIGTERM to every process of the container but PID 1 and
/// itself, highest PID first, waiting up to 6 s for each to go (a zombie counts as gone), like
/// upstream's `ContainerSigTermScriptForLinux`. `proc` is the proc filesystem to read (`/proc`;
/// tests pass a fake one). Without `sort` the PIDs go in directory order; without fractional
/// `sleep` the wait polls once a second.
fn sigterm_script(proc: &str) -> String {
    format!(
        r#"proc='{proc}'
pids=$(for d in "$proc"/[0-9]*; do echo "${{d##*/}}"; done | {{ sort -rn 2>/dev/null || cat; }})
for p in $pids; do
  [ "$p" = 1 ] && continue
  [ "$p" = "$$" ] && continue
  kill -TERM "$p" 2>/dev/null || continue
  n=0
  while [ "$n" -lt 60 ] && kill -0 "$p" 2>/dev/null; do
    case "$(cat "$proc/$p/stat" 2>/dev/null)" in *") Z "*) break ;; esac
    if sleep 0.1 2>/dev/null; then n=$((n + 1)); else sleep 1; n=$((n + 10)); fi
  done
done
exit 0
"#
    )
}

/// Where a stage's output goes: the job's trace, or a bounded buffer ([`Captured`]).
pub trait StageOutput {
    /// Takes a chunk of the container's output.
    fn write(&mut self, data: &[u8]);
    /// Takes a chunk of one of the container's streams (the job log marks stdout and stderr
    /// apart in its timestamp headers); by default, as [`StageOutput::write`].
    fn write_stream(&mut self, stream: Stream, data: &[u8]) {
        let _ = stream;
        self.write(data);
    }
    /// The stage ended.
    fn flush(&mut self) {}
}

impl StageOutput for Trace<'_> {
    fn write(&mut self, data: &[u8]) {
        Trace::write(self, data);
    }

    fn write_stream(&mut self, stream: Stream, data: &[u8]) {
        Trace::write_stream(self, stream, data);
    }

    fn flush(&mut self) {
        Trace::flush(self);
    }
}

/// A stage's output kept in memory, at most `limit` bytes (the rest is dropped).
#[derive(Debug, Default)]
pub struct Captured {
    /// What was kept.
    pub bytes: Vec<u8>,
    /// The most bytes kept.
    pub limit: usize,
}

impl StageOutput for Captured {
    fn write(&mut self, data: &[u8]) {
        let room = self.limit.saturating_sub(self.bytes.len());
        self.bytes.extend_from_slice(&data[..data.len().min(room)]);
    }
}

/// Runs `script` in container `id`, streaming its output into `trace`, until it exits or
/// `stop` resolves. Lines arriving on `side` meanwhile (the services' logs with
/// `CI_DEBUG_SERVICES`) go into `trace` too.
pub async fn run_stage(
    docker: &Docker,
    id: &str,
    script: &str,
    is_build: bool,
    trace: &mut impl StageOutput,
    mut side: Option<&mut tokio::sync::mpsc::Receiver<Vec<u8>>>,
    stop: impl Future<Output = StopReason>,
) -> Result<StageEnd, SystemError> {
    let attach = docker
        .attach_container(
            id,
            Some(AttachContainerOptions {
                stream: true,
                stdin: true,
                stdout: true,
                stderr: true,
                logs: false,
                detach_keys: None,
            }),
        )
        .await
        .map_err(|e| docker_error(id, "attach to", "attaching to it", e))?;
    let mut output = attach.output;
    let mut input = attach.input;
    docker
        .start_container(id, None::<bollard::query_parameters::StartContainerOptions>)
        .await
        .map_err(|e| docker_error(id, "start", "starting it", e))?;
    let script = script.as_bytes().to_vec();
    let write = async {
        input.write_all(&script).await?;
        input.shutdown().await
    };
    tokio::pin!(write);
    tokio::pin!(stop);
    let mut written = false;
    let mut stopped = None;
    loop {
        tokio::select! {
            biased;
            reason = &mut stop => {
                stopped = Some(reason);
                break;
            }
            Some(line) = async {
                match side.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            } => trace.write(&line),
            r = &mut write, if !written => {
                written = true;
                if let Err(e) = r {
                    tracing::debug!(container = id, error = %e, "writing the stage script failed");
                }
            }
            item = output.next() => match item {
                Some(Ok(LogOutput::StdOut { message }))
                | Some(Ok(LogOutput::Console { message })) => {
                    trace.write_stream(Stream::Stdout, &message)
                }
                Some(Ok(LogOutput::StdErr { message })) => {
                    trace.write_stream(Stream::Stderr, &message)
                }
                Some(Ok(LogOutput::StdIn { .. })) => {}
                Some(Err(e)) => {
                    tracing::debug!(container = id, error = %e, "attach stream ended with an error");
                    break;
                }
                None => break,
            },
        }
    }
    drop(output);
    if let Some(reason) = stopped {
        terminate(docker, id, is_build).await;
        trace.flush();
        return Ok(StageEnd::Stopped(reason));
    }
    let code = wait_exit(docker, id).await?;
    trace.flush();
    // A container removed from outside (`docker rm -f`) dies with 137 and may still answer
    // the wait; it is gone or marked for removal by now.
    if code != 0 && removed_from_outside(docker, id).await {
        return Err(SystemError::ContainerVanished {
            container: id.to_string(),
            action: "the stage ran".into(),
        });
    }
    Ok(StageEnd::Exited(code))
}

/// A bollard error of `<verb> container <id>`, as a vanished container (found gone while
/// `doing`) when the Engine says 404.
fn docker_error(id: &str, verb: &str, doing: &str, e: bollard::errors::Error) -> SystemError {
    if not_found(&e) {
        SystemError::ContainerVanished {
            container: id.to_string(),
            action: doing.to_string(),
        }
    } else {
        SystemError::docker(format!("{verb} container {id}"), e)
    }
}

/// Whether container `id` is gone or being removed.
async fn removed_from_outside(docker: &Docker, id: &str) -> bool {
    match docker
        .inspect_container(
            id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
    {
        Ok(c) => c
            .state
            .and_then(|s| s.status)
            .is_some_and(|s| s == bollard::models::ContainerStateStatusEnum::REMOVING),
        Err(e) => not_found(&e),
    }
}

async fn wait_exit(docker: &Docker, id: &str) -> Result<i64, SystemError> {
    let mut last = None;
    for _ in 0..5 {
        let mut wait = docker.wait_container(
            id,
            Some(WaitContainerOptions {
                condition: "not-running".into(),
            }),
        );
        match wait.next().await {
            Some(Ok(r)) => return Ok(r.status_code),
            // bollard reports non-zero exits as errors.
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
                return Ok(code)
            }
            Some(Err(e)) if not_found(&e) => {
                return Err(docker_error(id, "wait for", "waiting for it", e))
            }
            Some(Err(e)) => last = Some(e),
            None => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    match last {
        Some(e) => Err(docker_error(id, "wait for", "waiting for it", e)),
        None => Err(SystemError::Engine(format!(
            "wait for container {id}: the Engine gave no exit status"
        ))),
    }
}

/// Stops a running stage: SIGTERM to the build container's processes (bounded to 10 s), then
/// `stop` every second until the container is no longer running.
async fn terminate(docker: &Docker, id: &str, is_build: bool) {
    if is_build {
        let _ = tokio::time::timeout(Duration::from_secs(10), sigterm_processes(docker, id)).await;
    }
    let stop_loop = async {
        loop {
            let _ = docker
                .stop_container(id, None::<StopContainerOptions>)
                .await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(60), async {
        tokio::select! {
            _ = wait_exit(docker, id) => {}
            _ = stop_loop => {}
        }
    })
    .await;
}

async fn sigterm_processes(docker: &Docker, id: &str) {
    let exec = docker
        .create_exec(
            id,
            CreateExecOptions {
                cmd: Some(vec!["sh".to_string(), "-c".into(), sigterm_script("/proc")]),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await;
    let Ok(exec) = exec else { return };
    if let Ok(StartExecResults::Attached { mut output, .. }) =
        docker.start_exec(&exec.id, None).await
    {
        while output.next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::sigterm_script;

    /// Runs the script against a fake proc dir, with `kill` replaced by a function that logs
    /// each SIGTERM and each `kill -0` probe, and answers the first `alive_for` probes after a
    /// SIGTERM with "still running".
    fn run(pids: &[&str], zombies: &[&str], alive_for: u32) -> String {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path().join("proc");
        for p in pids {
            std::fs::create_dir_all(proc.join(p)).unwrap();
            let state = if zombies.contains(p) { "Z" } else { "S" };
            std::fs::write(
                proc.join(p).join("stat"),
                format!("{p} (a b) {state} 1 1\n"),
            )
            .unwrap();
        }
        let log = dir.path().join("log");
        let harness = format!(
            r#"probes=0
kill() {{
  if [ "$1" = -0 ]; then
    probes=$((probes + 1)); echo "probe $2" >> '{log}'; [ "$probes" -le {alive_for} ]; return
  fi
  probes=0
  echo "term $2" >> '{log}'
}}
"#,
            log = log.display()
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(harness + &sigterm_script(&proc.display().to_string()))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read_to_string(&log).unwrap_or_default()
    }

    #[test]
    fn terminates_highest_pid_first_and_spares_pid_1() {
        let log = run(&["1", "2", "9", "10", "123", "31"], &[], 0);
        let terms: Vec<&str> = log.lines().filter(|l| l.starts_with("term ")).collect();
        assert_eq!(
            terms,
            ["term 123", "term 31", "term 10", "term 9", "term 2"]
        );
    }

    #[test]
    fn waits_for_each_process_but_not_for_zombies() {
        // Each process answers two probes with "running", then is gone.
        let log = run(&["5", "7"], &[], 2);
        assert_eq!(
            log,
            "term 7\nprobe 7\nprobe 7\nprobe 7\nterm 5\nprobe 5\nprobe 5\nprobe 5\n"
        );
        // A zombie stays in /proc and answers every probe, but is not waited for.
        let log = run(&["5"], &["5"], 1000);
        assert_eq!(log, "term 5\nprobe 5\n");
    }
}
