//! The pure part of preparing a job: from the payload and the runner's settings to the job's
//! variables, paths, job-controlled settings and the (allowed, normalised) image to run. No
//! Engine, no I/O: `run` uses it before connecting, and the hostile-payload tests drive it
//! directly, so what they check is what a job runs.

use crate::executor::build_settings::{BuildSettings, GitStrategy};
use crate::executor::error::{FailureReason, JobFailure};
use crate::executor::image;
use crate::executor::paths::{self, JobPaths, PathInputs, Slot};
use crate::executor::script::variables::{job_variables, VarInputs, VarList};
use crate::executor::settings::RunnerSettings;
use crate::executor::volumes;
use crate::job::JobPayload;

/// What [`plan_job`] works out.
#[derive(Debug, Clone)]
pub struct JobPlan {
    /// The runner's short token.
    pub short: String,
    /// Where the job's files live.
    pub paths: JobPaths,
    /// The job's variables, expanded.
    pub vars: VarList,
    /// The job-controlled settings (`GIT_STRATEGY`, timeouts, …).
    pub settings: BuildSettings,
    /// Warnings about those settings, for the job log.
    pub warnings: Vec<String>,
    /// `[runners.docker] volumes`, parsed; only their destinations are expanded.
    pub volumes: Vec<volumes::VolumeSpec>,
    /// The image to run (normalised, checked against `allowed_images`).
    pub image_name: String,
    /// The image's name as written (the job's `image:` expanded, else the config `image`):
    /// what `allowed_privileged_images` is matched against, as upstream does.
    pub image_as_written: String,
    /// The per-build network's name when `FF_NETWORK_PER_BUILD` is on (it is created only
    /// without a `network_mode`: the networks manager decides).
    pub per_build_network: Option<String>,
}

/// The repository URL git will fetch from must be a URL, as upstream's external git config
/// requires (without `clone_url`, the URL GitLab sent is used as it is): an unparsable one
/// fails the job before anything runs, as a system failure (it comes from GitLab, not the
/// job). The message leaves the URL out: it carries the job token. A URL without `://` is
/// left to git (upstream's parser accepts some of them).
pub fn check_repo_url(clone_url: &str, repo_url: &str) -> Result<(), JobFailure> {
    // A URL that parses has a scheme.
    if reqwest::Url::parse(clone_url).is_ok() || !repo_url.contains("://") {
        return Ok(());
    }
    match reqwest::Url::parse(repo_url) {
        Ok(_) => Ok(()),
        Err(e) => Err(JobFailure::new(
            FailureReason::RunnerSystemFailure,
            format!(
                "setting up the external git config: the repository URL GitLab sent for the job \
                 (git_info.repo_url) is not a valid URL ({e}); check the project's URL in GitLab, \
                 or set clone_url in [[runners]] to clone from another URL"
            ),
        )),
    }
}

/// Works out a job's variables, paths, settings and image.
pub fn plan_job(
    payload: &JobPayload,
    runner: &RunnerSettings,
    slot: Slot,
) -> Result<JobPlan, JobFailure> {
    let ds = &runner.docker;
    let short = crate::engine::naming::short_token(&runner.token);
    // Upstream checks the builds dir before anything else (`prepareBuildsDir`).
    let root = runner.builds_dir();
    if !root.starts_with('/') {
        return Err(JobFailure::new(
            FailureReason::RunnerConfigurationError,
            format!("build directory needs to be an absolute path: builds_dir is {root:?}"),
        ));
    }
    if paths::normalize(root) == "/" {
        return Err(JobFailure::new(
            FailureReason::RunnerConfigurationError,
            "build directory needs to be a non-root path: builds_dir is \"/\"",
        ));
    }
    // Variables are needed to find the paths and the paths to finish the variables: a
    // first pass with the default project dir reads the job-controlled settings.
    let default_paths = JobPaths::new(&PathInputs {
        root_dir: runner.builds_dir(),
        cache_root: runner.cache_root(),
        repo_url: &payload.git_info.repo_url,
        project_id: payload.job_info.project_id,
        short_token: short,
        project_slot: slot.project,
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
            short_token: short,
            network_name: None,
            slot,
        },
    )
    .expanded();
    let (mut settings, mut warnings) =
        BuildSettings::from_variables(&first, payload.allow_git_fetch);
    if settings.debug_trace && runner.debug_trace_disabled {
        settings.debug_trace = false;
        warnings.push("CI_DEBUG_TRACE: usage is disabled on this Runner".to_string());
    }
    // Each entry is parsed first and only its destination expanded: a job variable can never
    // change an entry's structure (a `:` in a value cannot make a bind of a host path).
    if matches!(
        settings.git_strategy,
        GitStrategy::Fetch | GitStrategy::Clone
    ) {
        check_repo_url(&runner.clone_url, &payload.git_info.repo_url)?;
    }
    let parsed_volumes = volumes::parse_volumes(&ds.volumes, &|d: &str| first.expand(d))?;
    let shared = volumes::builds_dir_host_mounted(&parsed_volumes, runner.builds_dir());
    let clone_path = settings.clone_path.as_deref().filter(|p| !p.is_empty());
    if clone_path.is_some() && !runner.custom_build_dir_enabled.unwrap_or(true) {
        return Err(JobFailure::new(
            FailureReason::RunnerConfigurationError,
            "setting GIT_CLONE_PATH is not allowed, enable `custom_build_dir` feature \
             ([runners.custom_build_dir] enabled = true) or remove GIT_CLONE_PATH from the job",
        ));
    }
    let paths = JobPaths::new(&PathInputs {
        root_dir: runner.builds_dir(),
        cache_root: runner.cache_root(),
        repo_url: &payload.git_info.repo_url,
        project_id: payload.job_info.project_id,
        short_token: short,
        shared_builds_dir: shared,
        project_slot: slot.project,
        empty_strategy: settings.git_strategy == GitStrategy::Empty,
        clone_path,
    })
    .map_err(|e| JobFailure::new(FailureReason::RunnerConfigurationError, e.to_string()))?;
    let job_image = job_image_raw.map(|n| first.expand(n));
    // FF_NETWORK_PER_BUILD names a network for the job (exported as CI_BUILD_NETWORK_NAME, as
    // upstream does even with network_mode); it is created only when network_mode is not set.
    let per_build_name = first.flag("FF_NETWORK_PER_BUILD").then(|| {
        crate::executor::services::network_name(
            short,
            payload.job_info.project_id,
            slot.project,
            payload.id,
        )
    });
    let vars = job_variables(
        payload,
        runner,
        &paths,
        &VarInputs {
            job_image: job_image.as_deref(),
            short_token: short,
            network_name: per_build_name.as_deref(),
            slot,
        },
    )
    .expanded();

    let config_image = first.expand(&ds.image);
    let image_name =
        image::resolve_job_image(job_image.as_deref(), &config_image, &ds.allowed_images)?;
    let image_as_written = job_image
        .as_deref()
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .unwrap_or(config_image.trim())
        .to_string();
    Ok(JobPlan {
        short: short.to_string(),
        paths,
        vars,
        settings,
        warnings,
        volumes: parsed_volumes,
        image_name,
        image_as_written,
        per_build_network: per_build_name,
    })
}

/// Whether the job's ref is protected: GitLab's `git_info.protected`, else (GitLab before 18.3)
/// GitLab's own `CI_COMMIT_REF_PROTECTED` (see [`VarList::ref_protected`]). A cache key ending
/// in `-protected` also selects the protected volumes; that is the caller's.
pub fn ref_protected(payload: &JobPayload, vars: &VarList) -> bool {
    payload
        .git_info
        .protected
        .unwrap_or_else(|| vars.ref_protected())
}
