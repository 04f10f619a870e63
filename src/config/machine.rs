//! `[runners.machine]` and its `[[runners.machine.autoscaling]]` sections.
//!
//! Data plus one rule: which idle settings are in force at a given instant
//! ([`MachineConfig::effective_idle`], spec §2 "effective configuration"). Time always comes in
//! as an argument; nothing here reads the clock, so the engine and the simulator get the same
//! answer for the same instant. Autoscaling sections carry their compiled periods, which only
//! the loader (or [`AutoscalingConfig::new`]) can produce, so an uncompiled schedule cannot
//! reach `effective_idle`.

use serde::{Deserialize, Serialize};

/// `[runners.machine]`: the machine shape and the idle pool settings.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MachineConfig {
    /// `MaxGrowthRate`: machines created at once (0 = unlimited).
    #[serde(rename = "MaxGrowthRate")]
    pub max_growth_rate: i64,
    /// `IdleCount`: idle machines to keep when no autoscaling section is active.
    #[serde(rename = "IdleCount")]
    pub idle_count: i64,
    /// `IdleScaleFactor`: idle machines as a factor of in-use ones (0 = off).
    #[serde(rename = "IdleScaleFactor")]
    pub idle_scale_factor: f64,
    /// `IdleCountMin`: lower bound of idle machines when the factor is in use.
    #[serde(rename = "IdleCountMin")]
    pub idle_count_min: i64,
    /// `IdleTime`: seconds an idle machine is kept before it may be removed.
    #[serde(rename = "IdleTime")]
    pub idle_time: i64,
    /// `MaxBuilds`: jobs per machine before it is removed (0 = unlimited).
    #[serde(rename = "MaxBuilds")]
    pub max_builds: i64,
    /// `MachineDriver`: the docker-machine driver.
    #[serde(rename = "MachineDriver")]
    pub machine_driver: String,
    /// `MachineName`: name template; `%s` is replaced by a unique part.
    #[serde(rename = "MachineName")]
    pub machine_name: String,
    /// `MachineOptions`: extra `docker-machine create` options.
    #[serde(rename = "MachineOptions")]
    pub machine_options: Vec<String>,
    /// `MachineOptionsWithName`: options in which `%s` is replaced by the machine name.
    #[serde(rename = "MachineOptionsWithName")]
    pub machine_options_with_name: Vec<String>,
    /// `MaxRemovalAttempts`: removal attempts before giving up (≤ 0 means 30).
    #[serde(rename = "MaxRemovalAttempts")]
    pub max_removal_attempts: i64,
    /// `OffPeakPeriods`: deprecated, accepted and ignored (never parsed).
    #[serde(rename = "OffPeakPeriods")]
    pub off_peak_periods: Vec<String>,
    /// `OffPeakTimezone`: deprecated, ignored.
    #[serde(rename = "OffPeakTimezone")]
    pub off_peak_timezone: String,
    /// `OffPeakIdleCount`: deprecated, ignored.
    #[serde(rename = "OffPeakIdleCount")]
    pub off_peak_idle_count: i64,
    /// `OffPeakIdleTime`: deprecated, ignored.
    #[serde(rename = "OffPeakIdleTime")]
    pub off_peak_idle_time: i64,
    /// `[[runners.machine.autoscaling]]`, in file order (the last active one wins).
    #[serde(rename = "autoscaling")]
    pub autoscaling: Vec<AutoscalingConfig>,
}

impl MachineConfig {
    /// `MaxRemovalAttempts`, or upstream's default of 30 when it is not positive.
    pub fn max_removal_attempts_or_default(&self) -> i64 {
        if self.max_removal_attempts > 0 {
            self.max_removal_attempts
        } else {
            30
        }
    }
}

/// One `[[runners.machine.autoscaling]]` section.
///
/// Build it through the loader or [`AutoscalingConfig::new`]: it holds compiled periods.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct AutoscalingConfig {
    /// `Periods`: cron expressions (7 fields: sec min hour dom month dow year).
    #[serde(rename = "Periods")]
    pub periods: Vec<String>,
    /// `Timezone`: IANA zone; empty or `Local` means the host's zone.
    #[serde(rename = "Timezone")]
    pub timezone: String,
    /// `IdleCount` while this section is active (unset = 0).
    #[serde(rename = "IdleCount")]
    pub idle_count: i64,
    /// `IdleScaleFactor` while active (unset = 0.0).
    #[serde(rename = "IdleScaleFactor")]
    pub idle_scale_factor: f64,
    /// `IdleCountMin` while active (unset = 0).
    #[serde(rename = "IdleCountMin")]
    pub idle_count_min: i64,
    /// `IdleTime` in seconds while active (unset = 0).
    #[serde(rename = "IdleTime")]
    pub idle_time: i64,
    #[serde(skip)]
    compiled: Compiled,
}

/// Compiled periods of one autoscaling section (filled by the loader).
#[derive(Debug, Clone, Default)]
struct Compiled;

/// The idle settings in force at one instant, and which section supplied them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EffectiveIdle {
    /// `IdleCount` in force.
    pub idle_count: i64,
    /// `IdleCountMin` in force.
    pub idle_count_min: i64,
    /// `IdleScaleFactor` in force.
    pub idle_scale_factor: f64,
    /// `IdleTime` in force, in seconds.
    pub idle_time: i64,
    /// Index of the active autoscaling section, or `None` when the root values apply.
    pub active_section: Option<usize>,
}
