//! `drover compare`: one workload through two configs, side by side: the summaries with deltas,
//! the first instants where the scaling decisions diverge, and an overlaid plot.
//! `--expect-identical` makes any divergence an error, for operators' CI.
//!
//! Both runs drive the same engine (upstream's docker+machine policy); what differs is the
//! config. This file only wires options to [`crate::sim::compare`].
//!
//! With `-c config.toml --upstream-log runner.log…` it compares upstream as its log shows it
//! with drover on the same config and jobs instead ([`super::upstream`]).

use crate::cli::output::{errln, out, outln};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::simulate::{fail, load_config, load_workload, write_file, Format, RunArgs};
use crate::sim::compare::Comparison;
use crate::sim::plot;
use crate::upstream_log::ReadOptions;
use chrono::Offset;

/// `drover compare`.
#[derive(Debug, Clone, Args)]
#[command(after_help = "\
Two modes:
  drover compare OLD.toml NEW.toml [-w workload]     two configs through drover's engine
  drover compare -c config.toml --upstream-log runner.log [--upstream-log runner.log.1 ...]
                                                     your gitlab-runner's log against drover
Exit status with --expect-identical: 1 when anything differs.")]
pub struct CompareArgs {
    /// The current config.toml (the baseline)
    #[arg(value_name = "OLD", required_unless_present = "upstream_log")]
    pub old: Option<PathBuf>,

    /// The config.toml to compare with it
    #[arg(value_name = "NEW", required_unless_present = "upstream_log")]
    pub new: Option<PathBuf>,

    /// The config.toml upstream ran with (with --upstream-log)
    #[arg(
        short = 'c',
        long = "config",
        value_name = "FILE",
        requires = "upstream_log"
    )]
    pub config: Option<PathBuf>,

    /// gitlab-runner's log (journalctl, syslog, docker logs or plain; .gz allowed); repeat for
    /// rotated files, in any order
    #[arg(long = "upstream-log", value_name = "FILE", conflicts_with_all = ["old", "new"])]
    pub upstream_log: Vec<PathBuf>,

    /// A GitLab jobs export giving the queue times of jobs the log lacks them for (runners
    /// before 16.10)
    #[arg(long, value_name = "EXPORT.json", requires = "upstream_log")]
    pub jobs_export: Option<PathBuf>,

    /// Year of year-less journald/syslog times before the first line with a full date
    /// (default: this year)
    #[arg(long, value_name = "YEAR")]
    pub log_year: Option<i32>,

    /// Workload, simulated period and provider model.
    #[command(flatten)]
    pub run: RunArgs,

    /// Write an SVG plot overlaying both runs to this file
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,

    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,

    /// Exit with status 1 if the runs differ in any decision, timeline or figure
    #[arg(long)]
    pub expect_identical: bool,
}

fn run_upstream(args: &CompareArgs) -> anyhow::Result<bool> {
    let (config, _) = load_config(args.config.as_deref())?;
    let mut opts = ReadOptions::default();
    if let Some(y) = args.log_year {
        opts.fallback_year = y;
    }
    opts.fallback_offset = chrono::Local::now().offset().fix();
    let queue = match &args.jobs_export {
        Some(p) => Some(crate::sim::upstream::read_queue_entries(p)?),
        None => None,
    };
    let report = crate::sim::upstream::compare(
        &config,
        &args.upstream_log,
        opts,
        args.run.seed,
        queue.as_ref(),
    )?;
    if let Some(path) = &args.plot {
        write_file(
            path,
            &plot::plot_overlay(
                &report.upstream_trace,
                "upstream (log)",
                &report.drover_trace,
                "drover",
            ),
        )?;
    }
    match args.format {
        Format::Text => out!("{}", report.text()),
        Format::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&report.json()).unwrap_or_default()
        ),
    }
    Ok(report.all_agree())
}

fn run_inner(args: &CompareArgs) -> anyhow::Result<bool> {
    if !args.upstream_log.is_empty() {
        return run_upstream(args);
    }
    let (Some(old_path), Some(new_path)) = (&args.old, &args.new) else {
        anyhow::bail!("give two configs (OLD NEW), or -c CONFIG --upstream-log LOG");
    };
    let (old, old_label) = load_config(Some(old_path))?;
    let (new, new_label) = load_config(Some(new_path))?;
    let workload = load_workload(args.run.workload.as_deref())?;
    let a = args.run.run(&old, &workload)?;
    let b = args.run.run(&new, &workload)?;
    let (a_label, b_label) = if old_label == new_label {
        ("old".to_string(), "new".to_string())
    } else {
        (old_label, new_label)
    };
    let cmp = Comparison::of(&a_label, &a, &b_label, &b);
    if let Some(path) = &args.plot {
        write_file(path, &plot::plot_overlay(&a, &a_label, &b, &b_label))?;
    }
    match args.format {
        Format::Text => out!("{}", cmp.to_text()),
        Format::Json => outln!("{}", cmp.to_json()),
    }
    Ok(cmp.identical)
}

/// Runs `drover compare`.
pub fn run(args: &CompareArgs) -> ExitCode {
    match run_inner(args) {
        Ok(identical) if args.expect_identical && !identical => {
            errln!("drover: the runs differ (--expect-identical)");
            ExitCode::FAILURE
        }
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}
