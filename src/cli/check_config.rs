//! `drover check-config`: load a `config.toml` the way `drover run` would and report what an
//! operator needs to check: per runner its executor, limit and machine settings, which
//! autoscaling section is active at `--now` and the next instants the effective idle settings
//! change, plus every warning and error with its line.
//!
//! Exit status: 0 when the file loads (warnings allowed), 1 when it does not, 2 for usage
//! errors (clap). Output goes to stdout; in text mode a failed load is also summarised on
//! stderr as `drover: …`. Nothing here decides anything: it formats what the config module
//! computes.

use crate::cli::output::{errln, out, outln};
use std::path::PathBuf;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use clap::{Args, ValueEnum};
use serde_json::{json, Value};

use crate::config::{self, Config, ConfigError, Diagnostic, EffectiveIdle, Loaded, MachineConfig};

/// How many upcoming changes of the effective idle settings to show per runner.
const CHANGES_SHOWN: usize = 3;

/// How far ahead to look for those changes.
const HORIZON_DAYS: i64 = 400;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Human-readable report.
    Text,
    /// One JSON object (see the command's help).
    Json,
}

/// Arguments of `drover check-config`.
#[derive(Debug, Args)]
#[command(
    about = "Load config.toml and report runners, machine settings, active autoscaling sections, warnings and errors",
    after_help = "Exit status: 0 when the config loads (warnings allowed), 1 when it has errors, 2 for usage errors."
)]
pub struct CheckConfigArgs {
    /// Config file (default as gitlab-runner: /etc/gitlab-runner/config.toml as root, ~/.gitlab-runner/config.toml otherwise)
    #[arg(short = 'c', long = "config", env = "CONFIG_FILE", value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Output format
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,

    /// Evaluate autoscaling periods at this instant (RFC 3339, e.g. 2026-03-02T09:30:00+01:00) instead of now
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    pub now: Option<DateTime<Utc>>,
}

fn parse_now(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .map_err(|e| format!("{e}: expected RFC 3339, e.g. 2026-03-02T09:30:00Z"))
}

/// Runs the command and returns its exit code.
pub fn run(args: &CheckConfigArgs) -> ExitCode {
    let path = args
        .config
        .clone()
        .unwrap_or_else(config::default_config_path);
    let now = args.now.unwrap_or_else(Utc::now);
    let origin = path.display().to_string();
    let result = config::load_file(&path);
    match args.format {
        Format::Json => {
            let report = json_report(&result, now);
            outln!(
                "{}",
                serde_json::to_string_pretty(&report).unwrap_or_else(|_| "{}".to_string())
            );
        }
        Format::Text => match &result {
            Ok(loaded) => out!("{}", text_report(&origin, loaded, now)),
            Err(e) => {
                for w in e.warnings() {
                    outln!("{}", w.render(&origin, "warning"));
                }
                errln!("drover: {e}");
            }
        },
    }
    if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The JSON report for a load result at `now`.
pub fn json_report(result: &Result<Loaded, ConfigError>, now: DateTime<Utc>) -> Value {
    match result {
        Ok(loaded) => {
            let c = &loaded.config;
            json!({
                "concurrent": c.concurrent,
                "check_interval": c.check_interval,
                "now": now.to_rfc3339(),
                "runners": c.runners.iter().map(|r| json!({
                    "name": r.name,
                    "executor": r.executor,
                    "limit": r.limit,
                    "machine": r.machine.as_ref().map(|m| machine_json(m, now)),
                })).collect::<Vec<_>>(),
                "warnings": loaded.warnings.iter().map(diag_json).collect::<Vec<_>>(),
                "errors": Vec::<Value>::new(),
            })
        }
        Err(e) => json!({
            "concurrent": Value::Null,
            "check_interval": Value::Null,
            "now": now.to_rfc3339(),
            "runners": Vec::<Value>::new(),
            "warnings": e.warnings().iter().map(diag_json).collect::<Vec<_>>(),
            "errors": e.errors().iter().map(diag_json).collect::<Vec<_>>(),
        }),
    }
}

fn diag_json(d: &Diagnostic) -> Value {
    // The same facts the text report shows: position, key and section where known, the
    // offending source line and the hint.
    serde_json::to_value(d).unwrap_or_else(|_| json!({ "message": d.message }))
}

fn idle_json(e: &EffectiveIdle) -> Value {
    json!({
        "IdleCount": e.idle_count,
        "IdleCountMin": e.idle_count_min,
        "IdleScaleFactor": e.idle_scale_factor,
        "IdleTime": e.idle_time,
    })
}

fn machine_json(m: &MachineConfig, now: DateTime<Utc>) -> Value {
    let eff = m.effective_idle(now);
    let changes = m.idle_changes(now, CHANGES_SHOWN, chrono::Duration::days(HORIZON_DAYS));
    json!({
        "IdleCount": m.idle_count,
        "IdleCountMin": m.idle_count_min,
        "IdleScaleFactor": m.idle_scale_factor,
        "IdleTime": m.idle_time,
        "MaxBuilds": m.max_builds,
        "MaxGrowthRate": m.max_growth_rate,
        "MachineDriver": m.machine_driver,
        "MachineName": m.machine_name,
        "MachineOptions": m.machine_options,
        "MachineOptionsWithName": m.machine_options_with_name,
        "MaxRemovalAttempts": m.max_removal_attempts,
        "autoscaling_sections": m.autoscaling.len(),
        "active_section": eff.active_section,
        "effective": idle_json(&eff),
        "next_changes": changes.iter().map(|(at, e)| {
            let mut v = idle_json(e);
            if let Some(obj) = v.as_object_mut() {
                obj.insert("at".into(), json!(at.to_rfc3339()));
                obj.insert("active_section".into(), json!(e.active_section));
            }
            v
        }).collect::<Vec<_>>(),
    })
}

fn idle_text(e: &EffectiveIdle) -> String {
    format!(
        "IdleCount {}, IdleCountMin {}, IdleScaleFactor {}, IdleTime {}s",
        e.idle_count, e.idle_count_min, e.idle_scale_factor, e.idle_time
    )
}

fn section_text(m: &MachineConfig, active: Option<usize>) -> String {
    match active.and_then(|i| m.autoscaling.get(i).map(|a| (i, a))) {
        Some((i, a)) => {
            let zone = if a.timezone().is_empty() {
                "Local"
            } else {
                a.timezone()
            };
            format!(
                "autoscaling[{i}] (Periods {:?}, Timezone {zone})",
                a.periods()
            )
        }
        None => "none (the [runners.machine] values apply)".to_string(),
    }
}

/// The text report for a loaded config at `now`.
pub fn text_report(origin: &str, loaded: &Loaded, now: DateTime<Utc>) -> String {
    let c: &Config = &loaded.config;
    let mut out = String::new();
    out.push_str(&format!("{origin}: loaded\n"));
    out.push_str(&format!(
        "concurrent = {}, check_interval = {}s, shutdown_timeout = {}s, listen_address = {:?}\n",
        c.concurrent,
        c.check_interval_or_default(),
        c.shutdown_timeout_or_default(),
        c.listen_address
    ));
    if let Some(drain) = c.machine.as_ref().and_then(|m| m.shutdown_drain.as_ref()) {
        out.push_str(&format!(
            "shutdown drain: {}, concurrency {}, max_retries {}, retry_backoff {}\n",
            if drain.enabled { "enabled" } else { "disabled" },
            drain.concurrency_or_default(),
            drain.max_retries_or_default(),
            drain.retry_backoff_or_default()
        ));
    }
    out.push_str(&format!("periods evaluated at {}\n", now.to_rfc3339()));
    out.push_str(&format!("{} runner(s)\n", c.runners.len()));
    for (i, r) in c.runners.iter().enumerate() {
        let name = if r.name.is_empty() {
            "(no name)".to_string()
        } else {
            format!("{:?}", r.name)
        };
        let exec = if r.executor.is_empty() {
            "(none)"
        } else {
            r.executor.as_str()
        };
        let limit = if r.limit > 0 {
            r.limit.to_string()
        } else {
            "none".to_string()
        };
        out.push_str(&format!(
            "\nrunners[{i}] {name}: executor {exec}, limit {limit}\n"
        ));
        let Some(m) = &r.machine else { continue };
        out.push_str(&format!(
            "  machine: driver {:?}, name {:?}, MaxBuilds {}, MaxGrowthRate {}, MaxRemovalAttempts {}\n",
            m.machine_driver, m.machine_name, m.max_builds, m.max_growth_rate,
            m.max_removal_attempts_or_default()
        ));
        for opt in &m.machine_options {
            out.push_str(&format!("    option {opt}\n"));
        }
        for opt in &m.machine_options_with_name {
            out.push_str(&format!("    option (with name) {opt}\n"));
        }
        out.push_str(&format!(
            "  root idle: IdleCount {}, IdleCountMin {}, IdleScaleFactor {}, IdleTime {}s\n",
            m.idle_count, m.idle_count_min, m.idle_scale_factor, m.idle_time
        ));
        let eff = m.effective_idle(now);
        out.push_str(&format!(
            "  autoscaling sections: {}; active now: {}\n",
            m.autoscaling.len(),
            section_text(m, eff.active_section)
        ));
        out.push_str(&format!("  effective now: {}\n", idle_text(&eff)));
        if !m.autoscaling.is_empty() {
            let changes = m.idle_changes(now, CHANGES_SHOWN, chrono::Duration::days(HORIZON_DAYS));
            if changes.is_empty() {
                out.push_str(&format!(
                    "  no change of the effective settings within {HORIZON_DAYS} days\n"
                ));
            }
            for (at, e) in changes {
                out.push_str(&format!(
                    "  from {}: {} -> {}\n",
                    at.to_rfc3339(),
                    section_text(m, e.active_section),
                    idle_text(&e)
                ));
            }
        }
    }
    if loaded.warnings.is_empty() {
        out.push_str("\nno warnings\n");
    } else {
        out.push_str(&format!("\n{} warning(s):\n", loaded.warnings.len()));
        for w in &loaded.warnings {
            out.push_str(&w.render(origin, "warning"));
            out.push('\n');
        }
    }
    out
}
