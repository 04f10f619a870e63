//! The job model: the JSON body GitLab returns from `POST /api/v4/jobs/request` (201).
//!
//! It has a module of its own because two sides use it: the GitLab client receives it and the
//! executor runs it, and neither imports the other.
//!
//! Modelled leniently, as GitLab evolves it constantly: every field may be missing or `null`
//! (both read as the field's default), and unknown fields are ignored. Nothing here interprets
//! the payload; the executor does. Parsing never panics on input.

use serde::{Deserialize, Deserializer};

/// Reads `null` as the type's default value.
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A string that GitLab sometimes sends as a number (`image.executor_opts.docker.user`).
fn string_or_number<'de, D>(d: D) -> Result<String, D::Error>
where
    D: Deserializer<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        S(String),
        I(i64),
        U(u64),
        F(f64),
        B(bool),
    }
    Ok(match Option::<Raw>::deserialize(d)? {
        None => String::new(),
        Some(Raw::S(s)) => s,
        Some(Raw::I(i)) => i.to_string(),
        Some(Raw::U(u)) => u.to_string(),
        Some(Raw::F(f)) => f.to_string(),
        Some(Raw::B(b)) => b.to_string(),
    })
}

/// Declares a payload struct whose every field defaults when missing or null.
macro_rules! lenient {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $field:ident : $ty:ty,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Default, PartialEq, Deserialize)]
        #[serde(default)]
        pub struct $name {
            $(
                $(#[$fm])*
                #[serde(deserialize_with = "null_default")]
                pub $field: $ty,
            )*
        }
    };
}

lenient! {
    /// The whole job as GitLab sends it.
    pub struct JobPayload {
        /// Job ID.
        pub id: i64,
        /// Job token (JOB-TOKEN header, clone password, registry password).
        pub token: String,
        /// Whether the project allows the `fetch` git strategy (the default strategy then).
        pub allow_git_fetch: bool,
        /// Informational job data (names, IDs).
        pub job_info: JobInfo,
        /// Where and what to check out.
        pub git_info: GitInfo,
        /// Runner-facing settings (timeout).
        pub runner_info: RunnerInfo,
        /// Job variables, in order; later duplicates win.
        pub variables: Vec<JobVariable>,
        /// The script steps (`script`, `after_script`, `release`, …).
        pub steps: Vec<Step>,
        /// Job hooks (`pre_get_sources_script`, `post_get_sources_script`).
        pub hooks: Vec<Hook>,
        /// The job image (`None` when the job has no `image:`).
        pub image: Option<Image>,
        /// The job services.
        pub services: Vec<Image>,
        /// Artifact uploads.
        pub artifacts: Vec<Artifact>,
        /// Cache entries.
        pub cache: Vec<Cache>,
        /// Credentials (only `type == "registry"` is used).
        pub credentials: Vec<Credentials>,
        /// Artifacts of earlier jobs to download.
        pub dependencies: Vec<Dependency>,
        /// Features GitLab supports for this job.
        pub features: Features,
        /// The correlation ID of the request that fetched the job (GitLab's `X-Request-Id`
        /// answer, else the runner's own), for git's `X-Gitaly-Correlation-ID` header. Set by the
        /// API client, never read from the payload.
        #[serde(skip)]
        pub request_correlation_id: String,
    }
}

lenient! {
    /// `job_info`: names and IDs, used for logs, labels and CI variables only.
    pub struct JobInfo {
        /// Job ID.
        pub id: i64,
        /// Job name.
        pub name: String,
        /// Stage name.
        pub stage: String,
        /// Pipeline ID.
        pub pipeline_id: i64,
        /// Project ID.
        pub project_id: i64,
        /// Project name.
        pub project_name: String,
        /// Project full path (`group/sub/project`).
        pub project_full_path: String,
        /// Namespace ID.
        pub namespace_id: i64,
        /// Root namespace ID.
        pub root_namespace_id: i64,
        /// Time the job waited in the queue, in seconds.
        pub time_in_queue_seconds: f64,
    }
}

lenient! {
    /// `git_info`: the repository and revision.
    pub struct GitInfo {
        /// Clone URL, with `gitlab-ci-token:<token>@` embedded.
        pub repo_url: String,
        /// `sha1` or `sha256`.
        pub repo_object_format: String,
        /// Branch or tag name.
        pub r#ref: String,
        /// Commit to check out.
        pub sha: String,
        /// Previous commit of the ref.
        pub before_sha: String,
        /// `branch` or `tag`.
        pub ref_type: String,
        /// Refspecs to fetch.
        pub refspecs: Vec<String>,
        /// Fetch depth (0 = full history).
        pub depth: i64,
        /// Whether the ref is protected (`None` when GitLab did not say).
        pub protected: Option<bool>,
    }
}

lenient! {
    /// `runner_info`.
    pub struct RunnerInfo {
        /// Job timeout in seconds (≤ 0: the runner default, 7200).
        pub timeout: i64,
    }
}

lenient! {
    /// One job variable.
    pub struct JobVariable {
        /// Name.
        pub key: String,
        /// Value.
        pub value: String,
        /// Whether the variable is public (may reach services).
        pub public: bool,
        /// Whether the value must be masked in the trace.
        pub masked: bool,
        /// Whether the value is written to a file whose path becomes the variable's value.
        pub file: bool,
        /// Whether the value is exempt from variable expansion.
        pub raw: bool,
    }
}

lenient! {
    /// One script step.
    pub struct Step {
        /// `script`, `after_script`, `release`, …
        pub name: String,
        /// The commands.
        pub script: Vec<String>,
        /// Step timeout in seconds.
        pub timeout: i64,
        /// `on_success` (default), `on_failure` or `always`.
        pub when: String,
        /// Whether a failure of the step is allowed.
        pub allow_failure: bool,
    }
}

lenient! {
    /// A job hook.
    pub struct Hook {
        /// `pre_get_sources_script` or `post_get_sources_script`.
        pub name: String,
        /// The commands.
        pub script: Vec<String>,
    }
}

lenient! {
    /// A job image or service.
    pub struct Image {
        /// Image reference.
        pub name: String,
        /// Service alias(es), separated by commas or spaces.
        pub alias: String,
        /// Entrypoint override (`Some(vec![""])` clears the image entrypoint).
        pub entrypoint: Option<Vec<String>>,
        /// Service command.
        pub command: Vec<String>,
        /// Exposed ports.
        pub ports: Vec<Port>,
        /// Pull policies requested by the job.
        pub pull_policy: Vec<String>,
        /// Executor-specific options.
        pub executor_opts: ExecutorOptions,
        /// Service variables.
        pub variables: Vec<JobVariable>,
    }
}

lenient! {
    /// An image port.
    pub struct Port {
        /// Port number.
        pub number: i64,
        /// Protocol.
        pub protocol: String,
        /// Name.
        pub name: String,
    }
}

/// `executor_opts`: per-executor image options; unknown executors are kept for validation.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ExecutorOptions {
    /// Options for the Docker executor.
    #[serde(deserialize_with = "null_default")]
    pub docker: DockerImageOptions,
    /// Every other key, which the Docker executor rejects.
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// `executor_opts.docker`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct DockerImageOptions {
    /// Platform such as `linux/amd64`.
    #[serde(deserialize_with = "null_default")]
    pub platform: String,
    /// User to run as (GitLab may send a number).
    #[serde(deserialize_with = "string_or_number")]
    pub user: String,
    /// Every other key, which the Docker executor rejects.
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

lenient! {
    /// An artifact upload entry.
    pub struct Artifact {
        /// Archive name.
        pub name: String,
        /// Include git-untracked files.
        pub untracked: bool,
        /// Paths to include.
        pub paths: Vec<String>,
        /// Paths to exclude.
        pub exclude: Vec<String>,
        /// `on_success`, `on_failure` or `always`.
        pub when: String,
        /// `archive`, `junit`, …
        pub artifact_type: String,
        /// `zip`, `gzip`, `raw`, `zipzstd`, `tarzstd`.
        pub artifact_format: String,
        /// Expiry such as `1 week`.
        pub expire_in: String,
    }
}

lenient! {
    /// A cache entry.
    pub struct Cache {
        /// Cache key.
        pub key: String,
        /// Include git-untracked files.
        pub untracked: bool,
        /// `pull-push`, `pull` or `push`.
        pub policy: String,
        /// Paths to cache.
        pub paths: Vec<String>,
        /// `on_success`, `on_failure` or `always`.
        pub when: String,
        /// Fallback keys.
        pub fallback_keys: Vec<String>,
    }
}

lenient! {
    /// Registry (or other) credentials.
    pub struct Credentials {
        /// Only `registry` is used.
        pub r#type: String,
        /// Registry address.
        pub url: String,
        /// User name.
        pub username: String,
        /// Password.
        pub password: String,
    }
}

lenient! {
    /// A job whose artifacts this job downloads.
    pub struct Dependency {
        /// Job ID.
        pub id: i64,
        /// Job name.
        pub name: String,
        /// Token to download with.
        pub token: String,
        /// The artifacts file, if the job has one.
        pub artifacts_file: Option<ArtifactsFile>,
    }
}

lenient! {
    /// An artifacts file.
    pub struct ArtifactsFile {
        /// File name.
        pub filename: String,
        /// Size in bytes.
        pub size: i64,
    }
}

lenient! {
    /// Features GitLab supports for this job.
    pub struct Features {
        /// Whether section markers are understood.
        pub trace_sections: bool,
        /// Failure reasons GitLab accepts.
        pub failure_reasons: Vec<String>,
        /// Extra token prefixes to mask.
        pub token_mask_prefixes: Vec<String>,
    }
}

/// Why a job payload could not be read.
#[derive(Debug, thiserror::Error)]
#[error("job payload is not valid JSON at line {line}, column {column}: {message}")]
pub struct PayloadError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What serde reported.
    pub message: String,
}

impl JobPayload {
    /// Parses a payload, leniently.
    pub fn from_json(text: &str) -> Result<Self, PayloadError> {
        serde_json::from_str(text).map_err(|e| PayloadError {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })
    }

    /// The job timeout in seconds: `runner_info.timeout`, or 7200 when unset or ≤ 0.
    pub fn timeout_secs(&self) -> u64 {
        u64::try_from(self.runner_info.timeout)
            .ok()
            .filter(|t| *t > 0)
            .unwrap_or(7200)
    }

    /// The step with the given name.
    pub fn step(&self, name: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// The last value of a variable.
    pub fn variable(&self, key: &str) -> Option<&str> {
        self.variables
            .iter()
            .rev()
            .find(|v| v.key == key)
            .map(|v| v.value.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_correlation_id_never_comes_from_the_payload() {
        let p = JobPayload::from_json(r#"{"id": 5, "request_correlation_id": "from-gitlab-json"}"#)
            .unwrap();
        assert_eq!(p.request_correlation_id, "");
    }

    #[test]
    fn nulls_and_unknown_fields_are_tolerated() {
        let p = JobPayload::from_json(
            r#"{"id": 5, "token": null, "image": null, "services": null, "new_thing": {"a": 1},
                "git_info": {"refspecs": null, "protected": null, "depth": 3},
                "variables": [{"key": "A", "value": null, "public": true}],
                "steps": [{"name": "script", "script": ["echo"], "when": null}]}"#,
        )
        .unwrap();
        assert_eq!(p.id, 5);
        assert_eq!(p.token, "");
        assert!(p.image.is_none());
        assert_eq!(p.git_info.depth, 3);
        assert_eq!(p.git_info.protected, None);
        assert_eq!(p.variables[0].value, "");
        assert_eq!(p.timeout_secs(), 7200);
    }

    #[test]
    fn user_may_be_a_number() {
        let p = JobPayload::from_json(
            r#"{"image": {"name": "x", "executor_opts": {"docker": {"user": 1000, "platform": "linux/amd64"}}}}"#,
        )
        .unwrap();
        let img = p.image.unwrap();
        assert_eq!(img.executor_opts.docker.user, "1000");
        assert!(img.executor_opts.other.is_empty());
    }

    #[test]
    fn realistic_example_parses() {
        let text = include_str!("../fixtures/jobs/realistic.json");
        let p = JobPayload::from_json(text).unwrap();
        assert_eq!(p.id, 4711);
        assert_eq!(p.timeout_secs(), 3600);
        assert!(p.variables.iter().any(|v| v.key == "KUBECONFIG" && v.file));
        assert_eq!(p.services[0].alias, "db,pg");
        assert_eq!(p.dependencies[1].artifacts_file, None);
    }

    #[test]
    fn broken_json_says_where() {
        let e = JobPayload::from_json("{\n  \"id\": }").unwrap_err();
        assert_eq!(e.line, 2);
    }
}
