//! Volumes of one job: the `[runners.docker] volumes` entries (host binds passed through;
//! `dst`-only entries become cache volumes: reusable named volumes, host dirs under
//! `cache_dir`, or temporary volumes with `disable_cache`) and the builds-dir volume (reusable
//! under `GIT_STRATEGY=fetch`, temporary otherwise), with upstream's names, labels and the
//! `cache-init` permission fix (chmod 777 through the helper image) after each volume create.
//!
//! [`plan`] is pure; [`Volumes::create`] applies a plan on the Engine and remembers the
//! temporary volumes for cleanup.
//!
//! **Deliberate difference:** upstream runs the permission fix in one short-lived helper
//! container per volume. When nothing but the helper container mounts the volumes before
//! `prepare_script` (no services), drover defers the fix of every read-write volume to the top
//! of `prepare_script`, which runs in that helper container as the same user with the same
//! binds: the same `cache-init` on the same volume roots, before any build container exists,
//! without starting one container per volume (about half a second per job). Read-only volumes
//! cannot be fixed through their own mount and keep the container.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig, VolumeCreateOptions};
use bollard::query_parameters::{
    CreateContainerOptions, RemoveContainerOptions, WaitContainerOptions,
};
use bollard::Docker;
use futures_util::StreamExt;
use md5::{Digest, Md5};

use crate::executor::error::{FailureReason, JobFailure, SystemError};
use crate::executor::labels::LabelFacts;

/// The container path the permission fix mounts a fresh volume at.
const CACHE_INIT_PATH: &str = "/gitlab-runner-cache-init";

/// One parsed `volumes` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeSpec {
    /// Host path or volume name, if given.
    pub source: Option<String>,
    /// Container path.
    pub destination: String,
    /// Mode (`ro`, `rw`, `z`, …), if given.
    pub mode: Option<String>,
}

fn is_mode(s: &str) -> bool {
    !s.is_empty()
        && s.split(',').all(|m| {
            matches!(
                m,
                "ro" | "rw"
                    | "O"
                    | "z"
                    | "Z"
                    | "nocopy"
                    | "private"
                    | "rprivate"
                    | "shared"
                    | "rshared"
                    | "slave"
                    | "rslave"
                    | "consistent"
                    | "cached"
                    | "delegated"
            )
        })
}

/// Parses `[src:]dst[:mode]`.
pub fn parse_volume(spec: &str) -> Result<VolumeSpec, JobFailure> {
    let parts: Vec<&str> = spec.split(':').collect();
    let bad = || {
        JobFailure::new(
            FailureReason::RunnerConfigurationError,
            format!("invalid volume specification {spec:?}: use [source:]destination[:mode]"),
        )
    };
    let (source, destination, mode) = match parts.as_slice() {
        [dst] => (None, *dst, None),
        [a, b] if is_mode(b) => (None, *a, Some(*b)),
        [src, dst] => (Some(*src), *dst, None),
        [src, dst, mode] if is_mode(mode) => (Some(*src), *dst, Some(*mode)),
        _ => return Err(bad()),
    };
    if destination.is_empty() || source.is_some_and(str::is_empty) {
        return Err(bad());
    }
    Ok(VolumeSpec {
        source: source.map(str::to_string),
        destination: destination.to_string(),
        mode: mode.map(str::to_string),
    })
}

/// A Docker volume the job needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedVolume {
    /// Volume name.
    pub name: String,
    /// Container path.
    pub destination: String,
    /// Removed at cleanup when true.
    pub temporary: bool,
    /// Mode suffix for the bind.
    pub mode: Option<String>,
}

/// The volumes of one job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumePlan {
    /// Binds passed through or pointing at host dirs (`src:dst[:mode]`).
    pub host_binds: Vec<String>,
    /// Docker volumes to create, in order.
    pub volumes: Vec<PlannedVolume>,
    /// Whether the ref is protected (the volumes' `protected` label).
    pub protected: bool,
}

impl VolumePlan {
    /// Every bind for the containers, volumes included.
    pub fn binds(&self) -> Vec<String> {
        let mut b = self.host_binds.clone();
        for v in &self.volumes {
            match &v.mode {
                Some(m) => b.push(format!("{}:{}:{m}", v.name, v.destination)),
                None => b.push(format!("{}:{}", v.name, v.destination)),
            }
        }
        b
    }
}

/// What [`plan`] needs.
#[derive(Debug, Clone)]
pub struct PlanInputs<'a> {
    /// The `volumes` entries, variables expanded.
    pub volumes: &'a [String],
    /// The project dir (relative destinations are joined to it).
    pub build_dir: &'a str,
    /// The builds root, which gets its own volume.
    pub root_dir: &'a str,
    /// The per-job random name.
    pub random_name: &'a str,
    /// `ProjectRealUniqueName`.
    pub real_unique_name: &'a str,
    /// `disable_cache`.
    pub disable_cache: bool,
    /// `[runners.docker] cache_dir`.
    pub host_cache_dir: Option<&'a str>,
    /// Whether the ref is protected (adds `-protected`).
    pub protected: bool,
    /// Whether the builds volume is reusable (`GIT_STRATEGY=fetch`).
    pub reusable_builds: bool,
}

fn md5_hex(s: &str) -> String {
    hex::encode(Md5::digest(s.as_bytes()))
}

/// Whether a host bind's destination contains the builds root (the builds dir is "shared").
pub fn builds_dir_host_mounted(volumes: &[String], root_dir: &str) -> bool {
    volumes
        .iter()
        .filter_map(|v| parse_volume(v).ok())
        .any(|v| {
            v.source.is_some()
                && (root_dir == v.destination
                    || root_dir.starts_with(&format!("{}/", v.destination.trim_end_matches('/'))))
        })
}

/// Plans the job's volumes.
pub fn plan(i: &PlanInputs<'_>) -> Result<VolumePlan, JobFailure> {
    let mut out = VolumePlan {
        protected: i.protected,
        ..Default::default()
    };
    let mut destinations: Vec<String> = Vec::new();
    fn add_cache(
        i: &PlanInputs<'_>,
        out: &mut VolumePlan,
        destinations: &mut Vec<String>,
        dst: &str,
        mode: Option<String>,
        builds: bool,
    ) -> Result<bool, JobFailure> {
        let suffix = if i.protected { "-protected" } else { "" };
        let dst = if dst.starts_with('/') {
            dst.to_string()
        } else {
            format!("{}/{dst}", i.build_dir)
        };
        if dst == "/" {
            return Err(JobFailure::new(
                FailureReason::RunnerConfigurationError,
                "invalid volume: \"/\" cannot be a cache volume",
            ));
        }
        if destinations.contains(&dst) {
            return Ok(false);
        }
        destinations.push(dst.clone());
        let hash = md5_hex(&dst);
        let temporary = if builds {
            !i.reusable_builds
        } else {
            i.disable_cache
        };
        if temporary {
            out.volumes.push(PlannedVolume {
                name: format!("{}-cache-{hash}", i.random_name),
                destination: dst,
                temporary: true,
                mode,
            });
        } else if let Some(host) = i.host_cache_dir.filter(|h| !h.is_empty() && !builds) {
            let host = host.trim_end_matches('/');
            let mut bind = format!("{host}/{}/{hash}{suffix}:{dst}", i.real_unique_name);
            if let Some(m) = mode {
                bind.push(':');
                bind.push_str(&m);
            }
            out.host_binds.push(bind);
        } else {
            out.volumes.push(PlannedVolume {
                name: format!("{}-cache-{hash}{suffix}", i.real_unique_name),
                destination: dst,
                temporary: false,
                mode,
            });
        }
        Ok(true)
    }
    for entry in i.volumes {
        let spec = parse_volume(entry)?;
        match spec.source {
            Some(src) => {
                let dst = spec.destination.clone();
                destinations.push(dst.clone());
                out.host_binds.push(match spec.mode {
                    Some(m) => format!("{src}:{dst}:{m}"),
                    None => format!("{src}:{dst}"),
                });
            }
            None => {
                if !add_cache(
                    i,
                    &mut out,
                    &mut destinations,
                    &spec.destination,
                    spec.mode,
                    false,
                )? {
                    return Err(JobFailure::new(
                        FailureReason::RunnerConfigurationError,
                        format!("volume destination {:?} is defined twice", spec.destination),
                    ));
                }
            }
        }
    }
    // The builds volume; an entry that already covers the root wins silently.
    let covered = destinations.iter().any(|d| d == i.root_dir);
    if !covered && !builds_dir_host_mounted(i.volumes, i.root_dir) {
        add_cache(i, &mut out, &mut destinations, i.root_dir, None, true)?;
    }
    Ok(out)
}

/// The volumes created for one job, for cleanup.
#[derive(Debug, Default)]
pub struct Volumes {
    /// Temporary volume names (removed at cleanup).
    pub temporary: Vec<String>,
    /// Permission-fix containers, recorded as soon as they exist so that cleanup removes them
    /// even when preparation is interrupted.
    pub init_containers: std::sync::Mutex<Vec<String>>,
}

/// Where the permission fix of fresh volumes runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionFix {
    /// One `cache-init` container per volume, as upstream does.
    Containers,
    /// In the helper container's first stage, for every volume mounted read-write there.
    DeferToHelper,
}

/// Whether a volume's permission fix can run through its own mount in the helper container.
pub fn fixable_in_helper(v: &PlannedVolume) -> bool {
    !v.mode
        .as_deref()
        .is_some_and(|m| m.split(',').any(|part| part == "ro"))
}

impl Volumes {
    /// Creates the plan's volumes with labels, then runs the permission fix for each (in
    /// parallel). With [`PermissionFix::DeferToHelper`], the volumes that
    /// [`fixable_in_helper`] accepts are left out, and their container paths are returned for
    /// the helper's first stage to fix.
    pub async fn create(
        &mut self,
        docker: &Docker,
        plan: &VolumePlan,
        facts: &LabelFacts,
        driver: Option<&str>,
        helper_image: &str,
        fix: PermissionFix,
    ) -> Result<Vec<String>, SystemError> {
        for v in &plan.volumes {
            let protected = if plan.protected { "true" } else { "false" };
            let reusable = if v.temporary { "false" } else { "true" };
            let labels = facts.labels(
                "cache",
                &[
                    ("destination", v.destination.as_str()),
                    ("protected", protected),
                    ("reusable", reusable),
                ],
            );
            let options = VolumeCreateOptions {
                name: Some(v.name.clone()),
                driver: driver.map(str::to_string),
                labels: Some(labels),
                ..Default::default()
            };
            if v.temporary {
                self.temporary.push(v.name.clone());
            }
            docker
                .create_volume(options)
                .await
                .map_err(|e| SystemError::docker(format!("create volume {}", v.name), e))?;
        }
        let (deferred, now): (Vec<&PlannedVolume>, Vec<&PlannedVolume>) = plan
            .volumes
            .iter()
            .partition(|v| fix == PermissionFix::DeferToHelper && fixable_in_helper(v));
        // The permission fixes are independent: run them side by side.
        let fixes = now
            .iter()
            .map(|v| set_permissions(docker, &v.name, facts, helper_image, &self.init_containers));
        for result in futures_util::future::join_all(fixes).await {
            result?;
        }
        Ok(deferred.iter().map(|v| v.destination.clone()).collect())
    }
}

/// Runs `gitlab-runner-helper cache-init` on a volume (chmod 777) in a short-lived container.
async fn set_permissions(
    docker: &Docker,
    volume: &str,
    facts: &LabelFacts,
    helper_image: &str,
    record: &std::sync::Mutex<Vec<String>>,
) -> Result<(), SystemError> {
    let suffix: [u8; 8] = rand::random();
    let name = format!("{volume}-set-permission-{}", hex::encode(suffix));
    let body = ContainerCreateBody {
        image: Some(helper_image.to_string()),
        cmd: Some(vec![
            "gitlab-runner-helper".into(),
            "cache-init".into(),
            CACHE_INIT_PATH.into(),
        ]),
        labels: Some(facts.labels("cache-init", &[])),
        host_config: Some(HostConfig {
            binds: Some(vec![format!("{volume}:{CACHE_INIT_PATH}")]),
            log_config: Some(HostConfigLogConfig {
                typ: Some("json-file".into()),
                config: Some(HashMap::new()),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = docker
        .create_container(
            Some(CreateContainerOptions {
                name: Some(name.clone()),
                ..Default::default()
            }),
            body,
        )
        .await
        .map_err(|e| SystemError::docker(format!("create container {name}"), e))?;
    match record.lock() {
        Ok(mut r) => r.push(created.id.clone()),
        Err(p) => p.into_inner().push(created.id.clone()),
    }
    let result = run_to_exit(docker, &created.id).await;
    let _ = docker
        .remove_container(
            &created.id,
            Some(RemoveContainerOptions {
                force: true,
                v: true,
                ..Default::default()
            }),
        )
        .await;
    match result? {
        0 => Ok(()),
        code => Err(SystemError::Engine(format!(
            "setting permissions on volume {volume} failed: cache-init exited with {code}"
        ))),
    }
}

async fn run_to_exit(docker: &Docker, id: &str) -> Result<i64, SystemError> {
    docker
        .start_container(id, None::<bollard::query_parameters::StartContainerOptions>)
        .await
        .map_err(|e| SystemError::docker(format!("start container {id}"), e))?;
    let mut wait = docker.wait_container(
        id,
        Some(WaitContainerOptions {
            condition: "not-running".into(),
        }),
    );
    match wait.next().await {
        Some(Ok(r)) => Ok(r.status_code),
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(code),
        Some(Err(e)) => Err(SystemError::docker(format!("wait for container {id}"), e)),
        None => Err(SystemError::Engine(format!(
            "wait for container {id}: no answer"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs<'a>(volumes: &'a [String]) -> PlanInputs<'a> {
        PlanInputs {
            volumes,
            build_dir: "/builds/g/p",
            root_dir: "/builds",
            random_name: "runner-x-project-1-concurrent-0-0123456789abcdef",
            real_unique_name: "runner-aaaa",
            disable_cache: false,
            host_cache_dir: None,
            protected: false,
            reusable_builds: false,
        }
    }

    #[test]
    fn parse_specs() {
        assert_eq!(parse_volume("/cache").unwrap().source, None);
        let v = parse_volume("/var/run/docker.sock:/var/run/docker.sock").unwrap();
        assert_eq!(v.source.as_deref(), Some("/var/run/docker.sock"));
        assert_eq!(
            parse_volume("/data:ro").unwrap().mode.as_deref(),
            Some("ro")
        );
        assert_eq!(
            parse_volume("/a:/b:rw").unwrap().mode.as_deref(),
            Some("rw")
        );
        assert!(parse_volume("a:b:c:d").is_err());
    }

    #[test]
    fn cache_and_builds_volumes() {
        let vols = vec!["/cache".to_string()];
        let p = plan(&inputs(&vols)).unwrap();
        assert_eq!(p.volumes.len(), 2);
        assert_eq!(
            p.volumes[0].name,
            format!("runner-aaaa-cache-{}", md5_hex("/cache"))
        );
        assert!(!p.volumes[0].temporary);
        assert!(p.volumes[1]
            .name
            .starts_with("runner-x-project-1-concurrent-0-0123456789abcdef-cache-"));
        assert!(p.volumes[1].temporary);
        let mut i = inputs(&vols);
        i.reusable_builds = true;
        i.protected = true;
        let p = plan(&i).unwrap();
        assert!(!p.volumes[1].temporary);
        assert!(p.volumes[1].name.ends_with("-protected"));
        i.host_cache_dir = Some("/srv/cache");
        let p = plan(&i).unwrap();
        assert_eq!(
            p.host_binds[0],
            format!(
                "/srv/cache/runner-aaaa/{}-protected:/cache",
                md5_hex("/cache")
            )
        );
    }

    #[test]
    fn only_read_write_volumes_are_fixed_in_the_helper() {
        let vols = vec![
            "/cache".to_string(),
            "/data:ro".to_string(),
            "/logs:ro,z".to_string(),
            "/work:rw".to_string(),
        ];
        let p = plan(&inputs(&vols)).unwrap();
        let fixable: Vec<(&str, bool)> = p
            .volumes
            .iter()
            .map(|v| (v.destination.as_str(), fixable_in_helper(v)))
            .collect();
        assert_eq!(
            fixable,
            [
                ("/cache", true),
                ("/data", false),
                ("/logs", false),
                ("/work", true),
                ("/builds", true)
            ]
        );
    }

    #[test]
    fn duplicates_and_root() {
        let vols = vec!["/cache".to_string(), "/cache".to_string()];
        assert!(plan(&inputs(&vols)).is_err());
        let vols = vec!["/".to_string()];
        assert!(plan(&inputs(&vols)).is_err());
        let vols = vec!["/srv/builds:/builds".to_string()];
        let p = plan(&inputs(&vols)).unwrap();
        assert!(p.volumes.is_empty());
        assert!(builds_dir_host_mounted(&vols, "/builds"));
    }
}
