//! The typed model of gitlab-runner's `config.toml`: the global settings and `[[runners]]`.
//!
//! Field names are Rust snake_case; the `serde` names are upstream's TOML keys exactly, so a
//! model serialises back to keys gitlab-runner reads. The model holds data only: it does not
//! parse files (that is [`crate::config::load`]) and does not decide anything about scaling.
//! Values arrive here already type-checked, with keys mapped to their canonical spelling and
//! durations converted to nanoseconds; build one with [`crate::config::load_str`] rather than
//! by hand, so that periods are compiled and validation has run.
//!
//! Sections for executors drover does not run (`[runners.kubernetes]`, `[runners.autoscaler]`,
//! …) are kept as raw TOML tables so nothing an operator wrote is lost.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use super::cache::{CacheAzureConfig, CacheConfig, CacheGcsConfig, CacheS3Config};
pub use super::docker::{DockerConfig, DockerService};
use super::duration::GoDuration;
pub use super::machine::{AutoscalingConfig, EffectiveIdle, MachineConfig};

/// A TOML table kept verbatim (sections drover loads but does not interpret).
pub type RawTable = toml::Table;

/// The whole `config.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// `listen_address`: address of the metrics/debug HTTP server (`host:port`, port 9252 if
    /// missing); empty means off.
    pub listen_address: String,
    /// `[session_server]`: the interactive web terminal server.
    pub session_server: SessionServerConfig,
    /// `labels`: default custom labels for every runner.
    pub labels: BTreeMap<String, String>,
    /// `concurrent`: jobs run at once across all runners (1 when the file does not set it).
    pub concurrent: i64,
    /// `check_interval`: seconds between job requests per runner (0 means upstream's default, 3).
    pub check_interval: i64,
    /// `log_level`: panic, fatal, error, warning, info or debug.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    /// `log_format`: runner, text or json.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_format: Option<String>,
    /// `user`: the user `gitlab-runner run` drops to (service installs only).
    pub user: String,
    /// `[[runners]]`, in file order.
    pub runners: Vec<RunnerConfig>,
    /// `sentry_dsn`: where errors are reported, if anywhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sentry_dsn: Option<String>,
    /// `connection_max_age`: how long an idle HTTP connection to GitLab is kept (default 15m).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_max_age: Option<GoDuration>,
    /// `[experimental]`: kept verbatim; drover does not use it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub experimental: Option<RawTable>,
    /// `shutdown_timeout`: seconds a forceful shutdown may take (0 means upstream's default, 30).
    pub shutdown_timeout: i64,
    /// `[machine]`: global docker+machine settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<GlobalMachine>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen_address: String::new(),
            session_server: SessionServerConfig::default(),
            labels: BTreeMap::new(),
            concurrent: 1,
            check_interval: 0,
            log_level: None,
            log_format: None,
            user: String::new(),
            runners: Vec::new(),
            sentry_dsn: None,
            connection_max_age: None,
            experimental: None,
            shutdown_timeout: 0,
            machine: None,
        }
    }
}

impl Config {
    /// `connection_max_age`, or upstream's default of 15 minutes.
    pub fn connection_max_age_or_default(&self) -> GoDuration {
        self.connection_max_age
            .unwrap_or(GoDuration::from_secs(15 * 60))
    }

    /// `check_interval` in seconds, or upstream's default of 3 when it is not positive.
    pub fn check_interval_or_default(&self) -> i64 {
        if self.check_interval > 0 {
            self.check_interval
        } else {
            3
        }
    }

    /// `shutdown_timeout` in seconds, or upstream's default of 30 when it is not positive.
    pub fn shutdown_timeout_or_default(&self) -> i64 {
        if self.shutdown_timeout > 0 {
            self.shutdown_timeout
        } else {
            30
        }
    }
}

/// `[session_server]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SessionServerConfig {
    /// `listen_address`.
    pub listen_address: String,
    /// `advertise_address` (defaults to `listen_address`).
    pub advertise_address: String,
    /// `session_timeout` in seconds (1800 unless set).
    pub session_timeout: i64,
}

impl Default for SessionServerConfig {
    fn default() -> Self {
        SessionServerConfig {
            listen_address: String::new(),
            advertise_address: String::new(),
            session_timeout: 1800,
        }
    }
}

/// The global `[machine]` table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GlobalMachine {
    /// `[machine.shutdown_drain]`: remove machines when the runner shuts down.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shutdown_drain: Option<ShutdownDrainConfig>,
}

/// `[machine.shutdown_drain]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ShutdownDrainConfig {
    /// `enabled`: drain at all.
    pub enabled: bool,
    /// `concurrency`: machines removed at once (≤ 0 means the default, 3).
    pub concurrency: i64,
    /// `max_retries`: retries per machine (≤ 0 means the default, 3).
    pub max_retries: i64,
    /// `retry_backoff`: base backoff between attempts (≤ 0 or unset means 5s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_backoff: Option<GoDuration>,
}

impl ShutdownDrainConfig {
    /// `concurrency`, or 3 when it is not positive.
    pub fn concurrency_or_default(&self) -> i64 {
        if self.concurrency > 0 {
            self.concurrency
        } else {
            3
        }
    }

    /// `max_retries`, or 3 when it is not positive.
    pub fn max_retries_or_default(&self) -> i64 {
        if self.max_retries > 0 {
            self.max_retries
        } else {
            3
        }
    }

    /// `retry_backoff`, or 5 seconds when unset or not positive.
    pub fn retry_backoff_or_default(&self) -> GoDuration {
        match self.retry_backoff {
            Some(d) if d.as_nanos() > 0 => d,
            _ => GoDuration::from_secs(5),
        }
    }
}

/// `[runners.custom_build_dir]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CustomBuildDir {
    /// `enabled`: let jobs choose their clone path (`GIT_CLONE_PATH`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// `[runners.ssh]` (for the ssh executor; drover does not use it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SshConfig {
    /// `user`.
    pub user: String,
    /// `password`.
    pub password: String,
    /// `host`.
    pub host: String,
    /// `port` (a string upstream).
    pub port: String,
    /// `identity_file`.
    pub identity_file: String,
    /// `disable_strict_host_key_checking`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disable_strict_host_key_checking: Option<bool>,
    /// `known_hosts_file`.
    pub known_hosts_file: String,
}

/// `[runners.custom]` (for the custom executor; drover does not use it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CustomExecutorConfig {
    /// `config_exec`.
    pub config_exec: String,
    /// `config_args`.
    pub config_args: Vec<String>,
    /// `config_exec_timeout` in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_exec_timeout: Option<i64>,
    /// `prepare_exec`.
    pub prepare_exec: String,
    /// `prepare_args`.
    pub prepare_args: Vec<String>,
    /// `prepare_exec_timeout` in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prepare_exec_timeout: Option<i64>,
    /// `run_exec`.
    pub run_exec: String,
    /// `run_args`.
    pub run_args: Vec<String>,
    /// `cleanup_exec`.
    pub cleanup_exec: String,
    /// `cleanup_args`.
    pub cleanup_args: Vec<String>,
    /// `cleanup_exec_timeout` in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleanup_exec_timeout: Option<i64>,
    /// `graceful_kill_timeout` in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graceful_kill_timeout: Option<i64>,
    /// `force_kill_timeout` in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub force_kill_timeout: Option<i64>,
}

/// One `[[runners]]` entry: credentials, settings and the executor sections.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunnerConfig {
    /// `name`: the runner's description.
    pub name: String,
    /// `limit`: jobs (and, for docker+machine, machines) this runner handles at once; 0 = no limit.
    pub limit: i64,
    /// `output_limit`: maximum job log size in kilobytes (0 = upstream's default, 4096).
    pub output_limit: i64,
    /// `request_concurrency`: concurrent job requests (values below 1 mean 1).
    pub request_concurrency: i64,
    /// `strict_check_interval`: always wait `check_interval` between requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict_check_interval: Option<bool>,
    /// `unhealthy_requests_limit`: failed requests before the worker pauses (below 1 means 3).
    pub unhealthy_requests_limit: i64,
    /// `unhealthy_interval`: how long an unhealthy worker pauses (default 1h).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unhealthy_interval: Option<GoDuration>,
    /// `job_status_final_update_retry_limit`.
    pub job_status_final_update_retry_limit: i64,

    /// `url`: the GitLab instance, with `$VAR`/`${VAR}` expanded from the environment.
    pub url: String,
    /// `id`: the runner's ID in GitLab.
    pub id: i64,
    /// `token`: the runner authentication token, with environment variables expanded.
    pub token: String,
    /// `token_obtained_at`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_obtained_at: Option<DateTime<Utc>>,
    /// `token_expires_at` (0001-01-01T00:00:00Z means never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_expires_at: Option<DateTime<Utc>>,
    /// `tls-ca-file`.
    #[serde(rename = "tls-ca-file")]
    pub tls_ca_file: String,
    /// `tls-cert-file`.
    #[serde(rename = "tls-cert-file")]
    pub tls_cert_file: String,
    /// `tls-key-file`.
    #[serde(rename = "tls-key-file")]
    pub tls_key_file: String,

    /// `labels`: custom labels for this runner (override the global ones).
    pub labels: BTreeMap<String, String>,
    /// `executor`: `docker+machine`, `docker`, `shell`, …
    pub executor: String,
    /// `builds_dir`.
    pub builds_dir: String,
    /// `cache_dir`.
    pub cache_dir: String,
    /// `clone_url`.
    pub clone_url: String,
    /// `environment`: `KEY=value` entries added to every job.
    pub environment: Vec<String>,
    /// `proxy_exec`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_exec: Option<bool>,
    /// `pre_get_sources_script`.
    pub pre_get_sources_script: String,
    /// `post_get_sources_script`.
    pub post_get_sources_script: String,
    /// `pre_build_script`.
    pub pre_build_script: String,
    /// `post_build_script`.
    pub post_build_script: String,
    /// `debug_trace_disabled`.
    pub debug_trace_disabled: bool,
    /// `safe_directory_checkout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub safe_directory_checkout: Option<bool>,
    /// `clean_git_config`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clean_git_config: Option<bool>,
    /// `shell`.
    pub shell: String,
    /// `[runners.custom_build_dir]`.
    pub custom_build_dir: CustomBuildDir,
    /// `[runners.referees]`: kept verbatim; drover does not use it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub referees: Option<Box<RawTable>>,
    /// `[runners.cache]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<Box<CacheConfig>>,
    /// `[runners.feature_flags]`.
    pub feature_flags: BTreeMap<String, bool>,
    /// `[runners.monitoring]`: kept verbatim; drover does not use it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub monitoring: Option<Box<RawTable>>,
    /// `use_slot_cgroups`.
    pub use_slot_cgroups: bool,
    /// `slot_cgroup_template`.
    pub slot_cgroup_template: String,
    /// `[runners.instance]`: kept verbatim (instance executor).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<Box<RawTable>>,
    /// `[runners.ssh]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssh: Option<Box<SshConfig>>,
    /// `[runners.docker]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker: Option<Box<DockerConfig>>,
    /// `[runners.parallels]`: kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallels: Option<Box<RawTable>>,
    /// `[runners.virtualbox]`: kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub virtualbox: Option<Box<RawTable>>,
    /// `[runners.machine]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<MachineConfig>,
    /// `[runners.kubernetes]`: kept verbatim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<Box<RawTable>>,
    /// `[runners.custom]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom: Option<Box<CustomExecutorConfig>>,
    /// `[runners.autoscaler]`: kept verbatim (docker-autoscaler / instance executors).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscaler: Option<Box<RawTable>>,
    /// `step_runner_image`.
    pub step_runner_image: String,
    /// `prepare_timeout`: the prepare phase's time limit (unset: the job timeout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prepare_timeout: Option<GoDuration>,
    /// `get_sources_timeout`: get_sources' time limit, all attempts (unset: the job timeout).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub get_sources_timeout: Option<GoDuration>,
    /// `[runners.artifact]`: kept verbatim; drover does not use it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Box<RawTable>>,
}

impl RunnerConfig {
    /// `request_concurrency`, at least 1.
    pub fn request_concurrency_or_default(&self) -> i64 {
        self.request_concurrency.max(1)
    }

    /// `unhealthy_requests_limit`, or 3 when below 1.
    pub fn unhealthy_requests_limit_or_default(&self) -> i64 {
        if self.unhealthy_requests_limit < 1 {
            3
        } else {
            self.unhealthy_requests_limit
        }
    }

    /// `unhealthy_interval`, or one hour when unset.
    pub fn unhealthy_interval_or_default(&self) -> GoDuration {
        self.unhealthy_interval
            .unwrap_or(GoDuration::from_secs(3600))
    }

    /// The value this runner sets for feature flag `name`, if it sets one.
    pub fn feature_flag(&self, name: &str) -> Option<bool> {
        self.feature_flags.get(name).copied()
    }
}
