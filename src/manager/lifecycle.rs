//! Start-up, signals, config reloads and shutdown of `drover run` (spec gitlab-api.md §7.3,
//! §7.5, §7.6): the machine pools are built from the config, the feeder starts, and this loop
//! waits for SIGQUIT (graceful), SIGTERM/SIGINT (forceful), SIGHUP or a newer config file
//! (reload), then shuts the workers and the pools down within `shutdown_timeout`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::signal::unix::{signal, Signal, SignalKind};

use super::pool::{NoticeObserver, Pool};
use super::runloop::{Manager, Pools, Turn};
use super::source::JobSource;
use crate::config::model::{Config, RunnerConfig};
use crate::engine::{naming, DrainSettings, RunnerId, RunnerPolicy};
use crate::ledger::LedgerFile;
use crate::provider::cache::CredentialCache;
use crate::provider::plugin::{Plugin, PluginCommand};

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
}

/// Starts one machine pool per provider plugin for the config's docker+machine runners. With
/// `config_path`, each pool keeps a crash-safe machine ledger beside it
/// (`.drover-machines.json` for `legacy-driver-shim`, `.drover-machines.<plugin>.json` for
/// another plugin, so pools never share a file).
pub fn start_pools(
    config: &Config,
    observer: Arc<dyn NoticeObserver>,
    config_path: Option<&Path>,
) -> Result<(Pools, Vec<StartedPool>), StartError> {
    let mut groups: BTreeMap<PathBuf, (PluginCommand, Vec<&RunnerConfig>)> = BTreeMap::new();
    for r in config
        .runners
        .iter()
        .filter(|r| r.executor == "docker+machine")
    {
        let cmd = plugin_for(r)?;
        groups
            .entry(cmd.program.clone())
            .or_insert_with(|| (cmd, Vec::new()))
            .1
            .push(r);
    }
    let mut pools = Pools::default();
    let mut started = Vec::new();
    for (_, (cmd, runners)) in groups {
        let mut policies = Vec::new();
        for r in &runners {
            let p = RunnerPolicy::from_runner(r).map_err(|error| StartError::Policy {
                runner: r.name.clone(),
                error,
            })?;
            policies.push(p);
        }
        let ledger = config_path.map(|c| ledger_file(c, &cmd.program));
        let plugin = Arc::new(CredentialCache::new(Plugin::new(cmd)));
        let pool = Pool::start_with_ledger(policies, plugin.clone(), observer.clone(), ledger);
        for (i, r) in runners.iter().enumerate() {
            pools
                .by_token
                .insert(r.token.clone(), (pool.clone(), RunnerId(i)));
        }
        started.push(StartedPool { pool, plugin });
    }
    Ok((pools, started))
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

struct Signals {
    quit: Signal,
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    fn install() -> Result<Signals, StartError> {
        let one = |kind: SignalKind, name: &'static str| {
            signal(kind).map_err(|e| StartError::Signal(name, e))
        };
        Ok(Signals {
            quit: one(SignalKind::quit(), "SIGQUIT")?,
            term: one(SignalKind::terminate(), "SIGTERM")?,
            int: one(SignalKind::interrupt(), "SIGINT")?,
            hup: one(SignalKind::hangup(), "SIGHUP")?,
        })
    }
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
    let short = |r: &RunnerConfig| crate::executor::paths::short_token(&r.token);
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
fn reload<S: JobSource>(
    manager: &Manager<S>,
    path: &Path,
    on_load: &(dyn Fn(&Config) + Send + Sync),
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
        tracing::warn!("{w}");
    }
    let old = manager.config();
    let changes = describe_changes(&old, &loaded.config);
    for c in &changes {
        tracing::info!("Configuration change: {c}");
    }
    let pools = manager.pools().clone();
    let new = loaded.config;
    for r in new
        .runners
        .iter()
        .filter(|r| r.executor == "docker+machine")
    {
        match (pools.by_token.get(&r.token), RunnerPolicy::from_runner(r)) {
            (Some((pool, id)), Ok(policy)) => {
                let (pool, id) = (pool.clone(), *id);
                tokio::spawn(async move { pool.set_policy(id, policy).await });
            }
            (None, _) => tracing::warn!(
                runner = %r.name,
                "new docker+machine runner: restart drover to create its machine pool"
            ),
            (_, Err(e)) => {
                tracing::error!(runner = %r.name, "autoscaling settings not applied: {e}")
            }
        }
    }
    manager.apply(new);
    tracing::info!("Configuration loaded");
}

/// Runs the feeder and waits for signals and reloads; returns after the shutdown sequence.
///
/// `on_load` sees every config a reload loaded, before the manager applies it (the command
/// line applies its `log_level`/`log_format` and registers its secrets for the log).
pub async fn run<S: JobSource>(
    manager: Arc<Manager<S>>,
    config_path: PathBuf,
    pools: Vec<StartedPool>,
    on_load: Box<dyn Fn(&Config) + Send + Sync>,
) -> Result<Ending, StartError> {
    let mut sig = Signals::install()?;
    let feeder = tokio::spawn(manager.clone().feed());
    let mut seen = mtime(&config_path);
    let mut tick = tokio::time::interval(RELOAD_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let forceful = loop {
        tokio::select! {
            _ = sig.quit.recv() => {
                tracing::warn!(StopSignal = "quit", "Starting graceful shutdown, waiting for builds to finish");
                break false;
            }
            _ = sig.term.recv() => break true,
            _ = sig.int.recv() => break true,
            _ = sig.hup.recv() => {
                seen = mtime(&config_path);
                reload(&manager, &config_path, &*on_load);
            }
            _ = tick.tick() => {
                let now = mtime(&config_path);
                if now.is_some() && now != seen {
                    seen = now;
                    reload(&manager, &config_path, &*on_load);
                }
            }
        }
    };
    manager.stop.cancel();
    let _ = feeder.await;
    let timeout = Duration::from_secs(
        u64::try_from(manager.config().shutdown_timeout_or_default()).unwrap_or(30),
    );
    let mut ending = Ending::Clean;
    let forceful = forceful || {
        // Graceful: wait for running jobs for as long as they take; SIGTERM/SIGINT switch to
        // forceful, a second SIGQUIT is ignored.
        loop {
            tokio::select! {
                () = manager.wait_idle() => break false,
                _ = sig.term.recv() => break true,
                _ = sig.int.recv() => break true,
                _ = sig.quit.recv() => {}
            }
        }
    };
    if forceful {
        tracing::warn!(
            "Graceful shutdown not finished properly. To gracefully clean up running plugins please use SIGQUIT (ctrl-\\) instead of SIGINT (ctrl-c)"
        );
        tracing::warn!(shutdown_timeout = ?timeout, "Starting forceful shutdown");
        manager.interrupt.cancel();
        tokio::select! {
            () = manager.wait_idle() => tracing::info!("All workers stopped."),
            () = tokio::time::sleep(timeout) => {
                tracing::error!(builds = manager.builds(), "shutdown_timeout expired with jobs still running");
                ending = Ending::TimedOut;
            }
            _ = sig.term.recv() => ending = Ending::TimedOut,
            _ = sig.int.recv() => ending = Ending::TimedOut,
        }
    }
    if shutdown_providers(&manager, &pools, timeout).await == Ending::TimedOut {
        ending = Ending::TimedOut;
    }
    Ok(ending)
}

/// Shuts the executor providers down within `timeout`: `[machine.shutdown_drain]` when
/// enabled, then the plugin processes.
async fn shutdown_providers<S: JobSource>(
    manager: &Manager<S>,
    pools: &[StartedPool],
    timeout: Duration,
) -> Ending {
    let mut ending = Ending::Clean;
    tracing::info!(shutdown_timeout = ?timeout, "Shutting down executor providers");
    let drain = DrainSettings::from_config(&manager.config());
    let shutdown = async {
        for p in pools {
            tracing::info!(
                executor = "docker+machine",
                "Shutting down docker+machine executor provider"
            );
            if !drain.enabled {
                tracing::info!("Shutdown drain is disabled, skipping machine pool drain");
            } else if let Some(report) = p.pool.drain(drain).await {
                tracing::info!("Machine pool drain completed: {report:?}");
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
    pools: Vec<StartedPool>,
    limits: SingleLimits,
) -> Result<Ending, StartError> {
    let mut sig = Signals::install()?;
    let stop = manager.stop.clone();
    let interrupt = manager.interrupt.clone();
    let listener = tokio::spawn(async move {
        tokio::select! {
            _ = sig.quit.recv() => {
                tracing::warn!(StopSignal = "quit", "Starting graceful shutdown, waiting for builds to finish");
                stop.cancel();
            }
            _ = sig.term.recv() => { stop.cancel(); interrupt.cancel(); return; }
            _ = sig.int.recv() => { stop.cancel(); interrupt.cancel(); return; }
        }
        tokio::select! {
            _ = sig.term.recv() => interrupt.cancel(),
            _ = sig.int.recv() => interrupt.cancel(),
        }
    });
    let Some(mut runner) = manager.config().runners.first().cloned() else {
        listener.abort();
        return Ok(Ending::Clean);
    };
    // One job at a time: never re-queue.
    runner.strict_check_interval = Some(true);
    let mut builds = 0u64;
    let mut last_job = limits.started;
    while !manager.stop.is_cancelled() {
        let pause = match manager.clone().work(runner.clone()).await {
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
    let timeout = Duration::from_secs(30);
    Ok(shutdown_providers(&manager, &pools, timeout).await)
}
