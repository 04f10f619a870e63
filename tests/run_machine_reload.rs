//! `drover run` applies a config reload's runner list live for `docker+machine` runners, as
//! gitlab-runner does: a runner added to config.toml gets its IdleCount machines and its jobs
//! without a restart (it joins the running pool of its provider plugin, legacy-driver-shim
//! over the fake docker-machine here), and a removed runner is no longer fed while its
//! machines stay until the shutdown drain.

mod docker_engine;
mod executor_common;
mod provider_support;
mod run_machine_support;
mod run_support;
mod test_certs;

use std::time::Duration;

use gitlab_sim::{JobState, Sim};
use provider_support::FakeWorld;
use run_machine_support::*;
use run_support::*;

const FIRST: &str = "glrt-reloadaaa1runmach";
const SECOND: &str = "glrt-reloadbbb2runmach";
const PLAIN: &str = "glrt-reloadccc3rundock";

/// The global settings of these tests' config files.
const GLOBALS: &str = "concurrent = 2\ncheck_interval = 1\nshutdown_timeout = 60\n\n[machine.shutdown_drain]\n  enabled = true\n\n";

/// The `[[runners]]` block of `machine_config` for `token`, named after it.
fn runner_block(sim: &Sim, token: &str, port: u16) -> String {
    let full = machine_config(sim, token, port, 2, 10);
    let at = full.find("[[runners]]").expect("a runner block");
    full[at..].replace(
        "name = \"drover-test-run-machine\"",
        &format!("name = \"reload-{}\"", &token[5..14]),
    )
}

fn machines_of(world: &FakeWorld, token: &str) -> Vec<String> {
    let prefix = format!("runner-{}-e2e-", &token[5..14]);
    machines(world)
        .into_iter()
        .filter(|m| m.starts_with(&prefix))
        .collect()
}

/// Waits for the added runner's (SECOND's) IdleCount machine, then runs a job of it that must
/// land on one of its machines; the idle machine's name.
async fn served_by_the_added_runner(
    sim: &Sim,
    drover: &Drover,
    world: &FakeWorld,
    marker: &str,
) -> String {
    let idle = until(
        drover,
        Duration::from_secs(60),
        "the added runner's idle machine",
        || machines_of(world, SECOND).into_iter().next(),
    )
    .await;
    let id = sim.enqueue_for(SECOND, job(&[&format!("echo {marker}")]));
    let v = finished(sim, drover, id, Duration::from_secs(120)).await;
    let t = String::from_utf8_lossy(&v.trace).into_owned();
    assert_eq!(v.state, JobState::Success, "{t}");
    assert!(t.contains(marker), "{t}");
    assert!(
        t.contains(&format!(" via runner-{}-e2e-", &SECOND[5..14])),
        "the job ran on a machine of the added runner (idle: {idle}): {t}"
    );
    idle
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_machine_runner_added_by_a_reload_gets_machines_and_jobs_without_a_restart() {
    let Some(setup) = machine_world().await else {
        return;
    };
    let (world, port) = (&setup.world, setup.port);
    let sim = Sim::start().await.expect("simulator");
    sim.add_runner(FIRST);
    sim.add_runner(SECOND);
    let one = machine_config(&sim, FIRST, port, 2, 10);
    let mut drover = Drover::start(&one, &env(world));
    let first_machine = until(
        &drover,
        Duration::from_secs(60),
        "the first runner's idle machine",
        || machines_of(world, FIRST).into_iter().next(),
    )
    .await;

    // The operator adds a second runner (another token) to config.toml; no signal, no restart.
    let two = format!("{one}\n{}", runner_block(&sim, SECOND, port));
    std::fs::write(drover.config_path(), two).expect("rewrite config");

    // Its IdleCount machine is created and its job runs on one of its machines.
    served_by_the_added_runner(&sim, &drover, world, "served-after-reload").await;
    assert!(
        drover
            .log()
            .contains("joined its provider plugin's machine pool"),
        "{}",
        drover.log()
    );

    // The first runner is removed: no job of it is taken any more, its machine stays.
    let only_second = format!("{GLOBALS}{}", runner_block(&sim, SECOND, port));
    std::fs::write(drover.config_path(), only_second).expect("rewrite config");
    until(
        &drover,
        Duration::from_secs(30),
        "the removal applied",
        || {
            drover
                .log()
                .contains("docker+machine runner removed")
                .then_some(())
        },
    )
    .await;
    let orphan_job = sim.enqueue_for(FIRST, job(&["echo never"]));
    let id = sim.enqueue_for(SECOND, job(&["echo still-served"]));
    let v = finished(&sim, &drover, id, Duration::from_secs(120)).await;
    assert_eq!(v.state, JobState::Success);
    assert_eq!(
        sim.job(orphan_job).map(|j| j.state),
        Some(JobState::Pending),
        "a job of the removed runner was taken"
    );
    assert!(
        machines(world).contains(&first_machine),
        "the removed runner's machine is kept until restart: {:?}",
        machines(world)
    );

    // SIGQUIT: the shutdown drain removes every machine, the removed runner's included.
    drover.signal(libc::SIGQUIT);
    let status = drover.wait_exit(Duration::from_secs(120));
    assert_eq!(exit_code(status), 0, "{}", drover.log());
    assert_eq!(machines(world), Vec::<String>::new(), "{}", drover.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_starts_the_machine_pool_of_a_provider_plugin_not_yet_running() {
    let Some(setup) = machine_world().await else {
        return;
    };
    let (world, port) = (&setup.world, setup.port);
    let sim = Sim::start().await.expect("simulator");
    sim.add_runner(PLAIN);
    sim.add_runner(SECOND);
    // At start only a plain docker runner: no machine pool runs.
    let docker = docker_config(&sim, PLAIN, 2, "");
    let plain = &docker[docker.find("[[runners]]").expect("a runner block")..];
    let mut drover = Drover::start(&format!("{GLOBALS}{plain}"), &env(world));
    let id = sim.enqueue_for(PLAIN, job(&["echo plain-job"]));
    assert_eq!(
        finished(&sim, &drover, id, Duration::from_secs(120))
            .await
            .state,
        JobState::Success
    );
    let ledger = drover.dir.path().join(".drover-machines.json");
    assert!(!ledger.exists(), "no pool, no ledger yet");

    // A docker+machine runner is added: its plugin's pool starts, with its ledger.
    let both = format!("{GLOBALS}{plain}\n{}", runner_block(&sim, SECOND, port));
    std::fs::write(drover.config_path(), both).expect("rewrite config");
    let idle = served_by_the_added_runner(&sim, &drover, world, "machine-job-after-reload").await;
    until(
        &drover,
        Duration::from_secs(30),
        "the pool's ledger",
        || {
            std::fs::read_to_string(&ledger)
                .ok()
                .filter(|l| l.contains(&idle))
        },
    )
    .await;

    drover.signal(libc::SIGQUIT);
    let status = drover.wait_exit(Duration::from_secs(120));
    assert_eq!(exit_code(status), 0, "{}", drover.log());
    assert_eq!(machines(world), Vec::<String>::new(), "{}", drover.log());
}
