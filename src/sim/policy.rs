//! The bridge from a `[[runners]]` entry of `config.toml` to the engine's
//! [`RunnerPolicy`]: limits and machine shape copied as they are, and the idle settings read
//! through [`MachineConfig::effective_idle`] at the instant the engine asks, so schedules are
//! evaluated at the (simulated) wall clock in the config's time zones.
//!
//! It converts; it decides nothing. The simulator uses it; any other driver of the engine may.

use std::sync::Arc;

use crate::config::{MachineConfig, RunnerConfig};
use crate::engine::{IdleSchedule, IdleSettings, Limits, RunnerPolicy, Time};

/// The idle settings of one runner's `[runners.machine]`, periods included.
#[derive(Debug, Clone)]
pub struct ConfigSchedule(pub MachineConfig);

impl IdleSchedule for ConfigSchedule {
    fn idle_at(&self, now: Time) -> IdleSettings {
        let e = self.0.effective_idle(now);
        IdleSettings {
            idle_count: e.idle_count,
            idle_count_min: e.idle_count_min,
            idle_scale_factor: e.idle_scale_factor,
            idle_time: e.idle_time,
            active_section: e.active_section,
        }
    }
}

/// The engine policy of `runner`. A runner without `[runners.machine]` gets an empty
/// `MachineName`, which the engine answers with "missing Machine options", as upstream.
pub fn runner_policy(runner: &RunnerConfig) -> RunnerPolicy {
    let machine = runner.machine.clone().unwrap_or_default();
    RunnerPolicy {
        name: runner.name.clone(),
        token: runner.token.clone(),
        limits: Limits {
            limit: runner.limit,
            max_builds: machine.max_builds,
            max_growth_rate: machine.max_growth_rate,
        },
        max_removal_attempts: machine.max_removal_attempts,
        machine_name: machine.machine_name.clone(),
        machine_driver: machine.machine_driver.clone(),
        machine_options: machine.machine_options.clone(),
        machine_options_with_name: machine.machine_options_with_name.clone(),
        idle: Arc::new(ConfigSchedule(machine)),
    }
}
