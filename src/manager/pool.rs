//! The machine pool driver for `docker+machine`: one tokio task owns an [`Engine`] and is the
//! only code that calls it. It executes the engine's [`Command`]s through a provider plugin,
//! feeds their results back as [`Event`]s, answers the Acquire pass and `Use` sessions with
//! provider calls, arms the engine's `poll_timeout`, and turns [`Notice`]s into log lines (and
//! hands them to an observer for metrics). Every [`RECONCILE_INTERVAL`] it lists the provider
//! for the engine's periodic reconciliation round.
//!
//! Callers hold a cloneable [`Pool`] handle: [`Pool::acquire`] before each job request,
//! [`Pool::use_machine`] when a job arrived, [`Pool::release`] when it ended, [`Pool::drain`]
//! at shutdown. No scaling arithmetic happens here: every decision is the engine's.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot};

use crate::engine::naming::short_token;
use crate::engine::{
    AcquireOutcome, AcquireStep, Command, DrainReport, DrainSettings, Engine, Event, Notice,
    OrphanRetry, ReconcileDecision, RunnerId, RunnerPolicy, TargetLabels, UseError, UseId, UseStep,
    UsedMachine,
};
use crate::executor::DockerEndpoint;
use crate::ledger::{LedgerFile, MachineRecord, OrphanRecord};
use crate::provider::protocol::CreateParams;
use crate::provider::{Call, Endpoint, Provider, ProviderError};

/// How often a running pool reconciles its machines with the provider's listing (issue 13):
/// records whose machines vanished are dropped and machines created behind drover's back with
/// a runner's prefix are adopted. The Acquire passes already list the provider before each job
/// request, so this round matters for a quiet pool; five minutes keeps its cost (one
/// `docker-machine ls`) negligible and stays well under `machineDeadInterval` (20 min). Not a
/// setting: upstream's `[machine]` table has no key for it and drover adds none there.
pub const RECONCILE_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// Why the pool could not answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// The pool task is gone (drover is shutting down).
    #[error("the machine pool has stopped")]
    Stopped,
    /// Listing the provider's machines failed.
    #[error("cannot list machines: {0}")]
    List(ProviderError),
    /// `Use` ended without a machine.
    #[error("{0}")]
    Use(UseError),
    /// The engine refused a call (a bug in the driver; reported, never a panic).
    #[error("autoscaling engine: {0}")]
    Engine(#[from] crate::engine::EngineError),
    /// The provider returned an endpoint type drover cannot connect to.
    #[error("machine {0:?}: the provider returned an endpoint type drover does not support")]
    UnsupportedEndpoint(String),
    /// The machines handed out in every preparation attempt had a Docker Engine that did not
    /// answer; the last one and why.
    #[error("no usable machine after the preparation attempts; the last, {0:?}: {1}")]
    Unusable(String, String),
}

/// The machine a job runs on and how to reach its Docker Engine.
#[derive(Debug, Clone)]
pub struct Machine {
    /// The engine's answer (release it after the job when `new_data` is set).
    pub used: UsedMachine,
    /// The machine's Docker endpoint with the credentials the provider returned.
    pub endpoint: DockerEndpoint,
    /// Jobs started on it, this one included (`usedCount` in the log).
    pub used_count: i64,
    /// When its record was made (`created` in the log).
    pub created: DateTime<Utc>,
}

/// A machine's fields on upstream's machine log lines (`machineDetails.logger()`: `name`,
/// `lifetime`, `used`, `usedCount`, `reason`), kept from the removal request to its end
/// because the engine deletes the record before it reports the removal.
#[derive(Debug, Clone)]
struct MachineLog {
    name: String,
    created: DateTime<Utc>,
    used: DateTime<Utc>,
    used_count: i64,
    reason: String,
    /// Failed `docker-machine rm` attempts so far.
    retries: u32,
}

impl MachineLog {
    fn of(engine: &Engine, name: &str) -> MachineLog {
        let now = Utc::now();
        match engine.machine(name) {
            Some(m) => MachineLog {
                name: name.to_string(),
                created: m.created,
                used: m.used,
                used_count: m.used_count,
                reason: m.reason.map(|r| r.to_string()).unwrap_or_default(),
                retries: m.retry_count,
            },
            None => MachineLog {
                name: name.to_string(),
                created: now,
                used: now,
                used_count: 0,
                reason: String::new(),
                retries: 0,
            },
        }
    }

    fn lifetime(&self) -> u64 {
        since(self.created)
    }

    fn idle(&self) -> u64 {
        since(self.used)
    }
}

/// Nanoseconds from `t` to now (a `time.Duration` field).
fn since(t: DateTime<Utc>) -> u64 {
    (Utc::now() - t)
        .to_std()
        .map(crate::upstream_log::format::duration_field)
        .unwrap_or(0)
}

fn now_field() -> i64 {
    crate::upstream_log::format::time_field(Utc::now())
}

/// One of upstream's machine lines with the `machineDetails` fields of `$m`.
macro_rules! machine_line {
    ($level:expr, $m:expr, $($rest:tt)*) => {
        tracing::event!(
            $level,
            lifetime = $m.lifetime(),
            name = %$m.name,
            reason = %$m.reason,
            used = $m.idle(),
            usedCount = $m.used_count,
            $($rest)*
        )
    };
}

/// Receives every engine notice (for metrics); log lines are written by the pool itself.
pub trait NoticeObserver: Send + Sync {
    /// Called once per notice, in order.
    fn notice(&self, notice: &Notice);
    /// Called after every engine input with the machine-state gauge (spec metrics.md).
    fn machine_states(&self, _states: &[(TargetLabels, crate::engine::Counts)]) {}
}

/// An observer that does nothing.
#[derive(Debug, Default)]
pub struct NoObserver;

impl NoticeObserver for NoObserver {
    fn notice(&self, _notice: &Notice) {}
}

/// Converts a provider endpoint to the executor's.
pub fn docker_endpoint(name: &str, e: &Endpoint) -> Result<DockerEndpoint, PoolError> {
    match e {
        Endpoint::TcpTls {
            host,
            cert_dir,
            tls_verify,
        } => Ok(DockerEndpoint {
            host: Some(host.clone()),
            tls_cert_path: Some(PathBuf::from(cert_dir)),
            tls_verify: *tls_verify,
            ssh: None,
        }),
        Endpoint::Tcp { host } => Ok(DockerEndpoint {
            host: Some(host.clone()),
            tls_cert_path: None,
            tls_verify: false,
            ssh: None,
        }),
        Endpoint::Unix { socket } => Ok(DockerEndpoint {
            host: Some(format!("unix://{socket}")),
            tls_cert_path: None,
            tls_verify: false,
            ssh: None,
        }),
        Endpoint::Ssh(ssh) => Ok(DockerEndpoint::over_ssh(ssh)),
        _ => Err(PoolError::UnsupportedEndpoint(name.to_string())),
    }
}

enum Request {
    Acquire {
        runner: RunnerId,
        reply: oneshot::Sender<Result<AcquireOutcome, PoolError>>,
    },
    Use {
        runner: RunnerId,
        acquired: Option<String>,
        reply: oneshot::Sender<Result<Machine, PoolError>>,
    },
    Release {
        runner: RunnerId,
        name: String,
    },
    ReleaseUnusable {
        name: String,
    },
    SetPolicy {
        runner: RunnerId,
        policy: Box<RunnerPolicy>,
    },
    AddRunner {
        policy: Box<RunnerPolicy>,
        reply: oneshot::Sender<RunnerId>,
    },
    Started {
        reply: oneshot::Sender<()>,
    },
    Drain {
        settings: DrainSettings,
        reply: oneshot::Sender<Option<DrainReport>>,
    },
}

/// What a provider call spawned by the pool came back with.
enum Outcome {
    Event(Event),
    PassListing(Result<Vec<String>, ProviderError>),
    PassConnectivity(String, bool),
    UseListing(UseId, Result<Vec<String>, ProviderError>),
    UseConnectivity(UseId, bool),
    UseCredentials(UseId, String, Result<Endpoint, ProviderError>),
    ReconcileListing(Result<Vec<String>, ProviderError>),
}

/// How a pool runs beyond its runners, provider and observer.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    /// The crash-safe machine ledger, if any.
    pub ledger: Option<LedgerFile>,
    /// The interval of periodic reconciliation ([`RECONCILE_INTERVAL`] by default).
    pub reconcile_interval: Duration,
}

impl Default for PoolSettings {
    fn default() -> PoolSettings {
        PoolSettings {
            ledger: None,
            reconcile_interval: RECONCILE_INTERVAL,
        }
    }
}

/// A handle on the pool task. Cheap to clone.
#[derive(Clone)]
pub struct Pool {
    tx: mpsc::Sender<Request>,
}

impl Pool {
    /// Starts the pool task for `policies` (indexed by [`RunnerId`]) on `provider`; every
    /// notice also goes to `observer`.
    pub fn start<P: Provider + 'static>(
        policies: Vec<RunnerPolicy>,
        provider: Arc<P>,
        observer: Arc<dyn NoticeObserver>,
    ) -> Pool {
        Pool::start_with_ledger(policies, provider, observer, None)
    }

    /// [`Pool::start`] with a crash-safe machine ledger: the machines it records are restored
    /// before the first pass (without a ledger file, machines are adopted as upstream does; a
    /// corrupt one is reported and set aside), and it is saved after every engine input that
    /// changed a machine's state, used count, last use or removal attempts, or the orphans
    /// retried in the background (resumed on restart).
    pub fn start_with_ledger<P: Provider + 'static>(
        policies: Vec<RunnerPolicy>,
        provider: Arc<P>,
        observer: Arc<dyn NoticeObserver>,
        ledger: Option<LedgerFile>,
    ) -> Pool {
        let settings = PoolSettings {
            ledger,
            ..PoolSettings::default()
        };
        Pool::start_with_settings(policies, provider, observer, settings)
    }

    /// [`Pool::start_with_ledger`] with every [`PoolSettings`] given.
    pub fn start_with_settings<P: Provider + 'static>(
        policies: Vec<RunnerPolicy>,
        provider: Arc<P>,
        observer: Arc<dyn NoticeObserver>,
        settings: PoolSettings,
    ) -> Pool {
        let PoolSettings {
            ledger,
            reconcile_interval,
        } = settings;
        let seed = u64::from(std::process::id()) ^ Utc::now().timestamp_micros() as u64;
        let mut engine = Engine::new(policies, seed);
        // Removals that gave up are retried in the background (a deliberate difference).
        engine.set_orphan_retry(Some(OrphanRetry::default()));
        let (ledger, pending_restore) = match ledger.map(load_ledger) {
            Some((l, r)) => (Some(l), r),
            None => (None, Default::default()),
        };
        let (tx, rx) = mpsc::channel(64);
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let task = PoolTask {
            engine,
            provider,
            observer,
            done_tx,
            pass_waiters: VecDeque::new(),
            pass_open: None,
            use_waiters: HashMap::new(),
            endpoints: HashMap::new(),
            drain_reply: None,
            ledger,
            reconcile_interval,
            reconciling: false,
            removals: HashMap::new(),
            listed: Default::default(),
        };
        let task = (task, pending_restore);
        tokio::spawn(async move {
            let (mut task, pending) = task;
            task.restore(pending).await;
            task.run(rx, done_rx).await
        });
        Pool { tx }
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Request,
    ) -> Result<T, PoolError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| PoolError::Stopped)?;
        rx.await.map_err(|_| PoolError::Stopped)
    }

    /// Runs one Acquire pass for `runner` (queued behind any pass in progress).
    pub async fn acquire(&self, runner: RunnerId) -> Result<AcquireOutcome, PoolError> {
        self.ask(|reply| Request::Acquire { runner, reply }).await?
    }

    /// `Use`: the machine to run a job of `runner` on, given what Acquire returned.
    pub async fn use_machine(
        &self,
        runner: RunnerId,
        acquired: Option<String>,
    ) -> Result<Machine, PoolError> {
        self.ask(|reply| Request::Use {
            runner,
            acquired,
            reply,
        })
        .await?
    }

    /// `Release` a machine after a job (or an Acquired machine no job came for).
    pub async fn release(&self, runner: RunnerId, name: String) {
        // A stopped pool has nothing left to release.
        let _ = self.tx.send(Request::Release { runner, name }).await;
    }

    /// Gives back a machine a job could not use (its Docker endpoint did not answer): the
    /// engine removes it instead of handing it to the next job.
    pub async fn release_unusable(&self, name: String) {
        let _ = self.tx.send(Request::ReleaseUnusable { name }).await;
    }

    /// Replaces a runner's policy after a config reload.
    pub async fn set_policy(&self, runner: RunnerId, policy: RunnerPolicy) {
        let _ = self
            .tx
            .send(Request::SetPolicy {
                runner,
                policy: Box::new(policy),
            })
            .await;
    }

    /// Adds a runner to this pool's engine after a config reload; its id in the engine.
    pub async fn add_runner(&self, policy: RunnerPolicy) -> Result<RunnerId, PoolError> {
        self.ask(|reply| Request::AddRunner {
            policy: Box::new(policy),
            reply,
        })
        .await
    }

    /// Returns once the pool task serves requests (its ledger restored); `Err` if it stopped.
    pub async fn started(&self) -> Result<(), PoolError> {
        self.ask(|reply| Request::Started { reply }).await
    }

    /// Runs `[machine.shutdown_drain]` and waits for its report (`None` when disabled or when
    /// the pool stopped first).
    pub async fn drain(&self, settings: DrainSettings) -> Option<DrainReport> {
        self.ask(|reply| Request::Drain { settings, reply })
            .await
            .ok()
            .flatten()
    }
}

struct PoolTask<P> {
    engine: Engine,
    provider: Arc<P>,
    observer: Arc<dyn NoticeObserver>,
    done_tx: mpsc::UnboundedSender<Outcome>,
    /// Acquire requests waiting for their pass (one pass at a time).
    pass_waiters: VecDeque<(RunnerId, oneshot::Sender<Result<AcquireOutcome, PoolError>>)>,
    /// The requester of the pass in progress.
    pass_open: Option<(RunnerId, oneshot::Sender<Result<AcquireOutcome, PoolError>>)>,
    use_waiters: HashMap<UseId, oneshot::Sender<Result<Machine, PoolError>>>,
    /// Endpoints fetched for sessions about to end.
    endpoints: HashMap<UseId, (String, Endpoint)>,
    drain_reply: Option<oneshot::Sender<Option<DrainReport>>>,
    ledger: Option<PoolLedger>,
    reconcile_interval: Duration,
    /// A periodic reconciliation listing is out.
    reconciling: bool,
    /// Machines being removed, as their log lines show them.
    removals: HashMap<String, MachineLog>,
    /// The provider's listing as the engine last heard it (its copy feeds the indexed pass).
    listed: std::collections::BTreeSet<String>,
}

/// The ledger file and what was last written to it.
struct PoolLedger {
    file: LedgerFile,
    saved: (Vec<MachineRecord>, Vec<OrphanRecord>),
}

/// Loads the ledger: the file with what it holds, and its records and orphans for
/// [`PoolTask::restore`].
fn load_ledger(file: LedgerFile) -> (PoolLedger, (Vec<MachineRecord>, Vec<OrphanRecord>)) {
    let loaded = file.load();
    if let Some(aside) = &loaded.set_aside {
        match &aside.moved_to {
            Some(to) => tracing::error!(
                ledger = %file.path().display(),
                "Machine ledger is unusable ({}); moved it to {} and adopting the provider's machines as gitlab-runner does",
                aside.reason,
                to.display()
            ),
            None => tracing::error!(
                ledger = %file.path().display(),
                "Machine ledger is unusable ({}) and could not be moved aside; adopting the provider's machines as gitlab-runner does, the next save replaces it",
                aside.reason
            ),
        }
    }
    if !loaded.existed {
        tracing::info!(
            ledger = %file.path().display(),
            "No machine ledger yet: machines found at the provider are adopted as gitlab-runner does"
        );
    }
    let saved = (loaded.records.clone(), loaded.orphans.clone());
    (PoolLedger { file, saved }, (loaded.records, loaded.orphans))
}

/// The ledger's view of the engine's machines, in the engine's order.
fn ledger_records(engine: &Engine) -> Vec<MachineRecord> {
    engine
        .machines()
        .map(|m| MachineRecord {
            name: String::from(&*m.name),
            runner: m
                .runner()
                .and_then(|id| engine.policy(id))
                .map(|p| short_token(&p.token).to_string()),
            state: m.state,
            used_count: m.used_count,
            last_used: m.used,
            removal_attempts: m.removal_attempts(),
            retry_count: m.retry_count,
            reason: m.reason,
        })
        .collect()
}

fn names(list: Vec<crate::provider::MachineEntry>) -> Vec<String> {
    list.into_iter().map(|m| m.name).collect()
}

impl<P: Provider + 'static> PoolTask<P> {
    /// Puts the ledger's machines back before the first pass, reconciled with the provider's
    /// listing (when it fails, every record is restored: nothing the provider lists is lost),
    /// and resumes the background retries of its orphans.
    async fn restore(&mut self, (records, orphans): (Vec<MachineRecord>, Vec<OrphanRecord>)) {
        if !orphans.is_empty() {
            tracing::info!(
                orphans = orphans.len(),
                "Resuming the retries of machine removals that gave up"
            );
            self.engine
                .resume_orphans(orphans.iter().map(Into::into).collect());
        }
        if records.is_empty() {
            return;
        }
        let engine = &self.engine;
        let runner_of = |short: &str| {
            (0..)
                .map(RunnerId)
                .map_while(|id| {
                    engine
                        .policy(id)
                        .map(|p| (id, short_token(&p.token) == short))
                })
                .find(|(_, same)| *same)
                .map(|(id, _)| id)
        };
        let restored: Vec<_> = records
            .iter()
            .map(|r| r.to_restored(r.runner.as_deref().and_then(runner_of)))
            .collect();
        let restored = match self.provider.list(&Call::new()).await {
            Ok(list) => self.engine.reconcile_ledger(restored, &names(list)),
            Err(e) => {
                tracing::warn!(
                    "Cannot list machines to reconcile the ledger ({e}); restoring every record"
                );
                restored
            }
        };
        let report = self.engine.restore(restored, Utc::now());
        tracing::info!(
            restored = report.restored.len(),
            resumed_removals = report.resumed_removals.len(),
            interrupted_creations = report.interrupted_creations.len(),
            skipped = report.skipped.len(),
            "Machines restored from the ledger"
        );
    }

    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Request>,
        mut done: mpsc::UnboundedReceiver<Outcome>,
    ) {
        // Resumed removals from the ledger send their first command now.
        self.pump();
        let period = self.reconcile_interval.max(Duration::from_millis(10));
        let mut reconcile = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        reconcile.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let wake = self.engine.poll_timeout().map(|t| {
                let ms = (t - Utc::now()).num_milliseconds().clamp(0, 3_600_000);
                tokio::time::Instant::now() + Duration::from_millis(ms as u64)
            });
            let timer = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                req = rx.recv() => match req {
                    Some(req) => self.request(req),
                    // Every handle is gone: in-flight provider calls finish on their own.
                    None => return,
                },
                Some(outcome) = done.recv() => self.outcome(outcome),
                () = timer => self.engine.handle(Event::Tick, Utc::now()),
                _ = reconcile.tick() => self.begin_reconcile(),
            }
            self.pump();
        }
    }

    fn request(&mut self, req: Request) {
        let now = Utc::now();
        match req {
            Request::Acquire { runner, reply } => {
                self.pass_waiters.push_back((runner, reply));
                self.next_pass();
            }
            Request::Use {
                runner,
                acquired,
                reply,
            } => match self.engine.begin_use(runner, acquired.as_deref(), now) {
                Ok(id) => {
                    self.use_waiters.insert(id, reply);
                }
                Err(e) => {
                    let _ = reply.send(Err(e.into()));
                }
            },
            Request::Release { runner, name } => {
                if let Err(e) = self.engine.release(runner, &name, now) {
                    tracing::warn!(name = %name, "cannot release machine: {e}");
                }
            }
            Request::ReleaseUnusable { name } => self.engine.release_unusable(&name, now),
            Request::SetPolicy { runner, policy } => {
                if let Err(e) = self.engine.set_policy(runner, *policy) {
                    tracing::warn!("cannot apply the new autoscaling policy: {e}");
                }
            }
            Request::AddRunner { policy, reply } => {
                let _ = reply.send(self.engine.add_runner(*policy));
            }
            Request::Started { reply } => {
                let _ = reply.send(());
            }
            Request::Drain { settings, reply } => {
                if !settings.enabled {
                    let _ = reply.send(None);
                    return;
                }
                self.drain_reply = Some(reply);
                self.engine.begin_drain(settings, now);
            }
        }
    }

    /// Starts the next queued pass when none is open: list the machines first.
    fn next_pass(&mut self) {
        if self.pass_open.is_some() {
            return;
        }
        let Some(next) = self.pass_waiters.pop_front() else {
            return;
        };
        self.pass_open = Some(next);
        let p = self.provider.clone();
        let tx = self.done_tx.clone();
        tokio::spawn(async move {
            let r = p.list(&Call::new()).await.map(names);
            let _ = tx.send(Outcome::PassListing(r));
        });
    }

    fn pass_step(&mut self, step: Result<AcquireStep, crate::engine::EngineError>) {
        match step {
            Ok(AcquireStep::CheckConnectivity { name }) => {
                let p = self.provider.clone();
                let tx = self.done_tx.clone();
                tokio::spawn(async move {
                    let ok = p.can_connect(&name, &Call::new()).await.unwrap_or(false);
                    let _ = tx.send(Outcome::PassConnectivity(name, ok));
                });
            }
            Ok(AcquireStep::Done(outcome)) => self.finish_pass(Ok(*outcome)),
            Err(e) => self.finish_pass(Err(e.into())),
        }
    }

    fn finish_pass(&mut self, r: Result<AcquireOutcome, PoolError>) {
        if let Some((_, reply)) = self.pass_open.take() {
            if let Err(Ok(out)) = reply.send(r) {
                // The requester went away (shutdown): give the machine back.
                if let crate::engine::AcquireResult::Machine(name) = out.result {
                    let _ = self.engine.release(out.report.runner, &name, Utc::now());
                }
            }
        }
        self.next_pass();
    }

    fn outcome(&mut self, outcome: Outcome) {
        let now = Utc::now();
        match outcome {
            Outcome::Event(ev) => self.engine.handle(ev, now),
            Outcome::PassListing(r) => {
                let Some(runner) = self.pass_open.as_ref().map(|(r, _)| *r) else {
                    return;
                };
                match r {
                    Ok(list) => {
                        // The engine's copy of the listing follows the fresh one; the pass
                        // reads its indexes over it, in name order (`docker-machine ls`'s).
                        let fresh: std::collections::BTreeSet<String> = list.into_iter().collect();
                        for gone in self.listed.difference(&fresh) {
                            self.engine.listing_remove(gone);
                        }
                        for new in fresh.difference(&self.listed) {
                            self.engine.listing_insert(new);
                        }
                        self.listed = fresh;
                        let step = self.engine.begin_acquire_listed(runner, now);
                        self.pass_step(step);
                    }
                    Err(e) => self.finish_pass(Err(PoolError::List(e))),
                }
            }
            Outcome::PassConnectivity(name, ok) => {
                let step = self.engine.connectivity_result(&name, ok, now);
                self.pass_step(step);
            }
            Outcome::UseListing(id, r) => {
                // A failed listing reads as an empty one: Use then creates a machine.
                let list = r.unwrap_or_else(|e| {
                    tracing::warn!("cannot list machines: {e}");
                    Vec::new()
                });
                if let Err(e) = self.engine.use_listing(id, &list, now) {
                    self.fail_use(id, e.into());
                }
            }
            Outcome::UseConnectivity(id, ok) => {
                if let Err(e) = self.engine.use_connectivity_result(id, ok, now) {
                    self.fail_use(id, e.into());
                }
            }
            Outcome::ReconcileListing(r) => self.finish_reconcile(r),
            Outcome::UseCredentials(id, name, r) => {
                let ok = match r {
                    Ok(endpoint) => {
                        self.endpoints.insert(id, (name, endpoint));
                        true
                    }
                    Err(e) => {
                        tracing::error!(name = %name, "cannot get the machine's credentials: {e}");
                        false
                    }
                };
                if let Err(e) = self.engine.use_credentials_result(id, ok, now) {
                    self.fail_use(id, e.into());
                }
            }
        }
    }

    /// A periodic reconciliation round: the engine notes what it knows, then the provider's
    /// listing is taken (one round at a time; a slow listing skips the next ticks).
    fn begin_reconcile(&mut self) {
        if self.reconciling {
            return;
        }
        self.reconciling = true;
        self.engine.begin_reconcile(Utc::now());
        let p = self.provider.clone();
        self.spawn_call(
            async move { Outcome::ReconcileListing(p.list(&Call::new()).await.map(names)) },
        );
    }

    /// The round's listing is back: the engine decides (its notices are logged and counted).
    fn finish_reconcile(&mut self, listing: Result<Vec<String>, ProviderError>) {
        self.reconciling = false;
        match listing {
            Ok(list) => {
                if let Err(e) = self.engine.finish_reconcile(&list, Utc::now()) {
                    tracing::warn!("cannot reconcile machines: {e}");
                }
            }
            Err(e) => {
                self.engine.cancel_reconcile();
                tracing::warn!(
                    "Cannot list machines to reconcile them ({e}); trying again in the next round"
                );
            }
        }
    }

    fn fail_use(&mut self, id: UseId, e: PoolError) {
        self.endpoints.remove(&id);
        if let Some(reply) = self.use_waiters.remove(&id) {
            let _ = reply.send(Err(e));
        }
    }

    /// Drains every engine output after an input.
    fn pump(&mut self) {
        while let Some(cmd) = self.engine.poll_command() {
            self.execute(cmd);
        }
        while let Some(step) = self.engine.poll_use() {
            self.use_step(step);
        }
        let mut drained = None;
        while let Some(n) = self.engine.poll_notice() {
            self.log_notice(&n);
            self.observer.notice(&n);
            if let Notice::DrainFinished(r) = n {
                drained = Some(r);
            }
        }
        if let Some(r) = drained {
            if let Some(reply) = self.drain_reply.take() {
                let _ = reply.send(Some(r));
            }
        }
        self.observer
            .machine_states(&self.engine.machine_states(Utc::now()));
        self.persist();
    }

    /// Saves the ledger when a machine or an orphan changed since the last save. A failed save is logged
    /// and retried after the next input (the previous ledger stays intact on disk).
    fn persist(&mut self) {
        let Some(ledger) = &mut self.ledger else {
            return;
        };
        let records = ledger_records(&self.engine);
        let orphans: Vec<OrphanRecord> = self
            .engine
            .orphan_entries()
            .iter()
            .map(Into::into)
            .collect();
        if (&records, &orphans) == (&ledger.saved.0, &ledger.saved.1) {
            return;
        }
        match ledger.file.save(&records, &orphans) {
            Ok(()) => ledger.saved = (records, orphans),
            Err(e) => tracing::error!("{e}"),
        }
    }

    /// The log fields of machine `name`: from the removal in progress, else from its record.
    fn machine_log(&mut self, name: &str) -> MachineLog {
        let fresh = MachineLog::of(&self.engine, name);
        match self.removals.get_mut(name) {
            Some(m) => {
                m.retries = fresh.retries.max(m.retries);
                m.clone()
            }
            None => fresh,
        }
    }

    /// Upstream's log lines for engine notices (spec upstream-logs.md §2.1) where they exist.
    fn log_notice(&mut self, n: &Notice) {
        match n {
            Notice::Created { name, .. } => tracing::debug!(name = %name, "Machine ready"),
            // The creation's own line ("Machine creation failed") was written when it ended.
            Notice::CreationFailed { .. } => {}
            Notice::Used { name, .. } => tracing::debug!(name = %name, "Machine used"),
            Notice::Removing {
                name,
                reason,
                last_used,
            } => {
                let mut m = MachineLog::of(&self.engine, name);
                m.reason = reason.to_string();
                m.used = *last_used;
                machine_line!(
                    tracing::Level::WARN,
                    m,
                    now = now_field(),
                    "Requesting machine removal"
                );
                if self.removals.len() < 100_000 {
                    self.removals.insert(name.clone(), m);
                }
            }
            Notice::Removed {
                name,
                reason,
                gave_up,
                ..
            } => {
                let mut m = self
                    .removals
                    .remove(name)
                    .unwrap_or_else(|| MachineLog::of(&self.engine, name));
                m.reason = reason.to_string();
                if *gave_up {
                    machine_line!(
                        tracing::Level::WARN,
                        m,
                        attempts = m.retries,
                        "Giving up on machine removal. The remote VM may be orphaned."
                    );
                    machine_line!(
                        tracing::Level::WARN,
                        m,
                        now = now_field(),
                        retries = m.retries,
                        "Machine state cleared after give-up"
                    );
                } else {
                    machine_line!(
                        tracing::Level::INFO,
                        m,
                        now = now_field(),
                        retries = m.retries,
                        "Machine removed"
                    );
                }
            }
            Notice::DrainFinished(r) => tracing::info!(
                failed = r.failed,
                success = r.succeeded,
                total = r.succeeded + r.failed + r.not_started,
                "Machine pool drain completed"
            ),
            Notice::Warning(w) => tracing::warn!(warning = %w, "Machine pool warning"),
            Notice::Reconciled { name, decision } => match decision {
                ReconcileDecision::RetryFailed {
                    attempt,
                    next_in_secs,
                } => tracing::warn!(
                    name = %name,
                    decision = decision.as_str(),
                    attempt,
                    "Removal of an orphaned machine failed again; retrying in {next_in_secs} s"
                ),
                _ => {
                    tracing::info!(name = %name, decision = decision.as_str(), "Reconciled machine")
                }
            },
        }
    }

    fn spawn_call<F>(&self, f: F)
    where
        F: std::future::Future<Output = Outcome> + Send + 'static,
    {
        let tx = self.done_tx.clone();
        tokio::spawn(async move {
            let _ = tx.send(f.await);
        });
    }

    fn use_step(&mut self, step: UseStep) {
        let p = self.provider.clone();
        match step {
            UseStep::CheckConnectivity { id, name } => self.spawn_call(async move {
                let ok = p.can_connect(&name, &Call::new()).await.unwrap_or(false);
                Outcome::UseConnectivity(id, ok)
            }),
            UseStep::List { id } => self.spawn_call(async move {
                Outcome::UseListing(id, p.list(&Call::new()).await.map(names))
            }),
            UseStep::FetchCredentials { id, name } => self.spawn_call(async move {
                let r = p.credentials(&name, &Call::new()).await;
                Outcome::UseCredentials(id, name, r)
            }),
            UseStep::Done { id, result } => {
                let fetched = self.endpoints.remove(&id);
                let Some(reply) = self.use_waiters.remove(&id) else {
                    return;
                };
                let r = match (result, fetched) {
                    (Ok(used), Some((name, endpoint))) if name == used.name => {
                        let (used_count, created) = self
                            .engine
                            .machine(&name)
                            .map_or((1, Utc::now()), |m| (m.used_count, m.created));
                        docker_endpoint(&name, &endpoint).map(|endpoint| Machine {
                            used,
                            endpoint,
                            used_count,
                            created,
                        })
                    }
                    (Ok(used), _) => Err(PoolError::UnsupportedEndpoint(used.name)),
                    (Err(e), _) => Err(PoolError::Use(e)),
                };
                if let Err(Ok(m)) = reply.send(r) {
                    // The job went away before it got its machine.
                    let runner = self.engine.machine(&m.used.name).and_then(|x| x.runner());
                    if let Some(runner) = runner {
                        let _ = self.engine.release(runner, &m.used.name, Utc::now());
                    }
                }
            }
        }
    }

    fn execute(&mut self, cmd: Command) {
        let p = self.provider.clone();
        match cmd {
            Command::Create {
                name,
                driver,
                options,
                reason,
            } => {
                tracing::info!(
                    driver = %driver,
                    name = %name,
                    operation = "create",
                    reason = %reason,
                    "Creating machine..."
                );
                self.spawn_call(async move {
                    let params = CreateParams {
                        name: name.clone(),
                        driver,
                        options,
                        options_with_name: Vec::new(),
                    };
                    let start = std::time::Instant::now();
                    let ok = match p.create(&params, &Call::new()).await {
                        Ok(()) => {
                            tracing::info!(
                                duration = crate::upstream_log::format::duration_field(start.elapsed()),
                                name = %name,
                                now = now_field(),
                                retries = 0,
                                "Machine created"
                            );
                            true
                        }
                        Err(e) => {
                            tracing::error!(
                                error = %e,
                                name = %name,
                                time = crate::upstream_log::format::duration_field(start.elapsed()),
                                "Machine creation failed"
                            );
                            false
                        }
                    };
                    Outcome::Event(Event::Created { name, ok })
                });
            }
            Command::CheckExists { name, .. } => self.spawn_call(async move {
                // An error answer reads as "exists": the removal then goes on and retries.
                let exists = p.exists(&name, &Call::new()).await.unwrap_or(true);
                Outcome::Event(Event::Exists { name, exists })
            }),
            Command::Stop { name, .. } => {
                let m = self.machine_log(&name);
                machine_line!(tracing::Level::WARN, m, "Stopping machine");
                self.spawn_call(async move {
                    if let Err(e) = p.stop(&name, &Call::new()).await {
                        machine_line!(tracing::Level::WARN, m, error = %e, "Error while stopping machine");
                    }
                    Outcome::Event(Event::Stopped { name })
                })
            }
            Command::Remove { name, .. } => {
                let m = self.machine_log(&name);
                machine_line!(tracing::Level::WARN, m, "Removing machine");
                self.spawn_call(async move {
                    let ok = match p.remove(&name, &Call::new()).await {
                        Ok(_) => true,
                        Err(e) => {
                            // Upstream retries without a line; drover says why.
                            machine_line!(tracing::Level::WARN, m, error = %e, "Error while removing machine; retrying");
                            false
                        }
                    };
                    Outcome::Event(Event::Removed { name, ok })
                })
            }
            Command::ForceRemove { name, .. } => {
                let m = self.machine_log(&name);
                self.spawn_call(async move {
                    let ok = match p.force_remove(&name, &Call::new()).await {
                        Ok(_) => true,
                        Err(e) => {
                            machine_line!(tracing::Level::WARN, m, error = %e, "ForceRemove on give-up failed");
                            false
                        }
                    };
                    Outcome::Event(Event::ForceRemoved { name, ok })
                })
            }
        }
    }
}
