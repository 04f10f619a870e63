//! Load-time checks on a typed [`Config`], as upstream runs them, plus drover's own warnings.
//!
//! Errors (the file does not load): every `MachineOptionsWithName` entry must contain `%s`;
//! every autoscaling section's periods and time zone must compile (a bad period in any runner
//! fails the whole file). Warnings (the file loads): a non-empty deprecated `OffPeakPeriods`,
//! other `OffPeak*` keys, executors drover does not run, a docker+machine runner without a
//! usable `MachineName`, unknown pull policies, period lint (e.g. descending ranges) and slot
//! cgroup templates without `${slot}`. Each finding names the runner and points at the key.
//! Nothing here reads the clock or the file system.

use std::collections::BTreeMap;

use super::model::{Config, RunnerConfig};
use super::walk::Walker;

/// Executors drover runs.
pub const SUPPORTED_EXECUTORS: &[&str] = &["docker+machine", "docker"];

const PULL_POLICIES: &[&str] = &["always", "if-not-present", "never"];

pub(crate) fn validate(config: &mut Config, w: &mut Walker<'_>) {
    validate_global(config, w);
    for (index, runner) in config.runners.iter_mut().enumerate() {
        validate_runner(index, runner, &config.labels, w);
    }
}

/// The checks of the global settings (`config.runners` is not looked at).
pub(crate) fn validate_global(config: &Config, w: &mut Walker<'_>) {
    check_label_patterns(&config.labels, "", "global labels", w);
    check_logging(config, w);
}

/// The checks of runner `index`, given the global `labels`; compiles its autoscaling periods.
pub(crate) fn validate_runner(
    index: usize,
    runner: &mut RunnerConfig,
    labels: &BTreeMap<String, String>,
    w: &mut Walker<'_>,
) {
    let base = format!("runners[{index}]");
    let label = Walker::runner_label(index, Some(&runner.name));
    check_label_patterns(&runner.labels, &base, &label, w);
    let computed = labels
        .keys()
        .chain(runner.labels.keys().filter(|k| !labels.contains_key(*k)))
        .count();
    if computed > MAX_LABELS {
        error_at(
            w,
            &base,
            "labels",
            &label,
            format!("{computed} labels with the global ones; at most {MAX_LABELS} are allowed"),
            Some("remove some labels here or in the top-level `labels`".into()),
        );
    }
    check_executor(runner, &base, &label, w);
    check_machine(runner, &base, &label, w);
    check_docker(runner, &base, &label, w);
    if runner.use_slot_cgroups {
        let t = &runner.slot_cgroup_template;
        if !t.is_empty() && !t.contains("${slot}") && !t.contains("$slot") {
            warn_at(
                w,
                &base,
                "slot_cgroup_template",
                &label,
                "template has no ${slot}, so every job shares one cgroup".into(),
                Some("use a template like \"gitlab-runner/slot-${slot}\"".into()),
            );
        }
    }
}

/// How serious a finding is, and where its caret goes.
#[derive(Debug, Clone, Copy)]
enum Level {
    /// A warning, at the key.
    Warning,
    /// An error, at the value.
    Error,
    /// An error, at the key.
    ErrorAtKey,
}

/// Emits a finding at `base.key` (falling back to `base`, then to the whole file).
fn finding(
    w: &mut Walker<'_>,
    base: &str,
    key: &str,
    label: &str,
    message: String,
    hint: Option<String>,
    level: Level,
) {
    let error = !matches!(level, Level::Warning);
    let at_key = !matches!(level, Level::Error);
    let path = match (base.is_empty(), key.is_empty()) {
        (true, _) => key.to_string(),
        (_, true) => base.to_string(),
        _ => format!("{base}.{key}"),
    };
    let span = w.span_of(&path).or_else(|| w.span_of(base)).map(|s| {
        if error && !at_key {
            s.value
        } else {
            s.key
        }
    });
    // Name the key relative to the runner: `machine.MachineOptionsWithName[1]`.
    let rel_path = if base.is_empty() {
        path.as_str()
    } else {
        path.split_once("].").map_or("", |(_, rest)| rest)
    };
    let rel = if rel_path.is_empty() {
        String::new()
    } else {
        format!(", key {rel_path}")
    };
    let message = format!("{label}{rel}: {message}");
    match (span, error) {
        (Some(span), true) => w.error(span, message, hint),
        (Some(span), false) => w.warn(span, message, hint),
        (None, is_error) => {
            let mut d = super::diagnostic::Diagnostic::whole_file(message);
            d.hint = hint;
            if is_error {
                w.errors.push(d);
            } else {
                w.warnings.push(d);
            }
        }
    }
}

fn warn_at(
    w: &mut Walker<'_>,
    base: &str,
    key: &str,
    label: &str,
    message: String,
    hint: Option<String>,
) {
    finding(w, base, key, label, message, hint, Level::Warning);
}

fn error_at(
    w: &mut Walker<'_>,
    base: &str,
    key: &str,
    label: &str,
    message: String,
    hint: Option<String>,
) {
    finding(w, base, key, label, message, hint, Level::Error);
}

/// At most this many labels per runner, global ones included (GitLab's limit).
const MAX_LABELS: usize = 32;

/// Label keys: a letter, digit or `_`, then 2 to 64 of letters, digits, `.`, `_`, `-`.
fn label_key_ok(key: &str) -> bool {
    let mut chars = key.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let rest: Vec<char> = chars.collect();
    first_ok
        && (2..=64).contains(&rest.len())
        && rest
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Label values: 1 to 256 of letters, digits, `.`, `_`, `-`.
fn label_value_ok(value: &str) -> bool {
    (1..=256).contains(&value.chars().count())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn check_label_patterns(
    labels: &BTreeMap<String, String>,
    base: &str,
    label: &str,
    w: &mut Walker<'_>,
) {
    for (k, v) in labels {
        let key = format!("labels.{k}");
        if !label_key_ok(k) {
            error_at_key(w, base, &key, label,
                format!("invalid label key {k:?}"),
                Some("label keys are 3 to 65 characters: a letter, digit or _ first, then letters, digits, '.', '_' or '-'".into()));
        } else if !label_value_ok(v) {
            error_at(
                w,
                base,
                &key,
                label,
                format!("invalid value {v:?} for label {k:?}"),
                Some("label values are 1 to 256 letters, digits, '.', '_' or '-'".into()),
            );
        }
    }
}

fn error_at_key(
    w: &mut Walker<'_>,
    base: &str,
    key: &str,
    label: &str,
    message: String,
    hint: Option<String>,
) {
    finding(w, base, key, label, message, hint, Level::ErrorAtKey);
}

fn check_executor(runner: &RunnerConfig, base: &str, label: &str, w: &mut Walker<'_>) {
    let exec = runner.executor.as_str();
    if exec.is_empty() {
        warn_at(
            w,
            base,
            "",
            label,
            "no executor is set, so this runner cannot take jobs".into(),
            Some("add executor = \"docker+machine\"".into()),
        );
    } else if !SUPPORTED_EXECUTORS.contains(&exec) {
        warn_at(w, base, "executor", label,
            format!("executor {exec:?} is not one drover runs (it runs {}); this runner is loaded but takes no jobs", SUPPORTED_EXECUTORS.join(" and ")),
            None);
    }
}

fn check_machine(runner: &mut RunnerConfig, base: &str, label: &str, w: &mut Walker<'_>) {
    let is_machine = runner.executor == "docker+machine";
    let Some(machine) = runner.machine.as_mut() else {
        if is_machine {
            warn_at(w, base, "executor", label,
                "docker+machine runner without [runners.machine]: it cannot create machines and will fail every job request".into(),
                Some("add a [runners.machine] section with MachineDriver and MachineName".into()));
        }
        return;
    };
    let mbase = format!("{base}.machine");
    for (i, opt) in machine.machine_options_with_name.iter().enumerate() {
        if !opt.contains("%s") {
            error_at(
                w,
                &mbase,
                &format!("MachineOptionsWithName[{i}]"),
                label,
                format!("machine option with name {opt:?} must contain %s, where the machine name goes"),
                Some(
                    "put %s where the machine name should appear; options that do not need the name belong in MachineOptions"
                        .into(),
                ),
            );
        }
    }
    if is_machine {
        if machine.machine_name.is_empty() {
            warn_at(w, &mbase, "", label,
                "MachineName is empty: upstream fails every job request with \"missing Machine options\"".into(),
                Some("set MachineName = \"auto-scale-%s\"".into()));
        } else if let Some(why) = unusable_machine_name(&machine.machine_name) {
            error_at(
                w,
                &mbase,
                "MachineName",
                label,
                why,
                Some("docker-machine accepts only letters, digits, '-' and '.' in a machine name; use a template such as \"auto-scale-%s\"".into()),
            );
        } else if !machine.machine_name.contains("%s") {
            warn_at(
                w,
                &mbase,
                "MachineName",
                label,
                format!(
                    "MachineName {:?} has no %s, so every machine would get the same name",
                    machine.machine_name
                ),
                Some(format!(
                    "add %s, e.g. {:?}",
                    format!("{}-%s", machine.machine_name)
                )),
            );
        }
        if machine.machine_driver.is_empty() {
            warn_at(
                w,
                &mbase,
                "",
                label,
                "MachineDriver is empty: docker-machine cannot create machines".into(),
                Some("set MachineDriver, e.g. \"amazonec2\" or \"google\"".into()),
            );
        }
    }
    if !machine.off_peak_periods.is_empty() {
        warn_at(
            w,
            &mbase,
            "OffPeakPeriods",
            label,
            "OffPeak settings are deprecated and have been ignored since gitlab-runner 14.0".into(),
            Some("convert them into a [[runners.machine.autoscaling]] section".into()),
        );
    } else {
        for (key, set) in [
            ("OffPeakTimezone", !machine.off_peak_timezone.is_empty()),
            ("OffPeakIdleCount", machine.off_peak_idle_count != 0),
            ("OffPeakIdleTime", machine.off_peak_idle_time != 0),
        ] {
            if set {
                warn_at(
                    w,
                    &mbase,
                    key,
                    label,
                    format!("{key} is deprecated and ignored"),
                    Some("use a [[runners.machine.autoscaling]] section".into()),
                );
            }
        }
    }
}

/// gitlab-runner's log levels (logrus) and formats.
const LOG_LEVELS: &[&str] = &[
    "panic", "fatal", "error", "warn", "warning", "info", "debug", "trace",
];
const LOG_FORMATS: &[&str] = &["runner", "text", "json"];

fn check_logging(config: &Config, w: &mut Walker<'_>) {
    for (key, value, allowed) in [
        ("log_level", &config.log_level, LOG_LEVELS),
        ("log_format", &config.log_format, LOG_FORMATS),
    ] {
        let Some(v) = value else { continue };
        if !allowed.contains(&v.to_ascii_lowercase().as_str()) {
            error_at(
                w,
                "",
                key,
                "global settings",
                format!("unknown {key} {v:?}"),
                Some(format!("use one of {}", allowed.join(", "))),
            );
        }
    }
}

/// Why names made from `template` can never be machine names, if they cannot: the name the
/// engine builds from it (`%s` replaced, as `new_machine_name` does) must be letters, digits,
/// `-` and `.` only, or every `docker-machine create` fails (and a control character would
/// also break the store and the logs).
fn unusable_machine_name(template: &str) -> Option<String> {
    // Without %s (a warning of its own, as upstream loads it) check the template as written.
    let name = if template.contains("%s") || template.contains("%v") {
        drover_engine::naming::new_machine_name(template, "0")
    } else {
        template.to_string()
    };
    let bad = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '.'))?;
    let what = if bad.is_control() {
        format!(
            "the control character {:?}",
            bad.escape_default().to_string()
        )
    } else if bad == '%' || bad == '!' || bad == '(' {
        "a % verb other than %s".to_string()
    } else {
        format!("{bad:?}")
    };
    Some(format!(
        "MachineName {template:?} cannot name a machine: it contains {what}"
    ))
}

/// The size keys of `[runners.docker]`, with whether `-1` (unlimited) is allowed.
const SIZE_KEYS: &[(&str, bool)] = &[
    ("memory", false),
    ("memory_swap", true),
    ("memory_reservation", false),
    ("service_memory", false),
    ("service_memory_swap", true),
    ("service_memory_reservation", false),
];

fn check_docker_values(
    docker: &super::docker::DockerConfig,
    dbase: &str,
    label: &str,
    w: &mut Walker<'_>,
) {
    use super::docker::{check_docker_cpuset, parse_docker_cpus, parse_docker_size};
    let value = |key: &str| -> &str {
        match key {
            "memory" => &docker.memory,
            "memory_swap" => &docker.memory_swap,
            "memory_reservation" => &docker.memory_reservation,
            "service_memory" => &docker.service_memory,
            "service_memory_swap" => &docker.service_memory_swap,
            "service_memory_reservation" => &docker.service_memory_reservation,
            "cpus" => &docker.cpus,
            "service_cpus" => &docker.service_cpus,
            "cpuset_cpus" => &docker.cpuset_cpus,
            "cpuset_mems" => &docker.cpuset_mems,
            "service_cpuset_cpus" => &docker.service_cpuset_cpus,
            _ => "",
        }
    };
    let mut checks: Vec<(&str, Result<(), String>)> = Vec::new();
    for &(key, unlimited) in SIZE_KEYS {
        let v = value(key);
        let unset = v.is_empty() || (unlimited && v == "-1");
        if !unset {
            checks.push((key, parse_docker_size(v).map(|_| ())));
        }
    }
    for key in ["cpus", "service_cpus"] {
        let v = value(key);
        if !v.is_empty() {
            checks.push((key, parse_docker_cpus(v).map(|_| ())));
        }
    }
    for key in ["cpuset_cpus", "cpuset_mems", "service_cpuset_cpus"] {
        let v = value(key);
        if !v.is_empty() {
            checks.push((key, check_docker_cpuset(v)));
        }
    }
    for (key, result) in checks {
        if let Err(why) = result {
            error_at(
                w,
                dbase,
                key,
                label,
                why,
                Some(format!("fix {key}, or remove it for no limit (upstream fails every job with this value)")),
            );
        }
    }
}

fn check_docker(runner: &RunnerConfig, base: &str, label: &str, w: &mut Walker<'_>) {
    let Some(docker) = runner.docker.as_ref() else {
        return;
    };
    let dbase = format!("{base}.docker");
    check_docker_values(docker, &dbase, label, w);
    for (key, list) in [
        ("pull_policy", &docker.pull_policy),
        ("allowed_pull_policies", &docker.allowed_pull_policies),
    ] {
        for p in list {
            if !PULL_POLICIES.contains(&p.as_str()) {
                warn_at(
                    w,
                    &dbase,
                    key,
                    label,
                    format!("unsupported pull policy {p:?}: jobs on this runner will fail"),
                    Some("use always, if-not-present or never".into()),
                );
            }
        }
    }
}
