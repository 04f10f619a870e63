//! `drover workload import`: convert a GitLab jobs API export (JSON) into a workload CSV for
//! `drover simulate` and `drover compare` (which also read exports directly).
//!
//! This file wires options to [`crate::sim::import`]; it converts and writes, nothing else.

use crate::cli::output::{errln, out};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use super::simulate::{fail, write_file};
use crate::sim::import::import_jobs_export;

/// `drover workload`.
#[derive(Debug, Clone, Args)]
pub struct WorkloadArgs {
    /// What to do
    #[command(subcommand)]
    pub command: WorkloadCommand,
}

/// `drover workload` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum WorkloadCommand {
    /// Convert a GitLab jobs API export (JSON array of jobs, pages may be concatenated) to CSV
    Import {
        /// The export, e.g. from `curl .../api/v4/projects/ID/jobs?per_page=100&page=N`
        #[arg(value_name = "EXPORT.json")]
        export: PathBuf,
        /// Write the CSV here instead of standard output
        #[arg(short = 'o', long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

fn run_inner(args: &WorkloadArgs) -> anyhow::Result<()> {
    match &args.command {
        WorkloadCommand::Import { export, output } => {
            let name = export.display().to_string();
            let text = crate::bounded::read_data_file(export)
                .with_context(|| format!("cannot read {name}"))?;
            let imported = import_jobs_export(&text, &name)?;
            let csv = imported.workload.to_csv();
            match output {
                Some(path) => write_file(path, &csv)?,
                None => out!("{csv}"),
            }
            errln!(
                "drover: imported {} job(s); left out {} that never started and {} that never \
                 finished",
                imported.workload.jobs.len(),
                imported.not_started,
                imported.not_finished
            );
            Ok(())
        }
    }
}

/// Runs `drover workload`.
pub fn run(args: &WorkloadArgs) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}
