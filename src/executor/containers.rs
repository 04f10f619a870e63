//! The helper ("predefined") and build containers of one job: their configuration (image,
//! command, environment, labels, host config from `[runners.docker]`) and their lifecycle
//! (created lazily once, reused across stages, re-created after a forced removal, all removed
//! at cleanup). Services belong to part 2.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, DeviceMapping, HostConfig, HostConfigIsolationEnum, HostConfigLogConfig,
    ResourcesUlimits, RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
use bollard::Docker;

use crate::executor::error::{not_found, FailureReason, JobFailure, SystemError};
use crate::executor::glob;
use crate::executor::settings::DockerSettings;

/// Which container a stage runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The helper container (`type=predefined`): prepare, sources, cache, artifacts, cleanup.
    Helper,
    /// The build container (`type=build`): `step_*` and `after_script`.
    Build,
}

impl Role {
    /// The label `type` and the name suffix.
    pub fn kind(self) -> &'static str {
        match self {
            Role::Helper => "predefined",
            Role::Build => "build",
        }
    }
}

/// Everything both containers share.
#[derive(Debug, Clone)]
pub struct ContainerInputs {
    /// The per-job random name (container names are `<it>-build` / `<it>-predefined`).
    pub random_name: String,
    /// Container hostname.
    pub hostname: String,
    /// `KEY=VALUE` environment.
    pub env: Vec<String>,
    /// Binds (volumes).
    pub binds: Vec<String>,
    /// Labels without `type`.
    pub labels: HashMap<String, String>,
    /// The helper image reference.
    pub helper_image: String,
    /// The build image reference (digest or ID).
    pub build_image: String,
    /// The build image's name as the job gave it (for `allowed_privileged_images`).
    pub build_image_name: String,
    /// Build entrypoint override.
    pub build_entrypoint: Option<Vec<String>>,
    /// Build user.
    pub build_user: Option<String>,
    /// Build platform.
    pub build_platform: Option<String>,
    /// The build container's command.
    pub build_cmd: Vec<String>,
    /// Service links on the default bridge: `alias:ip` entries added to `ExtraHosts`.
    pub service_links: Vec<String>,
    /// The job's network (the per-build network gives the containers aliases).
    pub network: crate::executor::services::JobNetwork,
    /// `FF_USE_INIT_WITH_DOCKER_EXECUTOR`: run the build container with `--init`.
    pub use_init: bool,
}

/// The build container's user: `[runners.docker] user`, else the image's `docker: user`;
/// checked against `allowed_users` when that list is set.
pub fn build_user(
    settings: &DockerSettings,
    image_user: &str,
) -> Result<Option<String>, JobFailure> {
    let user = settings
        .user
        .clone()
        .or_else(|| (!image_user.is_empty()).then(|| image_user.to_string()));
    if let Some(u) = &user {
        if !user_allowed(settings.user.as_deref(), &settings.allowed_users, u) {
            return Err(JobFailure::new(
                FailureReason::RunnerConfigurationError,
                format!(
                    "user {u:?} is not an allowed user: [{}]; ask the runner's operator to add \
                     it to allowed_users, or run as an allowed user",
                    settings.allowed_users.join(" ")
                ),
            ));
        }
    }
    Ok(user)
}

/// Upstream's rule for the build container's `user`: the image's default user (empty) is
/// always allowed; with neither `allowed_users` nor a runner `user` any user is; otherwise the
/// user must be in `allowed_users`, which defaults to the runner's own `user`.
pub fn user_allowed(runner_user: Option<&str>, allowed: &[String], user: &str) -> bool {
    if user.is_empty() {
        return true;
    }
    let runner_user = runner_user.unwrap_or_default();
    if allowed.is_empty() {
        return runner_user.is_empty() || runner_user == user;
    }
    allowed.iter().any(|a| a == user)
}

/// `cpus` in billionths of a CPU (decimals and fractions such as `1/3`), as config load checked.
pub(crate) fn nano_cpus(cpus: &str) -> Option<i64> {
    crate::config::docker::parse_docker_cpus(cpus.trim()).ok()
}

/// A `devices` entry: `host[:container[:permissions]]`.
pub(crate) fn device(spec: &str) -> DeviceMapping {
    let mut parts = spec.splitn(3, ':');
    let host = parts.next().unwrap_or_default().to_string();
    let container = parts.next().filter(|c| !c.is_empty()).map(str::to_string);
    let perms = parts
        .next()
        .filter(|p| !p.is_empty())
        .unwrap_or("rwm")
        .to_string();
    DeviceMapping {
        path_in_container: Some(container.unwrap_or_else(|| host.clone())),
        path_on_host: Some(host),
        cgroup_permissions: Some(perms),
    }
}

/// A `ulimit` entry: `name = "soft[:hard]"`; unparsable values are skipped.
fn ulimit(name: &str, value: &str) -> Option<ResourcesUlimits> {
    let (soft, hard) = value.split_once(':').unwrap_or((value, value));
    Some(ResourcesUlimits {
        name: Some(name.to_string()),
        soft: Some(soft.trim().parse().ok()?),
        hard: Some(hard.trim().parse().ok()?),
    })
}

/// The host config shared by the helper and build containers.
pub fn host_config(s: &DockerSettings, binds: &[String], image_name: &str) -> HostConfig {
    let none_if_empty = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
    let privileged = s.privileged
        && (s.allowed_privileged_images.is_empty()
            || glob::any_matches(&s.allowed_privileged_images, image_name));
    HostConfig {
        binds: Some(binds.to_vec()),
        network_mode: s.network_mode.clone(),
        privileged: Some(privileged),
        extra_hosts: none_if_empty(&s.extra_hosts),
        dns: none_if_empty(&s.dns),
        dns_search: none_if_empty(&s.dns_search),
        cap_add: none_if_empty(&s.cap_add),
        cap_drop: none_if_empty(&s.cap_drop),
        security_opt: none_if_empty(&s.security_opt),
        shm_size: s.shm_size,
        memory: s.memory,
        nano_cpus: s.cpus.as_deref().and_then(nano_cpus),
        volume_driver: s.volume_driver.clone(),
        volumes_from: none_if_empty(&s.volumes_from),
        tmpfs: (!s.tmpfs.is_empty()).then(|| s.tmpfs.clone().into_iter().collect()),
        sysctls: (!s.sysctls.is_empty()).then(|| s.sysctls.clone().into_iter().collect()),
        memory_swap: s.memory_swap,
        memory_reservation: s.memory_reservation,
        cpu_shares: s.cpu_shares,
        cpuset_cpus: s.cpuset_cpus.clone(),
        cpuset_mems: s.cpuset_mems.clone(),
        cgroup_parent: s.cgroup_parent.clone(),
        group_add: none_if_empty(&s.group_add),
        oom_kill_disable: s.oom_kill_disable.then_some(true),
        oom_score_adj: s.oom_score_adjust,
        ipc_mode: s.ipcmode.clone(),
        links: none_if_empty(&s.links),
        runtime: s.runtime.clone(),
        userns_mode: s.userns_mode.clone(),
        devices: (!s.devices.is_empty()).then(|| s.devices.iter().map(|d| device(d)).collect()),
        ulimits: (!s.ulimit.is_empty())
            .then(|| s.ulimit.iter().filter_map(|(n, v)| ulimit(n, v)).collect()),
        device_requests: s
            .gpus
            .as_deref()
            .and_then(|g| crate::executor::docker_options::parse_gpus(g).ok())
            .map(|r| vec![r]),
        device_cgroup_rules: none_if_empty(&s.device_cgroup_rules),
        restart_policy: Some(no_restart()),
        log_config: Some(json_file_logging(&s.log_options)),
        isolation: isolation(s.isolation.as_deref()),
        ..Default::default()
    }
}

/// `isolation` as the Engine takes it (upstream sets it on the build and service containers);
/// unset stays unset. On Linux only `default` gets here: `docker_options::resolve` refuses
/// the others.
pub(crate) fn isolation(value: Option<&str>) -> Option<HostConfigIsolationEnum> {
    match value? {
        "default" => Some(HostConfigIsolationEnum::DEFAULT),
        "process" => Some(HostConfigIsolationEnum::PROCESS),
        "hyperv" => Some(HostConfigIsolationEnum::HYPERV),
        _ => None,
    }
}

/// Restart policy `no`, as upstream sets on every container.
pub(crate) fn no_restart() -> RestartPolicy {
    RestartPolicy {
        name: Some(RestartPolicyNameEnum::NO),
        maximum_retry_count: None,
    }
}

/// The `json-file` log driver, as upstream sets on every container, with `log_options`.
pub(crate) fn json_file_logging(
    options: &std::collections::BTreeMap<String, String>,
) -> HostConfigLogConfig {
    HostConfigLogConfig {
        typ: Some("json-file".into()),
        config: Some(options.clone().into_iter().collect()),
    }
}

/// The container body for a role.
pub fn container_body(role: Role, i: &ContainerInputs, s: &DockerSettings) -> ContainerCreateBody {
    let mut labels = i.labels.clone();
    labels.insert(
        format!("{}type", crate::executor::labels::PREFIX),
        role.kind().to_string(),
    );
    let (image, cmd, entrypoint, user, image_name) = match role {
        Role::Helper => (
            i.helper_image.clone(),
            vec!["gitlab-runner-build".to_string()],
            None,
            None,
            i.helper_image.as_str(),
        ),
        Role::Build => (
            i.build_image.clone(),
            i.build_cmd.clone(),
            if s.disable_entrypoint_overwrite {
                None
            } else {
                i.build_entrypoint.clone()
            },
            i.build_user.clone(),
            i.build_image_name.as_str(),
        ),
    };
    let mut host_config = host_config(s, &i.binds, image_name);
    if !i.service_links.is_empty() {
        host_config
            .extra_hosts
            .get_or_insert_with(Vec::new)
            .extend(i.service_links.iter().cloned());
    }
    if i.network.per_build {
        host_config.network_mode = i.network.mode.clone();
    }
    if role == Role::Build {
        // Upstream applies pid_mode and --init (FF_USE_INIT_WITH_DOCKER_EXECUTOR) to the
        // build container only.
        host_config.pid_mode = s.pid_mode.clone();
        host_config.init = i.use_init.then_some(true);
    }
    let name = format!("{}-{}", i.random_name, role.kind());
    ContainerCreateBody {
        networking_config: i.network.endpoint(vec!["build".to_string(), name]),
        image: Some(image),
        cmd: Some(cmd),
        entrypoint,
        user,
        hostname: Some(i.hostname.clone()),
        env: Some(i.env.clone()),
        labels: Some(labels),
        tty: Some(false),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        open_stdin: Some(true),
        stdin_once: Some(true),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// The containers of one job.
#[derive(Debug, Default)]
pub struct Containers {
    helper: Option<String>,
    build: Option<String>,
    /// Every container ID created for the job, for cleanup.
    pub created: Vec<String>,
}

impl Containers {
    /// The container for `role`, created on first use (after removing any stale container
    /// of the same name).
    pub async fn get(
        &mut self,
        docker: &Docker,
        role: Role,
        inputs: &ContainerInputs,
        settings: &DockerSettings,
    ) -> Result<String, JobOrSystem> {
        let slot = match role {
            Role::Helper => &mut self.helper,
            Role::Build => &mut self.build,
        };
        if let Some(id) = slot.clone() {
            match docker
                .inspect_container(
                    &id,
                    None::<bollard::query_parameters::InspectContainerOptions>,
                )
                .await
            {
                Ok(_) => return Ok(id),
                Err(e) if not_found(&e) => *slot = None,
                Err(e) => {
                    return Err(SystemError::docker(format!("inspect container {id}"), e).into())
                }
            }
        }
        let name = format!("{}-{}", inputs.random_name, role.kind());
        match docker
            .remove_container(
                &name,
                Some(RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                }),
            )
            .await
        {
            Ok(()) => {}
            Err(e) if not_found(&e) => {}
            Err(e) => {
                return Err(SystemError::docker(format!("remove stale container {name}"), e).into())
            }
        }
        let body = container_body(role, inputs, settings);
        let options = CreateContainerOptions {
            name: Some(name.clone()),
            platform: match role {
                Role::Build => inputs.build_platform.clone().unwrap_or_default(),
                Role::Helper => String::new(),
            },
        };
        let created = docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| create_error(&format!("container {name}"), e))?;
        self.created.push(created.id.clone());
        *slot = Some(created.id.clone());
        Ok(created.id)
    }

    /// Forgets the container of `role` without removing it (it vanished), so the next stage
    /// of that role creates a new one. Cleanup still removes it if it is still there.
    pub fn forget(&mut self, role: Role) {
        match role {
            Role::Helper => self.helper = None,
            Role::Build => self.build = None,
        }
    }

    /// Forgets and force-removes the container of `role` (after a stopped stage).
    pub async fn discard(&mut self, docker: &Docker, role: Role) {
        let slot = match role {
            Role::Helper => &mut self.helper,
            Role::Build => &mut self.build,
        };
        if let Some(id) = slot.take() {
            let _ = docker
                .remove_container(
                    &id,
                    Some(RemoveContainerOptions {
                        force: true,
                        v: true,
                        ..Default::default()
                    }),
                )
                .await;
        }
    }

    /// Force-removes every container created for the job (404 ignored), in parallel, with
    /// their anonymous volumes unless `volume_keep`.
    pub async fn remove_all(&mut self, docker: &Docker, volume_keep: bool) -> Vec<String> {
        let ids = std::mem::take(&mut self.created);
        self.helper = None;
        self.build = None;
        let removals = ids.iter().map(|id| async move {
            remove(docker, id, !volume_keep)
                .await
                .err()
                .map(|e| format!("removing container {id}: {e}"))
        });
        futures_util::future::join_all(removals)
            .await
            .into_iter()
            .flatten()
            .collect()
    }
}

/// Force-removes a container with its anonymous volumes; a container that is already gone is
/// fine.
pub async fn force_remove(docker: &Docker, id: &str) -> Result<(), bollard::errors::Error> {
    remove(docker, id, true).await
}

/// Force-removes a container, with its anonymous volumes if `volumes`; gone is fine.
async fn remove(docker: &Docker, id: &str, volumes: bool) -> Result<(), bollard::errors::Error> {
    let options = RemoveContainerOptions {
        force: true,
        v: volumes,
        ..Default::default()
    };
    match docker.remove_container(id, Some(options)).await {
        Err(e) if not_found(&e) => Ok(()),
        r => r,
    }
}

/// A failed container create: the Engine refusing the container's settings (400) is a
/// configuration error, as upstream classifies it; anything else a system failure. `what`
/// names the container (`container <name>`).
pub fn create_error(what: &str, e: bollard::errors::Error) -> JobOrSystem {
    match e {
        bollard::errors::Error::DockerResponseServerError {
            status_code: 400,
            message,
        } => JobOrSystem::Job(JobFailure::new(
            FailureReason::RunnerConfigurationError,
            format!("creating {what}: {message}"),
        )),
        e => SystemError::docker(format!("create {what}"), e).into(),
    }
}

/// A job failure or a system failure (internal plumbing).
#[derive(Debug)]
pub enum JobOrSystem {
    /// The job's fault.
    Job(JobFailure),
    /// The runner's or the Engine's.
    System(SystemError),
}

impl From<SystemError> for JobOrSystem {
    fn from(e: SystemError) -> Self {
        JobOrSystem::System(e)
    }
}

impl From<JobFailure> for JobOrSystem {
    fn from(e: JobFailure) -> Self {
        JobOrSystem::Job(e)
    }
}

impl From<JobOrSystem> for crate::executor::error::JobError {
    fn from(e: JobOrSystem) -> Self {
        match e {
            JobOrSystem::Job(f) => crate::executor::error::JobError::Failed(f),
            JobOrSystem::System(s) => crate::executor::error::JobError::System(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users() {
        let mut s = DockerSettings::default();
        assert_eq!(build_user(&s, "1000").unwrap().as_deref(), Some("1000"));
        assert_eq!(build_user(&s, "").unwrap(), None);
        s.user = Some("root".into());
        assert_eq!(build_user(&s, "1000").unwrap().as_deref(), Some("root"));
        s.user = None;
        s.allowed_users = vec!["app".into()];
        assert!(build_user(&s, "1000").is_err());
        assert_eq!(build_user(&s, "app").unwrap().as_deref(), Some("app"));
    }

    #[test]
    fn privileged_needs_an_allowed_image() {
        let mut s = DockerSettings {
            privileged: true,
            ..Default::default()
        };
        assert_eq!(host_config(&s, &[], "docker:dind").privileged, Some(true));
        s.allowed_privileged_images = vec!["docker:*".into()];
        assert_eq!(host_config(&s, &[], "docker:dind").privileged, Some(true));
        assert_eq!(host_config(&s, &[], "ruby:3").privileged, Some(false));
        assert_eq!(nano_cpus("1.5"), Some(1_500_000_000));
        assert_eq!(nano_cpus("1/3"), Some(333_333_333));
        let d = device("/dev/kvm");
        assert_eq!(d.path_in_container.as_deref(), Some("/dev/kvm"));
        assert_eq!(d.cgroup_permissions.as_deref(), Some("rwm"));
        let u = ulimit("nofile", "1024:2048").unwrap();
        assert_eq!((u.soft, u.hard), (Some(1024), Some(2048)));
        assert!(ulimit("nofile", "many").is_none());
    }
}
