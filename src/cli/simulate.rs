//! `drover simulate`: replay a workload through the autoscaling engine in virtual time and
//! print what it did. With no arguments it runs the bundled `config.toml.example` on the
//! bundled bursty-weekday workload.
//!
//! This file parses and validates options, loads inputs and writes outputs; the simulation
//! itself is [`crate::sim`]. The run options are shared with `drover compare`.

use crate::cli::output::{errln, out, outln};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use chrono::{DateTime, NaiveDate, Utc};
use clap::{Args, ValueEnum};

use crate::config::Config;
use crate::sim::import::{import_jobs_export, looks_like_export};
use crate::sim::provider::{parse_rate, Latency, ProviderModel};
use crate::sim::report::{timeline_csv, Summary};
use crate::sim::trace::Trace;
use crate::sim::workload::Workload;
use crate::sim::{examples, plot, simulate, Scenario, Simulation};

/// Output format of summaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned text for people.
    Text,
    /// JSON for scripts.
    Json,
}

/// Options shared by `simulate` and `compare`: the workload, the period and the provider model.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Workload: a CSV (see docs/simulation.md) or a GitLab jobs API export (JSON).
    /// Default: the bundled bursty weekday
    #[arg(short = 'w', long, value_name = "FILE")]
    pub workload: Option<PathBuf>,

    /// Start of the simulated period (RFC 3339 or YYYY-MM-DD, UTC). Default: midnight UTC
    /// before the first job
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub from: Option<DateTime<Utc>>,

    /// End of the simulated period (RFC 3339 or YYYY-MM-DD, UTC). Default: when the last job
    /// finishes
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub until: Option<DateTime<Utc>>,

    /// Seed of the provider model (latencies, failures) and of machine names
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Machine creation time: seconds, `uniform:A-B` or `exp:MEAN`
    #[arg(long, value_name = "LATENCY", default_value = "uniform:60-120")]
    pub create_latency: Latency,

    /// Probability that a machine creation fails
    #[arg(long, value_name = "P", default_value = "0", value_parser = parse_rate)]
    pub create_failure_rate: f64,

    /// Machine removal time: seconds, `uniform:A-B` or `exp:MEAN`
    #[arg(long, value_name = "LATENCY", default_value = "10")]
    pub remove_latency: Latency,

    /// Probability that a removal attempt fails (it is retried 30 s later)
    #[arg(long, value_name = "P", default_value = "0", value_parser = parse_rate)]
    pub remove_failure_rate: f64,

    /// Ignore the workload's runner column: any runner may take any job
    #[arg(long)]
    pub any_runner: bool,
}

/// `drover simulate`.
#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    /// config.toml to simulate. Default: the bundled config.toml.example
    #[arg(short = 'c', long = "config", value_name = "FILE", env = "CONFIG_FILE")]
    pub config: Option<PathBuf>,

    /// Workload, simulated period and provider model.
    #[command(flatten)]
    pub run: RunArgs,

    /// Write the timeline (one row per change) as CSV to this file
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,

    /// Write an SVG plot of machines by state and queue length to this file
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,

    /// Summary format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// Parses `--from`/`--until`: RFC 3339, or a date meaning its midnight UTC.
pub fn parse_time(s: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
        .ok_or_else(|| format!("{s:?} is not an RFC 3339 time (2026-01-05T09:00:00Z) or a date"))
}

/// Loads a config file, or the bundled example; warnings go to stderr.
pub fn load_config(path: Option<&Path>) -> anyhow::Result<(Config, String)> {
    let (loaded, label) = match path {
        Some(p) => (crate::config::load_file(p)?, p.display().to_string()),
        None => (
            crate::config::load_str(examples::CONFIG, "config.toml.example (bundled)")?,
            "config.toml.example".to_string(),
        ),
    };
    for w in &loaded.warnings {
        errln!("drover: warning: {w}");
    }
    super::logging::config_loaded(&loaded.config, &label);
    Ok((loaded.config, label))
}

/// Loads the workload (CSV or JSON export), or the bundled bursty weekday.
pub fn load_workload(path: Option<&Path>) -> anyhow::Result<Workload> {
    let Some(path) = path else {
        return Ok(Workload::parse(
            examples::BURSTY_WEEKDAY,
            "bursty-weekday.csv (bundled)",
        )?);
    };
    let name = path.display().to_string();
    let text = crate::bounded::read_data_file(path)
        .with_context(|| format!("cannot read workload {name}"))?;
    if looks_like_export(&text) {
        let imported = import_jobs_export(&text, &name)?;
        if imported.not_started + imported.not_finished > 0 {
            errln!(
                "drover: {name}: left out {} job(s) that never started and {} that never finished",
                imported.not_started,
                imported.not_finished
            );
        }
        return Ok(imported.workload);
    }
    Ok(Workload::parse(&text, &name)?)
}

impl RunArgs {
    /// The provider model these options describe.
    pub fn model(&self) -> ProviderModel {
        ProviderModel {
            create_latency: self.create_latency.clone(),
            create_failure_rate: self.create_failure_rate,
            remove_latency: self.remove_latency.clone(),
            remove_failure_rate: self.remove_failure_rate,
            seed: self.seed,
        }
    }

    /// The scenario of `config` on `workload` with these options.
    fn scenario<'a>(&self, config: &'a Config, workload: &'a Workload) -> Scenario<'a> {
        Scenario {
            config,
            workload,
            from: self.from,
            until: self.until,
            model: self.model(),
            any_runner: self.any_runner,
        }
    }

    /// Runs `config` on `workload` with these options.
    pub fn run(&self, config: &Config, workload: &Workload) -> anyhow::Result<Trace> {
        Ok(simulate(&self.scenario(config, workload))?)
    }

    /// Runs `config` on `workload`, dropping the workload once it is laid out in virtual time
    /// (the run keeps its own compact copy: a manager-day's 570,000 jobs are 45 MB less at the
    /// peak).
    pub fn run_owned(&self, config: &Config, workload: Workload) -> anyhow::Result<Trace> {
        let simulation = Simulation::new(&self.scenario(config, &workload))?;
        drop(workload);
        Ok(simulation.run())
    }
}

/// Writes `text` to `path`, naming the file on failure.
pub fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Prints an error the drover way and returns the failure exit code.
pub fn fail(e: &anyhow::Error) -> ExitCode {
    errln!("drover: {e:#}");
    ExitCode::FAILURE
}

fn run_inner(args: &SimulateArgs) -> anyhow::Result<()> {
    let (config, label) = load_config(args.config.as_deref())?;
    let workload = load_workload(args.run.workload.as_deref())?;
    if workload.jobs.is_empty() && args.run.until.is_none() {
        bail!("the workload has no jobs; add some, or give --until to watch the idle pool alone");
    }
    let trace = args.run.run_owned(&config, workload)?;
    let summary = Summary::of(&trace);
    if let Some(path) = &args.timeline {
        write_file(path, &timeline_csv(&trace))?;
    }
    if let Some(path) = &args.plot {
        write_file(
            path,
            &plot::plot(&trace, &format!("drover simulate: {label}")),
        )?;
    }
    match args.format {
        Format::Text => {
            let workload_label = match &args.run.workload {
                Some(p) => p.display().to_string(),
                None => "bursty-weekday.csv (bundled)".to_string(),
            };
            outln!("{label} on {workload_label}");
            out!("{}", summary.to_text());
            for w in &trace.warnings {
                errln!("drover: warning: {w}");
            }
        }
        Format::Json => outln!("{}", summary.to_json()),
    }
    Ok(())
}

/// Runs `drover simulate`.
pub fn run(args: &SimulateArgs) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}
