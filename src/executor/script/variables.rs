//! The job's variable list in upstream's order and precedence, runner-side `$VAR` expansion,
//! and the job-controlled settings read from variables (`GIT_STRATEGY`, timeouts, …).
//!
//! Pure functions over the payload and the runner settings; the stage runner and the
//! container configuration consume the result.

use std::collections::HashMap;
use std::time::Duration;

use crate::executor::paths::JobPaths;
use crate::executor::settings::RunnerSettings;
use crate::job::JobPayload;

/// drover's own version; `CI_RUNNER_VERSION` is the upstream release
/// drover follows.
pub const RUNNER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Every feature flag gitlab-runner 19.4 knows, in its order, with its default. Each is
/// exported with its resolved value (`[runners.feature_flags]`, else the job's or the runner
/// `environment`'s value, else the default), whether drover acts on it or not; a job's `FF_*`
/// variable that is not in this list is an ordinary variable.
pub const FEATURE_FLAG_DEFAULTS: &[(&str, bool)] = &[
    ("FF_TEST_FEATURE", false),
    ("FF_NETWORK_PER_BUILD", false),
    ("FF_USE_LEGACY_KUBERNETES_EXECUTION_STRATEGY", false),
    ("FF_USE_DIRECT_DOWNLOAD", true),
    ("FF_USE_FASTZIP", true),
    ("FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR", false),
    ("FF_ENABLE_BASH_EXIT_CODE_CHECK", false),
    ("FF_USE_WINDOWS_LEGACY_PROCESS_STRATEGY", false),
    ("FF_USE_LEGACY_BASH_EVAL", false),
    ("FF_USE_POWERSHELL_PATH_RESOLVER", false),
    ("FF_USE_DYNAMIC_TRACE_FORCE_SEND_INTERVAL", false),
    ("FF_SCRIPT_SECTIONS", false),
    ("FF_ENABLE_JOB_CLEANUP", false),
    ("FF_KUBERNETES_HONOR_ENTRYPOINT", false),
    ("FF_POSIXLY_CORRECT_ESCAPES", false),
    ("FF_RESOLVE_FULL_TLS_CHAIN", false),
    ("FF_DISABLE_POWERSHELL_STDIN", false),
    ("FF_USE_POD_ACTIVE_DEADLINE_SECONDS", true),
    ("FF_USE_ADVANCED_POD_SPEC_CONFIGURATION", false),
    ("FF_SECRET_RESOLVING_FAILS_IF_MISSING", true),
    ("FF_PRINT_POD_EVENTS", false),
    ("FF_USE_GIT_BUNDLE_URIS", true),
    ("FF_USE_GIT_NATIVE_CLONE", false),
    ("FF_USE_DUMB_INIT_WITH_KUBERNETES_EXECUTOR", false),
    ("FF_USE_INIT_WITH_DOCKER_EXECUTOR", false),
    ("FF_LOG_IMAGES_CONFIGURED_FOR_JOB", false),
    ("FF_USE_DOCKER_AUTOSCALER_DIAL_STDIO", true),
    ("FF_CLEAN_UP_FAILED_CACHE_EXTRACT", false),
    ("FF_USE_WINDOWS_JOB_OBJECT", false),
    ("FF_TIMESTAMPS", true),
    ("FF_DISABLE_AUTOMATIC_TOKEN_ROTATION", false),
    ("FF_USE_LEGACY_GCS_CACHE_ADAPTER", false),
    ("FF_DISABLE_UMASK_FOR_KUBERNETES_EXECUTOR", false),
    ("FF_USE_LEGACY_S3_CACHE_ADAPTER", false),
    ("FF_GIT_URLS_WITHOUT_TOKENS", false),
    ("FF_WAIT_FOR_POD_TO_BE_REACHABLE", false),
    ("FF_MASK_ALL_DEFAULT_TOKENS", true),
    ("FF_EXPORT_HIGH_CARDINALITY_METRICS", false),
    ("FF_USE_FLEETING_ACQUIRE_HEARTBEATS", false),
    ("FF_USE_EXPONENTIAL_BACKOFF_STAGE_RETRY", true),
    ("FF_USE_ADAPTIVE_REQUEST_CONCURRENCY", true),
    ("FF_USE_GITALY_CORRELATION_ID", true),
    ("FF_USE_GIT_PROACTIVE_AUTH", false),
    ("FF_HASH_CACHE_KEYS", false),
    ("FF_ENABLE_JOB_INPUTS_INTERPOLATION", true),
    ("FF_USE_JOB_ROUTER", false),
    ("FF_SCRIPT_TO_STEP_MIGRATION", false),
    ("FF_USE_PARALLEL_CACHE_TRANSFER", false),
    ("FF_USE_PARALLEL_ARTIFACT_TRANSFER", false),
    ("FF_CONCRETE", false),
    ("FF_SUSPENDABLE_ENVIRONMENTS", false),
    ("FF_USE_NATIVE_CONTAINER_STOP", false),
];

/// A feature flag's value as upstream resolves it: `[runners.feature_flags]` wins, else a
/// boolean `job_value` (the job's or the runner `environment`'s), else the flag's default
/// (false for a name upstream does not know).
pub fn resolve_flag(
    config: &std::collections::BTreeMap<String, bool>,
    name: &str,
    job_value: Option<&str>,
) -> bool {
    config
        .get(name)
        .copied()
        .or_else(|| job_value.and_then(parse_bool))
        .or_else(|| {
            FEATURE_FLAG_DEFAULTS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, d)| *d)
        })
        .unwrap_or(false)
}

/// Whether `name` is one of upstream's feature flags.
pub fn is_feature_flag(name: &str) -> bool {
    FEATURE_FLAG_DEFAULTS.iter().any(|(n, _)| *n == name)
}

/// Whether `key` is a shell variable name (`[A-Za-z_][A-Za-z0-9_]*`): only those are exported,
/// and only those name a file variable's file.
pub fn valid_name(key: &str) -> bool {
    let mut chars = key.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// One variable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Var {
    /// Name.
    pub key: String,
    /// Value (for file variables, the file content).
    pub value: String,
    /// Whether the value goes to a file.
    pub file: bool,
    /// Whether the value is masked in the trace.
    pub masked: bool,
    /// Whether the value is exempt from expansion.
    pub raw: bool,
    /// A definition from the job payload that GitLab did not mark public (a project, group or
    /// instance variable, a dotenv variable): kept out of service containers. Runner-added
    /// variables are internal and never hidden.
    pub hidden: bool,
}

impl Var {
    fn plain(key: &str, value: impl Into<String>) -> Self {
        Var {
            key: key.to_string(),
            value: value.into(),
            ..Default::default()
        }
    }
}

/// An ordered variable list; the last definition of a key wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VarList {
    /// The variables, in order.
    pub vars: Vec<Var>,
    /// Directory where file variables are written (`<BuildDir>.tmp`).
    pub tmp_dir: String,
}

impl VarList {
    /// The last definition of `key`.
    pub fn get(&self, key: &str) -> Option<&Var> {
        self.vars.iter().rev().find(|v| v.key == key)
    }

    /// The value of `key` as seen by other variables (file variables: their path).
    pub fn value(&self, key: &str) -> Option<String> {
        let v = self.get(key)?;
        if v.file {
            self.file_path(&v.key)
        } else {
            Some(v.value.clone())
        }
    }

    /// The path a file variable is written to; `None` for a key that is not a variable name
    /// (`../../cache/x`): such a file is never written, exported or deleted.
    pub fn file_path(&self, key: &str) -> Option<String> {
        if !valid_name(key) {
            return None;
        }
        crate::executor::paths::child_path(&self.tmp_dir, key)
    }

    /// The variables with duplicates removed (last wins, at its first position's order kept
    /// as upstream's export order of the final list).
    pub fn unique(&self) -> Vec<&Var> {
        let mut last: HashMap<&str, usize> = HashMap::new();
        for (i, v) in self.vars.iter().enumerate() {
            last.insert(v.key.as_str(), i);
        }
        self.vars
            .iter()
            .enumerate()
            .filter(|(i, v)| last.get(v.key.as_str()) == Some(i))
            .map(|(_, v)| v)
            .collect()
    }

    /// Expands `$VAR` / `${VAR}` in a string against this list (Go `os.Expand` rules; `$$` is
    /// `$`; unknown names expand to nothing).
    pub fn expand(&self, s: &str) -> String {
        // `$$` reaches the lookup as the variable `$`, which stands for itself.
        // The shell's special parameters (`$1`, `$@`, `$?`, …) are empty, even when a variable
        // has that name, as upstream's.
        crate::config::expand::expand_with(s, |name| match name {
            "$" => Some("$".to_string()),
            "*" | "#" | "@" | "!" | "?" | "0" | "1" | "2" | "3" | "4" | "5" | "6" | "7" | "8"
            | "9" => Some(String::new()),
            _ => self.value(name),
        })
    }

    /// Every value expanded once against the unexpanded list (`raw` values are kept).
    pub fn expanded(&self) -> VarList {
        let vars = self
            .vars
            .iter()
            .map(|v| {
                let mut v = v.clone();
                if !v.raw {
                    v.value = self.expand(&v.value);
                }
                v
            })
            .collect();
        VarList {
            vars,
            tmp_dir: self.tmp_dir.clone(),
        }
    }

    /// `KEY=VALUE` entries for a container's `Env` (file variables as their path).
    pub fn env(&self) -> Vec<String> {
        self.unique()
            .into_iter()
            .filter_map(|v| {
                let value = if v.file {
                    self.file_path(&v.key)?
                } else {
                    v.value.clone()
                };
                Some(format!("{}={value}", v.key))
            })
            .collect()
    }

    /// Whether `key` is set to a true value (`1`, `t`, `true`, … as Go's `ParseBool`).
    pub fn bool(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(|v| parse_bool(&v.value))
    }

    /// The *first* definition of `key`: the one GitLab or the runner put there, before any
    /// job variable could override it.
    pub fn first(&self, key: &str) -> Option<&Var> {
        self.vars.iter().find(|v| v.key == key)
    }

    /// A feature flag's resolved value: its first definition, which [`job_variables`] puts
    /// there (a runner `environment` entry of the same name, exported later, does not change
    /// what the runner does).
    pub fn flag(&self, name: &str) -> bool {
        let first = self.first(name).map(|v| v.value.as_str());
        resolve_flag(&std::collections::BTreeMap::new(), name, first)
    }

    /// `CI_COMMIT_REF_PROTECTED` as GitLab set it (payloads of GitLab before 18.3 carry no
    /// `git_info.protected`): the first definition, so a job variable cannot select the
    /// protected volumes, read with [`loose_bool`].
    pub fn ref_protected(&self) -> bool {
        self.first("CI_COMMIT_REF_PROTECTED")
            .is_some_and(|v| loose_bool(&v.value))
    }

    /// The definitions a service container may see: the runner's own (internal) ones and the
    /// payload's public ones, in order.
    pub fn public_or_internal(&self) -> VarList {
        VarList {
            vars: self.vars.iter().filter(|v| !v.hidden).cloned().collect(),
            tmp_dir: self.tmp_dir.clone(),
        }
    }
}

/// Go's `strconv.ParseBool`.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// upstream's lenient boolean of a variable's value: Go's `ParseBool` on the lower-cased value
/// (`tRuE` is true), else an integer that is exactly 1 (`01`, `+1`); anything else is false.
pub fn loose_bool(s: &str) -> bool {
    if let Some(b) = parse_bool(&s.to_ascii_lowercase()) {
        return b;
    }
    s.parse::<i32>().is_ok_and(|n| n == 1)
}

/// Inputs of [`job_variables`] that are not in the payload or the settings.
#[derive(Debug, Clone, Default)]
pub struct VarInputs<'a> {
    /// The job image name, if the job has one.
    pub job_image: Option<&'a str>,
    /// `CI_RUNNER_SHORT_TOKEN`.
    pub short_token: &'a str,
    /// The per-build network name, if one was made.
    pub network_name: Option<&'a str>,
    /// The job's slot among the runner's running jobs.
    pub slot: crate::executor::paths::Slot,
}

/// The job's variables in upstream's order (feature flags; runner-added `CI_*`; the payload's;
/// the late runner additions), unexpanded.
pub fn job_variables(
    payload: &JobPayload,
    runner: &RunnerSettings,
    paths: &JobPaths,
    extra: &VarInputs<'_>,
) -> VarList {
    let mut vars = Vec::new();
    // Feature flags, resolved as upstream: `[runners.feature_flags]` wins; else the last
    // definition among the runner `environment` and the job's variables (the job's come
    // later) if it is a boolean; else the default. Unknown names in the config table are not
    // exported.
    for (name, _) in FEATURE_FLAG_DEFAULTS {
        let from_env = runner.environment.iter().filter_map(|e| {
            let (k, v) = e.split_once('=')?;
            (k == *name).then_some(v)
        });
        let from_job = payload
            .variables
            .iter()
            .filter(|v| v.key == *name)
            .map(|v| v.value.as_str());
        let raw = from_env.chain(from_job).last();
        let value = resolve_flag(&runner.feature_flags, name, raw);
        vars.push(Var::plain(name, value.to_string()));
    }
    if let Some(image) = extra.job_image.filter(|i| !i.is_empty()) {
        vars.push(Var::plain("CI_JOB_IMAGE", image));
    }
    vars.push(Var::plain("CI_RUNNER_SHORT_TOKEN", extra.short_token));
    for (k, v) in runner.environment.iter().filter_map(|e| parse_variable(e)) {
        if !k.is_empty() {
            vars.push(Var::plain(k, v));
        }
    }
    vars.push(Var::plain("CI_BUILDS_DIR", paths.root_dir.as_str()));
    vars.push(Var::plain("CI_PROJECT_DIR", paths.build_dir.as_str()));
    vars.push(Var::plain(
        "CI_CONCURRENT_ID",
        extra.slot.runner.to_string(),
    ));
    vars.push(Var::plain(
        "CI_CONCURRENT_PROJECT_ID",
        extra.slot.project.to_string(),
    ));
    vars.push(Var::plain("CI_SERVER", "yes"));
    vars.push(Var::plain("CI_JOB_STATUS", "running"));
    vars.push(Var::plain(
        "CI_JOB_TIMEOUT",
        payload.timeout_secs().to_string(),
    ));
    // The TLS files of the connection to GitLab, as file variables (the key is not public,
    // but internal: services get it as upstream's do).
    for (key, pem) in [
        ("CI_SERVER_TLS_CA_FILE", &runner.tls.ca_chain),
        ("CI_SERVER_TLS_CERT_FILE", &runner.tls.auth_cert),
        ("CI_SERVER_TLS_KEY_FILE", &runner.tls.auth_key),
    ] {
        let pair = !runner.tls.auth_cert.is_empty() && !runner.tls.auth_key.is_empty();
        if pem.is_empty() || (key != "CI_SERVER_TLS_CA_FILE" && !pair) {
            continue;
        }
        vars.push(Var {
            key: key.into(),
            value: pem.clone(),
            file: true,
            ..Default::default()
        });
    }
    for v in &payload.variables {
        if v.key.is_empty() || is_feature_flag(&v.key) {
            continue;
        }
        vars.push(Var {
            key: v.key.clone(),
            value: v.value.clone(),
            file: v.file,
            masked: v.masked,
            raw: v.raw,
            hidden: !v.public,
        });
    }
    vars.push(Var::plain("CI_DISPOSABLE_ENVIRONMENT", "true"));
    // The upstream release drover follows (its helper image tag), so that the documented
    // `helper_image = "…:x86_64-v${CI_RUNNER_VERSION}"` names a tag that exists; the revision
    // is the one drover reports to GitLab.
    vars.push(Var::plain(
        "CI_RUNNER_VERSION",
        crate::executor::image::PINNED_HELPER_VERSION,
    ));
    vars.push(Var::plain("CI_RUNNER_REVISION", crate::version::revision()));
    vars.push(Var::plain(
        "CI_RUNNER_EXECUTABLE_ARCH",
        format!("linux/{}", go_arch()),
    ));
    vars.push(Var::plain(
        "RUNNER_TEMP_PROJECT_DIR",
        paths.tmp_dir.as_str(),
    ));
    if let Some(net) = extra.network_name {
        vars.push(Var::plain("CI_BUILD_NETWORK_NAME", net));
    }
    VarList {
        vars,
        tmp_dir: paths.tmp_dir.clone(),
    }
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// Expands `$NAME`, `${NAME}` and `${NAME:-word}`-style parameters in `s` as a POSIX shell does
/// inside double quotes, without running anything: what the cache and artifact helpers do to
/// their `--path`, `--exclude` and `--name` arguments with the stage's environment (so paths
/// may use `GITLAB_ENV` values and defaults). Supported: `${#NAME}` and the operators `-`,
/// `:-`, `=`, `:=`, `+`, `:+`, `?`, `:?`; `\$`, `\\`, `\"` and `` \` `` escapes. A command
/// or arithmetic substitution, an unclosed `${` or a failed `?` check is an error (the caller
/// keeps the argument as given).
pub fn shell_expand(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => match chars.get(i + 1) {
                Some(c @ ('$' | '`' | '"' | '\\')) => {
                    out.push(*c);
                    i += 2;
                }
                _ => {
                    out.push('\\');
                    i += 1;
                }
            },
            '`' => return Err(format!("command substitution is not supported in {s:?}")),
            '$' => {
                i += 1;
                match chars.get(i) {
                    Some('{') => {
                        let start = i + 1;
                        let mut depth = 1;
                        let mut j = start;
                        while j < chars.len() {
                            match chars[j] {
                                '\\' => j += 1,
                                '{' if chars.get(j.wrapping_sub(1)) == Some(&'$') => depth += 1,
                                '}' => {
                                    depth -= 1;
                                    if depth == 0 {
                                        break;
                                    }
                                }
                                _ => {}
                            }
                            j += 1;
                        }
                        if j >= chars.len() {
                            return Err(format!("unclosed ${{ in {s:?}"));
                        }
                        let inner: String = chars[start..j].iter().collect();
                        out.push_str(&braced(&inner, lookup)?);
                        i = j + 1;
                    }
                    Some('(') => {
                        return Err(format!("command substitution is not supported in {s:?}"))
                    }
                    Some(c) if c.is_ascii_alphabetic() || *c == '_' => {
                        let start = i;
                        while chars
                            .get(i)
                            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
                        {
                            i += 1;
                        }
                        let name: String = chars[start..i].iter().collect();
                        out.push_str(&lookup(&name).unwrap_or_default());
                    }
                    // Positional and special parameters are empty here.
                    Some(c) if c.is_ascii_digit() || "@*#?$!-".contains(*c) => i += 1,
                    _ => out.push('$'),
                }
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// One `${…}` of [`shell_expand`].
fn braced(inner: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    if let Some(name) = inner.strip_prefix('#') {
        if !name.is_empty() && valid_name(name) {
            return Ok(lookup(name).unwrap_or_default().chars().count().to_string());
        }
    }
    let name_len = inner
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(inner.len());
    let (name, rest) = inner.split_at(name_len);
    if name.is_empty() {
        return Err(format!("bad substitution ${{{inner}}}"));
    }
    let value = lookup(name);
    if rest.is_empty() {
        return Ok(value.unwrap_or_default());
    }
    let (colon, rest) = match rest.strip_prefix(':') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let mut op = rest.chars();
    let Some(op_char) = op.next() else {
        return Err(format!("bad substitution ${{{inner}}}"));
    };
    let word = op.as_str();
    // `:` tests for unset or empty, no colon for unset only.
    let set = match &value {
        Some(v) => !(colon && v.is_empty()),
        None => false,
    };
    match op_char {
        '-' | '=' => {
            if set {
                Ok(value.unwrap_or_default())
            } else {
                shell_expand(word, lookup)
            }
        }
        '+' => {
            if set {
                shell_expand(word, lookup)
            } else {
                Ok(String::new())
            }
        }
        '?' => {
            if set {
                Ok(value.unwrap_or_default())
            } else {
                Err(format!("{name}: {}", shell_expand(word, lookup)?))
            }
        }
        _ => Err(format!("unsupported substitution ${{{inner}}}")),
    }
}

/// Parses a Go duration string (`1h30m`, `90s`, `1.5h`, `300ms`).
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() || s.starts_with('-') {
        return None;
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += n * factor;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).ok()
}

/// A `KEY=value` entry of a runner's or a service's `environment`, split at the first `=`
/// (`key=value=value2` is `key` and `value=value2`); an entry without `=` is no variable and
/// is left out, as upstream leaves it out.
pub fn parse_variable(entry: &str) -> Option<(&str, &str)> {
    entry.split_once('=')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(pairs: &[(&str, &str)]) -> VarList {
        VarList {
            vars: pairs.iter().map(|(k, v)| Var::plain(k, *v)).collect(),
            tmp_dir: "/b/p.tmp".into(),
        }
    }

    #[test]
    fn expansion_follows_go_rules() {
        let l = list(&[("A", "1"), ("B", "x$A"), ("A", "2")]);
        assert_eq!(l.expand("$A-${A}-$$A-$-${}-$NOPE."), "2-2-$A--.");
        // Go's os.Expand: a digit names one character, and an unclosed `${` eats only `${`.
        assert_eq!(l.expand("$1A"), "A");
        assert_eq!(l.expand("x${A"), "xA");
        assert_eq!(l.expanded().get("B").unwrap().value, "x2");
    }

    #[test]
    fn special_parameters_expand_to_nothing_even_when_defined() {
        let l = list(&[("1", "one"), ("@", "at"), ("?", "q"), ("10", "ten")]);
        assert_eq!(l.expand("a$1b"), "ab");
        assert_eq!(l.expand("a${1}b$@c$?d"), "abcd");
        // `${10}` names the variable `10`, which is not special.
        assert_eq!(l.expand("${10}"), "ten");
    }

    #[test]
    fn file_variables_expand_to_their_path() {
        let mut l = list(&[("REF", "see $CFG")]);
        l.vars.push(Var {
            key: "CFG".into(),
            value: "content".into(),
            file: true,
            ..Default::default()
        });
        assert_eq!(l.expanded().get("REF").unwrap().value, "see /b/p.tmp/CFG");
        assert!(l.env().contains(&"CFG=/b/p.tmp/CFG".to_string()));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("10"), None);
        assert_eq!(parse_go_duration("-1s"), None);
        assert_eq!(parse_go_duration("5x"), None);
    }

    fn payload_vars(vars: serde_json::Value) -> VarList {
        let payload =
            JobPayload::from_json(&serde_json::json!({"id": 1, "variables": vars}).to_string())
                .unwrap();
        let paths = JobPaths {
            root_dir: "/builds".into(),
            build_dir: "/builds/p".into(),
            tmp_dir: "/builds/p.tmp".into(),
            cache_dir: "/cache/p".into(),
        };
        job_variables(
            &payload,
            &RunnerSettings::default(),
            &paths,
            &VarInputs::default(),
        )
        .expanded()
    }

    #[test]
    fn services_see_public_and_internal_definitions_only() {
        let l = payload_vars(serde_json::json!([
            {"key": "DB_PASSWORD", "value": "yaml-default-pw", "public": true},
            {"key": "DB_PASSWORD", "value": "project-secret-pw", "masked": true},
            {"key": "ONLY_SECRET", "value": "s3cr3t"},
            {"key": "PUB", "value": "p", "public": true},
        ]));
        let env = l.public_or_internal().env();
        assert!(
            env.contains(&"DB_PASSWORD=yaml-default-pw".to_string()),
            "{env:?}"
        );
        assert!(env.contains(&"PUB=p".to_string()), "{env:?}");
        assert!(env.contains(&"CI_SERVER=yes".to_string()), "{env:?}");
        assert!(
            !env.iter()
                .any(|e| e.contains("secret-pw") || e.contains("s3cr3t")),
            "{env:?}"
        );
        // The job itself still gets the project value.
        assert_eq!(l.get("DB_PASSWORD").unwrap().value, "project-secret-pw");
    }

    #[test]
    fn protected_ref_is_gitlabs_first_definition() {
        let protected = |vars: serde_json::Value| payload_vars(vars).ref_protected();
        // A job variable cannot turn an unprotected ref into a protected one …
        assert!(!protected(serde_json::json!([
            {"key": "CI_COMMIT_REF_PROTECTED", "value": "false", "public": true},
            {"key": "CI_COMMIT_REF_PROTECTED", "value": "true", "public": true},
        ])));
        // … nor the other way round.
        assert!(protected(serde_json::json!([
            {"key": "CI_COMMIT_REF_PROTECTED", "value": "true", "public": true},
            {"key": "CI_COMMIT_REF_PROTECTED", "value": "false", "public": true},
        ])));
        assert!(!protected(serde_json::json!([])));
        // upstream's Bool: case-insensitive, or an integer equal to 1.
        for (v, want) in [
            ("tRuE", true),
            ("TRUE", true),
            ("t", true),
            ("1", true),
            ("01", true),
            ("+1", true),
            ("fAlSe", false),
            ("0", false),
            ("2", false),
            ("yes", false),
            ("", false),
            ("on", false),
        ] {
            assert_eq!(loose_bool(v), want, "{v:?}");
        }
    }

    #[test]
    fn shell_expansion_as_the_helpers_do() {
        let env = |k: &str| match k {
            "A" => Some("one".to_string()),
            "EMPTY" => Some(String::new()),
            "DIR" => Some("build/out".to_string()),
            _ => None,
        };
        let ok = |s: &str| shell_expand(s, &env).unwrap();
        assert_eq!(ok("$DIR/*.txt"), "build/out/*.txt");
        assert_eq!(ok("${DIR}/x"), "build/out/x");
        assert_eq!(ok("${NOPE:-dist}/x"), "dist/x");
        assert_eq!(ok("${EMPTY:-d}|${EMPTY-d}|${NOPE-d}"), "d||d");
        assert_eq!(ok("${A:+set}|${NOPE:+set}|${EMPTY+set}"), "set||set");
        assert_eq!(ok("${NOPE:-${A}-x}"), "one-x");
        assert_eq!(ok("${#A}"), "3");
        assert_eq!(ok("\\$A $ a$ $1 $@ \\d"), "$A $ a$   \\d");
        assert_eq!(ok("$NOPE"), "");
        assert!(shell_expand("$(id)", &env).is_err());
        assert!(shell_expand("`id`", &env).is_err());
        assert!(shell_expand("${A", &env).is_err());
        assert!(shell_expand("${NOPE?missing}", &env).is_err());
        assert!(shell_expand("${}", &env).is_err());
    }

    /// A job's paths under `/builds/p`.
    fn test_paths() -> JobPaths {
        JobPaths {
            root_dir: "/builds".into(),
            build_dir: "/builds/p".into(),
            tmp_dir: "/builds/p.tmp".into(),
            cache_dir: "/cache/p".into(),
        }
    }

    #[test]
    fn environment_entries_without_an_equals_sign_are_left_out() {
        let payload = JobPayload::from_json(r#"{"id": 1}"#).unwrap();
        let paths = test_paths();
        let runner = RunnerSettings {
            environment: vec!["NOEQUALS".into(), "KEY=a=b".into(), "EMPTY=".into()],
            ..RunnerSettings::default()
        };
        let l = job_variables(&payload, &runner, &paths, &VarInputs::default());
        assert!(l.get("NOEQUALS").is_none(), "upstream drops it");
        assert_eq!(l.value("KEY").as_deref(), Some("a=b"));
        assert_eq!(l.value("EMPTY").as_deref(), Some(""));
    }

    #[test]
    fn tls_files_become_file_variables() {
        let payload = JobPayload::from_json(r#"{"id": 1}"#).unwrap();
        let paths = test_paths();
        let mut runner = RunnerSettings::default();
        runner.tls.ca_chain = "-----BEGIN CERTIFICATE-----\nCA\n".into();
        runner.tls.auth_cert = "CERT".into();
        let l = job_variables(&payload, &runner, &paths, &VarInputs::default());
        let ca = l.get("CI_SERVER_TLS_CA_FILE").expect("CA file variable");
        assert!(ca.file && ca.value.contains("CA"));
        assert_eq!(
            l.value("CI_SERVER_TLS_CA_FILE").as_deref(),
            Some("/builds/p.tmp/CI_SERVER_TLS_CA_FILE")
        );
        // A certificate without its key is not handed over, as upstream.
        assert!(l.get("CI_SERVER_TLS_CERT_FILE").is_none());
        runner.tls.auth_key = "KEY".into();
        let l = job_variables(&payload, &runner, &paths, &VarInputs::default());
        assert!(l.get("CI_SERVER_TLS_CERT_FILE").is_some_and(|v| v.file));
        assert!(l
            .get("CI_SERVER_TLS_KEY_FILE")
            .is_some_and(|v| v.file && !v.hidden));
        let none = job_variables(
            &payload,
            &RunnerSettings::default(),
            &paths,
            &VarInputs::default(),
        );
        assert!(none.get("CI_SERVER_TLS_CA_FILE").is_none());
    }

    #[test]
    fn unique_keeps_last() {
        let l = list(&[("A", "1"), ("B", "2"), ("A", "3")]);
        let u: Vec<(&str, &str)> = l
            .unique()
            .iter()
            .map(|v| (v.key.as_str(), v.value.as_str()))
            .collect();
        assert_eq!(u, vec![("B", "2"), ("A", "3")]);
    }
}
