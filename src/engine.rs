//! The autoscaling engine: the `drover-engine` crate (a sans-IO state machine with no runtime,
//! I/O or clock among its dependencies), re-exported whole, plus the one place it meets the
//! config model: [`policy_from_runner`] builds a [`RunnerPolicy`] from a `[[runners]]` entry
//! and [`drain_settings`] the [`DrainSettings`] from the global settings. The engine itself
//! only sees the policy; how `config.toml` is parsed stays the config module's concern.

use std::sync::Arc;

pub use drover_engine::*;

use crate::config::{Config, MachineConfig, RunnerConfig};

/// A runner that cannot drive the engine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The runner has no `[runners.machine]` section.
    #[error(
        "runner {0:?} has no [runners.machine] section; add one with MachineName and MachineDriver"
    )]
    NoMachineSection(String),
}

/// The config's schedule: root values plus `[[runners.machine.autoscaling]]` periods
/// (spec §2, evaluated by the config module).
#[derive(Debug)]
struct ConfigSchedule(MachineConfig);

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

/// The engine policy of one `[[runners]]` entry.
pub fn policy_from_runner(runner: &RunnerConfig) -> Result<RunnerPolicy, PolicyError> {
    let machine = runner
        .machine
        .as_ref()
        .ok_or_else(|| PolicyError::NoMachineSection(runner.name.clone()))?;
    Ok(RunnerPolicy {
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
        idle: Arc::new(ConfigSchedule(machine.clone())),
    })
}

/// `[machine.shutdown_drain]` and `shutdown_timeout` from the global config; a missing section
/// means disabled.
pub fn drain_settings(config: &Config) -> DrainSettings {
    let drain = config
        .machine
        .as_ref()
        .and_then(|m| m.shutdown_drain.as_ref());
    DrainSettings {
        enabled: drain.is_some_and(|d| d.enabled),
        concurrency: drain.map_or(0, |d| d.concurrency),
        max_retries: drain.map_or(0, |d| d.max_retries),
        retry_backoff_secs: drain
            .and_then(|d| d.retry_backoff)
            .map_or(0, |b| b.as_secs()),
        shutdown_timeout_secs: config.shutdown_timeout,
    }
}

/// The job router's view of one `[[runners]]` entry (upstream's defaults applied).
pub fn router_runner(r: &RunnerConfig) -> router::RunnerSettings {
    let executor = match r.executor.as_str() {
        "docker+machine" => router::ExecutorKind::Machine,
        "docker" => router::ExecutorKind::Docker,
        _ => router::ExecutorKind::Unsupported,
    };
    let unhealthy_interval = r
        .unhealthy_interval
        .and_then(|d| d.to_std())
        .filter(|d| !d.is_zero())
        .map_or(router::DEFAULT_UNHEALTHY_INTERVAL_MS, |d| {
            u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
        });
    router::RunnerSettings {
        key: r.token.clone(),
        has_token: !r.token.trim().is_empty(),
        executor,
        limit: usize::try_from(r.limit).unwrap_or(0),
        request_concurrency: usize::try_from(r.request_concurrency).unwrap_or(1).max(1),
        adaptive: r
            .feature_flags
            .get("FF_USE_ADAPTIVE_REQUEST_CONCURRENCY")
            .copied()
            .unwrap_or(true),
        strict: r.strict_check_interval.unwrap_or(false),
        unhealthy_requests_limit: u32::try_from(r.unhealthy_requests_limit)
            .ok()
            .filter(|v| *v > 0)
            .unwrap_or(router::DEFAULT_UNHEALTHY_REQUESTS_LIMIT),
        unhealthy_interval,
    }
}

/// The job router's settings: `concurrent` (at least 1), `check_interval` (0 or less: 3 s)
/// and the runners in file order.
pub fn router_config(config: &Config) -> router::RouterConfig {
    router::RouterConfig {
        concurrent: usize::try_from(config.concurrent).unwrap_or(1).max(1),
        check_interval: u64::try_from(config.check_interval_or_default())
            .unwrap_or(3)
            .max(1)
            * 1000,
        runners: config.runners.iter().map(router_runner).collect(),
    }
}
