//! legacy-driver-shim against the fake docker-machine: every operation and fault, the argv it
//! runs, deadlines with SIGKILL, cancellation, the can-connect cache, and the number of
//! docker-machine processes a job costs compared with upstream.

mod provider_support;

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use drover::provider::cache::CredentialCache;
use drover::provider::plugin::Plugin;
use drover::provider::protocol::CreateParams;
use drover::provider::{Call, Endpoint, ErrorKind, Provider, ProviderError};
use provider_support::*;
use serde_json::json;

const PREFIX: &str = "drover-test-provider-";

fn params(name: &str, url: &str) -> CreateParams {
    CreateParams {
        name: name.into(),
        driver: "none".into(),
        options: vec![format!("url={url}")],
        options_with_name: vec![],
    }
}

fn kind<T: std::fmt::Debug>(r: Result<T, ProviderError>) -> ErrorKind {
    match r {
        Err(e) => e.kind(),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

async fn wait_for_call(world: &FakeWorld, sub: &str) -> u32 {
    let start = Instant::now();
    loop {
        if let Some((pid, _)) = world
            .calls()
            .into_iter()
            .find(|(_, a)| a.get(1).map(String::as_str) == Some(sub))
        {
            return pid;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no {sub} call");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn gone_soon(pid: u32) -> bool {
    for _ in 0..60 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_travel_as_argv_never_through_a_shell() {
    let world = FakeWorld::new();
    let p = Plugin::new(world.shim(&[]));
    let name = format!("{PREFIX}argv");
    let marker = world.dir.path().join("pwned");
    let evil = format!(
        "engine-label=x; touch {} $(touch {})",
        marker.display(),
        marker.display()
    );
    let req = CreateParams {
        name: name.clone(),
        driver: "none".into(),
        options: vec!["url=tcp://127.0.0.1:9".into(), evil.clone()],
        options_with_name: vec!["engine-env=NAME=%s".into()],
    };
    p.create(&req, &Call::new()).await.expect("create");
    let calls = world.calls();
    assert_eq!(
        calls[0].1,
        [
            "--bugsnag-api-token=no-report".to_string(),
            "create".into(),
            "--driver".into(),
            "none".into(),
            "--url=tcp://127.0.0.1:9".into(),
            format!("--{evil}"),
            format!("--engine-env=NAME={name}"),
            name.clone(),
        ]
    );
    assert!(!marker.exists(), "a shell ran");
    let cfg: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(world.machine_dir(&name).join("config.json")).expect("config"),
    )
    .expect("json");
    assert_eq!(cfg["ConfigVersion"], 3);
    assert_eq!(
        cfg["HostOptions"]["AuthOptions"]["StorePath"],
        world.machine_dir(&name).display().to_string()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_create_leaves_a_partial_store_that_removal_cleans() {
    let world = FakeWorld::new();
    world.set_faults(json!({"create_fail_rate": 1.0}));
    let p = Plugin::new(world.shim(&[]));
    let name = format!("{PREFIX}partial");
    let err = p
        .create(&params(&name, "tcp://127.0.0.1:9"), &Call::new())
        .await
        .expect_err("create must fail");
    assert_eq!(err.kind(), ErrorKind::Failed);
    assert!(
        err.to_string()
            .contains("Error in driver during machine creation"),
        "{err}"
    );
    // The record stays behind, as docker-machine leaves it: exists, listed, removable.
    assert!(world.machine_dir(&name).join("config.json").is_file());
    assert!(p.exists(&name, &Call::new()).await.expect("exists"));
    let listed = p.list(&Call::new()).await.expect("list");
    assert!(listed.iter().any(|m| m.name == name));
    p.stop(&name, &Call::new())
        .await
        .expect_err("none cannot stop");
    assert!(p.remove(&name, &Call::new()).await.expect("remove").existed);
    assert!(!world.machine_dir(&name).exists());
    assert_eq!(
        world.subcommands(),
        ["create", "inspect", "stop", "rm"],
        "upstream's removal sequence"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precreate_failures_and_bad_configs_leave_nothing() {
    let world = FakeWorld::new();
    world.set_faults(json!({"create_fail_rate": 1.0, "create_fail_stage": "precreate"}));
    let p = Plugin::new(world.shim(&[]));
    let name = format!("{PREFIX}pre");
    let r = p
        .create(&params(&name, "tcp://127.0.0.1:9"), &Call::new())
        .await;
    assert_eq!(kind(r), ErrorKind::InvalidConfig);
    assert!(!world.machine_dir(&name).exists());
    assert!(!p.exists(&name, &Call::new()).await.expect("exists"));

    world.set_faults(json!({}));
    let mut bad = params(&name, "tcp://127.0.0.1:9");
    bad.driver = "nosuchdriver".into();
    assert_eq!(
        kind(p.create(&bad, &Call::new()).await),
        ErrorKind::InvalidConfig
    );
    let mut bad = params(&name, "tcp://127.0.0.1:9");
    bad.options.push("bogus-flag=1".into());
    assert_eq!(
        kind(p.create(&bad, &Call::new()).await),
        ErrorKind::InvalidConfig
    );
    let bad = CreateParams {
        options: vec![],
        ..params(&name, "")
    };
    assert_eq!(
        kind(p.create(&bad, &Call::new()).await),
        ErrorKind::InvalidConfig
    );
    // Names are path components: anything but a hostname is refused before any process.
    let n = world.calls().len();
    let r = p
        .create(&params("../escape", "tcp://127.0.0.1:9"), &Call::new())
        .await;
    assert_eq!(kind(r), ErrorKind::BadRequest);
    assert_eq!(world.calls().len(), n);
    assert!(!world.machine_dir(&name).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rm_failure_keeps_the_record_and_force_remove_deletes_it() {
    let world = FakeWorld::new();
    let p = Plugin::new(world.shim(&[]));
    let name = format!("{PREFIX}rmfail");
    p.create(&params(&name, "tcp://127.0.0.1:9"), &Call::new())
        .await
        .expect("create");
    world.set_faults(json!({"rm_fail": true}));
    assert_eq!(kind(p.remove(&name, &Call::new()).await), ErrorKind::Failed);
    assert!(world.machine_dir(&name).is_dir(), "rm -y keeps the record");
    assert!(
        p.force_remove(&name, &Call::new())
            .await
            .expect("rm -f")
            .existed
    );
    assert!(!world.machine_dir(&name).exists(), "rm -f deletes it");
    assert!(
        !p.force_remove(&name, &Call::new())
            .await
            .expect("again")
            .existed
    );
    let rms: Vec<_> = world
        .calls()
        .into_iter()
        .filter(|(_, a)| a[1] == "rm")
        .map(|(_, a)| a[2].clone())
        .collect();
    assert_eq!(rms, ["-y", "-f"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_command_is_killed_at_the_deadline() {
    let world = FakeWorld::new();
    world.set_faults(json!({"hang": ["create", "stop"]}));
    let p = Plugin::new(world.shim(&[]));
    let name = format!("{PREFIX}hang");
    let start = Instant::now();
    let r = p
        .create(
            &params(&name, "tcp://127.0.0.1:9"),
            &Call::with_timeout(Duration::from_secs(2)),
        )
        .await;
    let e = r.expect_err("must time out");
    assert_eq!(e.kind(), ErrorKind::Timeout);
    assert!(
        matches!(e, ProviderError::Plugin { .. }),
        "the shim reports it: {e}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(6),
        "{:?}",
        start.elapsed()
    );
    let pid = wait_for_call(&world, "create").await;
    assert!(
        gone_soon(pid).await,
        "docker-machine {pid} survived its deadline"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_call_kills_the_command() {
    let world = FakeWorld::new();
    world.set_faults(json!({"hang": ["create"]}));
    let p = Plugin::new(world.shim(&[]));
    let name = format!("{PREFIX}cancel");
    let call = Call::new();
    let token = call.cancel.clone();
    let req = params(&name, "tcp://127.0.0.1:9");
    let record = world.machine_dir(&name).join("config.json");
    let (r, pid) = tokio::join!(p.create(&req, &call), async {
        let pid = wait_for_call(&world, "create").await;
        // Cancel while the "driver" hangs, after the record was written.
        let start = Instant::now();
        while !record.is_file() {
            assert!(start.elapsed() < Duration::from_secs(20), "no record");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        token.cancel();
        pid
    });
    assert_eq!(kind(r), ErrorKind::Cancelled);
    assert!(
        gone_soon(pid).await,
        "docker-machine {pid} survived cancellation"
    );
    // The plugin itself is still serving, and the killed create left its record behind
    // (spec §6), for the removal sequence to clean up.
    assert!(p.exists(&name, &Call::new()).await.expect("exists"));
    assert!(p.remove(&name, &Call::new()).await.expect("remove").existed);
    assert_eq!(p.spawn_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn can_connect_caches_positives_only() {
    let world = FakeWorld::new();
    let p = Plugin::new(world.shim(&[]));
    let name = format!("{PREFIX}cc");
    p.create(&params(&name, "tcp://127.0.0.1:9"), &Call::new())
        .await
        .expect("create");
    world.set_faults(json!({"config": "fail"}));
    assert!(!p.can_connect(&name, &Call::new()).await.expect("cc"));
    assert!(!p.can_connect(&name, &Call::new()).await.expect("cc"));
    world.set_faults(json!({"config": "ok"}));
    assert!(p.can_connect(&name, &Call::new()).await.expect("cc"));
    world.set_faults(json!({"config": "fail"}));
    assert!(p.can_connect(&name, &Call::new()).await.expect("cached"));
    let configs = world
        .subcommands()
        .iter()
        .filter(|s| *s == "config")
        .count();
    assert_eq!(
        configs, 3,
        "two negatives uncached, one positive then cached"
    );
    // Removal drops the cache entry.
    p.remove(&name, &Call::new()).await.expect("remove");
    assert!(!p.can_connect(&name, &Call::new()).await.expect("cc"));
}

/// One job's provider calls; returns how many docker-machine processes they started.
async fn job(p: &CredentialCache<Plugin>, world: &FakeWorld, name: &str) -> usize {
    let before = world.calls().len();
    assert!(p.can_connect(name, &Call::new()).await.expect("acquire"));
    let e = p.credentials(name, &Call::new()).await.expect("use");
    assert!(matches!(e, Endpoint::TcpTls { .. }));
    world.calls().len() - before
}

/// Process count per job on a warm machine: the provider calls the manager makes for one job
/// are `can_connect` (acquire) then `credentials` (use), through the credentials cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_job_costs_at_most_one_docker_machine_process() {
    let mut figures = Vec::new();
    for (ttl, upstream_warm) in [("300", 3), ("0", 4)] {
        let world = FakeWorld::new();
        world.set_faults(json!({"config": "ok"}));
        let p = CredentialCache::new(Plugin::new(world.shim(&["--can-connect-cache-ttl", ttl])));
        let name = format!("{PREFIX}job");
        p.create(&params(&name, "tcp://127.0.0.1:9"), &Call::new())
            .await
            .expect("create");
        let cold = job(&p, &world, &name).await;
        let mut warm = Vec::new();
        for _ in 0..5 {
            warm.push(job(&p, &world, &name).await);
        }
        assert_eq!(cold, 3, "first job: config + url + inspect -f");
        let expected = if ttl == "0" { 1 } else { 0 };
        assert!(warm.iter().all(|&n| n == expected), "ttl {ttl}: {warm:?}");
        assert!(warm.iter().all(|&n| n <= 1));
        figures.push(format!(
            "can-connect cache {ttl}s: drover cold {cold}, warm {expected} per job; upstream {upstream_warm} per job"
        ));
        // A failed connection drops the cached credentials: the next job fetches them again.
        p.invalidate(&name);
        assert_eq!(job(&p, &world, &name).await, if ttl == "0" { 3 } else { 2 });
    }
    eprintln!("{}", figures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_come_from_url_and_store_path_and_empty_output_fails() {
    let world = FakeWorld::new();
    let p = Plugin::new(world.shim(&[]));
    let name = format!("{PREFIX}cred");
    p.create(&params(&name, "tcp://127.0.0.1:2376"), &Call::new())
        .await
        .expect("create");
    let e = p
        .credentials(&name, &Call::new())
        .await
        .expect("credentials");
    assert_eq!(
        e,
        Endpoint::TcpTls {
            host: "tcp://127.0.0.1:2376".into(),
            cert_dir: world.machine_dir(&name).display().to_string(),
            tls_verify: true,
        }
    );
    let tail: Vec<_> = world.calls().into_iter().skip(1).map(|(_, a)| a).collect();
    assert_eq!(tail[0][1..], ["url".to_string(), name.clone()]);
    assert_eq!(
        tail[1][1..],
        [
            "inspect".to_string(),
            name.clone(),
            "-f".into(),
            "{{.HostOptions.AuthOptions.StorePath}}".into()
        ]
    );
    world.set_faults(json!({"empty_output": ["url"]}));
    assert_eq!(
        kind(p.credentials(&name, &Call::new()).await),
        ErrorKind::Failed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlong_output_line_is_cut_and_named() {
    let world = FakeWorld::new();
    let p = Plugin::new(world.shim(&[]));
    let name = format!("{PREFIX}long");
    p.create(&params(&name, "tcp://127.0.0.1:2376"), &Call::new())
        .await
        .expect("create");
    world.set_faults(json!({"long_output": ["url"]}));
    let e = p
        .credentials(&name, &Call::new())
        .await
        .expect_err("a cut value is no value");
    assert_eq!(e.kind(), ErrorKind::Failed, "{e}");
    let message = e.to_string();
    assert!(
        message.contains(&format!("docker-machine url {name}"))
            && message.contains("longer than 1048576 bytes (the limit)"),
        "the error names the command and the limit: {message}"
    );
    // The shim is still serving.
    world.set_faults(json!({}));
    assert!(p.credentials(&name, &Call::new()).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_list_read_the_store_without_processes() {
    let world = FakeWorld::new();
    let machines = world.store().join("machines");
    let g = machines.join(format!("{PREFIX}gce"));
    std::fs::create_dir_all(&g).expect("mkdir");
    std::fs::write(
        g.join("config.json"),
        json!({"ConfigVersion": 3, "DriverName": "google", "Driver": {
            "Zone": "europe-west1-b", "MachineType": "n1-standard-2", "Project": "ci",
            "ResolvedZone": "europe-west1-c", "ResolvedMachineType": "", "BulkInsert": true,
            "InstanceGroupManager": "", "RegionInstanceGroupManager": "mig"}})
        .to_string(),
    )
    .expect("write");
    std::fs::create_dir_all(machines.join(".hidden")).expect("mkdir");
    std::fs::create_dir_all(machines.join(format!("{PREFIX}noconfig"))).expect("mkdir");
    std::fs::write(machines.join("stray-file"), "").expect("write");
    let p = Plugin::new(world.shim(&[]));
    let i = p
        .inspect(&format!("{PREFIX}gce"), &Call::new())
        .await
        .expect("inspect");
    assert_eq!(i.driver, "google");
    assert_eq!(i.labels["zone"], "europe-west1-b");
    assert_eq!(i.labels["resolved_zone"], "europe-west1-c");
    assert_eq!(i.labels["bulk_insert"], "true");
    assert_eq!(i.labels["region_instance_group_manager"], "mig");
    let t = i.target_labels();
    assert_eq!(t[0].1, "europe-west1-c");
    assert_eq!(t[1].1, "europe-west1");
    assert_eq!(t[3].1, "n1-standard-2");
    let mut names: Vec<_> = p
        .list(&Call::new())
        .await
        .expect("list")
        .into_iter()
        .map(|m| m.name)
        .collect();
    names.sort();
    assert_eq!(names, [format!("{PREFIX}gce"), format!("{PREFIX}noconfig")]);
    // exists: no config.json means false without running docker-machine.
    assert!(!p
        .exists(&format!("{PREFIX}noconfig"), &Call::new())
        .await
        .expect("exists"));
    assert_eq!(
        kind(p.inspect(&format!("{PREFIX}absent"), &Call::new()).await),
        ErrorKind::NotFound
    );
    assert!(world.calls().is_empty(), "{:?}", world.calls());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_prefix_protects_foreign_machines() {
    let world = FakeWorld::new();
    let mut cmd = world.shim(&["--name-prefix", "runner-abc-"]);
    cmd.name_prefix = None;
    let p = Plugin::new(cmd);
    let name = "someone-elses-machine";
    p.create(&params(name, "tcp://127.0.0.1:9"), &Call::new())
        .await
        .expect("create");
    assert_eq!(kind(p.remove(name, &Call::new()).await), ErrorKind::Refused);
    assert_eq!(
        kind(p.force_remove(name, &Call::new()).await),
        ErrorKind::Refused
    );
    assert_eq!(kind(p.stop(name, &Call::new()).await), ErrorKind::Refused);
    assert!(world.machine_dir(name).is_dir());
    assert_eq!(world.subcommands(), ["create"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_docker_machine_is_a_config_error() {
    let world = FakeWorld::new();
    let mut cmd = world.shim(&[]);
    cmd.args = vec![
        "--docker-machine".into(),
        "/nonexistent/docker-machine".into(),
    ];
    let p = Plugin::new(cmd);
    let e = p
        .create(
            &params(&format!("{PREFIX}x"), "tcp://127.0.0.1:9"),
            &Call::new(),
        )
        .await
        .expect_err("no executable");
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    assert!(e.to_string().contains("--docker-machine"), "{e}");
}

#[test]
fn output_lines_are_logged_with_operation_and_machine_name() {
    let world = FakeWorld::new();
    let name = format!("{PREFIX}logs");
    let mut child = Command::new(shim_bin())
        .args(["--docker-machine"])
        .arg(fake_dm())
        .envs(world.env())
        .env("SHIM_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shim");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut responses = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut stdout = String::new();
    for req in [
        r#"{"id":1,"op":"handshake","protocol_version":1}"#.to_string(),
        format!(
            r#"{{"id":2,"op":"create","name":"{name}","driver":"none","options":["url=tcp://127.0.0.1:9"]}}"#
        ),
        format!(r#"{{"id":3,"op":"stop","name":"{name}"}}"#),
    ] {
        writeln!(stdin, "{req}").expect("write");
        let line = responses.next().expect("a response").expect("read");
        stdout.push_str(&line);
        stdout.push('\n');
    }
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
    for line in stdout.lines() {
        serde_json::from_str::<serde_json::Value>(line).expect("stdout is protocol only");
    }
    let has = |text: &str, op: &str| {
        stderr.lines().any(|l| {
            l.contains(text) && l.contains(&format!("operation={op}")) && l.contains(&name)
        })
    };
    assert!(has("Creating machine...", "create"), "{stderr}");
    assert!(
        has("hosts without a driver cannot be stopped", "stop"),
        "{stderr}"
    );
    assert!(stderr
        .lines()
        .any(|l| l.contains("ERROR") && l.contains("cannot be stopped")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_reports_machines_being_created() {
    use drover::provider::protocol::MachineState;
    let world = FakeWorld::new();
    world.set_faults(json!({"delays": {"create": 3.0}}));
    let p = Plugin::new(world.shim(&[]));
    let name = format!("{PREFIX}slow");
    let req = params(&name, "tcp://127.0.0.1:9");
    let call = Call::new();
    let (created, states) = tokio::join!(p.create(&req, &call), async {
        wait_for_call(&world, "create").await;
        // The fake writes the record, then spends 3 s in the "driver".
        let start = Instant::now();
        loop {
            let l = p.list(&Call::new()).await.expect("list");
            if let Some(m) = l.into_iter().find(|m| m.name == name) {
                return m.state;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "never listed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    created.expect("create");
    assert_eq!(states, MachineState::Creating);
    let after = p.list(&Call::new()).await.expect("list");
    assert_eq!(after[0].state, MachineState::Unknown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_command_takes_its_driver_plugin_with_it() {
    let world = FakeWorld::new();
    let p = Plugin::new(world.shim(&[]));
    // A first create bootstraps the store's certificates, so the next reaches the driver.
    p.create(
        &params(&format!("{PREFIX}first"), "tcp://127.0.0.1:9"),
        &Call::new(),
    )
    .await
    .expect("create");
    let pids = world.dir.path().join("driver-plugins");
    world.set_faults(json!({
        "hang": ["create"],
        "driver_plugin": ["create"],
        "driver_plugin_pid_file": pids.display().to_string(),
    }));
    let name = format!("{PREFIX}plugin");
    let r = p
        .create(
            &params(&name, "tcp://127.0.0.1:9"),
            &Call::with_timeout(Duration::from_secs(2)),
        )
        .await;
    assert_eq!(kind(r), ErrorKind::Timeout);
    let text = std::fs::read_to_string(&pids).expect("the fake started a driver plugin");
    let pid: u32 = text.trim().parse().expect("pid");
    assert!(
        gone_soon(pid).await,
        "driver plugin {pid} outlived its docker-machine"
    );
}

/// The store's `cert.pem` is signed by its `ca.pem` (`openssl verify`).
fn assert_client_cert_signed(world: &FakeWorld, what: &str) {
    let certs = world.store().join("certs");
    let out = Command::new("openssl")
        .args(["verify", "-CAfile"])
        .arg(certs.join("ca.pem"))
        .arg(certs.join("cert.pem"))
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "{what}: cert.pem is not signed by ca.pem: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_creates_leave_a_client_cert_signed_by_the_final_ca() {
    // Against the fake and, when it is there, the real docker-machine (9 runs in 10 raced there).
    for (round, dm) in docker_machines()
        .iter()
        .flat_map(|dm| std::iter::repeat_n(dm, 3))
        .enumerate()
    {
        eprintln!("round {round}: {}", dm.display());
        let world = FakeWorld::new();
        let p = Plugin::new(world.shim_with(dm, &[]));
        let names: Vec<String> = (0..4)
            .map(|i| format!("{PREFIX}race-{round}-{i}"))
            .collect();
        let creates = names.iter().map(|n| {
            let req = params(n, "tcp://127.0.0.1:9");
            let p = &p;
            async move { p.create(&req, &Call::new()).await }
        });
        for r in futures_util::future::join_all(creates).await {
            r.expect("create");
        }
        assert_client_cert_signed(&world, &format!("round {round}"));
    }
}

/// Two shim processes on one store (two drover instances, or two `MachineDriver`s): their
/// first creates bootstrap the certificates one at a time too, through the store's lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shim_processes_on_one_store_leave_a_client_cert_signed_by_the_final_ca() {
    for (round, dm) in docker_machines()
        .iter()
        .flat_map(|dm| std::iter::repeat_n(dm, 5))
        .enumerate()
    {
        let world = FakeWorld::new();
        let (a, b) = (
            Plugin::new(world.shim_with(dm, &[])),
            Plugin::new(world.shim_with(dm, &[])),
        );
        let creates = (0..4).map(|i| {
            let req = params(&format!("{PREFIX}two-{round}-{i}"), "tcp://127.0.0.1:9");
            let p = if i % 2 == 0 { &a } else { &b };
            async move { p.create(&req, &Call::new()).await }
        });
        for r in futures_util::future::join_all(creates).await {
            r.expect("create");
        }
        assert_client_cert_signed(&world, &format!("round {round} ({})", dm.display()));
    }
}

#[test]
fn a_relative_storage_path_gives_an_absolute_cert_dir() {
    let world = FakeWorld::new();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut cmd = world.shim(&["--storage-path", "store"]);
    cmd.env.retain(|(k, _)| k != "MACHINE_STORAGE_PATH");
    // The shim runs in the world's directory, where `store` is.
    let wrapper = world.dir.path().join("in-dir.sh");
    std::fs::write(
        &wrapper,
        format!("cd {:?} && exec \"$@\"\n", world.dir.path()),
    )
    .expect("write wrapper");
    let mut args = vec![
        wrapper.display().to_string(),
        cmd.program.display().to_string(),
    ];
    args.extend(cmd.args.iter().cloned());
    cmd.args = args;
    cmd.program = "sh".into();
    let p = Plugin::new(cmd);
    let name = format!("{PREFIX}relative");
    rt.block_on(async {
        p.create(&params(&name, "tcp://127.0.0.1:2376"), &Call::new())
            .await
            .expect("create");
        match p.credentials(&name, &Call::new()).await {
            Ok(Endpoint::TcpTls { cert_dir, .. }) => {
                assert!(std::path::Path::new(&cert_dir).is_absolute(), "{cert_dir}");
                assert_eq!(cert_dir, world.machine_dir(&name).display().to_string());
            }
            other => panic!("expected a TLS endpoint, got {other:?}"),
        }
    });
}
