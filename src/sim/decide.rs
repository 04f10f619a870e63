//! One Acquire pass explained from a state file, without touching any machine: what
//! `drover autoscale decide` prints and what `drover compare --upstream-log` asks at each of
//! upstream's decisions.
//!
//! A state file's machines go into a fresh engine ([`prepare`]); the engine's pass runs with
//! connectivity answered from the file ([`decide`]); [`Decision`] renders what it decided as
//! text or JSON. The decisions come from [`crate::engine`]; this module only builds its input
//! and renders its output.

use std::collections::{HashMap, HashSet};

use anyhow::{anyhow, bail};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::config::{self, Config};
use crate::engine::{
    explain, naming, AcquireOutcome, AcquireResult, Counts, Engine, MachineState, Notice, Reason,
    RunnerId, Time, TrackedMachine,
};

/// The state file.
#[derive(Debug, Clone, Deserialize)]
pub struct StateFile {
    /// The machines in listing order.
    pub machines: Vec<StateMachine>,
}

/// One machine of the state file.
#[derive(Debug, Clone, Deserialize)]
pub struct StateMachine {
    /// The machine name.
    pub name: String,
    /// Its state; `None` for a machine seen on disk for the first time.
    #[serde(default)]
    pub state: Option<MachineState>,
    /// Jobs run so far.
    #[serde(default)]
    pub used_count: i64,
    /// The last use; `None` means never (Go's zero time).
    #[serde(default)]
    pub last_used: Option<DateTime<Utc>>,
    /// Failed removal attempts so far.
    #[serde(default)]
    pub retry_count: u32,
    /// False: tracked in memory only (Creating), listed after the on-disk machines.
    #[serde(default = "yes")]
    pub on_disk: bool,
    /// The result of the connectivity check.
    #[serde(default = "yes")]
    pub reachable: bool,
}

fn yes() -> bool {
    true
}

/// What one pass decided, ready to print.
#[derive(Debug, Clone)]
pub struct Decision {
    /// The runner's name.
    pub runner: String,
    /// The pass outcome and report.
    pub outcome: AcquireOutcome,
    /// The counts the next pass would list.
    pub counts_after: Counts,
    /// Non-fatal findings (e.g. a MachineName without `%s`).
    pub warnings: Vec<String>,
    /// The frozen clock.
    pub now: Time,
}

fn pick_runner<'c>(
    config: &'c Config,
    name: Option<&str>,
) -> anyhow::Result<&'c config::RunnerConfig> {
    match name {
        Some(n) => config.runners.iter().find(|r| r.name == n).ok_or_else(|| {
            let names: Vec<&str> = config.runners.iter().map(|r| r.name.as_str()).collect();
            anyhow!("no [[runners]] entry is named {n:?}; the config has {names:?}")
        }),
        None => config
            .runners
            .iter()
            .find(|r| r.executor == "docker+machine")
            .ok_or_else(|| {
                anyhow!("the config has no docker+machine runner; pick one with --runner NAME")
            }),
    }
}

/// A fresh engine holding the machines of a state file for one runner, ready for a pass (or
/// for any other input, e.g. a release): the one way a state file becomes engine state, shared
/// by `autoscale decide` and `compare --upstream-log`.
#[derive(Debug)]
pub struct Prepared {
    /// The engine (one runner, [`RunnerId`] 0).
    pub engine: Engine,
    /// The runner's id in the engine.
    pub runner: RunnerId,
    /// The runner's name.
    pub runner_name: String,
    /// The on-disk listing, in the file's order.
    pub on_disk: Vec<String>,
    /// Connectivity answers by machine name.
    pub reachable: HashMap<String, bool>,
    /// Non-fatal findings.
    pub warnings: Vec<String>,
}

/// Builds the engine for `runner` (by name; default: the first docker+machine runner) with
/// the machines of `state` tracked as they are.
pub fn prepare(
    config: &Config,
    runner: Option<&str>,
    state: &StateFile,
    now: Time,
) -> anyhow::Result<Prepared> {
    let rc = pick_runner(config, runner)?;
    let policy = crate::engine::policy_from_runner(rc)?;
    if policy.machine_name.is_empty() {
        bail!(
            "runner {:?} has an empty MachineName in [runners.machine] (missing Machine \
             options); set it to a template such as \"auto-%s\"",
            rc.name
        );
    }
    let warnings: Vec<String> = naming::machine_name_warning(&policy.machine_name)
        .into_iter()
        .collect();
    let r = RunnerId(0);
    let mut engine = Engine::new(vec![policy], 0);
    let mut seen = HashSet::new();
    let mut on_disk = Vec::new();
    let mut reachable = HashMap::new();
    for m in &state.machines {
        if !seen.insert(m.name.as_str()) {
            bail!("machine {:?} is listed twice in the state file", m.name);
        }
        reachable.insert(m.name.clone(), m.reachable);
        if m.on_disk {
            on_disk.push(m.name.clone());
        }
        if let Some(st) = m.state {
            engine.track(
                TrackedMachine {
                    name: m.name.clone(),
                    state: st,
                    used_count: m.used_count,
                    used: m.last_used.unwrap_or_else(crate::engine::zero_time),
                    retry_count: m.retry_count,
                    runner: Some(r),
                },
                now,
            )?;
        }
    }
    Ok(Prepared {
        engine,
        runner: r,
        runner_name: rc.name.clone(),
        on_disk,
        reachable,
        warnings,
    })
}

/// Runs one pass for the runner over the state, without touching any machine.
pub fn decide(
    config: &Config,
    runner: Option<&str>,
    state: &StateFile,
    now: Time,
) -> anyhow::Result<Decision> {
    let Prepared {
        mut engine,
        runner: r,
        runner_name,
        on_disk,
        reachable,
        mut warnings,
    } = prepare(config, runner, state, now)?;
    let outcome = engine.run_acquire(r, Some(&on_disk), now, |name| {
        reachable.get(name).copied().unwrap_or(true)
    })?;
    let counts_after = engine.listing_counts(r, &on_disk)?;
    // Everything the engine wanted the operator to know (e.g. that it stopped creating after
    // MAX_CREATIONS_PER_PASS); the other notices describe commands decide does not run.
    while let Some(notice) = engine.poll_notice() {
        if let Notice::Warning(w) = notice {
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
    }
    Ok(Decision {
        runner: runner_name,
        outcome,
        counts_after,
        warnings,
        now,
    })
}

fn counts_json(c: &Counts) -> Value {
    json!({
        "acquired": c.acquired,
        "creating": c.creating,
        "idle": c.idle,
        "used": c.used,
        "removing": c.removing,
        "stuck_on_removing": c.stuck_on_removing,
    })
}

impl Decision {
    fn removals(&self) -> Vec<(String, Reason)> {
        let r = &self.outcome.report;
        let mut out: Vec<(String, Reason)> = r
            .removals
            .iter()
            .map(|d| (d.name.clone(), d.reason))
            .collect();
        out.extend(
            r.unavailable
                .iter()
                .map(|n| (n.clone(), Reason::MachineUnavailable)),
        );
        out
    }

    /// The JSON document of the `decide` contract.
    pub fn json(&self) -> Value {
        let r = &self.outcome.report;
        let machine = match &self.outcome.result {
            AcquireResult::Machine(m) => json!(m),
            _ => Value::Null,
        };
        json!({
            "runner": self.runner,
            "machine_filter": r.filter,
            "active_autoscaling": r.idle.active_section,
            "effective": {
                "IdleCount": r.idle.idle_count,
                "IdleCountMin": r.idle.idle_count_min,
                "IdleScaleFactor": r.idle.idle_scale_factor,
                "IdleTime": r.idle.idle_time,
                "limit": r.limits.limit,
                "MaxBuilds": r.limits.max_builds,
                "MaxGrowthRate": r.limits.max_growth_rate,
            },
            "can_create_idle": r.can_create_idle,
            "can_create_on_demand": r.can_create_on_demand,
            "removals": self.removals().iter()
                .map(|(name, reason)| json!({"name": name, "reason": reason.as_str()}))
                .collect::<Vec<_>>(),
            "create": r.created.len(),
            "acquire": {"machine": machine, "error": self.outcome.result.error_text()},
            "counts_after": counts_json(&self.counts_after),
            "warnings": self.warnings,
        })
    }

    /// The text explanation: one sentence per decision.
    pub fn text(&self) -> String {
        let r = &self.outcome.report;
        let c = &r.input_counts;
        let yn = |b: bool| if b { "yes" } else { "no" };
        let section = match r.idle.active_section {
            Some(i) => format!("[[runners.machine.autoscaling]] #{i} is active"),
            None => "no autoscaling section is active: root [runners.machine] values".to_string(),
        };
        let mut out = format!(
            "runner {:?} at {}: machine filter {}\n\
             {section}: IdleCount {}, IdleCountMin {}, IdleScaleFactor {}, IdleTime {} s; \
             limit {}, MaxBuilds {}, MaxGrowthRate {}\n\
             listed before the pass: {} idle, {} acquired, {} creating, {} used, {} removing, \
             {} stuck on removing ({} ignored: not matching the filter)\n\
             can create idle machines: {}; can create on demand: {}\n",
            self.runner,
            self.now.to_rfc3339(),
            r.filter,
            r.idle.idle_count,
            r.idle.idle_count_min,
            r.idle.idle_scale_factor,
            r.idle.idle_time,
            r.limits.limit,
            r.limits.max_builds,
            r.limits.max_growth_rate,
            c.idle,
            c.acquired,
            c.creating,
            c.used,
            c.removing,
            c.stuck_on_removing,
            r.ignored,
            yn(r.can_create_idle),
            yn(r.can_create_on_demand),
        );
        for s in explain::pass_sentences(r, &self.outcome.result) {
            out.push_str("- ");
            out.push_str(&s);
            out.push('\n');
        }
        let a = &self.counts_after;
        out.push_str(&format!(
            "after the pass: {} idle, {} acquired, {} creating, {} used, {} removing, {} stuck \
             on removing\n",
            a.idle, a.acquired, a.creating, a.used, a.removing, a.stuck_on_removing
        ));
        out
    }
}
