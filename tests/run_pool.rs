//! The manager's machine pool driver on legacy-driver-shim + the fake docker-machine: the
//! engine's decisions (IdleCount pre-creation, MaxBuilds removal) become real provider calls,
//! Use returns the endpoint the plugin reports, and a warm job costs at most one
//! docker-machine process.

mod docker_engine;
#[allow(unused_imports)] // only its image names are used here
mod executor_common;
mod provider_support;
mod run_machine_support;
mod run_support;
mod test_certs;

use std::sync::Arc;
use std::time::{Duration, Instant};

use drover::engine::{AcquireResult, RunnerId, RunnerPolicy};
use drover::manager::pool::{NoObserver, Pool};
use drover::provider::cache::CredentialCache;
use drover::provider::plugin::Plugin;
use provider_support::*;
use run_machine_support::machines;
use serde_json::json;

const TOKEN: &str = "glrt-pooltest0123456789";

fn policy(idle_count: i64, max_builds: i64) -> RunnerPolicy {
    let text = format!(
        r#"
concurrent = 2
[[runners]]
  name = "pool"
  url = "http://127.0.0.1:1"
  token = "{TOKEN}"
  executor = "docker+machine"
  [runners.machine]
    IdleCount = {idle_count}
    IdleTime = 600
    MaxBuilds = {max_builds}
    MachineDriver = "none"
    MachineName = "auto-%s"
    MachineOptions = ["url=tcp://127.0.0.1:9"]
"#
    );
    let loaded = drover::config::load_str(text, "test.toml").expect("config");
    drover::engine::policy_from_runner(&loaded.config.runners[0]).expect("policy")
}

fn pool(world: &FakeWorld, p: RunnerPolicy) -> Pool {
    let mut cmd = world.shim(&[]);
    cmd.name_prefix = Some("runner-".into());
    Pool::start(
        vec![p],
        Arc::new(CredentialCache::new(Plugin::new(cmd))),
        Arc::new(NoObserver),
    )
}

async fn acquire_machine(pool: &Pool) -> String {
    let start = Instant::now();
    loop {
        let out = pool.acquire(RunnerId(0)).await.expect("acquire");
        match out.result {
            AcquireResult::Machine(name) => return name,
            AcquireResult::NoFreeMachines => {}
            other => panic!("unexpected acquire result {other:?}"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no idle machine was created"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_count_creates_a_machine_and_max_builds_removes_it_after_release() {
    let world = FakeWorld::new();
    world.set_faults(json!({"config": "ok"}));
    let pool = pool(&world, policy(1, 1));
    // The first pass finds nothing: with IdleCount 1 it pre-creates and refuses the request.
    let first = pool.acquire(RunnerId(0)).await.expect("acquire");
    assert_eq!(first.result, AcquireResult::NoFreeMachines);
    assert_eq!(first.report.created.len(), 1, "{:?}", first.report);
    let name = acquire_machine(&pool).await;
    assert!(name.starts_with("runner-"), "{name}");
    assert!(name.contains("-auto-"), "{name}");
    assert_eq!(machines(&world), vec![name.clone()]);

    let m = pool
        .use_machine(RunnerId(0), Some(name.clone()))
        .await
        .expect("use");
    assert_eq!(m.used.name, name);
    assert!(!m.used.new_data);
    assert_eq!(m.endpoint.host.as_deref(), Some("tcp://127.0.0.1:9"));
    assert!(m.endpoint.tls_verify);
    assert_eq!(
        m.endpoint.tls_cert_path.as_deref(),
        Some(world.machine_dir(&name).as_path())
    );

    // MaxBuilds 1: the release removes it ("Too many builds").
    pool.release(RunnerId(0), name.clone()).await;
    let start = Instant::now();
    while machines(&world).contains(&name) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "machine not removed after MaxBuilds"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let subs = world.subcommands();
    assert!(subs.iter().any(|s| s == "rm"), "{subs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_machine_costs_at_most_one_docker_machine_process_per_job() {
    let world = FakeWorld::new();
    world.set_faults(json!({"config": "ok"}));
    let pool = pool(&world, policy(1, 0));
    let mut per_job = Vec::new();
    for _ in 0..4 {
        let name = acquire_machine(&pool).await;
        let before = world.calls().len();
        let m = pool
            .use_machine(RunnerId(0), Some(name.clone()))
            .await
            .expect("use");
        pool.release(RunnerId(0), m.used.name).await;
        // The release is asynchronous: the next acquire sees it.
        per_job.push(world.calls().len() - before);
    }
    // The first job fetches the credentials (url + inspect -f); later ones are warm.
    eprintln!("docker-machine processes per job through the pool: {per_job:?}");
    assert!(per_job[1..].iter().all(|&n| n <= 1), "{per_job:?}");
}
