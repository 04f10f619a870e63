//! Job-controlled settings read from the job's variables (`GIT_STRATEGY`, `GIT_CHECKOUT`,
//! `RUNNER_SCRIPT_TIMEOUT`, …), with upstream's defaults. Bad values fall back to the default
//! with a warning that the executor prints before the stages. Pure.

use std::time::Duration;

use crate::executor::script::variables::{parse_bool, parse_go_duration, VarList};

/// `GIT_STRATEGY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitStrategy {
    /// Fresh clone into an emptied project dir.
    Clone,
    /// Reuse the checkout (reusable `/builds` volume) and fetch.
    Fetch,
    /// No git operations; the project dir is only created.
    None,
    /// No git operations; the project dir is emptied.
    Empty,
}

impl GitStrategy {
    /// The variable value.
    pub fn as_str(self) -> &'static str {
        match self {
            GitStrategy::Clone => "clone",
            GitStrategy::Fetch => "fetch",
            GitStrategy::None => "none",
            GitStrategy::Empty => "empty",
        }
    }
}

/// `GIT_SUBMODULE_STRATEGY`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmoduleStrategy {
    /// No submodules.
    None,
    /// Top-level submodules.
    Normal,
    /// All submodules, recursively.
    Recursive,
    /// A value upstream does not know: `get_sources` fails, as upstream's does.
    Invalid,
}

/// The settings.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildSettings {
    /// `GIT_STRATEGY`.
    pub git_strategy: GitStrategy,
    /// `GIT_CHECKOUT`.
    pub git_checkout: bool,
    /// `GIT_CLEAN_FLAGS` split on spaces; empty means no clean (`none`).
    pub git_clean_flags: Vec<String>,
    /// `GIT_FETCH_EXTRA_FLAGS`.
    pub git_fetch_extra_flags: Vec<String>,
    /// `GIT_SUBMODULE_STRATEGY`.
    pub submodule_strategy: SubmoduleStrategy,
    /// `GIT_SUBMODULE_PATHS`.
    pub submodule_paths: Vec<String>,
    /// `GIT_SUBMODULE_DEPTH` (`None`: the job's git depth).
    pub submodule_depth: Option<i64>,
    /// `GIT_SUBMODULE_UPDATE_FLAGS`.
    pub submodule_update_flags: Vec<String>,
    /// Whether the job disabled LFS smudging (`GIT_LFS_SKIP_SMUDGE` true).
    pub lfs_skip_smudge_set: bool,
    /// `GIT_CLONE_PATH`.
    pub clone_path: Option<String>,
    /// `GET_SOURCES_ATTEMPTS` (1–10).
    pub get_sources_attempts: u32,
    /// `RESTORE_CACHE_ATTEMPTS` (1–10).
    pub restore_cache_attempts: u32,
    /// `ARTIFACT_DOWNLOAD_ATTEMPTS` (1–10).
    pub artifact_download_attempts: u32,
    /// `EXECUTOR_JOB_SECTION_ATTEMPTS` (1–10): how often a stage runs when its container
    /// vanished.
    pub section_attempts: u32,
    /// `AFTER_SCRIPT_IGNORE_ERRORS`.
    pub after_script_ignore_errors: bool,
    /// `RUNNER_SCRIPT_TIMEOUT`.
    pub script_timeout: Option<Duration>,
    /// `RUNNER_AFTER_SCRIPT_TIMEOUT` (default 5 minutes).
    pub after_script_timeout: Duration,
    /// `CI_DEBUG_TRACE`.
    pub debug_trace: bool,
    /// `GIT_SUBMODULE_FORCE_HTTPS`: ssh submodule URLs of the GitLab host use HTTPS.
    pub submodule_force_https: bool,
    /// `CI_DEBUG_SERVICES`: follow the services' logs into the job log.
    pub debug_services: bool,
}

/// The default after_script timeout.
pub const AFTER_SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

impl BuildSettings {
    /// `GIT_SUBMODULE_PATHS` as git pathspecs; a bare `:(exclude)` (the path after a space)
    /// would silently select no submodule, so it is an error, as upstream.
    pub fn submodule_pathspec(&self) -> Result<&[String], String> {
        if self.submodule_paths.iter().any(|p| p == ":(exclude)") {
            return Err(format!(
                "GIT_SUBMODULE_PATHS: invalid submodule pathspec {:?}: write \":(exclude)path\" without a space",
                self.submodule_paths
            ));
        }
        Ok(&self.submodule_paths)
    }

    /// Reads the settings from the (expanded) variables; returns them with warnings about
    /// values that fell back to defaults.
    pub fn from_variables(vars: &VarList, allow_git_fetch: bool) -> (Self, Vec<String>) {
        let mut warnings = Vec::new();
        let get = |k: &str| {
            vars.get(k)
                .map(|v| v.value.as_str())
                .filter(|v| !v.is_empty())
        };
        let default_strategy = if allow_git_fetch {
            GitStrategy::Fetch
        } else {
            GitStrategy::Clone
        };
        let git_strategy = match get("GIT_STRATEGY") {
            None => default_strategy,
            Some("clone") => GitStrategy::Clone,
            Some("fetch") => GitStrategy::Fetch,
            Some("none") => GitStrategy::None,
            Some("empty") => GitStrategy::Empty,
            Some(other) => {
                warnings.push(format!(
                    "GIT_STRATEGY: expected either 'clone', 'fetch', 'none' or 'empty' got {other:?}, using default value '{}'",
                    default_strategy.as_str()
                ));
                default_strategy
            }
        };
        let mut bool_setting = |key: &str, default: bool| match get(key) {
            None => default,
            Some(v) => parse_bool(v).unwrap_or_else(|| {
                warnings.push(format!(
                    "{key}: expected bool got {v:?}, using default value: {default}"
                ));
                default
            }),
        };
        let git_checkout = bool_setting("GIT_CHECKOUT", true);
        let after_script_ignore_errors = bool_setting("AFTER_SCRIPT_IGNORE_ERRORS", true);
        let debug_trace = bool_setting("CI_DEBUG_TRACE", false);
        let submodule_force_https = bool_setting("GIT_SUBMODULE_FORCE_HTTPS", false);
        // LFS smudging is the user's to disable only with a true value (`""`, `false` and `0`
        // leave drover's own `GIT_LFS_SKIP_SMUDGE=1` plus `git lfs pull`), as upstream.
        let lfs_skip_smudge_set = bool_setting("GIT_LFS_SKIP_SMUDGE", false);
        let debug_services = bool_setting("CI_DEBUG_SERVICES", false);
        let git_clean_flags = match get("GIT_CLEAN_FLAGS") {
            None => vec!["-ffdx".to_string()],
            Some("none") => Vec::new(),
            Some(v) => words(v),
        };
        let git_fetch_extra_flags = match get("GIT_FETCH_EXTRA_FLAGS") {
            None => vec!["--prune".to_string(), "--quiet".to_string()],
            Some("none") => Vec::new(),
            Some(v) => words(v),
        };
        let submodule_strategy = match get("GIT_SUBMODULE_STRATEGY") {
            None | Some("none") => SubmoduleStrategy::None,
            Some("normal") => SubmoduleStrategy::Normal,
            Some("recursive") => SubmoduleStrategy::Recursive,
            Some(other) => {
                warnings.push(format!(
                    "GIT_SUBMODULE_STRATEGY: expected either 'normal', 'recursive' or 'none' got {other:?}"
                ));
                SubmoduleStrategy::Invalid
            }
        };
        let submodule_depth = match get("GIT_SUBMODULE_DEPTH") {
            None => None,
            // Any whole number, as upstream: 0 or less means no depth limit.
            Some(v) => match v.parse::<i64>() {
                Ok(d) => Some(d),
                Err(_) => {
                    warnings.push(format!(
                        "GIT_SUBMODULE_DEPTH: expected int got {v:?}, using default value: the job's git depth"
                    ));
                    None
                }
            },
        };
        // Out of range is clamped to 1..=10 (`99` gives 10), as upstream; not a number: 1.
        let mut attempts = |key: &str| match get(key) {
            None => 1,
            Some(v) => match v.trim().parse::<i64>() {
                Ok(n) => {
                    let clamped = n.clamp(1, 10);
                    if clamped != n {
                        warnings.push(format!(
                            "{key}: number of attempts out of the range [1, 10], clamping to: {clamped}"
                        ));
                    }
                    clamped as u32
                }
                Err(_) => {
                    warnings.push(format!(
                        "{key}: expected int got {v:?}, using default value: 1"
                    ));
                    1
                }
            },
        };
        let get_sources_attempts = attempts("GET_SOURCES_ATTEMPTS");
        let restore_cache_attempts = attempts("RESTORE_CACHE_ATTEMPTS");
        let artifact_download_attempts = attempts("ARTIFACT_DOWNLOAD_ATTEMPTS");
        let section_attempts = attempts("EXECUTOR_JOB_SECTION_ATTEMPTS");
        let mut duration = |key: &str| match get(key) {
            None => None,
            Some(v) => {
                let d = parse_go_duration(v);
                if d.is_none() {
                    warnings.push(format!("{key} {v:?} is not a valid duration; ignored"));
                }
                d
            }
        };
        let script_timeout = duration("RUNNER_SCRIPT_TIMEOUT");
        let after_script_timeout =
            duration("RUNNER_AFTER_SCRIPT_TIMEOUT").unwrap_or(AFTER_SCRIPT_TIMEOUT);
        let settings = BuildSettings {
            git_strategy,
            git_checkout,
            git_clean_flags,
            git_fetch_extra_flags,
            submodule_strategy,
            submodule_paths: get("GIT_SUBMODULE_PATHS").map(words).unwrap_or_default(),
            submodule_depth,
            submodule_update_flags: get("GIT_SUBMODULE_UPDATE_FLAGS")
                .map(words)
                .unwrap_or_default(),
            lfs_skip_smudge_set,
            clone_path: get("GIT_CLONE_PATH").map(str::to_string),
            get_sources_attempts,
            restore_cache_attempts,
            artifact_download_attempts,
            section_attempts,
            after_script_ignore_errors,
            script_timeout,
            after_script_timeout,
            debug_trace,
            submodule_force_https,
            debug_services,
        };
        (settings, warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::script::variables::Var;

    fn vars(pairs: &[(&str, &str)]) -> VarList {
        VarList {
            vars: pairs
                .iter()
                .map(|(k, v)| Var {
                    key: k.to_string(),
                    value: v.to_string(),
                    ..Default::default()
                })
                .collect(),
            tmp_dir: String::new(),
        }
    }

    #[test]
    fn defaults() {
        let (s, w) = BuildSettings::from_variables(&vars(&[]), true);
        assert_eq!(s.git_strategy, GitStrategy::Fetch);
        assert_eq!(s.git_clean_flags, vec!["-ffdx"]);
        assert_eq!(s.after_script_timeout, AFTER_SCRIPT_TIMEOUT);
        assert!(w.is_empty());
        let (s, _) = BuildSettings::from_variables(&vars(&[]), false);
        assert_eq!(s.git_strategy, GitStrategy::Clone);
    }

    #[test]
    fn bad_values_warn() {
        let (s, w) = BuildSettings::from_variables(
            &vars(&[
                ("GIT_STRATEGY", "bogus"),
                ("RUNNER_SCRIPT_TIMEOUT", "10"),
                ("GIT_CLEAN_FLAGS", "none"),
                ("GET_SOURCES_ATTEMPTS", "11"),
                ("EXECUTOR_JOB_SECTION_ATTEMPTS", "0"),
            ]),
            false,
        );
        assert_eq!(s.git_strategy, GitStrategy::Clone);
        assert_eq!(s.script_timeout, None);
        assert!(s.git_clean_flags.is_empty());
        // Out of range is clamped, as upstream: 11 → 10, 0 → 1.
        assert_eq!((s.get_sources_attempts, s.section_attempts), (10, 1));
        assert_eq!(w.len(), 4, "{w:?}");
        for (v, want) in [("99", 10), ("-3", 1), ("10", 10), ("1", 1), ("", 1)] {
            let (s, _) =
                BuildSettings::from_variables(&vars(&[("GET_SOURCES_ATTEMPTS", v)]), false);
            assert_eq!(s.get_sources_attempts, want, "{v:?}");
        }
        let (s, w) =
            BuildSettings::from_variables(&vars(&[("EXECUTOR_JOB_SECTION_ATTEMPTS", "3")]), false);
        assert_eq!(s.section_attempts, 3);
        assert!(w.is_empty());
        let (s, w) = BuildSettings::from_variables(
            &vars(&[
                ("RESTORE_CACHE_ATTEMPTS", "4"),
                ("ARTIFACT_DOWNLOAD_ATTEMPTS", "2"),
            ]),
            false,
        );
        assert_eq!(
            (s.restore_cache_attempts, s.artifact_download_attempts),
            (4, 2)
        );
        assert!(w.is_empty());
        let (s, w) =
            BuildSettings::from_variables(&vars(&[("RESTORE_CACHE_ATTEMPTS", "x")]), false);
        assert_eq!(
            (s.restore_cache_attempts, s.artifact_download_attempts),
            (1, 1)
        );
        assert_eq!(w.len(), 1, "{w:?}");
    }
}
