//! Harness of the `drover run` end-to-end tests: the GitLab simulator, a config file, the
//! drover process (with legacy-driver-shim beside it and the fake docker-machine on PATH),
//! signals, and waits with deadlines. The drover process is killed when a test panics.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use gitlab_sim::{JobSpec, JobState, JobView, Sim};

use crate::executor_common::{BUILD_IMAGE, HELPER_IMAGE};

/// A drover process under test.
pub struct Drover {
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
}

impl Drover {
    /// Starts `drover run -c <dir>/config.toml` with `env`.
    pub fn start(config: &str, env: &[(String, String)]) -> Drover {
        let dir = tempfile::Builder::new()
            .prefix("drover-test-run-")
            .tempdir()
            .expect("tempdir");
        Drover::start_in(dir, config, env, &[])
    }

    /// Starts drover in `dir` with extra arguments after `run -c config.toml`.
    pub fn start_in(
        dir: tempfile::TempDir,
        config: &str,
        env: &[(String, String)],
        extra: &[&str],
    ) -> Drover {
        Drover::start_command("run", dir, config, env, extra)
    }

    /// Starts `drover <command> -c <dir>/config.toml <extra>` (`run` or `run-single`).
    pub fn start_command(
        command: &str,
        dir: tempfile::TempDir,
        config: &str,
        env: &[(String, String)],
        extra: &[&str],
    ) -> Drover {
        let path = dir.path().join("config.toml");
        std::fs::write(&path, config).expect("write config");
        let log = std::fs::File::create(dir.path().join("drover.log")).expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_drover"));
        cmd.arg(command)
            .arg("-c")
            .arg(&path)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start drover run");
        Drover {
            child: Some(child),
            dir,
        }
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    /// drover's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("drover.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).expect("running")
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        let r = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(r, 0, "kill failed");
    }

    /// Waits for drover to exit by itself; panics on the deadline.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            let child = self.child.as_mut().expect("running");
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                return status;
            }
            assert!(
                start.elapsed() < within,
                "drover did not exit within {within:?}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Drover {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The exit code of a process that must have exited by itself (never a signal death).
pub fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    assert!(
        status.signal().is_none(),
        "drover was killed by signal {:?}",
        status.signal()
    );
    status.code().expect("exit code")
}

/// A plain docker runner's config for the test images; jobs reach the simulator on the host
/// network.
pub fn docker_config(sim: &Sim, token: &str, concurrent: u32, extra_global: &str) -> String {
    format!(
        r#"concurrent = {concurrent}
check_interval = 1
shutdown_timeout = 20
{extra_global}

[[runners]]
  name = "drover-test-run"
  url = "{url}"
  token = "{token}"
  executor = "docker"
  [runners.docker]
    image = "{BUILD_IMAGE}"
    helper_image = "{HELPER_IMAGE}"
    pull_policy = ["if-not-present"]
    network_mode = "host"
    volumes = ["/cache"]
"#,
        url = sim.url()
    )
}

/// A job that needs no repository.
pub fn job(script: &[&str]) -> JobSpec {
    JobSpec::script(script.iter().copied())
        .variable("GIT_STRATEGY", "none")
        .image(Some(BUILD_IMAGE))
        .pull_policy(&["if-not-present"])
}

/// Polls `f` until it returns `Some`, or panics with `what` and drover's log.
pub async fn until<T>(
    drover: &Drover,
    within: Duration,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < within,
            "timed out waiting for {what}; drover log:\n{}",
            drover.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits for a job to reach a final state.
pub async fn finished(sim: &Sim, drover: &Drover, id: i64, within: Duration) -> JobView {
    until(drover, within, &format!("job {id} to finish"), || {
        sim.job(id).filter(|j| {
            matches!(
                j.state,
                JobState::Success | JobState::Failed | JobState::Canceled
            ) && j.final_updates > 0
        })
    })
    .await
}

/// Waits for a job to be running with `marker` in its trace.
pub async fn running_with(sim: &Sim, drover: &Drover, id: i64, marker: &str) -> JobView {
    until(
        drover,
        Duration::from_secs(90),
        &format!("{marker:?} in job {id}"),
        || {
            sim.job(id).filter(|j| {
                j.state == JobState::Running && String::from_utf8_lossy(&j.trace).contains(marker)
            })
        },
    )
    .await
}

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// `GET path` over HTTP/1.0 on 127.0.0.1:port; the whole response.
pub fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    out
}
