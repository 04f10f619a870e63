//! Services of one job (upstream's `services.go`): the definitions from
//! `[[runners.docker.services]]` and from the job, their names, aliases and containers, the
//! name of the per-build network (`FF_NETWORK_PER_BUILD`; `networks` makes it), the link emulation on the default bridge
//! (`alias:ip` entries in the helper's and build container's `ExtraHosts`), and the
//! wait-for-services check, which runs the helper's `health-check` in a short-lived container
//! per service and only ever warns.
//!
//! The pure parts ([`definitions`], [`parse_name`], [`Aliases`], [`links`]) are unit-tested;
//! [`start`] and [`wait_for_services`] do the Engine work. Service
//! containers are recorded in the job's container list as soon as they exist, so cleanup
//! removes them on every path.
//!
//! Service containers get `services_devices` (by image glob) and `service_gpus`; on a
//! user-defined network (the per-build one or a named `network_mode`) they get their aliases.
//!
//! With `CI_DEBUG_SERVICES`, [`follow_logs`] streams each service's output (with Docker's
//! timestamps) into the job log, one grey `[service:<aliases>] ` line per line, as upstream.

use std::collections::HashMap;
use std::time::Duration;

use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, EndpointSettings, HostConfig, NetworkingConfig,
};
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, LogsOptions, StartContainerOptions,
    WaitContainerOptions,
};
use bollard::Docker;
use futures_util::StreamExt;
use tokio::time::Instant;

use crate::executor::containers::{force_remove, json_file_logging, nano_cpus, no_restart};
use crate::executor::error::{FailureReason, JobFailure, SystemError};
use crate::executor::glob;
use crate::executor::script::variables::VarList;
use crate::executor::settings::{DockerSettings, ServiceSettings};
use crate::job::Image;

/// The label prefix.
use crate::executor::labels::PREFIX;

/// Upstream's default `wait_for_services_timeout` (seconds).
pub const DEFAULT_WAIT_TIMEOUT: u64 = 30;
/// At most this many exposed ports are probed per service.
const MAX_PROBED_PORTS: usize = 20;
/// Service container logs shown in the unhealthy-service warning are capped at this size.
const MAX_LOG_BYTES: usize = 64 * 1024;

/// One service to start, its variables expanded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceDefinition {
    /// The image reference as given (variables expanded).
    pub image: String,
    /// User aliases (`alias:` split on spaces and commas).
    pub aliases: Vec<String>,
    /// `command:`.
    pub command: Vec<String>,
    /// `entrypoint:` (`None`: the image's).
    pub entrypoint: Option<Vec<String>>,
    /// `variables:` / `environment`, expanded against the job's variables.
    pub variables: Vec<(String, String)>,
    /// The service's own `pull_policy`.
    pub pull_policy: Vec<String>,
    /// The service's `docker: user`.
    pub user: Option<String>,
    /// The service's `docker: platform` (expanded), pulled and created for as upstream.
    pub platform: Option<String>,
}

fn split_aliases(s: &str) -> Vec<String> {
    s.split([' ', ','])
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect()
}

/// The services of a job in upstream's order: the runner's `[[runners.docker.services]]`
/// (internal, so not checked against `allowed_services`), then the job's, each checked against
/// `allowed_services`. More than `services_limit` fails the job.
pub fn definitions(
    settings: &ServiceSettings,
    job: &[Image],
    vars: &VarList,
) -> Result<Vec<ServiceDefinition>, JobFailure> {
    let mut out = Vec::new();
    // The config's own services are "internal": a job service with the same name is allowed
    // whatever `allowed_services` says, as upstream does.
    let mut internal: Vec<String> = Vec::new();
    for s in &settings.services {
        // A nameless entry is kept, as upstream keeps it: it counts toward `services_limit`,
        // starts nothing without aliases and fails the job with aliases ([`require_image`]).
        let image = vars.expand(&s.name);
        internal.push(image.clone());
        out.push(ServiceDefinition {
            image,
            aliases: split_aliases(&vars.expand(&s.alias)),
            command: s.command.clone(),
            entrypoint: (!s.entrypoint.is_empty()).then(|| s.entrypoint.clone()),
            variables: s
                .environment
                .iter()
                .filter_map(|e| {
                    let (k, v) = crate::executor::script::variables::parse_variable(e)?;
                    (!k.is_empty()).then(|| (k.to_string(), vars.expand(v)))
                })
                .collect(),
            pull_policy: Vec::new(),
            user: None,
            platform: None,
        });
    }
    for s in job {
        let image = vars.expand(&s.name);
        if image.is_empty() {
            continue;
        }
        if !settings.allowed.is_empty()
            && !glob::any_matches(&settings.allowed, &image)
            && !internal.contains(&image)
        {
            let rules: Vec<&str> = settings.allowed.iter().map(String::as_str).collect();
            return Err(crate::executor::image::disallowed(
                &image,
                crate::executor::image::AllowList::Services,
                &rules,
            ));
        }
        out.push(ServiceDefinition {
            image,
            aliases: split_aliases(&vars.expand(&s.alias)),
            command: s.command.clone(),
            entrypoint: s.entrypoint.clone(),
            variables: service_variables(&s.variables, vars),
            pull_policy: s.pull_policy.clone(),
            user: Some(vars.expand(&s.executor_opts.docker.user)).filter(|u| !u.is_empty()),
            platform: Some(vars.expand(&s.executor_opts.docker.platform)).filter(|p| !p.is_empty()),
        });
    }
    if let Some(limit) = settings.limit.filter(|l| *l >= 0) {
        if out.len() as i64 > limit {
            return Err(JobFailure::new(
                FailureReason::RunnerConfigurationError,
                format!(
                    "too many services requested: {}, only {limit} allowed (services_limit); \
                     ask the runner's operator to raise services_limit or use fewer services",
                    out.len()
                ),
            ));
        }
    }
    Ok(out)
}

/// A job service's `variables:` as upstream expands them: against the job's variables plus the
/// service's own (so `SB: x-$SA` sees `SA`, and a dotenv or project variable may be named on
/// purpose), `raw: true` ones kept as written.
fn service_variables(own: &[crate::job::JobVariable], vars: &VarList) -> Vec<(String, String)> {
    let mut source = vars.clone();
    source
        .vars
        .extend(own.iter().map(|v| crate::executor::script::variables::Var {
            key: v.key.clone(),
            value: v.value.clone(),
            raw: v.raw,
            ..Default::default()
        }));
    own.iter()
        .filter(|v| !v.key.is_empty())
        .map(|v| {
            let value = if v.raw {
                v.value.clone()
            } else {
                source.expand(&v.value)
            };
            (v.key.clone(), value)
        })
        .collect()
}

/// A parsed service image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceName {
    /// Registry (without port) plus path, without tag or digest: `registry.example.com/g/pg`.
    pub service: String,
    /// Tag, digest or `latest`.
    pub version: String,
    /// The reference to pull (`:latest` added when it has no tag or digest).
    pub image: String,
}

/// Parses `registry[:port]/path[:tag][@digest]` as upstream does: the service is the registry
/// without its port plus the path; the version is the tag, else `@<digest>`, else `latest`
/// (then `:latest` is added to the reference pulled).
pub fn parse_name(image: &str) -> ServiceName {
    if image.is_empty() {
        return ServiceName {
            service: String::new(),
            version: "latest".into(),
            image: String::new(),
        };
    }
    let (named, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last_slash = named.rfind('/').map(|i| i + 1).unwrap_or(0);
    let (repo, tag) = match named[last_slash..].rfind(':') {
        Some(i) => (&named[..last_slash + i], Some(&named[last_slash + i + 1..])),
        None => (named, None),
    };
    let service = match repo.split_once('/') {
        Some((first, rest)) => {
            let host = match first.split_once(':') {
                Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
                _ => first,
            };
            format!("{host}/{rest}")
        }
        None => repo.to_string(),
    };
    let (version, image) = match (tag, digest) {
        (Some(t), _) => (t.to_string(), image.to_string()),
        (None, Some(d)) => (format!("@{d}"), image.to_string()),
        (None, None) => ("latest".to_string(), format!("{image}:latest")),
    };
    ServiceName {
        service,
        version,
        image,
    }
}

impl ServiceName {
    /// The default aliases: `/` as `__`, and, if different, `/` as `-`; none for an empty
    /// image reference.
    pub fn default_aliases(&self) -> Vec<String> {
        if self.service.is_empty() {
            return Vec::new();
        }
        let a = self.service.replace('/', "__");
        let b = self.service.replace('/', "-");
        if a == b {
            vec![a]
        } else {
            vec![a, b]
        }
    }

    /// The container name part: the service path with `/` as `__`.
    pub fn slug(&self) -> String {
        self.service.replace('/', "__")
    }
}

/// Refuses to start a service whose image reference names no image (a nameless
/// `[[runners.docker.services]]` entry that has aliases), as upstream refuses it: the job fails
/// with a configuration error.
pub fn require_image(name: &ServiceName, def: &ServiceDefinition) -> Result<(), JobFailure> {
    if !name.service.is_empty() {
        return Ok(());
    }
    Err(JobFailure::new(
        FailureReason::RunnerConfigurationError,
        format!(
            "invalid service image name {:?} (aliases {}): give every [[runners.docker.services]] \
             entry a name, or remove the entry",
            def.image,
            def.aliases.join(", ")
        ),
    ))
}

/// The aliases taken so far in a job; a later service asking for a taken alias loses it.
#[derive(Debug, Default)]
pub struct Aliases(Vec<String>);

impl Aliases {
    /// The aliases of `def` (the job's `index`th service) not yet taken (default ones first),
    /// with one warning per alias skipped.
    pub fn claim(
        &mut self,
        name: &ServiceName,
        def: &ServiceDefinition,
        index: usize,
    ) -> (Vec<String>, Vec<String>) {
        let mut mine = Vec::new();
        let mut warnings = Vec::new();
        for a in name
            .default_aliases()
            .into_iter()
            .chain(def.aliases.iter().cloned())
        {
            if mine.contains(&a) {
                continue;
            }
            if self.0.contains(&a) {
                warnings.push(format!(
                    "Skipping alias {a:?} for service {:?} (services[{index}]): alias is already \
                     in use by another service.",
                    def.image
                ));
                continue;
            }
            self.0.push(a.clone());
            mine.push(a);
        }
        (mine, warnings)
    }
}

/// A started service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartedService {
    /// The image as the job named it.
    pub image: String,
    /// The container ID.
    pub id: String,
    /// The container name.
    pub container_name: String,
    /// Its aliases.
    pub aliases: Vec<String>,
    /// Its IP addresses (IPv4, then global IPv6).
    pub ips: Vec<String>,
    /// The TCP ports the health check probes.
    pub ports: Vec<u16>,
}

impl StartedService {
    /// The first 12 characters of the container ID.
    pub fn short_id(&self) -> &str {
        self.id.get(..12).unwrap_or(&self.id)
    }
}

/// The link emulation on the default bridge: an `alias:ip` entry per alias and IP, and, as
/// upstream adds, the container's 12-character ID as a host name too.
pub fn links(services: &[StartedService]) -> Vec<String> {
    services
        .iter()
        .flat_map(|s| {
            std::iter::once(s.short_id())
                .chain(s.aliases.iter().map(String::as_str))
                .flat_map(move |a| s.ips.iter().map(move |ip| format!("{a}:{ip}")))
        })
        .collect()
}

/// The IPs and the ports to probe of an inspected service container: the first
/// `HEALTHCHECK_TCP_PORT` of its environment (name compared case-insensitively) if set (a value
/// that is not a port is an error, as upstream), else its exposed TCP ports, sorted, at most 20.
pub fn ips_and_ports(
    inspect: &ContainerInspectResponse,
) -> Result<(Vec<String>, Vec<u16>), String> {
    let mut ips = Vec::new();
    if let Some(networks) = inspect
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.as_ref())
    {
        let mut names: Vec<&String> = networks.keys().collect();
        names.sort();
        for n in names {
            let ep = &networks[n];
            if let Some(ip) = ep.ip_address.as_ref().filter(|i| !i.is_empty()) {
                ips.push(ip.clone());
            }
            if let Some(ip) = ep.global_ipv6_address.as_ref().filter(|i| !i.is_empty()) {
                ips.push(ip.clone());
            }
        }
    }
    let config = inspect.config.as_ref();
    let from_env = config
        .and_then(|c| c.env.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|e| e.split_once('='))
        .find(|(k, _)| k.eq_ignore_ascii_case("HEALTHCHECK_TCP_PORT"))
        .map(|(_, v)| {
            v.parse::<u16>()
                .map_err(|_| format!("invalid health check tcp port: {v}"))
        })
        .transpose()?;
    let ports = match from_env {
        Some(p) => vec![p],
        None => {
            let mut ports: Vec<u16> = config
                .and_then(|c| c.exposed_ports.as_ref())
                .into_iter()
                .flat_map(|m| m.keys())
                .filter_map(|k| {
                    let (port, proto) = k.split_once('/').unwrap_or((k.as_str(), "tcp"));
                    (proto == "tcp").then(|| port.parse::<u16>().ok()).flatten()
                })
                .collect();
            ports.sort_unstable();
            ports.dedup();
            ports.truncate(MAX_PROBED_PORTS);
            ports
        }
    };
    Ok((ips, ports))
}

/// The per-build network's name: `runner-<short>-<project>-<project slot>-<job>`, DNS-cleaned.
pub fn network_name(short: &str, project_id: i64, slot: usize, job_id: i64) -> String {
    crate::executor::paths::dns_clean(&format!("runner-{short}-{project_id}-{slot}-{job_id}"))
}

/// The service containers' environment: the job's public and runner-internal definitions
/// (a key with a public default and a secret project value gets the public one; secret-only
/// keys stay out), then the service's own.
pub fn service_env(vars: &VarList, def: &ServiceDefinition) -> Vec<String> {
    let mut env = vars.public_or_internal().env();
    env.extend(def.variables.iter().map(|(k, v)| format!("{k}={v}")));
    env
}

/// A service container's host config: the `service_*` resources, `services_privileged` with
/// `allowed_privileged_services`, DNS and `extra_hosts` from config (no link entries), the
/// same binds as the build container, and the job's network mode.
pub fn host_config(
    ds: &DockerSettings,
    image: &str,
    binds: &[String],
    network_mode: Option<&str>,
) -> HostConfig {
    let s = &ds.services;
    let none_if_empty = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
    let privileged = s.privileged.unwrap_or(ds.privileged)
        && (s.allowed_privileged.is_empty() || glob::any_matches(&s.allowed_privileged, image));
    HostConfig {
        binds: Some(binds.to_vec()),
        network_mode: network_mode.map(str::to_string),
        privileged: Some(privileged),
        extra_hosts: none_if_empty(&ds.extra_hosts),
        dns: none_if_empty(&ds.dns),
        dns_search: none_if_empty(&ds.dns_search),
        security_opt: none_if_empty(&s.security_opt),
        tmpfs: (!s.tmpfs.is_empty()).then(|| s.tmpfs.clone().into_iter().collect()),
        shm_size: ds.shm_size,
        memory: s.memory,
        memory_swap: s.memory_swap,
        memory_reservation: s.memory_reservation,
        nano_cpus: s.cpus.as_deref().and_then(nano_cpus),
        cpu_shares: s.cpu_shares,
        cpuset_cpus: s.cpuset_cpus.clone(),
        cgroup_parent: s.cgroup_parent.clone(),
        runtime: ds.runtime.clone(),
        userns_mode: ds.userns_mode.clone(),
        restart_policy: Some(no_restart()),
        log_config: Some(json_file_logging(&ds.log_options)),
        isolation: crate::executor::containers::isolation(ds.isolation.as_deref()),
        devices: {
            let devices: Vec<_> = s
                .devices
                .iter()
                .filter(|(pattern, _)| glob::matches(pattern, image))
                .flat_map(|(_, list)| list.iter().map(|d| crate::executor::containers::device(d)))
                .collect();
            (!devices.is_empty()).then_some(devices)
        },
        device_requests: s
            .gpus
            .as_deref()
            .and_then(|g| crate::executor::docker_options::parse_gpus(g).ok())
            .map(|r| vec![r]),
        ..Default::default()
    }
}

/// The network a job's containers join.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobNetwork {
    /// The network mode for every container (`None`: the default bridge).
    pub mode: Option<String>,
    /// Whether it is the per-build network.
    pub per_build: bool,
    /// `mac_address`, set on the endpoint on Engine API 1.44 and later.
    pub mac_address: Option<String>,
    /// Whether the Engine's API is older than 1.44 (the legacy endpoint form, no MAC).
    pub legacy_api: bool,
}

/// Whether an Engine of API version `version` (`1.41`) takes the legacy endpoint form, older
/// than 1.44, where no MAC address can be set (an unparsable version counts as older).
pub fn legacy_endpoint_api(version: &str) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) < (1, 44),
        _ => true,
    }
}

impl JobNetwork {
    /// Upstream's job-log warning when `mac_address` is set but the Engine's API is older than
    /// 1.44, so it cannot be applied.
    pub fn legacy_mac_warning(&self) -> Option<&'static str> {
        (self.legacy_api && self.mac_address.is_some()).then_some(
            "mac_address is configured, but the Docker daemon's API version is older than 1.44; \
             it cannot be applied to this container",
        )
    }

    /// Whether the network mode names a user-defined network (not the default bridge,
    /// `host`, `none` or another container's network): containers get aliases there.
    pub fn user_defined(&self) -> bool {
        match self.mode.as_deref() {
            None | Some("") | Some("default") | Some("bridge") | Some("host") | Some("none") => {
                false
            }
            Some(m) => !m.starts_with("container:"),
        }
    }

    /// The networking config, as upstream builds it: on a user-defined network the endpoint
    /// carries `aliases`; on API 1.44 and later the endpoint (keyed `default` on the default
    /// bridge) carries `mac_address`.
    pub fn endpoint(&self, aliases: Vec<String>) -> Option<NetworkingConfig> {
        let user_defined = self.user_defined();
        let key = match self.mode.as_deref() {
            None | Some("") => "default".to_string(),
            Some(m) => m.to_string(),
        };
        if self.legacy_api && !user_defined {
            return None;
        }
        let settings = EndpointSettings {
            aliases: user_defined.then_some(aliases),
            mac_address: if self.legacy_api {
                None
            } else {
                self.mac_address.clone()
            },
            ..Default::default()
        };
        Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(key, settings)])),
        })
    }

    /// Whether services are reached through `ExtraHosts` links (the default bridge only).
    pub fn needs_links(&self) -> bool {
        !self.per_build
            && matches!(
                self.mode.as_deref(),
                None | Some("") | Some("bridge") | Some("default")
            )
    }
}

/// What [`start`] needs besides the definitions.
#[derive(Debug, Clone)]
pub struct StartInputs<'a> {
    /// The per-job random name (services are `<it>-<slug>-<index>`).
    pub random_name: &'a str,
    /// The default labels (no `type`).
    pub labels: &'a HashMap<String, String>,
    /// `container_labels`, variables expanded.
    pub container_labels: &'a HashMap<String, String>,
    /// The build container's binds.
    pub binds: &'a [String],
    /// The job's network.
    pub network: &'a JobNetwork,
    /// `[runners.docker]`.
    pub settings: &'a DockerSettings,
    /// How long to wait for a service to leave the `created` state.
    pub wait_timeout: Duration,
}

/// What one service needs to be created: its definition, pulled image and environment.
#[derive(Debug, Clone)]
pub struct ServiceToStart {
    /// The definition.
    pub def: ServiceDefinition,
    /// Its parsed name.
    pub name: ServiceName,
    /// The image reference to create from (digest or ID).
    pub image_ref: String,
    /// The platform to create the container for (the image's own, when the service asked for
    /// one).
    pub platform: Option<String>,
    /// Its aliases (default and user, minus taken ones).
    pub aliases: Vec<String>,
    /// `KEY=VALUE` environment.
    pub env: Vec<String>,
}

/// Creates and starts one service container (recording its ID in `created` as soon as it
/// exists), then waits for it to leave the `created` state and reads its IPs and ports.
pub async fn start(
    docker: &Docker,
    index: usize,
    svc: &ServiceToStart,
    i: &StartInputs<'_>,
    created: &mut Vec<String>,
) -> Result<StartedService, crate::executor::containers::JobOrSystem> {
    let container_name = format!("{}-{}-{index}", i.random_name, svc.name.slug());
    force_remove(docker, &container_name)
        .await
        .map_err(|e| SystemError::docker(format!("remove stale container {container_name}"), e))?;
    let mut labels = i.labels.clone();
    labels.insert(format!("{PREFIX}type"), "service".into());
    labels.insert(format!("{PREFIX}service"), svc.name.service.clone());
    labels.insert(format!("{PREFIX}service.version"), svc.name.version.clone());
    for (k, v) in i.container_labels {
        labels.insert(k.clone(), v.clone());
        labels.insert(format!("{PREFIX}{k}"), v.clone());
    }
    let entrypoint = if i.settings.disable_entrypoint_overwrite {
        None
    } else {
        svc.def.entrypoint.clone()
    };
    let body = ContainerCreateBody {
        image: Some(svc.image_ref.clone()),
        cmd: (!svc.def.command.is_empty()).then(|| svc.def.command.clone()),
        entrypoint,
        user: svc.def.user.clone(),
        env: Some(svc.env.clone()),
        labels: Some(labels),
        tty: Some(false),
        open_stdin: Some(false),
        host_config: Some(host_config(
            i.settings,
            &svc.def.image,
            i.binds,
            i.network.mode.as_deref(),
        )),
        networking_config: i.network.endpoint(svc.aliases.clone()),
        ..Default::default()
    };
    let id = docker
        .create_container(
            Some(CreateContainerOptions {
                name: Some(container_name.clone()),
                platform: svc.platform.clone().unwrap_or_default(),
            }),
            body,
        )
        .await
        .map_err(|e| {
            crate::executor::containers::create_error(
                &format!("service container {container_name}"),
                e,
            )
        })?
        .id;
    created.push(id.clone());
    docker
        .start_container(&id, None::<StartContainerOptions>)
        .await
        .map_err(|e| SystemError::docker(format!("start service container {container_name}"), e))?;
    let deadline = Instant::now() + i.wait_timeout;
    let inspect = loop {
        let inspect = docker
            .inspect_container(&id, None::<InspectContainerOptions>)
            .await
            .map_err(|e| {
                SystemError::docker(format!("inspect service container {container_name}"), e)
            })?;
        let created_state = inspect
            .state
            .as_ref()
            .and_then(|s| s.status)
            .is_some_and(|s| s == bollard::models::ContainerStateStatusEnum::CREATED);
        if !created_state {
            break inspect;
        }
        if Instant::now() >= deadline {
            return Err(SystemError::Engine(format!(
                "service container {container_name} did not start within {}s",
                i.wait_timeout.as_secs()
            ))
            .into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let (ips, ports) = ips_and_ports(&inspect)
        .map_err(|why| SystemError::Engine(format!("service {container_name}: {why}")))?;
    Ok(StartedService {
        image: svc.def.image.clone(),
        id,
        container_name,
        aliases: svc.aliases.clone(),
        ips,
        ports,
    })
}

/// The health-check timeout from `wait_for_services_timeout` (`None`: skip the check).
pub fn wait_timeout(setting: i64) -> Option<Duration> {
    match setting {
        s if s < 0 => None,
        0 => Some(Duration::from_secs(DEFAULT_WAIT_TIMEOUT)),
        s => Some(Duration::from_secs(s.unsigned_abs())),
    }
}

/// What the health check of one service found.
#[derive(Debug)]
struct Unhealthy {
    error: String,
    check_logs: String,
}

/// Runs the health checks of all services in parallel (each in a container from the helper
/// image running `gitlab-runner-helper health-check`), and returns one warning block per
/// service that did not answer in time. Never fails the job.
pub async fn wait_for_services(
    docker: &Docker,
    services: &[StartedService],
    helper_image: &str,
    labels: &HashMap<String, String>,
    network: &JobNetwork,
    timeout: Duration,
) -> Vec<String> {
    let started = Instant::now();
    let deadline = started + timeout;
    let checks = services.iter().map(|s| async move {
        let r = health_check(docker, s, helper_image, labels, network, deadline).await;
        (s, r)
    });
    let results = futures_util::future::join_all(checks).await;
    let mut blocks = Vec::new();
    let mut any_failed = false;
    for (service, result) in results {
        let Err(unhealthy) = result else { continue };
        if !any_failed {
            any_failed = true;
            // Upstream waits out what is left of the timeout (at most 10 s) before it reports.
            let rest = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_secs(10));
            tokio::time::sleep(rest).await;
        }
        let service_logs = container_logs(docker, &service.id, true).await;
        blocks.push(warning_block(service, &unhealthy, &service_logs));
    }
    blocks
}

fn warning_block(service: &StartedService, u: &Unhealthy, service_logs: &str) -> String {
    let mut b = String::new();
    b.push_str(&format!(
        "*** WARNING: Service {} probably didn't start properly.\n\n",
        service.container_name
    ));
    b.push_str("Health check error:\n");
    b.push_str(u.error.trim_end());
    b.push_str("\n\nHealth check container logs:\n");
    b.push_str(u.check_logs.trim_end());
    b.push_str("\n\nService container logs:\n");
    b.push_str(service_logs.trim_end());
    b.push_str("\n\n*********");
    b
}

async fn health_check(
    docker: &Docker,
    service: &StartedService,
    helper_image: &str,
    labels: &HashMap<String, String>,
    network: &JobNetwork,
    deadline: Instant,
) -> Result<(), Unhealthy> {
    let fail = |error: String| Unhealthy {
        error,
        check_logs: String::new(),
    };
    if service.ports.is_empty() {
        return Err(fail(format!(
            "service {} has no exposed TCP port to check (set HEALTHCHECK_TCP_PORT or EXPOSE one)",
            service.container_name
        )));
    }
    let Some(ip) = service.ips.first() else {
        return Err(fail(format!(
            "service {} has no IP address on the job's network",
            service.container_name
        )));
    };
    let name = format!("{}-wait-for-service", service.container_name);
    let short = service.short_id().to_string();
    let mut env = vec![format!("WAIT_FOR_SERVICE_TCP_ADDR={short}")];
    env.extend(
        service
            .ports
            .iter()
            .map(|p| format!("WAIT_FOR_SERVICE_{p}_TCP_PORT={p}")),
    );
    let mut labels = labels.clone();
    labels.insert(format!("{PREFIX}type"), "wait".into());
    labels.insert(format!("{PREFIX}wait"), service.id.clone());
    let body = ContainerCreateBody {
        image: Some(helper_image.to_string()),
        cmd: Some(vec!["gitlab-runner-helper".into(), "health-check".into()]),
        env: Some(env),
        labels: Some(labels),
        host_config: Some(HostConfig {
            restart_policy: Some(no_restart()),
            extra_hosts: Some(vec![format!("{short}:{ip}")]),
            network_mode: network.mode.clone(),
            log_config: Some(json_file_logging(&Default::default())),
            ..Default::default()
        }),
        ..Default::default()
    };
    if let Err(e) = force_remove(docker, &name).await {
        return Err(fail(format!("removing stale container {name}: {e}")));
    }
    let id = match docker
        .create_container(
            Some(CreateContainerOptions {
                name: Some(name.clone()),
                platform: String::new(),
            }),
            body,
        )
        .await
    {
        Ok(c) => c.id,
        Err(e) => return Err(fail(format!("creating health-check container {name}: {e}"))),
    };
    let result = async {
        docker
            .start_container(&id, None::<StartContainerOptions>)
            .await
            .map_err(|e| format!("starting health-check container {name}: {e}"))?;
        let mut wait = docker.wait_container(
            &id,
            Some(WaitContainerOptions {
                condition: "not-running".into(),
            }),
        );
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, wait.next()).await {
            Err(_) => Err(format!(
                "service {} did not accept a TCP connection on port(s) {} in time",
                service.container_name,
                service
                    .ports
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Ok(Some(Ok(r))) if r.status_code == 0 => Ok(()),
            Ok(Some(Ok(r))) => Err(format!("health-check exited with code {}", r.status_code)),
            Ok(Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. }))) => {
                Err(format!("health-check exited with code {code}"))
            }
            Ok(Some(Err(e))) => Err(format!("waiting for health-check container {name}: {e}")),
            Ok(None) => Err(format!(
                "waiting for health-check container {name}: no answer"
            )),
        }
    }
    .await;
    let outcome = match result {
        Ok(()) => Ok(()),
        Err(error) => Err(Unhealthy {
            error,
            check_logs: container_logs(docker, &id, false).await,
        }),
    };
    let _ = force_remove(docker, &id).await;
    outcome
}

/// A container's logs (stdout and stderr), at most 64 KiB, read within 10 s.
async fn container_logs(docker: &Docker, id: &str, timestamps: bool) -> String {
    let read = async {
        let mut out: Vec<u8> = Vec::new();
        let mut logs = docker.logs(
            id,
            Some(LogsOptions {
                stdout: true,
                stderr: true,
                timestamps,
                follow: false,
                ..Default::default()
            }),
        );
        while let Some(Ok(chunk)) = logs.next().await {
            let bytes = chunk.into_bytes();
            let room = MAX_LOG_BYTES.saturating_sub(out.len());
            out.extend_from_slice(&bytes[..bytes.len().min(room)]);
            if out.len() >= MAX_LOG_BYTES {
                break;
            }
        }
        out
    };
    match tokio::time::timeout(Duration::from_secs(10), read).await {
        Ok(out) => String::from_utf8_lossy(&out).into_owned(),
        Err(_) => "(reading the logs timed out)".into(),
    }
}

/// The longest service log line passed on whole; longer ones are cut into pieces.
const SERVICE_LOG_LINE_LIMIT: usize = 64 * 1024;

/// One service log line for the job log: grey `[service:<name>] <line>`, then a reset.
pub fn service_log_line(name: &str, line: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len() + name.len() + 24);
    out.extend_from_slice(b"\x1b[0;37m[service:");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"] ");
    out.extend_from_slice(line);
    out.extend_from_slice(b"\x1b[0;m\n");
    out
}

/// Follows every service's logs (stdout and stderr, with timestamps) until its container goes
/// away, sending one formatted line ([`service_log_line`]) at a time to `tx`. Lines the job
/// log cannot take fast enough (the channel is full) are dropped rather than held.
pub fn follow_logs(
    docker: &Docker,
    services: &[StartedService],
    tx: &tokio::sync::mpsc::Sender<Vec<u8>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    services
        .iter()
        .map(|svc| {
            let docker = docker.clone();
            let tx = tx.clone();
            let id = svc.id.clone();
            let name = svc.aliases.join("-");
            tokio::spawn(async move {
                let mut stream = docker.logs(
                    &id,
                    Some(LogsOptions {
                        follow: true,
                        stdout: true,
                        stderr: true,
                        timestamps: true,
                        ..Default::default()
                    }),
                );
                let mut pending: Vec<u8> = Vec::new();
                let send = |line: &[u8]| {
                    let _ = tx.try_send(service_log_line(&name, line));
                };
                while let Some(Ok(chunk)) = stream.next().await {
                    pending.extend_from_slice(&chunk.into_bytes());
                    while let Some(at) = pending.iter().position(|b| *b == b'\n') {
                        let rest = pending.split_off(at + 1);
                        pending.pop();
                        send(&pending);
                        pending = rest;
                    }
                    if pending.len() > SERVICE_LOG_LINE_LIMIT {
                        send(&pending);
                        pending.clear();
                    }
                }
                if !pending.is_empty() {
                    send(&pending);
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::settings::ConfigService;

    fn vars() -> VarList {
        VarList {
            vars: vec![crate::executor::script::variables::Var {
                key: "PG".into(),
                value: "postgres".into(),
                ..Default::default()
            }],
            tmp_dir: "/builds/p.tmp".into(),
        }
    }

    #[test]
    fn names_and_aliases() {
        let n = parse_name("registry.example.com:5000/group/pg:14");
        assert_eq!(n.service, "registry.example.com/group/pg");
        assert_eq!(n.version, "14");
        assert_eq!(n.image, "registry.example.com:5000/group/pg:14");
        assert_eq!(
            n.default_aliases(),
            vec![
                "registry.example.com__group__pg",
                "registry.example.com-group-pg"
            ]
        );
        assert_eq!(n.slug(), "registry.example.com__group__pg");
        let n = parse_name("postgres");
        assert_eq!(
            (n.service.as_str(), n.version.as_str()),
            ("postgres", "latest")
        );
        assert_eq!(n.image, "postgres:latest");
        assert_eq!(n.default_aliases(), vec!["postgres"]);
        let n = parse_name("tutum/wordpress@sha256:abc");
        assert_eq!(n.version, "@sha256:abc");
        assert_eq!(n.image, "tutum/wordpress@sha256:abc");
        assert_eq!(
            n.default_aliases(),
            vec!["tutum__wordpress", "tutum-wordpress"]
        );
    }

    /// Upstream keeps a nameless `[[runners.docker.services]]` entry: it counts toward
    /// `services_limit`, starts nothing without aliases, and fails the job with aliases (unless
    /// every alias is already taken, when it is skipped like any other service).
    #[test]
    fn nameless_config_services_are_kept() {
        let nameless = |alias: &str| ConfigService {
            alias: alias.into(),
            ..Default::default()
        };
        let mut s = ServiceSettings {
            services: vec![nameless(""), nameless("db"), nameless("db")],
            ..Default::default()
        };
        let defs = definitions(&s, &[], &vars()).unwrap();
        assert_eq!(defs.len(), 3);
        let mut taken = Aliases::default();
        let outcomes: Vec<(Vec<String>, bool)> = defs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let name = parse_name(&d.image);
                let (aliases, _) = taken.claim(&name, d, i);
                let refused = require_image(&name, d).is_err();
                (aliases, refused)
            })
            .collect();
        assert_eq!(
            outcomes,
            vec![
                (vec![], true),
                (vec!["db".to_string()], true),
                (vec![], true)
            ]
        );
        let e = require_image(&parse_name(""), &defs[1]).unwrap_err();
        assert_eq!(e.reason, FailureReason::RunnerConfigurationError);
        assert!(
            e.message.contains("invalid service image name"),
            "{}",
            e.message
        );
        assert!(require_image(&parse_name("redis"), &defs[1]).is_ok());
        s.limit = Some(2);
        let e = definitions(&s, &[], &vars()).unwrap_err();
        assert!(
            e.message.contains("too many services requested: 3"),
            "{}",
            e.message
        );
    }

    #[test]
    fn taken_aliases_are_skipped_with_a_warning() {
        let mut taken = Aliases::default();
        let def = |image: &str, alias: &str| ServiceDefinition {
            image: image.into(),
            aliases: split_aliases(alias),
            ..Default::default()
        };
        let first = def("postgres:14", "db, pg");
        let (a, w) = taken.claim(&parse_name(&first.image), &first, 0);
        assert_eq!(a, vec!["postgres", "db", "pg"]);
        assert!(w.is_empty());
        let second = def("redis", "db cache");
        let (a, w) = taken.claim(&parse_name(&second.image), &second, 1);
        assert_eq!(a, vec!["redis", "cache"]);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("\"db\""), "{w:?}");
    }

    #[test]
    fn definitions_follow_config_then_job_with_limits() {
        let mut s = ServiceSettings {
            services: vec![ConfigService {
                name: "$PG:14".into(),
                alias: "db".into(),
                environment: vec!["A=$PG".into()],
                ..Default::default()
            }],
            allowed: vec!["redis:*".into()],
            ..Default::default()
        };
        let job: Vec<Image> = serde_json::from_value(serde_json::json!([
            {"name": "redis:7", "alias": "cache", "command": ["redis-server"],
             "variables": [{"key": "B", "value": "x-$PG"}]}
        ]))
        .unwrap();
        let defs = definitions(&s, &job, &vars()).unwrap();
        assert_eq!(defs.len(), 2);
        assert_eq!(defs[0].image, "postgres:14");
        assert_eq!(
            defs[0].variables,
            vec![("A".to_string(), "postgres".to_string())]
        );
        assert_eq!(
            defs[1].variables,
            vec![("B".to_string(), "x-postgres".to_string())]
        );
        assert_eq!(defs[1].command, vec!["redis-server"]);
        // The config's service bypasses allowed_services; the job's must match it.
        s.allowed = vec!["mysql:*".into()];
        let e = definitions(&s, &job, &vars()).unwrap_err();
        assert!(e.message.contains("allowed services"), "{}", e.message);
        s.allowed.clear();
        s.limit = Some(1);
        let e = definitions(&s, &job, &vars()).unwrap_err();
        assert!(
            e.message.contains("too many services requested: 2"),
            "{}",
            e.message
        );
        s.limit = Some(-1);
        assert_eq!(definitions(&s, &job, &vars()).unwrap().len(), 2);
    }

    #[test]
    fn links_pair_every_alias_with_every_ip() {
        let s = StartedService {
            id: "0123456789abcdef0123".into(),
            aliases: vec!["db".into(), "pg".into()],
            ips: vec!["172.17.0.3".into()],
            ..Default::default()
        };
        assert_eq!(
            links(&[s]),
            vec!["0123456789ab:172.17.0.3", "db:172.17.0.3", "pg:172.17.0.3"]
        );
    }

    #[test]
    fn ports_from_env_or_exposed() {
        let json = serde_json::json!({
            "Config": {"Env": ["X=1"], "ExposedPorts": {"9000/tcp": {}, "53/udp": {}, "80/tcp": {}}},
            "NetworkSettings": {"Networks": {"bridge": {"IPAddress": "172.17.0.5"}}}
        });
        let inspect: ContainerInspectResponse = serde_json::from_value(json).unwrap();
        assert_eq!(
            ips_and_ports(&inspect),
            Ok((vec!["172.17.0.5".to_string()], vec![80, 9000]))
        );
        let json = serde_json::json!({
            "Config": {"Env": ["healthcheck_tcp_port=5432"], "ExposedPorts": {"80/tcp": {}}}
        });
        let inspect: ContainerInspectResponse = serde_json::from_value(json).unwrap();
        assert_eq!(ips_and_ports(&inspect).map(|p| p.1), Ok(vec![5432]));
        let json = serde_json::json!({
            "Config": {"Env": ["HEALTHCHECK_TCP_PORT=web", "HEALTHCHECK_TCP_PORT=80"]}
        });
        let inspect: ContainerInspectResponse = serde_json::from_value(json).unwrap();
        assert!(ips_and_ports(&inspect).is_err());
    }

    #[test]
    fn wait_timeouts() {
        assert_eq!(wait_timeout(0), Some(Duration::from_secs(30)));
        assert_eq!(wait_timeout(5), Some(Duration::from_secs(5)));
        assert_eq!(wait_timeout(-1), None);
    }
}
