//! The idle, limit and growth arithmetic of upstream's idle strategy (spec §4), as plain
//! functions over counters, plus the per-runner policy the engine is configured with.
//!
//! Nothing here keeps state or reads a clock: every function takes the counters, the effective
//! settings and (where it matters) `now` as arguments. The engine's Acquire pass calls these
//! functions; tests call them directly with tables.

use std::fmt;
use std::sync::Arc;

use super::machine::{Counts, MachineState};
use super::Time;

/// The four idle settings that can change with `[[runners.machine.autoscaling]]` periods,
/// as in effect at one instant (spec §2).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct IdleSettings {
    /// `IdleCount`: idle machines to keep (a hard cap on idle capacity).
    pub idle_count: i64,
    /// `IdleCountMin`: idle machines below which the scale factor stops blocking.
    pub idle_count_min: i64,
    /// `IdleScaleFactor`: idle capacity as a factor of machines in use.
    pub idle_scale_factor: f64,
    /// `IdleTime`: seconds an idle machine may wait before it can be removed.
    pub idle_time: i64,
    /// The 0-based index of the autoscaling section in effect, `None` for the root values.
    pub active_section: Option<usize>,
}

/// Something that yields the effective idle settings at an instant: a fixed value in tests,
/// the config's root values plus its autoscaling periods in production.
///
/// Implementations must be pure functions of `now` (no clock reads, no I/O).
pub trait IdleSchedule: fmt::Debug + Send + Sync {
    /// The idle settings in effect at `now` (the last matching section wins; see spec §2).
    fn idle_at(&self, now: Time) -> IdleSettings;
}

impl IdleSchedule for IdleSettings {
    fn idle_at(&self, _now: Time) -> IdleSettings {
        *self
    }
}

/// The settings that never change with periods (spec §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Limits {
    /// `limit`: machines of every state this runner may have; 0 means unlimited.
    pub limit: i64,
    /// `MaxBuilds`: jobs a machine may run before it is removed; 0 means unlimited.
    pub max_builds: i64,
    /// `MaxGrowthRate`: creations in flight at once; 0 means unlimited, negative deadlocks.
    pub max_growth_rate: i64,
}

/// One runner's autoscaling policy, independent of how `config.toml` is parsed.
#[derive(Debug, Clone)]
pub struct RunnerPolicy {
    /// The runner's name, for reports only.
    pub name: String,
    /// The runner token: source of the machine-name prefix and key of the growth coordinator.
    pub token: String,
    /// `limit`, `MaxBuilds` and `MaxGrowthRate`.
    pub limits: Limits,
    /// `MaxRemovalAttempts`; 0 or less means the default, 30.
    pub max_removal_attempts: i64,
    /// `MachineName`, the template with `%s` (not validated, as upstream).
    pub machine_name: String,
    /// `MachineDriver`.
    pub machine_driver: String,
    /// `MachineOptions`, passed to `create` as they are.
    pub machine_options: Vec<String>,
    /// `MachineOptionsWithName`, with `%s` replaced by the machine name at creation.
    pub machine_options_with_name: Vec<String>,
    /// Where the idle settings come from at a given instant.
    pub idle: Arc<dyn IdleSchedule>,
}

/// The default for `MaxRemovalAttempts` when it is 0 or less.
pub const DEFAULT_MAX_REMOVAL_ATTEMPTS: i64 = 30;

/// `MaxGrowthRate > 0 && Creating >= MaxGrowthRate`.
pub fn growth_exceeded(limits: &Limits, c: &Counts) -> bool {
    limits.max_growth_rate > 0 && c.creating >= limits.max_growth_rate
}

/// `limit > 0 && Total >= limit`.
pub fn total_exceeded(limits: &Limits, c: &Counts) -> bool {
    limits.limit > 0 && c.total() >= limits.limit
}

/// `Available >= IdleCount`.
pub fn idle_exceeded(idle: &IdleSettings, c: &Counts) -> bool {
    c.available() >= idle.idle_count
}

/// `IdleCountMin`, forced to at least 1 when the scale factor is on.
pub fn effective_idle_count_min(idle: &IdleSettings) -> i64 {
    if idle.idle_scale_factor > 0.0 {
        idle.idle_count_min.max(1)
    } else {
        idle.idle_count_min
    }
}

/// `Available >= IdleCountMin'`.
pub fn min_fulfilled(idle: &IdleSettings, c: &Counts) -> bool {
    c.available() >= effective_idle_count_min(idle)
}

/// `trunc(InUse × IdleScaleFactor)`, truncated toward zero as Go's `int()`.
pub fn factor_target(idle: &IdleSettings, c: &Counts) -> i64 {
    (c.in_use() as f64 * idle.idle_scale_factor) as i64
}

/// `IdleScaleFactor > 0 && Available >= trunc(InUse × IdleScaleFactor)`.
pub fn factor_exceeded(idle: &IdleSettings, c: &Counts) -> bool {
    idle.idle_scale_factor > 0.0 && c.available() >= factor_target(idle, c)
}

/// `idleExceeded || (minFulfilled && factorExceeded)`: enough idle capacity.
pub fn composed(idle: &IdleSettings, c: &Counts) -> bool {
    idle_exceeded(idle, c) || (min_fulfilled(idle, c) && factor_exceeded(idle, c))
}

/// Whether a creation may start (upstream `canCreate`).
pub fn can_create(limits: &Limits, idle: &IdleSettings, c: &Counts, on_demand: bool) -> bool {
    if growth_exceeded(limits, c) || total_exceeded(limits, c) {
        return false;
    }
    if on_demand && idle.idle_count <= 0 {
        return true;
    }
    !composed(idle, c)
}

/// Why the idle strategy removes a machine during the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoveVerdict {
    /// `MaxBuilds > 0 && UsedCount >= MaxBuilds`: "too many builds".
    TooManyBuilds,
    /// `limit > 0 && Total >= limit`: "too many machines".
    TooManyMachines,
    /// Idle longer than `IdleTime` with enough idle capacity: "too many idle machines".
    TooManyIdleMachines,
}

/// Whether `now - used` is strictly more than `idle_time` seconds, with Go's `time.Duration`
/// arithmetic: the elapsed time saturates at ±292 years and `IdleTime × 1 s` wraps.
pub fn idle_time_elapsed(now: Time, used: Time, idle_time: i64) -> bool {
    let elapsed = match (now - used).num_nanoseconds() {
        Some(ns) => ns,
        None if now > used => i64::MAX,
        None => i64::MIN,
    };
    elapsed > idle_time.wrapping_mul(1_000_000_000)
}

/// The machine facts `should_remove` looks at.
#[derive(Debug, Clone, Copy)]
pub struct MachineFacts {
    /// The state before the decision.
    pub state: MachineState,
    /// Jobs run so far.
    pub used_count: i64,
    /// The last use (or adoption, creation, removal start).
    pub used: Time,
}

/// Upstream's `shouldRemove`, checked in order against the counters accumulated so far.
/// `None` is upstream's "don't remote" (sic): keep the machine.
pub fn should_remove(
    m: &MachineFacts,
    limits: &Limits,
    idle: &IdleSettings,
    c: &Counts,
    now: Time,
) -> Option<RemoveVerdict> {
    if m.state != MachineState::Idle {
        return None;
    }
    if limits.max_builds > 0 && m.used_count >= limits.max_builds {
        return Some(RemoveVerdict::TooManyBuilds);
    }
    if total_exceeded(limits, c) {
        return Some(RemoveVerdict::TooManyMachines);
    }
    if idle_time_elapsed(now, m.used, idle.idle_time) && composed(idle, c) {
        return Some(RemoveVerdict::TooManyIdleMachines);
    }
    None
}
