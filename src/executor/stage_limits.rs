//! `prepare_timeout` and `get_sources_timeout`: time limits on the prepare phase (the executor's
//! preparation and `prepare_script`) and on `get_sources` (all its attempts), resolved as
//! upstream resolves them against the job timeout.

use std::time::Duration;

use crate::config::GoDuration;

/// One phase's limit and, when the configured value could not be used, the warning upstream
/// logs for it (the runner's log, not the job's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseLimit {
    /// The time the phase may take.
    pub limit: GoDuration,
    /// Why the configured value was replaced by the job timeout.
    pub warning: Option<String>,
}

/// The limit of the phase whose setting is `key` (`prepare_timeout`, `get_sources_timeout`):
/// the job timeout when unset; the job timeout, with a warning, when the setting is zero or
/// negative or longer than the job timeout; else the setting.
pub fn phase_limit(key: &str, configured: Option<GoDuration>, job_timeout_secs: u64) -> PhaseLimit {
    let job = GoDuration::from_secs(i64::try_from(job_timeout_secs).unwrap_or(i64::MAX));
    let Some(set) = configured else {
        return PhaseLimit {
            limit: job,
            warning: None,
        };
    };
    let warning = if set.as_nanos() <= 0 {
        Some(format!(
            "{key} ({set}) must be greater than 0; using job timeout ({job})"
        ))
    } else if set > job {
        Some(format!(
            "{key} ({set}) exceeds job timeout ({job}); using job timeout"
        ))
    } else {
        None
    };
    PhaseLimit {
        limit: if warning.is_some() { job } else { set },
        warning,
    }
}

impl PhaseLimit {
    /// The limit as a std duration (a far future when it does not fit).
    pub fn duration(&self) -> Duration {
        self.limit
            .to_std()
            .unwrap_or(Duration::from_secs(u64::MAX / 4))
    }
}
