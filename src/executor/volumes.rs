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
//! `prepare_script` (no services), drover defers the fix of every volume (all are mounted
//! read-write) to the top of `prepare_script`, which runs in that helper container as the same
//! user with the same binds: the same `cache-init` on the same volume roots, before any build
//! container exists, without starting one container per volume (about half a second per job).
//!
//! Entries are parsed as upstream's Linux parser does
//! (`[source:]/destination[:ro|rw|O][(:|,)z|Z][(:|,)propagation]`) **before** the job's
//! variables are expanded, and only in the destination, so a variable's value can never change
//! the structure of an entry.

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

/// One parsed `volumes` entry: `[source:]destination[:mode][(:|,)label][(:|,)propagation]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeSpec {
    /// Host path or volume name, if given. Never variable-expanded.
    pub source: Option<String>,
    /// Container path, with the job's variables expanded.
    pub destination: String,
    /// `ro`, `rw` or `O` (any case), if given.
    pub mode: Option<String>,
    /// SELinux label `z` / `Z`, if given.
    pub label: Option<String>,
    /// Bind propagation (`rslave`, …), if given.
    pub propagation: Option<String>,
}

impl VolumeSpec {
    /// The bind string: `[source:]destination[:options]`, the options joined with `,`
    /// (so `rw:rslave` is sent as `rw,rslave`).
    pub fn definition(&self) -> String {
        let mut out = String::new();
        if let Some(src) = &self.source {
            out.push_str(src);
            out.push(':');
        }
        out.push_str(&self.destination);
        let options: Vec<&str> = [&self.mode, &self.label, &self.propagation]
            .into_iter()
            .filter_map(|o| o.as_deref())
            .collect();
        if !options.is_empty() {
            out.push(':');
            out.push_str(&options.join(","));
        }
        out
    }
}

/// A character a Linux path segment or volume name may not contain.
fn forbidden(c: char) -> bool {
    matches!(
        c,
        '\\' | '/' | ':' | '*' | '?' | '"' | '<' | '>' | '|' | '\r' | '\n'
    )
}

/// A volume name: one or more allowed characters.
fn is_volume_name(s: &str) -> bool {
    !s.is_empty() && !s.chars().any(forbidden)
}

/// An absolute Linux directory: `/`, then non-empty segments, each optionally followed by `/`.
fn is_dir(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('/') else {
        return false;
    };
    let body = rest.strip_suffix('/').unwrap_or(rest);
    rest.is_empty()
        || body
            .split('/')
            .all(|seg| !seg.is_empty() && !seg.chars().any(|c| forbidden(c) && c != '/'))
}

/// The options after the destination: `(:mode)?((:|,)label)?((:|,)propagation)?`.
fn parse_options(rest: &str) -> Option<(Option<String>, Option<String>, Option<String>)> {
    let mut rest = rest;
    let mut take = |seps: &[char], words: &[&str]| -> Option<String> {
        let mut chars = rest.chars();
        let sep = chars.next()?;
        if !seps.contains(&sep) {
            return None;
        }
        let body = &rest[1..];
        let end = body.find([':', ',']).unwrap_or(body.len());
        let word = &body[..end];
        if words.iter().any(|w| w.eq_ignore_ascii_case(word)) {
            rest = &body[end..];
            Some(word.to_string())
        } else {
            None
        }
    };
    let mode = take(&[':'], &["ro", "rw", "O"]);
    let label = take(&[':', ','], &["z"]);
    let propagation = take(
        &[':', ','],
        &[
            "shared", "slave", "private", "rshared", "rslave", "rprivate",
        ],
    );
    rest.is_empty().then_some((mode, label, propagation))
}

fn invalid(spec: &str, why: &str) -> JobFailure {
    JobFailure::new(
        FailureReason::RunnerConfigurationError,
        format!(
            "invalid volume specification: {spec:?}: {why}; use \
             [source:]/destination[:ro|rw|O][,z|Z][,propagation] in [runners.docker] volumes"
        ),
    )
}

/// Parses one `[runners.docker] volumes` entry as upstream's Linux parser does, then expands
/// the job's variables in the **destination only** (`expand`). The source is never expanded,
/// so a job variable cannot turn an entry into a bind of a host path; a destination that
/// expands to something containing `:` is refused (Docker would read the rest as options).
pub fn parse_volume(spec: &str, expand: &dyn Fn(&str) -> String) -> Result<VolumeSpec, JobFailure> {
    let parts: Vec<&str> = spec.splitn(3, ':').collect();
    // With a source first (upstream's pattern tries that reading first), then without.
    let with_source = match parts.as_slice() {
        [src, dst, ..] if (is_dir(src) || is_volume_name(src)) && is_dir(dst) => {
            let rest = &spec[src.len() + 1 + dst.len()..];
            parse_options(rest).map(|o| (Some(src.to_string()), dst.to_string(), o))
        }
        _ => None,
    };
    let parsed = with_source.or_else(|| {
        let dst = parts.first().copied().unwrap_or_default();
        if !is_dir(dst) {
            return None;
        }
        parse_options(&spec[dst.len()..]).map(|o| (None, dst.to_string(), o))
    });
    let Some((source, destination, (mode, label, propagation))) = parsed else {
        return Err(invalid(spec, "not a volume specification"));
    };
    let destination = expand(&destination);
    if destination.contains(':') {
        return Err(invalid(
            spec,
            &format!("its destination expands to {destination:?}, which contains ':'"),
        ));
    }
    Ok(VolumeSpec {
        source,
        destination,
        mode,
        label,
        propagation,
    })
}

/// Parses every entry (see [`parse_volume`]).
pub fn parse_volumes(
    specs: &[String],
    expand: &dyn Fn(&str) -> String,
) -> Result<Vec<VolumeSpec>, JobFailure> {
    // An empty entry is an invalid specification, as upstream's parser says.
    specs.iter().map(|s| parse_volume(s, expand)).collect()
}

/// A container path made clean for comparison (`/a/b/` and `/a//b` are `/a/b`).
fn clean(path: &str) -> String {
    crate::executor::paths::normalize(path)
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
}

/// The volumes of one job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumePlan {
    /// Binds passed through or pointing at host dirs (`src:dst[:options]`).
    pub host_binds: Vec<String>,
    /// Docker volumes to create, in order.
    pub volumes: Vec<PlannedVolume>,
    /// Whether the ref is protected (the volumes' `protected` label).
    pub protected: bool,
}

impl VolumePlan {
    /// Every bind for the containers, volumes included. A cache volume is bound without a
    /// mode, as upstream does (a `"/data:ro"` entry gives a read-write cache volume).
    pub fn binds(&self) -> Vec<String> {
        let mut b = self.host_binds.clone();
        for v in &self.volumes {
            b.push(format!("{}:{}", v.name, v.destination));
        }
        b
    }
}

/// What [`plan`] needs.
#[derive(Debug, Clone)]
pub struct PlanInputs<'a> {
    /// The parsed `volumes` entries (destinations expanded).
    pub volumes: &'a [VolumeSpec],
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
    /// Whether the builds volume is made like a cache volume (`GIT_STRATEGY=fetch`) rather
    /// than temporary.
    pub reusable_builds: bool,
}

fn md5_hex(s: &str) -> String {
    hex::encode(Md5::digest(s.as_bytes()))
}

/// Whether a host bind's destination contains the builds root (the builds dir is "shared").
pub fn builds_dir_host_mounted(volumes: &[VolumeSpec], root_dir: &str) -> bool {
    let root = clean(root_dir);
    volumes.iter().any(|v| {
        let dst = clean(&v.destination);
        v.source.is_some() && (root == dst || dst == "/" || root.starts_with(&format!("{dst}/")))
    })
}

/// The refusal of a container path used twice, naming the path cleaned as upstream cleans it
/// (a relative path stays relative).
fn already_defined(dst: &str) -> JobFailure {
    let cleaned = clean(dst);
    let shown = if dst.starts_with('/') {
        cleaned.as_str()
    } else {
        match cleaned.trim_start_matches('/') {
            "" => ".",
            relative => relative,
        }
    };
    JobFailure::new(
        FailureReason::RunnerConfigurationError,
        format!(
            "volume for container path {shown:?} is already defined: remove one of the \
             [runners.docker] volumes entries for it"
        ),
    )
}

/// Plans the job's volumes.
pub fn plan(i: &PlanInputs<'_>) -> Result<VolumePlan, JobFailure> {
    let mut out = VolumePlan {
        protected: i.protected,
        ..Default::default()
    };
    let suffix = if i.protected { "-protected" } else { "" };
    // Container paths taken so far, cleaned.
    let mut taken: Vec<String> = Vec::new();
    let absolute = |dst: &str| -> Result<String, JobFailure> {
        if clean(dst) == "/" && dst.starts_with('/') {
            return Err(JobFailure::new(
                FailureReason::RunnerConfigurationError,
                format!("invalid volume destination {dst:?}: it needs to be a non-root path"),
            ));
        }
        Ok(if dst.starts_with('/') || i.build_dir.is_empty() {
            dst.to_string()
        } else {
            format!("{}/{dst}", i.build_dir.trim_end_matches('/'))
        })
    };
    // A cache volume (or, with `builds`, the builds volume): Ok(false) if its path is taken.
    let add_cache = |out: &mut VolumePlan,
                     taken: &mut Vec<String>,
                     dst: &str,
                     builds: bool|
     -> Result<bool, JobFailure> {
        let dst = absolute(dst)?;
        let key = clean(&dst);
        if taken.contains(&key) {
            return Ok(false);
        }
        taken.push(key);
        let hash = md5_hex(&dst);
        let temporary = if builds && !i.reusable_builds {
            true
        } else {
            i.disable_cache
        };
        if temporary {
            out.volumes.push(PlannedVolume {
                name: format!("{}-cache-{hash}{suffix}", i.random_name),
                destination: dst,
                temporary: true,
            });
        } else if let Some(host) = i.host_cache_dir.filter(|h| !h.is_empty()) {
            let host = host.trim_end_matches('/');
            out.host_binds.push(format!(
                "{host}/{}/{hash}{suffix}:{dst}",
                i.real_unique_name
            ));
        } else {
            out.volumes.push(PlannedVolume {
                name: format!("{}-cache-{hash}{suffix}", i.real_unique_name),
                destination: dst,
                temporary: false,
            });
        }
        Ok(true)
    };
    for spec in i.volumes {
        match &spec.source {
            Some(_) => {
                let dst = absolute(&spec.destination)?;
                let key = clean(&dst);
                if taken.contains(&key) {
                    return Err(already_defined(&dst));
                }
                taken.push(key);
                out.host_binds.push(
                    VolumeSpec {
                        destination: dst,
                        ..spec.clone()
                    }
                    .definition(),
                );
            }
            None => {
                if !add_cache(&mut out, &mut taken, &spec.destination, false)? {
                    return Err(already_defined(&absolute(&spec.destination)?));
                }
            }
        }
    }
    // The builds volume; an entry for the same path wins silently.
    add_cache(&mut out, &mut taken, i.root_dir, true)?;
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
    /// In the helper container's first stage, for every volume.
    DeferToHelper,
}

/// `volume_driver` and `volume_driver_ops`, for the volumes drover creates.
#[derive(Debug, Clone, Copy)]
pub struct VolumeDriver<'a> {
    /// The driver (the Engine's default when `None`).
    pub name: Option<&'a str>,
    /// Its options.
    pub options: &'a std::collections::BTreeMap<String, String>,
}

impl Volumes {
    /// Creates the plan's volumes with labels, then runs the permission fix for each (in
    /// parallel). With [`PermissionFix::DeferToHelper`], every volume is
    /// left out (all are mounted read-write), and their container paths are returned for the
    /// helper's first stage to fix.
    pub async fn create(
        &mut self,
        docker: &Docker,
        plan: &VolumePlan,
        facts: &LabelFacts,
        driver: &VolumeDriver<'_>,
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
                driver: driver.name.map(str::to_string),
                driver_opts: (!driver.options.is_empty())
                    .then(|| driver.options.clone().into_iter().collect()),
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
            .partition(|_| fix == PermissionFix::DeferToHelper);
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

    fn same(s: &str) -> String {
        s.to_string()
    }

    fn specs(v: &[&str]) -> Vec<VolumeSpec> {
        v.iter().map(|s| parse_volume(s, &same).unwrap()).collect()
    }

    fn inputs<'a>(volumes: &'a [VolumeSpec]) -> PlanInputs<'a> {
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
        assert_eq!(parse_volume("/cache", &same).unwrap().source, None);
        let v = parse_volume("/var/run/docker.sock:/var/run/docker.sock", &same).unwrap();
        assert_eq!(v.source.as_deref(), Some("/var/run/docker.sock"));
        assert_eq!(
            parse_volume("/data:ro", &same).unwrap().mode.as_deref(),
            Some("ro")
        );
        let v = parse_volume("/a:/b:rw:rslave", &same).unwrap();
        assert_eq!(v.definition(), "/a:/b:rw,rslave");
        assert!(parse_volume("a:b:c:d", &same).is_err());
        assert!(parse_volume("/a:$X/b", &same).is_err());
    }

    /// The class: whatever a job variable holds, it lands in the destination and nowhere else;
    /// the source is never expanded and a value cannot add a `:` to the entry.
    #[test]
    fn only_the_destination_is_expanded() {
        let expand = |s: &str| {
            s.replace("${X}", "1-2-3")
                .replace("$EVIL", "../etc:/hostetc")
                .replace("${", "")
        };
        let v = parse_volume("/host/${X}:/tmp/${X}", &expand).unwrap();
        assert_eq!(v.definition(), "/host/${X}:/tmp/1-2-3");
        let v = parse_volume("/${:/tmp", &expand).unwrap();
        assert_eq!(v.source.as_deref(), Some("/${"));
        assert_eq!(v.destination, "/tmp");
        assert!(parse_volume("/cache/$EVIL", &expand).is_err());
    }

    #[test]
    fn cache_and_builds_volumes() {
        let vols = specs(&["/cache"]);
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
    fn cache_volumes_are_bound_without_their_mode() {
        let vols = specs(&["/data:ro"]);
        let p = plan(&inputs(&vols)).unwrap();
        assert_eq!(
            p.binds()[0],
            format!("runner-aaaa-cache-{}:/data", md5_hex("/data"))
        );
    }

    #[test]
    fn duplicates_and_root() {
        let vols = specs(&["/cache", "/cache/"]);
        assert!(plan(&inputs(&vols)).is_err());
        let vols = specs(&["/a:/x", "/b:/x/"]);
        assert!(plan(&inputs(&vols)).is_err());
        let vols = specs(&["/"]);
        assert!(plan(&inputs(&vols)).is_err());
        let vols = specs(&["/srv/builds:/builds"]);
        let p = plan(&inputs(&vols)).unwrap();
        assert!(p.volumes.is_empty());
        assert!(builds_dir_host_mounted(&vols, "/builds"));
    }
}
