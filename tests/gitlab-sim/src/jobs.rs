//! Job payloads like GitLab's (spec §5.1): a builder for tests, and the JSON it produces,
//! with `null` in the places GitLab puts it.

use serde_json::{json, Value};

/// A job to enqueue. Everything has a realistic default; set what the test cares about.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Job name (`job_info.name`).
    pub name: String,
    /// Stage.
    pub stage: String,
    /// `script` lines (the `script` step: before_script + script).
    pub script: Vec<String>,
    /// `after_script` lines (no step when empty).
    pub after_script: Vec<String>,
    /// Extra variables `(key, value, masked)` after the predefined ones.
    pub variables: Vec<(String, String, bool)>,
    /// `image.name`, or `None` for `"image": null` (the runner's default image).
    pub image: Option<String>,
    /// Image pull policies (`null` when empty).
    pub pull_policy: Vec<String>,
    /// Services: `(name, alias)`.
    pub services: Vec<(String, String)>,
    /// Cache entries: `(key, paths, policy)`.
    pub cache: Vec<(String, Vec<String>, String)>,
    /// Artifacts: `(name, paths, when)`.
    pub artifacts: Vec<(String, Vec<String>, String)>,
    /// Jobs whose artifacts this one downloads (IDs of jobs enqueued before).
    pub dependencies: Vec<i64>,
    /// `runner_info.timeout` in seconds.
    pub timeout: i64,
    /// `git_info.ref`.
    pub git_ref: String,
    /// `git_info.sha`; the simulator's repository head when empty and a repository is set.
    pub sha: String,
    /// The repository served by the simulator (a name given to `Sim::create_repo`); empty: a
    /// URL that does not exist.
    pub repo: String,
    /// `git_info.depth`.
    pub depth: i64,
    /// Give the job refspecs (then only runners advertising `refspecs` get it).
    pub refspecs: bool,
    /// Tags; the runner's tags are not checked (the simulator serves every runner).
    pub tags: Vec<String>,
    /// `features.failure_reasons`; the default is Rails' list.
    pub failure_reasons: Vec<String>,
    /// Top-level keys replacing or adding to the generated payload (odd types, new fields).
    pub overrides: serde_json::Map<String, Value>,
}

/// Rails' failure reasons (abridged as in spec §5.1, plus the newer ones it names).
pub const RAILS_FAILURE_REASONS: [&str; 30] = [
    "unknown_failure",
    "script_failure",
    "api_failure",
    "stuck_or_timeout_failure",
    "runner_system_failure",
    "missing_dependency_failure",
    "runner_unsupported",
    "stale_schedule",
    "job_execution_timeout",
    "archived_failure",
    "unmet_prerequisites",
    "scheduler_failure",
    "data_integrity_failure",
    "forward_deployment_failure",
    "user_blocked",
    "project_deleted",
    "ci_quota_exceeded",
    "pipeline_loop_detected",
    "no_matching_runner",
    "trace_size_exceeded",
    "builds_disabled",
    "environment_creation_failure",
    "deployment_rejected",
    "failed_outdated_deployment_job",
    "runner_configuration_error",
    "runner_external_dependency_failure",
    "runner_interrupted",
    "job_execution_server_timeout",
    "no_updates_running",
    "job_token_expired",
];

impl Default for JobSpec {
    fn default() -> Self {
        JobSpec {
            name: "test".into(),
            stage: "test".into(),
            script: vec!["echo hello".into()],
            after_script: Vec::new(),
            variables: Vec::new(),
            image: Some("alpine:3".into()),
            pull_policy: Vec::new(),
            services: Vec::new(),
            cache: Vec::new(),
            artifacts: Vec::new(),
            dependencies: Vec::new(),
            timeout: 3600,
            git_ref: "main".into(),
            sha: String::new(),
            repo: String::new(),
            depth: 20,
            refspecs: true,
            tags: Vec::new(),
            failure_reasons: RAILS_FAILURE_REASONS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            overrides: serde_json::Map::new(),
        }
    }
}

impl JobSpec {
    /// A job running `script`.
    pub fn script<I: IntoIterator<Item = S>, S: Into<String>>(script: I) -> JobSpec {
        JobSpec {
            script: script.into_iter().map(Into::into).collect(),
            ..JobSpec::default()
        }
    }

    /// Sets the name.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }

    /// Adds a variable.
    pub fn variable(mut self, key: &str, value: &str) -> Self {
        self.variables.push((key.into(), value.into(), false));
        self
    }

    /// Adds a masked variable.
    pub fn masked_variable(mut self, key: &str, value: &str) -> Self {
        self.variables.push((key.into(), value.into(), true));
        self
    }

    /// Sets the image (`None`: `"image": null`).
    pub fn image(mut self, image: Option<&str>) -> Self {
        self.image = image.map(Into::into);
        self
    }

    /// Sets the pull policy.
    pub fn pull_policy(mut self, policies: &[&str]) -> Self {
        self.pull_policy = policies.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Adds a service.
    pub fn service(mut self, name: &str, alias: &str) -> Self {
        self.services.push((name.into(), alias.into()));
        self
    }

    /// Adds a cache entry.
    pub fn cache(mut self, key: &str, paths: &[&str], policy: &str) -> Self {
        self.cache.push((
            key.into(),
            paths.iter().map(|s| s.to_string()).collect(),
            policy.into(),
        ));
        self
    }

    /// Adds an artifacts entry.
    pub fn artifact(mut self, name: &str, paths: &[&str], when: &str) -> Self {
        self.artifacts.push((
            name.into(),
            paths.iter().map(|s| s.to_string()).collect(),
            when.into(),
        ));
        self
    }

    /// Adds a dependency.
    pub fn dependency(mut self, job_id: i64) -> Self {
        self.dependencies.push(job_id);
        self
    }

    /// Sets the timeout in seconds.
    pub fn timeout(mut self, secs: i64) -> Self {
        self.timeout = secs;
        self
    }

    /// Sets the after_script.
    pub fn after_script<I: IntoIterator<Item = S>, S: Into<String>>(mut self, lines: I) -> Self {
        self.after_script = lines.into_iter().map(Into::into).collect();
        self
    }

    /// Replaces or adds a top-level payload key.
    pub fn override_key(mut self, key: &str, value: Value) -> Self {
        self.overrides.insert(key.into(), value);
        self
    }

    /// Uses a repository served by the simulator.
    pub fn repo(mut self, name: &str) -> Self {
        self.repo = name.into();
        self
    }
}

/// A dependency as the payload lists it: ID, name, token, and the archive's file name and size.
pub(crate) type DependencyInfo = (i64, String, String, Option<(String, u64)>);

/// What the payload builder needs from the simulator.
pub(crate) struct PayloadContext<'a> {
    pub id: i64,
    pub token: &'a str,
    pub pipeline_id: i64,
    pub base_url: &'a str,
    /// `host:port` of the simulator.
    pub authority: &'a str,
    pub scheme: &'a str,
    pub sha: &'a str,
    /// `(id, name, token, artifacts filename, size)` of each dependency.
    pub dependencies: Vec<DependencyInfo>,
}

fn null_if_empty(v: &[String]) -> Value {
    if v.is_empty() {
        Value::Null
    } else {
        json!(v)
    }
}

/// The job as GitLab sends it.
pub(crate) fn payload(spec: &JobSpec, cx: &PayloadContext<'_>) -> Value {
    let repo_path = if spec.repo.is_empty() {
        "acme/webapp".to_owned()
    } else {
        format!("repos/{}", spec.repo)
    };
    let repo_url = format!(
        "{}://gitlab-ci-token:{}@{}/{}.git",
        cx.scheme, cx.token, cx.authority, repo_path
    );
    let var = |k: &str, v: &str, public: bool, masked: bool| json!({"key": k, "value": v, "public": public, "masked": masked});
    let mut variables = vec![
        var("CI", "true", true, false),
        var("GITLAB_CI", "true", true, false),
        var("CI_JOB_ID", &cx.id.to_string(), true, false),
        var("CI_JOB_NAME", &spec.name, true, false),
        var("CI_JOB_STAGE", &spec.stage, true, false),
        var("CI_JOB_TOKEN", cx.token, false, true),
        var("CI_PIPELINE_ID", &cx.pipeline_id.to_string(), true, false),
        var("CI_PROJECT_PATH", &repo_path, true, false),
        var("CI_SERVER_URL", cx.base_url, true, false),
        var("CI_COMMIT_SHA", cx.sha, true, false),
        var("CI_COMMIT_REF_NAME", &spec.git_ref, true, false),
        var("CI_REPOSITORY_URL", &repo_url, false, false),
        var("CI_DEBUG_TRACE", "false", false, false),
    ];
    for (k, v, masked) in &spec.variables {
        variables.push(var(k, v, false, *masked));
    }
    let mut steps = vec![
        json!({"name": "script", "script": spec.script, "timeout": spec.timeout,
        "when": "on_success", "allow_failure": false}),
    ];
    if !spec.after_script.is_empty() {
        steps.push(json!({"name": "after_script", "script": spec.after_script,
            "timeout": spec.timeout, "when": "always", "allow_failure": true}));
    }
    let image = spec.image.as_ref().map_or(Value::Null, |name| {
        json!({"name": name, "entrypoint": null, "ports": [], "executor_opts": {},
            "pull_policy": null_if_empty(&spec.pull_policy)})
    });
    let services: Vec<Value> = spec
        .services
        .iter()
        .map(|(name, alias)| {
            json!({"name": name, "entrypoint": null, "ports": [], "executor_opts": {},
                "pull_policy": null_if_empty(&spec.pull_policy), "alias": alias,
                "command": null, "variables": []})
        })
        .collect();
    let artifacts: Vec<Value> = spec
        .artifacts
        .iter()
        .map(|(name, paths, when)| {
            json!({"name": name, "untracked": false, "paths": paths, "exclude": [],
                "when": when, "artifact_type": "archive", "artifact_format": "zip",
                "expire_in": "1 week"})
        })
        .collect();
    let cache: Vec<Value> = spec
        .cache
        .iter()
        .map(|(key, paths, policy)| {
            json!({"key": format!("{key}-protected"), "untracked": false, "policy": policy,
                "paths": paths, "when": "on_success", "fallback_keys": []})
        })
        .collect();
    let dependencies: Vec<Value> = cx
        .dependencies
        .iter()
        .map(|(id, name, token, file)| {
            json!({"id": id, "name": name, "token": token,
                "artifacts_file": file.as_ref().map_or(Value::Null,
                    |(f, size)| json!({"filename": f, "size": size}))})
        })
        .collect();
    let refspecs = if spec.refspecs {
        json!([
            format!("+refs/pipelines/{0}:refs/pipelines/{0}", cx.pipeline_id),
            format!("+refs/heads/{0}:refs/remotes/origin/{0}", spec.git_ref)
        ])
    } else {
        Value::Null
    };
    let mut job = json!({
        "id": cx.id,
        "token": cx.token,
        "allow_git_fetch": true,
        "job_info": {
            "id": cx.id, "name": spec.name, "stage": spec.stage, "pipeline_id": cx.pipeline_id,
            "project_id": 42, "project_name": "webapp", "project_full_path": repo_path,
            "namespace_id": 7, "root_namespace_id": 7, "organization_id": 1,
            "instance_id": "", "instance_uuid": "", "user_id": 15, "scoped_user_id": null,
            "time_in_queue_seconds": 0.5,
            "project_jobs_running_on_instance_runners_count": "+Inf",
            "queue_size": 0, "queue_depth": 0
        },
        "git_info": {
            "repo_url": repo_url, "repo_object_format": "sha1", "ref": spec.git_ref,
            "sha": cx.sha, "before_sha": "0000000000000000000000000000000000000000",
            "ref_type": "branch", "refspecs": refspecs, "depth": spec.depth, "protected": null
        },
        "runner_info": {"timeout": spec.timeout, "uuid": format!("{:08x}", cx.id), "runner_session_url": null},
        "variables": variables,
        "steps": steps,
        "hooks": [],
        "image": image,
        "services": services,
        "artifacts": artifacts,
        "cache": cache,
        "credentials": [{"type": "registry", "url": cx.authority, "username": "gitlab-ci-token", "password": cx.token}],
        "dependencies": dependencies,
        "features": {"trace_sections": true, "token_mask_prefixes": [], "failure_reasons": spec.failure_reasons},
        "inputs": null,
        "secrets": {}
    });
    if let Value::Object(map) = &mut job {
        for (k, v) in &spec.overrides {
            map.insert(k.clone(), v.clone());
        }
    }
    job
}
