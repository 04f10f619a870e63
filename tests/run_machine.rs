//! `drover run` end to end with a `docker+machine` runner: the manager's pool runs the
//! engine's decisions through legacy-driver-shim against the fake docker-machine, whose
//! machines are TLS endpoints (stunnel, client certificates) in front of the real Docker
//! Engine. Jobs from the GitLab simulator run on those machines; IdleCount pre-creates,
//! MaxBuilds removes, `[machine.shutdown_drain]` empties the pool at SIGQUIT, and a warm job
//! costs at most one docker-machine process. It runs against the fake docker-machine and, when
//! `../shared/tools/docker-machine` is there (CI), against the real archived binary too.

mod docker_engine;
mod executor_common;
mod provider_support;
mod run_machine_support;
mod run_support;
mod test_certs;

use std::path::Path;
use std::time::{Duration, Instant};

use gitlab_sim::{JobState, Sim};
use provider_support::docker_machines;
use run_machine_support::*;
use run_support::*;

const TOKEN: &str = "glrt-drovertestrunmach1";

/// Against the fake docker-machine, then against the real archived one when it is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_on_autoscaled_tls_machines_created_and_removed_as_the_engine_decides() {
    for dm in docker_machines() {
        let Some(setup) = machine_world().await else {
            return;
        };
        eprintln!("--- docker-machine: {}", dm.display());
        autoscaled_jobs(&setup, &dm).await;
    }
}

async fn autoscaled_jobs(setup: &MachineWorld, dm: &Path) {
    let (world, port) = (&setup.world, setup.port);
    let sim = Sim::start().await.expect("simulator");
    sim.add_runner(TOKEN);
    let t0 = Instant::now();
    let mut drover = Drover::start(
        &machine_config(&sim, TOKEN, port, 1, 2),
        &env_with(world, dm),
    );

    // IdleCount 1: a machine is created before any job exists.
    let first = until(&drover, Duration::from_secs(60), "an idle machine", || {
        machines(world).into_iter().next()
    })
    .await;
    assert!(first.starts_with("runner-drovertes-e2e-"), "{first}");

    let mut ran_on = Vec::new();
    for i in 0..3 {
        let id = sim.enqueue(job(&[&format!("echo job-{i}-on-machine")]));
        let v = finished(&sim, &drover, id, Duration::from_secs(120)).await;
        let t = String::from_utf8_lossy(&v.trace).into_owned();
        assert_eq!(v.state, JobState::Success, "{t}");
        assert_eq!(v.output_matches, Some(true));
        assert!(t.contains(&format!("job-{i}-on-machine")), "{t}");
        ran_on.push(machine_of(&t));
        eprintln!("job {i} done at {:?}", t0.elapsed());
    }
    // MaxBuilds 2: the first machine served two jobs and was removed ("Too many builds").
    assert_eq!(ran_on[0], first, "{ran_on:?}");
    assert_eq!(ran_on[1], first, "{ran_on:?}");
    assert_ne!(ran_on[2], first, "{ran_on:?}");
    until(
        &drover,
        Duration::from_secs(60),
        "the used-up machine removed",
        || (!machines(world).contains(&first)).then_some(()),
    )
    .await;
    let removals = world
        .calls()
        .into_iter()
        .filter(|(_, a)| a.get(1).map(String::as_str) == Some("rm") && a.contains(&first))
        .count();
    assert!(removals >= 1, "{:?}", world.calls());

    // A warm job on an idle machine: at most one docker-machine process for the job's
    // Acquire + Use (the pre-creation of the next idle machine aside).
    let warm = until(
        &drover,
        Duration::from_secs(60),
        "an idle machine again",
        || {
            machines(world)
                .into_iter()
                .find(|m| m != &ran_on[2])
                .or_else(|| Some(ran_on[2].clone()))
        },
    )
    .await;
    let before = world.calls().len();
    let id = sim.enqueue(job(&["echo warm-job"]));
    let v = finished(&sim, &drover, id, Duration::from_secs(120)).await;
    assert_eq!(v.state, JobState::Success);
    let used = machine_of(&String::from_utf8_lossy(&v.trace));
    let per_job = world.calls()[before..]
        .iter()
        .filter(|(_, a)| {
            a.contains(&used)
                && !matches!(a.get(1).map(String::as_str), Some("create" | "rm" | "stop"))
        })
        .count();
    eprintln!("docker-machine processes for a warm job through drover run: {per_job} (machine {used}, idle candidate {warm})");
    assert!(per_job <= 1, "{per_job}: {:?}", &world.calls()[before..]);

    eprintln!("warm job done at {:?}", t0.elapsed());
    // SIGQUIT: no job running, so drover drains the pool ([machine.shutdown_drain]) and exits 0.
    drover.signal(libc::SIGQUIT);
    let status = drover.wait_exit(Duration::from_secs(120));
    assert_eq!(exit_code(status), 0, "{}", drover.log());
    eprintln!("drained and exited at {:?}", t0.elapsed());
    assert_eq!(machines(world), Vec::<String>::new(), "{}", drover.log());
}

/// A machine whose Docker Engine cannot be reached with its certificates (as after a creation
/// cut short by `kill -9`: docker-machine writes them last) is never where a job runs: the
/// preparation gives it back as unusable, the engine removes it, and the job runs on another
/// machine and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_without_its_certificates_is_removed_and_the_job_runs_on_another() {
    let Some(setup) = machine_world().await else {
        return;
    };
    let (world, port) = (&setup.world, setup.port);
    let token = "glrt-drovertestrunmach2";
    let sim = Sim::start().await.expect("simulator");
    sim.add_runner(token);
    let mut drover = Drover::start(&machine_config(&sim, token, port, 1, 10), &env(world));
    let broken = until(&drover, Duration::from_secs(60), "an idle machine", || {
        machines(world).into_iter().next()
    })
    .await;
    let certs = world.store().join("machines").join(&broken);
    for f in ["ca.pem", "cert.pem", "key.pem"] {
        let _ = std::fs::remove_file(certs.join(f));
    }
    let id = sim.enqueue(job(&["echo ran-on-a-good-machine"]));
    let v = finished(&sim, &drover, id, Duration::from_secs(120)).await;
    let t = String::from_utf8_lossy(&v.trace).into_owned();
    assert_eq!(v.state, JobState::Success, "{t}\n{}", drover.log());
    assert!(t.contains("ran-on-a-good-machine"), "{t}");
    assert_ne!(machine_of(&t), broken, "{t}");
    assert!(t.contains("Preparation failed"), "{t}");
    until(
        &drover,
        Duration::from_secs(60),
        "the broken machine removed",
        || (!machines(world).contains(&broken)).then_some(()),
    )
    .await;
    drover.signal(libc::SIGQUIT);
    assert_eq!(exit_code(drover.wait_exit(Duration::from_secs(120))), 0);
}
