//! `drover workload import`: convert a GitLab jobs API export (JSON), or gitlab-runner's own log
//! (detected automatically), into a workload CSV for `drover simulate` and `drover compare`
//! (which also read exports directly).
//!
//! This file wires options to [`crate::sim::import`]; it converts and writes, nothing else.

use crate::cli::output::{errln, out};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use std::io::Read;
use std::path::Path;

use super::simulate::{fail, load_config, write_file};
use crate::sim::import::{import_jobs_export, looks_like_export};
use crate::sim::upstream::{read_queue_entries, workload_from_jobs};
use crate::upstream_log;

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
    /// Convert a GitLab jobs API export (JSON array of jobs, pages may be concatenated) or
    /// gitlab-runner logs (journalctl, syslog, docker logs; detected) to CSV
    Import {
        /// The export, e.g. from `curl .../api/v4/projects/ID/jobs?per_page=100&page=N`, or a
        /// gitlab-runner log (repeat for rotated logs)
        #[arg(value_name = "EXPORT.json|RUNNER.log", required = true)]
        export: Vec<PathBuf>,
        /// Write the CSV here instead of standard output
        #[arg(short = 'o', long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// For logs: the config.toml, to name each job's [[runners]] entry from its token
        /// (runners before 18.9 log only the token)
        #[arg(short = 'c', long = "config", value_name = "FILE")]
        config: Option<PathBuf>,
        /// For logs of runners before 16.10: a GitLab jobs export with the queue times
        #[arg(long, value_name = "EXPORT.json")]
        jobs_export: Option<PathBuf>,
    },
}

fn run_inner(args: &WorkloadArgs) -> anyhow::Result<()> {
    match &args.command {
        WorkloadCommand::Import {
            export,
            output,
            config,
            jobs_export,
        } => {
            if is_runner_log(export)? {
                return import_logs(
                    export,
                    output.as_deref(),
                    config.as_deref(),
                    jobs_export.as_deref(),
                );
            }
            let [export] = export.as_slice() else {
                anyhow::bail!("give one jobs export, or gitlab-runner logs (several allowed)");
            };
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

/// Whether the inputs are gitlab-runner logs (judged on the start of the first file).
fn is_runner_log(paths: &[PathBuf]) -> anyhow::Result<bool> {
    let Some(first) = paths.first() else {
        return Ok(false);
    };
    let name = first.display().to_string();
    if first.extension().is_some_and(|e| e == "gz") {
        return Ok(true);
    }
    let mut head = Vec::new();
    std::fs::File::open(first)
        .with_context(|| format!("cannot read {name}"))?
        .take(256 * 1024)
        .read_to_end(&mut head)
        .with_context(|| format!("cannot read {name}"))?;
    let text = String::from_utf8_lossy(&head);
    Ok(!looks_like_export(&text) && upstream_log::looks_like_runner_log(&text))
}

fn import_logs(
    paths: &[PathBuf],
    output: Option<&Path>,
    config: Option<&Path>,
    jobs_export: Option<&Path>,
) -> anyhow::Result<()> {
    let queue = match jobs_export {
        Some(p) => Some(read_queue_entries(p)?),
        None => None,
    };
    let config = match config {
        Some(p) => Some(load_config(Some(p))?.0),
        None => None,
    };
    let opts = upstream_log::ReadOptions::default();
    let paths = upstream_log::order_files(paths, opts);
    let (collected, stats) = upstream_log::collect(&paths, opts)?;
    let (workload, unplaced) = workload_from_jobs(&collected, config.as_ref(), queue.as_ref());
    let csv = workload.to_csv();
    match output {
        Some(path) => write_file(path, &csv)?,
        None => out!("{csv}"),
    }
    errln!(
        "drover: imported {} of {} job(s) from {} log line(s) (runner version {})",
        workload.jobs.len(),
        collected.jobs.len(),
        stats.lines,
        stats.versions.last().map_or("unknown", |v| v.as_str())
    );
    for (why, n) in &unplaced {
        errln!("drover: left out {n} job(s): {why}");
    }
    if stats.unknown_lines > 0 {
        errln!(
            "drover: {} line(s) not understood (kept going); most frequent: {:?}",
            stats.unknown_lines,
            stats
                .unknown_messages
                .iter()
                .max_by_key(|(_, n)| **n)
                .map(|(m, _)| m)
        );
    }
    Ok(())
}

/// Runs `drover workload`.
pub fn run(args: &WorkloadArgs) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}
