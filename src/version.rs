//! What drover reports about itself: to GitLab (`info.name/version/revision/…`, `User-Agent`),
//! to jobs (`CI_RUNNER_REVISION`) and in `drover --version`.
//!
//! drover speaks the job API of the upstream release it follows, [`UPSTREAM_VERSION`], and
//! reports that version to GitLab, so that GitLab's version-gated behaviour and an operator's
//! tooling that parses `--version` treat it as that release. Its own version and revision are
//! in the revision and branch fields. Build scripts may set `DROVER_GIT_REVISION` (8 hex) and
//! `DROVER_BUILD_DATE` (RFC 3339) at compile time; without them a development build reports
//! revision `HEAD`, as upstream does.

/// The gitlab-runner release whose API and behaviour drover follows.
pub const UPSTREAM_VERSION: &str = "19.4.0";

/// drover's own version.
pub const DROVER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The revision: `DROVER_GIT_REVISION` at build time, else `HEAD`.
pub fn revision() -> &'static str {
    option_env!("DROVER_GIT_REVISION").unwrap_or("HEAD")
}

/// The build date: `DROVER_BUILD_DATE` at build time, else `unknown`.
pub fn built() -> &'static str {
    option_env!("DROVER_BUILD_DATE").unwrap_or("unknown")
}

/// The "branch" field: drover's own version, e.g. `drover-0.1.0`.
pub fn branch() -> String {
    format!("drover-{DROVER_VERSION}")
}

/// Go's GOOS for this build (`linux`).
pub fn platform() -> &'static str {
    std::env::consts::OS
}

/// Go's GOARCH for this build (`amd64`, `arm64`, …).
pub fn architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    }
}

/// `User-Agent: gitlab-runner <version> (<branch>; <toolchain>; <os>/<arch>)`.
pub fn user_agent() -> String {
    format!(
        "gitlab-runner {UPSTREAM_VERSION} ({}; rust; {}/{})",
        branch(),
        platform(),
        architecture()
    )
}

/// git's `http.userAgent` in `get_sources`, as upstream sets it: `gitlab-runner <version>
/// <os>/<arch>`.
pub fn git_user_agent() -> String {
    format!(
        "gitlab-runner {UPSTREAM_VERSION} {}/{}",
        platform(),
        architecture()
    )
}

/// `--version` in upstream's six-line layout.
pub fn version_text() -> String {
    format!(
        "Version:      {UPSTREAM_VERSION}\nGit revision: {}\nGit branch:   {}\nGO version:   rust (drover {DROVER_VERSION})\nBuilt:        {}\nOS/Arch:      {}/{}\n",
        revision(),
        branch(),
        built(),
        platform(),
        architecture()
    )
}
