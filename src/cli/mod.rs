//! The `drover` command line, shaped like `gitlab-runner`'s: global options come before the
//! command, and each command lives in its own file.
//!
//! Library modules return typed errors; this module turns them into one message on stderr,
//! prefixed `drover: `, and an exit code. Nothing here decides anything about scaling.

pub mod exec_job;
pub mod helper;
pub mod logging;
pub(crate) use crate::output;
pub mod provider;
pub mod run;
pub use crate::signals;

use output::{errln, out};
use std::process::ExitCode;

pub mod autoscale;
pub mod check_config;

use clap::{Parser, Subcommand};

pub mod compare;
pub mod simulate;
pub mod workload;

pub mod config_file;
pub mod gitlab_util;
pub mod register;
pub mod runners;
pub mod service;

/// Version information printed by `drover --version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The top-level command line.
#[derive(Debug, Parser)]
#[command(
    name = "drover",
    version = VERSION,
    about = "A drop-in replacement for GitLab Runner's docker+machine autoscaling executor",
    disable_version_flag = true
)]
pub struct Cli {
    /// Debug logging (as gitlab-runner's --debug)
    #[arg(long, global = true, env = "RUNNER_DEBUG")]
    pub debug: bool,

    /// Log level: debug, info, warn, error, fatal or panic (overrides config log_level)
    #[arg(short = 'l', long = "log-level", global = true, env = "LOG_LEVEL")]
    pub log_level: Option<String>,

    /// Log format: runner, text or json (overrides config log_format)
    #[arg(long = "log-format", global = true, env = "LOG_FORMAT")]
    pub log_format: Option<String>,

    /// Print the version (gitlab-runner's six-line layout)
    #[arg(short = 'v', long = "version")]
    pub version: bool,

    /// The command to run
    #[command(subcommand)]
    pub command: Command,
}

/// drover's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Provider plugin tools (conformance suite)
    Provider(provider::ProviderArgs),
    /// Replay a workload through the autoscaler in virtual time and summarise what it did
    Simulate(simulate::SimulateArgs),
    /// Replay one workload through two configs and show where their decisions differ
    Compare(compare::CompareArgs),
    /// Workload files for simulate and compare (import a GitLab jobs export)
    Workload(workload::WorkloadArgs),
    /// Load config.toml and report what it configures, with warnings and errors
    CheckConfig(check_config::CheckConfigArgs),
    /// Autoscaling tools: explain the engine's decisions
    #[command(subcommand)]
    Autoscale(autoscale::AutoscaleCommand),
    /// Run one job payload (the JSON GitLab sends) on a Docker Engine, without GitLab
    ExecJob(exec_job::ExecJobArgs),
    /// Run the runners of config.toml (the service gitlab-runner's systemd unit starts)
    Run(run::RunArgs),
    /// Run one runner without a worker pool (flags or one config entry)
    RunSingle(run::RunSingleArgs),
    /// drover acting as gitlab-runner-helper inside a locally built helper image
    #[command(hide = true)]
    Helper(helper::HelperArgs),
    /// Register a runner with GitLab and add it to config.toml
    Register(Box<register::RegisterArgs>),
    /// Check the runners in config.toml against GitLab
    Verify(runners::VerifyArgs),
    /// Unregister runners from GitLab and remove them from config.toml
    Unregister(runners::UnregisterArgs),
    /// List the runners in config.toml
    List(runners::ListArgs),
    /// Reset runner authentication tokens
    ResetToken(runners::ResetTokenArgs),
    /// Install drover as a systemd service
    Install(service::InstallArgs),
    /// Remove the systemd service
    Uninstall(service::ServiceArgs),
    /// Start the systemd service
    Start(service::ServiceArgs),
    /// Stop the systemd service
    Stop(service::ServiceArgs),
    /// Restart the systemd service
    Restart(service::ServiceArgs),
    /// Show whether the systemd service runs
    Status(service::ServiceArgs),
}

/// Whether the arguments ask for the version: `-v`/`--version` before any command (global
/// options may come first), as gitlab-runner reads it.
pub fn wants_version<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> bool {
    for arg in args.iter().skip(1) {
        match arg.as_ref().to_str() {
            Some("-v" | "--version") => return true,
            Some(a) if a.starts_with('-') => continue,
            _ => return false,
        }
    }
    false
}

/// The message for a command drover does not have: gitlab-runner's wording, plus what
/// drover does support.
pub fn unknown_command(name: &str) -> String {
    use clap::CommandFactory;
    let supported: Vec<String> = Cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name().to_owned())
        .collect();
    format!(
        "Command {name} not found. drover supports: {}",
        supported.join(", ")
    )
}

/// Parses the process arguments, runs the command and returns its exit code (after
/// [`output::exit_code`] has had its say about a failed stdout).
pub fn main() -> ExitCode {
    raise_open_files_limit();
    output::exit_code(run())
}

/// Raises the soft limit on open files to the hard limit, as Go's runtime does for
/// gitlab-runner at start: with the common soft limit of 1,024, a busy manager (jobs, Docker
/// connections, plugins, the metrics server) would otherwise run out of descriptors long
/// before the system's limit. Failing to raise it changes nothing.
fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct we pass, nothing else.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

fn run() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if wants_version(&args) {
        out!("{}", crate::gitlab::version::version_text());
        return ExitCode::SUCCESS;
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::InvalidSubcommand => {
            let name = e
                .get(clap::error::ContextKind::InvalidSubcommand)
                .map(|v| v.to_string())
                .unwrap_or_default();
            errln!("drover: {}", unknown_command(&name));
            return ExitCode::FAILURE;
        }
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            if e.use_stderr() {
                errln!("{}", e.render());
            } else {
                out!("{}", e.render());
            }
            return ExitCode::from(code);
        }
    };
    // Results go to stdout; logs to stderr, quiet unless something is wrong, except where a
    // command's own verbosity flag asks for its log lines.
    let default_level = match &cli.command {
        Command::Provider(p) if p.verbose() => tracing_subscriber::filter::LevelFilter::INFO,
        Command::Run(_) | Command::RunSingle(_) => tracing_subscriber::filter::LevelFilter::INFO,
        _ => tracing_subscriber::filter::LevelFilter::WARN,
    };
    match logging::settings(
        cli.debug,
        cli.log_level.as_deref(),
        cli.log_format.as_deref(),
        default_level,
    ) {
        // drover run installs its own subscriber, with the metrics' error counter beside it.
        Ok(s) => match &cli.command {
            Command::Run(_) => run::set_log_settings(s),
            _ => logging::install(s),
        },
        Err(e) => {
            errln!("drover: {e}");
            return ExitCode::from(2);
        }
    }
    match cli.command {
        Command::Provider(args) => provider::run(args),
        Command::Simulate(args) => simulate::run(&args),
        Command::Compare(args) => compare::run(&args),
        Command::Workload(args) => workload::run(&args),
        Command::CheckConfig(args) => check_config::run(&args),
        Command::Autoscale(cmd) => autoscale::run(&cmd),
        Command::ExecJob(args) => exec_job::run(args),
        Command::Helper(args) => helper::run(args),
        Command::Run(args) => run::run(args),
        Command::RunSingle(args) => run::run_single(args),
        Command::Register(args) => register::run(&args),
        Command::Verify(args) => runners::verify(&args),
        Command::Unregister(args) => runners::unregister(&args),
        Command::List(args) => runners::list(&args),
        Command::ResetToken(args) => runners::reset_token(&args),
        Command::Install(args) => service::install(&args),
        Command::Uninstall(args) => service::uninstall(&args),
        Command::Start(args) => service::control(&args, "start"),
        Command::Stop(args) => service::control(&args, "stop"),
        Command::Restart(args) => service::control(&args, "restart"),
        Command::Status(args) => service::status(&args),
    }
}
