//! In-machine execution: runs one GitLab job on a Docker Engine as upstream's Docker executor
//! does (`docker+machine` without the machine part).
//!
//! The library API is narrow at both ends: a [`JobRequest`] (the job payload GitLab sent, the
//! runner's settings and the Docker endpoint a provider returned) and a [`JobControl`]
//! (graceful cancel and abort tokens; the job timeout comes from the payload) go in; the job
//! log streams into a [`trace::TraceSink`], masked and size-limited, and a typed result comes
//! out ([`error::JobError`] separates job failures from system failures).
//!
//! The executor never talks to GitLab: the manager (or `drover exec-job`) feeds it payloads and
//! forwards the trace and the result. Flow decisions live in `run`; the other modules are
//! the pieces (connect, images, volumes, labels, containers, stage execution, scripts, trace).
//! Services (`services`) start during preparation; cache and artifacts slot in as further
//! stages and helper commands.

pub mod build_settings;
pub mod connect;
pub mod containers;
pub mod docker_options;
pub mod error;
pub mod glob;
pub mod image;
pub mod labels;
pub mod leftovers;
pub mod networks;
pub mod paths;
pub mod plan;
mod run;
pub mod script;
pub mod services;
pub mod settings;
pub mod ssh;
pub mod stage_limits;
pub mod stages;
pub mod trace;
pub mod volumes;

use tokio_util::sync::CancellationToken;

pub use connect::DockerEndpoint;
pub use error::{FailureReason, JobError, JobFailure, SystemError};
pub use paths::Slot;
pub use settings::{DockerSettings, RunnerSettings};
pub use trace::{MemorySink, TraceSink, WriterSink};

use crate::job::JobPayload;

/// One job to run.
#[derive(Debug, Clone, Copy)]
pub struct JobRequest<'a> {
    /// The job payload as GitLab sent it.
    pub payload: &'a JobPayload,
    /// The runner's settings.
    pub runner: &'a RunnerSettings,
    /// The machine's Docker Engine.
    pub endpoint: &'a DockerEndpoint,
    /// The machine's name (shown as "Running on <container> via <machine>...").
    pub machine_name: Option<&'a str>,
    /// The job's slot among the runner's running jobs (the manager's count).
    pub slot: Slot,
}

/// Cancellation of a running job.
#[derive(Debug, Clone, Default)]
pub struct JobControl {
    /// Graceful cancel (GitLab's `canceling`): stops the user script; after_script still runs.
    pub cancel: CancellationToken,
    /// Abort (`canceled`/`failed`, a second Ctrl-C): stops everything at once; cleanup runs.
    pub abort: CancellationToken,
}

/// Every secret a job brings: the job token, masked variable values, registry passwords (the
/// payload's `credentials`, `DOCKER_AUTH_CONFIG`) and the runner's token. [`run_job`]
/// registers them with [`crate::secrets`] while it runs, so they never reach drover's own log.
pub fn job_secrets(payload: &JobPayload, runner: &RunnerSettings) -> Vec<String> {
    let mut out = vec![payload.token.clone(), runner.token.clone()];
    for v in &payload.variables {
        if v.masked {
            out.push(v.value.clone());
        }
        if v.key == "DOCKER_AUTH_CONFIG" {
            out.extend(image::auth_config_secrets(&v.value));
        }
    }
    out.extend(payload.credentials.iter().map(|c| c.password.clone()));
    out.retain(|s| !s.is_empty());
    out
}

/// The phrases masked in the job log, as upstream: the values of the masked variables of the
/// job's final, expanded variable list (`s3cr3t-$CI_JOB_ID` is masked as it is printed), and
/// the job token. When the job cannot be planned (it then fails at preparation) the payload's
/// raw values are used.
pub fn mask_phrases(payload: &JobPayload, runner: &RunnerSettings, slot: Slot) -> Vec<String> {
    let mut out: Vec<String> = match plan::plan_job(payload, runner, slot) {
        Ok(plan) => plan
            .vars
            .vars
            .into_iter()
            .filter(|v| v.masked && !v.value.is_empty())
            .map(|v| v.value)
            .collect(),
        Err(_) => payload
            .variables
            .iter()
            .filter(|v| v.masked && !v.value.is_empty())
            .map(|v| v.value.clone())
            .collect(),
    };
    if !payload.token.is_empty() {
        out.push(payload.token.clone());
    }
    out
}

/// Runs one job to its end, streaming the masked trace into `sink`, and cleans up every
/// container and temporary volume it made. The trace ends with "Job succeeded" or
/// "ERROR: Job failed: …".
pub async fn run_job(
    req: JobRequest<'_>,
    sink: &mut dyn TraceSink,
    control: JobControl,
) -> Result<(), JobError> {
    let payload = req.payload;
    let _secrets = crate::secrets::register(job_secrets(payload, req.runner));
    let phrases = mask_phrases(payload, req.runner, req.slot);
    let flag = |name: &str, default: bool| {
        req.runner
            .feature_flags
            .get(name)
            .copied()
            .or_else(|| {
                payload
                    .variable(name)
                    .and_then(script::variables::parse_bool)
            })
            .unwrap_or(default)
    };
    let masker = trace::mask::Masker::with_default_tokens(
        &phrases,
        &payload.features.token_mask_prefixes,
        flag("FF_MASK_ALL_DEFAULT_TOKENS", true),
    );
    let mut trace = trace::Trace::new(
        sink,
        masker,
        req.runner.output_limit_bytes(),
        payload.features.trace_sections,
    )
    .with_timestamps(
        flag("FF_TIMESTAMPS", true),
        trace::timestamp::system_clock(),
    );
    let short = crate::engine::naming::short_token(&req.runner.token);
    trace.info(&format!(
        "Running with drover {} (gitlab-runner {} compatible)",
        script::variables::RUNNER_VERSION,
        image::PINNED_HELPER_VERSION
    ));
    let system_id = if req.runner.system_id.is_empty() {
        String::new()
    } else {
        format!(", system ID: {}", req.runner.system_id)
    };
    trace.info(&format!("  on {} {short}{system_id}", req.runner.name));
    let result = run::JobRun::new(&req, &control).run(&mut trace).await;
    match &result {
        Ok(()) => trace.result(true, "Job succeeded"),
        // A failure GitLab is told is the system's is worded so, as upstream words it.
        Err(JobError::Failed(f)) if f.reason == FailureReason::RunnerSystemFailure => trace.result(
            false,
            &format!("Job failed (system failure): {}", f.message),
        ),
        Err(JobError::Failed(f)) => trace.result(false, &format!("Job failed: {}", f.message)),
        Err(JobError::System(e)) => {
            trace.result(false, &format!("Job failed (system failure): {e}"))
        }
    }
    trace.finish();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Masked values are matched as the job prints them: expanded and trimmed (upstream masks
    /// its expanded variable list).
    #[test]
    fn masked_values_are_expanded() {
        let payload = JobPayload::from_json(
            r#"{"id": 42, "token": "job-token-value", "variables": [
                {"key": "CI_JOB_ID", "value": "42"},
                {"key": "SECRET", "value": "s3cr3t-$CI_JOB_ID-tail", "masked": true},
                {"key": "RAW", "value": "raw-$CI_JOB_ID", "masked": true, "raw": true}
            ]}"#,
        )
        .expect("a valid payload");
        let mut runner = RunnerSettings::default();
        runner.docker.image = "alpine:3".into();
        let phrases = mask_phrases(&payload, &runner, Slot::default());
        assert!(phrases.iter().any(|p| p == "s3cr3t-42-tail"), "{phrases:?}");
        assert!(phrases.iter().any(|p| p == "raw-$CI_JOB_ID"), "{phrases:?}");
        assert!(
            phrases.iter().any(|p| p == "job-token-value"),
            "{phrases:?}"
        );
    }
}
