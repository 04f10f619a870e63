//! Images: which image a job runs in (job `image:` or the config default, checked against
//! `allowed_images`), the pull policies in effect (requested ∩ allowed, tried in order), registry
//! credentials ([`auth`]: `DOCKER_AUTH_CONFIG`, the runner user's docker config with its
//! credential helpers, the payload's `registry` credentials), the helper image's name, and the
//! pull manager that applies all this against the Engine.
//!
//! The pure parts are free functions; [`Puller`] holds the per-job name → ID cache and talks to
//! the Engine. It never decides job flow: it returns an image or a typed failure.

use base64::Engine as _;

use crate::executor::error::{FailureReason, JobFailure};
use crate::executor::glob;

pub mod auth;
pub mod platform;
pub mod prebuilt;
mod pull;
pub mod reference;

pub use pull::{
    classify_pull_failure, platform_aware_inspect, DockerImages, ImageEngine, ImageError, Puller,
    ResolvedImage,
};
pub use reference::{ImageRef, ReferenceError};

/// The upstream helper version drover's emitted helper commands are written for. The default
/// helper image is `registry.gitlab.com/gitlab-org/gitlab-runner/gitlab-runner-helper` at
/// `x86_64-v19.4.0` (arch and flavor vary).
pub const PINNED_HELPER_VERSION: &str = "19.4.0";

/// The upstream helper image repository.
pub const HELPER_IMAGE_REPO: &str =
    "registry.gitlab.com/gitlab-org/gitlab-runner/gitlab-runner-helper";

/// A pull policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    /// Always pull.
    Always,
    /// Pull only when the image is not present.
    IfNotPresent,
    /// Never pull.
    Never,
}

impl PullPolicy {
    /// Parses a policy name, exactly as written (`""` and `" always "` are not policies).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "always" => Some(PullPolicy::Always),
            "if-not-present" => Some(PullPolicy::IfNotPresent),
            "never" => Some(PullPolicy::Never),
            _ => None,
        }
    }

    /// The policy name.
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "always",
            PullPolicy::IfNotPresent => "if-not-present",
            PullPolicy::Never => "never",
        }
    }
}

/// Every entry of a policy list, as upstream checks it: an empty or unknown entry fails the job
/// (`unsupported pull_policy config: "x"`, as upstream words it).
fn parse_policies(list: &[String], what: &str) -> Result<Vec<PullPolicy>, JobFailure> {
    list.iter()
        .map(|s| {
            PullPolicy::parse(s).ok_or_else(|| {
                JobFailure::new(
                    FailureReason::RunnerConfigurationError,
                    format!("unsupported {what} config: {s:?}"),
                )
            })
        })
        .collect()
}

fn names(p: &[PullPolicy]) -> String {
    let v: Vec<&str> = p.iter().map(|p| p.as_str()).collect();
    format!("[{}]", v.join(" "))
}

/// Where the requested pull policies come from, as upstream names it in its error.
pub fn pull_policy_source(job_policies: &[String], config_policies: &[String]) -> &'static str {
    if !job_policies.is_empty() {
        "GitLab pipeline config"
    } else if !config_policies.is_empty() {
        "Runner config"
    } else {
        "Runner config (default)"
    }
}

/// The effective pull policies: the image's own (from the job) or the config's (default
/// `always`), intersected with `allowed_pull_policies` (default: the config's), in requested
/// order. An empty intersection is a configuration error.
pub fn effective_pull_policies(
    image_policies: &[String],
    config_policies: &[String],
    allowed_policies: &[String],
) -> Result<Vec<PullPolicy>, JobFailure> {
    effective(image_policies, config_policies, allowed_policies).map_err(|(_, f)| f)
}

/// [`effective_pull_policies`] for the image `image`: an empty intersection says which image,
/// as upstream's pull manager does (`invalid pull policy for image "x": …`).
pub fn effective_pull_policies_for(
    image: &str,
    image_policies: &[String],
    config_policies: &[String],
    allowed_policies: &[String],
) -> Result<Vec<PullPolicy>, JobFailure> {
    effective(image_policies, config_policies, allowed_policies).map_err(|(incompatible, f)| {
        if incompatible {
            JobFailure::new(
                f.reason,
                format!("invalid pull policy for image {image:?}: {}", f.message),
            )
        } else {
            f
        }
    })
}

/// The effective policies, or the failure and whether it is the empty intersection.
fn effective(
    image_policies: &[String],
    config_policies: &[String],
    allowed_policies: &[String],
) -> Result<Vec<PullPolicy>, (bool, JobFailure)> {
    let config = parse_policies(config_policies, "pull_policy").map_err(|f| (false, f))?;
    let config = if config.is_empty() {
        vec![PullPolicy::Always]
    } else {
        config
    };
    let allowed =
        parse_policies(allowed_policies, "allowed_pull_policies").map_err(|f| (false, f))?;
    let from_job = parse_policies(image_policies, "pull_policy").map_err(|f| (false, f))?;
    let allowed = if allowed.is_empty() {
        config.clone()
    } else {
        allowed
    };
    let requested = if from_job.is_empty() {
        config
    } else {
        from_job.clone()
    };
    let effective: Vec<PullPolicy> = requested
        .iter()
        .copied()
        .filter(|p| allowed.contains(p))
        .collect();
    if effective.is_empty() {
        return Err((
            true,
            JobFailure::new(
                FailureReason::RunnerConfigurationError,
                format!(
                    "pull_policy ({}) defined in {} is not one of the allowed_pull_policies ({})",
                    names(&requested),
                    pull_policy_source(image_policies, config_policies),
                    names(&allowed)
                ),
            ),
        ));
    }
    Ok(effective)
}

/// Which list a reference is checked against (named in the error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowList {
    /// `allowed_images`.
    Images,
    /// `allowed_services`.
    Services,
}

/// Checks a job-chosen image reference against an allow list as upstream does: a rule
/// ([`glob::matches`], doublestar semantics) must match the name **as written** (so
/// `library/ruby` is judged as `library/ruby`, not as `ruby`). On top of upstream, the
/// reference must also be valid ([`ImageRef::parse`]: a reference a registry would refuse
/// never reaches the Engine). `always_allowed` (the config's own image) passes whatever the
/// rules say, compared after normalisation (it names the same image). An empty list allows
/// every valid reference. Returns the normalised reference: run exactly that.
pub fn check_allowed(
    reference: &str,
    rules: &[String],
    always_allowed: Option<&str>,
    list: AllowList,
) -> Result<ImageRef, JobFailure> {
    let parsed = ImageRef::parse(reference)
        .map_err(|e| JobFailure::new(FailureReason::ImagePullFailure, e.to_string()))?;
    let rules: Vec<&str> = rules
        .iter()
        .map(|r| r.trim())
        .filter(|r| !r.is_empty())
        .collect();
    if rules.is_empty() {
        return Ok(parsed);
    }
    let same_as_config = always_allowed
        .and_then(|c| ImageRef::parse(c.trim()).ok())
        .is_some_and(|c| c == parsed);
    if same_as_config || glob::any_matches(&rules, reference) {
        return Ok(parsed);
    }
    Err(disallowed(reference, list, &rules))
}

/// The failure of a reference that no rule of `list` allows, in upstream's words (the lines
/// its job log shows: the image, the list with its rules, where to look).
pub fn disallowed(reference: &str, list: AllowList, rules: &[&str]) -> JobFailure {
    let option = match list {
        AllowList::Images => "images",
        AllowList::Services => "services",
    };
    JobFailure::new(
        FailureReason::RunnerConfigurationError,
        format!(
            "The {reference:?} image is not present on list of allowed {option}: {}. Please \
             check runner's allowed_images configuration: \
             https://docs.gitlab.com/runner/configuration/advanced-configuration/",
            rules.join(", ")
        ),
    )
}

/// The job's image: its `image:` (already expanded) if allowed, else the config image.
/// Either way the result is the normalised reference ([`ImageRef::familiar`]), the name
/// that is then inspected, pulled and run.
pub fn resolve_job_image(
    job_image: Option<&str>,
    config_image: &str,
    allowed_images: &[String],
) -> Result<String, JobFailure> {
    match job_image.map(str::trim).filter(|i| !i.is_empty()) {
        Some(image) => check_allowed(image, allowed_images, Some(config_image), AllowList::Images)
            .map(|r| r.familiar()),
        None if !config_image.trim().is_empty() => ImageRef::parse(config_image.trim())
            .map(|r| r.familiar())
            .map_err(|e| {
                JobFailure::new(
                    FailureReason::RunnerConfigurationError,
                    format!("[runners.docker] image: {e}"),
                )
            }),
        None => Err(JobFailure::new(
            FailureReason::RunnerConfigurationError,
            "no Docker image specified to run the build in",
        )),
    }
}

/// The default helper image for an Engine architecture and a flavor (`alpine` omitted).
pub fn default_helper_image(architecture: &str, flavor: Option<&str>) -> String {
    helper_image_info(architecture, flavor, &format!("v{PINNED_HELPER_VERSION}")).reference()
}

/// Upstream's helper image facts for a Linux Engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelperImageInfo {
    /// `x86_64`, `arm64`, `arm`, or the Engine's own name.
    pub architecture: String,
    /// The repository.
    pub name: String,
    /// `[<flavor>-]<arch>-<revision>` (no flavor part for `alpine`).
    pub tag: String,
    /// The prebuilt archive's base name, `prebuilt-<flavor>-<arch>` (flavor `alpine` kept).
    pub prebuilt: String,
}

impl HelperImageInfo {
    /// `name:tag`.
    pub fn reference(&self) -> String {
        format!("{}:{}", self.name, self.tag)
    }
}

/// The helper image of an Engine architecture (empty: the machine drover runs on), a flavor
/// (default `alpine`) and a helper revision (`v19.4.0`), as upstream names it.
pub fn helper_image_info(
    architecture: &str,
    flavor: Option<&str>,
    revision: &str,
) -> HelperImageInfo {
    let arch = prebuilt::helper_architecture(architecture);
    let flavor = match flavor.map(str::trim) {
        None | Some("") => "alpine",
        Some(f) => f,
    };
    let tag_prefix = match flavor {
        "alpine" => String::new(),
        f => format!("{f}-"),
    };
    HelperImageInfo {
        name: HELPER_IMAGE_REPO.to_string(),
        tag: format!("{tag_prefix}{arch}-{revision}"),
        prebuilt: format!("prebuilt-{flavor}-{arch}"),
        architecture: arch,
    }
}

/// Whether an image's configured user means root: none, empty or `root` (a numeric `0` is
/// found out by `id -u` later), as upstream decides before it looks any further.
pub fn image_user_is_root(user: &str) -> bool {
    user.is_empty() || user == "root"
}

/// The id printed by `id -u` / `id -g`: the last line of the output, trimmed; no output at all
/// and anything but a number are errors (upstream's rules).
pub fn user_id_from_output(stdout: &str) -> Result<u32, String> {
    let last = stdout.trim().lines().last().unwrap_or_default().trim();
    if last.is_empty() {
        return Err("the id command returned no output on stdout".to_string());
    }
    last.parse::<u32>()
        .map_err(|e| format!("the id command printed {last:?}, not an id: {e}"))
}

/// Splits `name[:tag]` / `name@digest` into repository and tag (`latest` when missing).
pub fn split_reference(image: &str) -> (String, String) {
    if let Some((repo, digest)) = image.split_once('@') {
        return (repo.to_string(), digest.to_string());
    }
    let last_slash = image.rfind('/').map(|i| i + 1).unwrap_or(0);
    match image[last_slash..].rfind(':') {
        Some(i) => (
            image[..last_slash + i].to_string(),
            image[last_slash + i + 1..].to_string(),
        ),
        None => (image.to_string(), "latest".to_string()),
    }
}

/// The secrets in a docker `config.json` text (`DOCKER_AUTH_CONFIG`): every `auth` value,
/// the password decoded from it, and the `password`, `identitytoken` and `registrytoken`
/// fields. Text that is not JSON yields nothing (it is not used for auth either).
pub fn auth_config_secrets(text: &str) -> Vec<String> {
    let Ok(json) = serde_json::from_str::<serde_json::Value>(text) else {
        return Vec::new();
    };
    let auths = json.get("auths").unwrap_or(&json);
    let mut out = Vec::new();
    for entry in auths.as_object().into_iter().flat_map(|m| m.values()) {
        for field in ["auth", "password", "identitytoken", "registrytoken"] {
            if let Some(v) = entry.get(field).and_then(|v| v.as_str()) {
                out.push(v.to_string());
            }
        }
        let decoded = entry
            .get("auth")
            .and_then(|a| a.as_str())
            .and_then(|a| base64::engine::general_purpose::STANDARD.decode(a).ok())
            .and_then(|b| String::from_utf8(b).ok());
        if let Some((_, pass)) = decoded.as_deref().and_then(|d| d.split_once(':')) {
            out.push(pass.to_string());
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn pull_policy_intersection() {
        use PullPolicy::*;
        assert_eq!(
            effective_pull_policies(&[], &[], &[]).unwrap(),
            vec![Always]
        );
        assert_eq!(
            effective_pull_policies(
                &v(&["always", "if-not-present"]),
                &v(&["if-not-present"]),
                &[]
            )
            .unwrap(),
            vec![IfNotPresent]
        );
        let e = effective_pull_policies(&v(&["if-not-present"]), &[], &[]).unwrap_err();
        assert_eq!(e.reason, FailureReason::RunnerConfigurationError);
        assert!(
            e.message
                .contains("is not one of the allowed_pull_policies ([always])"),
            "{}",
            e.message
        );
        assert_eq!(
            effective_pull_policies(
                &[],
                &v(&["never", "if-not-present"]),
                &v(&["if-not-present", "never"])
            )
            .unwrap(),
            vec![Never, IfNotPresent]
        );
        assert!(effective_pull_policies(&v(&["sometimes"]), &[], &[]).is_err());
    }

    #[test]
    fn job_image_resolution() {
        let allowed = v(&["ruby:*"]);
        assert_eq!(
            resolve_job_image(Some("ruby:3"), "alpine", &allowed).unwrap(),
            "ruby:3"
        );
        assert_eq!(
            resolve_job_image(Some("alpine"), "alpine", &allowed).unwrap(),
            "alpine"
        );
        assert!(resolve_job_image(Some("evil:1"), "alpine", &allowed).is_err());
        assert_eq!(
            resolve_job_image(None, "alpine", &allowed).unwrap(),
            "alpine"
        );
        assert!(resolve_job_image(None, "", &[]).is_err());
    }

    #[test]
    fn helper_names() {
        assert_eq!(
            default_helper_image("x86_64", None),
            "registry.gitlab.com/gitlab-org/gitlab-runner/gitlab-runner-helper:x86_64-v19.4.0"
        );
        assert!(default_helper_image("aarch64", Some("ubuntu")).ends_with(":ubuntu-arm64-v19.4.0"));
    }

    #[test]
    fn references() {
        assert_eq!(split_reference("ruby"), ("ruby".into(), "latest".into()));
        assert_eq!(
            split_reference("localhost:5000/a/b:1"),
            ("localhost:5000/a/b".into(), "1".into())
        );
        assert_eq!(
            split_reference("a@sha256:x"),
            ("a".into(), "sha256:x".into())
        );
    }
}

#[cfg(test)]
mod allow_list_tests {
    use super::*;

    fn rules(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    /// The class: a reference a registry would refuse never passes, whatever the rules; a
    /// valid one passes when a rule matches it as written (upstream's semantics), and the
    /// image handed on is the normalised one.
    #[test]
    fn allowed_images_judge_the_name_as_written() {
        let reg = rules(&["registry.example.com/**"]);
        for evil in [
            "registry.example.com/../busybox:test",
            "registry.example.com/./busybox",
            "registry.example.com//busybox",
            "registry.example.com/a/../../busybox",
            "registry.example.com/A",
            "registry.example.com/a b",
            "registry.example.com/a\nb",
        ] {
            assert!(
                resolve_job_image(Some(evil), "alpine:3", &reg).is_err(),
                "{evil:?} passed {reg:?}"
            );
        }
        assert_eq!(
            resolve_job_image(Some("registry.example.com/g/p:1"), "alpine", &reg).unwrap(),
            "registry.example.com/g/p:1"
        );
        let ruby = rules(&["ruby:*", "docker.io/acme/*"]);
        assert_eq!(
            resolve_job_image(Some("ruby:3"), "alpine", &ruby).unwrap(),
            "ruby:3"
        );
        // Rules are matched against the name as written, as upstream does: another spelling
        // of an allowed image is not allowed by a rule written for the short one.
        for bad in [
            "docker.io/library/ruby:3",
            "library/ruby:3",
            "docker.io/library/evil:1",
            "ruby/x:3",
            "evil.io/ruby:3",
            "RUBY:3",
            "acme/app",
        ] {
            assert!(
                resolve_job_image(Some(bad), "alpine", &ruby).is_err(),
                "{bad}"
            );
        }
        assert_eq!(
            resolve_job_image(Some("docker.io/acme/app"), "alpine", &ruby).unwrap(),
            "acme/app"
        );
        // The config image is always allowed, in any spelling, and nothing else rides on it.
        let none = rules(&["nothing"]);
        assert_eq!(
            resolve_job_image(Some("docker.io/library/alpine:3"), "alpine:3", &none).unwrap(),
            "alpine:3"
        );
        assert!(resolve_job_image(Some("alpine:4"), "alpine:3", &none).is_err());
        // With no rules any valid reference runs, but an invalid one never reaches the Engine.
        assert!(resolve_job_image(Some("registry.example.com/../busybox"), "a", &[]).is_err());
        assert_eq!(
            resolve_job_image(Some("docker.io/library/busybox:test"), "a", &[]).unwrap(),
            "busybox:test"
        );
    }
}

#[cfg(test)]
mod pull_policy_spelling_tests {
    use super::*;

    /// No spelling of a policy gets a job past `allowed_pull_policies`: unknown spellings,
    /// padded ones included (as upstream compares them), are refused.
    #[test]
    fn spellings_never_widen_the_allowed_policies() {
        let job = |p: &str| vec![p.to_string()];
        let allowed = vec!["always".to_string()];
        for p in [
            "Never",
            "NEVER",
            "never\0",
            "if_not_present",
            "never,always",
            "",
        ] {
            let r = effective_pull_policies(&job(p), &[], &allowed);
            assert!(
                r.as_ref().is_err() || r.as_ref().is_ok_and(|v| v == &[PullPolicy::Always]),
                "{p:?}: {r:?}"
            );
        }
        assert!(effective_pull_policies(&job(" never "), &[], &allowed).is_err());
        assert!(effective_pull_policies(&job(" always "), &[], &allowed).is_err());
        assert_eq!(
            effective_pull_policies(&job("always"), &[], &allowed).unwrap(),
            vec![PullPolicy::Always]
        );
    }
}
