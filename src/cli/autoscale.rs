//! `drover autoscale decide`: explains one Acquire pass (the pass upstream runs each time it is
//! about to ask GitLab for a job) for one runner, without touching any machine.
//!
//! It loads the config, puts the machines of a state file into a fresh engine, runs the
//! engine's pass with connectivity answered from the file, and prints what the pass decided:
//! removals with upstream's reason strings, creations, the machine acquired (or the error),
//! and the counts the next pass would see. The pass and its rendering live in
//! [`crate::sim::decide`]; this file only reads the arguments and prints.

use crate::cli::output::{errln, out};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, Context};
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand, ValueEnum};

use crate::config;
use crate::sim::decide::{decide, StateFile};

/// `drover autoscale …` subcommands.
#[derive(Debug, Subcommand)]
pub enum AutoscaleCommand {
    /// Explain one Acquire pass for one runner, from a state file, without touching any machine
    Decide(DecideArgs),
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One sentence per decision.
    Text,
    /// One JSON object.
    Json,
}

/// Arguments of `drover autoscale decide`.
#[derive(Debug, Args)]
#[command(after_help = "\
state.json lists the machines in docker-machine listing order:
  {\"machines\": [{\"name\": \"runner-abc-auto-1700000000-0a1b2c3d\",
                 \"state\": \"idle\" | \"acquired\" | \"creating\" | \"used\" | \"removing\",  (omit: first seen on disk)
                 \"used_count\": 3, \"last_used\": \"2026-11-20T10:00:00Z\" | null,
                 \"retry_count\": 0, \"on_disk\": true, \"reachable\": true}]}
Exit status: 0 when the pass was explained, 1 on an error (message on stderr), 2 for usage errors.")]
pub struct DecideArgs {
    /// Config file (default as gitlab-runner: /etc/gitlab-runner/config.toml as root, ~/.gitlab-runner/config.toml otherwise)
    #[arg(short = 'c', long = "config", env = "CONFIG_FILE", value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// The runner to explain, by name.
    #[arg(
        long,
        value_name = "NAME",
        help = "The [[runners]] entry, by name (default: the first docker+machine runner)"
    )]
    pub runner: Option<String>,

    /// The machines, as JSON (see below)
    #[arg(long, value_name = "PATH")]
    pub state: PathBuf,

    /// Freeze the clock at this instant for the whole pass (RFC 3339; default: now)
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    pub now: Option<DateTime<Utc>>,

    /// Output format
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

fn parse_now(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .map_err(|e| format!("{e}: expected RFC 3339, e.g. 2026-11-20T10:00:00Z"))
}

/// Runs `drover autoscale …`.
pub fn run(cmd: &AutoscaleCommand) -> ExitCode {
    match cmd {
        AutoscaleCommand::Decide(args) => match run_decide(args) {
            Ok(out) => {
                out!("{out}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                errln!("drover: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}

fn run_decide(args: &DecideArgs) -> anyhow::Result<String> {
    let path = args
        .config
        .clone()
        .unwrap_or_else(config::default_config_path);
    let loaded = config::load_file(&path).map_err(|e| anyhow!("{e}"))?;
    super::logging::config_loaded(&loaded.config, &path.display().to_string());
    let state = read_state(&args.state)?;
    let now = args.now.unwrap_or_else(Utc::now);
    let d = decide(&loaded.config, args.runner.as_deref(), &state, now)?;
    for w in &d.warnings {
        errln!("drover: warning: {w}");
    }
    Ok(match args.format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(&d.json())?;
            s.push('\n');
            s
        }
        Format::Text => d.text(),
    })
}

fn read_state(path: &Path) -> anyhow::Result<StateFile> {
    let text = crate::bounded::read_data_file(path)
        .with_context(|| format!("cannot read state file {}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| {
        anyhow!(
            "{}:{}:{}: invalid state file: {e}; expected {{\"machines\": [{{\"name\": …}}]}}",
            path.display(),
            e.line(),
            e.column()
        )
    })
}
