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

use crate::executor::error::SystemError;
use crate::executor::trace::Trace;

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
}

/// How a stage ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageEnd {
    /// The shell exited with this code.
    Exited(i64),
    /// The stop signal fired.
    Stopped(StopReason),
}

/// A shell script that sends SIGTERM to every process but PID 1 and itself, highest PID first
/// (the TERM trap of the stage script then ends the shell).
const SIGTERM_SCRIPT: &str = r#"pids=""
for d in /proc/[0-9]*; do
  p="${d#/proc/}"
  [ "$p" = 1 ] && continue
  [ "$p" = "$$" ] && continue
  pids="$p $pids"
done
for p in $pids; do kill -TERM "$p" 2>/dev/null; done
exit 0
"#;

/// Runs `script` in container `id`, streaming its output into `trace`, until it exits or
/// `stop` resolves.
pub async fn run_stage(
    docker: &Docker,
    id: &str,
    script: &str,
    is_build: bool,
    trace: &mut Trace<'_>,
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
        .map_err(|e| SystemError::docker(format!("attach to container {id}"), e))?;
    let mut output = attach.output;
    let mut input = attach.input;
    docker
        .start_container(id, None::<bollard::query_parameters::StartContainerOptions>)
        .await
        .map_err(|e| SystemError::docker(format!("start container {id}"), e))?;
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
            r = &mut write, if !written => {
                written = true;
                if let Err(e) = r {
                    tracing::debug!(container = id, error = %e, "writing the stage script failed");
                }
            }
            item = output.next() => match item {
                Some(Ok(LogOutput::StdOut { message }))
                | Some(Ok(LogOutput::StdErr { message }))
                | Some(Ok(LogOutput::Console { message })) => trace.write(&message),
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
    Ok(StageEnd::Exited(code))
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
            Some(Err(e)) => last = Some(e),
            None => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    match last {
        Some(e) => Err(SystemError::docker(format!("wait for container {id}"), e)),
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
                cmd: Some(vec!["sh", "-c", SIGTERM_SCRIPT]),
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
