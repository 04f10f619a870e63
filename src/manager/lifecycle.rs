//! Start-up, signals, config reloads and shutdown of `drover run` (spec gitlab-api.md §7.3,
//! §7.5, §7.6): the machine pools are built from the config, the feeder starts, and this loop
//! waits for SIGQUIT (graceful), SIGTERM/SIGINT (forceful), SIGHUP or a newer config file
//! (reload), then shuts the workers and the pools down within `shutdown_timeout`. Which
//! signal means what is [`crate::signals::daemon_policy`]'s.
//!
//! A reload applies the runner list live, as upstream: a new docker+machine runner joins the
//! pool of its provider plugin (or starts one), a removed runner is no longer fed, and its
//! machines stay until drover restarts (upstream only looks at a runner's machines in that
//! runner's Acquire pass); the shutdown drain still covers them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::pool::{NoticeObserver, Pool, PoolError};
use super::runloop::{Manager, Pools, Turn};
use super::source::JobSource;
use crate::config::model::{Config, RunnerConfig};
use crate::engine::{naming, RunnerId, RunnerPolicy};
use crate::ledger::LedgerFile;
use crate::metrics::server::Readiness;
use crate::provider::cache::CredentialCache;
use crate::provider::plugin::{Plugin, PluginCommand};
use crate::signals::{daemon_policy, DaemonAction, StopSignals};

/// How often the config file's mtime is checked.
pub const RELOAD_CHECK: Duration = Duration::from_secs(3);
/// The prefix every autoscaled machine name has; plugins refuse to remove other machines.
pub const MACHINE_NAME_PREFIX: &str = "runner-";

/// Errors starting `drover run`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// No provider plugin executable was found for a docker+machine runner.
    #[error("runner {runner:?}: cannot find the provider plugin {wanted}: put it next to the drover binary or on PATH")]
    NoPlugin {
        /// The runner's name.
        runner: String,
        /// What was looked for.
        wanted: String,
    },
    /// The engine refused a runner's `[runners.machine]` section.
    #[error("runner {runner:?}: {error}")]
    Policy {
        /// The runner's name.
        runner: String,
        /// Why.
        error: crate::engine::PolicyError,
    },
    /// A signal handler could not be installed.
    #[error("cannot install the {0} handler: {1}")]
    Signal(&'static str, std::io::Error),
    /// The runner could not join its provider plugin's running pool.
    #[error("runner {runner:?}: {error}")]
    Pool {
        /// The runner's name.
        runner: String,
        /// Why.
        error: PoolError,
    },
}

/// Finds an executable next to the running drover binary, else on PATH.
pub fn find_executable(name: &str) -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)));
    let path = std::env::var_os("PATH").unwrap_or_default();
    beside
        .into_iter()
        .chain(std::env::split_paths(&path).map(|d| d.join(name)))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The provider plugin of a docker+machine runner: `drover-provider-<MachineDriver>` when
/// such an executable is installed (next to drover or on PATH), else `legacy-driver-shim`,
/// which runs `docker-machine` as gitlab-runner does. `config.toml` is unchanged either way.
pub fn plugin_for(r: &RunnerConfig) -> Result<PluginCommand, StartError> {
    let driver = r
        .machine
        .as_ref()
        .map(|m| m.machine_driver.as_str())
        .unwrap_or_default();
    let own = (!driver.is_empty() && !driver.contains('/'))
        .then(|| find_executable(&format!("drover-provider-{driver}")))
        .flatten();
    let program = match own {
        Some(p) => p,
        None => find_executable("legacy-driver-shim").ok_or_else(|| StartError::NoPlugin {
            runner: r.name.clone(),
            wanted: "legacy-driver-shim".into(),
        })?,
    };
    let mut cmd = PluginCommand::new(program, Vec::new());
    cmd.name_prefix = Some(MACHINE_NAME_PREFIX.into());
    Ok(cmd)
}

/// A started pool and the plugin behind it (to stop it at exit).
pub struct StartedPool {
    /// The pool handle.
    pub pool: Pool,
    /// The plugin process.
    pub plugin: Arc<CredentialCache<Plugin>>,
    /// The plugin's executable (one pool per plugin).
    pub program: PathBuf,
}

/// The machine pools started so far, one per provider plugin, and what starting another one
/// needs (a reload can add runners for a plugin not yet running).
pub struct PoolSet {
    started: Vec<StartedPool>,
    observer: Arc<dyn NoticeObserver>,
    config_path: Option<PathBuf>,
    /// Runner token → the plugin executable its pool runs.
    programs: HashMap<String, PathBuf>,
}

impl PoolSet {
    /// No pools yet. With `config_path`, each pool keeps a crash-safe machine ledger beside
    /// it (`.drover-machines.json` for `legacy-driver-shim`, `.drover-machines.<plugin>.json`
    /// for another plugin, so pools never share a file).
    pub fn new(observer: Arc<dyn NoticeObserver>, config_path: Option<&Path>) -> PoolSet {
        PoolSet {
            started: Vec::new(),
            observer,
            config_path: config_path.map(Path::to_path_buf),
            programs: HashMap::new(),
        }
    }

    /// The pools started so far.
    pub fn started(&self) -> &[StartedPool] {
        &self.started
    }

    /// Starts the pool of plugin `cmd` for `runners` (their ids in that order).
    fn start_pool(
        &mut self,
        cmd: PluginCommand,
        runners: &[(&RunnerConfig, RunnerPolicy)],
    ) -> Pool {
        let ledger = self
            .config_path
            .as_deref()
            .map(|c| ledger_file(c, &cmd.program));
        let program = cmd.program.clone();
        for (r, _) in runners {
            self.programs.insert(r.token.clone(), program.clone());
        }
        let policies = runners.iter().map(|(_, p)| p.clone()).collect();
        let plugin = Arc::new(CredentialCache::new(Plugin::new(cmd)));
        let pool = Pool::start_with_ledger(policies, plugin.clone(), self.observer.clone(), ledger);
        self.started.push(StartedPool {
            pool: pool.clone(),
            plugin,
            program,
        });
        pool
    }

    /// Serves a docker+machine runner a reload added: it joins the running pool of its
    /// provider plugin, or a new pool starts for that plugin.
    async fn add_runner(
        &mut self,
        r: &RunnerConfig,
        policy: RunnerPolicy,
    ) -> Result<(Pool, RunnerId), StartError> {
        let cmd = plugin_for(r)?;
        let running = self
            .started
            .iter()
            .find(|p| p.program == cmd.program)
            .map(|p| p.pool.clone());
        let Some(pool) = running else {
            tracing::info!(runner = %r.name, plugin = %cmd.program.display(), "Starting a machine pool for the new docker+machine runner");
            let pool = self.start_pool(cmd, &[(r, policy)]);
            return Ok((pool, RunnerId(0)));
        };
        let id = pool
            .add_runner(policy)
            .await
            .map_err(|error| StartError::Pool {
                runner: r.name.clone(),
                error,
            })?;
        self.programs.insert(r.token.clone(), cmd.program);
        tracing::info!(runner = %r.name, "New docker+machine runner joined its provider plugin's machine pool");
        Ok((pool, id))
    }

    /// The plugin executable serving the runner with `token`, if any.
    fn program_of(&self, token: &str) -> Option<&Path> {
        self.programs.get(token).map(PathBuf::as_path)
    }
}

/// A runner of a pool and its engine policy.
type Member<'a> = (&'a RunnerConfig, RunnerPolicy);

/// Starts one machine pool per provider plugin for the config's docker+machine runners (see
/// [`PoolSet::new`] for the ledger files).
pub fn start_pools(
    config: &Config,
    observer: Arc<dyn NoticeObserver>,
    config_path: Option<&Path>,
) -> Result<(Pools, PoolSet), StartError> {
    let mut groups: BTreeMap<PathBuf, (PluginCommand, Vec<Member<'_>>)> = BTreeMap::new();
    for r in config
        .runners
        .iter()
        .filter(|r| r.executor == "docker+machine")
    {
        let cmd = plugin_for(r)?;
        let policy = crate::engine::policy_from_runner(r).map_err(|error| StartError::Policy {
            runner: r.name.clone(),
            error,
        })?;
        groups
            .entry(cmd.program.clone())
            .or_insert_with(|| (cmd, Vec::new()))
            .1
            .push((r, policy));
    }
    let mut pools = Pools::default();
    let mut set = PoolSet::new(observer, config_path);
    for (_, (cmd, runners)) in groups {
        let pool = set.start_pool(cmd, &runners);
        for (i, (r, _)) in runners.iter().enumerate() {
            pools
                .by_token
                .insert(r.token.clone(), (pool.clone(), RunnerId(i)));
        }
    }
    Ok((pools, set))
}

/// The ledger file of the pool served by the plugin `program`.
fn ledger_file(config: &Path, program: &Path) -> LedgerFile {
    let beside = LedgerFile::beside(config);
    let plugin = program.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if plugin.is_empty() || plugin == "legacy-driver-shim" {
        return beside;
    }
    let name = format!(".drover-machines.{}.json", naming::rfc1123(plugin));
    LedgerFile::at(beside.path().with_file_name(name))
}

/// How `drover run` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Every job finished (or was aborted) and the providers shut down in time.
    Clean,
    /// `shutdown_timeout` ran out with work left (jobs or the drain).
    TimedOut,
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// What changed between two configs, one line each (never a token).
pub fn describe_changes(old: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    if old.concurrent != new.concurrent {
        out.push(format!(
            "concurrent: {} -> {}",
            old.concurrent, new.concurrent
        ));
    }
    if old.check_interval != new.check_interval {
        out.push(format!(
            "check_interval: {} -> {}",
            old.check_interval, new.check_interval
        ));
    }
    if old.log_level != new.log_level || old.log_format != new.log_format {
        out.push("log_level/log_format changed".into());
    }
    if old.listen_address != new.listen_address {
        out.push("listen_address changed: not applied until drover restarts".into());
    }
    if old.session_server != new.session_server {
        out.push("[session_server] changed: not applied until drover restarts".into());
    }
    let short = |r: &RunnerConfig| crate::engine::naming::short_token(&r.token).to_string();
    for r in &new.runners {
        match old.runners.iter().find(|o| o.token == r.token) {
            None => out.push(format!("runner {:?} ({}) added", r.name, short(r))),
            Some(o) if o != r => out.push(format!("runner {:?} ({}) changed", r.name, short(r))),
            Some(_) => {}
        }
    }
    for o in &old.runners {
        if !new.runners.iter().any(|r| r.token == o.token) {
            out.push(format!("runner {:?} ({}) removed", o.name, short(o)));
        }
    }
    out
}

/// Loads `path` and applies it; a failed load keeps the old config.
async fn reload<S: JobSource>(
    manager: &Manager<S>,
    path: &Path,
    on_load: &(dyn Fn(&Config) + Send + Sync),
    set: &mut PoolSet,
) {
    let loaded = match crate::config::load_file(path) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("Failed to load config; keeping the previous one: {e}");
            return;
        }
    };
    on_load(&loaded.config);
    for w in &loaded.warnings {
        tracing::warn!(warning = %w, "Configuration warning");
    }
    let old = manager.config();
    let changes = describe_changes(&old, &loaded.config);
    for c in &changes {
        tracing::info!("Configuration change: {c}");
    }
    let new = loaded.config;
    apply_machine_runners(manager, &old, &new, set).await;
    let max_builds = new.concurrent;
    manager.apply(new);
    tracing::info!(
        builds = manager.builds(),
        max_builds,
        "Configuration loaded"
    );
}

/// The docker+machine part of a reload: new policies for known runners, pools for new
/// runners (before the feeder sees them), and what happens to removed runners' machines.
async fn apply_machine_runners<S: JobSource>(
    manager: &Manager<S>,
    old: &Config,
    new: &Config,
    set: &mut PoolSet,
) {
    let machine = |r: &&RunnerConfig| r.executor == "docker+machine";
    let mut pools = (*manager.pools()).clone();
    let mut added = false;
    for r in new.runners.iter().filter(machine) {
        let policy = match crate::engine::policy_from_runner(r) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(runner = %r.name, "autoscaling settings not applied: {e}");
                continue;
            }
        };
        if let Some((pool, id)) = pools.by_token.get(&r.token) {
            let wanted = plugin_for(r).map(|c| c.program).ok();
            if let (Some(wanted), Some(serving)) = (&wanted, set.program_of(&r.token)) {
                if wanted != serving {
                    tracing::warn!(runner = %r.name, "provider plugin changed: its machines stay with {} until drover restarts", serving.display());
                }
            }
            let (pool, id) = (pool.clone(), *id);
            tokio::spawn(async move { pool.set_policy(id, policy).await });
            continue;
        }
        match set.add_runner(r, policy).await {
            Ok(entry) => {
                pools.by_token.insert(r.token.clone(), entry);
                added = true;
            }
            Err(e) => tracing::error!("new docker+machine runner not served: {e}"),
        }
    }
    if added {
        manager.set_pools(pools);
    }
    for o in old.runners.iter().filter(machine) {
        if !new.runners.iter().any(|r| r.token == o.token) {
            tracing::warn!(
                runner = %o.name,
                "docker+machine runner removed: no more job requests for it; its machines are kept until drover restarts (as gitlab-runner), and the shutdown drain still removes them"
            );
        }
    }
}

/// Runs the feeder and waits for signals and reloads; returns after the shutdown sequence.
///
/// `on_load` sees every config a reload loaded, before the manager applies it (the command
/// line applies its `log_level`/`log_format` and registers its secrets for the log).
/// `ready` (`/health/ready`) turns true once every pool serves requests and the feeder runs,
/// and false again when shutdown begins.
pub async fn run<S: JobSource>(
    manager: Arc<Manager<S>>,
    config_path: PathBuf,
    mut set: PoolSet,
    on_load: Box<dyn Fn(&Config) + Send + Sync>,
    ready: Readiness,
) -> Result<Ending, StartError> {
    let mut sig = install_signals()?;
    manager.end_local_leftovers().await;
    let feeder = tokio::spawn(manager.clone().feed());
    let becoming_ready = tokio::spawn(become_ready(
        set.started().iter().map(|p| p.pool.clone()).collect(),
        manager.stop.clone(),
        ready.clone(),
    ));
    let mut seen = mtime(&config_path);
    let mut tick = tokio::time::interval(RELOAD_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let forceful = loop {
        tokio::select! {
            s = sig.recv() => match daemon_policy(s) {
                DaemonAction::Graceful => {
                    tracing::warn!(StopSignal = "quit", "Starting graceful shutdown, waiting for builds to finish");
                    break false;
                }
                DaemonAction::Forceful => break true,
                DaemonAction::Reload => {
                    seen = mtime(&config_path);
                    reload(&manager, &config_path, &*on_load, &mut set).await;
                }
            },
            _ = tick.tick() => {
                let now = mtime(&config_path);
                if now.is_some() && now != seen {
                    seen = now;
                    reload(&manager, &config_path, &*on_load, &mut set).await;
                }
            }
        }
    };
    manager.stop.cancel();
    ready.set_ready(false);
    becoming_ready.abort();
    let _ = feeder.await;
    let timeout = Duration::from_secs(
        u64::try_from(manager.config().shutdown_timeout_or_default()).unwrap_or(30),
    );
    let mut ending = Ending::Clean;
    let forceful = forceful || {
        // Graceful: wait for running jobs for as long as they take; SIGTERM/SIGINT switch to
        // forceful, a second SIGQUIT (and SIGHUP) is ignored.
        loop {
            tokio::select! {
                () = manager.wait_idle() => break false,
                s = sig.recv() => if daemon_policy(s) == DaemonAction::Forceful {
                    break true;
                },
            }
        }
    };
    if forceful {
        tracing::warn!(
            "Graceful shutdown not finished properly. To gracefully clean up running plugins please use SIGQUIT (ctrl-\\) instead of SIGINT (ctrl-c)"
        );
        tracing::warn!(
            "shutdown-timeout" = crate::upstream_log::format::duration_field(timeout),
            "Starting forceful shutdown"
        );
        manager.interrupt.cancel();
        let interrupted =
            async { while daemon_policy(sig.recv().await) != DaemonAction::Forceful {} };
        tokio::select! {
            () = manager.wait_idle() => tracing::info!("All workers stopped."),
            () = tokio::time::sleep(timeout) => {
                tracing::error!(builds = manager.builds(), "shutdown_timeout expired with jobs still running");
                ending = Ending::TimedOut;
            }
            () = interrupted => ending = Ending::TimedOut,
        }
    }
    if shutdown_providers(&manager, set.started(), timeout).await == Ending::TimedOut {
        ending = Ending::TimedOut;
    }
    Ok(ending)
}

fn install_signals() -> Result<StopSignals, StartError> {
    StopSignals::install().map_err(|e| StartError::Signal("SIGQUIT/SIGTERM/SIGINT/SIGHUP", e))
}

/// Marks `ready` once every pool answers (its ledger restored), unless shutdown began.
async fn become_ready(
    pools: Vec<Pool>,
    stop: tokio_util::sync::CancellationToken,
    ready: Readiness,
) {
    for p in &pools {
        if p.started().await.is_err() {
            return;
        }
    }
    ready.set_ready(true);
    // Shutdown may have begun meanwhile: it cancels `stop` before clearing `ready`.
    if stop.is_cancelled() {
        ready.set_ready(false);
    }
}

/// Shuts the executor providers down within `timeout`: `[machine.shutdown_drain]` when
/// enabled, then the plugin processes.
async fn shutdown_providers<S: JobSource>(
    manager: &Manager<S>,
    pools: &[StartedPool],
    timeout: Duration,
) -> Ending {
    let mut ending = Ending::Clean;
    tracing::info!(
        "shutdown-timeout" = crate::upstream_log::format::duration_field(timeout),
        "Shutting down executor providers"
    );
    let drain = crate::engine::drain_settings(&manager.config());
    let shutdown = async {
        for p in pools {
            tracing::info!(
                executor = "docker+machine",
                "Shutting down docker+machine executor provider"
            );
            if !drain.enabled {
                tracing::info!("Shutdown drain is disabled, skipping machine pool drain");
            } else if let Some(report) = p.pool.drain(drain).await {
                tracing::debug!(?report, "Shutdown drain report");
            }
        }
    };
    if tokio::time::timeout(timeout, shutdown).await.is_err() {
        tracing::warn!("Drain operation cancelled or timed out");
        ending = Ending::TimedOut;
    }
    for p in pools {
        p.plugin.inner().shutdown(Duration::from_secs(5)).await;
    }
    tracing::info!("All executor providers shut down.");
    tracing::info!("Can exit now!");
    ending
}

/// `run-single`'s stopping rules.
#[derive(Debug, Clone, Copy)]
pub struct SingleLimits {
    /// Exit after this many builds (0: never).
    pub max_builds: u64,
    /// Exit after this long without a job.
    pub wait_timeout: Option<Duration>,
    /// When the command started.
    pub started: std::time::Instant,
}

/// `run-single` (spec §7.9): no worker pool, one runner, Acquire → request → run → Release in
/// a loop; 3 s after an empty request, 300 s after an unhealthy one. Signals as for `run`.
pub async fn run_single<S: JobSource>(
    manager: Arc<Manager<S>>,
    set: PoolSet,
    limits: SingleLimits,
) -> Result<Ending, StartError> {
    let mut sig = install_signals()?;
    let stop = manager.stop.clone();
    let interrupt = manager.interrupt.clone();
    // run-single has no reload: SIGHUP is ignored.
    let listener = tokio::spawn(async move {
        loop {
            match daemon_policy(sig.recv().await) {
                DaemonAction::Graceful => {
                    tracing::warn!(
                        StopSignal = "quit",
                        "Starting graceful shutdown, waiting for builds to finish"
                    );
                    stop.cancel();
                    break;
                }
                DaemonAction::Forceful => {
                    stop.cancel();
                    interrupt.cancel();
                    return;
                }
                DaemonAction::Reload => {}
            }
        }
        while daemon_policy(sig.recv().await) != DaemonAction::Forceful {}
        interrupt.cancel();
    });
    let Some(mut runner) = manager.config().runners.first().cloned() else {
        listener.abort();
        return Ok(Ending::Clean);
    };
    // One job at a time: never re-queue.
    runner.strict_check_interval = Some(true);
    manager.end_local_leftovers().await;
    let mut builds = 0u64;
    let mut last_job = limits.started;
    let timeout = Duration::from_secs(30);
    let mut ending = Ending::Clean;
    // A forceful stop waits for the running job (its abort, clean-up and final update) for
    // the shutdown timeout at most, as `run` does: a GitLab answering the final update with
    // 5xx or 412 for ever cannot hold the process.
    let expired = async {
        manager.interrupt.cancelled().await;
        tokio::time::sleep(timeout).await;
    };
    tokio::pin!(expired);
    while !manager.stop.is_cancelled() {
        let turn = tokio::select! {
            t = manager.clone().work(runner.clone()) => t,
            () = &mut expired => {
                tracing::error!(builds = manager.builds(), "shutdown_timeout expired with jobs still running");
                ending = Ending::TimedOut;
                break;
            }
        };
        let pause = match turn {
            Turn::Job => {
                builds += 1;
                last_job = std::time::Instant::now();
                if limits.max_builds > 0 && builds >= limits.max_builds {
                    tracing::info!(builds, "max-builds reached; exiting");
                    break;
                }
                Duration::ZERO
            }
            Turn::Unhealthy => Duration::from_secs(300),
            Turn::NoJob | Turn::Skipped => Duration::from_secs(3),
        };
        if let Some(w) = limits.wait_timeout {
            if last_job.elapsed() >= w {
                tracing::info!("wait-timeout reached without a job; exiting");
                break;
            }
        }
        tokio::select! {
            () = manager.stop.cancelled() => {}
            () = tokio::time::sleep(pause) => {}
        }
    }
    listener.abort();
    if shutdown_providers(&manager, set.started(), timeout).await == Ending::TimedOut {
        ending = Ending::TimedOut;
    }
    Ok(ending)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::pool::NoObserver;
    use tokio_util::sync::CancellationToken;

    #[tokio::test]
    async fn ready_once_every_pool_serves_and_never_after_shutdown_began() {
        let cmd = PluginCommand::new(PathBuf::from("/nonexistent/drover-provider"), Vec::new());
        let plugin = Arc::new(CredentialCache::new(Plugin::new(cmd)));
        let pool = Pool::start(Vec::new(), plugin, Arc::new(NoObserver));
        let ready = Readiness::new();
        assert!(!ready.is_ready(), "not ready before the run loop");
        let stop = CancellationToken::new();
        become_ready(vec![pool.clone()], stop.clone(), ready.clone()).await;
        assert!(ready.is_ready());

        let late = Readiness::new();
        stop.cancel();
        become_ready(vec![pool], stop, late.clone()).await;
        assert!(!late.is_ready(), "shutdown began before the pools answered");
    }
}
