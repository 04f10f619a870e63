//! The per-job pull manager: inspects, pulls (with retries for transient registry errors)
//! and caches name → image for one job, following the effective pull policies in order.
//! Talks to the Engine; decides nothing about job flow.

use std::collections::HashMap;

use bollard::query_parameters::CreateImageOptions;
use bollard::Docker;
use futures_util::StreamExt;

use super::auth::AuthSources;
use super::{split_reference, PullPolicy};
use crate::executor::error::{not_found, FailureReason, JobFailure, SystemError};
use crate::executor::trace::Trace;

/// A resolved image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedImage {
    /// The name asked for.
    pub name: String,
    /// `sha256:…` image ID.
    pub id: String,
    /// What to create containers from: the first repo digest, else the ID.
    pub reference: String,
}

/// Why an image could not be had.
#[derive(Debug)]
pub enum ImageError {
    /// The job's fault or the registry's: reported as a job failure.
    Job(JobFailure),
    /// The Engine failed.
    System(SystemError),
}

/// The per-job pull manager.
pub struct Puller<'d> {
    docker: &'d Docker,
    cache: HashMap<String, ResolvedImage>,
}

impl<'d> Puller<'d> {
    /// A pull manager for one job.
    pub fn new(docker: &'d Docker) -> Self {
        Puller {
            docker,
            cache: HashMap::new(),
        }
    }

    async fn inspect(&self, name: &str) -> Result<Option<ResolvedImage>, SystemError> {
        match self.docker.inspect_image(name).await {
            Ok(info) => {
                let id = info.id.unwrap_or_default();
                let reference = info
                    .repo_digests
                    .and_then(|d| d.into_iter().next())
                    .unwrap_or_else(|| id.clone());
                Ok(Some(ResolvedImage {
                    name: name.to_string(),
                    id,
                    reference,
                }))
            }
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(SystemError::docker(format!("inspect image {name}"), e)),
        }
    }

    /// Gets `name` following `policies` in order (each a fallback for the previous one), with
    /// upstream's pull-manager lines in the job log.
    pub async fn get(
        &mut self,
        name: &str,
        policies: &[PullPolicy],
        auth: &AuthSources,
        platform: Option<&str>,
        trace: &mut Trace<'_>,
    ) -> Result<ResolvedImage, ImageError> {
        self.get_inner(name, policies, auth, platform, trace, true)
            .await
    }

    /// Gets the default helper image: used silently when present, pulled otherwise (upstream
    /// looks it up without its pull manager, so none of its lines appear).
    pub async fn get_default_helper(
        &mut self,
        name: &str,
        auth: &AuthSources,
        trace: &mut Trace<'_>,
    ) -> Result<ResolvedImage, ImageError> {
        self.get_inner(name, &[PullPolicy::IfNotPresent], auth, None, trace, false)
            .await
    }

    async fn get_inner(
        &mut self,
        name: &str,
        policies: &[PullPolicy],
        auth: &AuthSources,
        platform: Option<&str>,
        trace: &mut Trace<'_>,
        announce: bool,
    ) -> Result<ResolvedImage, ImageError> {
        if let Some(hit) = self.cache.get(name) {
            return Ok(hit.clone());
        }
        if announce {
            let list: Vec<&str> = policies.iter().map(|p| p.as_str()).collect();
            trace.info(&format!(
                "Using effective pull policy of [{}] for container {name}",
                list.join(" ")
            ));
        }
        let mut last_error = None;
        for (index, policy) in policies.iter().enumerate() {
            if index > 0 {
                trace.info(&format!(
                    "Attempt #{}: Trying \"{}\" pull policy",
                    index + 1,
                    policy.as_str()
                ));
            }
            match self
                .try_policy(name, *policy, auth, platform, trace, announce)
                .await
            {
                Ok(image) => {
                    if announce && image.id != name {
                        if image.reference != image.id {
                            trace.info(&format!(
                                "Using docker image {} for {name} with digest {} ...",
                                image.id, image.reference
                            ));
                        } else {
                            trace.info(&format!("Using docker image {} for {name} ...", image.id));
                        }
                    }
                    self.cache.insert(name.to_string(), image.clone());
                    return Ok(image);
                }
                Err(ImageError::System(e)) => return Err(ImageError::System(e)),
                Err(e) => {
                    if let ImageError::Job(f) = &e {
                        trace.warning(&format!(
                            "Failed to pull image with policy \"{}\": {}",
                            policy.as_str(),
                            f.message
                        ));
                    }
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| {
            ImageError::Job(JobFailure::new(
                FailureReason::RunnerConfigurationError,
                format!("no pull policy to get image {name}"),
            ))
        }))
    }

    async fn try_policy(
        &mut self,
        name: &str,
        policy: PullPolicy,
        auth: &AuthSources,
        platform: Option<&str>,
        trace: &mut Trace<'_>,
        announce: bool,
    ) -> Result<ResolvedImage, ImageError> {
        let local = self.inspect(name).await.map_err(ImageError::System)?;
        match (policy, local) {
            (PullPolicy::Never, Some(img)) => return Ok(img),
            (PullPolicy::Never, None) => {
                return Err(ImageError::Job(JobFailure::new(
                    FailureReason::ImagePullFailure,
                    format!("image {name} not found locally and the pull policy is \"never\""),
                )))
            }
            (_, Some(img)) if img.id == name || name.starts_with("sha256:") => return Ok(img),
            (PullPolicy::IfNotPresent, Some(img)) => {
                if announce {
                    trace.info(
                        "Using locally found image version due to \"if-not-present\" pull policy",
                    );
                }
                return Ok(img);
            }
            _ => {}
        }
        // Credentials are resolved only now that a pull is needed (credential helpers run
        // then, as upstream does).
        let mut warnings = Vec::new();
        let resolved = auth.for_image(name, &mut warnings).await;
        for w in warnings {
            trace.warning(&w);
        }
        let credentials = match resolved {
            Ok(Some(a)) => {
                trace.info(&format!(
                    "Authenticating with credentials from {}",
                    a.source
                ));
                Some(a.docker_credentials())
            }
            Ok(None) => None,
            Err(e) => {
                return Err(ImageError::Job(JobFailure::new(
                    FailureReason::RunnerConfigurationError,
                    format!("pulling {name}: {e}"),
                )))
            }
        };
        self.pull(name, credentials, platform, trace).await?;
        // A failed inspect after a pull is classified like a pull failure, as upstream does.
        self.inspect(name)
            .await
            .map_err(|e| {
                let message = e.to_string();
                ImageError::Job(JobFailure::new(
                    classify_pull_failure(&message),
                    format!("inspecting image {name:?} after pull: {message}"),
                ))
            })?
            .ok_or_else(|| {
                ImageError::Job(JobFailure::new(
                    FailureReason::ImagePullFailure,
                    format!("image {name} is missing after a successful pull"),
                ))
            })
    }

    async fn pull(
        &self,
        name: &str,
        credentials: Option<bollard::auth::DockerCredentials>,
        platform: Option<&str>,
        trace: &mut Trace<'_>,
    ) -> Result<(), ImageError> {
        match platform.filter(|p| !p.is_empty()) {
            Some(p) => trace.info(&format!("Pulling docker image {name} for platform {p} ...")),
            None => trace.info(&format!("Pulling docker image {name} ...")),
        }
        let (repo, tag) = split_reference(name);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let options = CreateImageOptions {
                from_image: Some(repo.clone()),
                tag: Some(tag.clone()),
                platform: platform.unwrap_or_default().to_string(),
                ..Default::default()
            };
            let mut stream = self
                .docker
                .create_image(Some(options), None, credentials.clone());
            let mut failure = None;
            while let Some(item) = stream.next().await {
                match item {
                    Ok(info) => {
                        if let Some(err) = info.error_detail.and_then(|d| d.message) {
                            failure = Some(err);
                        }
                    }
                    Err(bollard::errors::Error::DockerResponseServerError { message, .. }) => {
                        failure = Some(message);
                        break;
                    }
                    Err(e) => {
                        failure = Some(e.to_string());
                        break;
                    }
                }
            }
            match failure {
                None => return Ok(()),
                Some(message) => {
                    let reason = classify_pull_failure(&message);
                    // Only network and registry hiccups are retried (3 attempts in all).
                    if reason != FailureReason::RunnerExternalDependencyFailure || attempt >= 3 {
                        return Err(ImageError::Job(JobFailure::new(
                            reason,
                            format!("failed to pull image {name:?}: {message}"),
                        )));
                    }
                    let backoff = 2 + u64::from(rand::random::<u8>() % 9);
                    trace.warning(&format!(
                        "Failed to pull image {name:?} (attempt #{attempt}), retrying in \
                         {backoff}s: {message}"
                    ));
                    tokio::time::sleep(std::time::Duration::from_secs(backoff)).await;
                }
            }
        }
    }
}

/// The failure reason of a pull error message, as upstream classifies it: network and registry
/// connection problems are `runner_external_dependency_failure` (and retried), a missing image
/// or denied access is `runner_configuration_error`, anything else `image_pull_failure`.
pub fn classify_pull_failure(message: &str) -> FailureReason {
    let lower = message.to_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| lower.contains(n));
    if has(&[
        "dial tcp",
        "connection refused",
        "no such host",
        "i/o timeout",
        "tls handshake",
        "client.timeout exceeded",
        "request canceled",
        "connection reset",
    ]) {
        FailureReason::RunnerExternalDependencyFailure
    } else if has(&[
        "not found",
        "manifest unknown",
        "pull access denied",
        "access to the resource is denied",
        "no basic auth credentials",
        "repository does not exist or may require",
        "unauthorized",
        "authentication required",
    ]) {
        FailureReason::RunnerConfigurationError
    } else {
        FailureReason::ImagePullFailure
    }
}
