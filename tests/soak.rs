//! Soak harness (issue 13): `drover run` as a real process against the GitLab simulator and the
//! real archived docker-machine when it is there (else the fake), with seeded fault injection
//! (create failures and hangs, removal failures, GitLab 5xx and dropped connections) and
//! `kill -9` at seeded points (mid-create, mid-job, after a job), restarting drover each time, over N create/use/remove cycles (MaxBuilds 1: one job per machine;
//! `limit` set). At the end drover drains (SIGQUIT with `[machine.shutdown_drain]`) and the
//! harness reports machines leaked, `limit` breaches (the store sampled while running), jobs
//! lost or stuck, traces that differ from what the script printed, and machines removed while
//! they had a job.
//!
//! The short form (6 cycles) runs with the test suite: `cargo test --test soak -- --nocapture`.
//! Long form: `DROVER_SOAK_CYCLES=60 cargo test --release --test soak -- --nocapture`
//! (`DROVER_SOAK_SEED` changes the seed).

mod docker_engine;
mod executor_common;
mod provider_support;
mod run_machine_support;
mod run_support;
mod test_certs;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gitlab_sim::{Fault, FaultKind, JobState, Route, Sim};
use provider_support::{shim_bin, FakeWorld};
use run_machine_support::{env_with, machines, tls_endpoint};
use run_support::{exit_code, job};
use serde_json::json;

const TOKEN: &str = "glrt-droversoaktest0001";
const LIMIT: usize = 2;
const SHORT_CYCLES: u64 = 6;

/// splitmix64: the harness's seeded choices.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// True with probability `p`.
    fn chance(&mut self, p: f64) -> bool {
        (self.next() % 10_000) as f64 / 10_000.0 < p
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn config(sim: &Sim, port: u16) -> String {
    format!(
        r#"concurrent = 2
check_interval = 1
shutdown_timeout = 120

[machine.shutdown_drain]
  enabled = true

[[runners]]
  name = "drover-test-soak"
  url = "{url}"
  token = "{TOKEN}"
  executor = "docker+machine"
  limit = {LIMIT}
  [runners.docker]
    image = "{image}"
    helper_image = "{helper}"
    pull_policy = ["if-not-present"]
    network_mode = "host"
  [runners.machine]
    IdleCount = 1
    IdleTime = 600
    MaxBuilds = 1
    MachineDriver = "none"
    MachineName = "soak-%s"
    MachineOptions = ["url=tcp://127.0.0.1:{port}"]
"#,
        url = sim.url(),
        image = executor_common::BUILD_IMAGE,
        helper = executor_common::HELPER_IMAGE,
    )
}

/// drover run in its own process group, so a `kill -9` takes its shim and docker-machine
/// children with it (what systemd does to the unit's control group).
struct Proc {
    child: Option<Child>,
    dir: PathBuf,
    world: String,
    starts: u32,
}

/// This world's docker-machine processes: those whose command line names docker-machine and
/// whose command line (the fake, the real binary's wrapper) or environment (the real binary,
/// started by the wrapper with the world's store) names this world's directory. With `verb`,
/// only those running that subcommand.
fn world_pids_running(world: &str, verb: Option<&str>) -> Vec<i32> {
    let Ok(d) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    d.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<String> = raw
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            if !args.iter().any(|a| a.contains("docker-machine")) {
                return false;
            }
            if verb.is_some_and(|v| !args.iter().any(|a| a == v)) {
                return false;
            }
            args.iter().any(|a| a.contains(world))
                || std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|e| String::from_utf8_lossy(&e).contains(world))
        })
        .collect()
}

fn world_pids(world: &str) -> Vec<i32> {
    world_pids_running(world, None)
}

impl Proc {
    fn start(dir: &Path, world: &str, env: &[(String, String)], starts: u32) -> Proc {
        use std::os::unix::process::CommandExt;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("drover.log"))
            .expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_drover"));
        cmd.arg("run")
            .arg("-c")
            .arg(dir.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .process_group(0);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Proc {
            child: Some(cmd.spawn().expect("start drover run")),
            dir: dir.to_path_buf(),
            world: world.to_string(),
            starts,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("drover.log")).unwrap_or_default()
    }

    fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).expect("running")
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on our own child's process group.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
        }
        // docker-machine runs in its own session (the shim detaches it): kill what is left
        // of this world's processes, as systemd's control-group kill would.
        for pid in world_pids(&self.world) {
            // SAFETY: kill(2) on a process started for this test's world.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The machine a job ran on, from its trace ("Running on … via <machine>...").
fn machine_of(trace: &str) -> Option<String> {
    let at = trace.find(" via ")?;
    trace[at + 5..]
        .split(|c: char| c == '.' || c.is_whitespace())
        .next()
        .map(str::to_string)
}

fn is_final(j: &gitlab_sim::JobView) -> bool {
    matches!(
        j.state,
        JobState::Success | JobState::Failed | JobState::Canceled
    ) && j.final_updates > 0
}

/// What a job's script prints (its own output, not the echoed commands).
fn expected_output(id: i64) -> String {
    (1..=3).map(|n| format!("soak-{id}-line-{n}\n")).collect()
}

/// The soak runner's containers (all states, or running only) as (name, job id).
fn containers_in(running_only: bool) -> Vec<(String, String)> {
    let mut args = vec![
        "ps",
        "--filter",
        "label=com.gitlab.gitlab-runner.managed=true",
    ];
    if !running_only {
        args.push("-a");
    }
    args.extend([
        "--format",
        "{{.Names}}\t{{.Label \"com.gitlab.gitlab-runner.job.id\"}}",
    ]);
    let out = Command::new("docker")
        .args(&args)
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(n, _)| n.contains("droverso"))
        .map(|(n, j)| (n.to_string(), j.to_string()))
        .collect()
}

fn containers() -> Vec<(String, String)> {
    containers_in(false)
}

/// The soak runner's networks or volumes (`kind`) as (name, job id).
fn others(kind: &str) -> Vec<(String, String)> {
    let out = Command::new("docker")
        .args([
            kind,
            "ls",
            "--filter",
            "label=com.gitlab.gitlab-runner.managed=true",
            "--format",
            "{{.Name}}\t{{.Label \"com.gitlab.gitlab-runner.job.id\"}}",
        ])
        .output()
        .expect("docker ls");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(n, _)| n.contains("droverso"))
        .map(|(n, j)| (n.to_string(), j.to_string()))
        .collect()
}

#[derive(Default)]
struct Samples {
    max_machines: usize,
    breaches: usize,
    removed_under_job: BTreeSet<(i64, String)>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drover_survives_faults_and_kill_9_without_leaks_breaches_or_lost_jobs() {
    if !executor_common::engine_available() {
        return;
    }
    let _g = executor_common::ENGINE_LOCK.lock().await;
    executor_common::ensure_images();
    let _ = shim_bin();
    let cycles: u64 = std::env::var("DROVER_SOAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SHORT_CYCLES);
    let seed: u64 = std::env::var("DROVER_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(13);
    let mut rng = Rng(seed);
    let t0 = Instant::now();

    let world = FakeWorld::new();
    world.set_faults(json!({
        "copy_certs": true,
        "create_fail_rate": 0.3,
        "create_hang_rate": 0.1,
        "rm_fail_rate": 0.2,
        "seed": seed.to_string(),
        "failure_sleep": 0.3,
    }));
    let (_proxy, port) = tls_endpoint(&world).await;
    let sim = Arc::new(Sim::start().await.expect("simulator"));
    sim.add_runner(TOKEN);
    // A job whose `running` ack never arrived (dropped connection, kill -9 right after pickup)
    // goes back to the queue, as GitLab returns an unacknowledged assignment.
    sim.configure(|s| s.ack_timeout_ms = Some(10_000));
    let dir = tempfile::Builder::new()
        .prefix("drover-test-soak-")
        .tempdir()
        .expect("tempdir");
    std::fs::write(dir.path().join("config.toml"), config(&sim, port)).expect("config");
    // The real archived docker-machine when it is there (CI has it), with the same faults
    // injected around it by its wrapper; the fake otherwise.
    let real = provider_support::real_dm();
    let dm_kind = if real.is_some() { "real" } else { "fake" };
    let env = env_with(&world, &real.unwrap_or_else(provider_support::fake_dm));
    let wdir = world.dir.path().display().to_string();
    let before_containers: BTreeSet<String> = containers().into_iter().map(|(n, _)| n).collect();

    // Jobs running when drover was killed: GitLab would time them out.
    let interrupted: Arc<Mutex<BTreeSet<i64>>> = Arc::default();
    let samples: Arc<Mutex<Samples>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let sample_count = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (sim, interrupted, samples, stop, count) = (
            sim.clone(),
            interrupted.clone(),
            samples.clone(),
            stop.clone(),
            sample_count.clone(),
        );
        let store = world.store();
        std::thread::spawn(move || {
            let list = |store: &Path| -> BTreeSet<String> {
                provider_support::store_machines(store)
                    .into_iter()
                    .collect()
            };
            while !stop.load(Ordering::SeqCst) {
                let running: Vec<(i64, String)> = sim
                    .jobs()
                    .into_iter()
                    .filter(|j| j.state == JobState::Running && j.final_updates == 0)
                    .filter_map(|j| {
                        machine_of(&String::from_utf8_lossy(&j.trace)).map(|m| (j.id, m))
                    })
                    .collect();
                let now = list(&store);
                let mut s = samples.lock().unwrap();
                s.max_machines = s.max_machines.max(now.len());
                if now.len() > LIMIT {
                    s.breaches += 1;
                    if s.breaches <= 5 {
                        eprintln!("limit breach: {now:?}");
                    }
                }
                for (id, m) in running {
                    if now.contains(&m) {
                        continue;
                    }
                    // Still running after the store was read, and not cut by a kill -9.
                    let still = sim
                        .job(id)
                        .is_some_and(|j| j.state == JobState::Running && j.final_updates == 0);
                    if still && !interrupted.lock().unwrap().contains(&id) {
                        s.removed_under_job.insert((id, m));
                    }
                }
                drop(s);
                count.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    let mut drover = Proc::start(dir.path(), &wdir, &env, 1);
    let mut kills = 0u32;
    let mut stall_kills = 0u32;
    let (mut kills_mid_create, mut kills_no_create, mut kills_mid_job) = (0u32, 0u32, 0u32);
    // (job, container of a dead drover's job running while it ran)
    let mut beside: Vec<(i64, String)> = Vec::new();
    let mut gitlab_faults = 0u32;
    let mut ids = Vec::new();
    let kill_now = |drover: &mut Proc, kills: &mut u32| {
        {
            let mut set = interrupted.lock().unwrap();
            for j in sim.jobs() {
                if matches!(j.state, JobState::Running | JobState::Assigned) && !is_final(&j) {
                    set.insert(j.id);
                }
            }
        }
        drover.kill9();
        // Jobs that finished between the listing and the kill are not interrupted.
        let mut set = interrupted.lock().unwrap();
        for j in sim.jobs() {
            if is_final(&j) {
                set.remove(&j.id);
            }
        }
        *kills += 1;
        let starts = drover.starts + 1;
        *drover = Proc::start(&drover.dir.clone(), &wdir, &env, starts);
    };

    for cycle in 0..cycles {
        // GitLab faults for this cycle.
        for (p, route, kind) in [
            (0.3, Route::RequestJob, FaultKind::Status(500)),
            (0.2, Route::RequestJob, FaultKind::DropBefore),
            (0.15, Route::UpdateJob, FaultKind::Status(502)),
            (0.15, Route::UpdateJob, FaultKind::DropBefore),
            (0.15, Route::PatchTrace, FaultKind::Status(503)),
            (0.1, Route::PatchTrace, FaultKind::DropBefore),
        ] {
            if rng.chance(p) {
                gitlab_faults += 1;
                sim.fault(Fault {
                    route,
                    kind,
                    times: 1 + rng.below(2) as u32,
                });
            }
        }
        let kill_at = rng.chance(0.35).then(|| rng.below(3));
        let delay_ms = rng.below(500);
        let id = sim.enqueue(job(&[
            "echo soak-start",
            "sleep 2",
            "for n in 1 2 3; do echo \"soak-$CI_JOB_ID-line-$n\"; done",
        ]));
        ids.push(id);
        let mut killed = false;
        let mut checked_beside = false;
        let mut waited = Instant::now();
        loop {
            let j = sim.job(id).expect("job");
            // When this job's script runs, no container of a job a killed drover left may
            // still run beside it (here every machine is the one Engine).
            if !checked_beside
                && j.state == JobState::Running
                && String::from_utf8_lossy(&j.trace).contains("soak-start")
            {
                checked_beside = true;
                let dead = interrupted.lock().unwrap().clone();
                for (name, job) in containers_in(true) {
                    if job.parse().is_ok_and(|d: i64| dead.contains(&d) && d != id) {
                        beside.push((id, name));
                    }
                }
            }
            if is_final(&j) || interrupted.lock().unwrap().contains(&id) {
                if !killed && kill_at == Some(2) {
                    kill_now(&mut drover, &mut kills);
                }
                break;
            }
            // Plan 0 kills while a `create` runs (mid-create; after a while without one, at
            // once), plan 1 while the job's script sleeps (mid-job).
            let mid_create = kill_at == Some(0)
                && waited.elapsed() >= Duration::from_millis(delay_ms)
                && (!world_pids_running(&wdir, Some("create")).is_empty()
                    || waited.elapsed() >= Duration::from_secs(10));
            let mid_job = kill_at == Some(1)
                && j.state == JobState::Running
                && String::from_utf8_lossy(&j.trace).contains("$ sleep 2");
            if !killed && (mid_create || mid_job) {
                killed = true;
                if mid_create {
                    if world_pids_running(&wdir, Some("create")).is_empty() {
                        kills_no_create += 1;
                    } else {
                        kills_mid_create += 1;
                    }
                } else {
                    kills_mid_job += 1;
                }
                kill_now(&mut drover, &mut kills);
                waited = Instant::now();
                continue;
            }
            // Creates that hang hold `limit` slots until the next restart: a stalled pool is
            // restarted as an operator would.
            if waited.elapsed() > Duration::from_secs(25) {
                stall_kills += 1;
                kill_now(&mut drover, &mut kills);
                waited = Instant::now();
                continue;
            }
            if let Some(c) = drover.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    panic!("drover exited by itself ({status:?}):\n{}", drover.log());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!(
            "cycle {cycle}: job {id} {:?} (kill plan {kill_at:?}) at {:?}",
            sim.job(id).map(|j| j.state),
            t0.elapsed()
        );
    }

    // Drain: no job left to run, SIGQUIT empties the pool and drover exits 0.
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(drover.pid(), libc::SIGQUIT) };
    let start = Instant::now();
    let status = loop {
        if let Some(s) = drover
            .child
            .as_mut()
            .and_then(|c| c.try_wait().expect("try_wait"))
        {
            drover.child = None;
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "drain did not finish:\n{}",
            drover.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let drain_secs = start.elapsed().as_secs_f64();
    // A create that hung when the drain began is still in flight when shutdown_timeout ends:
    // its machine is left, recorded in the ledger as being created. The next start removes
    // such interrupted creations; start once more (with IdleCount 0, so nothing new is made),
    // wait for them to go, and drain again, as an operator's next start would.
    let left_at_exit = machines(&world);
    if !left_at_exit.is_empty() {
        let path = dir.path().join("config.toml");
        let text = std::fs::read_to_string(&path).expect("config");
        std::fs::write(&path, text.replace("IdleCount = 1", "IdleCount = 0")).expect("config");
        let starts = drover.starts + 1;
        drover = Proc::start(dir.path(), &wdir, &env, starts);
        let started = Instant::now();
        while left_at_exit.iter().any(|m| machines(&world).contains(m)) {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "interrupted creations not removed at the next start:\n{}",
                drover.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(drover.pid(), libc::SIGQUIT) };
        let status = drover
            .child
            .as_mut()
            .expect("running")
            .wait()
            .expect("wait");
        drover.child = None;
        assert_eq!(exit_code(status), 0, "{}", drover.log());
    }
    // One more sample after the drain, then stop the sampler.
    let n = sample_count.load(Ordering::SeqCst);
    while sample_count.load(Ordering::SeqCst) < n + 2 {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::SeqCst);
    sampler.join().expect("sampler");

    // Figures.
    let interrupted = interrupted.lock().unwrap().clone();
    let jobs: BTreeMap<i64, gitlab_sim::JobView> =
        sim.jobs().into_iter().map(|j| (j.id, j)).collect();
    let mut succeeded = 0;
    let mut failed = Vec::new();
    let mut lost = Vec::new();
    let mut stuck = Vec::new();
    let mut bad_traces = Vec::new();
    let mut job_machine = BTreeMap::new();
    for id in &ids {
        let j = &jobs[id];
        let trace = String::from_utf8_lossy(&drover::executor::trace::timestamp::strip(&j.trace))
            .into_owned();
        if let Some(m) = machine_of(&trace) {
            job_machine.insert(*id, m);
        }
        if interrupted.contains(id) && !is_final(j) {
            continue;
        }
        match j.state {
            JobState::Success if j.final_updates > 0 => {
                succeeded += 1;
                let want = expected_output(*id);
                let exact = trace.matches(&want).count() == 1
                    && trace.matches(&format!("soak-{id}-line-")).count() == 3
                    && j.output_matches == Some(true);
                if !exact {
                    eprintln!(
                        "SOAK trace of job {id} not exact (output_matches {:?}):\n{trace}",
                        j.output_matches
                    );
                    // What GitLab saw of the job, to tell a client fault from a server one.
                    for r in sim.requests() {
                        if r.path.contains(&format!("/jobs/{id}")) {
                            eprintln!(
                                "SOAK   {} ms {} {} range={:?} body={:?}",
                                r.at_ms,
                                r.method,
                                r.path,
                                r.header("content-range"),
                                String::from_utf8_lossy(&r.body),
                            );
                        }
                    }
                    bad_traces.push(*id);
                }
            }
            JobState::Failed | JobState::Canceled if j.final_updates > 0 => {
                failed.push((*id, j.failure_reason.clone()))
            }
            JobState::Pending => lost.push(*id),
            _ => stuck.push((*id, j.state)),
        }
    }
    let leaked_machines = machines(&world);
    let after: Vec<(String, String)> = containers()
        .into_iter()
        .filter(|(n, _)| !before_containers.contains(n))
        .collect();
    // Everything of the soak runner left at the end, with the machine of its job.
    let machine_of_job = |j: &str| {
        j.parse::<i64>()
            .ok()
            .and_then(|j| job_machine.get(&j).cloned())
            .unwrap_or_else(|| "?".into())
    };
    for (kind, left) in [
        ("container", after.clone()),
        ("network", others("network")),
        ("volume", others("volume")),
    ] {
        for (name, job) in left {
            eprintln!(
                "SOAK left {kind} {name} (job {job}, machine {})",
                machine_of_job(&job)
            );
        }
    }
    let failed_uninterrupted: Vec<_> = failed
        .iter()
        .filter(|(id, _)| !interrupted.contains(id))
        .cloned()
        .collect();
    let (killed_containers, leaked_containers): (Vec<_>, Vec<_>) = after
        .iter()
        .cloned()
        .partition(|(_, j)| j.parse().is_ok_and(|j: i64| interrupted.contains(&j)));
    // The machines of killed jobs are gone with their VM in a real fleet; here they share the
    // one Engine, so their containers are removed by the harness.
    for (n, _) in &after {
        let _ = Command::new("docker").args(["rm", "-f", n]).output();
    }
    // Machines removed while they had a job, from the fake's call log: an `rm` of a job's
    // machine before the job's final update (only for jobs that finished).
    let calls = world.calls();
    let removes: usize = calls
        .iter()
        .filter(|(_, a)| a.get(1).map(String::as_str) == Some("rm"))
        .count();
    let creates: usize = calls
        .iter()
        .filter(|(_, a)| a.get(1).map(String::as_str) == Some("create"))
        .count();
    let s = samples.lock().unwrap();
    let code = exit_code(status);
    let requeues: u32 = sim.jobs().iter().map(|j| j.requeues).sum();
    eprintln!(
        "SOAK seed={seed} cycles={cycles} elapsed={:.1}s drover_starts={} kills={kills} \
         (mid-create {kills_mid_create}, planned mid-create without one running \
         {kills_no_create}, mid-job {kills_mid_job}, stall restarts {stall_kills}) \
         gitlab_faults={gitlab_faults} docker_machine={dm_kind}\n\
         SOAK dm_creates={creates} dm_removes={removes} max_machines={} limit={LIMIT} \
         limit_breaches={} store_samples={}\n\
         SOAK jobs={} succeeded={succeeded} failed={} interrupted_by_kill={} lost={} stuck={} \
         traces_not_exact={}\n\
         SOAK machines_left_at_exit={left_at_exit:?} (removed at the next start) \
         machines_removed_under_job={} leaked_machines={} leaked_containers={} \
         killed_job_containers={} drain={drain_secs:.1}s exit={code}\n\
         SOAK requeued_unacknowledged={requeues} failed_jobs={failed:?} \
         failed_without_a_kill={failed_uninterrupted:?} dead_containers_beside_a_job={beside:?}",
        t0.elapsed().as_secs_f64(),
        drover.starts,
        s.max_machines,
        s.breaches,
        sample_count.load(Ordering::SeqCst),
        ids.len(),
        failed.len(),
        interrupted.len(),
        lost.len(),
        stuck.len(),
        bad_traces.len(),
        s.removed_under_job.len(),
        leaked_machines.len(),
        leaked_containers.len(),
        killed_containers.len(),
    );
    let log = drover.log();
    let tail = &log[log.len().saturating_sub(6000)..];
    assert_eq!(code, 0, "{tail}");
    assert_eq!(leaked_machines, Vec::<String>::new(), "{tail}");
    assert_eq!(leaked_containers, Vec::new(), "{tail}");
    assert_eq!(s.breaches, 0, "limit breached");
    assert_eq!(lost, Vec::<i64>::new(), "jobs never picked up");
    assert_eq!(stuck, Vec::new(), "jobs stuck without a kill");
    assert_eq!(bad_traces, Vec::<i64>::new(), "traces not byte-exact");
    assert_eq!(
        s.removed_under_job,
        BTreeSet::new(),
        "machines removed while they had a job; jobs→machines {job_machine:?}"
    );
    assert!(succeeded > 0, "no job succeeded: {failed:?}");
    assert_eq!(
        failed_uninterrupted,
        Vec::new(),
        "jobs no kill interrupted failed"
    );
    assert_eq!(
        beside,
        Vec::new(),
        "a dead drover's container ran beside a job"
    );
}
