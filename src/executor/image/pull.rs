//! The per-job pull manager: inspects, pulls (with retries for transient registry errors)
//! and remembers name → image ID for one job, following the effective pull policies in order,
//! as upstream's pull manager does. It talks to the Engine through [`ImageEngine`] (the real
//! one is [`DockerImages`]); it decides nothing about job flow.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use bollard::auth::DockerCredentials;
use bollard::query_parameters::CreateImageOptions;
use bollard::Docker;
use futures_util::StreamExt;

use super::auth::AuthSources;
use super::platform::{self, Platform};
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
    /// The image's own `os/architecture[/variant]` (what a container of an image asked for
    /// with a `platform` is created for, as upstream does).
    pub platform: String,
}

/// Why an image could not be had.
#[derive(Debug)]
pub enum ImageError {
    /// The job's fault or the registry's: reported as a job failure.
    Job(JobFailure),
    /// The Engine failed.
    System(SystemError),
}

/// The image calls the pull manager makes; errors are the Engine's text.
pub trait ImageEngine: Sync {
    /// Inspects `name` (only an image of `platform`, when given): `Ok(None)` when there is none.
    fn inspect(
        &self,
        name: &str,
        platform: Option<&Platform>,
    ) -> impl Future<Output = Result<Option<ResolvedImage>, String>> + Send;
    /// Pulls `reference` (`repo:tag` or `repo@digest`) once.
    fn pull(
        &self,
        reference: &str,
        platform: Option<&Platform>,
        credentials: Option<DockerCredentials>,
    ) -> impl Future<Output = Result<(), String>> + Send;
}

impl<T: ImageEngine> ImageEngine for &T {
    fn inspect(
        &self,
        name: &str,
        platform: Option<&Platform>,
    ) -> impl Future<Output = Result<Option<ResolvedImage>, String>> + Send {
        (**self).inspect(name, platform)
    }

    fn pull(
        &self,
        reference: &str,
        platform: Option<&Platform>,
        credentials: Option<DockerCredentials>,
    ) -> impl Future<Output = Result<(), String>> + Send {
        (**self).pull(reference, platform, credentials)
    }
}

/// The first Engine API version whose image inspect takes a platform (upstream's gate).
const PLATFORM_INSPECT_API: (u32, u32) = (1, 49);

/// [`ImageEngine`] on a Docker Engine.
#[derive(Clone)]
pub struct DockerImages {
    docker: Docker,
    platform_inspect: bool,
}

impl DockerImages {
    /// The image calls on `docker`, whose negotiated API version is `api_version` (`1.41`).
    pub fn new(docker: Docker, api_version: &str) -> Self {
        DockerImages {
            docker,
            platform_inspect: platform_aware_inspect(api_version),
        }
    }
}

/// Whether an Engine of `api_version` inspects an image for a platform (API 1.49 and later; an
/// unknown version counts as recent, as upstream assumes). Below, the inspect is
/// platform-agnostic, as upstream falls back.
pub fn platform_aware_inspect(api_version: &str) -> bool {
    let parsed = api_version
        .trim()
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)));
    parsed.is_none_or(|v| v >= PLATFORM_INSPECT_API)
}

impl ImageEngine for DockerImages {
    async fn inspect(
        &self,
        name: &str,
        platform: Option<&Platform>,
    ) -> Result<Option<ResolvedImage>, String> {
        match self.docker.inspect_image(name).await {
            Ok(info) => {
                // A platform-aware inspect (API 1.49 and later) finds no image of another
                // platform under the name; bollard has no platform parameter, so the image's
                // own platform is compared.
                if let (Some(want), true) = (platform, self.platform_inspect) {
                    let os = info.os.as_deref().unwrap_or_default();
                    let arch = info.architecture.as_deref().unwrap_or_default();
                    let variant = info.variant.as_deref().unwrap_or_default();
                    let same = os == want.os
                        && arch == want.architecture
                        && (want.variant.is_empty() || variant == want.variant);
                    if !same {
                        return Ok(None);
                    }
                }
                let own_platform = [&info.os, &info.architecture, &info.variant]
                    .iter()
                    .filter_map(|p| p.as_deref().filter(|p| !p.is_empty()))
                    .collect::<Vec<_>>()
                    .join("/");
                let id = info.id.unwrap_or_default();
                let reference = info
                    .repo_digests
                    .and_then(|d| d.into_iter().next())
                    .unwrap_or_else(|| id.clone());
                Ok(Some(ResolvedImage {
                    name: name.to_string(),
                    id,
                    reference,
                    platform: own_platform,
                }))
            }
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(engine_message(e)),
        }
    }

    async fn pull(
        &self,
        reference: &str,
        platform: Option<&Platform>,
        credentials: Option<DockerCredentials>,
    ) -> Result<(), String> {
        let (repo, tag) = split_reference(reference);
        let options = CreateImageOptions {
            from_image: Some(repo),
            tag: Some(tag),
            platform: platform.map(Platform::specifier).unwrap_or_default(),
            ..Default::default()
        };
        let mut stream = self.docker.create_image(Some(options), None, credentials);
        let mut failure = None;
        while let Some(item) = stream.next().await {
            match item {
                Ok(info) => {
                    if let Some(err) = info.error_detail.and_then(|d| d.message) {
                        failure = Some(err);
                    }
                }
                Err(e) => {
                    failure = Some(engine_message(e));
                    break;
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }
}

fn engine_message(e: bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message,
        other => other.to_string(),
    }
}

/// Pull attempts per policy for transient errors, and the backoff between them (upstream's).
const PULL_ATTEMPTS: u32 = 3;
const PULL_BACKOFF: (Duration, Duration) = (Duration::from_secs(2), Duration::from_secs(10));

/// The per-job pull manager.
pub struct Puller<E> {
    engine: E,
    used: HashMap<String, String>,
    backoff: (Duration, Duration),
}

impl<E: ImageEngine> Puller<E> {
    /// A pull manager for one job.
    pub fn new(engine: E) -> Self {
        Puller {
            engine,
            used: HashMap::new(),
            backoff: PULL_BACKOFF,
        }
    }

    /// The same manager waiting between `min` and `max` before retrying a transient pull
    /// failure (tests).
    pub fn with_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff = (min, max.max(min));
        self
    }

    /// Gets `name` following `policies` in order (each a fallback for the previous one), with
    /// upstream's pull-manager lines in the job log. `platform` is the image's `platform`
    /// setting as written (already expanded).
    pub async fn get(
        &mut self,
        name: &str,
        policies: &[PullPolicy],
        auth: &AuthSources,
        platform: Option<&str>,
        trace: &mut Trace<'_>,
    ) -> Result<ResolvedImage, ImageError> {
        let list: Vec<&str> = policies.iter().map(|p| p.as_str()).collect();
        let list = format!("[{}]", list.join(" "));
        trace.info(&format!(
            "Using effective pull policy of {list} for container {name}"
        ));
        let raw_platform = platform.unwrap_or_default();
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
                .with_policy(name, *policy, auth, raw_platform, trace)
                .await
            {
                Ok(image) => {
                    self.mark_used(name, &image, trace);
                    return Ok(image);
                }
                Err(ImageError::Job(f)) => {
                    trace.warning(&format!(
                        "Failed to pull image with policy \"{}\": {}",
                        policy.as_str(),
                        f.message
                    ));
                    last_error = Some(f);
                }
                Err(ImageError::System(e)) => return Err(ImageError::System(e)),
            }
        }
        Err(ImageError::Job(match last_error {
            Some(f) => JobFailure::new(
                f.reason,
                format!(
                    "failed to pull image {name:?} with specified policies {list}: {}",
                    f.message
                ),
            ),
            None => JobFailure::new(
                FailureReason::RunnerConfigurationError,
                format!("no pull policy to get image {name}"),
            ),
        }))
    }

    /// Looks `name` up on the Engine without pulling and without a job log line (upstream's
    /// first look for the default helper image).
    pub async fn find_local(&mut self, name: &str) -> Result<Option<ResolvedImage>, ImageError> {
        self.engine.inspect(name, None).await.map_err(|e| {
            ImageError::System(SystemError::Engine(format!("inspect image {name}: {e}")))
        })
    }

    fn mark_used(&mut self, name: &str, image: &ResolvedImage, trace: &mut Trace<'_>) {
        self.used.insert(name.to_string(), image.id.clone());
        if image.id == name {
            return;
        }
        if image.reference != image.id {
            trace.info(&format!(
                "Using docker image {} for {name} with digest {} ...",
                image.id, image.reference
            ));
        } else {
            trace.info(&format!("Using docker image {} for {name} ...", image.id));
        }
    }

    async fn with_policy(
        &mut self,
        name: &str,
        policy: PullPolicy,
        auth: &AuthSources,
        raw_platform: &str,
        trace: &mut Trace<'_>,
    ) -> Result<ResolvedImage, ImageError> {
        let platform = match platform::parse(raw_platform) {
            Ok(p) => p.map(|p| {
                if let Some(w) = &p.warning {
                    trace.warning(w);
                }
                p.platform
            }),
            Err(e) => {
                return Err(ImageError::Job(JobFailure::new(
                    FailureReason::RunnerConfigurationError,
                    e,
                )))
            }
        };
        let local = self.engine.inspect(name, platform.as_ref()).await;
        if let Ok(Some(img)) = &local {
            if self.used.get(name) == Some(&img.id) {
                return Ok(img.clone());
            }
        }
        match (policy, local) {
            (PullPolicy::Never, Ok(Some(img))) => return Ok(img),
            (PullPolicy::Never, Ok(None)) => {
                return Err(ImageError::Job(JobFailure::new(
                    FailureReason::ImagePullFailure,
                    format!("image {name} not found locally and the pull policy is \"never\""),
                )))
            }
            (PullPolicy::Never, Err(e)) => {
                return Err(ImageError::System(SystemError::Engine(format!(
                    "inspect image {name}: {e}"
                ))))
            }
            (_, Ok(Some(img))) if img.id == name => return Ok(img),
            (PullPolicy::IfNotPresent, Ok(Some(img))) => {
                trace.info(
                    "Using locally found image version due to \"if-not-present\" pull policy",
                );
                return Ok(img);
            }
            // Any other inspect outcome (absent, or an error) leads to a pull, as upstream.
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
        self.pull(name, credentials, platform.as_ref(), raw_platform, trace)
            .await?;
        // A failed inspect after a pull is classified like a pull failure, as upstream does.
        match self.engine.inspect(name, platform.as_ref()).await {
            Ok(Some(img)) => Ok(img),
            Ok(None) => Err(ImageError::Job(JobFailure::new(
                FailureReason::ImagePullFailure,
                format!("inspecting image {name:?} after pull: No such image: {name}"),
            ))),
            Err(message) => Err(ImageError::Job(JobFailure::new(
                classify_pull_failure(&message),
                format!("inspecting image {name:?} after pull: {message}"),
            ))),
        }
    }

    async fn pull(
        &self,
        name: &str,
        credentials: Option<DockerCredentials>,
        platform: Option<&Platform>,
        raw_platform: &str,
        trace: &mut Trace<'_>,
    ) -> Result<(), ImageError> {
        if raw_platform.is_empty() {
            trace.info(&format!("Pulling docker image {name} ..."));
        } else {
            trace.info(&format!(
                "Pulling docker image {name} for platform {raw_platform} ..."
            ));
        }
        // `:latest` when neither a tag nor a digest is given, as upstream asks the Engine.
        let reference = if name.contains([':', '@']) {
            name.to_string()
        } else {
            format!("{name}:latest")
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let Err(message) = self
                .engine
                .pull(&reference, platform, credentials.clone())
                .await
            else {
                return Ok(());
            };
            let reason = classify_pull_failure(&message);
            // Only network and registry hiccups are retried.
            if reason != FailureReason::RunnerExternalDependencyFailure || attempt >= PULL_ATTEMPTS
            {
                return Err(ImageError::Job(JobFailure::new(reason, message)));
            }
            trace.warning(&format!(
                "Failed to pull image {name:?} (attempt #{attempt}), retrying: {message}"
            ));
            tokio::time::sleep(self.jittered_backoff()).await;
        }
    }

    fn jittered_backoff(&self) -> Duration {
        let (min, max) = self.backoff;
        let span = max.saturating_sub(min).as_millis();
        let extra = match u64::try_from(span) {
            Ok(0) | Err(_) => 0,
            Ok(span) => rand::random::<u64>() % span,
        };
        min + Duration::from_millis(extra)
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
