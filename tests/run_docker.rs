//! `drover run` end to end with a plain `docker` runner, against the GitLab simulator, on the
//! real Docker Engine: jobs picked up, traces byte-exact, final states and exit codes, GitLab
//! faults, a cancel from GitLab mid-job, SIGQUIT draining and SIGTERM aborting with
//! `runner_interrupted`, and the process exiting by itself with the right code.

mod docker_engine;
mod executor_common;
mod run_support;
mod test_certs;

use std::time::Duration;

use gitlab_sim::{Fault, FaultKind, JobSpec, JobState, Route, Sim};
use run_support::*;

async fn setup(token: &str) -> Option<(Sim, tokio::sync::MutexGuard<'static, ()>)> {
    if !executor_common::engine_available() {
        return None;
    }
    let guard = executor_common::ENGINE_LOCK.lock().await;
    executor_common::ensure_images();
    let sim = Sim::start().await.expect("simulator");
    sim.add_runner(token);
    Some((sim, guard))
}

/// A stored log as GitLab shows it (line timestamps removed).
fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&drover::executor::trace::timestamp::strip(bytes)).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_with_byte_exact_traces_and_sigquit_waits_for_the_running_job() {
    let token = "glrt-drovertestrunquit01";
    let Some((sim, _g)) = setup(token).await else {
        return;
    };
    let ok = sim.enqueue(
        job(&["echo hello from drover", "echo \"secret=$SECRET_X\""])
            .masked_variable("SECRET_X", "s3cr3t-value"),
    );
    let bad = sim.enqueue(job(&["exit 3"]));
    let port = free_port();
    let mut drover = Drover::start(
        &docker_config(
            &sim,
            token,
            2,
            &format!("listen_address = \"127.0.0.1:{port}\""),
        ),
        &[],
    );

    let v = finished(&sim, &drover, ok, Duration::from_secs(120)).await;
    assert_eq!(v.state, JobState::Success, "{}", text(&v.trace));
    assert_eq!(
        v.output_matches,
        Some(true),
        "checksum/bytesize differ from the stored log"
    );
    let t = text(&v.trace);
    assert!(t.contains("hello from drover"), "{t}");
    assert!(t.contains("Job succeeded"), "{t}");
    assert!(t.contains("secret=[MASKED]"), "{t}");
    assert!(!t.contains("s3cr3t-value"), "{t}");

    let v = finished(&sim, &drover, bad, Duration::from_secs(120)).await;
    assert_eq!(v.state, JobState::Failed);
    assert_eq!(v.failure_reason.as_deref(), Some("script_failure"));
    assert_eq!(v.exit_code, Some(3));
    assert_eq!(v.output_matches, Some(true));

    // Upstream's metrics, with the runner's labels.
    let m = http_get(port, "/metrics");
    let short = &token[5..14];
    let total =
        format!("gitlab_runner_jobs_total{{runner=\"{short}\",runner_name=\"drover-test-run\"");
    let line = m
        .lines()
        .find(|l| l.starts_with(&total))
        .unwrap_or_else(|| panic!("{m}"));
    assert!(line.ends_with(" 2"), "{line}");
    assert!(
        m.contains("gitlab_runner_failed_jobs_total{failure_reason=\"script_failure\""),
        "{m}"
    );
    assert!(m.contains("process_resident_memory_bytes"), "{m}");
    // The feeder's second feed: both jobs may have been taken by the first feed and its
    // re-queue, and then the next feed waits for a worker to be free, which comes after the
    // job's final update that `finished` saw.
    let feeds = |m: &str| {
        m.lines()
            .find(|l| l.starts_with("gitlab_runner_worker_feeds_total{"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    assert!(feeds(&m).is_some(), "{m}");
    until(&drover, Duration::from_secs(10), "a second feed", || {
        feeds(&http_get(port, "/metrics")).filter(|&n| n >= 2.0)
    })
    .await;
    // The run loop runs: /health/ready says so.
    let ready = http_get(port, "/health/ready");
    assert!(
        ready.starts_with("HTTP/1.0 200") || ready.starts_with("HTTP/1.1 200"),
        "{ready}"
    );

    // SIGQUIT while a job runs: no new job is taken, the running one finishes, drover exits 0.
    let long = sim.enqueue(job(&["echo started-long", "sleep 4", "echo finished-long"]));
    running_with(&sim, &drover, long, "started-long").await;
    drover.signal(libc::SIGQUIT);
    // Shutdown began: not ready any more, while the job still runs.
    until(
        &drover,
        Duration::from_secs(10),
        "/health/ready 503",
        || {
            let state = sim.job(long).map(|j| j.state);
            assert_eq!(
                state,
                Some(JobState::Running),
                "the job ended while /health/ready still answered ready"
            );
            http_get(port, "/health/ready")
                .contains(" 503 ")
                .then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let late = sim.enqueue(job(&["echo never"]));
    let status = drover.wait_exit(Duration::from_secs(90));
    assert_eq!(exit_code(status), 0, "{}", drover.log());
    let v = sim.job(long).expect("job");
    assert_eq!(v.state, JobState::Success, "{}", text(&v.trace));
    assert!(text(&v.trace).contains("finished-long"));
    assert_eq!(
        sim.job(late).map(|j| j.state),
        Some(JobState::Pending),
        "a job was taken after SIGQUIT"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_aborts_the_running_job_with_runner_interrupted_and_exits() {
    let token = "glrt-drovertestrunterm01";
    let Some((sim, _g)) = setup(token).await else {
        return;
    };
    let id = sim.enqueue(job(&["echo started-term", "sleep 120"]));
    let mut drover = Drover::start(&docker_config(&sim, token, 1, ""), &[]);
    running_with(&sim, &drover, id, "started-term").await;
    drover.signal(libc::SIGTERM);
    let status = drover.wait_exit(Duration::from_secs(60));
    assert_eq!(exit_code(status), 0, "{}", drover.log());
    let v = sim.job(id).expect("job");
    assert_eq!(v.state, JobState::Failed, "{}", text(&v.trace));
    assert_eq!(v.failure_reason.as_deref(), Some("runner_interrupted"));
    assert_eq!(v.output_matches, Some(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_from_gitlab_stops_the_job_and_after_script_runs() {
    let token = "glrt-drovertestruncanc1";
    let Some((sim, _g)) = setup(token).await else {
        return;
    };
    let mut spec = job(&["echo started-cancel", "sleep 120"]);
    spec.after_script = vec!["echo after-script-ran".into()];
    let id = sim.enqueue(spec);
    let mut drover = Drover::start(&docker_config(&sim, token, 1, ""), &[]);
    running_with(&sim, &drover, id, "started-cancel").await;
    sim.cancel(id);
    let v = finished(&sim, &drover, id, Duration::from_secs(90)).await;
    assert_eq!(v.state, JobState::Canceled, "{}", text(&v.trace));
    assert!(
        text(&v.trace).contains("after-script-ran"),
        "{}",
        text(&v.trace)
    );
    drover.signal(libc::SIGQUIT);
    assert_eq!(exit_code(drover.wait_exit(Duration::from_secs(60))), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_faults_do_not_lose_the_job_or_its_trace() {
    let token = "glrt-drovertestrunfault";
    let Some((sim, _g)) = setup(token).await else {
        return;
    };
    sim.configure(|s| s.trace_update_interval = 1);
    sim.fault(Fault::once(Route::RequestJob, FaultKind::DropBefore));
    sim.fault(Fault {
        route: Route::RequestJob,
        kind: FaultKind::Status(502),
        times: 2,
    });
    sim.fault(Fault {
        route: Route::PatchTrace,
        kind: FaultKind::Status(500),
        times: 2,
    });
    sim.fault(Fault::once(Route::PatchTrace, FaultKind::DropAfter));
    sim.fault(Fault::once(Route::UpdateJob, FaultKind::Status(503)));
    let id = sim.enqueue(job(&[
        "for i in 1 2 3 4 5; do echo line-$i; sleep 0.5; done",
        "echo all-lines-done",
    ]));
    let mut drover = Drover::start(&docker_config(&sim, token, 1, ""), &[]);
    let v = finished(&sim, &drover, id, Duration::from_secs(180)).await;
    assert_eq!(v.state, JobState::Success, "{}", text(&v.trace));
    assert_eq!(v.output_matches, Some(true), "{}", text(&v.trace));
    let t = text(&v.trace);
    for i in 1..=5 {
        assert_eq!(t.matches(&format!("line-{i}\n")).count(), 1, "{t}");
    }
    assert!(t.contains("all-lines-done"));
    drover.signal(libc::SIGQUIT);
    assert_eq!(exit_code(drover.wait_exit(Duration::from_secs(60))), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_changes_reload_live_and_a_broken_file_keeps_the_old_config() {
    let token = "glrt-drovertestrunreload";
    let sim = Sim::start().await.expect("simulator");
    sim.add_runner(token);
    let config = docker_config(&sim, token, 1, "");
    let mut drover = Drover::start(&config, &[]);
    until(&drover, Duration::from_secs(30), "start-up", || {
        drover.log().contains("Configuration loaded").then_some(())
    })
    .await;
    // The mtime check (every 3 s) picks up a new concurrent.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::write(
        drover.config_path(),
        config.replace("concurrent = 1", "concurrent = 4"),
    )
    .expect("rewrite");
    until(&drover, Duration::from_secs(20), "the reload", || {
        drover.log().contains("concurrent: 1 -> 4").then_some(())
    })
    .await;
    // log_format applies live too (no flag set it): the next reload logs JSON lines.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    std::fs::write(
        drover.config_path(),
        format!(
            "log_format = \"json\"\n{}",
            config.replace("concurrent = 1", "concurrent = 4")
        ),
    )
    .expect("rewrite");
    until(
        &drover,
        Duration::from_secs(20),
        "the JSON log format",
        || {
            drover
                .log()
                .lines()
                .any(|l| l.starts_with('{') && l.contains("Configuration loaded"))
                .then_some(())
        },
    )
    .await;
    // A broken file is reported and the running config stays; SIGHUP forces a reload.
    std::fs::write(drover.config_path(), "concurrent = [").expect("break");
    drover.signal(libc::SIGHUP);
    until(
        &drover,
        Duration::from_secs(20),
        "the failed reload",
        || {
            drover
                .log()
                .contains("keeping the previous one")
                .then_some(())
        },
    )
    .await;
    let id = sim.enqueue(job(&["echo still-serving"]));
    if executor_common::engine_available() {
        let _g = executor_common::ENGINE_LOCK.lock().await;
        executor_common::ensure_images();
        let v = finished(&sim, &drover, id, Duration::from_secs(120)).await;
        assert_eq!(v.state, JobState::Success, "{}", text(&v.trace));
    }
    drover.signal(libc::SIGTERM);
    assert_eq!(exit_code(drover.wait_exit(Duration::from_secs(60))), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_single_serves_max_builds_jobs_then_exits() {
    let token = "glrt-drovertestrunsingl";
    let Some((sim, _g)) = setup(token).await else {
        return;
    };
    let a = sim.enqueue(job(&["echo single-one"]));
    let b = sim.enqueue(job(&["echo single-two"]));
    let c = sim.enqueue(job(&["echo single-three"]));
    let dir = tempfile::Builder::new()
        .prefix("drover-test-run-")
        .tempdir()
        .expect("tempdir");
    let path = dir.path().join("config.toml");
    std::fs::write(&path, docker_config(&sim, token, 4, "")).expect("config");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(["run-single", "-c"])
        .arg(&path)
        .args(["--runner-name", "drover-test-run", "--max-builds", "2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run-single");
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break s;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("run-single did not exit after --max-builds 2");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(exit_code(status), 0);
    for id in [a, b] {
        assert_eq!(sim.job(id).map(|j| j.state), Some(JobState::Success));
    }
    assert_eq!(sim.job(c).map(|j| j.state), Some(JobState::Pending));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_single_stops_within_the_shutdown_timeout_when_the_final_update_keeps_failing() {
    let token = "glrt-drovertestsingleterm";
    let Some((sim, _g)) = setup(token).await else {
        return;
    };
    let id = sim.enqueue(job(&["echo single-term-start", "sleep 3"]));
    let dir = tempfile::Builder::new()
        .prefix("drover-test-run-")
        .tempdir()
        .expect("tempdir");
    let mut drover = Drover::start_command(
        "run-single",
        dir,
        &docker_config(&sim, token, 1, ""),
        &[],
        &["--runner-name", "drover-test-run"],
    );
    running_with(&sim, &drover, id, "single-term-start").await;
    // From now on GitLab answers every status update with 500: the final update can never
    // succeed, and upstream's retries would hold it for about 17 minutes.
    sim.fault(Fault {
        route: Route::UpdateJob,
        kind: FaultKind::Status(500),
        times: 1_000_000,
    });
    let path = format!("/jobs/{id}");
    until(
        &drover,
        Duration::from_secs(90),
        "a refused final update",
        || {
            sim.requests_to("PUT", &path)
                .iter()
                .any(|r| r.json()["state"] == "success")
                .then_some(())
        },
    )
    .await;
    drover.signal(libc::SIGTERM);
    // The fixed 30 s shutdown timeout, then the providers' shutdown: well within 60 s.
    let status = drover.wait_exit(Duration::from_secs(60));
    assert_eq!(exit_code(status), 1, "{}", drover.log());
    assert!(
        drover.log().contains("shutdown_timeout expired"),
        "{}",
        drover.log()
    );
}

fn drover_cmd(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(args)
        .output()
        .expect("run drover")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_then_run_then_unregister_on_a_fresh_config() {
    let token = "glrt-drovertestrunregist";
    let Some((sim, _g)) = setup(token).await else {
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("drover-test-run-")
        .tempdir()
        .expect("tempdir");
    let cfg = dir.path().join("config.toml");
    let cfg_s = cfg.to_str().expect("utf-8 path");
    let out = drover_cmd(&[
        "register",
        "-c",
        cfg_s,
        "--non-interactive",
        "--url",
        sim.url(),
        "--token",
        token,
        "--name",
        "drover-test-run-registered",
        "--executor",
        "docker",
        "--docker-image",
        executor_common::BUILD_IMAGE,
        "--docker-helper-image",
        executor_common::HELPER_IMAGE,
        "--docker-pull-policy",
        "if-not-present",
        "--docker-network-mode",
        "host",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = std::fs::read_to_string(&cfg).expect("registered config");
    assert_eq!(
        sim.managers(token).len(),
        1,
        "register verified this manager"
    );
    let id = sim.enqueue(job(&["echo registered-runner-works"]));
    let mut drover = Drover::start_in(dir, &config, &[], &[]);
    let v = finished(&sim, &drover, id, Duration::from_secs(120)).await;
    assert_eq!(v.state, JobState::Success, "{}", text(&v.trace));
    assert!(text(&v.trace).contains("registered-runner-works"));
    drover.signal(libc::SIGQUIT);
    assert_eq!(exit_code(drover.wait_exit(Duration::from_secs(60))), 0);
    let cfg = drover.config_path();
    let out = drover_cmd(&[
        "unregister",
        "-c",
        cfg.to_str().expect("utf-8 path"),
        "--name",
        "drover-test-run-registered",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A glrt- runner: unregister deletes this manager; the runner stays in GitLab.
    assert!(sim.managers(token).is_empty(), "{:?}", sim.managers(token));
    let left = drover::config::load_file(&cfg).expect("config after unregister");
    assert!(left.config.runners.is_empty());
}

/// At start, `drover run` ends what a drover that died left on the local Engine for its
/// `docker` runners: containers (running or not), per-build networks and temporary volumes with
/// the runner's labels and this system ID, one log line and one metric count each. Another
/// runner's containers and reusable volumes are left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_of_a_dead_drover_are_ended_at_start() {
    let token = "glrt-drovertestleftover1";
    let Some((sim, _g)) = setup(token).await else {
        return;
    };
    let short = &token[5..14];
    let system_id = "s_1eff0e5e1eff";
    let label = |k: &str, v: &str| format!("com.gitlab.gitlab-runner.{k}={v}");
    let ours = [
        label("managed", "true"),
        label("runner.id", short),
        label("runner.system_id", system_id),
        label("job.id", "4242"),
    ];
    let docker = |args: &[&str]| {
        let out = std::process::Command::new("docker")
            .args(args)
            .output()
            .expect("docker");
        assert!(out.status.success(), "docker {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let with_labels = |base: &[&str], labels: &[String]| {
        let mut v: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        for l in labels {
            v.push("--label".into());
            v.push(l.clone());
        }
        v
    };
    let run = |labels: &[String], name: &str| {
        let mut args = with_labels(&["run", "-d", "--name", name], labels);
        args.extend([
            executor_common::BUILD_IMAGE.to_string(),
            "sleep".into(),
            "600".into(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        docker(&args)
    };
    // What an earlier, failed run of this test may have left.
    let quiet = |args: &[&str]| {
        let _ = std::process::Command::new("docker").args(args).output();
    };
    quiet(&[
        "rm",
        "-f",
        "drover-test-leftover-job",
        "drover-test-leftover-other",
    ]);
    quiet(&["network", "rm", "drover-test-leftover-net"]);
    quiet(&[
        "volume",
        "rm",
        "drover-test-leftover-tmpvol",
        "drover-test-leftover-cachevol",
    ]);
    run(&ours, "drover-test-leftover-job");
    let mut other = ours.clone();
    other[1] = label("runner.id", "someoneX");
    run(&other, "drover-test-leftover-other");
    let net = with_labels(&["network", "create"], &ours);
    let mut net: Vec<&str> = net.iter().map(String::as_str).collect();
    net.push("drover-test-leftover-net");
    docker(&net);
    let mut temp = ours.to_vec();
    temp.push(label("reusable", "false"));
    let vol = with_labels(&["volume", "create"], &temp);
    let mut vol: Vec<&str> = vol.iter().map(String::as_str).collect();
    vol.push("drover-test-leftover-tmpvol");
    docker(&vol);
    let mut keep = ours.to_vec();
    keep.push(label("reusable", "true"));
    let vol = with_labels(&["volume", "create"], &keep);
    let mut vol: Vec<&str> = vol.iter().map(String::as_str).collect();
    vol.push("drover-test-leftover-cachevol");
    docker(&vol);

    let dir = tempfile::Builder::new()
        .prefix("drover-test-run-")
        .tempdir()
        .expect("tempdir");
    std::fs::write(dir.path().join(".runner_system_id"), system_id).expect("system id");
    let port = free_port();
    let mut drover = Drover::start_in(
        dir,
        &docker_config(
            &sim,
            token,
            1,
            &format!("listen_address = \"127.0.0.1:{port}\""),
        ),
        &[],
        &[],
    );
    let exists = |what: &str, name: &str| {
        std::process::Command::new("docker")
            .args([what, "inspect", name])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    until(
        &drover,
        Duration::from_secs(60),
        "the leftovers ended",
        || {
            (!exists("container", "drover-test-leftover-job")
                && !exists("network", "drover-test-leftover-net")
                && !exists("volume", "drover-test-leftover-tmpvol"))
            .then_some(())
        },
    )
    .await;
    let id = sim.enqueue(job(&["echo after-the-clean-up"]));
    let v = finished(&sim, &drover, id, Duration::from_secs(120)).await;
    assert_eq!(v.state, JobState::Success, "{}", text(&v.trace));
    let log = drover.log();
    assert_eq!(
        log.matches("Removed work a previous drover left").count(),
        3,
        "{log}"
    );
    let m = http_get(port, "/metrics");
    assert!(
        m.contains("drover_leftovers_removed_total{kind=\"container\"} 1"),
        "{m}"
    );
    assert!(
        exists("container", "drover-test-leftover-other"),
        "another runner's"
    );
    assert!(
        exists("volume", "drover-test-leftover-cachevol"),
        "reusable"
    );
    drover.signal(libc::SIGTERM);
    let _ = drover.wait_exit(Duration::from_secs(60));
    docker(&["rm", "-f", "drover-test-leftover-other"]);
    docker(&["volume", "rm", "drover-test-leftover-cachevol"]);
}

/// Two jobs of one project at once on a runner with `concurrent = 2` and `GIT_STRATEGY=fetch`:
/// each gets its own `CI_CONCURRENT_ID`/`CI_CONCURRENT_PROJECT_ID` and so its own reusable
/// builds volume, so neither clone touches the other's working tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_jobs_of_one_project_get_their_own_slot_and_builds_volume() {
    // A short token of its own per run (the 9 characters after `glrt-`, which label the
    // volumes; the other tests' tokens all shorten to `drovertes`): its volume names are new,
    // so the ones this run made are exactly those that were not there before (even after an
    // earlier run failed), whatever the tests running beside it make.
    let token = &format!(
        "glrt-sl{:07}drovertestrunslots",
        executor_common::unix_now() % 10_000_000
    );
    let Some((sim, _g)) = setup(token).await else {
        return;
    };
    sim.create_repo("slots", &[("README.md", "slots\n")])
        .expect("repository");
    let spec = || {
        let mut s = JobSpec::script([
            "echo slot=$CI_CONCURRENT_ID/$CI_CONCURRENT_PROJECT_ID",
            "touch marker-$CI_JOB_ID",
            "echo waiting-for-the-other",
            "sleep 12",
            "ls marker-*",
            "test \"$(ls marker-*)\" = \"marker-$CI_JOB_ID\"",
        ])
        .repo("slots")
        .variable("GIT_STRATEGY", "fetch")
        .image(Some(executor_common::BUILD_IMAGE))
        .pull_policy(&["if-not-present"]);
        // The simulator serves dumb HTTP without refs/pipelines/<id>: the default refspecs,
        // full depth.
        s.refspecs = false;
        s.depth = 0;
        s
    };
    // The run's volumes are told apart from other runs' by what was there before.
    let short = drover::engine::naming::short_token(token);
    let volumes = || {
        executor_common::output_of(std::process::Command::new("docker").args([
            "volume",
            "ls",
            "-q",
            "--filter",
            &format!("label=com.gitlab.gitlab-runner.runner.id={short}"),
        ]))
        .lines()
        .map(str::to_string)
        .collect::<std::collections::BTreeSet<String>>()
    };
    let before = volumes();
    let a = sim.enqueue(spec());
    let b = sim.enqueue(spec());
    let mut drover = Drover::start(&docker_config(&sim, token, 2, ""), &[]);
    // Both held at once (each sleeps 12 s after its marker).
    for id in [a, b] {
        let v = until(&drover, Duration::from_secs(90), "the marker", || {
            sim.job(id).filter(|j| {
                matches!(
                    j.state,
                    JobState::Success | JobState::Failed | JobState::Canceled
                ) || text(&j.trace).contains("\nwaiting-for-the-other")
            })
        })
        .await;
        assert_eq!(v.state, JobState::Running, "{}", text(&v.trace));
    }
    assert_eq!(sim.job(a).map(|j| j.state), Some(JobState::Running));
    let va = finished(&sim, &drover, a, Duration::from_secs(120)).await;
    let vb = finished(&sim, &drover, b, Duration::from_secs(120)).await;
    let (ta, tb) = (text(&va.trace), text(&vb.trace));
    assert_eq!(va.state, JobState::Success, "{ta}");
    assert_eq!(vb.state, JobState::Success, "{tb}");
    let mut slots: Vec<&str> = [&ta, &tb]
        .iter()
        .filter_map(|t| t.lines().find(|l| l.starts_with("slot=")))
        .collect();
    slots.sort_unstable();
    assert_eq!(slots, ["slot=0/0", "slot=1/1"], "{ta}\n{tb}");
    drover.signal(libc::SIGQUIT);
    assert_eq!(exit_code(drover.wait_exit(Duration::from_secs(60))), 0);
    // Each job kept its reusable builds volume (and cache volume): two sets of names.
    let ours: Vec<String> = volumes().difference(&before).cloned().collect();
    for v in &ours {
        let _ = std::process::Command::new("docker")
            .args(["volume", "rm", "-f", v])
            .output();
    }
    let owners: std::collections::BTreeSet<&str> = ours
        .iter()
        .filter_map(|v| v.split("-cache-").next())
        .collect();
    assert_eq!(owners.len(), 2, "{ours:?}");
}

/// GitLab behind a private CA that the runner host trusts (`SSL_CERT_FILE`) but the job images
/// do not, and no CA file configured: the job gets the chain drover verified GitLab's
/// certificate with (`CI_SERVER_TLS_CA_FILE`: GitLab's certificate and the private root), git's
/// `sslCAInfo` points at it, and the clone over HTTPS succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_ca_gitlab_is_cloned_with_the_chain_the_runner_verified() {
    let token = "glrt-drovertestrunprivca1";
    if !executor_common::engine_available() {
        return;
    }
    let _g = executor_common::ENGINE_LOCK.lock().await;
    executor_common::ensure_images();
    let certs = tempfile::tempdir().expect("tempdir");
    let (cert, key) = test_certs::localhost_server(certs.path());
    let sim = Sim::start_tls(gitlab_sim::TlsFiles { cert, key })
        .await
        .expect("simulator");
    sim.add_runner(token);
    sim.create_repo("privca", &[("README.md", "behind a private CA\n")])
        .expect("repository");
    let mut spec = JobSpec::script([
        "cat README.md",
        "echo \"chain-certs=$(grep -c 'BEGIN CERTIFICATE' \"$CI_SERVER_TLS_CA_FILE\")\"",
    ])
    .repo("privca")
    .variable("GIT_STRATEGY", "clone")
    .image(Some(executor_common::BUILD_IMAGE))
    .pull_policy(&["if-not-present"]);
    // Dumb HTTP without refs/pipelines/<id>: the default refspecs, full depth.
    spec.refspecs = false;
    spec.depth = 0;
    let id = sim.enqueue(spec);
    let ca = certs.path().join("ca.pem").display().to_string();
    let mut drover = Drover::start(
        &docker_config(&sim, token, 1, ""),
        &[("SSL_CERT_FILE".to_string(), ca)],
    );
    let v = finished(&sim, &drover, id, Duration::from_secs(120)).await;
    let t = text(&v.trace);
    assert_eq!(v.state, JobState::Success, "{t}\n{}", drover.log());
    assert!(t.contains("\nbehind a private CA\n"), "{t}");
    assert!(t.contains("\nchain-certs=2\n"), "{t}");
    drover.signal(libc::SIGQUIT);
    assert_eq!(exit_code(drover.wait_exit(Duration::from_secs(60))), 0);
}
