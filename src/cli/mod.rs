//! The `drover` command line, shaped like `gitlab-runner`'s: global options come before the
//! command, and each command lives in its own file.
//!
//! Library modules return typed errors; this module turns them into one message on stderr,
//! prefixed `drover: `, and an exit code. Nothing here decides anything about scaling.

pub mod exec_job;
pub mod helper;
pub mod logging;
pub mod provider;
pub mod run;

use std::process::ExitCode;

pub mod autoscale;
pub mod check_config;

use clap::{Parser, Subcommand};

pub mod compare;
pub mod simulate;
pub mod workload;

/// Version information printed by `drover --version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The top-level command line.
#[derive(Debug, Parser)]
#[command(
    name = "drover",
    version = VERSION,
    about = "A drop-in replacement for GitLab Runner's docker+machine autoscaling executor",
    propagate_version = true
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
}

/// Parses the process arguments, runs the command and returns its exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
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
            eprintln!("drover: {e}");
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
    }
}
