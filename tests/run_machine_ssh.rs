//! `drover run` end to end with a `docker+machine` runner whose machines are reached over SSH
//! only: the fake docker-machine records each machine as a cloud driver would (IP address, SSH
//! port, user and key in its `config.json`) for a real OpenSSH server on 127.0.0.1 in front of
//! this host's Engine, its Docker URL points at a closed port and no machine has certificates,
//! and legacy-driver-shim runs with its SSH opt-in (`DROVER_SHIM_SSH=1` in drover's
//! environment). Covered: a job with a service and a cache passes on such a machine; a machine
//! whose sshd dies mid-job fails that job as a system failure and is removed before another
//! job could be handed to it.

mod docker_engine;
mod executor_common;
mod provider_support;
mod run_machine_support;
mod run_support;
mod ssh_support;
mod test_certs;

use std::process::Command;
use std::time::Duration;

use gitlab_sim::{JobState, Sim};
use provider_support::FakeWorld;
use run_machine_support::{env, machine_of, machines};
use run_support::*;
use ssh_support::Sshd;

const SERVICE_IMAGE: &str = "drover-test-executor-service:latest";

/// New machines are this sshd's (the fake records its login at `create`).
fn machines_behind(world: &FakeWorld, sshd: &Sshd) {
    world.set_faults(serde_json::json!({"ssh_login": {
        "port": sshd.port,
        "user": sshd.user,
        "key": sshd.path("user_key"),
    }}));
}

/// drover's environment: the fake docker-machine and the shim's SSH opt-in.
fn ssh_env(world: &FakeWorld) -> Vec<(String, String)> {
    let mut e = env(world);
    e.push(("DROVER_SHIM_SSH".into(), "1".into()));
    e
}

/// A docker+machine runner whose machines' Docker URL is a port nothing listens on (so only
/// SSH can reach them); jobs on the default bridge, as on a machine of their own.
fn ssh_machine_config(sim: &Sim, token: &str, idle_count: u32) -> String {
    format!(
        r#"concurrent = 1
check_interval = 1
shutdown_timeout = 60

[[runners]]
  name = "drover-test-run-machine-ssh"
  url = "{url}"
  token = "{token}"
  executor = "docker+machine"
  [runners.docker]
    image = "{image}"
    helper_image = "{helper}"
    pull_policy = ["if-not-present"]
    volumes = ["/cache"]
  [runners.machine]
    IdleCount = {idle_count}
    IdleTime = 600
    MaxBuilds = 10
    MachineDriver = "none"
    MachineName = "ssh-%s"
    MachineOptions = ["url=tcp://127.0.0.1:{closed}"]
"#,
        url = sim.url(),
        image = executor_common::BUILD_IMAGE,
        helper = executor_common::HELPER_IMAGE,
        closed = free_port(),
    )
}

/// Stops drover as an operator would (SIGQUIT: finish jobs, then exit 0) and removes what the
/// runner's jobs left.
fn stop_and_clean(mut drover: Drover, token: &str) {
    drover.signal(libc::SIGQUIT);
    assert_eq!(
        exit_code(drover.wait_exit(Duration::from_secs(120))),
        0,
        "{}",
        drover.log()
    );
    remove_leftovers(token);
}

/// Removes what jobs of runner `token` left on the Engine (a job whose SSH link died could
/// not clean up after itself).
fn remove_leftovers(token: &str) {
    let short = drover::engine::naming::short_token(token);
    let (containers, _) = executor_common::leftovers(short);
    for c in &containers {
        let _ = Command::new("docker").args(["rm", "-f", "-v", c]).output();
    }
    let volumes = Command::new("docker")
        .args([
            "volume",
            "ls",
            "-q",
            "--filter",
            &format!("label=com.gitlab.gitlab-runner.runner.id={short}"),
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for v in volumes.lines().filter(|l| !l.is_empty()) {
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f", v])
            .output();
    }
}

/// The subcommands docker-machine ran for machine `name`.
fn dm_commands_for(world: &FakeWorld, name: &str) -> Vec<String> {
    world
        .calls()
        .into_iter()
        .filter(|(_, a)| a.iter().any(|x| x == name))
        .filter_map(|(_, a)| a.get(1).cloned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_with_a_service_and_a_cache_runs_on_an_ssh_only_machine() {
    if !executor_common::engine_available() {
        return;
    }
    let _engine = executor_common::ENGINE_LOCK.lock().await;
    executor_common::ensure_images();
    let _ = provider_support::shim_bin();
    let token = "glrt-drovertestrunssh1";
    let sshd = Sshd::start();
    let world = FakeWorld::new();
    machines_behind(&world, &sshd);
    let sim = Sim::start().await.expect("simulator");
    sim.add_runner(token);
    let drover = Drover::start(&ssh_machine_config(&sim, token, 1), &ssh_env(&world));

    // IdleCount 1: a machine before any job; its record is an SSH login, with no certificates.
    let machine = until(&drover, Duration::from_secs(60), "an idle machine", || {
        machines(&world).into_iter().next()
    })
    .await;
    let dir = world.machine_dir(&machine);
    assert!(
        !dir.join("cert.pem").exists(),
        "the machine has certificates"
    );

    let id = sim.enqueue(
        job(&[
            "exec 3<>/dev/tcp/web/8080 && printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' >&3 && echo \"reached web: $(tail -n 1 <&3)\"",
            "mkdir -p vendor && echo cached-over-ssh > vendor/file.txt",
            "echo ssh-machine-$((6*7))",
        ])
        .service(SERVICE_IMAGE, "web")
        .cache("ssh-e2e", &["vendor/"], "pull-push"),
    );
    let v = finished(&sim, &drover, id, Duration::from_secs(180)).await;
    let t = String::from_utf8_lossy(&v.trace).into_owned();
    assert_eq!(v.state, JobState::Success, "{t}\n{}", drover.log());
    assert!(t.contains("ssh-machine-42"), "{t}");
    assert!(t.contains("reached web: drover-service-ok"), "{t}");
    assert!(t.contains("Created cache"), "{t}");
    assert_eq!(machine_of(&t), machine, "{t}");

    // Reached over SSH only: sshd started the sessions, the host key was pinned at first
    // check, and docker-machine was never asked for the TLS endpoint (`url`, `config`).
    assert!(sshd.commands_started() >= 2, "sshd started no sessions");
    assert!(
        dir.join("drover_known_hosts").is_file(),
        "no pinned host key"
    );
    let asked = dm_commands_for(&world, &machine);
    assert!(
        !asked.iter().any(|c| c == "url" || c == "config"),
        "docker-machine was asked for the TLS endpoint: {asked:?}"
    );

    stop_and_clean(drover, token);
}

/// sshd dies while a job runs on its machine: the job ends as a system failure, and the
/// machine is checked again at once and removed, before any other job is handed to it (the
/// shim's can-connect answer for it is still cached as positive, so only a fresh check over
/// SSH finds it broken). The next job gets a new machine and never sees the broken one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_whose_sshd_died_mid_job_is_removed_before_another_job() {
    if !executor_common::engine_available() {
        return;
    }
    let _engine = executor_common::ENGINE_LOCK.lock().await;
    executor_common::ensure_images();
    let _ = provider_support::shim_bin();
    let token = "glrt-drovertestrunssh2";
    let mut sshd = Sshd::start();
    let world = FakeWorld::new();
    machines_behind(&world, &sshd);
    let sim = Sim::start().await.expect("simulator");
    sim.add_runner(token);
    // IdleCount 0: machines are made for jobs only, so every machine here is accounted for.
    let drover = Drover::start(&ssh_machine_config(&sim, token, 0), &ssh_env(&world));

    // Two jobs on the machine: the second's Acquire checked it (a positive, cached answer).
    let mut first = String::new();
    for i in 0..2 {
        let id = sim.enqueue(job(&[&format!("echo warm-{i}")]));
        let v = finished(&sim, &drover, id, Duration::from_secs(120)).await;
        let t = String::from_utf8_lossy(&v.trace).into_owned();
        assert_eq!(v.state, JobState::Success, "{t}\n{}", drover.log());
        if i == 0 {
            first = machine_of(&t);
        } else {
            assert_eq!(machine_of(&t), first, "{t}");
        }
    }

    let id = sim.enqueue(job(&["echo job-is-$((1+1))-running", "sleep 120"]));
    running_with(&sim, &drover, id, "job-is-2-running").await;
    // New machines from now on are another sshd's; this one dies.
    let other = Sshd::start();
    machines_behind(&world, &other);
    sshd.kill_all();
    let v = finished(&sim, &drover, id, Duration::from_secs(60)).await;
    let t = String::from_utf8_lossy(&v.trace).into_owned();
    assert_eq!(v.state, JobState::Failed, "{t}");
    assert_eq!(
        v.failure_reason.as_deref(),
        Some("runner_system_failure"),
        "{t}"
    );
    assert_eq!(machine_of(&t), first, "{t}");

    // Removed without another job asking for it.
    until(
        &drover,
        Duration::from_secs(30),
        "the machine whose sshd died removed",
        || (!machines(&world).contains(&first)).then_some(()),
    )
    .await;

    let id = sim.enqueue(job(&["echo on-a-new-machine"]));
    let v = finished(&sim, &drover, id, Duration::from_secs(120)).await;
    let t = String::from_utf8_lossy(&v.trace).into_owned();
    assert_eq!(v.state, JobState::Success, "{t}\n{}", drover.log());
    assert_ne!(machine_of(&t), first, "{t}");
    assert!(!t.contains("Preparation failed"), "{t}");
    assert!(
        other.commands_started() >= 1,
        "the new machine was not reached over SSH"
    );

    stop_and_clean(drover, token);
}
