//! `drover run` and `drover run-single`: the long-running service (gitlab-runner's `run`) and
//! the single-runner loop (`run-single`, spec gitlab-api.md §7.9). This file parses, wires and
//! reports; the manager does the work.
//!
//! Exit codes: 0 after a clean shutdown (signal, `--max-builds`, `--wait-timeout`), 1 when the
//! shutdown timed out with work left, 2 on bad input (config, flags) or a failed start.

use crate::cli::output::errln;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;

use crate::config::model::{Config, RunnerConfig};
use crate::manager::gitlab_link::Gitlab;
use crate::manager::lifecycle::{self, Ending};
use crate::manager::observe::AutoscalingObserver;
use crate::manager::pool::NoObserver;
use crate::manager::runloop::Manager;

/// Arguments of `drover run` (gitlab-runner's flags, same names).
#[derive(Debug, Args)]
pub struct RunArgs {
    /// config.toml to serve (default: /etc/gitlab-runner/config.toml as root, else
    /// ~/.gitlab-runner/config.toml)
    #[arg(short = 'c', long = "config", value_name = "FILE", env = "CONFIG_FILE")]
    pub config: Option<PathBuf>,

    /// Change to this directory before starting (relative paths in the config resolve here)
    #[arg(short = 'd', long = "working-directory", value_name = "DIR")]
    pub working_directory: Option<PathBuf>,

    /// Service name (accepted for the systemd unit; drover only logs it)
    #[arg(
        short = 'n',
        long = "service",
        value_name = "NAME",
        default_value = "gitlab-runner"
    )]
    pub service: String,

    /// User to run shell-executor jobs as (accepted; drover runs docker jobs only, so unused)
    #[arg(short = 'u', long = "user", value_name = "USER")]
    pub user: Option<String>,

    /// Also log to syslog (accepted; drover logs to stderr, which systemd sends to the journal)
    #[arg(long = "syslog")]
    pub syslog: bool,

    /// Metrics/debug HTTP server address (overrides listen_address; port 9252 if omitted)
    #[arg(long = "listen-address", value_name = "ADDR", env = "LISTEN_ADDRESS")]
    pub listen_address: Option<String>,
}

/// Arguments of `drover run-single`.
#[derive(Debug, Args)]
pub struct RunSingleArgs {
    /// config.toml to take the runner from
    #[arg(short = 'c', long = "config", value_name = "FILE", env = "CONFIG_FILE")]
    pub config: Option<PathBuf>,

    /// Which [[runners]] entry to serve, by name (default: the first)
    #[arg(long = "runner-name", value_name = "NAME", env = "RUNNER_NAME")]
    pub runner_name: Option<String>,

    /// GitLab URL (without a config file)
    #[arg(short = 'u', long = "url", env = "CI_SERVER_URL")]
    pub url: Option<String>,

    /// Runner authentication token (without a config file)
    #[arg(short = 't', long = "token", env = "CI_SERVER_TOKEN")]
    pub token: Option<String>,

    /// Executor (without a config file): docker
    #[arg(long = "executor", env = "RUNNER_EXECUTOR", default_value = "docker")]
    pub executor: String,

    /// Default image (without a config file)
    #[arg(long = "docker-image", env = "DOCKER_IMAGE")]
    pub docker_image: Option<String>,

    /// Docker endpoint (without a config file)
    #[arg(long = "docker-host", env = "DOCKER_HOST")]
    pub docker_host: Option<String>,

    /// Exit after this many builds (0: never)
    #[arg(long = "max-builds", env = "MAX_BUILDS", default_value_t = 0)]
    pub max_builds: u64,

    /// Exit after this many seconds without a job (0: never)
    #[arg(long = "wait-timeout", env = "WAIT_TIMEOUT", default_value_t = 0)]
    pub wait_timeout: u64,
}

static LOG_SETTINGS: std::sync::OnceLock<super::logging::LogSettings> = std::sync::OnceLock::new();

/// The checked global log flags, for `drover run` to install with its metrics layer.
pub fn set_log_settings(s: super::logging::LogSettings) {
    let _ = LOG_SETTINGS.set(s);
}

/// The metrics registry, and logging installed with `gitlab_runner_errors_total` counting.
fn metrics_and_logging(system_id: &str) -> anyhow::Result<crate::metrics::Metrics> {
    let metrics = crate::metrics::Metrics::new(system_id, &crate::metrics::BuildInfo::current())?;
    if let Some(s) = LOG_SETTINGS.get() {
        super::logging::install_with(*s, Some(metrics.errors_layer()));
    }
    Ok(metrics)
}

/// Starts the metrics server when an address is configured; a listen failure is fatal, as
/// upstream. `/health/ready` answers `readiness`, which the run loop sets.
async fn start_metrics(
    metrics: crate::metrics::Metrics,
    cli_address: Option<&str>,
    config: &Config,
    stop: tokio_util::sync::CancellationToken,
    readiness: crate::metrics::server::Readiness,
) -> anyhow::Result<crate::metrics::Metrics> {
    use crate::metrics::server::{self, ListenAddress};
    match server::effective_listen_address(cli_address, &config.listen_address) {
        None => tracing::info!("listen_address not defined, metrics & debug endpoints disabled"),
        Some(addr) => {
            let addr = ListenAddress::parse(addr)?;
            let listener = addr.bind().await?;
            let bound = listener
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            tracing::info!(address = %bound, "Metrics server listening");
            let m = metrics.clone();
            tokio::spawn(server::serve(listener, m, readiness, stop));
        }
    }
    Ok(metrics)
}

/// Upstream's first line, the restart marker the log readers key on.
fn log_runtime_platform() {
    let build = crate::metrics::BuildInfo::current();
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    };
    tracing::info!(
        arch,
        os = std::env::consts::OS,
        pid = std::process::id(),
        revision = %build.revision,
        version = %build.version,
        "Runtime platform"
    );
}

fn default_config() -> PathBuf {
    crate::config::default_config_path()
}

fn load(path: &Path) -> anyhow::Result<Config> {
    let loaded = crate::config::load_file(path)?;
    crate::secrets::register_config(&loaded.config);
    for w in &loaded.warnings {
        tracing::warn!(warning = %w, "Configuration warning");
    }
    super::logging::config_loaded(&loaded.config, &path.display().to_string());
    Ok(loaded.config)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    errln!("drover: {e:#}");
    ExitCode::from(2)
}

fn ending_code(e: Ending) -> ExitCode {
    match e {
        Ending::Clean => ExitCode::SUCCESS,
        Ending::TimedOut => ExitCode::from(1),
    }
}

/// Runs `drover run`.
pub fn run(args: RunArgs) -> ExitCode {
    if let Some(dir) = &args.working_directory {
        if let Err(e) = std::env::set_current_dir(dir) {
            return fail(format!(
                "cannot change to the working directory {}: {e}",
                dir.display()
            ));
        }
    }
    let path = args.config.clone().unwrap_or_else(default_config);
    let system_id = crate::gitlab::system_id::load_or_create(&path);
    let metrics = match metrics_and_logging(&system_id) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    log_runtime_platform();
    // As upstream, before the first config load (so in the format the flags chose).
    tracing::info!(
        builds = 0,
        max_builds = 0,
        "Starting multi-runner from {}...",
        path.display()
    );
    super::logging::user_mode_warning(false);
    let config = match load(&path) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    if args.user.is_some() {
        tracing::info!(
            "--user is accepted for compatibility; docker jobs run as their image's user"
        );
    }
    let rt = match runtime() {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    rt.block_on(async move {
        let server_stop = tokio_util::sync::CancellationToken::new();
        let readiness = crate::metrics::server::Readiness::new();
        let metrics = match start_metrics(
            metrics,
            args.listen_address.as_deref(),
            &config,
            server_stop.clone(),
            readiness.clone(),
        )
        .await
        {
            Ok(m) => m,
            Err(e) => return fail(e),
        };
        let observer = Arc::new(AutoscalingObserver(metrics.autoscaling().clone()));
        let (pools, started) = match lifecycle::start_pools(&config, observer, Some(&path)) {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        let source = Gitlab::new(
            Some(crate::config::default_certificate_directory()),
            system_id.clone(),
            config.labels.clone(),
            Some(metrics.clone()),
        );
        tracing::info!(
            builds = 0,
            max_builds = config.concurrent,
            "Configuration loaded"
        );
        let manager = Manager::new(source, config, system_id, pools, Some(metrics));
        let origin = path.display().to_string();
        let on_load = Box::new(move |c: &Config| {
            crate::secrets::register_config(c);
            super::logging::config_loaded(c, &origin);
        });
        let r = lifecycle::run(manager, path, started, on_load, readiness).await;
        server_stop.cancel();
        match r {
            Ok(ending) => ending_code(ending),
            Err(e) => fail(e),
        }
    })
}

fn single_runner(args: &RunSingleArgs) -> anyhow::Result<(Config, Option<PathBuf>)> {
    if args.url.is_some() || args.token.is_some() {
        let (Some(url), Some(token)) = (&args.url, &args.token) else {
            anyhow::bail!("run-single needs both --url and --token (or --config)");
        };
        let mut r = RunnerConfig {
            name: "run-single".into(),
            url: url.clone(),
            token: token.clone(),
            executor: args.executor.clone(),
            ..RunnerConfig::default()
        };
        let mut docker = crate::config::model::DockerConfig::default();
        if let Some(i) = &args.docker_image {
            docker.image = i.clone();
        }
        if let Some(h) = &args.docker_host {
            docker.host = h.clone();
        }
        r.docker = Some(Box::new(docker));
        let text = "concurrent = 1\n";
        let mut config = crate::config::load_str(text, "run-single")?.config;
        config.runners = vec![r];
        return Ok((config, None));
    }
    let path = args.config.clone().unwrap_or_else(default_config);
    let mut config = load(&path)?;
    let runner = match &args.runner_name {
        Some(name) => config
            .runners
            .iter()
            .find(|r| &r.name == name)
            .cloned()
            .with_context(|| {
                format!("no [[runners]] entry named {name:?} in {}", path.display())
            })?,
        None => config
            .runners
            .first()
            .cloned()
            .with_context(|| format!("{} has no [[runners]] entry", path.display()))?,
    };
    config.runners = vec![runner];
    config.concurrent = 1;
    Ok((config, Some(path)))
}

/// Runs `drover run-single`: one runner, one job at a time, no reload; exits after
/// `--max-builds` jobs or `--wait-timeout` seconds without one.
pub fn run_single(args: RunSingleArgs) -> ExitCode {
    let (mut config, path) = match single_runner(&args) {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    log_runtime_platform();
    // run-single's shutdown timeout is fixed at 30 s (spec §7.9).
    config.shutdown_timeout = 30;
    let rt = match runtime() {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    rt.block_on(async move {
        let system_id = match &path {
            Some(p) => crate::gitlab::system_id::load_or_create(p),
            None => crate::gitlab::system_id::random(),
        };
        let (pools, started) =
            match lifecycle::start_pools(&config, Arc::new(NoObserver), path.as_deref()) {
                Ok(p) => p,
                Err(e) => return fail(e),
            };
        let source = Gitlab::new(
            Some(crate::config::default_certificate_directory()),
            system_id.clone(),
            config.labels.clone(),
            None,
        );
        let manager = Manager::new(source, config, system_id, pools, None);
        let limits = lifecycle::SingleLimits {
            max_builds: args.max_builds,
            wait_timeout: (args.wait_timeout > 0).then(|| Duration::from_secs(args.wait_timeout)),
            started: Instant::now(),
        };
        match lifecycle::run_single(manager, started, limits).await {
            Ok(ending) => ending_code(ending),
            Err(e) => fail(e),
        }
    })
}
