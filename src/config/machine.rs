//! `[runners.machine]` and its `[[runners.machine.autoscaling]]` sections.
//!
//! Data plus one rule: which idle settings are in force at a given instant
//! ([`MachineConfig::effective_idle`], spec §2 "effective configuration"). Time always comes in
//! as an argument; nothing here reads the clock, so the engine and the simulator get the same
//! answer for the same instant. Autoscaling sections carry their compiled periods, which only
//! the loader (or [`AutoscalingConfig::new`]) can produce, so an uncompiled schedule cannot
//! reach `effective_idle`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::periods::{PeriodError, TimePeriod};

/// `[runners.machine]`: the machine shape and the idle pool settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    /// The idle settings in force at `now` (spec §2): the **last** autoscaling section whose
    /// periods match `now` supplies all four values, unset ones being 0; when none matches,
    /// the root `[runners.machine]` values apply.
    pub fn effective_idle(&self, now: DateTime<Utc>) -> EffectiveIdle {
        let active = self
            .autoscaling
            .iter()
            .enumerate()
            .rev()
            .find(|(_, a)| a.is_active(now));
        match active {
            Some((index, a)) => EffectiveIdle {
                idle_count: a.idle_count,
                idle_count_min: a.idle_count_min,
                idle_scale_factor: a.idle_scale_factor,
                idle_time: a.idle_time,
                active_section: Some(index),
            },
            None => EffectiveIdle {
                idle_count: self.idle_count,
                idle_count_min: self.idle_count_min,
                idle_scale_factor: self.idle_scale_factor,
                idle_time: self.idle_time,
                active_section: None,
            },
        }
    }

    /// The next `count` instants after `after` (within `horizon`) at which the winning
    /// autoscaling section changes, each with the idle settings that take effect then.
    pub fn idle_changes(
        &self,
        after: DateTime<Utc>,
        count: usize,
        horizon: chrono::Duration,
    ) -> Vec<(DateTime<Utc>, EffectiveIdle)> {
        let mut out = Vec::new();
        if self.autoscaling.is_empty() || count == 0 {
            return out;
        }
        let end = after + horizon;
        let mut t = after;
        let mut current = self.effective_idle(t).active_section;
        // The winner can only change when it turns inactive or a later section turns active;
        // earlier sections flipping underneath it change nothing, so they are not scanned.
        // The bound only matters for pathological schedules.
        for _ in 0..100_000 {
            if out.len() >= count || t >= end {
                break;
            }
            let from = current.unwrap_or(0);
            let next = self
                .autoscaling
                .iter()
                .skip(from)
                .filter_map(|a| a.compiled.next_change(t, end - t))
                .min();
            let Some(next) = next else { break };
            let eff = self.effective_idle(next);
            if eff.active_section != current {
                current = eff.active_section;
                out.push((next, eff));
            }
            t = next;
        }
        out
    }

    /// `MaxRemovalAttempts`, or upstream's default of 30 when it is not positive.
    pub fn max_removal_attempts_or_default(&self) -> i64 {
        if self.max_removal_attempts > 0 {
            self.max_removal_attempts
        } else {
            30
        }
    }
}

/// One `[[runners.machine.autoscaling]]` section, with its periods compiled.
///
/// It can only be made by the loader or by [`AutoscalingConfig::new`], both of which compile
/// `Periods` and `Timezone`, so every value of this type can answer "active at t?".
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "RawAutoscaling", into = "RawAutoscaling")]
pub struct AutoscalingConfig {
    periods: Vec<String>,
    timezone: String,
    /// `IdleCount` while this section is active (unset = 0).
    pub idle_count: i64,
    /// `IdleScaleFactor` while active (unset = 0.0).
    pub idle_scale_factor: f64,
    /// `IdleCountMin` while active (unset = 0).
    pub idle_count_min: i64,
    /// `IdleTime` in seconds while active (unset = 0).
    pub idle_time: i64,
    compiled: TimePeriod,
}

impl AutoscalingConfig {
    /// A section active during `periods` (cron expressions) in `timezone` (`""`/`"Local"` =
    /// the host's zone) with all idle values 0; set them through the public fields.
    pub fn new(periods: Vec<String>, timezone: &str) -> Result<Self, PeriodError> {
        let compiled = TimePeriod::compile(&periods, timezone)?;
        Ok(AutoscalingConfig {
            periods,
            timezone: timezone.to_string(),
            idle_count: 0,
            idle_scale_factor: 0.0,
            idle_count_min: 0,
            idle_time: 0,
            compiled,
        })
    }

    /// `Periods` as written.
    pub fn periods(&self) -> &[String] {
        &self.periods
    }

    /// `Timezone` as written (empty means the host's zone).
    pub fn timezone(&self) -> &str {
        &self.timezone
    }

    /// The compiled periods.
    pub fn time_period(&self) -> &TimePeriod {
        &self.compiled
    }

    /// Whether this section's periods match `now`.
    pub fn is_active(&self, now: DateTime<Utc>) -> bool {
        self.compiled.in_period(now)
    }
}

/// The serde form of an autoscaling section (upstream's keys), compiled on the way in.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
struct RawAutoscaling {
    #[serde(rename = "Periods")]
    periods: Vec<String>,
    #[serde(rename = "Timezone")]
    timezone: String,
    #[serde(rename = "IdleCount")]
    idle_count: i64,
    #[serde(rename = "IdleScaleFactor")]
    idle_scale_factor: f64,
    #[serde(rename = "IdleCountMin")]
    idle_count_min: i64,
    #[serde(rename = "IdleTime")]
    idle_time: i64,
}

impl PartialEq for AutoscalingConfig {
    /// Sections are equal when they were written the same (the compiled form follows).
    fn eq(&self, other: &Self) -> bool {
        self.periods == other.periods
            && self.timezone == other.timezone
            && self.idle_count == other.idle_count
            && self.idle_scale_factor == other.idle_scale_factor
            && self.idle_count_min == other.idle_count_min
            && self.idle_time == other.idle_time
    }
}

impl TryFrom<RawAutoscaling> for AutoscalingConfig {
    type Error = PeriodError;

    fn try_from(raw: RawAutoscaling) -> Result<Self, PeriodError> {
        let mut section = AutoscalingConfig::new(raw.periods, &raw.timezone)?;
        section.idle_count = raw.idle_count;
        section.idle_scale_factor = raw.idle_scale_factor;
        section.idle_count_min = raw.idle_count_min;
        section.idle_time = raw.idle_time;
        Ok(section)
    }
}

impl From<AutoscalingConfig> for RawAutoscaling {
    fn from(a: AutoscalingConfig) -> Self {
        RawAutoscaling {
            periods: a.periods,
            timezone: a.timezone,
            idle_count: a.idle_count,
            idle_scale_factor: a.idle_scale_factor,
            idle_count_min: a.idle_count_min,
            idle_time: a.idle_time,
        }
    }
}

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
