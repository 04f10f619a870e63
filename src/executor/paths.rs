//! Names and paths of one job, as upstream computes them (the short token is
//! [`crate::engine::naming::short_token`]): the project's unique names (containers, volumes), the per-job random name and the builds, project,
//! temporary and cache directories inside the containers. Pure functions; no Docker calls.

use sha2::{Digest, Sha256};

/// Lowercases, drops characters outside `[-a-z0-9]` and cuts to 63 characters (RFC 1123).
pub fn dns_clean(s: &str) -> String {
    s.to_lowercase()
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
        .take(63)
        .collect()
}

/// A job's place among the jobs its runner is running at the same time, handed over by the
/// manager: `runner` is `CI_CONCURRENT_ID` (the lowest number no other running job of the
/// runner holds), `project` is `CI_CONCURRENT_PROJECT_ID` (the same among the runner's jobs
/// of this project; always 0 on docker+machine, where every job has a machine to itself).
/// The project slot keeps concurrent jobs of one project apart: it is part of the volume,
/// container, network and shared builds dir names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Slot {
    /// `CI_CONCURRENT_ID`.
    pub runner: usize,
    /// `CI_CONCURRENT_PROJECT_ID`.
    pub project: usize,
}

/// `runner-<short>-project-<id>-concurrent-<project slot>`, DNS-cleaned.
pub fn project_unique_name(short: &str, project_id: i64, slot: usize) -> String {
    dns_clean(&format!(
        "runner-{short}-project-{project_id}-concurrent-{slot}"
    ))
}

/// `runner-` + the first 16 bytes (hex) of sha256 over
/// `<token>-<system id>-<project>-<project slot>`; names reusable volumes.
pub fn project_real_unique_name(
    token: &str,
    system_id: &str,
    project_id: i64,
    slot: usize,
) -> String {
    let digest = Sha256::digest(format!("{token}-{system_id}-{project_id}-{slot}").as_bytes());
    format!("runner-{}", hex::encode(&digest[..16]))
}

/// The per-job random name: the unique name plus 16 random hex characters.
pub fn random_name(unique: &str) -> String {
    let bytes: [u8; 8] = rand::random();
    format!("{unique}-{}", hex::encode(bytes))
}

/// The repository URL with any `user:password@` removed.
pub fn url_without_credentials(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            let host = authority
                .rsplit_once('@')
                .map(|(_, h)| h)
                .unwrap_or(authority);
            format!("{scheme}://{host}{path}")
        }
        None => url.to_string(),
    }
}

/// `scheme://host[:port]` of a URL, without credentials.
pub fn url_base(url: &str) -> Option<String> {
    let clean = url_without_credentials(url);
    let (scheme, rest) = clean.split_once("://")?;
    let host = rest.split('/').next().unwrap_or_default();
    if host.is_empty() {
        return None;
    }
    Some(format!("{scheme}://{host}"))
}

/// The project slug: the repo URL's path without `.git` (`group/sub/project`), if any.
pub fn repo_slug(repo_url: &str) -> Option<String> {
    let (_, rest) = repo_url.split_once("://")?;
    let path = rest.split_once('/').map(|(_, p)| p)?;
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    if path.is_empty()
        || path
            .split('/')
            .any(|s| s == ".." || s == "." || s.is_empty())
    {
        return None;
    }
    Some(path.to_string())
}

/// `<dir>/<name>` when `name` (a payload value: a file variable's key, …) names one entry
/// directly inside `dir`: not empty, not `.` or `..`, no `/` and no NUL. `None` otherwise, so
/// that no stage (write, export, clean-up) can build a path that leaves `dir`.
pub fn child_path(dir: &str, name: &str) -> Option<String> {
    let single = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0']);
    single.then(|| format!("{}/{name}", dir.trim_end_matches('/')))
}

/// Where a job's files live inside the containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPaths {
    /// The builds root (`CI_BUILDS_DIR`).
    pub root_dir: String,
    /// The project directory (`CI_PROJECT_DIR`).
    pub build_dir: String,
    /// `<build_dir>.tmp`: file variables, git template, external git config.
    pub tmp_dir: String,
    /// `<cache root>/<slug>`.
    pub cache_dir: String,
}

/// Inputs of [`JobPaths::new`].
#[derive(Debug, Clone, Default)]
pub struct PathInputs<'a> {
    /// Builds root.
    pub root_dir: &'a str,
    /// Cache root.
    pub cache_root: &'a str,
    /// Repository URL.
    pub repo_url: &'a str,
    /// Project ID (for the fallback slug).
    pub project_id: i64,
    /// Short token (for a host-mounted builds dir).
    pub short_token: &'a str,
    /// Whether the builds dir is host-mounted (shared).
    pub shared_builds_dir: bool,
    /// The project slot (`CI_CONCURRENT_PROJECT_ID`), a level of a shared builds dir.
    pub project_slot: usize,
    /// `GIT_STRATEGY` is `empty`.
    pub empty_strategy: bool,
    /// `GIT_CLONE_PATH`, when custom build dirs are enabled.
    pub clone_path: Option<&'a str>,
}

/// A `GIT_CLONE_PATH` outside the builds root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the GIT_CLONE_PATH {path:?} has to be within {root:?}")]
pub struct ClonePathError {
    /// The requested path.
    pub path: String,
    /// The builds root.
    pub root: String,
}

impl JobPaths {
    /// Computes the paths.
    pub fn new(i: &PathInputs<'_>) -> Result<Self, ClonePathError> {
        let root = i.root_dir.trim_end_matches('/');
        let root = if root.is_empty() { "/" } else { root };
        let slug = repo_slug(i.repo_url).unwrap_or_else(|| format!("project-{}", i.project_id));
        // `GIT_STRATEGY=empty` gets a directory of its own (`<slug>-empty`, for the cache dir
        // too), except that a `GIT_CLONE_PATH` is used as given.
        let unique = if i.empty_strategy {
            format!("{slug}-empty")
        } else {
            slug.clone()
        };
        let build_dir = match i.clone_path.filter(|p| !p.is_empty()) {
            Some(p) => {
                let p = normalize(p);
                let inside = p.strip_prefix(root).is_some_and(|r| r.starts_with('/'));
                if !inside {
                    return Err(ClonePathError {
                        path: p,
                        root: root.to_string(),
                    });
                }
                p
            }
            None if i.shared_builds_dir => {
                format!("{root}/{}/{}/{unique}", i.short_token, i.project_slot)
            }
            None => format!("{root}/{unique}"),
        };
        let cache_root = i.cache_root.trim_end_matches('/');
        Ok(JobPaths {
            root_dir: root.to_string(),
            tmp_dir: format!("{build_dir}.tmp"),
            build_dir,
            cache_dir: format!("{cache_root}/{unique}"),
        })
    }
}

/// Resolves `.` and `..` in an absolute path (never above `/`); empty segments are dropped.
pub fn normalize(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_paths_stay_in_their_folder() {
        assert_eq!(child_path("/b/p.tmp/", "K").as_deref(), Some("/b/p.tmp/K"));
        for bad in ["", ".", "..", "../x", "a/b", "/abs", "nul\0"] {
            assert_eq!(child_path("/b/p.tmp", bad), None, "{bad:?}");
        }
    }

    #[test]
    fn unique_names() {
        assert_eq!(
            project_unique_name("AbC_d", 42, 0),
            "runner-abcd-project-42-concurrent-0"
        );
        assert!(project_real_unique_name("t", "s", 1, 0).starts_with("runner-"));
        assert_eq!(project_real_unique_name("t", "s", 1, 0).len(), 7 + 32);
        assert_ne!(
            project_real_unique_name("t", "s", 1, 0),
            project_real_unique_name("t", "s", 1, 1)
        );
        assert_eq!(
            project_unique_name("abcd", 42, 3),
            "runner-abcd-project-42-concurrent-3"
        );
        let r = random_name("x");
        assert_eq!(r.len(), 2 + 16);
    }

    #[test]
    fn urls() {
        let u = "https://gitlab-ci-token:glcbt-x@gitlab.example.com/acme/webapp.git";
        assert_eq!(
            url_without_credentials(u),
            "https://gitlab.example.com/acme/webapp.git"
        );
        assert_eq!(url_base(u).as_deref(), Some("https://gitlab.example.com"));
        assert_eq!(repo_slug(u).as_deref(), Some("acme/webapp"));
        assert_eq!(repo_slug("https://h/").as_deref(), None);
        assert_eq!(repo_slug("https://h/a/../b.git").as_deref(), None);
    }

    #[test]
    fn job_paths() {
        let mut i = PathInputs {
            root_dir: "/builds",
            cache_root: "/cache",
            repo_url: "https://h/acme/webapp.git",
            project_id: 42,
            short_token: "abc",
            ..Default::default()
        };
        let p = JobPaths::new(&i).unwrap();
        assert_eq!(p.build_dir, "/builds/acme/webapp");
        assert_eq!(p.tmp_dir, "/builds/acme/webapp.tmp");
        assert_eq!(p.cache_dir, "/cache/acme/webapp");
        i.shared_builds_dir = true;
        assert_eq!(
            JobPaths::new(&i).unwrap().build_dir,
            "/builds/abc/0/acme/webapp"
        );
        i.clone_path = Some("/builds/x/../custom");
        assert_eq!(JobPaths::new(&i).unwrap().build_dir, "/builds/custom");
        i.clone_path = Some("/elsewhere");
        assert!(JobPaths::new(&i).is_err());
        i.clone_path = None;
        i.shared_builds_dir = false;
        i.empty_strategy = true;
        let p = JobPaths::new(&i).unwrap();
        assert_eq!(p.build_dir, "/builds/acme/webapp-empty");
        assert_eq!(p.cache_dir, "/cache/acme/webapp-empty");
        // A GIT_CLONE_PATH is used as given, also with the empty strategy.
        i.clone_path = Some("/builds/custom/y");
        assert_eq!(JobPaths::new(&i).unwrap().build_dir, "/builds/custom/y");
        i.shared_builds_dir = true;
        i.clone_path = None;
        i.project_slot = 2;
        assert_eq!(
            JobPaths::new(&i).unwrap().build_dir,
            "/builds/abc/2/acme/webapp-empty"
        );
    }
}
