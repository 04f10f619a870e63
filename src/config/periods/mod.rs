//! Autoscaling periods: gitlab-runner's `TimePeriod` (`Periods` + `Timezone` of one
//! `[[runners.machine.autoscaling]]` section), compiled once when the config loads.
//!
//! The concern is "is this section active at instant *t*, and when does that change". Which
//! section wins and how its values override the root ones belongs to the config model, and
//! reading the clock belongs to the callers: every function here takes the time as an
//! argument, so the engine, the simulator and `drover autoscale decide` get identical answers.
//!
//! Semantics (spec §3): *now* is converted into the period's zone; the period is active if for
//! any expression `next = expr.Next(now)` lies within 1 s of *now* (either side). Since `Next`
//! returns the first matching whole second after *now*, a period is active at *t* iff a
//! matching second lies in `(t, t + 1 s]`: it starts 1 s early, its last second is out, and
//! sparse seconds flicker. An empty `Periods` list is never active.

mod lint;
mod scan;
mod zone;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;

use super::cron::{CronError, CronExpr};

pub use lint::lint_periods;
pub use zone::{detect_host_zone, HostZone};

/// Why `Periods`/`Timezone` could not be compiled (upstream's `InvalidTimePeriodsError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PeriodError {
    /// One of the `Periods` entries is not a valid cron expression.
    #[error("Periods[{index}] = {:?}: {cause}", crate::config::cron::clip(expr))]
    Cron {
        /// Index in the `Periods` list.
        index: usize,
        /// The entry as written.
        expr: String,
        /// What is wrong with it.
        cause: CronError,
    },
    /// `Timezone` names no zone in the IANA database.
    #[error(
        "unknown time zone {:?} in Timezone: {hint}",
        crate::config::cron::clip(name)
    )]
    UnknownZone {
        /// The value as written.
        name: String,
        /// What to write instead.
        hint: String,
    },
}

/// Compiled `Periods` plus their zone.
#[derive(Debug, Clone)]
pub struct TimePeriod {
    exprs: Vec<CronExpr>,
    tz: Tz,
    zone_name: String,
    zone_note: Option<String>,
}

impl TimePeriod {
    /// Compiles the expressions and the zone. `""` and `"Local"` mean the host's zone (the
    /// `TZ` variable, then `/etc/localtime`; UTC if neither names a zone, see
    /// [`TimePeriod::zone_note`]). Other names are IANA names, matched case-sensitively as Go's
    /// `time.LoadLocation` does on Linux.
    pub fn compile(periods: &[String], timezone: &str) -> Result<TimePeriod, PeriodError> {
        let (tz, zone_name, zone_note) = match timezone {
            "" | "Local" => {
                let host = zone::host_zone();
                (host.tz, host.name, host.note)
            }
            name => (zone::parse_zone(name)?, name.to_string(), None),
        };
        Self::with_zone(periods, tz, zone_name, zone_note)
    }

    /// Compiles the expressions for an explicit zone (no host lookup).
    pub fn compile_in(periods: &[String], tz: Tz) -> Result<TimePeriod, PeriodError> {
        Self::with_zone(periods, tz, tz.name().to_string(), None)
    }

    fn with_zone(
        periods: &[String],
        tz: Tz,
        zone_name: String,
        zone_note: Option<String>,
    ) -> Result<TimePeriod, PeriodError> {
        let exprs = periods
            .iter()
            .enumerate()
            .map(|(index, p)| {
                CronExpr::parse(p).map_err(|cause| PeriodError::Cron {
                    index,
                    expr: p.clone(),
                    cause,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TimePeriod {
            exprs,
            tz,
            zone_name,
            zone_note,
        })
    }

    /// Whether the period is active at `now`: some expression's `next` second after `now` (in
    /// the period's zone) is within 1 s of `now`.
    pub fn in_period(&self, now: DateTime<Utc>) -> bool {
        let local = now.with_timezone(&self.tz);
        self.exprs.iter().any(|e| {
            e.next(&local).is_some_and(|next| {
                let d = local.signed_duration_since(next);
                d >= -TimeDelta::seconds(1) && d <= TimeDelta::seconds(1)
            })
        })
    }

    /// The first instant after `after` at which [`in_period`](Self::in_period) changes value,
    /// searching up to `after + horizon`; `None` if it does not change in that window.
    /// Changes happen on whole seconds. Away from DST changes the search jumps from boundary
    /// to boundary; within a minute (plus the size of the shift) of a DST change it checks
    /// every second, so cronexpr's DST quirks are reproduced exactly.
    pub fn next_change(
        &self,
        after: DateTime<Utc>,
        horizon: chrono::Duration,
    ) -> Option<DateTime<Utc>> {
        scan::next_change(self, after, horizon)
    }

    /// The zone's IANA name (for `""`/`"Local"`: the detected host zone).
    pub fn zone_name(&self) -> &str {
        &self.zone_name
    }

    /// The zone.
    pub fn zone(&self) -> Tz {
        self.tz
    }

    /// A note about the host zone lookup when it fell back to UTC (for a warning at load).
    pub fn zone_note(&self) -> Option<&str> {
        self.zone_note.as_deref()
    }

    /// The compiled expressions, in `Periods` order.
    pub fn expressions(&self) -> &[CronExpr] {
        &self.exprs
    }
}
