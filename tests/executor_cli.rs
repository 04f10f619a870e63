//! `drover exec-job` end to end: exit codes 0 / 1 / 2, the trace on stdout, the failure reason
//! on stderr, bad input, and Ctrl-C as a graceful cancel (after_script still runs).

mod docker_engine;
mod executor_common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use executor_common::*;

fn write_files(dir: &std::path::Path, test: &str, job: serde_json::Value) -> (String, String) {
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
    let c = dir.join("config.toml");
    let j = dir.join("job.json");
    std::fs::write(&c, config).unwrap();
    std::fs::write(&j, job.to_string()).unwrap();
    (c.display().to_string(), j.display().to_string())
}

fn job(script: &[&str]) -> serde_json::Value {
    serde_json::json!({
        "id": 31, "token": "glcbt-clitesttoken", "job_info": {"project_id": 601},
        "runner_info": {"timeout": 120},
        "variables": [{"key": "GIT_STRATEGY", "value": "none"}],
        "steps": [{"name": "script", "script": script},
                  {"name": "after_script", "script": ["echo \"after status=$CI_JOB_STATUS\""]}]
    })
}

#[test]
fn bad_payload_is_exit_2_with_a_location() {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("job.json");
    std::fs::write(&j, "{\n  \"id\": ,\n}").unwrap();
    let out = Command::new(drover_bin())
        .args(["exec-job", "--job", j.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("drover: "), "{err}");
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn unreachable_engine_is_a_system_failure() {
    let dir = tempfile::tempdir().unwrap();
    let (c, j) = write_files(dir.path(), "unreach", job(&["true"]));
    let out = Command::new(drover_bin())
        .args([
            "exec-job",
            "--job",
            &j,
            "-c",
            &c,
            "--docker-host",
            "tcp://127.0.0.1:1",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach the Docker Engine at tcp://127.0.0.1:1"),
        "{err}"
    );
    let trace = String::from_utf8_lossy(&out.stdout);
    assert!(trace.contains("Job failed (system failure)"), "{trace}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn success_and_script_failure_exit_codes() {
    if !engine_available() {
        return;
    }
    ensure_images();
    let _guard = ENGINE_LOCK.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let (c, j) = write_files(dir.path(), "cliok", job(&["echo hello-from-job"]));
    let out = Command::new(drover_bin())
        .args([
            "exec-job",
            "--job",
            &j,
            "-c",
            &c,
            "--runner",
            "drover-test-executor-cliok",
        ])
        .output()
        .unwrap();
    let trace = plain(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{trace}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(trace.contains("\nhello-from-job\n"), "{trace}");
    assert!(trace.contains("Job succeeded"));

    let (c, j) = write_files(dir.path(), "clifail", job(&["exit 3"]));
    let out = Command::new(drover_bin())
        .args(["exec-job", "--job", &j, "-c", &c])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("exit code 3") && err.contains("script_failure"),
        "{err}"
    );
    assert_clean_and_remove_reusable("dtecliok");
    assert_clean_and_remove_reusable("dteclifai");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_gracefully() {
    if !engine_available() {
        return;
    }
    ensure_images();
    let _guard = ENGINE_LOCK.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let (c, j) = write_files(
        dir.path(),
        "clicancel",
        job(&["echo script-started", "sleep 300"]),
    );
    let mut child = Command::new(drover_bin())
        .args(["exec-job", "--job", &j, "-c", &c])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut trace = read_until_line(&mut stdout, "script-started\n");
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    stdout.read_to_string(&mut trace).unwrap();
    let code = child.wait().unwrap().code();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(code, Some(1), "{trace}\n{err}");
    assert!(trace.contains("after status=canceled"), "{trace}");
    assert!(err.contains("job_canceled"), "{err}");
    assert_clean_and_remove_reusable("dteclican");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_ctrl_c_aborts() {
    if !engine_available() {
        return;
    }
    ensure_images();
    let _guard = ENGINE_LOCK.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let mut j = job(&["echo script-started", "sleep 300"]);
    j["steps"][1]["script"] =
        serde_json::json!(["echo after-started", "sleep 300", "echo after-finished"]);
    let (c, j) = write_files(dir.path(), "cliabort", j);
    let mut child = Command::new(drover_bin())
        .args(["exec-job", "--job", &j, "-c", &c])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut trace = String::new();
    let mut interrupts = 0;
    loop {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            break;
        }
        trace.push_str(&line);
        // First Ctrl-C in the script (graceful), the second in after_script (abort).
        let shown = plain(line.as_bytes());
        if shown == "script-started\n" || shown == "after-started\n" {
            interrupts += 1;
            Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status()
                .unwrap();
        }
    }
    let code = child.wait().unwrap().code();
    assert_eq!(interrupts, 2, "{trace}");
    assert_eq!(code, Some(1), "{trace}");
    assert!(!trace.contains("after-finished"), "{trace}");
    assert!(!trace.contains("Cleaning up project directory"), "{trace}");
    assert_clean_and_remove_reusable("dtecliabo");
}

/// A payload file larger than drover reads (128 MiB) is refused with the limit named, instead
/// of being read whole (`/dev/zero` or a wrong path would grow memory without end). The file is
/// sparse, so it costs no disk.
#[test]
fn an_oversized_payload_is_refused_with_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("huge.json");
    let f = std::fs::File::create(&j).unwrap();
    f.set_len(drover::bounded::MAX_DATA_FILE + 1).unwrap();
    drop(f);
    let out = Command::new(drover_bin())
        .args(["exec-job", "--job", j.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("drover: "), "{err}");
    assert!(err.contains("huge.json"), "{err}");
    assert!(err.contains("larger than 134217728 bytes"), "{err}");
}
