//! `drover compare`: one workload through two configs, side by side: the summaries with deltas,
//! the first instants where the scaling decisions diverge, and an overlaid plot.
//! `--expect-identical` makes any divergence an error, for operators' CI.
//!
//! Both runs drive the same engine (upstream's docker+machine policy); what differs is the
//! config. This file only wires options to [`crate::sim::compare`].

use crate::cli::output::{errln, out, outln};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::simulate::{fail, load_config, load_workload, write_file, Format, RunArgs};
use crate::sim::compare::Comparison;
use crate::sim::plot;

/// `drover compare`.
#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// The current config.toml (the baseline)
    #[arg(value_name = "OLD")]
    pub old: PathBuf,

    /// The config.toml to compare with it
    #[arg(value_name = "NEW")]
    pub new: PathBuf,

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

fn run_inner(args: &CompareArgs) -> anyhow::Result<bool> {
    let (old, old_label) = load_config(Some(&args.old))?;
    let (new, new_label) = load_config(Some(&args.new))?;
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
