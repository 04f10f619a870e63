//! Work a dead drover left on a Docker Engine: the job, helper and service containers, the
//! per-build networks and the temporary volumes that carry one runner's labels
//! (`runner.id` and `runner.system_id`, `managed=true`). A drover killed mid-job (`kill -9`)
//! leaves them running; a later job on the same machine would share its `/builds` volume with
//! them. The manager ends them before a machine it did not create serves its first job, and on
//! the local Engine of `docker` runners at start. Reusable cache and builds volumes are kept,
//! as after any job.

use std::collections::HashMap;

use bollard::query_parameters::{
    ListContainersOptions, ListNetworksOptions, ListVolumesOptions, RemoveContainerOptions,
    RemoveVolumeOptions,
};
use bollard::Docker;

use super::error::not_found;
use super::labels::PREFIX;

/// One thing ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// `container`, `network` or `volume`.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// The job it belonged to, from its `job.id` label.
    pub job: Option<String>,
}

/// Why the clean-up could not finish.
#[derive(Debug, thiserror::Error)]
#[error("ending the work left by a previous drover: {what}: {source}")]
pub struct LeftoverError {
    /// What was being done.
    pub what: String,
    /// The Engine's answer.
    #[source]
    pub source: bollard::errors::Error,
}

fn filters(runner_short: &str, system_id: &str, extra: &[&str]) -> HashMap<String, Vec<String>> {
    let mut labels = vec![
        format!("{PREFIX}managed=true"),
        format!("{PREFIX}runner.id={runner_short}"),
        format!("{PREFIX}runner.system_id={system_id}"),
    ];
    labels.extend(extra.iter().map(|l| format!("{PREFIX}{l}")));
    HashMap::from([("label".to_string(), labels)])
}

fn job_of(labels: Option<&HashMap<String, String>>) -> Option<String> {
    labels.and_then(|l| l.get(&format!("{PREFIX}job.id")).cloned())
}

/// Ends every container (running or not), per-build network and temporary volume of the
/// runner `runner_short` under `system_id`, in that order, except those of the jobs in
/// `running` (by their `job.id` label: jobs this process runs, which may share the Engine);
/// returns what it removed.
pub async fn end_leftovers(
    docker: &Docker,
    runner_short: &str,
    system_id: &str,
    running: &[i64],
) -> Result<Vec<Leftover>, LeftoverError> {
    let live = |job: &Option<String>| {
        job.as_deref()
            .and_then(|j| j.parse::<i64>().ok())
            .is_some_and(|j| running.contains(&j))
    };
    let err = |what: String| move |source| LeftoverError { what, source };
    let mut ended = Vec::new();
    let containers = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters(runner_short, system_id, &[])),
            ..Default::default()
        }))
        .await
        .map_err(err("listing containers".into()))?;
    for c in containers {
        let Some(id) = c.id else { continue };
        let name = c
            .names
            .and_then(|n| n.into_iter().next())
            .map(|n| n.trim_start_matches('/').to_string())
            .unwrap_or_else(|| id.clone());
        let job = job_of(c.labels.as_ref());
        if live(&job) {
            continue;
        }
        let options = RemoveContainerOptions {
            force: true,
            v: false,
            ..Default::default()
        };
        match docker.remove_container(&id, Some(options)).await {
            Ok(()) => ended.push(Leftover {
                kind: "container",
                name,
                job,
            }),
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(err(format!("removing container {name}"))(e)),
        }
    }
    let networks = docker
        .list_networks(Some(ListNetworksOptions {
            filters: Some(filters(runner_short, system_id, &[])),
        }))
        .await
        .map_err(err("listing networks".into()))?;
    for n in networks {
        let Some(name) = n.name.or(n.id) else {
            continue;
        };
        let job = job_of(n.labels.as_ref());
        if live(&job) {
            continue;
        }
        match docker.remove_network(&name).await {
            Ok(()) => ended.push(Leftover {
                kind: "network",
                name,
                job,
            }),
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(err(format!("removing network {name}"))(e)),
        }
    }
    let volumes = docker
        .list_volumes(Some(ListVolumesOptions {
            filters: Some(filters(runner_short, system_id, &["reusable=false"])),
        }))
        .await
        .map_err(err("listing volumes".into()))?;
    for v in volumes.volumes.unwrap_or_default() {
        if live(&job_of(Some(&v.labels))) {
            continue;
        }
        match docker
            .remove_volume(&v.name, Some(RemoveVolumeOptions { force: true }))
            .await
        {
            Ok(()) => ended.push(Leftover {
                kind: "volume",
                job: job_of(Some(&v.labels)),
                name: v.name,
            }),
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(err(format!("removing volume {}", v.name))(e)),
        }
    }
    Ok(ended)
}
