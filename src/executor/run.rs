//! One job, start to end: prepare (connect, images, volumes), the stages in upstream's order
//! with their containers and stop rules, the final trace line, and cleanup on every path.
//!
//! Driven by [`super::run_job`]. This is the only place that decides job flow; stage bodies
//! come from [`super::script`], containers from [`super::containers`], and stage execution from
//! [`super::stages`].

use std::time::Duration;

use tokio::time::Instant;

use crate::executor::build_settings::{BuildSettings, GitStrategy};
use crate::executor::connect::{self, Engine};
use crate::executor::containers::{build_user, ContainerInputs, Containers, JobOrSystem, Role};
use crate::executor::error::{FailureReason, JobError, JobFailure, SystemError};
use crate::executor::image::{self, ImageError, Puller};
use crate::executor::labels::LabelFacts;
use crate::executor::paths::{self, JobPaths, PathInputs};
use crate::executor::script::sources::{get_sources, SourcesInputs};
use crate::executor::script::variables::{job_variables, VarInputs, VarList};
use crate::executor::script::{detect_shell_command, user, ScriptBody};
use crate::executor::stages::{run_stage, StageEnd, StopReason};
use crate::executor::trace::Trace;
use crate::executor::volumes::{self, Volumes};
use crate::executor::{JobControl, JobRequest};

/// Cleanup gets its own budget, detached from the job's cancellation.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(300);

/// Everything prepared for the stages.
struct Prepared {
    engine: Engine,
    vars: VarList,
    paths: JobPaths,
    settings: BuildSettings,
    inputs: ContainerInputs,
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
}

fn map_image_error(e: ImageError) -> JobOrSystem {
    match e {
        ImageError::Job(f) => JobOrSystem::Job(f),
        ImageError::System(s) => JobOrSystem::System(s),
    }
}

impl<'r> JobRun<'r> {
    pub(crate) fn new(req: &'r JobRequest<'r>, control: &'r JobControl) -> Self {
        let timeout_secs = req.payload.timeout_secs();
        JobRun {
            req,
            control,
            deadline: Instant::now() + Duration::from_secs(timeout_secs),
            timeout_secs,
            engine: None,
            containers: Containers::default(),
            volumes: Volumes::default(),
            cancel_consumed: false,
            started: Instant::now(),
        }
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
        // Preparation (pulls included) stops on abort, cancel or the job timeout too.
        let stop = stop_signal(self.control.clone(), self.deadline, None, false, false);
        let prepared = tokio::select! {
            r = self.prepare(trace) => Prep::Done(Box::new(r)),
            reason = stop => Prep::Stopped(reason),
        };
        let prepared = match prepared {
            Prep::Done(r) => *r,
            Prep::Stopped(reason) => Err(JobOrSystem::Job(self.stop_failure(reason, None))),
        };
        trace.section_end("prepare_executor");
        let p = prepared.map_err(JobError::from)?;

        // prepare_script: a failure ends the job here.
        let body = user::prepare_script(&p.paths, self.req.machine_name);
        self.stage(
            trace,
            &p,
            "prepare_script",
            "Preparing environment",
            Role::Helper,
            body,
            None,
            false,
        )
        .await?
        .into_result()?;

        // get_sources, with retries; a failure skips the user steps and after_script.
        let mut result: Result<(), JobError> = Ok(());
        let mut sources_ok = false;
        for attempt in 1..=p.settings.get_sources_attempts {
            if attempt > 1 {
                // Exponential backoff (5 s doubling, at most 5 min), cut short by a stop.
                let backoff = Duration::from_secs(5u64.saturating_mul(1 << (attempt - 2).min(6)))
                    .min(Duration::from_secs(300));
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = self.control.abort.cancelled() => {}
                    _ = self.control.cancel.cancelled() => {}
                    _ = tokio::time::sleep_until(self.deadline) => {}
                }
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
            let body = get_sources(
                self.req.payload,
                &SourcesInputs {
                    vars: &p.vars,
                    paths: &p.paths,
                    settings: &p.settings,
                    pre_get_sources: self.req.runner.pre_get_sources_script.as_deref(),
                    post_get_sources: self.req.runner.post_get_sources_script.as_deref(),
                    user_agent: &format!(
                        "drover {}",
                        crate::executor::script::variables::RUNNER_VERSION
                    ),
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
                    sources_ok = true;
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

        let mut job_status = "success";
        if sources_ok {
            // One `step_<name>` stage per step except after_script (normally just `script`),
            // all bounded together by RUNNER_SCRIPT_TIMEOUT.
            let script_deadline = p.settings.script_timeout.map(|t| Instant::now() + t);
            let steps: Vec<_> = self
                .req
                .payload
                .steps
                .iter()
                .filter(|s| s.name != "after_script" && !s.name.is_empty())
                .cloned()
                .collect();
            for step in steps {
                let body = user::step_script(
                    &p.vars,
                    &p.paths,
                    self.req.runner.pre_build_script.as_deref(),
                    &step.script,
                    self.req.runner.post_build_script.as_deref(),
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
            self.after_script(trace, &p, job_status, &mut result)
                .await?;
        }

        let body = user::cleanup_file_variables(
            &p.vars,
            &p.paths,
            paths::url_base(&self.req.payload.git_info.repo_url).as_deref(),
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
        job_status: &str,
        result: &mut Result<(), JobError>,
    ) -> Result<(), JobError> {
        let Some(step) = self
            .req
            .payload
            .steps
            .iter()
            .find(|s| s.name == "after_script")
        else {
            return Ok(());
        };
        if step.script.iter().all(|l| l.trim().is_empty()) {
            return Ok(());
        }
        let mut vars = p.vars.clone();
        vars.vars.push(crate::executor::script::variables::Var {
            key: "CI_JOB_STATUS".into(),
            value: job_status.into(),
            ..Default::default()
        });
        let body = user::after_script(&vars, &p.paths, &step.script);
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

    /// Logs how far into the job a step is (`RUST_LOG=drover=debug`).
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

    async fn prepare(&mut self, trace: &mut Trace<'_>) -> Result<Prepared, JobOrSystem> {
        let req = self.req;
        let payload = req.payload;
        let runner = req.runner;
        let ds = &runner.docker;
        if let Some(image) = &payload.image {
            let other: Vec<&String> = image
                .executor_opts
                .other
                .keys()
                .chain(image.executor_opts.docker.other.keys())
                .collect();
            if !other.is_empty() {
                let keys: Vec<&str> = other.iter().map(|k| k.as_str()).collect();
                return Err(JobFailure {
                    reason: FailureReason::RunnerSystemFailure,
                    exit_code: Some(3),
                    message: format!(
                        "unsupported executor_opts keys for the docker executor: {}",
                        keys.join(", ")
                    ),
                }
                .into());
            }
        }
        let short = paths::short_token(&runner.token);
        // Variables are needed to find the paths and the paths to finish the variables: a
        // first pass with the default project dir reads the job-controlled settings.
        let default_paths = JobPaths::new(&PathInputs {
            root_dir: runner.builds_dir(),
            cache_root: runner.cache_root(),
            repo_url: &payload.git_info.repo_url,
            project_id: payload.job_info.project_id,
            short_token: &short,
            ..Default::default()
        })
        .map_err(|e| JobFailure::new(FailureReason::RunnerConfigurationError, e.to_string()))?;
        let job_image_raw = payload
            .image
            .as_ref()
            .map(|i| i.name.as_str())
            .filter(|n| !n.is_empty());
        let first = job_variables(
            payload,
            runner,
            &default_paths,
            &VarInputs {
                job_image: job_image_raw,
                short_token: &short,
                network_name: None,
            },
        )
        .expanded();
        let (settings, warnings) = BuildSettings::from_variables(&first, payload.allow_git_fetch);
        for w in &warnings {
            trace.warning(w);
        }
        let expanded_volumes: Vec<String> = ds.volumes.iter().map(|v| first.expand(v)).collect();
        let shared = volumes::builds_dir_host_mounted(&expanded_volumes, runner.builds_dir());
        let clone_path = if runner.custom_build_dir_enabled.unwrap_or(true) {
            settings.clone_path.as_deref()
        } else {
            None
        };
        let paths = JobPaths::new(&PathInputs {
            root_dir: runner.builds_dir(),
            cache_root: runner.cache_root(),
            repo_url: &payload.git_info.repo_url,
            project_id: payload.job_info.project_id,
            short_token: &short,
            shared_builds_dir: shared,
            empty_strategy: settings.git_strategy == GitStrategy::Empty,
            clone_path,
        })
        .map_err(|e| JobFailure::new(FailureReason::RunnerConfigurationError, e.to_string()))?;
        let job_image = job_image_raw.map(|n| first.expand(n));
        let vars = job_variables(
            payload,
            runner,
            &paths,
            &VarInputs {
                job_image: job_image.as_deref(),
                short_token: &short,
                network_name: None,
            },
        )
        .expanded();

        let image_name = image::resolve_job_image(
            job_image.as_deref(),
            &first.expand(&ds.image),
            &ds.allowed_images,
        )?;
        trace.info(&format!(
            "Using Docker executor with image {image_name} ..."
        ));

        let engine = self.connect(trace).await?;
        self.mark("connected");
        let docker = engine.docker.clone();
        let mut puller = Puller::new(&docker);
        let auth_configs = docker_auth_configs(&vars);

        // Helper image: helper_image with the config policies, else the pinned upstream one.
        let config_policies =
            image::effective_pull_policies(&[], &ds.pull_policy, &ds.allowed_pull_policies)?;
        let helper_name = match ds
            .helper_image
            .as_deref()
            .map(|h| vars.expand(h))
            .filter(|h| !h.is_empty())
        {
            Some(h) => h,
            None => {
                image::default_helper_image(&engine.architecture, ds.helper_image_flavor.as_deref())
            }
        };
        let helper_policies = if ds.helper_image.is_some() {
            config_policies.clone()
        } else {
            vec![image::PullPolicy::IfNotPresent]
        };
        let helper_creds =
            image::credentials_for(&helper_name, &auth_configs, &payload.credentials);
        let helper = puller
            .get(&helper_name, &helper_policies, helper_creds, None, trace)
            .await
            .map_err(map_image_error)?;

        self.mark("helper image ready");
        // Volumes.
        let random_name = paths::random_name(&paths::project_unique_name(
            &short,
            payload.job_info.project_id,
        ));
        let real_unique = paths::project_real_unique_name(
            &runner.token,
            &runner.system_id,
            payload.job_info.project_id,
        );
        let protected = payload
            .git_info
            .protected
            .unwrap_or_else(|| vars.bool("CI_COMMIT_REF_PROTECTED").unwrap_or(false))
            || payload
                .cache
                .iter()
                .any(|c| c.key.ends_with("-protected") && !c.key.ends_with("-non_protected"));
        let plan = volumes::plan(&volumes::PlanInputs {
            volumes: &expanded_volumes,
            build_dir: &paths.build_dir,
            root_dir: &paths.root_dir,
            random_name: &random_name,
            real_unique_name: &real_unique,
            disable_cache: ds.disable_cache,
            host_cache_dir: ds.cache_dir.as_deref(),
            protected,
            reusable_builds: settings.git_strategy == GitStrategy::Fetch,
        })?;
        let facts = self.label_facts(&short, &vars);
        self.volumes
            .create(
                &docker,
                &plan,
                &facts,
                protected,
                ds.volume_driver.as_deref(),
                &helper.id,
            )
            .await?;

        self.mark("volumes ready");
        // The job image.
        let image_opts = payload.image.as_ref();
        let requested: &[String] = image_opts
            .map(|i| i.pull_policy.as_slice())
            .unwrap_or_default();
        let policies =
            image::effective_pull_policies(requested, &ds.pull_policy, &ds.allowed_pull_policies)?;
        trace.info(&format!(
            "Using effective pull policy of [{}] for container {image_name}",
            policies
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ));
        let platform = image_opts
            .map(|i| i.executor_opts.docker.platform.clone())
            .filter(|p| !p.is_empty());
        let creds = image::credentials_for(&image_name, &auth_configs, &payload.credentials);
        let build_image = puller
            .get(&image_name, &policies, creds, platform.as_deref(), trace)
            .await
            .map_err(map_image_error)?;

        let image_user = image_opts
            .map(|i| i.executor_opts.docker.user.as_str())
            .unwrap_or_default();
        let mut labels = facts.labels("", &[]);
        labels.retain(|k, _| !k.ends_with(".type"));
        for (k, v) in &ds.container_labels {
            labels.insert(k.clone(), vars.expand(v));
        }
        let inputs = ContainerInputs {
            random_name,
            hostname: ds
                .hostname
                .clone()
                .unwrap_or_else(|| paths::project_unique_name(&short, payload.job_info.project_id)),
            env: vars.env(),
            binds: plan.binds(),
            labels,
            helper_image: helper.id.clone(),
            build_image: build_image.reference.clone(),
            build_image_name: image_name.clone(),
            build_entrypoint: image_opts
                .and_then(|i| i.entrypoint.clone())
                .filter(|e| !e.is_empty()),
            build_user: build_user(ds, image_user)?,
            build_platform: platform,
            build_cmd: detect_shell_command(),
        };
        Ok(Prepared {
            engine,
            vars,
            paths,
            settings,
            inputs,
        })
    }

    fn label_facts(&self, short: &str, vars: &VarList) -> LabelFacts {
        let payload = self.req.payload;
        let project_url = vars.value("CI_PROJECT_URL").unwrap_or_else(|| {
            let u = paths::url_without_credentials(&payload.git_info.repo_url);
            u.strip_suffix(".git").unwrap_or(&u).to_string()
        });
        LabelFacts {
            job_id: payload.id,
            job_url: format!("{project_url}/-/jobs/{}", payload.id),
            sha: payload.git_info.sha.clone(),
            before_sha: payload.git_info.before_sha.clone(),
            r#ref: payload.git_info.r#ref.clone(),
            timeout_secs: self.timeout_secs,
            project_id: payload.job_info.project_id,
            pipeline_id: payload.job_info.pipeline_id,
            runner_id: short.to_string(),
            system_id: self.req.runner.system_id.clone(),
        }
    }

    /// Connects with upstream's preparation retries (3 attempts, 3 s apart).
    async fn connect(&mut self, trace: &mut Trace<'_>) -> Result<Engine, JobOrSystem> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match connect::connect(self.req.endpoint).await {
                Ok(engine) => {
                    self.engine = Some(engine.clone());
                    return Ok(engine);
                }
                Err(e) if attempt < 3 && !self.control.abort.is_cancelled() => {
                    trace.warning(&format!("Preparation failed: {e}"));
                    trace.info("Will be retried in 3s ...");
                    tokio::time::sleep(Duration::from_secs(3)).await;
                }
                Err(e) => return Err(SystemError::from(e).into()),
            }
        }
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
        trace.section_start(name, description);
        let result = async {
            let id = self
                .containers
                .get(&docker, role, &p.inputs, &self.req.runner.docker)
                .await?;
            let script =
                body.finish(p.settings.debug_trace && !self.req.runner.debug_trace_disabled);
            let stop = stop_signal(
                self.control.clone(),
                self.deadline,
                stage_timeout,
                user_script,
                self.cancel_consumed,
            );
            let end = run_stage(&docker, &id, &script, role == Role::Build, trace, stop).await?;
            Ok::<_, JobOrSystem>(end)
        }
        .await;
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
        let work = async {
            let mut problems = self.containers.remove_all(&docker).await;
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
                    Err(bollard::errors::Error::DockerResponseServerError {
                        status_code: 404,
                        ..
                    }) => {}
                    Err(e) => problems.push(format!("removing container {id}: {e}")),
                }
            }
            for v in std::mem::take(&mut self.volumes.temporary) {
                let options = bollard::query_parameters::RemoveVolumeOptions { force: true };
                match docker.remove_volume(&v, Some(options)).await {
                    Ok(()) => {}
                    Err(bollard::errors::Error::DockerResponseServerError {
                        status_code: 404,
                        ..
                    }) => {}
                    Err(e) => problems.push(format!("removing volume {v}: {e}")),
                }
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

/// Registry auth sources in upstream's precedence: the `DOCKER_AUTH_CONFIG` variable, then
/// the runner user's `~/.docker/config.json`, else `~/.dockercfg`.
fn docker_auth_configs(vars: &VarList) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(v) = vars.get("DOCKER_AUTH_CONFIG") {
        out.push(v.value.clone());
    }
    if let Some(home) = std::env::var_os("HOME") {
        let home = std::path::PathBuf::from(home);
        let file = std::fs::read_to_string(home.join(".docker/config.json"))
            .or_else(|_| std::fs::read_to_string(home.join(".dockercfg")));
        if let Ok(text) = file {
            out.push(text);
        }
    }
    out
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
    stage_timeout: Option<Duration>,
    user_script: bool,
    cancel_consumed: bool,
) -> StopReason {
    let stage_deadline = stage_timeout.map(|t| Instant::now() + t);
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
        _ = stage => StopReason::StageTimeout,
        _ = graceful => if user_script { StopReason::Canceled } else { StopReason::Aborted },
    }
}
