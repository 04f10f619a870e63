//! Upstream's run loop (spec gitlab-api.md §7): `concurrent` workers, a feeder spreading
//! `check_interval` across the runners, the per-runner gates (`limit`, `request_concurrency`
//! with the adaptive rule, the machine pool's Acquire pass), the non-blocking re-queue after a
//! job, unhealthy runners, and the job pipeline around the executor (ack, Use, run, final
//! update, Release).
//!
//! Workers are permits of a semaphore: the feeder waits for a free one (upstream's unbuffered
//! channel) and hands the runner to a task holding it; a task that got a job tries to take a
//! second permit for the same runner without waiting (the re-queue).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::pool::Pool;
use super::source::{Ack, JobLink, JobOutcome, JobSource, Requested};
use crate::config::model::{Config, RunnerConfig};
use crate::engine::router::{self, Acquired, Answer, Command as Route, Router, WorkerId};
use crate::engine::{AcquireResult, RunnerId};
use crate::executor::Slot;
use crate::executor::{
    self, DockerEndpoint, FailureReason, JobError, JobRequest, RunnerSettings, TraceSink,
};
use crate::job::JobPayload;

/// Preparation attempts of a job (upstream's `PreparationRetries`), each on a machine whose
/// Docker Engine answers.
pub const PREPARATION_ATTEMPTS: u32 = 3;

/// The pause between preparation attempts.
pub const PREPARATION_RETRY: Duration = Duration::from_secs(3);

/// Locks a std mutex, recovering from poisoning (a panicked holder leaves plain counters).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counts worker tasks so shutdown can wait for all of them.
#[derive(Debug, Default)]
struct Tracker {
    live: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

impl Tracker {
    fn spawn<F: std::future::Future<Output = ()> + Send + 'static>(self: &Arc<Self>, f: F) {
        use std::sync::atomic::Ordering;
        self.live.fetch_add(1, Ordering::SeqCst);
        let me = self.clone();
        tokio::spawn(async move {
            f.await;
            if me.live.fetch_sub(1, Ordering::SeqCst) == 1 {
                me.idle.notify_waiters();
            }
        });
    }

    async fn wait(&self) {
        use std::sync::atomic::Ordering;
        loop {
            let notified = self.idle.notified();
            if self.live.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// What one worker turn did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// A job was received and run.
    Job,
    /// The request came back empty (or was cancelled).
    NoJob,
    /// No request was made (limit, request slots, no free machine).
    Skipped,
    /// The request failed in a way that counts against the runner's health.
    Unhealthy,
}

/// A job currently held by this process (for logs and `/debug/jobs/list`).
#[derive(Debug, Clone)]
pub struct RunningJob {
    /// The job id.
    pub id: i64,
    /// The runner's short token.
    pub runner: String,
    /// The project's full path.
    pub project: String,
    /// When it started.
    pub started: Instant,
    /// The runner's token (slots are counted per runner).
    token: String,
    /// The project id (project slots are counted per runner and project).
    project_id: i64,
    /// The job's slot (`CI_CONCURRENT_ID`, `CI_CONCURRENT_PROJECT_ID`).
    pub slot: Slot,
}

/// The slot of a job that starts while `running` jobs are held, as upstream counts: the
/// lowest `CI_CONCURRENT_ID` no running job of the same runner (token) holds, and the lowest
/// `CI_CONCURRENT_PROJECT_ID` no running job of the same runner and project holds. On
/// docker+machine the project slot is always 0 (each job has a machine of its own).
pub fn allocate_slot<'a>(
    running: impl IntoIterator<Item = &'a RunningJob>,
    token: &str,
    project_id: i64,
    machine: bool,
) -> Slot {
    let mut runner_taken = std::collections::BTreeSet::new();
    let mut project_taken = std::collections::BTreeSet::new();
    for j in running.into_iter().filter(|j| j.token == token) {
        runner_taken.insert(j.slot.runner);
        if j.project_id == project_id {
            project_taken.insert(j.slot.project);
        }
    }
    let lowest_free = |taken: &std::collections::BTreeSet<usize>| {
        (0..).find(|n| !taken.contains(n)).unwrap_or_default()
    };
    Slot {
        runner: lowest_free(&runner_taken),
        project: if machine {
            0
        } else {
            lowest_free(&project_taken)
        },
    }
}

/// The machine pools: a runner token maps to its pool and its index in that pool's engine.
#[derive(Clone, Default)]
pub struct Pools {
    /// Token → (pool, runner id in its engine).
    pub by_token: HashMap<String, (Pool, RunnerId)>,
}

/// Shared state of one `drover run`.
pub struct Manager<S: JobSource> {
    source: Arc<S>,
    config: RwLock<Arc<Config>>,
    system_id: String,
    /// `run-single`'s router (one worker, one runner), kept between turns for its counters.
    single: Mutex<Option<Router>>,
    /// The origin of `run-single`'s router clock.
    single_origin: tokio::time::Instant,
    jobs: Mutex<HashMap<i64, RunningJob>>,
    /// Swapped whole by a reload that adds docker+machine runners.
    pools: RwLock<Arc<Pools>>,
    /// Reloads for the router's driver (it applies them between inputs).
    reloads: tokio::sync::watch::Sender<Arc<Config>>,
    /// The router's decision log, when asked for ([`Manager::record_decisions`]).
    decisions: Mutex<Option<Vec<router::Decision>>>,
    concurrent: Mutex<usize>,
    /// SIGQUIT (and every stop): stop feeding, cancel in-flight requests.
    pub stop: CancellationToken,
    /// SIGTERM/SIGINT: abort running jobs with `runner_interrupted`.
    pub interrupt: CancellationToken,
    tracker: Arc<Tracker>,
    metrics: Option<crate::metrics::Metrics>,
}

/// `concurrent` as a worker count (0 or negative is refused when the config loads; 1 here).
fn workers_of(config: &Config) -> usize {
    usize::try_from(config.concurrent).unwrap_or(1).max(1)
}

/// `unhealthy_requests_limit` with its default, as the router reads it.
fn unhealthy_requests_limit(r: &RunnerConfig) -> u32 {
    crate::engine::router_runner(r).unhealthy_requests_limit
}

/// `unhealthy_interval` with its default, as the router reads it.
fn unhealthy_interval(r: &RunnerConfig) -> Duration {
    Duration::from_millis(crate::engine::router_runner(r).unhealthy_interval)
}

/// How upstream names a runner in its health messages: the URL and the short token.
fn unique_id(r: &RunnerConfig) -> String {
    format!("{}{}", r.url, crate::engine::naming::short_token(&r.token))
}

/// The run loop's log line for a failed job, as upstream's: a job error that is not a build
/// error (`system`) is logged at error level as a system failure; a build error at warning
/// level, worded as a system failure when its reason is `runner_system_failure`. Returns
/// whether the line is at error level, and its message.
pub fn job_failed_line(system: bool, reason: &str, text: &str) -> (bool, String) {
    if system || reason == "runner_system_failure" {
        (system, format!("Job failed (system failure): {text}"))
    } else {
        (false, format!("Job failed: {text}"))
    }
}

/// Whether the runner has a token to poll with (blank counts as none, as upstream).
pub fn has_token(r: &RunnerConfig) -> bool {
    !r.token.trim().is_empty()
}

/// A runner's metric labels.
fn runner_labels(r: &RunnerConfig) -> crate::metrics::RunnerLabels {
    crate::metrics::RunnerLabels::new(crate::engine::naming::short_token(&r.token), r.name.clone())
}

/// The executors this drover runs.
pub fn supported_executor(name: &str) -> bool {
    matches!(name, "docker" | "docker+machine")
}

/// The Docker endpoint of a plain `docker` runner: `[runners.docker] host` and its TLS
/// settings, else the environment (DOCKER_HOST…), as upstream's docker executor.
pub fn plain_docker_endpoint(r: &RunnerConfig) -> DockerEndpoint {
    DockerEndpoint::configured(r.docker.as_deref()).unwrap_or_else(DockerEndpoint::from_env)
}

/// Reports the manager's workers send the router's driver.
enum Report<L> {
    /// An Acquire pass ended.
    Acquired(WorkerId, Acquired),
    /// A job request (worker, runner) ended.
    Answered(WorkerId, usize, Requested<L>),
    /// A job ended; the machine `Use` returned when it is not the acquired one.
    JobDone(WorkerId, Option<String>),
}

/// Reports waiting for the driver, at most (senders wait beyond: each task sends one).
const REPORTS: usize = 64;

/// The router's settings for `drover run`: the config's, each runner keyed by its token.
fn run_router_config(config: &Config) -> router::RouterConfig {
    crate::engine::router_config(config)
}

/// Sleeps until `at`, or for ever.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The error line of a runner whose executor drover does not run.
fn unsupported(r: &RunnerConfig) {
    tracing::error!(
        runner = %crate::engine::naming::short_token(&r.token),
        executor = %r.executor,
        "Executor not found; drover runs `docker` and `docker+machine` runners"
    );
}

/// Upstream's line when a runner becomes unhealthy.
fn log_unhealthy(r: &RunnerConfig, failures: u32) {
    tracing::error!(
        unhealthy_requests = failures,
        unhealthy_requests_limit = unhealthy_requests_limit(r),
        "Runner {:?} is unhealthy and will be disabled for {} seconds!",
        unique_id(r),
        crate::config::GoDuration::from_nanos(
            i64::try_from(unhealthy_interval(r).as_nanos()).unwrap_or(i64::MAX)
        )
    );
}

/// Upstream's line when `unhealthy_interval` has passed and a request is forced.
fn log_forced_check(r: &RunnerConfig, failures: u32) {
    tracing::warn!(
        unhealthy_interval = crate::upstream_log::format::duration_field(unhealthy_interval(r)),
        unhealthy_requests = failures,
        unhealthy_requests_limit = unhealthy_requests_limit(r),
        "Runner {:?} is not healthy, but check for a new job will be forced!",
        unique_id(r)
    );
}

impl<S: JobSource> Manager<S> {
    /// A manager for `config` with its machine pools already started.
    pub fn new(
        source: S,
        config: Config,
        system_id: String,
        pools: Pools,
        metrics: Option<crate::metrics::Metrics>,
    ) -> Arc<Self> {
        let n = workers_of(&config);
        if let Some(m) = &metrics {
            m.set_concurrent(config.concurrent);
            for r in &config.runners {
                m.runner(&runner_labels(r)).set_limit(r.limit);
            }
        }
        let config = Arc::new(config);
        Arc::new(Manager {
            source: Arc::new(source),
            reloads: tokio::sync::watch::Sender::new(config.clone()),
            decisions: Mutex::new(None),
            config: RwLock::new(config),
            system_id,
            single: Mutex::new(None),
            single_origin: tokio::time::Instant::now(),
            jobs: Mutex::new(HashMap::new()),
            pools: RwLock::new(Arc::new(pools)),
            concurrent: Mutex::new(n),
            stop: CancellationToken::new(),
            interrupt: CancellationToken::new(),
            tracker: Arc::new(Tracker::default()),
            metrics,
        })
    }

    /// The config in force.
    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The machine pools in force.
    pub fn pools(&self) -> Arc<Pools> {
        self.pools.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the machine pools (a reload added runners); workers already holding a pool
    /// keep it for their turn.
    pub fn set_pools(&self, pools: Pools) {
        *self.pools.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(pools);
    }

    /// Jobs held right now.
    pub fn running_jobs(&self) -> Vec<RunningJob> {
        let mut v: Vec<RunningJob> = lock(&self.jobs).values().cloned().collect();
        v.sort_by_key(|j| j.id);
        v
    }

    /// Number of jobs held right now.
    pub fn builds(&self) -> usize {
        lock(&self.jobs).len()
    }

    /// Replaces the config (a reload): the router takes `concurrent`, `check_interval` and the
    /// runner list between two inputs; everything else is read afresh by the workers.
    pub fn apply(&self, config: Config) {
        let n = workers_of(&config);
        if let Some(m) = &self.metrics {
            m.set_concurrent(config.concurrent);
            for r in &config.runners {
                m.runner(&runner_labels(r)).set_limit(r.limit);
            }
        }
        *lock(&self.concurrent) = n;
        let config = Arc::new(config);
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = config.clone();
        self.reloads.send_replace(config);
    }

    /// Keeps the router's decision log from now on (tests: the equivalence with the
    /// simulator's driver). Memory grows with the run.
    pub fn record_decisions(&self) {
        *lock(&self.decisions) = Some(Vec::new());
    }

    /// The router's decision log so far (empty unless [`Manager::record_decisions`]).
    pub fn decisions(&self) -> Vec<router::Decision> {
        lock(&self.decisions).clone().unwrap_or_default()
    }

    /// Starts the run loop: a task drives the job router ([`crate::engine::router`]) with
    /// GitLab, the machine pools and the executor until [`Manager::stop`] fires and every
    /// worker is free again ([`Manager::wait_idle`] waits for it). Returns when stop fires.
    pub async fn feed(self: Arc<Self>) {
        let me = self.clone();
        self.tracker.spawn(async move { me.drive().await });
        self.stop.cancelled().await;
    }

    /// The router's driver: one task owns the router; every command becomes a task (or a
    /// metric or log line) whose result comes back as the router's next input.
    async fn drive(self: Arc<Self>) {
        let origin = tokio::time::Instant::now();
        let now = || u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut reloads = self.reloads.subscribe();
        let mut config = reloads.borrow_and_update().clone();
        let mut router = Router::new(run_router_config(&config), now());
        if lock(&self.decisions).is_some() {
            router = router.with_log();
        }
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Report<S::Link>>(REPORTS);
        let mut held: HashMap<WorkerId, (Box<JobPayload>, S::Link)> = HashMap::new();
        let mut stopped = false;
        loop {
            self.execute(&mut router, &config, &mut held, &tx);
            if let Some(log) = lock(&self.decisions).as_mut() {
                log.extend(router.take_log());
            }
            if stopped && router.busy_workers() == 0 {
                return;
            }
            let wake = router
                .poll_timeout()
                .map(|ms| origin + Duration::from_millis(ms));
            tokio::select! {
                () = self.stop.cancelled(), if !stopped => {
                    stopped = true;
                    router.stop(now());
                }
                Ok(()) = reloads.changed() => {
                    config = reloads.borrow_and_update().clone();
                    router.apply(run_router_config(&config), now());
                }
                Some(report) = rx.recv() => {
                    let t = now();
                    let done = match report {
                        Report::Acquired(w, a) => router.acquired(w, a, t),
                        Report::Answered(w, runner, requested) => {
                            let mut got = None;
                            let answer = match config.runners.get(runner) {
                                Some(r) => self.answer_of(r, requested, &mut got),
                                None => Answer::NoJob,
                            };
                            if let Some(job) = got {
                                held.insert(w, job);
                            }
                            router.answered(w, answer, t)
                        }
                        Report::JobDone(w, used) => router.job_finished(w, used, t),
                    };
                    if let Err(e) = done {
                        tracing::error!("{e}");
                    }
                }
                () = sleep_until(wake) => router.handle_timeout(now()),
            }
        }
    }

    /// Turns a request's result into the router's [`Answer`], logging failures and keeping
    /// a received job for the router's `RunJob` in `held`.
    fn answer_of(
        &self,
        r: &RunnerConfig,
        requested: Requested<S::Link>,
        held: &mut Option<(Box<JobPayload>, S::Link)>,
    ) -> Answer {
        let short = crate::engine::naming::short_token(&r.token);
        match requested {
            Requested::Job(payload, link) => {
                *held = Some((payload, link));
                Answer::Job
            }
            Requested::NoJob => Answer::NoJob,
            Requested::PushedBack => Answer::PushedBack,
            Requested::Unhealthy(msg) => {
                tracing::error!(runner = %short, "Checking for jobs... forbidden: {msg}");
                Answer::Forbidden
            }
            Requested::Failed(msg) => {
                tracing::warn!(runner = %short, "Checking for jobs... failed: {msg}");
                Answer::Failed
            }
        }
    }

    /// Executes the router's commands: Acquire, request and job tasks report back on `tx`;
    /// the releases of one input run in one task, in the router's order.
    fn execute(
        self: &Arc<Self>,
        router: &mut Router,
        config: &Arc<Config>,
        held: &mut HashMap<WorkerId, (Box<JobPayload>, S::Link)>,
        tx: &tokio::sync::mpsc::Sender<Report<S::Link>>,
    ) {
        let mut releases = Vec::new();
        while let Some(c) = router.poll_command() {
            let runner_of = |i: usize| config.runners.get(i).cloned();
            match c {
                Route::Acquire { worker, runner } => {
                    let Some(r) = runner_of(runner) else { continue };
                    let (me, tx) = (self.clone(), tx.clone());
                    self.tracker.spawn(async move {
                        let got = match me.acquire(&r).await {
                            Ok((_, _, Some(m))) => Acquired::Machine(m),
                            Ok((_, _, None)) => Acquired::NoMachine,
                            Err(()) => Acquired::Refused,
                        };
                        let _ = tx.send(Report::Acquired(worker, got)).await;
                    });
                }
                Route::Request { worker, runner } => {
                    let Some(r) = runner_of(runner) else { continue };
                    let (me, tx) = (self.clone(), tx.clone());
                    self.tracker.spawn(async move {
                        let requested = tokio::select! {
                            v = me.source.request_job(&r, &me.stop) => v,
                            () = me.stop.cancelled() => Requested::NoJob,
                        };
                        let _ = tx.send(Report::Answered(worker, runner, requested)).await;
                    });
                }
                Route::RunJob {
                    worker,
                    runner,
                    acquired,
                } => {
                    let (Some(r), Some((payload, link))) =
                        (runner_of(runner), held.remove(&worker))
                    else {
                        continue;
                    };
                    let (me, tx) = (self.clone(), tx.clone());
                    self.tracker.spawn(async move {
                        let machine = if r.executor == "docker+machine" {
                            me.pools().by_token.get(&r.token).cloned()
                        } else {
                            None
                        };
                        let used = me.run_job(&r, *payload, link, machine, acquired).await;
                        let _ = tx.send(Report::JobDone(worker, used)).await;
                    });
                }
                Route::Release { runner, machine } => {
                    if let Some(r) = runner_of(runner) {
                        if let Some((pool, id)) = self.pools().by_token.get(&r.token).cloned() {
                            releases.push((pool, id, machine));
                        }
                    }
                }
                Route::Fed { runner, .. }
                | Route::FeedSkipped { runner }
                | Route::Skipped { runner, .. }
                | Route::UnsupportedExecutor { runner }
                | Route::RequestSlots { runner, .. }
                | Route::Unhealthy { runner, .. }
                | Route::ForcedCheck { runner, .. } => {
                    if let Some(r) = runner_of(runner) {
                        self.note(&r, &c);
                    }
                }
                Route::WorkerFree { .. } => {}
            }
        }
        if !releases.is_empty() {
            self.tracker.spawn(async move {
                for (pool, id, machine) in releases {
                    pool.release(id, machine).await;
                }
            });
        }
    }

    /// The runner's metrics, when metrics are on.
    fn runner_metrics(&self, r: &RunnerConfig) -> Option<crate::metrics::RunnerMetrics> {
        self.metrics.as_ref().map(|m| m.runner(&runner_labels(r)))
    }

    /// One turn of `drover run-single` for its one runner: the router (one worker, this
    /// runner) applies the gates, then Acquire, the request, the job and its releases run
    /// here in order. (`drover run` drives a router of all runners instead.)
    pub async fn work(self: Arc<Self>, r: RunnerConfig) -> Turn {
        let now = || u64::try_from(self.single_origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        // One worker and this runner; the feeder is not used (run-single pauses itself).
        let settings = router::RouterConfig {
            concurrent: 1,
            runners: vec![crate::engine::router_runner(&r)],
            ..crate::engine::router_config(&self.config())
        };
        let taken = lock(&self.single).take();
        let mut router = match taken {
            Some(mut router) => {
                router.apply(settings, now());
                router
            }
            None => Router::new(settings, now()),
        };
        let mut turn = Turn::Skipped;
        let mut held = None;
        router.hand_out(0, now());
        while let Some(c) = router.poll_command() {
            let done = match c {
                Route::Acquire { worker, .. } => {
                    let got = match self.acquire(&r).await {
                        Ok((_, _, Some(m))) => Acquired::Machine(m),
                        Ok((_, _, None)) => Acquired::NoMachine,
                        Err(()) => Acquired::Refused,
                    };
                    router.acquired(worker, got, now())
                }
                Route::Request { worker, .. } => {
                    let requested = tokio::select! {
                        v = self.source.request_job(&r, &self.stop) => v,
                        () = self.stop.cancelled() => Requested::NoJob,
                    };
                    let answer = self.answer_of(&r, requested, &mut held);
                    turn = match answer {
                        Answer::Job => Turn::Job,
                        Answer::Forbidden => Turn::Unhealthy,
                        _ => Turn::NoJob,
                    };
                    router.answered(worker, answer, now())
                }
                Route::RunJob {
                    worker, acquired, ..
                } => {
                    let mut used = None;
                    if let Some((payload, link)) = held.take() {
                        let machine = if r.executor == "docker+machine" {
                            self.pools().by_token.get(&r.token).cloned()
                        } else {
                            None
                        };
                        used = self.run_job(&r, *payload, link, machine, acquired).await;
                    }
                    router.job_finished(worker, used, now())
                }
                Route::Release { machine, .. } => {
                    if let Some((pool, id)) = self.pools().by_token.get(&r.token).cloned() {
                        pool.release(id, machine).await;
                    }
                    Ok(())
                }
                Route::UnsupportedExecutor { .. } => {
                    turn = Turn::Unhealthy;
                    self.note(&r, &c);
                    Ok(())
                }
                other => {
                    self.note(&r, &other);
                    Ok(())
                }
            };
            if let Err(e) = done {
                tracing::error!("{e}");
            }
        }
        *lock(&self.single) = Some(router);
        turn
    }

    /// The log lines and metrics of the router's decisions about runner `r` (the commands
    /// that need no I/O).
    fn note(&self, r: &RunnerConfig, c: &Route) {
        let m = self.runner_metrics(r);
        match c {
            Route::Fed { .. } => {
                if let Some(m) = m {
                    m.feed();
                }
            }
            Route::FeedSkipped { .. } => {
                if let Some(m) = m {
                    m.feed_failure();
                }
            }
            Route::Skipped { why, .. } => match (why, m) {
                (router::Skip::NoFreeExecutor, Some(m)) => {
                    m.processing_failure(crate::metrics::ProcessingFailure::NoFreeExecutor)
                }
                (router::Skip::RequestConcurrency, Some(m)) => m.request_concurrency_exceeded(),
                _ => {}
            },
            Route::UnsupportedExecutor { .. } => {
                unsupported(r);
                if let Some(m) = m {
                    m.processing_failure(crate::metrics::ProcessingFailure::Other);
                }
            }
            Route::RequestSlots {
                max,
                adaptive,
                in_flight,
                ..
            } => {
                if let Some(m) = m {
                    m.request_concurrency_limits(*max as i64, adaptive.get(), *in_flight as i64);
                    m.request_concurrency(*in_flight as i64);
                }
            }
            Route::Unhealthy { failures, .. } => log_unhealthy(r, *failures),
            Route::ForcedCheck { failures, .. } => log_forced_check(r, *failures),
            Route::Acquire { .. }
            | Route::Request { .. }
            | Route::RunJob { .. }
            | Route::Release { .. }
            | Route::WorkerFree { .. } => {}
        }
    }

    /// The Acquire pass as the capacity gate: `Err` means "do not request a job".
    #[allow(clippy::type_complexity)]
    async fn acquire(&self, r: &RunnerConfig) -> Result<(Pool, RunnerId, Option<String>), ()> {
        let short = crate::engine::naming::short_token(&r.token);
        let Some((pool, id)) = self.pools().by_token.get(&r.token).cloned() else {
            tracing::error!(runner = %short, "no machine pool for this runner (its autoscaling settings were refused; see the reload's error)");
            return Err(());
        };
        match pool.acquire(id).await {
            Ok(out) => match out.result {
                AcquireResult::Machine(name) => Ok((pool, id, Some(name))),
                AcquireResult::NoMachine => Ok((pool, id, None)),
                other => {
                    let text = other.error_text().unwrap_or("no machine");
                    tracing::debug!(runner = %short, "Failed to request job: {text}");
                    Err(())
                }
            },
            Err(e) => {
                tracing::warn!(runner = %short, "Failed to request job: {e}");
                Err(())
            }
        }
    }

    /// The §6 pipeline for one job: ack, machine, executor, final update. Returns the machine
    /// `Use` returned when it is not the acquired one (the caller releases both).
    async fn run_job(
        &self,
        r: &RunnerConfig,
        payload: JobPayload,
        mut link: S::Link,
        machine: Option<(Pool, RunnerId)>,
        acquired: Option<String>,
    ) -> Option<String> {
        let short = crate::engine::naming::short_token(&r.token);
        let id = payload.id;
        let slot = {
            let mut jobs = lock(&self.jobs);
            let project_id = payload.job_info.project_id;
            let slot = allocate_slot(jobs.values(), &r.token, project_id, machine.is_some());
            jobs.insert(
                id,
                RunningJob {
                    id,
                    runner: short.to_string(),
                    project: payload.job_info.project_full_path.clone(),
                    started: Instant::now(),
                    token: r.token.clone(),
                    project_id,
                    slot,
                },
            );
            slot
        };
        self.log_processing_list(r, &payload, short, "Added job to processing list");
        let job_url = payload
            .variable("CI_JOB_URL")
            .unwrap_or_default()
            .to_string();
        let metric = self.metrics.as_ref().map(|m| {
            let job = m
                .runner(&runner_labels(r))
                .job_started(crate::metrics::JobPickup {
                    url: &job_url,
                    time_in_queue_seconds: payload.job_info.time_in_queue_seconds,
                    project_jobs_running: "",
                    queue_size: None,
                    queue_depth: None,
                });
            job.set_state(crate::metrics::JobState::Running);
            job
        });
        let used = self
            .job_pipeline(
                r,
                &payload,
                &mut link,
                machine.as_ref(),
                acquired.as_deref(),
                slot,
            )
            .await;
        let (outcome, used_machine) = used;
        if let Some(job) = metric {
            if self.interrupt.is_cancelled() {
                job.set_state(crate::metrics::JobState::Terminated);
            } else {
                job.set_state(crate::metrics::JobState::Finished);
            }
            let reason = match &outcome {
                Some(JobOutcome::Failed { reason, .. }) => Some(reason.as_str()),
                _ => None,
            };
            job.finish(reason);
        }
        if let Some(outcome) = outcome {
            link.finish(outcome).await;
        }
        lock(&self.jobs).remove(&id);
        self.log_processing_list(r, &payload, short, "Removed job from processing list");
        used_machine.filter(|m| m.new_data).map(|m| m.name)
    }

    #[allow(clippy::type_complexity)]
    async fn job_pipeline(
        &self,
        r: &RunnerConfig,
        payload: &JobPayload,
        link: &mut S::Link,
        machine: Option<&(Pool, RunnerId)>,
        acquired: Option<&str>,
        slot: Slot,
    ) -> (Option<JobOutcome>, Option<crate::engine::UsedMachine>) {
        let started = Instant::now();
        let short = crate::engine::naming::short_token(&r.token);
        match link.start().await {
            Ack::Proceed => {}
            Ack::Drop => return (None, None),
            Ack::Canceling => {
                return (
                    Some(JobOutcome::Failed {
                        reason: FailureReason::JobCanceled,
                        exit_code: None,
                    }),
                    None,
                )
            }
        }
        let control = link.control();
        let mut sink = link.sink();
        // SIGTERM/SIGINT abort every running job.
        let abort = control.abort.clone();
        let interrupt = self.interrupt.clone();
        let watcher = tokio::spawn(async move {
            tokio::select! {
                () = interrupt.cancelled() => abort.cancel(),
                () = abort.cancelled() => {}
            }
        });
        let (endpoint, used, machine_name) = match machine {
            None => (plain_docker_endpoint(r), None, None),
            Some((pool, rid)) => {
                let used = self
                    .usable_machine(r, pool, *rid, acquired, &control, &mut sink)
                    .await;
                match used {
                    Ok(m) => {
                        let verb = if m.used.new_data {
                            "Created docker-machine"
                        } else {
                            "Using existing docker-machine"
                        };
                        tracing::info!(
                            created = crate::upstream_log::format::time_field(m.created),
                            docker = m.endpoint.host.as_deref().unwrap_or_default(),
                            job = payload.id,
                            name = %m.used.name,
                            now = crate::upstream_log::format::time_field(chrono::Utc::now()),
                            project = payload.job_info.project_id,
                            runner = %short,
                            runner_name = %r.name,
                            usedCount = m.used_count,
                            "{verb}"
                        );
                        let name = m.used.name.clone();
                        (m.endpoint, Some(m.used), Some(name))
                    }
                    Err(e) => {
                        watcher.abort();
                        let _ = sink.write(
                            format!("\x1b[31;1mERROR: Preparing the docker+machine executor failed: {e}\x1b[0;m\n\x1b[31;1mERROR: Job failed (system failure): {e}\x1b[0;m\n").as_bytes(),
                        );
                        let _ = sink.flush();
                        let reason = if self.interrupt.is_cancelled() {
                            FailureReason::RunnerInterrupted
                        } else {
                            FailureReason::RunnerSystemFailure
                        };
                        return (
                            Some(JobOutcome::Failed {
                                reason: reason.for_gitlab(&payload.features.failure_reasons),
                                exit_code: None,
                            }),
                            None,
                        );
                    }
                }
            }
        };
        let mut settings = RunnerSettings::from_config(r, &self.system_id);
        settings.tls = link.tls();
        let req = JobRequest {
            payload,
            runner: &settings,
            endpoint: &endpoint,
            machine_name: machine_name.as_deref(),
            slot,
        };
        let machine_line = |msg: &str, warn: bool| {
            let Some(name) = &machine_name else {
                return;
            };
            if warn {
                tracing::warn!(job = payload.id, name = %name, now = crate::upstream_log::format::time_field(chrono::Utc::now()), project = payload.job_info.project_id, runner = %short, runner_name = %r.name, "{msg}");
            } else {
                tracing::info!(job = payload.id, name = %name, now = crate::upstream_log::format::time_field(chrono::Utc::now()), project = payload.job_info.project_id, runner = %short, runner_name = %r.name, "{msg}");
            }
        };
        machine_line("Starting docker-machine build...", false);
        let result = executor::run_job(req, &mut sink, control).await;
        watcher.abort();
        if let (Err(JobError::System(_)), Some((pool, _)), Some(name)) =
            (&result, machine, machine_name.as_deref())
        {
            if !self.interrupt.is_cancelled() {
                recheck_machine(pool, name, &endpoint).await;
            }
        }
        match &result {
            Ok(()) => machine_line("Finished docker-machine build", false),
            Err(e) => machine_line(
                &format!("Finished docker-machine build with error: {e}"),
                true,
            ),
        }
        machine_line("Cleaned up docker-machine", false);
        let outcome = self.outcome(payload, &result);
        let duration_s = started.elapsed().as_secs_f64();
        // `name` only for machine jobs (upstream's Build.Hostname, set by prepare).
        let name = machine_name.as_deref();
        match (&result, &outcome) {
            (Ok(()), _) => tracing::info!(
                duration_s,
                job = payload.id,
                "job-status" = "success",
                name,
                project = payload.job_info.project_id,
                runner = %short,
                runner_name = %r.name,
                "Job succeeded"
            ),
            (Err(e), JobOutcome::Failed { reason, exit_code }) => {
                let (system, text) = match e {
                    JobError::System(s) => (true, s.to_string()),
                    JobError::Failed(f) => (false, f.message.clone()),
                };
                let exit_code = exit_code.unwrap_or_default();
                let reason = reason.as_str();
                let (error_level, message) = job_failed_line(system, reason, &text);
                if error_level {
                    tracing::error!(duration_s, error = %text, exit_code, failure_reason = reason, job = payload.id, "job-status" = "failed", name, project = payload.job_info.project_id, runner = %short, runner_name = %r.name, "{message}");
                } else {
                    tracing::warn!(duration_s, error = %text, exit_code, failure_reason = reason, job = payload.id, "job-status" = "failed", name, project = payload.job_info.project_id, runner = %short, runner_name = %r.name, "{message}");
                }
            }
            _ => {}
        }
        (Some(outcome), used)
    }

    /// Upstream's `Added job to processing list` / `Removed job from processing list` line.
    fn log_processing_list(
        &self,
        r: &RunnerConfig,
        payload: &JobPayload,
        short: &str,
        message: &'static str,
    ) {
        tracing::info!(
            builds = self.builds(),
            job = payload.id,
            max_builds = *lock(&self.concurrent),
            namespace_id = payload.job_info.namespace_id,
            pipeline_id = payload.job_info.pipeline_id,
            project = payload.job_info.project_id,
            project_full_path = %payload.job_info.project_full_path,
            repo_url = %crate::executor::paths::url_without_credentials(&payload.git_info.repo_url),
            root_namespace_id = payload.job_info.root_namespace_id,
            runner = %short,
            runner_name = %r.name,
            time_in_queue_seconds = payload.job_info.time_in_queue_seconds.round() as i64,
            "{message}"
        );
    }

    /// `Use` a machine whose Docker Engine answers, in up to [`PREPARATION_ATTEMPTS`]
    /// preparation attempts 3 s apart (upstream's preparation retries). A machine whose Engine
    /// does not answer (unreachable, certificates missing, a creation cut short) is the
    /// machine's fault: it is given back as unusable (the engine removes it) and the next
    /// attempt uses another machine, where upstream would try the same one again.
    async fn usable_machine(
        &self,
        r: &RunnerConfig,
        pool: &Pool,
        rid: RunnerId,
        acquired: Option<&str>,
        control: &crate::executor::JobControl,
        sink: &mut <S::Link as JobLink>::Sink,
    ) -> Result<super::pool::Machine, super::pool::PoolError> {
        let mut acquired = acquired.map(str::to_string);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let m = tokio::select! {
                u = pool.use_machine(rid, acquired.take()) => u?,
                () = control.abort.cancelled() => return Err(super::pool::PoolError::Stopped),
            };
            let probe = tokio::select! {
                c = async {
                    let engine = crate::executor::connect::connect(&m.endpoint).await?;
                    if m.used.clean_first {
                        // A machine drover did not create: end what a dead drover left there.
                        self.end_leftovers(r, &engine.docker, Some(&m.used.name)).await?;
                    }
                    Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
                } => c,
                () = control.abort.cancelled() => return Err(super::pool::PoolError::Stopped),
            };
            let Err(e) = probe else {
                return Ok(m);
            };
            tracing::warn!(name = %m.used.name, error = %e, "the machine cannot serve a job; removing the machine");
            pool.release_unusable(m.used.name.clone()).await;
            if attempt >= PREPARATION_ATTEMPTS || control.abort.is_cancelled() {
                return Err(super::pool::PoolError::Unusable(m.used.name, e.to_string()));
            }
            let _ = sink.write(
                format!(
                    "\x1b[0;33mWARNING: Preparation failed: {e}\x1b[0;m\nWill be retried in 3s ...\n"
                )
                .as_bytes(),
            );
            let _ = sink.flush();
            tokio::select! {
                () = tokio::time::sleep(PREPARATION_RETRY) => {}
                () = control.abort.cancelled() => return Err(super::pool::PoolError::Stopped),
            }
        }
    }

    /// At start, before any job: ends what a drover that died left on the local Engine of
    /// each `docker` runner (docker+machine machines are cleaned on their first use instead).
    pub async fn end_local_leftovers(&self) {
        let config = self.config();
        for r in config.runners.iter().filter(|r| r.executor == "docker") {
            let done = async {
                let engine = crate::executor::connect::connect(&plain_docker_endpoint(r)).await?;
                self.end_leftovers(r, &engine.docker, None).await?;
                Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
            };
            if let Err(e) = done.await {
                tracing::warn!(runner_name = %r.name, error = %e, "cannot end the work a previous drover left on the local Docker Engine");
            }
        }
    }

    /// Ends the containers, per-build networks and temporary volumes of runner `r` (this
    /// system ID) on an Engine: work a drover that died left there. One log line and one
    /// `drover_leftovers_removed_total` count per item.
    pub async fn end_leftovers(
        &self,
        r: &RunnerConfig,
        docker: &bollard::Docker,
        machine: Option<&str>,
    ) -> Result<(), crate::executor::leftovers::LeftoverError> {
        let short = crate::engine::naming::short_token(&r.token);
        // Jobs of this process may share the Engine (several "machines" in front of one
        // Engine, as in tests): theirs are not leftovers.
        let running: Vec<i64> = lock(&self.jobs).keys().copied().collect();
        let ended =
            crate::executor::leftovers::end_leftovers(docker, short, &self.system_id, &running)
                .await?;
        for l in ended {
            tracing::warn!(
                job = l.job.as_deref().unwrap_or(""),
                kind = l.kind,
                machine = machine.unwrap_or(""),
                name = %l.name,
                runner = %short,
                "Removed work a previous drover left"
            );
            if let Some(m) = &self.metrics {
                m.leftover_removed(l.kind);
            }
        }
        Ok(())
    }

    fn outcome(&self, payload: &JobPayload, result: &Result<(), JobError>) -> JobOutcome {
        let supported = &payload.features.failure_reasons;
        match result {
            Ok(()) => JobOutcome::Success,
            Err(e) => {
                let exit_code = e.exit_code();
                let reason = if self.interrupt.is_cancelled() {
                    FailureReason::RunnerInterrupted
                } else {
                    match &e {
                        JobError::Failed(f) => f.reason,
                        JobError::System(_) => FailureReason::RunnerSystemFailure,
                    }
                };
                JobOutcome::Failed {
                    reason: reason.for_gitlab(supported),
                    exit_code,
                }
            }
        }
    }

    /// Waits for every worker task (jobs included) to end.
    pub async fn wait_idle(&self) {
        self.tracker.wait().await;
    }
}

/// A machine job that ended in a system failure may have lost its machine (the link to the
/// Engine broke mid-job, as when the machine's sshd dies): the Engine is asked again over the
/// job's endpoint (a new SSH session or TLS connection, within the connect timeout) before the
/// machine is given back, and one that does not answer is given back as unusable (the engine
/// removes it, "machine is unavailable") instead of being handed to the next job on the
/// strength of the provider's cached connectivity answer (the shim trusts a positive one for 5
/// minutes, as gitlab-runner).
async fn recheck_machine(pool: &Pool, name: &str, endpoint: &DockerEndpoint) {
    let error = match crate::executor::connect::connect(endpoint).await {
        Ok(_) => {
            tracing::debug!(
                name,
                "the machine's Docker Engine answers after the job's system failure"
            );
            return;
        }
        Err(e) => e.to_string(),
    };
    tracing::warn!(
        name,
        error = %error,
        "the machine's Docker Engine does not answer after the job's system failure; removing the machine"
    );
    pool.release_unusable(name.to_string()).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::source::{Ack, JobLink, JobOutcome};

    #[test]
    fn a_failed_job_is_logged_with_upstreams_level_and_words() {
        // (not a build error, failure reason, level error?, message): common/build.go's rule.
        let rows = [
            (
                true,
                "runner_system_failure",
                true,
                "Job failed (system failure): boom",
            ),
            (
                false,
                "runner_system_failure",
                false,
                "Job failed (system failure): boom",
            ),
            (false, "script_failure", false, "Job failed: boom"),
            (false, "job_execution_timeout", false, "Job failed: boom"),
        ];
        for (system, reason, error_level, message) in rows {
            assert_eq!(
                job_failed_line(system, reason, "boom"),
                (error_level, message.to_string()),
                "{system} {reason}"
            );
        }
    }

    /// A GitLab that never has a job (the gates are decided before any request).
    struct NoGitlab;
    struct NoLink;

    impl JobLink for NoLink {
        type Sink = crate::executor::MemorySink;
        async fn start(&mut self) -> Ack {
            Ack::Drop
        }
        fn sink(&mut self) -> Self::Sink {
            crate::executor::MemorySink::default()
        }
        fn control(&self) -> crate::executor::JobControl {
            crate::executor::JobControl::default()
        }
        async fn finish(self, _outcome: JobOutcome) {}
    }

    impl JobSource for NoGitlab {
        type Link = NoLink;
        async fn request_job(
            &self,
            _runner: &RunnerConfig,
            _cancel: &CancellationToken,
        ) -> Requested<NoLink> {
            Requested::NoJob
        }
    }

    fn manager(runner: RunnerConfig) -> Arc<Manager<NoGitlab>> {
        let mut config = crate::config::load_str("concurrent = 4\n", "test")
            .expect("config")
            .config;
        config.runners = vec![runner];
        Manager::new(NoGitlab, config, String::new(), Pools::default(), None)
    }

    fn runner() -> RunnerConfig {
        RunnerConfig {
            name: "r".into(),
            token: "glrt-gatetest".into(),
            executor: "docker".into(),
            ..RunnerConfig::default()
        }
    }

    #[test]
    fn slots_are_the_lowest_free_per_runner_and_per_project() {
        let job =
            |id: i64, token: &str, project_id: i64, runner: usize, project: usize| RunningJob {
                id,
                runner: String::new(),
                project: String::new(),
                started: Instant::now(),
                token: token.into(),
                project_id,
                slot: Slot { runner, project },
            };
        let slot = |running: &[RunningJob], token: &str, project: i64, machine: bool| {
            let s = allocate_slot(running, token, project, machine);
            (s.runner, s.project)
        };
        assert_eq!(slot(&[], "a", 1, false), (0, 0));
        // A second job of the same project: both numbers move on.
        let one = [job(1, "a", 1, 0, 0)];
        assert_eq!(slot(&one, "a", 1, false), (1, 1));
        // Another project of the same runner: a new runner slot, project slot 0.
        assert_eq!(slot(&one, "a", 2, false), (1, 0));
        // Another runner's jobs do not count.
        assert_eq!(slot(&one, "b", 1, false), (0, 0));
        // A freed slot is reused: the lowest free number, not the count.
        let gap = [
            job(1, "a", 1, 0, 0),
            job(3, "a", 1, 2, 2),
            job(4, "a", 2, 3, 0),
        ];
        assert_eq!(slot(&gap, "a", 1, false), (1, 1));
        assert_eq!(slot(&gap, "a", 2, false), (1, 1));
        // docker+machine: one machine per job, project slot always 0.
        assert_eq!(slot(&gap, "a", 1, true), (1, 0));
    }

    #[tokio::test]
    async fn an_unknown_executor_makes_no_request_and_counts_against_health() {
        let r = RunnerConfig {
            executor: "shell".into(),
            unhealthy_requests_limit: 1,
            ..runner()
        };
        let m = manager(r.clone());
        assert_eq!(m.clone().work(r.clone()).await, Turn::Unhealthy);
        let single = lock(&m.single);
        let healthy = single.as_ref().map(|router| router.is_healthy(&r.token));
        assert_eq!(healthy, Some(false), "one failure of a limit of 1");
    }
}
