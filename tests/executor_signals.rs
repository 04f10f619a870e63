//! Stop signals during `drover exec-job` on the real Engine: SIGTERM, SIGHUP, SIGQUIT (and
//! SIGINT in executor_cli.rs) end in clean-up (build and helper containers, build volume) within
//! a bounded time, and the process exits non-zero by itself (not killed by the signal), saying
//! which signal stopped it.
//!
//! `DROVER_TEST_BIN` runs them against another drover binary (to watch them fail without the fix).

mod docker_engine;
mod executor_common;

use std::io::{BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use executor_common::*;

/// Upper bound for the whole stop: the container's SIGTERM grace and removal take seconds;
/// drover's clean-up budget is 5 minutes, far above what a healthy Engine needs.
const STOP_BOUND: Duration = Duration::from_secs(90);

/// One job at a time: the machine is small and shared.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn stop_with(signal: &str, test: &str) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    assert!(engine_available(), "these tests need the Docker Engine");
    ensure_images();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"[[runners]]
  name = "drover-test-executor-{test}"
  token = "glrt-dte{test}"
  executor = "docker"
  [runners.docker]
    image = "{BUILD_IMAGE}"
    helper_image = "{HELPER_IMAGE}"
    pull_policy = ["if-not-present"]
    volumes = ["/cache"]
"#
    );
    let job = serde_json::json!({
        "id": 41, "token": "glcbt-signaltesttoken", "job_info": {"project_id": 602},
        "runner_info": {"timeout": 600},
        "variables": [{"key": "GIT_STRATEGY", "value": "none"}],
        "steps": [{"name": "script", "script": ["echo script-started", "sleep 600"]},
                  {"name": "after_script", "script": ["echo after-ran"]}]
    });
    let c = dir.path().join("config.toml");
    let j = dir.path().join("job.json");
    std::fs::write(&c, config).unwrap();
    std::fs::write(&j, job.to_string()).unwrap();
    let short: String = format!("dte{test}").chars().take(9).collect();
    let mut child = Command::new(test_bin())
        .arg("exec-job")
        .arg("--job")
        .arg(&j)
        .arg("-c")
        .arg(&c)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut trace = read_until_line(&mut stdout, "script-started\n");
    let (running, _) = leftovers(&short);
    assert!(
        !running.is_empty(),
        "no labelled container while the job runs"
    );
    let sent = Instant::now();
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let reader = std::thread::spawn(move || {
        let _ = stdout.read_to_string(&mut trace);
        trace
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if sent.elapsed() > STOP_BOUND {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let took = sent.elapsed();
    let trace = reader.join().unwrap();
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    // Whatever happened, leave nothing behind for the next test; then judge.
    let (containers, volumes) = leftovers(&short);
    for c in &containers {
        let _ = Command::new("docker").args(["rm", "-f", c]).output();
    }
    let filter = format!("label=com.gitlab.gitlab-runner.runner.id={short}");
    let all = Command::new("docker")
        .args(["volume", "ls", "-q", "--filter", &filter])
        .output()
        .expect("docker");
    for v in String::from_utf8_lossy(&all.stdout).lines() {
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f", v])
            .output();
    }
    let status = status.unwrap_or_else(|| panic!("still running {took:?} after SIG{signal}"));
    eprintln!("SIG{signal}: exec-job exited {status:?} {took:?} after the signal");
    assert!(
        status.code().is_some(),
        "killed by the signal ({status:?}) instead of cleaning up; left {containers:?} {volumes:?}\n{err}"
    );
    assert_ne!(status.code(), Some(0), "{trace}\n{err}");
    assert!(
        containers.is_empty() && volumes.is_empty(),
        "left behind after SIG{signal}: {containers:?} {volumes:?}\n{trace}\n{err}"
    );
    assert!(
        err.contains(&format!("SIG{signal}")),
        "no clear message: {err}"
    );
    assert!(err.contains("drover: stopped by"), "{err}");
}

#[test]
fn sigterm_aborts_and_cleans_up() {
    stop_with("TERM", "sigterm");
}

#[test]
fn sighup_aborts_and_cleans_up() {
    stop_with("HUP", "sighup");
}

#[test]
fn sigquit_cancels_and_cleans_up() {
    stop_with("QUIT", "sigquit");
}
