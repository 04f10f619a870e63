//! The part of a `[[runners]]` entry the executor reads, as plain values.
//!
//! This is the executor's narrow input edge: the manager (or `drover exec-job`) builds it from
//! the loaded `config.toml` (see [`RunnerSettings::from_config`]), so the executor never parses
//! configuration itself and its tests can build settings directly. Defaults are upstream's.

use std::collections::BTreeMap;

/// What the runner's connection to GitLab trusts, as the job gets it (`CI_SERVER_TLS_*` and git's
/// `http.<host>.ssl*`): the CA file (`tls-ca-file` or `certs/<host>.crt`) and the client
/// certificate and key (`tls-cert-file`/`tls-key-file` or `certs/<host>.auth.crt|key`), as PEM.
/// Empty: not configured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsData {
    /// CA certificates (PEM).
    pub ca_chain: String,
    /// Client certificate (PEM).
    pub auth_cert: String,
    /// Client key (PEM).
    pub auth_key: String,
}

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
    /// `clean_git_config` (`None`: clean unless `GIT_STRATEGY=none`).
    pub clean_git_config: Option<bool>,
    /// `clone_url` (empty: the repository URL GitLab sends).
    pub clone_url: String,
    /// The TLS files of the connection to GitLab, for the job (set by the manager).
    pub tls: TlsData,
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
    /// `debug_trace_disabled`: ignore `CI_DEBUG_TRACE`.
    pub debug_trace_disabled: bool,
    /// `[runners.docker]`.
    pub docker: DockerSettings,
    /// Whether the runner's config has no `[runners.docker]` section at all (its jobs fail as
    /// a configuration error, as upstream's do).
    pub docker_section_missing: bool,
    /// `[runners.cache]` (the distributed cache; `None`: local archives only).
    pub cache: Option<crate::config::cache::CacheConfig>,
    /// `prepare_timeout` (`None`: the job timeout).
    pub prepare_timeout: Option<crate::config::GoDuration>,
    /// `get_sources_timeout` (`None`: the job timeout).
    pub get_sources_timeout: Option<crate::config::GoDuration>,
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
    /// `memory_swap` in bytes.
    pub memory_swap: Option<i64>,
    /// `memory_reservation` in bytes.
    pub memory_reservation: Option<i64>,
    /// `cpu_shares`.
    pub cpu_shares: Option<i64>,
    /// `cpuset_cpus`.
    pub cpuset_cpus: Option<String>,
    /// `cpuset_mems`.
    pub cpuset_mems: Option<String>,
    /// `cgroup_parent`.
    pub cgroup_parent: Option<String>,
    /// `group_add`.
    pub group_add: Vec<String>,
    /// `oom_kill_disable`.
    pub oom_kill_disable: bool,
    /// `oom_score_adjust`.
    pub oom_score_adjust: Option<i64>,
    /// `ipcmode`.
    pub ipcmode: Option<String>,
    /// `links`.
    pub links: Vec<String>,
    /// `runtime`.
    pub runtime: Option<String>,
    /// `userns_mode`.
    pub userns_mode: Option<String>,
    /// `devices` (`host[:container[:permissions]]`).
    pub devices: Vec<String>,
    /// `ulimit` (name → `soft[:hard]`).
    pub ulimit: BTreeMap<String, String>,
    /// `pid_mode` (build container only).
    pub pid_mode: Option<String>,
    /// `gpus` (Docker CLI `--gpus` syntax).
    pub gpus: Option<String>,
    /// `device_cgroup_rules`.
    pub device_cgroup_rules: Vec<String>,
    /// `mac_address` (applied on Engine API 1.44 and later).
    pub mac_address: Option<String>,
    /// `log_options` for the `json-file` log driver (`env` and `labels` only).
    pub log_options: BTreeMap<String, String>,
    /// `volume_keep`: keep containers' anonymous volumes when they are removed.
    pub volume_keep: bool,
    /// `volume_driver_ops`: options of the volumes drover creates.
    pub volume_driver_ops: BTreeMap<String, String>,
    /// `isolation` (only the default is valid on Linux).
    pub isolation: Option<String>,
    /// The service settings (`[[runners.docker.services]]`, `services_*`, `service_*`).
    pub services: ServiceSettings,
}

/// One `[[runners.docker.services]]` entry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigService {
    /// `name`: the service image.
    pub name: String,
    /// `alias`: space- or comma-separated aliases.
    pub alias: String,
    /// `command`.
    pub command: Vec<String>,
    /// `entrypoint`.
    pub entrypoint: Vec<String>,
    /// `environment`: `KEY=value` entries.
    pub environment: Vec<String>,
}

/// `[runners.docker]` settings for services and the per-build network.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceSettings {
    /// `[[runners.docker.services]]` (started for every job, not checked against
    /// `allowed_services`).
    pub services: Vec<ConfigService>,
    /// `services_limit` (unset or negative: no limit).
    pub limit: Option<i64>,
    /// `wait_for_services_timeout` in seconds (0: 30; negative: no health check).
    pub wait_timeout: i64,
    /// `allowed_services` (doublestar globs; empty = any).
    pub allowed: Vec<String>,
    /// `services_privileged` (unset: `privileged`).
    pub privileged: Option<bool>,
    /// `allowed_privileged_services` (empty = all).
    pub allowed_privileged: Vec<String>,
    /// `services_security_opt`.
    pub security_opt: Vec<String>,
    /// `services_tmpfs`.
    pub tmpfs: BTreeMap<String, String>,
    /// `service_memory` in bytes.
    pub memory: Option<i64>,
    /// `service_memory_swap` in bytes.
    pub memory_swap: Option<i64>,
    /// `service_memory_reservation` in bytes.
    pub memory_reservation: Option<i64>,
    /// `service_cpus`.
    pub cpus: Option<String>,
    /// `service_cpu_shares`.
    pub cpu_shares: Option<i64>,
    /// `service_cpuset_cpus`.
    pub cpuset_cpus: Option<String>,
    /// `service_cgroup_parent`.
    pub cgroup_parent: Option<String>,
    /// `network_mtu` of the per-build network (0: Docker's default).
    pub network_mtu: i64,
    /// `enable_ipv6` on the per-build network.
    pub enable_ipv6: bool,
    /// `service_gpus`.
    pub gpus: Option<String>,
    /// `services_devices`: image glob → devices.
    pub devices: BTreeMap<String, Vec<String>>,
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

fn non_empty(s: &str) -> Option<String> {
    (!s.trim().is_empty()).then(|| s.to_string())
}

/// Parses a Docker memory size (`512m`, `2g`, `1024`), binary units as Docker's `RAMInBytes`.
pub fn parse_memory(s: &str) -> Option<i64> {
    let s = s.trim().to_ascii_lowercase();
    if s.is_empty() {
        return None;
    }
    let digits = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let n: f64 = s[..digits].parse().ok()?;
    let factor: f64 = match s[digits..].trim() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    let v = n * factor;
    (v.is_finite() && v >= 0.0 && v < i64::MAX as f64).then_some(v as i64)
}

impl RunnerSettings {
    /// The settings of one `[[runners]]` entry of a loaded `config.toml`. `system_id` is the
    /// runner's system ID (from `.runner_system_id`; may be empty).
    pub fn from_config(r: &crate::config::model::RunnerConfig, system_id: &str) -> Self {
        let d = r.docker.clone().unwrap_or_default();
        RunnerSettings {
            name: r.name.clone(),
            token: r.token.clone(),
            url: r.url.clone(),
            executor: r.executor.clone(),
            system_id: system_id.to_string(),
            output_limit_kib: u64::try_from(r.output_limit).ok().filter(|v| *v > 0),
            environment: r.environment.clone(),
            builds_dir: non_empty(&r.builds_dir),
            cache_dir: non_empty(&r.cache_dir),
            custom_build_dir_enabled: r.custom_build_dir.enabled,
            clean_git_config: r.clean_git_config,
            clone_url: r.clone_url.clone(),
            tls: TlsData::default(),
            pre_get_sources_script: non_empty(&r.pre_get_sources_script),
            post_get_sources_script: non_empty(&r.post_get_sources_script),
            pre_build_script: non_empty(&r.pre_build_script),
            post_build_script: non_empty(&r.post_build_script),
            feature_flags: r.feature_flags.clone(),
            debug_trace_disabled: r.debug_trace_disabled,
            cache: r.cache.as_deref().cloned(),
            prepare_timeout: r.prepare_timeout,
            get_sources_timeout: r.get_sources_timeout,
            docker_section_missing: r.docker.is_none(),
            docker: DockerSettings {
                image: d.image.clone(),
                helper_image: non_empty(&d.helper_image),
                helper_image_flavor: non_empty(&d.helper_image_flavor),
                pull_policy: d.pull_policy.clone(),
                allowed_pull_policies: d.allowed_pull_policies.clone(),
                allowed_images: d.allowed_images.clone(),
                volumes: d.volumes.clone(),
                disable_cache: d.disable_cache,
                cache_dir: non_empty(&d.cache_dir),
                network_mode: non_empty(&d.network_mode),
                privileged: d.privileged,
                allowed_privileged_images: d.allowed_privileged_images.clone(),
                user: non_empty(&d.user),
                allowed_users: d.allowed_users.clone(),
                hostname: non_empty(&d.hostname),
                extra_hosts: d.extra_hosts.clone(),
                dns: d.dns.clone(),
                dns_search: d.dns_search.clone(),
                cap_add: d.cap_add.clone(),
                cap_drop: d.cap_drop.clone(),
                security_opt: d.security_opt.clone(),
                shm_size: (d.shm_size > 0).then_some(d.shm_size),
                memory: parse_memory(&d.memory),
                cpus: non_empty(&d.cpus),
                disable_entrypoint_overwrite: d.disable_entrypoint_overwrite,
                volume_driver: non_empty(&d.volume_driver),
                volumes_from: d.volumes_from.clone(),
                container_labels: d.container_labels.clone(),
                tmpfs: d.tmpfs.clone(),
                sysctls: d.sysctls.clone(),
                memory_swap: parse_memory(&d.memory_swap),
                memory_reservation: parse_memory(&d.memory_reservation),
                cpu_shares: (d.cpu_shares > 0).then_some(d.cpu_shares),
                cpuset_cpus: non_empty(&d.cpuset_cpus),
                cpuset_mems: non_empty(&d.cpuset_mems),
                cgroup_parent: non_empty(&d.cgroup_parent),
                group_add: d.group_add.clone(),
                oom_kill_disable: d.oom_kill_disable,
                oom_score_adjust: (d.oom_score_adjust != 0).then_some(d.oom_score_adjust),
                ipcmode: non_empty(&d.ipcmode),
                links: d.links.clone(),
                runtime: non_empty(&d.runtime),
                userns_mode: non_empty(&d.userns_mode),
                devices: d.devices.clone(),
                ulimit: d.ulimit.clone(),
                pid_mode: non_empty(&d.pid_mode),
                gpus: non_empty(&d.gpus),
                device_cgroup_rules: d.device_cgroup_rules.clone(),
                mac_address: non_empty(&d.mac_address),
                log_options: d.log_options.clone(),
                volume_keep: d.volume_keep,
                volume_driver_ops: d.volume_driver_ops.clone(),
                isolation: non_empty(&d.isolation),
                services: ServiceSettings {
                    services: d
                        .services
                        .iter()
                        .map(|s| ConfigService {
                            name: s.name.clone(),
                            alias: s.alias.clone(),
                            command: s.command.clone(),
                            entrypoint: s.entrypoint.clone(),
                            environment: s.environment.clone(),
                        })
                        .collect(),
                    limit: d.services_limit,
                    wait_timeout: d.wait_for_services_timeout,
                    allowed: d.allowed_services.clone(),
                    privileged: d.services_privileged,
                    allowed_privileged: d.allowed_privileged_services.clone(),
                    security_opt: d.services_security_opt.clone(),
                    tmpfs: d.services_tmpfs.clone(),
                    memory: parse_memory(&d.service_memory),
                    memory_swap: parse_memory(&d.service_memory_swap),
                    memory_reservation: parse_memory(&d.service_memory_reservation),
                    cpus: non_empty(&d.service_cpus),
                    cpu_shares: (d.service_cpu_shares > 0).then_some(d.service_cpu_shares),
                    cpuset_cpus: non_empty(&d.service_cpuset_cpus),
                    cgroup_parent: non_empty(&d.service_cgroup_parent),
                    network_mtu: d.network_mtu,
                    enable_ipv6: d.enable_ipv6,
                    gpus: non_empty(&d.service_gpus),
                    devices: d.services_devices.clone(),
                },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_sizes() {
        assert_eq!(parse_memory("512m"), Some(512 * 1024 * 1024));
        assert_eq!(parse_memory("1024"), Some(1024));
        assert_eq!(parse_memory("1.5g"), Some(1536 * 1024 * 1024));
        assert_eq!(parse_memory("lots"), None);
    }

    #[test]
    fn from_loaded_config() {
        let text = r#"
[[runners]]
  name = "r1"
  url = "https://gitlab.example.com"
  token = "glrt-abcdefghijk"
  executor = "docker+machine"
  output_limit = 8192
  [runners.docker]
    image = "alpine:3"
    volumes = ["/cache"]
    pull_policy = ["if-not-present"]
    memory = "1g"
"#;
        let loaded = crate::config::load_str(text, "config.toml").unwrap();
        let s = RunnerSettings::from_config(&loaded.config.runners[0], "s_1");
        assert_eq!(s.name, "r1");
        assert_eq!(s.output_limit_bytes(), 8192 * 1024);
        assert_eq!(s.docker.image, "alpine:3");
        assert_eq!(s.docker.volumes, vec!["/cache"]);
        assert_eq!(s.docker.memory, Some(1024 * 1024 * 1024));
        assert_eq!(s.builds_dir(), "/builds");
    }
}
