//! The machine pool with the crash-safe ledger (issue 13), on legacy-driver-shim + the fake
//! docker-machine: every change is saved, a restart resumes from the ledger instead of adopting
//! (upstream counts an adopted machine as used once), and a corrupt ledger is set aside without
//! losing the machines the provider lists. While running, a periodic round notices machines
//! removed or created behind drover's back, and removals that gave up survive a restart.

mod provider_support;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use drover::engine::{
    AcquireResult, MachineState, Notice, Reason, ReconcileDecision, RunnerId, RunnerPolicy,
};
use drover::ledger::{LedgerFile, OrphanRecord};
use drover::manager::pool::{NoObserver, NoticeObserver, Pool, PoolSettings};
use drover::provider::cache::CredentialCache;
use drover::provider::plugin::Plugin;
use provider_support::*;
use serde_json::json;

const TOKEN: &str = "glrt-ledgertest0123456789";

fn policy(max_builds: i64) -> RunnerPolicy {
    let text = format!(
        r#"
concurrent = 2
[[runners]]
  name = "ledger"
  url = "http://127.0.0.1:1"
  token = "{TOKEN}"
  executor = "docker+machine"
  [runners.machine]
    IdleCount = 1
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

/// The machines in the fake docker-machine's store.
fn machines(world: &FakeWorld) -> Vec<String> {
    store_machines(&world.store())
}

fn ledger_path(world: &FakeWorld) -> PathBuf {
    world.dir.path().join(".drover-machines.json")
}

fn pool(world: &FakeWorld, max_builds: i64, ledger: Option<LedgerFile>) -> Pool {
    let mut cmd = world.shim(&[]);
    cmd.name_prefix = Some("runner-".into());
    Pool::start_with_ledger(
        vec![policy(max_builds)],
        Arc::new(CredentialCache::new(Plugin::new(cmd))),
        Arc::new(NoObserver),
        ledger,
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
        assert!(start.elapsed() < Duration::from_secs(30), "no idle machine");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One job on `name`: Use, then Release.
async fn run_job(pool: &Pool, name: &str) {
    let m = pool
        .use_machine(RunnerId(0), Some(name.to_string()))
        .await
        .expect("use");
    assert_eq!(m.used.name, name);
    pool.release(RunnerId(0), name.to_string()).await;
}

async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn used_count(ledger: &LedgerFile, name: &str) -> Option<i64> {
    let loaded = ledger.load();
    assert!(loaded.set_aside.is_none(), "{:?}", loaded.set_aside);
    loaded
        .records
        .iter()
        .find(|r| r.name == name)
        .map(|r| r.used_count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_is_saved_and_a_restart_resumes_the_used_count_instead_of_adopting() {
    let world = FakeWorld::new();
    world.set_faults(json!({"config": "ok"}));
    let file = LedgerFile::at(ledger_path(&world));
    let first = pool(&world, 3, Some(file.clone()));
    let name = acquire_machine(&first).await;
    run_job(&first, &name).await;
    run_job(&first, &acquire_machine(&first).await).await;
    // The second job's Use (used count 2, Used) and its release (Idle) are two writes of the
    // ledger's writer: wait for the second, not only the first.
    wait_until("two jobs and the release saved", || {
        used_count(&file, &name) == Some(2)
            && file
                .load()
                .records
                .iter()
                .any(|r| r.name == name && r.state == MachineState::Idle)
    })
    .await;
    let rec = file.load().records;
    let rec = rec.iter().find(|r| r.name == name).expect("record");
    assert_eq!(rec.state, MachineState::Idle);
    assert_eq!(rec.runner.as_deref(), Some("ledgertes"), "{rec:?}");
    drop(first);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The restart: MaxBuilds 3 and 2 jobs in the ledger, so the third job's release removes
    // the machine. Adoption (upstream, no ledger) would count 1 and keep it.
    let second = pool(&world, 3, Some(file.clone()));
    assert_eq!(acquire_machine(&second).await, name);
    run_job(&second, &name).await;
    wait_until("MaxBuilds reached after the restart", || {
        !machines(&world).contains(&name)
    })
    .await;
    wait_until("the removed machine leaves the ledger", || {
        used_count(&file, &name).is_none()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_ledger_a_restart_adopts_as_upstream() {
    let world = FakeWorld::new();
    world.set_faults(json!({"config": "ok"}));
    let first = pool(&world, 3, None);
    let name = acquire_machine(&first).await;
    run_job(&first, &name).await;
    run_job(&first, &acquire_machine(&first).await).await;
    drop(first);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = pool(&world, 3, None);
    assert_eq!(acquire_machine(&second).await, name);
    run_job(&second, &name).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        machines(&world).contains(&name),
        "adopted counts 1 + 1 job < MaxBuilds 3: kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_ledger_is_set_aside_and_the_listed_machine_is_adopted_and_saved() {
    let world = FakeWorld::new();
    world.set_faults(json!({"config": "ok"}));
    let first = pool(&world, 0, None);
    let name = acquire_machine(&first).await;
    drop(first);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let path = ledger_path(&world);
    std::fs::write(&path, b"{\"version\": 1, \"machines\": [{\"name\": \"trunc").unwrap();
    let file = LedgerFile::at(&path);
    let second = pool(&world, 0, Some(file.clone()));
    assert_eq!(
        acquire_machine(&second).await,
        name,
        "the listed machine is adopted"
    );
    let aside: Vec<_> = std::fs::read_dir(world.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".drover-machines.json.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "the corrupt ledger is kept aside");
    wait_until("the adopted machine is saved", || {
        used_count(&file, &name).is_some()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_record_whose_machine_vanished_is_dropped_at_start() {
    let world = FakeWorld::new();
    world.set_faults(json!({"config": "ok"}));
    let file = LedgerFile::at(ledger_path(&world));
    let first = pool(&world, 0, Some(file.clone()));
    let name = acquire_machine(&first).await;
    wait_until("saved", || used_count(&file, &name).is_some()).await;
    drop(first);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The VM disappears while drover is down (deleted in the cloud console).
    std::fs::remove_dir_all(world.machine_dir(&name)).unwrap();
    let second = pool(&world, 0, Some(file.clone()));
    let _ = second.acquire(RunnerId(0)).await.expect("acquire");
    wait_until("the vanished machine leaves the ledger", || {
        used_count(&file, &name).is_none()
    })
    .await;
}

/// Records the pool's reconciliation decisions.
#[derive(Default)]
struct Decisions(Mutex<Vec<(String, ReconcileDecision)>>);

impl NoticeObserver for Decisions {
    fn notice(&self, notice: &Notice) {
        if let Notice::Reconciled { name, decision } = notice {
            self.0.lock().unwrap().push((name.clone(), *decision));
        }
    }
}

impl Decisions {
    fn of(&self, name: &str) -> Vec<ReconcileDecision> {
        let all = self.0.lock().unwrap();
        all.iter()
            .filter(|(n, _)| n == name)
            .map(|(_, d)| *d)
            .collect()
    }
}

fn observed_pool(
    world: &FakeWorld,
    file: &LedgerFile,
    decisions: &Arc<Decisions>,
    reconcile_interval: Duration,
) -> Pool {
    let mut cmd = world.shim(&[]);
    cmd.name_prefix = Some("runner-".into());
    Pool::start_with_settings(
        vec![policy(0)],
        Arc::new(CredentialCache::new(Plugin::new(cmd))),
        decisions.clone(),
        PoolSettings {
            ledger: Some(file.clone()),
            reconcile_interval,
        },
    )
}

/// A machine made with docker-machine directly, as an operator or another tool would.
fn create_behind_drovers_back(world: &FakeWorld, name: &str) {
    let status = std::process::Command::new(fake_dm())
        .envs(world.env())
        .args([
            "create",
            "--driver",
            "none",
            "--url",
            "tcp://127.0.0.1:9",
            name,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run the fake docker-machine");
    assert!(status.success(), "create {name}");
    assert!(machines(world).contains(&name.to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_periodic_round_notices_machines_removed_and_created_behind_drovers_back() {
    let world = FakeWorld::new();
    world.set_faults(json!({"config": "ok"}));
    let file = LedgerFile::at(ledger_path(&world));
    let decisions = Arc::new(Decisions::default());
    let pool = observed_pool(&world, &file, &decisions, Duration::from_millis(300));
    let name = acquire_machine(&pool).await;
    pool.release(RunnerId(0), name.clone()).await;
    wait_until("the idle machine is saved", || {
        used_count(&file, &name) == Some(0)
    })
    .await;

    // No pass runs from here on: only the periodic round can notice what happens next.
    std::fs::remove_dir_all(world.machine_dir(&name)).unwrap();
    let stranger = "runner-ledgertes-auto-1700000000-0badcafe";
    create_behind_drovers_back(&world, stranger);
    wait_until("the round drops the vanished record", || {
        used_count(&file, &name).is_none()
    })
    .await;
    wait_until("the round adopts the stranger as upstream would", || {
        used_count(&file, stranger) == Some(1)
    })
    .await;
    assert_eq!(decisions.of(&name), vec![ReconcileDecision::Vanished]);
    assert_eq!(decisions.of(stranger), vec![ReconcileDecision::Adopted]);
    // Later rounds have nothing left to decide.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(decisions.0.lock().unwrap().len(), 2);
    // The adopted machine serves jobs like any other.
    assert_eq!(acquire_machine(&pool).await, stranger);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_resumes_the_retries_of_removals_that_gave_up() {
    let world = FakeWorld::new();
    world.set_faults(json!({"config": "ok"}));
    let orphan = "runner-ledgertes-auto-1700000000-00000bad";
    create_behind_drovers_back(&world, orphan);
    // What the previous drover left: its removal gave up and the retry was due.
    let file = LedgerFile::at(ledger_path(&world));
    file.save(
        &[],
        &[OrphanRecord {
            name: orphan.into(),
            reason: Reason::TooManyIdleMachines,
            failures: 3,
            next_retry: chrono::Utc::now() - chrono::TimeDelta::seconds(1),
        }],
    )
    .unwrap();
    let decisions = Arc::new(Decisions::default());
    let _pool = observed_pool(&world, &file, &decisions, Duration::from_secs(3600));
    wait_until("the orphan is removed after the restart", || {
        !machines(&world).contains(&orphan.to_string())
    })
    .await;
    wait_until("the resolved orphan leaves the ledger", || {
        file.load().orphans.is_empty()
    })
    .await;
    assert_eq!(decisions.of(orphan), vec![ReconcileDecision::Removed]);
    let subs = world.subcommands();
    assert!(subs.iter().any(|s| s == "rm"), "{subs:?}");
}

/// A machine this drover did not create (restored from the ledger, or adopted without one) may
/// hold what a drover that died left running: its first job is told to clean it first
/// (`clean_first`), and only its first. A machine this drover created needs no cleaning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_first_job_on_a_machine_drover_did_not_create_cleans_it_first() {
    let world = FakeWorld::new();
    world.set_faults(json!({"config": "ok"}));
    let file = LedgerFile::at(ledger_path(&world));
    let use_once = |pool: &Pool, name: String| {
        let pool = pool.clone();
        async move {
            let m = pool
                .use_machine(RunnerId(0), Some(name.clone()))
                .await
                .expect("use");
            pool.release(RunnerId(0), name).await;
            m.used.clean_first
        }
    };
    let first = pool(&world, 10, Some(file.clone()));
    let name = acquire_machine(&first).await;
    assert!(
        !use_once(&first, name.clone()).await,
        "created by this drover"
    );
    wait_until("the job saved", || used_count(&file, &name) == Some(1)).await;
    drop(first);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let second = pool(&world, 10, Some(file.clone()));
    assert_eq!(acquire_machine(&second).await, name);
    assert!(
        use_once(&second, name.clone()).await,
        "restored from the ledger"
    );
    assert_eq!(acquire_machine(&second).await, name);
    assert!(!use_once(&second, name.clone()).await, "cleaned already");
    drop(second);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let third = pool(&world, 10, None);
    assert_eq!(acquire_machine(&third).await, name);
    assert!(use_once(&third, name.clone()).await, "adopted");
}
