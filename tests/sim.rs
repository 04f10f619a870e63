//! The simulator's invariants and determinism, on the bundled workloads (`sim::` in the lib).

use drover::config::{load_str, Config};
use drover::sim::compare::Comparison;
use drover::sim::examples;
use drover::sim::provider::{Latency, ProviderModel};
use drover::sim::report::Summary;
use drover::sim::trace::Trace;
use drover::sim::workload::Workload;
use drover::sim::{simulate, Scenario};

use chrono::{DateTime, Utc};

fn config(text: &str) -> Config {
    match load_str(text, "test.toml") {
        Ok(l) => l.config,
        Err(e) => panic!("{e}"),
    }
}

/// One docker+machine runner with the given `limit`, `[runners.machine]` body and globals.
fn runner(limit: i64, machine: &str, concurrent: i64) -> Config {
    config(&format!(
        "concurrent = {concurrent}\ncheck_interval = 3\n\
         [[runners]]\nname = \"auto\"\nurl = \"https://gitlab.example.com\"\n\
         token = \"glrt-testtoken12345\"\nexecutor = \"docker+machine\"\nlimit = {limit}\n\
         [runners.docker]\nimage = \"alpine\"\n\
         [runners.machine]\nMachineDriver = \"google\"\nMachineName = \"auto-%s\"\n{machine}\n"
    ))
}

fn workload(text: &str) -> Workload {
    Workload::parse(text, "bundled").unwrap()
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn run(config: &Config, w: &Workload, model: ProviderModel) -> Trace {
    run_period(config, w, model, None, None)
}

fn run_period(
    config: &Config,
    w: &Workload,
    model: ProviderModel,
    from: Option<&str>,
    until: Option<&str>,
) -> Trace {
    simulate(&Scenario {
        config,
        workload: w,
        from: from.map(at),
        until: until.map(at),
        model,
        any_runner: false,
    })
    .unwrap()
}

fn seeded(seed: u64) -> ProviderModel {
    ProviderModel {
        seed,
        ..ProviderModel::default()
    }
}

/// The counts in force at wall-clock `t`.
fn counts_at(trace: &Trace, t: &str) -> drover::sim::trace::Counts {
    let ms = (at(t) - trace.start).num_milliseconds() as u64;
    trace
        .timeline
        .iter()
        .take_while(|r| r.at <= ms)
        .last()
        .map(|r| r.counts)
        .unwrap_or_default()
}

#[test]
fn a_seed_fixes_the_run() {
    let c = runner(20, "IdleCount = 2\nIdleTime = 600\nMaxBuilds = 10", 40);
    let w = workload(examples::BURSTY_WEEKDAY);
    let a = run(&c, &w, seeded(7));
    let b = run(&c, &w, seeded(7));
    assert_eq!(a, b);
    let other = run(&c, &w, seeded(8));
    assert_ne!(
        a.timeline, other.timeline,
        "uniform latencies must depend on the seed"
    );
}

/// Runs each config on the two burstiest workloads with three seeds and checks that neither
/// the machines nor the jobs at once ever exceed `limit`.
fn assert_limit_holds(cases: &[(i64, &str)]) {
    for &(limit, machine) in cases {
        let c = runner(limit, machine, 50);
        for w in [examples::NIGHTLY_BATCH, examples::SUDDEN_SPIKE] {
            for seed in 1..=3 {
                let t = run(&c, &workload(w), seeded(seed));
                let peak = t.timeline.iter().map(|r| r.counts.total()).max().unwrap();
                assert!(
                    i64::from(peak) <= limit,
                    "limit {limit} ({machine}), seed {seed}: peak {peak}"
                );
                // Jobs at once are bounded by limit too.
                let used = t.timeline.iter().map(|r| r.counts.used).max().unwrap();
                assert!(i64::from(used) <= limit);
            }
        }
    }
}

#[test]
fn machines_never_exceed_limit() {
    assert_limit_holds(&[
        (3, "IdleCount = 2\nIdleTime = 300"),
        (10, "IdleCount = 20\nIdleTime = 300\nMaxGrowthRate = 2"),
        (25, "IdleCount = 4\nIdleTime = 30\nMaxBuilds = 1"),
    ]);
}

/// With `IdleCount = 0` every job goes through the engine's on-demand `Use`. A `Use` session
/// woken by an availability signal that finds no free machine keeps waiting for its own
/// creation (spec §7); it once started another one, and machines piled up past `limit`
/// (peak 45 with `limit = 1`).
#[test]
fn machines_never_exceed_limit_on_demand() {
    assert_limit_holds(&[
        (1, "IdleCount = 0\nIdleTime = 60"),
        (4, "IdleCount = 0\nIdleTime = 0"),
    ]);
}

#[test]
fn concurrent_bounds_running_jobs() {
    let c = runner(0, "IdleCount = 0\nIdleTime = 60", 4);
    let t = run(&c, &workload(examples::NIGHTLY_BATCH), seeded(1));
    let used = t.timeline.iter().map(|r| r.counts.used).max().unwrap();
    assert_eq!(
        used, 4,
        "4 workers run at most 4 jobs, and a 300-job batch fills them"
    );
}

#[test]
fn idle_pool_follows_idle_count_and_the_active_schedule_section() {
    // Root: 1 idle machine. Mon-Fri 09:00-17:59 Berlin (08:00-16:59 UTC in January): 4.
    let c = runner(
        0,
        "IdleCount = 1\nIdleTime = 60\n\
         [[runners.machine.autoscaling]]\nPeriods = [\"* * 9-17 * * mon-fri *\"]\n\
         Timezone = \"Europe/Berlin\"\nIdleCount = 4\nIdleTime = 60",
        10,
    );
    let model = ProviderModel {
        create_latency: Latency::Fixed(90_000),
        ..ProviderModel::default()
    };
    let t = run_period(
        &c,
        &Workload::default(),
        model,
        Some("2026-01-05T00:00:00Z"),
        Some("2026-01-06T00:00:00Z"),
    );
    assert_eq!(counts_at(&t, "2026-01-05T03:00:00Z").idle, 1);
    assert_eq!(counts_at(&t, "2026-01-05T07:59:00Z").idle, 1);
    assert_eq!(counts_at(&t, "2026-01-05T12:00:00Z").idle, 4);
    assert_eq!(counts_at(&t, "2026-01-05T16:59:00Z").idle, 4);
    assert_eq!(counts_at(&t, "2026-01-05T17:10:00Z").idle, 1);
    assert_eq!(counts_at(&t, "2026-01-05T23:00:00Z").idle, 1);
    // The section starts one second early (spec §3): the first extra creation is decided in
    // the poll after 07:59:59 UTC, never before.
    let morning = t
        .decisions
        .iter()
        .find(|d| d.at > 3_600_000 && d.action.as_str() == "create")
        .unwrap();
    let first = (at("2026-01-05T07:59:59Z") - t.start).num_milliseconds() as u64;
    assert!((first..=first + 3_000).contains(&morning.at), "{morning:?}");
    assert_eq!(
        Summary::of(&t).removals.get("too many idle machines"),
        Some(&3)
    );
}

#[test]
fn every_job_completes_when_capacity_allows() {
    for machine in [
        "IdleCount = 0\nIdleTime = 60",
        "IdleCount = 5\nIdleTime = 600\nMaxBuilds = 3",
        "IdleCount = 2\nIdleScaleFactor = 0.5\nIdleCountMin = 1\nIdleTime = 300",
    ] {
        for (limit, concurrent) in [(0, 1000), (8, 8)] {
            let c = runner(limit, machine, concurrent);
            for w in [examples::NIGHTLY_BATCH, examples::SUDDEN_SPIKE] {
                let s = Summary::of(&run(&c, &workload(w), seeded(3)));
                assert_eq!(s.jobs_completed, s.jobs, "{machine}, limit {limit}");
                assert_eq!(s.jobs_failed, 0);
            }
        }
    }
    // And a whole working day on the bundled example config.
    let c = config(examples::CONFIG);
    let s = Summary::of(&run(&c, &workload(examples::BURSTY_WEEKDAY), seeded(3)));
    assert_eq!((s.jobs, s.jobs_completed), (1392, 1392));
}

#[test]
fn on_demand_jobs_wait_for_their_creation() {
    let c = runner(0, "IdleCount = 0\nIdleTime = 0", 100);
    let model = ProviderModel {
        create_latency: Latency::Fixed(100_000),
        ..ProviderModel::default()
    };
    let w = workload("submitted_at,duration_s\n10,50\n");
    let t = run(&c, &w, model);
    let job = t.jobs[0];
    // Polled at 12 s (every 3 s), created on demand, started 100 s later.
    assert_eq!(job.started, Some(112_000));
    assert!(job.waited_for_creation);
    assert_eq!(t.decisions[0].reason.as_str(), "on demand for a job");
    assert_eq!(Summary::of(&t).queue_wait_s.max, 102.0);
}

#[test]
fn creation_failures_are_counted_and_removed() {
    let c = runner(0, "IdleCount = 3\nIdleTime = 300", 100);
    let model = ProviderModel {
        create_failure_rate: 0.3,
        ..ProviderModel::default()
    };
    let s = Summary::of(&run(&c, &workload(examples::SUDDEN_SPIKE), model));
    assert!(s.creation_failures > 0);
    assert_eq!(
        s.removals.get("Failed to create"),
        Some(&s.creation_failures)
    );
    assert_eq!(s.jobs_completed + s.jobs_failed, s.jobs);
}

#[test]
fn compare_finds_no_divergence_in_a_config_against_itself_but_finds_a_changed_idle_count() {
    let w = workload(examples::BURSTY_WEEKDAY);
    let old = runner(30, "IdleCount = 2\nIdleTime = 600", 40);
    let same = runner(30, "IdleCount = 2\nIdleTime = 600", 40);
    let new = runner(30, "IdleCount = 3\nIdleTime = 600", 40);
    let a = run(&old, &w, seeded(1));
    let c = Comparison::of("old", &a, "new", &run(&same, &w, seeded(1)));
    assert!(c.identical, "{}", c.to_text());
    let c = Comparison::of("old", &a, "new", &run(&new, &w, seeded(1)));
    assert!(!c.identical);
    assert!(c.divergent_instants > 0);
    // IdleCount 3 starts a third machine in the very first pass.
    assert_eq!(c.first_divergences[0].at, "2026-01-05T00:00:00Z");
    assert_eq!(
        c.first_divergences[0].a.len() + 1,
        c.first_divergences[0].b.len()
    );
}

#[test]
fn nothing_scales_while_every_worker_is_busy() {
    // IdleCount 1: when the idle machine takes the job, the pool should be refilled, but only an
    // Acquire pass refills it, and passes need a free worker (there is no background loop).
    let model = ProviderModel {
        create_latency: Latency::Fixed(30_000),
        ..ProviderModel::default()
    };
    let w = workload("submitted_at,duration_s\n60,1200\n");
    let run_with = |concurrent| {
        let c = runner(0, "IdleCount = 1\nIdleTime = 10", concurrent);
        run_period(
            &c,
            &w,
            model.clone(),
            Some("2026-01-05T00:00:00Z"),
            Some("2026-01-05T01:00:00Z"),
        )
    };
    let during = |t: &Trace| {
        t.decisions
            .iter()
            .filter(|d| d.at >= 60_000 && d.at < 1_260_000)
            .cloned()
            .collect::<Vec<_>>()
    };
    // One worker: it is busy with the job for 20 minutes, so nothing happens meanwhile.
    let one = run_with(1);
    assert_eq!(
        one.jobs[0].started,
        Some(60_000),
        "the idle machine takes the job at once"
    );
    assert_eq!(during(&one), vec![]);
    assert_eq!(counts_at(&one, "2026-01-05T00:10:00Z").idle, 0);
    // Two workers: the runner is handed at once to the second worker after the first got a job
    // (the non-blocking re-queue), and that pass refills the pool.
    let two = run_with(2);
    let refill = during(&two);
    assert_eq!(refill.len(), 1, "{refill:?}");
    assert_eq!(refill[0].action.as_str(), "create");
    assert_eq!(refill[0].at, 60_000, "{refill:?}");
    assert_eq!(counts_at(&two, "2026-01-05T00:10:00Z").idle, 1);
}

#[test]
fn an_absurd_idle_count_stops_the_run_with_a_warning() {
    let c = runner(0, "IdleCount = 1000000000\nIdleTime = 600", 10);
    let w = workload("submitted_at,duration_s\n10,50\n3600,50\n");
    let trace = run(&c, &w, seeded(1));
    let stop = trace
        .warnings
        .iter()
        .find(|w| w.contains("simulation stopped"));
    assert!(
        stop.is_some_and(|w| w.contains("100000 machines") && w.contains("IdleCount")),
        "{:?}",
        trace.warnings
    );
    // It stopped at the first pass that reached the bound, not at the end of the workload.
    assert!(trace.end < 3_600_000, "ran until {}", trace.end);
    assert!(trace.creations <= 100_000, "{}", trace.creations);
}

/// The job router's two drivers: `drover run`'s (tokio, GitLab through `JobSource`) and the
/// simulator's (virtual time) make the same decisions from the same scripted GitLab answers.
mod router_equivalence {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use drover::config::RunnerConfig;
    use drover::engine::router::{Acquired, Answer, Command, Decision, Input};
    use drover::engine::RunnerId;
    use drover::manager::pool::{NoObserver, Pool};
    use drover::manager::runloop::{Manager, Pools};
    use drover::manager::source::{Ack, JobLink, JobOutcome, JobSource, Requested};
    use drover::provider::protocol::CreateParams;
    use drover::provider::{
        Call, Endpoint, InspectResult, MachineEntry, Provider, ProviderError, RemoveResult,
    };
    use drover::sim::route::{replay, Script};
    use tokio_util::sync::CancellationToken;

    /// A provider held in memory: machines exist from the moment they are created, every
    /// call answers at once (no virtual time passes), so the pool's engine hands machines
    /// out in the paused runtime exactly as it would over a plugin.
    #[derive(Default)]
    struct MemoryProvider {
        machines: Mutex<std::collections::BTreeSet<String>>,
    }

    impl MemoryProvider {
        fn machines(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<String>> {
            self.machines.lock().unwrap_or_else(|p| p.into_inner())
        }
    }

    impl Provider for MemoryProvider {
        async fn create(&self, params: &CreateParams, _call: &Call) -> Result<(), ProviderError> {
            self.machines().insert(params.name.clone());
            Ok(())
        }
        async fn list(&self, _call: &Call) -> Result<Vec<MachineEntry>, ProviderError> {
            Ok(self
                .machines()
                .iter()
                .map(|name| MachineEntry {
                    name: name.clone(),
                    state: Default::default(),
                })
                .collect())
        }
        async fn exists(&self, name: &str, _call: &Call) -> Result<bool, ProviderError> {
            Ok(self.machines().contains(name))
        }
        async fn can_connect(&self, name: &str, _call: &Call) -> Result<bool, ProviderError> {
            Ok(self.machines().contains(name))
        }
        async fn credentials(&self, name: &str, _call: &Call) -> Result<Endpoint, ProviderError> {
            Ok(Endpoint::Tcp {
                host: format!("tcp://{name}.invalid:2376"),
            })
        }
        async fn stop(&self, _name: &str, _call: &Call) -> Result<(), ProviderError> {
            Ok(())
        }
        async fn remove(&self, name: &str, _call: &Call) -> Result<RemoveResult, ProviderError> {
            Ok(RemoveResult {
                existed: self.machines().remove(name),
            })
        }
        async fn force_remove(
            &self,
            name: &str,
            call: &Call,
        ) -> Result<RemoveResult, ProviderError> {
            self.remove(name, call).await
        }
        async fn inspect(&self, _name: &str, _call: &Call) -> Result<InspectResult, ProviderError> {
            Ok(InspectResult::default())
        }
    }

    /// GitLab playing `script`: each request takes `request_ms`, then answers the runner's
    /// next scripted answer; a job's link holds it for its duration, then drops it (no
    /// executor: the router only sees how long the job held its worker).
    struct ScriptedGitlab {
        script: Script,
        tokens: Vec<String>,
        asked: Mutex<HashMap<usize, usize>>,
    }

    struct ScriptedJob(u64);

    impl JobLink for ScriptedJob {
        type Sink = drover::executor::MemorySink;
        async fn start(&mut self) -> Ack {
            tokio::time::sleep(Duration::from_millis(self.0)).await;
            Ack::Drop
        }
        fn sink(&mut self) -> Self::Sink {
            drover::executor::MemorySink::default()
        }
        fn control(&self) -> drover::executor::JobControl {
            drover::executor::JobControl::default()
        }
        async fn finish(self, _outcome: JobOutcome) {}
    }

    impl JobSource for ScriptedGitlab {
        type Link = ScriptedJob;
        async fn request_job(
            &self,
            runner: &RunnerConfig,
            _cancel: &CancellationToken,
        ) -> Requested<ScriptedJob> {
            let index = self.tokens.iter().position(|t| *t == runner.token);
            let (answer, ms) = match index {
                Some(i) => {
                    let mut asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
                    self.script.next_answer(i, &mut asked)
                }
                None => (Answer::NoJob, 0),
            };
            tokio::time::sleep(Duration::from_millis(self.script.request_ms)).await;
            match answer {
                Answer::Job => Requested::Job(Box::default(), ScriptedJob(ms)),
                Answer::NoJob => Requested::NoJob,
                Answer::PushedBack => Requested::PushedBack,
                Answer::Failed => Requested::Failed("scripted network error".into()),
                Answer::Forbidden => Requested::Unhealthy("403 Forbidden (scripted)".into()),
            }
        }
    }

    /// Five runners across the router's paths: `limit` and adaptive `request_concurrency`;
    /// `strict_check_interval` and health; an executor drover does not run; docker+machine
    /// with no provider (Acquire refuses); no token (never fed); docker+machine with a pool
    /// (Acquire hands out Idle machines, or none, and the job's end releases them).
    const CONFIG: &str = r#"
concurrent = 3
check_interval = 2

[[runners]]
name = "busy"
url = "https://gitlab.example.com"
token = "glrt-busy-0000000000"
executor = "docker"
limit = 2
request_concurrency = 3

[[runners]]
name = "strict"
url = "https://gitlab.example.com"
token = "glrt-strict-00000000"
executor = "docker"
strict_check_interval = true
unhealthy_requests_limit = 2
unhealthy_interval = "5s"

[[runners]]
name = "shell"
url = "https://gitlab.example.com"
token = "glrt-shell-000000000"
executor = "shell"
unhealthy_requests_limit = 2
unhealthy_interval = "7s"

[[runners]]
name = "machines"
url = "https://gitlab.example.com"
token = "glrt-machines-000000"
executor = "docker+machine"
[runners.machine]
MachineDriver = "google"
MachineName = "auto-%s"

[[runners]]
name = "tokenless"
url = "https://gitlab.example.com"
token = ""
executor = "docker"

[[runners]]
name = "pooled"
url = "https://gitlab.example.com"
token = "glrt-pooled-00000000"
executor = "docker+machine"
limit = 2
[runners.machine]
IdleCount = 1
IdleTime = 3600
MachineDriver = "google"
MachineName = "pooled-%s"
"#;

    /// The runner of `CONFIG` whose Acquire passes run on a machine pool.
    const POOLED: usize = 5;

    fn script() -> Script {
        use Answer::*;
        Script {
            answers: vec![
                vec![
                    Job, Job, Job, NoJob, PushedBack, Job, Failed, Job, Job, NoJob, Job, Job, Job,
                ],
                vec![
                    Job, Forbidden, Forbidden, Forbidden, NoJob, Job, Job, PushedBack, Forbidden,
                ],
                vec![],
                vec![],
                vec![],
                vec![
                    Job, NoJob, Job, Job, PushedBack, Job, Failed, Job, NoJob, Job, Job, Job,
                ],
            ],
            request_ms: 130,
            job_ms: vec![2_345, 777, 5_271, 1_913, 3_089],
            until: 40_050,
            // Filled from the pool's answers in `drover run` (see the test).
            acquired: Vec::new(),
        }
    }

    /// The Acquire answers of `log`, per runner, in order: the machine pool's side of the
    /// script, which the simulator's driver is then fed.
    fn acquire_answers(log: &[Decision], runners: usize) -> Vec<Vec<Acquired>> {
        let mut runner_of: HashMap<usize, usize> = HashMap::new();
        let mut answers = vec![Vec::new(); runners];
        for d in log {
            if let Input::Acquired(w, a) = &d.input {
                if let Some(list) = runner_of.get(w).and_then(|&r| answers.get_mut(r)) {
                    list.push(a.clone());
                }
            }
            for c in &d.commands {
                if let Command::Acquire { worker, runner } = c {
                    runner_of.insert(*worker, *runner);
                }
            }
        }
        answers
    }

    fn manager_decisions(config: drover::config::Config, script: Script) -> Vec<Decision> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let until = script.until;
            let source = ScriptedGitlab {
                tokens: config.runners.iter().map(|r| r.token.clone()).collect(),
                script,
                asked: Mutex::new(HashMap::new()),
            };
            // The pooled runner's machine pool: its own engine on the in-memory provider,
            // started (its IdleCount machine created) before the feeder's first pass.
            let mut pools = Pools::default();
            let pooled = &config.runners[POOLED];
            let policy = drover::engine::policy_from_runner(pooled).expect("a policy");
            let pool = Pool::start(
                vec![policy],
                Arc::new(MemoryProvider::default()),
                Arc::new(NoObserver),
            );
            pool.started().await.expect("the pool starts");
            pools
                .by_token
                .insert(pooled.token.clone(), (pool, RunnerId(0)));
            let manager: Arc<Manager<ScriptedGitlab>> =
                Manager::new(source, config, String::new(), pools, None);
            manager.record_decisions();
            let feeder = tokio::spawn(manager.clone().feed());
            tokio::time::sleep(Duration::from_millis(until)).await;
            let log = manager.decisions();
            manager.stop.cancel();
            let _ = feeder.await;
            log
        })
    }

    #[test]
    fn drover_run_and_the_simulator_make_the_same_decisions() {
        let config = super::config(CONFIG);
        let mut script = script();
        let runners = config.runners.len();
        let run = manager_decisions(config.clone(), script.clone());
        script.acquired = acquire_answers(&run, runners);
        let simulated = replay(drover::engine::router_config(&config), &script);
        // Every line up to the first difference, for the failure message.
        let first_difference = simulated
            .iter()
            .zip(&run)
            .position(|(a, b)| a != b)
            .unwrap_or(simulated.len().min(run.len()));
        assert_eq!(
            simulated.len(),
            run.len(),
            "decision logs differ in length; first difference at {first_difference}: sim {:?} / run {:?}",
            simulated.get(first_difference),
            run.get(first_difference)
        );
        assert!(
            first_difference == simulated.len(),
            "decision {first_difference} differs:\n sim {:?}\n run {:?}",
            simulated.get(first_difference),
            run.get(first_difference)
        );
        // The script exercises every path it is meant to (not an empty or idle log).
        let commands: Vec<&Command> = simulated.iter().flat_map(|d| &d.commands).collect();
        let has = |f: &dyn Fn(&Command) -> bool| commands.iter().any(|c| f(c));
        use drover::engine::router::Skip;
        assert!(has(&|c| matches!(c, Command::RunJob { runner: 0, .. })));
        assert!(has(&|c| matches!(
            c,
            Command::Skipped {
                why: Skip::Limit,
                ..
            }
        )));
        assert!(has(&|c| matches!(
            c,
            Command::Skipped {
                why: Skip::NoFreeExecutor,
                ..
            }
        )));
        assert!(has(&|c| matches!(c, Command::UnsupportedExecutor { .. })));
        assert!(has(&|c| matches!(c, Command::Unhealthy { runner: 1, .. })));
        assert!(has(&|c| matches!(
            c,
            Command::ForcedCheck { runner: 1, .. }
        )));
        assert!(has(&|c| matches!(c, Command::FeedSkipped { runner: 4 })));
        let requeued = simulated.iter().any(|d| {
            matches!(d.input, Input::Answered(_, Answer::Job))
                && d.commands
                    .iter()
                    .any(|c| matches!(c, Command::Request { runner: 0, .. }))
        });
        assert!(requeued, "a job re-queues its runner at once");
        // The pooled runner: machines handed out, jobs run on them, and released both after
        // a job and after a request that brought none.
        let handed_out = script.acquired[POOLED]
            .iter()
            .filter(|a| matches!(a, Acquired::Machine(_)))
            .count();
        assert!(handed_out >= 3, "{:?}", script.acquired[POOLED]);
        assert!(has(&|c| matches!(
            c,
            Command::RunJob {
                runner: POOLED,
                acquired: Some(_),
                ..
            }
        )));
        let releases = commands
            .iter()
            .filter(|c| matches!(c, Command::Release { runner: POOLED, .. }))
            .count();
        assert!(releases >= 3, "{releases} releases");
        let released_unused = simulated.iter().any(|d| {
            matches!(d.input, Input::Answered(_, Answer::NoJob))
                && d.commands
                    .iter()
                    .any(|c| matches!(c, Command::Release { runner: POOLED, .. }))
        });
        assert!(
            released_unused,
            "a request without a job releases its machine"
        );
        assert!(simulated.len() > 100, "{} decisions", simulated.len());
        println!(
            "router equivalence: {} decisions, both drivers agree ({handed_out} machines handed out, {releases} releases)",
            simulated.len()
        );
    }
}
