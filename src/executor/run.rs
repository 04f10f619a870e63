//! One job, start to end: prepare (connect, images, volumes), the stages in upstream's order
//! with their containers and stop rules, the final trace line, and cleanup on every path.
//!
//! Driven by [`super::run_job`]. This is the only place that decides job flow; stage bodies
//! come from [`super::script`], containers from [`super::containers`], and stage execution from
//! [`super::stages`].

use std::time::Duration;

use tokio::time::Instant;

use crate::executor::build_settings::BuildSettings;
use crate::executor::connect::Engine;
use crate::executor::containers::{ContainerInputs, Containers, JobOrSystem, Role};
use crate::executor::error::{not_found, FailureReason, JobError, JobFailure, SystemError};
use crate::executor::paths::JobPaths;
use crate::executor::script::sources::{get_sources, SourcesInputs};
use crate::executor::script::variables::VarList;
use crate::executor::script::{artifacts, cache};
use crate::executor::script::{user, ScriptBody};
use crate::executor::stages::{run_stage, StageEnd, StopReason};
use crate::executor::trace::Trace;
use crate::executor::volumes::Volumes;
use crate::executor::{JobControl, JobRequest};

mod ownership;
mod prepare;

/// Cleanup gets its own budget, detached from the job's cancellation.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(300);

/// `now + d`, or a deadline 30 years away when that overflows: a payload or variable may ask
/// for any duration (`runner_info.timeout` near `i64::MAX`, `RUNNER_SCRIPT_TIMEOUT=9999999h`),
/// and no deadline may panic. Every deadline of a job is made here.
pub(crate) fn deadline_in(d: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);
    let now = Instant::now();
    now.checked_add(d.min(FAR)).unwrap_or(now)
}

/// Everything prepared for the stages.
struct Prepared {
    /// `[runners.docker]` as the job applies it (seccomp files inlined, options checked).
    docker_settings: crate::executor::settings::DockerSettings,
    engine: Engine,
    vars: VarList,
    paths: JobPaths,
    settings: BuildSettings,
    inputs: ContainerInputs,
    /// Volume roots whose permission fix runs at the top of `prepare_script`.
    permission_fix: Vec<String>,
    /// The distributed cache (presigned URLs), or the local archive only.
    cache_remote: crate::cache::CacheRemote,
}

/// The job's state, kept for cleanup.
pub(crate) struct JobRun<'r> {
    req: &'r JobRequest<'r>,
    control: &'r JobControl,
    deadline: Instant,
    timeout_secs: u64,
    engine: Option<Engine>,
    containers: Containers,
    volumes: Volumes,
    cancel_consumed: bool,
    started: Instant,
    /// The job's network; its per-build network is removed after the containers.
    network: Option<
        crate::executor::networks::NetworkManager<crate::executor::networks::DockerNetworks>,
    >,
    /// The phase under a time limit of its own (`prepare_timeout`, `get_sources_timeout`).
    phase: Option<Phase>,
    /// The services' logs followed into the job log (`CI_DEBUG_SERVICES`).
    service_logs: Option<ServiceLogs>,
}

/// A phase of the job with its own time limit.
struct Phase {
    /// `prepare`, `get sources`: named in the failure message as upstream names it.
    name: &'static str,
    limit: crate::config::GoDuration,
    deadline: Instant,
}

/// The services' log followers and the lines they send.
struct ServiceLogs {
    rx: tokio::sync::mpsc::Receiver<Vec<u8>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl JobRun<'_> {
    /// Writes the service log lines received so far into the job log.
    fn drain_service_logs(&mut self, trace: &mut Trace<'_>) {
        if let Some(logs) = self.service_logs.as_mut() {
            while let Ok(line) = logs.rx.try_recv() {
                trace.write(&line);
            }
        }
    }
}

impl<'r> JobRun<'r> {
    pub(crate) fn new(req: &'r JobRequest<'r>, control: &'r JobControl) -> Self {
        let timeout_secs = req.payload.timeout_secs();
        JobRun {
            req,
            control,
            deadline: deadline_in(Duration::from_secs(timeout_secs)),
            timeout_secs,
            engine: None,
            containers: Containers::default(),
            volumes: Volumes::default(),
            cancel_consumed: false,
            started: Instant::now(),
            network: None,
            phase: None,
            service_logs: None,
        }
    }

    /// Starts a phase limited by the runner's `key` setting (resolved against the job timeout,
    /// with upstream's warning in drover's log when the setting cannot be used).
    fn enter_phase(
        &mut self,
        name: &'static str,
        key: &str,
        configured: Option<crate::config::GoDuration>,
    ) {
        let resolved =
            crate::executor::stage_limits::phase_limit(key, configured, self.timeout_secs);
        if let Some(w) = &resolved.warning {
            tracing::warn!(job = self.req.payload.id, "{w}");
        }
        self.phase = Some(Phase {
            name,
            limit: resolved.limit,
            deadline: deadline_in(resolved.duration()),
        });
    }

    fn phase_deadline(&self) -> Option<Instant> {
        self.phase.as_ref().map(|p| p.deadline)
    }

    /// Runs the job, then cleans up; returns the outcome.
    pub(crate) async fn run(mut self, trace: &mut Trace<'_>) -> Result<(), JobError> {
        let outcome = self.execute(trace).await;
        self.cleanup(trace).await;
        outcome
    }

    async fn execute(&mut self, trace: &mut Trace<'_>) -> Result<(), JobError> {
        let executor = match self.req.runner.executor.as_str() {
            "" => "docker",
            e => e,
        };
        trace.section_start(
            "prepare_executor",
            &format!("Preparing the \"{executor}\" executor"),
        );
        // Preparation (pulls included) stops on abort, cancel, the job timeout or
        // `prepare_timeout`, which also covers prepare_script.
        self.enter_phase(
            "prepare",
            "prepare_timeout",
            self.req.runner.prepare_timeout,
        );
        let stop = stop_signal(
            self.control.clone(),
            self.deadline,
            self.phase_deadline(),
            None,
            false,
            false,
        );
        let prepared = tokio::select! {
            r = self.prepare(trace) => Prep::Done(Box::new(r)),
            reason = stop => Prep::Stopped(reason),
        };
        let prepared = match prepared {
            Prep::Done(r) => *r,
            Prep::Stopped(reason) => Err(JobOrSystem::Job(self.stop_failure(reason, None))),
        };
        trace.section_end("prepare_executor");
        let mut p = prepared.map_err(JobError::from)?;

        // prepare_script: a failure ends the job here. A failed deferred permission fix is the
        // system failure it would have been in its own container.
        let body = user::prepare_script(&p.paths, self.req.machine_name, &p.permission_fix);
        let outcome = self
            .stage(
                trace,
                &p,
                "prepare_script",
                "Preparing environment",
                Role::Helper,
                body,
                None,
                false,
            )
            .await?;
        if let StageOutcome::Failed(f) = &outcome {
            if !p.permission_fix.is_empty() && f.exit_code == Some(user::PERMISSION_FIX_FAILED) {
                return Err(SystemError::Engine(format!(
                    "setting permissions on the job's volumes ({}) failed in the helper container",
                    p.permission_fix.join(", ")
                ))
                .into());
            }
        }
        outcome.into_result()?;
        self.phase = None;

        // get_sources, with retries, all within `get_sources_timeout`; a failure skips the
        // user steps and after_script.
        self.enter_phase(
            "get sources",
            "get_sources_timeout",
            self.req.runner.get_sources_timeout,
        );
        let mut result: Result<(), JobError> = Ok(());
        let mut sources_ok = false;
        for attempt in 1..=p.settings.get_sources_attempts {
            if attempt > 1 {
                self.retry_backoff(attempt).await;
            }
            if attempt == 2 {
                let body = user::clear_worktree(&p.paths);
                let outcome = self
                    .stage(
                        trace,
                        &p,
                        "clear_worktree",
                        "Deleting all tracked and untracked files due to source fetch failure",
                        Role::Helper,
                        body,
                        None,
                        false,
                    )
                    .await?;
                if let StageOutcome::Stopped(f) = outcome {
                    return Err(f.into());
                }
            }
            let var = |k: &str| p.vars.value(k).unwrap_or_default();
            let (server_host, ssh_host, ssh_port, project_path) = (
                var("CI_SERVER_HOST"),
                var("CI_SERVER_SHELL_SSH_HOST"),
                var("CI_SERVER_SHELL_SSH_PORT"),
                var("CI_PROJECT_PATH"),
            );
            let auth = crate::executor::script::sources::GitAuth {
                clone_url: &self.req.runner.clone_url,
                credentials_url: &self.req.runner.url,
                repo_url: &self.req.payload.git_info.repo_url,
                token: &self.req.payload.token,
                force_https: p.settings.submodule_force_https,
                ssh_host: if ssh_host.is_empty() {
                    &server_host
                } else {
                    &ssh_host
                },
                ssh_port: &ssh_port,
                project_path: &project_path,
                tokenless: p.vars.flag("FF_GIT_URLS_WITHOUT_TOKENS"),
            };
            let body = get_sources(
                self.req.payload,
                &SourcesInputs {
                    vars: &p.vars,
                    paths: &p.paths,
                    settings: &p.settings,
                    pre_get_sources: self.req.runner.pre_get_sources_script.as_deref(),
                    post_get_sources: self.req.runner.post_get_sources_script.as_deref(),
                    user_agent: &crate::version::git_user_agent(),
                    clean_git_config: self.req.runner.clean_git_config,
                    auth: &auth,
                },
            );
            let outcome = self
                .stage(
                    trace,
                    &p,
                    "get_sources",
                    "Getting source from Git repository",
                    Role::Helper,
                    body,
                    None,
                    false,
                )
                .await?;
            match outcome {
                StageOutcome::Ok => {
                    // A retry that succeeds leaves no failure behind.
                    sources_ok = true;
                    result = Ok(());
                    break;
                }
                StageOutcome::Stopped(f) => return Err(f.into()),
                StageOutcome::Failed(f) => {
                    if attempt < p.settings.get_sources_attempts {
                        trace.warning(&format!("Retrying get_sources after: {}", f.message));
                    }
                    result = Err(f.into());
                }
            }
        }

        self.phase = None;

        // restore_cache: a failed stage (only an unknown policy fails it) skips the user steps
        // and after_script, as a failed get_sources does.
        let mut ready = sources_ok;
        if sources_ok {
            let body = cache::restore(&self.cache_inputs(&p));
            if let Some(f) = self
                .attempted_stage(
                    trace,
                    &p,
                    "restore_cache",
                    "Restoring cache",
                    body,
                    p.settings.restore_cache_attempts,
                )
                .await?
            {
                ready = false;
                result = Err(f.into());
            }
        }

        if ready {
            let body = artifacts::download(&self.artifact_inputs(&p));
            if let Some(f) = self
                .attempted_stage(
                    trace,
                    &p,
                    "download_artifacts",
                    "Downloading artifacts",
                    body,
                    p.settings.artifact_download_attempts,
                )
                .await?
            {
                ready = false;
                result = Err(f.into());
            }
        }

        let mut job_status = "success";
        if ready {
            // FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR: the checkout becomes the build image user's.
            self.fix_ownership(trace, &p).await?;
            // One `step_<name>` stage per step except after_script (normally just `script`),
            // all bounded together by RUNNER_SCRIPT_TIMEOUT.
            let script_deadline = p.settings.script_timeout.map(deadline_in);
            let steps: Vec<_> = user::script_steps(self.req.payload)
                .into_iter()
                .cloned()
                .collect();
            for step in steps {
                let body = user::step_script(
                    &p.vars,
                    &p.paths,
                    self.req.runner.pre_build_script.as_deref(),
                    &user::step_lines(&p.vars, &step),
                    self.req.runner.post_build_script.as_deref(),
                    self.script_sections(&p.vars),
                );
                let stage_name = format!("step_{}", step.name);
                let remaining =
                    script_deadline.map(|d| d.saturating_duration_since(Instant::now()));
                let outcome = self
                    .stage(
                        trace,
                        &p,
                        &stage_name,
                        &format!("Executing \"{stage_name}\" stage of the job script"),
                        Role::Build,
                        body,
                        remaining,
                        true,
                    )
                    .await?;
                match outcome {
                    StageOutcome::Ok => continue,
                    StageOutcome::Failed(f) => {
                        job_status = "failed";
                        result = Err(f.into());
                    }
                    StageOutcome::Stopped(f) => {
                        match f.reason {
                            FailureReason::JobCanceled if self.cancel_consumed => {
                                job_status = "canceled";
                                trace.error("script canceled externally (UI, API)");
                            }
                            FailureReason::JobExecutionTimeout if self.cancel_consumed => {
                                job_status = "timedout";
                            }
                            _ => return Err(f.into()),
                        }
                        result = Err(f.into());
                    }
                }
                break;
            }
            // From here on (after_script, cache, artifacts, clean-up) CI_JOB_STATUS is the
            // script's outcome; the runner's definition is replaced where it stands, so a
            // job's own CI_JOB_STATUS still wins, as upstream.
            if let Some(v) = p.vars.vars.iter_mut().find(|v| v.key == "CI_JOB_STATUS") {
                v.value = job_status.to_string();
            }
            self.after_script(trace, &p, &mut result).await?;
        }

        // archive_cache / archive_cache_on_failure (also after a failed get_sources).
        let succeeded = result.is_ok();
        let body = cache::archive(&self.cache_inputs(&p), succeeded);
        let (name, description) = if succeeded {
            ("archive_cache", "Saving cache for successful job")
        } else {
            ("archive_cache_on_failure", "Saving cache for failed job")
        };
        if let Some(f) = self
            .optional_stage(trace, &p, name, description, body)
            .await?
        {
            if result.is_ok() {
                result = Err(f.into());
            }
        }

        // upload_artifacts_on_success / _on_failure: a failed upload fails a job that had not
        // failed yet.
        let body = artifacts::upload(&self.artifact_inputs(&p), succeeded);
        let (name, description) = if succeeded {
            (
                "upload_artifacts_on_success",
                "Uploading artifacts for successful job",
            )
        } else {
            (
                "upload_artifacts_on_failure",
                "Uploading artifacts for failed job",
            )
        };
        if let Some(f) = self
            .optional_stage(trace, &p, name, description, body)
            .await?
        {
            if result.is_ok() {
                result = Err(f.into());
            }
        }

        // The job token is dropped for the host git fetched from (`clone_url` when set).
        let project_path = p.vars.value("CI_PROJECT_PATH").unwrap_or_default();
        let remote = crate::executor::script::sources::GitAuth {
            clone_url: &self.req.runner.clone_url,
            repo_url: &self.req.payload.git_info.repo_url,
            project_path: &project_path,
            ..Default::default()
        }
        .remote_url();
        let body = user::cleanup_file_variables(
            &p.vars,
            &p.paths,
            Some(remote.as_str()),
            crate::executor::script::sources::GitCleanup::new(
                &p.settings,
                self.req.runner.clean_git_config,
            ),
        );
        match self
            .stage(
                trace,
                &p,
                "cleanup_file_variables",
                "Cleaning up project directory and file based variables",
                Role::Helper,
                body,
                None,
                false,
            )
            .await?
        {
            StageOutcome::Stopped(f) => return Err(f.into()),
            StageOutcome::Ok | StageOutcome::Failed(_) => {}
        }
        result
    }

    async fn after_script(
        &mut self,
        trace: &mut Trace<'_>,
        p: &Prepared,
        result: &mut Result<(), JobError>,
    ) -> Result<(), JobError> {
        let Some(lines) = user::after_script_lines(self.req.payload) else {
            return Ok(());
        };
        let body = user::after_script(&p.vars, &p.paths, lines, self.script_sections(&p.vars));
        let outcome = self
            .stage(
                trace,
                p,
                "after_script",
                "Running after_script",
                Role::Build,
                body,
                Some(p.settings.after_script_timeout),
                false,
            )
            .await?;
        let failure = match outcome {
            StageOutcome::Ok => return Ok(()),
            StageOutcome::Stopped(f)
                if f.reason == FailureReason::JobCanceled || self.hard_stop() =>
            {
                return Err(f.into())
            }
            StageOutcome::Stopped(f) | StageOutcome::Failed(f) => f,
        };
        if p.settings.after_script_ignore_errors {
            trace.warning(&format!(
                "after_script failed, but job will continue unaffected: {}",
                failure.message
            ));
        } else if result.is_ok() {
            *result = Err(failure.into());
        }
        Ok(())
    }

    /// The cache stages' inputs: the local archive, plus presigned URLs when a distributed
    /// cache is configured.
    fn cache_inputs<'a>(&'a self, p: &'a Prepared) -> cache::CacheInputs<'a> {
        cache::CacheInputs {
            payload: self.req.payload,
            vars: &p.vars,
            paths: &p.paths,
            remote: &p.cache_remote,
            timeout_minutes: p
                .vars
                .value("CACHE_REQUEST_TIMEOUT")
                .and_then(|v| v.trim().parse().ok())
                .filter(|m| *m > 0)
                .unwrap_or(10),
        }
    }

    /// The artifact stages' inputs.
    fn artifact_inputs<'a>(&'a self, p: &'a Prepared) -> artifacts::ArtifactInputs<'a> {
        artifacts::ArtifactInputs {
            payload: self.req.payload,
            vars: &p.vars,
            paths: &p.paths,
            url: &self.req.runner.url,
        }
    }

    /// Runs a helper-container stage whose generator may have nothing to do (`None`: skipped
    /// silently). Returns the failure of a stage that failed; a stopped stage ends the job.
    /// Waits before attempt `attempt` (≥ 2) of a retried stage: 5 s doubling, at most 5 min,
    /// cut short by a stop or the job's deadline.
    async fn retry_backoff(&self, attempt: u32) {
        let backoff = Duration::from_secs(5u64.saturating_mul(1 << (attempt - 2).min(6)))
            .min(Duration::from_secs(300));
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = self.control.abort.cancelled() => {}
            _ = self.control.cancel.cancelled() => {}
            _ = tokio::time::sleep_until(self.deadline) => {}
        }
    }

    /// [`Self::optional_stage`] up to `attempts` times (`RESTORE_CACHE_ATTEMPTS`,
    /// `ARTIFACT_DOWNLOAD_ATTEMPTS`), with the same backoff as `get_sources`.
    async fn attempted_stage(
        &mut self,
        trace: &mut Trace<'_>,
        p: &Prepared,
        name: &str,
        description: &str,
        body: Option<ScriptBody>,
        attempts: u32,
    ) -> Result<Option<JobFailure>, JobError> {
        let mut last = None;
        for attempt in 1..=attempts.max(1) {
            if attempt > 1 {
                self.retry_backoff(attempt).await;
                if self.hard_stop() || self.control.cancel.is_cancelled() {
                    break;
                }
            }
            match self
                .optional_stage(trace, p, name, description, body.clone())
                .await?
            {
                None => return Ok(None),
                Some(f) => {
                    if attempt < attempts {
                        trace.warning(&format!("Retrying {name} after: {}", f.message));
                    }
                    last = Some(f);
                }
            }
        }
        Ok(last)
    }

    async fn optional_stage(
        &mut self,
        trace: &mut Trace<'_>,
        p: &Prepared,
        name: &str,
        description: &str,
        body: Option<ScriptBody>,
    ) -> Result<Option<JobFailure>, JobError> {
        let Some(body) = body else {
            return Ok(None);
        };
        match self
            .stage(trace, p, name, description, Role::Helper, body, None, false)
            .await?
        {
            StageOutcome::Ok => Ok(None),
            StageOutcome::Failed(f) => Ok(Some(f)),
            StageOutcome::Stopped(f) => Err(f.into()),
        }
    }

    /// Logs how far into the job a step is (`RUST_LOG=drover=debug`).
    /// Whether multi-line user commands get their own collapsed sections
    /// (`FF_SCRIPT_SECTIONS` with `features.trace_sections`, as upstream).
    fn script_sections(&self, vars: &VarList) -> bool {
        user::script_sections(self.req.payload, vars)
    }

    fn mark(&self, what: &str) {
        tracing::debug!(
            job = self.req.payload.id,
            ms = self.started.elapsed().as_millis() as u64,
            "{what}"
        );
    }

    fn hard_stop(&self) -> bool {
        self.control.abort.is_cancelled() || Instant::now() >= self.deadline
    }

    /// Runs one stage in its section and classifies the result.
    #[allow(clippy::too_many_arguments)]
    async fn stage(
        &mut self,
        trace: &mut Trace<'_>,
        p: &Prepared,
        name: &str,
        description: &str,
        role: Role,
        body: ScriptBody,
        stage_timeout: Option<Duration>,
        user_script: bool,
    ) -> Result<StageOutcome, JobError> {
        let docker = p.engine.docker.clone();
        // Nothing more runs once the job is aborted or out of time.
        if self.control.abort.is_cancelled() {
            return Ok(StageOutcome::Stopped(
                self.stop_failure(StopReason::Aborted, None),
            ));
        }
        if Instant::now() >= self.deadline {
            return Ok(StageOutcome::Stopped(
                self.stop_failure(StopReason::JobTimeout, None),
            ));
        }
        if self.phase_deadline().is_some_and(|d| Instant::now() >= d) {
            return Ok(StageOutcome::Stopped(
                self.stop_failure(StopReason::PhaseTimeout, None),
            ));
        }
        self.drain_service_logs(trace);
        trace.section_start(name, description);
        let script = body.finish(p.settings.debug_trace && !self.req.runner.debug_trace_disabled);
        // A container that vanished (removed from outside) is recreated and the stage run
        // again, up to EXECUTOR_JOB_SECTION_ATTEMPTS times in all.
        let mut attempt = 1;
        let result = loop {
            let result = async {
                let id = self
                    .containers
                    .get(&docker, role, &p.inputs, &p.docker_settings)
                    .await?;
                let stop = stop_signal(
                    self.control.clone(),
                    self.deadline,
                    self.phase_deadline(),
                    stage_timeout,
                    user_script,
                    self.cancel_consumed,
                );
                let side = self.service_logs.as_mut().map(|l| &mut l.rx);
                let end = run_stage(
                    &docker,
                    &id,
                    &script,
                    role == Role::Build,
                    trace,
                    side,
                    stop,
                )
                .await?;
                Ok::<_, JobOrSystem>(end)
            }
            .await;
            match result {
                Err(JobOrSystem::System(e @ SystemError::ContainerVanished { .. }))
                    if attempt < p.settings.section_attempts =>
                {
                    attempt += 1;
                    self.containers.forget(role);
                    trace.warning(&format!(
                        "{e}; running the {name} stage again (attempt {attempt} of {})",
                        p.settings.section_attempts
                    ));
                }
                result => break result,
            }
        };
        let outcome = match result {
            Ok(StageEnd::Exited(0)) => StageOutcome::Ok,
            Ok(StageEnd::Exited(code)) => {
                StageOutcome::Failed(JobFailure::script(i32::try_from(code).unwrap_or(i32::MAX)))
            }
            Ok(StageEnd::Stopped(reason)) => {
                self.containers.discard(&docker, role).await;
                if user_script && matches!(reason, StopReason::Canceled | StopReason::StageTimeout)
                {
                    self.cancel_consumed = true;
                }
                StageOutcome::Stopped(self.stop_failure(reason, stage_timeout))
            }
            Err(JobOrSystem::Job(f)) => StageOutcome::Failed(f),
            Err(JobOrSystem::System(e)) => {
                trace.section_end(name);
                return Err(e.into());
            }
        };
        self.drain_service_logs(trace);
        trace.section_end(name);
        self.mark(&format!("{name}: done"));
        Ok(outcome)
    }

    fn stop_failure(&self, reason: StopReason, stage_timeout: Option<Duration>) -> JobFailure {
        match reason {
            StopReason::Aborted | StopReason::Canceled => {
                JobFailure::new(FailureReason::JobCanceled, "canceled")
            }
            StopReason::JobTimeout => JobFailure::new(
                FailureReason::JobExecutionTimeout,
                format!(
                    "execution took longer than {}",
                    crate::executor::labels::go_duration(self.timeout_secs)
                ),
            ),
            StopReason::PhaseTimeout => JobFailure::new(
                FailureReason::JobExecutionTimeout,
                match &self.phase {
                    Some(p) => format!("{} timeout: exceeded timeout of {}", p.name, p.limit),
                    None => "stage timeout".to_string(),
                },
            ),
            StopReason::StageTimeout => JobFailure::new(
                FailureReason::JobExecutionTimeout,
                format!(
                    "script timeout: execution took longer than {}",
                    crate::executor::labels::go_duration(
                        stage_timeout.map(|d| d.as_secs()).unwrap_or(0)
                    )
                ),
            ),
        }
    }

    async fn cleanup(&mut self, trace: &mut Trace<'_>) {
        let Some(engine) = self.engine.clone() else {
            return;
        };
        let docker = engine.docker;
        self.drain_service_logs(trace);
        if let Some(logs) = self.service_logs.take() {
            for t in logs.tasks {
                t.abort();
            }
        }
        let work = async {
            let keep = self.req.runner.docker.volume_keep;
            let mut problems = self.containers.remove_all(&docker, keep).await;
            let init: Vec<String> = match self.volumes.init_containers.lock() {
                Ok(mut v) => std::mem::take(&mut *v),
                Err(p) => std::mem::take(&mut *p.into_inner()),
            };
            for id in init {
                let options = bollard::query_parameters::RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                };
                match docker.remove_container(&id, Some(options)).await {
                    Ok(()) => {}
                    Err(e) if not_found(&e) => {}
                    Err(e) => problems.push(format!("removing container {id}: {e}")),
                }
            }
            for v in std::mem::take(&mut self.volumes.temporary) {
                let options = bollard::query_parameters::RemoveVolumeOptions { force: true };
                match docker.remove_volume(&v, Some(options)).await {
                    Ok(()) => {}
                    Err(e) if not_found(&e) => {}
                    Err(e) => problems.push(format!("removing volume {v}: {e}")),
                }
            }
            if let Some(mut network) = self.network.take() {
                problems.extend(network.teardown().await);
            }
            problems
        };
        match tokio::time::timeout(CLEANUP_TIMEOUT, work).await {
            Ok(problems) => {
                for p in problems {
                    tracing::warn!("cleanup: {p}");
                }
            }
            Err(_) => tracing::warn!("cleanup did not finish within {:?}", CLEANUP_TIMEOUT),
        }
        let _ = trace;
    }
}

/// How preparation ended.
enum Prep {
    Done(Box<Result<Prepared, JobOrSystem>>),
    Stopped(StopReason),
}

/// How a stage ended, for the flow above.
enum StageOutcome {
    Ok,
    Failed(JobFailure),
    Stopped(JobFailure),
}

impl StageOutcome {
    fn into_result(self) -> Result<(), JobError> {
        match self {
            StageOutcome::Ok => Ok(()),
            StageOutcome::Failed(f) | StageOutcome::Stopped(f) => Err(f.into()),
        }
    }
}

/// The stop signal of one stage: abort, the job deadline, the stage timeout, and the graceful
/// cancel (for the user script it stops only the script; elsewhere, before it was consumed,
/// it cancels the job).
async fn stop_signal(
    control: JobControl,
    deadline: Instant,
    phase_deadline: Option<Instant>,
    stage_timeout: Option<Duration>,
    user_script: bool,
    cancel_consumed: bool,
) -> StopReason {
    let stage_deadline = stage_timeout.map(deadline_in);
    let phase = async {
        match phase_deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending::<()>().await,
        }
    };
    let graceful = async {
        if cancel_consumed {
            std::future::pending::<()>().await;
        }
        control.cancel.cancelled().await;
    };
    let stage = async {
        match stage_deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = control.abort.cancelled() => StopReason::Aborted,
        _ = tokio::time::sleep_until(deadline) => StopReason::JobTimeout,
        _ = phase => StopReason::PhaseTimeout,
        _ = stage => StopReason::StageTimeout,
        _ = graceful => if user_script { StopReason::Canceled } else { StopReason::Aborted },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::{DockerEndpoint, RunnerSettings};
    use crate::job::JobPayload;

    /// Payload durations near the integer limits (the job timeout, and through variables the
    /// script and stage timeouts) make deadlines far in the future, never an overflow panic.
    #[tokio::test]
    async fn huge_payload_durations_make_far_deadlines() {
        for timeout in [i64::MAX, i64::MAX - 1, u64::MAX as i64 / 2, i64::MIN, 0] {
            let payload = JobPayload::from_json(&format!(
                r#"{{"id": 1, "token": "t", "runner_info": {{"timeout": {timeout}}}}}"#
            ))
            .unwrap();
            let runner = RunnerSettings::default();
            let endpoint = DockerEndpoint::default();
            let req = JobRequest {
                payload: &payload,
                runner: &runner,
                endpoint: &endpoint,
                machine_name: None,
                slot: Default::default(),
            };
            let control = JobControl::default();
            let run = JobRun::new(&req, &control);
            assert!(run.deadline > Instant::now(), "{timeout}");
        }
        let far = deadline_in(Duration::MAX);
        assert!(far > Instant::now() + Duration::from_secs(86_400 * 365));
        // A select on such deadlines still answers the other branches at once.
        let control = JobControl::default();
        control.abort.cancel();
        let reason = stop_signal(control, far, None, Some(Duration::MAX), true, false).await;
        assert!(matches!(reason, StopReason::Aborted));
    }
}
