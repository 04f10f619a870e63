//! `drover exec-job`: runs one job payload (the JSON GitLab sends) on a Docker endpoint without
//! a GitLab, streaming the masked trace to stdout. Operators use it to replay exactly what
//! GitLab sent when a job misbehaves.
//!
//! Exit codes: 0 success, 1 job failure (reason and exit code printed on stderr), 2 system
//! failure or bad input. SIGINT (Ctrl-C) and SIGQUIT cancel gracefully (after_script still
//! runs); SIGTERM and SIGHUP abort; a second signal aborts. Every one ends in clean-up of the
//! job's containers and volumes and a non-zero exit (see `cli::signals`). Only the executor runs the job; this file parses, wires and reports.

use crate::cli::output::errln;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::cli::signals::{cancel_on_signals, Received, StopSignals};
use crate::config;
use crate::executor::{
    self, DockerEndpoint, JobControl, JobError, JobRequest, RunnerSettings, WriterSink,
};
use crate::job::JobPayload;

/// Arguments of `drover exec-job`.
#[derive(Debug, Args)]
pub struct ExecJobArgs {
    /// The job payload: the JSON body GitLab returned from POST /api/v4/jobs/request
    #[arg(long = "job", value_name = "PAYLOAD.json")]
    pub job: PathBuf,

    /// config.toml to take the runner settings from (default: built-in defaults)
    #[arg(
        short = 'c',
        long = "config",
        value_name = "CONFIG.toml",
        env = "CONFIG_FILE"
    )]
    pub config: Option<PathBuf>,

    /// Which [[runners]] entry to use, by name (default: the first)
    #[arg(long = "runner", value_name = "NAME", requires = "config")]
    pub runner: Option<String>,

    /// Docker endpoint: unix:///path, tcp://host:port (default: DOCKER_HOST, then the local socket)
    #[arg(long = "docker-host", value_name = "URL")]
    pub docker_host: Option<String>,

    /// Directory with ca.pem, cert.pem and key.pem; turns on TLS verification
    #[arg(long = "tls-cert-path", value_name = "DIR", requires = "docker_host")]
    pub tls_cert_path: Option<PathBuf>,
}

struct Prepared {
    /// The config's secrets (runner token, cache credentials), redacted from every log line
    /// for the whole run.
    _secrets: Option<crate::secrets::Registration>,
    payload: JobPayload,
    runner: RunnerSettings,
    endpoint: DockerEndpoint,
}

fn prepare(args: &ExecJobArgs) -> anyhow::Result<Prepared> {
    let text = crate::bounded::read_file_string(&args.job, crate::bounded::MAX_DATA_FILE)
        .with_context(|| format!("cannot read the job payload {}", args.job.display()))?;
    let payload =
        JobPayload::from_json(&text).with_context(|| format!("{}", args.job.display()))?;
    let mut config_endpoint = None;
    let mut secrets = None;
    let runner = match &args.config {
        None => RunnerSettings {
            name: "exec-job".into(),
            executor: "docker".into(),
            ..Default::default()
        },
        Some(path) => {
            let loaded = config::load_file(path)?;
            for w in &loaded.warnings {
                errln!("drover: warning: {w}");
            }
            super::logging::config_loaded(&loaded.config, &path.display().to_string());
            let runners = &loaded.config.runners;
            let entry = match &args.runner {
                Some(name) => runners.iter().find(|r| &r.name == name).with_context(|| {
                    let names: Vec<&str> = runners.iter().map(|r| r.name.as_str()).collect();
                    format!(
                        "no [[runners]] entry named {name:?} in {}; available: {}",
                        path.display(),
                        names.join(", ")
                    )
                })?,
                None => runners
                    .first()
                    .with_context(|| format!("{} has no [[runners]] entry", path.display()))?,
            };
            secrets = Some(crate::secrets::register(crate::secrets::of_runner_config(
                entry,
            )));
            let system_id = std::fs::read_to_string(path.with_file_name(".runner_system_id"))
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            // A plain docker runner's own [runners.docker] host applies unless --docker-host
            // is given (docker+machine runners get theirs from the machine).
            if args.docker_host.is_none() && entry.executor != "docker+machine" {
                config_endpoint = DockerEndpoint::configured(entry.docker.as_deref());
            }
            RunnerSettings::from_config(entry, &system_id)
        }
    };
    let endpoint = config_endpoint.unwrap_or_else(|| DockerEndpoint {
        host: args.docker_host.clone(),
        tls_verify: args.tls_cert_path.is_some(),
        tls_cert_path: args.tls_cert_path.clone(),
        ssh: None,
    });
    Ok(Prepared {
        _secrets: secrets,
        payload,
        runner,
        endpoint,
    })
}

/// Runs the command.
pub fn run(args: ExecJobArgs) -> ExitCode {
    let prepared = match prepare(&args) {
        Ok(p) => p,
        Err(e) => {
            errln!("drover: {e:#}");
            return ExitCode::from(2);
        }
    };
    // The job's secrets stay redacted until the final messages are out, not only while the
    // executor runs.
    let _job_secrets =
        crate::secrets::register(executor::job_secrets(&prepared.payload, &prepared.runner));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            errln!("drover: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(async move {
        let control = JobControl::default();
        let received = Received::default();
        let signals = match StopSignals::install() {
            Ok(s) => s,
            Err(e) => {
                errln!("drover: cannot catch stop signals: {e}");
                return ExitCode::from(2);
            }
        };
        let watcher = tokio::spawn(cancel_on_signals(
            signals,
            control.clone(),
            received.clone(),
        ));
        let mut sink = WriterSink(crate::cli::output::Stdout);
        let req = JobRequest {
            payload: &prepared.payload,
            runner: &prepared.runner,
            endpoint: &prepared.endpoint,
            machine_name: None,
            slot: Default::default(),
        };
        let supported = &prepared.payload.features.failure_reasons;
        let result = executor::run_job(req, &mut sink, control).await;
        watcher.abort();
        let code = match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(JobError::Failed(f)) => {
                let mapped = f.reason.for_gitlab(supported);
                let sent = if mapped == f.reason {
                    String::new()
                } else {
                    format!(", sent to GitLab as {mapped}")
                };
                errln!(
                    "drover: job failed: {} (failure reason {}{sent})",
                    f.message,
                    f.reason
                );
                ExitCode::from(1)
            }
            Err(e) => {
                errln!("drover: {e}");
                ExitCode::from(2)
            }
        };
        match received.first() {
            // A stopped job is never a success, even if the signal came as it finished.
            Some(s) => {
                errln!("drover: stopped by {}", s.name());
                if code == ExitCode::SUCCESS {
                    ExitCode::from(1)
                } else {
                    code
                }
            }
            None => code,
        }
    })
}
