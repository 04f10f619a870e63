//! Prepare overhead of the Docker executor: the time from handing a job to
//! `executor::run_job` until the first script line (`$ echo …`) appears in the trace, on a warm
//! Engine with the images present (GIT_STRATEGY=none, the default `/cache` volume, the
//! `/builds` volume with its permission fix, helper and build containers). Target: ≤ 1 s.
//!
//! The same jobs run over three transports to the same Engine in one run: its unix socket, TLS
//! (a TLS front with client certificates on 127.0.0.1, as a docker-machine VM's port 2376) and
//! SSH (a real sshd on 127.0.0.1 running `docker system dial-stdio`; skipped when
//! `/usr/sbin/sshd` is missing and cannot be installed). Target for SSH: within 1.2× of TLS.
//!
//! Run: `cargo bench --bench executor_prepare` (needs /var/run/docker.sock; builds the local
//! test images first); `DROVER_BENCH_SERVICES=N` adds N health-checked services. Prints min / median / max over the runs after one warm-up run.

#[path = "../tests/docker_tls_front/mod.rs"]
mod docker_tls_front;
#[path = "../tests/ssh_support/mod.rs"]
mod ssh_support;
#[path = "../tests/test_certs/mod.rs"]
mod test_certs;

use std::io;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use drover::executor::{self, DockerEndpoint, JobControl, JobRequest, RunnerSettings, TraceSink};
use drover::job::JobPayload;

const MARKER: &str = "$ echo drover-bench-first-line";

#[derive(Clone)]
struct TimingSink {
    text: Arc<Mutex<String>>,
    seen: Arc<Mutex<Option<Instant>>>,
}

impl TraceSink for TimingSink {
    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        let mut text = self.text.lock().unwrap_or_else(|p| p.into_inner());
        text.push_str(&String::from_utf8_lossy(data));
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.is_none() && text.contains(MARKER) {
            *seen = Some(Instant::now());
        }
        Ok(())
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("executor_prepare: bench");
        return;
    }
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(io::stderr)
            .init();
    }
    let root = env!("CARGO_MANIFEST_DIR");
    let status = Command::new(format!("{root}/fixtures/images/build.sh"))
        .arg(env!("CARGO_BIN_EXE_drover"))
        .status()
        .expect("run fixtures/images/build.sh");
    assert!(status.success(), "building the test images failed");

    let mut runner = RunnerSettings {
        name: "drover-test-executor-bench".into(),
        token: "glrt-dtebench0".into(),
        executor: "docker".into(),
        ..Default::default()
    };
    runner.docker.image = "drover-test-executor-build:latest".into();
    runner.docker.helper_image = Some("drover-test-executor-helper:latest".into());
    runner.docker.pull_policy = vec!["if-not-present".into()];
    runner.docker.volumes = vec!["/cache".into()];
    // DROVER_BENCH_SERVICES=N adds N services (the local HTTP service image, health-checked),
    // so the added prepare time per service is the difference to N=0.
    let services: usize = std::env::var("DROVER_BENCH_SERVICES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let service_list: Vec<serde_json::Value> = (0..services)
        .map(|i| serde_json::json!({"name": "drover-test-executor-service:latest", "alias": format!("svc{i}")}))
        .collect();
    let payload = JobPayload::from_json(
        &serde_json::json!({"id": 1, "job_info": {"project_id": 900}, "runner_info": {"timeout": 120},
            "git_info": {"repo_url": "http://127.0.0.1:9/bench/project.git"},
            "variables": [{"key": "GIT_STRATEGY", "value": "none"}],
            "services": service_list,
            "steps": [{"name": "script", "script": ["echo drover-bench-first-line"]}]})
        .to_string(),
    )
    .expect("payload");
    println!("services per job: {services}");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let runs: usize = std::env::var("DROVER_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let certs = tempfile::tempdir().expect("tempdir");
    docker_tls_front::make_certs(certs.path());
    let tls_port = runtime.block_on(docker_tls_front::tls_front(certs.path()));
    let tls = DockerEndpoint {
        host: Some(format!("tcp://127.0.0.1:{tls_port}")),
        tls_cert_path: Some(certs.path().to_path_buf()),
        tls_verify: true,
        ssh: None,
    };
    let sshd = std::panic::catch_unwind(ssh_support::Sshd::start).ok();
    let mut transports = vec![("unix socket", DockerEndpoint::default()), ("tls", tls)];
    match &sshd {
        Some(sshd) => transports.push((
            "ssh",
            DockerEndpoint {
                ssh: Some(sshd.target()),
                ..Default::default()
            },
        )),
        None => println!("ssh: skipped (no sshd)"),
    }
    let mut medians = Vec::new();
    for (name, endpoint) in &transports {
        let commands = || sshd.as_ref().map_or(0, |s| s.commands_started());
        let before = commands();
        let (mut overheads, mut totals) = measure(&runtime, endpoint, &payload, &runner, runs);
        if *name == "ssh" {
            // Every job's SSH session, warm-up included: what sshd started for them.
            println!(
                "ssh: `docker system dial-stdio` channels per job (sshd's log): {:.1}",
                (commands() - before) as f64 / (runs + 1) as f64
            );
        }
        show(
            &format!("{name}: prepare overhead (job handed -> first script line)"),
            &mut overheads,
        );
        show(
            &format!("{name}: whole job (prepare .. cleanup)"),
            &mut totals,
        );
        medians.push((*name, overheads[overheads.len() / 2]));
    }
    let median = |n: &str| medians.iter().find(|(m, _)| *m == n).map(|(_, d)| *d);
    if let (Some(ssh), Some(tls)) = (median("ssh"), median("tls")) {
        println!(
            "ssh / tls prepare (medians): {:.2}x (target <= 1.2x)",
            ssh.as_secs_f64() / tls.as_secs_f64()
        );
    }
    // Baseline on the same Engine at the same time: one bare container run (create, attach,
    // start, wait, remove) of the helper image, which the executor's structure repeats per
    // stage before the first script line (prepare_script with the permission fixes,
    // get_sources, step_script).
    let mut baseline = Vec::new();
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        let status = Command::new("docker")
            .args(["run", "--rm", "drover-test-executor-helper:latest", "true"])
            .status()
            .expect("docker run");
        assert!(status.success());
        baseline.push(start.elapsed());
    }
    let _ = Command::new("sh")
        .args(["-c", "docker volume ls -q --filter label=com.gitlab.gitlab-runner.runner.id=dtebench0 | xargs -r docker volume rm -f >/dev/null"])
        .status();
    show(
        "baseline: one `docker run --rm <helper> true`",
        &mut baseline,
    );
}

/// Sorts `v` and prints its min / median / max.
fn show(name: &str, v: &mut [Duration]) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name}: min {:.0} ms, median {:.0} ms, max {:.0} ms ({} runs)",
        ms(v[0]),
        ms(v[v.len() / 2]),
        ms(v[v.len() - 1]),
        v.len()
    );
}

/// Runs the job `runs + 1` times over `endpoint` (the first is a warm-up): prepare overheads
/// and whole-job times.
fn measure(
    runtime: &tokio::runtime::Runtime,
    endpoint: &DockerEndpoint,
    payload: &JobPayload,
    runner: &RunnerSettings,
    runs: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    let mut overheads = Vec::new();
    let mut totals = Vec::new();
    for i in 0..=runs {
        let mut sink = TimingSink {
            text: Arc::default(),
            seen: Arc::default(),
        };
        let req = JobRequest {
            payload,
            runner,
            endpoint,
            machine_name: None,
            slot: Default::default(),
        };
        let start = Instant::now();
        let result = runtime.block_on(executor::run_job(req, &mut sink, JobControl::default()));
        let total = start.elapsed();
        let seen = sink.seen.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Err(e) = result {
            let text = sink.text.lock().unwrap_or_else(|p| p.into_inner()).clone();
            panic!("bench job failed: {e}\n{text}");
        }
        let overhead = seen.expect("the first script line never appeared") - start;
        if i > 0 {
            overheads.push(overhead);
            totals.push(total);
        }
    }
    (overheads, totals)
}
