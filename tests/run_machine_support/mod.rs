//! Shared by the docker+machine end-to-end test and the manager figures: a TLS endpoint
//! (stunnel with client certificates) in front of the real Engine for the fake machines, the
//! environment that puts the fake docker-machine on drover's PATH, and the runner config.

#![allow(dead_code)]

use std::path::Path;

use gitlab_sim::Sim;

use crate::docker_engine;
use crate::executor_common;
use crate::provider_support::{fake_dm, root, FakeWorld};
use crate::test_certs::{machine_tls, stunnel_binary, stunnel_front};

pub use crate::test_certs::Killed;

pub fn stunnel() -> &'static str {
    stunnel_binary().expect("stunnel4 is not installed (fixtures/setup/provider.sh installs it)")
}

/// The TLS endpoint every fake machine points at: stunnel requiring a client certificate from
/// the store's CA, in front of /var/run/docker.sock.
pub async fn tls_endpoint(world: &FakeWorld) -> (Killed, u16) {
    let certs = world.store().join("certs");
    let tls = world.dir.path().join("tls");
    machine_tls(&certs, &tls);
    stunnel_front(stunnel(), &tls, docker_engine::SOCKET).await
}

/// drover's environment: the fake docker-machine first on PATH (the shim runs
/// `docker-machine`), its store, call log and faults.
pub fn env(world: &FakeWorld) -> Vec<(String, String)> {
    env_with(world, &fake_dm())
}

/// drover's environment with `dm` as `docker-machine`: the fake, or the real archived binary
/// through `fixtures/real-docker-machine/docker-machine`, which runs it and copies the client
/// certificates into each created machine's folder as a provisioning driver would (the real
/// `none` driver does not provision). Both write the same call log.
pub fn env_with(world: &FakeWorld, dm: &Path) -> Vec<(String, String)> {
    let bin = world.dir.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir bin");
    let link = bin.join("docker-machine");
    let real = dm != fake_dm();
    let target = if real {
        root().join("fixtures/real-docker-machine/docker-machine")
    } else {
        dm.to_path_buf()
    };
    if !link.exists() {
        std::os::unix::fs::symlink(target, &link).expect("symlink");
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut env = world.env();
    env.retain(|(k, _)| k != "SHIM_LOG");
    env.push(("PATH".into(), path));
    if real {
        env.push((
            "DROVER_REAL_DOCKER_MACHINE".into(),
            dm.display().to_string(),
        ));
    }
    env
}

pub fn machine_config(
    sim: &Sim,
    token: &str,
    port: u16,
    concurrent: u32,
    max_builds: u32,
) -> String {
    format!(
        r#"concurrent = {concurrent}
check_interval = 1
shutdown_timeout = 60

[machine.shutdown_drain]
  enabled = true

[[runners]]
  name = "drover-test-run-machine"
  url = "{url}"
  token = "{token}"
  executor = "docker+machine"
  [runners.docker]
    image = "{image}"
    helper_image = "{helper}"
    pull_policy = ["if-not-present"]
    network_mode = "host"
    volumes = ["/cache"]
  [runners.machine]
    IdleCount = 1
    IdleTime = 600
    MaxBuilds = {max_builds}
    MachineDriver = "none"
    MachineName = "e2e-%s"
    MachineOptions = ["url=tcp://127.0.0.1:{port}"]
"#,
        url = sim.url(),
        image = executor_common::BUILD_IMAGE,
        helper = executor_common::HELPER_IMAGE,
    )
}

/// The machines in the world's store, sorted.
pub fn machines(world: &FakeWorld) -> Vec<String> {
    crate::provider_support::store_machines(&world.store())
}

/// A docker+machine end-to-end test's world: the Engine to itself, the test images,
/// legacy-driver-shim beside the drover binary (where `drover run` looks for it), a fake
/// docker-machine that copies certificates, and the TLS endpoint its machines point at.
pub struct MachineWorld {
    pub proxy: Killed,
    pub port: u16,
    pub world: FakeWorld,
    pub engine: tokio::sync::MutexGuard<'static, ()>,
}

/// Sets up a [`MachineWorld`]; `None` without a Docker Engine (the test then passes empty).
pub async fn machine_world() -> Option<MachineWorld> {
    if !executor_common::engine_available() {
        return None;
    }
    let engine = executor_common::ENGINE_LOCK.lock().await;
    executor_common::ensure_images();
    let _ = crate::provider_support::shim_bin();
    let world = FakeWorld::new();
    world.set_faults(serde_json::json!({"copy_certs": true}));
    let (proxy, port) = tls_endpoint(&world).await;
    Some(MachineWorld {
        proxy,
        port,
        world,
        engine,
    })
}

/// The machine a job ran on, from its trace ("Running on … via <machine>...").
pub fn machine_of(trace: &str) -> String {
    let at = trace
        .find(" via ")
        .unwrap_or_else(|| panic!("no machine in {trace}"));
    trace[at + 5..]
        .split(|c: char| c == '.' || c.is_whitespace())
        .next()
        .unwrap_or_default()
        .to_string()
}
