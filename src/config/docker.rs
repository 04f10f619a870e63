//! `[runners.docker]`: how job containers are made on a machine's Docker Engine.
//!
//! Data only, with upstream's TOML key names. The executor reads it; nothing here talks to
//! Docker. For docker+machine, `host`, `tls_cert_path` and `tls_verify` are replaced by the
//! machine's own credentials at job time, as upstream does.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `[runners.docker]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DockerConfig {
    /// `host`: Docker endpoint (ignored for docker+machine).
    pub host: String,
    /// `tls_cert_path` (ignored for docker+machine).
    pub tls_cert_path: String,
    /// `tls_verify` (ignored for docker+machine).
    pub tls_verify: bool,
    /// `hostname`: custom container hostname.
    pub hostname: String,
    /// `image`: default job image.
    pub image: String,
    /// `runtime`.
    pub runtime: String,
    /// `memory`, e.g. `"2g"`.
    pub memory: String,
    /// `memory_swap`.
    pub memory_swap: String,
    /// `memory_reservation`.
    pub memory_reservation: String,
    /// `cgroup_parent`.
    pub cgroup_parent: String,
    /// `cpuset_cpus`.
    pub cpuset_cpus: String,
    /// `cpuset_mems`.
    pub cpuset_mems: String,
    /// `cpus`, a decimal number of CPUs as a string.
    pub cpus: String,
    /// `cpu_shares`.
    pub cpu_shares: i64,
    /// `dns`.
    pub dns: Vec<String>,
    /// `dns_search`.
    pub dns_search: Vec<String>,
    /// `privileged`.
    pub privileged: bool,
    /// `services_privileged` (defaults to `privileged`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub services_privileged: Option<bool>,
    /// `disable_entrypoint_overwrite`.
    pub disable_entrypoint_overwrite: bool,
    /// `user`.
    pub user: String,
    /// `allowed_users`.
    pub allowed_users: Vec<String>,
    /// `group_add`.
    pub group_add: Vec<String>,
    /// `userns_mode`.
    pub userns_mode: String,
    /// `cap_add`.
    pub cap_add: Vec<String>,
    /// `cap_drop`.
    pub cap_drop: Vec<String>,
    /// `oom_kill_disable`.
    pub oom_kill_disable: bool,
    /// `oom_score_adjust`.
    pub oom_score_adjust: i64,
    /// `security_opt`.
    pub security_opt: Vec<String>,
    /// `services_security_opt`.
    pub services_security_opt: Vec<String>,
    /// `devices`.
    pub devices: Vec<String>,
    /// `device_cgroup_rules`.
    pub device_cgroup_rules: Vec<String>,
    /// `gpus`.
    pub gpus: String,
    /// `services_devices`: image pattern → devices.
    pub services_devices: BTreeMap<String, Vec<String>>,
    /// `disable_cache`.
    pub disable_cache: bool,
    /// `volumes`.
    pub volumes: Vec<String>,
    /// `volume_driver`.
    pub volume_driver: String,
    /// `volume_driver_ops`.
    pub volume_driver_ops: BTreeMap<String, String>,
    /// `cache_dir`.
    pub cache_dir: String,
    /// `extra_hosts`.
    pub extra_hosts: Vec<String>,
    /// `volumes_from`.
    pub volumes_from: Vec<String>,
    /// `network_mode`.
    pub network_mode: String,
    /// `ipcmode`.
    pub ipcmode: String,
    /// `mac_address`.
    pub mac_address: String,
    /// `links`.
    pub links: Vec<String>,
    /// `[[runners.docker.services]]`.
    pub services: Vec<DockerService>,
    /// `services_limit` (unset means no limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub services_limit: Option<i64>,
    /// `service_memory`.
    pub service_memory: String,
    /// `service_memory_swap`.
    pub service_memory_swap: String,
    /// `service_memory_reservation`.
    pub service_memory_reservation: String,
    /// `service_cgroup_parent`.
    pub service_cgroup_parent: String,
    /// `service_slot_cgroup_template`.
    pub service_slot_cgroup_template: String,
    /// `service_cpuset_cpus`.
    pub service_cpuset_cpus: String,
    /// `service_cpus`.
    pub service_cpus: String,
    /// `service_cpu_shares`.
    pub service_cpu_shares: i64,
    /// `service_gpus`.
    pub service_gpus: String,
    /// `wait_for_services_timeout` in seconds (0 means upstream's default, 30).
    pub wait_for_services_timeout: i64,
    /// `allowed_images`.
    pub allowed_images: Vec<String>,
    /// `allowed_privileged_images`.
    pub allowed_privileged_images: Vec<String>,
    /// `allowed_privileged_services`.
    pub allowed_privileged_services: Vec<String>,
    /// `allowed_pull_policies`.
    pub allowed_pull_policies: Vec<String>,
    /// `allowed_services`.
    pub allowed_services: Vec<String>,
    /// `pull_policy`: a string or a list of strings upstream; always a list here.
    pub pull_policy: Vec<String>,
    /// `isolation` (Windows only).
    pub isolation: String,
    /// `shm_size` in bytes.
    pub shm_size: i64,
    /// `tmpfs`: path → mount options for the build container.
    pub tmpfs: BTreeMap<String, String>,
    /// `services_tmpfs`.
    pub services_tmpfs: BTreeMap<String, String>,
    /// `sysctls`.
    pub sysctls: BTreeMap<String, String>,
    /// `helper_image`.
    pub helper_image: String,
    /// `helper_image_flavor`.
    pub helper_image_flavor: String,
    /// `container_labels`.
    pub container_labels: BTreeMap<String, String>,
    /// `enable_ipv6`.
    pub enable_ipv6: bool,
    /// `ulimit`: name → `soft[:hard]`.
    pub ulimit: BTreeMap<String, String>,
    /// `network_mtu`.
    pub network_mtu: i64,
    /// `log_options`.
    pub log_options: BTreeMap<String, String>,
}

/// One `[[runners.docker.services]]` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DockerService {
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

impl DockerService {
    /// The aliases, split on spaces and commas.
    pub fn aliases(&self) -> Vec<&str> {
        self.alias
            .split([' ', ','])
            .filter(|s| !s.is_empty())
            .collect()
    }
}
