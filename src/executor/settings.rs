//! The part of a `[[runners]]` entry the executor reads, as plain values.
//!
//! This is the executor's narrow input edge: the manager (or `drover exec-job`) builds it from
//! the loaded `config.toml` (see [`RunnerSettings::from_config`]), so the executor never parses
//! configuration itself and its tests can build settings directly. Defaults are upstream's.

use std::collections::BTreeMap;

/// Runner-level settings used to run one job.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunnerSettings {
    /// `name`: shown in the trace header.
    pub name: String,
    /// `token`: the runner token (its short form names containers and volumes).
    pub token: String,
    /// `url`: the GitLab URL (used by helper commands of part 2; may be empty).
    pub url: String,
    /// `executor`: `docker+machine` or `docker`, named in the trace.
    pub executor: String,
    /// The runner's system ID (`s_…`), for labels and the trace header.
    pub system_id: String,
    /// `output_limit` in KiB (default 4096).
    pub output_limit_kib: Option<u64>,
    /// `environment`: `KEY=VALUE` entries added to the job variables.
    pub environment: Vec<String>,
    /// `builds_dir` (default `/builds`).
    pub builds_dir: Option<String>,
    /// `cache_dir` (default `/cache`).
    pub cache_dir: Option<String>,
    /// `[runners.custom_build_dir] enabled` (default true for docker).
    pub custom_build_dir_enabled: Option<bool>,
    /// `pre_get_sources_script`.
    pub pre_get_sources_script: Option<String>,
    /// `post_get_sources_script`.
    pub post_get_sources_script: Option<String>,
    /// `pre_build_script`.
    pub pre_build_script: Option<String>,
    /// `post_build_script`.
    pub post_build_script: Option<String>,
    /// `[runners.feature_flags]`.
    pub feature_flags: BTreeMap<String, bool>,
    /// `[runners.docker]`.
    pub docker: DockerSettings,
}

/// `[runners.docker]` settings the executor applies.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DockerSettings {
    /// `image`: default job image.
    pub image: String,
    /// `helper_image`: overrides upstream's helper image.
    pub helper_image: Option<String>,
    /// `helper_image_flavor` (default `alpine`).
    pub helper_image_flavor: Option<String>,
    /// `pull_policy` (default `["always"]`).
    pub pull_policy: Vec<String>,
    /// `allowed_pull_policies` (default: `pull_policy`).
    pub allowed_pull_policies: Vec<String>,
    /// `allowed_images` (doublestar globs; empty = any).
    pub allowed_images: Vec<String>,
    /// `volumes`.
    pub volumes: Vec<String>,
    /// `disable_cache`: make `dst`-only volumes temporary.
    pub disable_cache: bool,
    /// `cache_dir`: host directory for `dst`-only volumes.
    pub cache_dir: Option<String>,
    /// `network_mode`.
    pub network_mode: Option<String>,
    /// `privileged`.
    pub privileged: bool,
    /// `allowed_privileged_images` (empty = all).
    pub allowed_privileged_images: Vec<String>,
    /// `user`: the build container's user.
    pub user: Option<String>,
    /// `allowed_users`.
    pub allowed_users: Vec<String>,
    /// `hostname` of the build and helper containers.
    pub hostname: Option<String>,
    /// `extra_hosts`.
    pub extra_hosts: Vec<String>,
    /// `dns`.
    pub dns: Vec<String>,
    /// `dns_search`.
    pub dns_search: Vec<String>,
    /// `cap_add`.
    pub cap_add: Vec<String>,
    /// `cap_drop`.
    pub cap_drop: Vec<String>,
    /// `security_opt`.
    pub security_opt: Vec<String>,
    /// `shm_size` in bytes.
    pub shm_size: Option<i64>,
    /// `memory` in bytes.
    pub memory: Option<i64>,
    /// `cpus` (a decimal such as `1.5`).
    pub cpus: Option<String>,
    /// `disable_entrypoint_overwrite`.
    pub disable_entrypoint_overwrite: bool,
    /// `volume_driver`.
    pub volume_driver: Option<String>,
    /// `volumes_from`.
    pub volumes_from: Vec<String>,
    /// `container_labels` (added unprefixed, variables expanded).
    pub container_labels: BTreeMap<String, String>,
    /// `tmpfs`.
    pub tmpfs: BTreeMap<String, String>,
    /// `sysctls`.
    pub sysctls: BTreeMap<String, String>,
}

impl RunnerSettings {
    /// The output limit in bytes (default 4 MiB).
    pub fn output_limit_bytes(&self) -> usize {
        let kib = self.output_limit_kib.filter(|k| *k > 0).unwrap_or(4096);
        usize::try_from(kib.saturating_mul(1024)).unwrap_or(usize::MAX)
    }

    /// The builds root (`builds_dir` or `/builds`).
    pub fn builds_dir(&self) -> &str {
        self.builds_dir
            .as_deref()
            .filter(|d| !d.is_empty())
            .unwrap_or("/builds")
    }

    /// The cache root (`cache_dir` or `/cache`).
    pub fn cache_root(&self) -> &str {
        self.cache_dir
            .as_deref()
            .filter(|d| !d.is_empty())
            .unwrap_or("/cache")
    }
}
