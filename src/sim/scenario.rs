//! What one simulation run is given: a config, a workload, the simulated period and the
//! provider model; and the resolution of the workload into timed jobs routed to runners.
//!
//! This module checks the inputs and lays jobs out on the virtual time axis. It decides no
//! scaling and runs nothing ([`crate::sim::run`] does).

use chrono::{DateTime, Duration, TimeZone, Utc};

use super::provider::ProviderModel;
use super::queue::SimTime;
use super::workload::{SubmittedAt, Workload};
use crate::config::Config;

/// The executor name whose runners the engine scales.
pub const MACHINE_EXECUTOR: &str = "docker+machine";

/// Start of a run whose workload has only relative times and no `--from`: Monday 2026-01-05
/// 00:00 UTC.
pub fn default_start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 5, 0, 0, 0)
        .single()
        .unwrap_or(DateTime::UNIX_EPOCH)
}

/// How long after the last submission a run without `--until` gives up waiting for jobs that
/// cannot finish (for example because `limit` leaves no room for a machine).
pub const GIVE_UP_AFTER: SimTime = 24 * 3600 * 1000;

/// The longest period one run may cover: 366 days.
pub const MAX_PERIOD: SimTime = 366 * 86_400 * 1000;

/// The inputs of one run.
#[derive(Debug, Clone)]
pub struct Scenario<'a> {
    /// The loaded `config.toml`.
    pub config: &'a Config,
    /// The jobs.
    pub workload: &'a Workload,
    /// Start of the simulated period; jobs submitted earlier are left out.
    pub from: Option<DateTime<Utc>>,
    /// End of the simulated period; jobs submitted later are left out.
    pub until: Option<DateTime<Utc>>,
    /// Latencies and failure rates of the simulated provider (and the seed).
    pub model: ProviderModel,
    /// Ignore the workload's `runner` column: every job may go to any runner.
    pub any_runner: bool,
}

/// Inputs that cannot be simulated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// No runner uses the `docker+machine` executor.
    #[error(
        "the config has no [[runners]] entry with executor = \"docker+machine\"; there is \
         nothing to autoscale"
    )]
    NoMachineRunner,
    /// A job names a runner the config does not have (or that does not autoscale).
    #[error(
        "workload line {line}: runner {name:?} is not a docker+machine runner of the config \
         (those are: {known}); rename it, or pass --any-runner to ignore the runner column"
    )]
    UnknownRunner {
        /// The workload line.
        line: usize,
        /// The runner named.
        name: String,
        /// The runner names that would do.
        known: String,
    },
    /// `--until` is not after `--from`.
    #[error("--until ({until}) must be later than --from ({from})")]
    EmptyPeriod {
        /// The start.
        from: String,
        /// The end.
        until: String,
    },
    /// A runner cannot drive the engine (no `[runners.machine]` section).
    #[error("{0}")]
    Policy(String),
    /// The period is longer than [`MAX_PERIOD`].
    #[error(
        "the simulated period would last {days} days ({from} .. {until}); simulate at most 366 \
         days at a time: pick a part with --from and --until"
    )]
    TooLong {
        /// Its length in whole days.
        days: u64,
        /// The start.
        from: String,
        /// The end (the last submission when --until is not given).
        until: String,
    },
    /// `concurrent` is below 1 (gitlab-runner refuses to start).
    #[error("concurrent = {0} in the config; gitlab-runner needs at least 1")]
    Concurrent(i64),
}

/// One job on the virtual time axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedJob {
    /// Submission, in milliseconds since the start.
    pub at: SimTime,
    /// Run time in milliseconds.
    pub duration: SimTime,
    /// Index into `config.runners` of the runner that must take it, or `None` for any.
    pub runner: Option<usize>,
}

/// A scenario laid out on the time axis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Wall-clock time of [`SimTime`] 0.
    pub start: DateTime<Utc>,
    /// The end given by `--until`, if any.
    pub until: Option<SimTime>,
    /// The jobs in the period, sorted by submission (file order among equal times).
    pub jobs: Vec<TimedJob>,
}

/// True if the runner takes part in autoscaling: executor `docker+machine`. Its token is not
/// needed (no GitLab is contacted); an empty one (say, `${RUNNER_TOKEN}` unset) only changes
/// machine names.
pub fn is_machine_runner(r: &crate::config::RunnerConfig) -> bool {
    r.executor == MACHINE_EXECUTOR
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

impl Scenario<'_> {
    /// Checks the inputs and lays the workload out in virtual time.
    ///
    /// The start is `--from`, else UTC midnight of the day of the earliest absolute submission,
    /// else [`default_start`]. Relative submissions count from the start.
    pub fn resolve(&self) -> Result<Resolved, ScenarioError> {
        if self.config.concurrent < 1 {
            return Err(ScenarioError::Concurrent(self.config.concurrent));
        }
        let runners = &self.config.runners;
        if !runners.iter().any(is_machine_runner) {
            return Err(ScenarioError::NoMachineRunner);
        }
        let start = self.from.unwrap_or_else(|| {
            self.workload
                .first_absolute()
                .and_then(|t| t.date_naive().and_hms_opt(0, 0, 0))
                .map(|t| t.and_utc())
                .unwrap_or_else(default_start)
        });
        let until = match self.until {
            Some(u) if u <= start => {
                return Err(ScenarioError::EmptyPeriod {
                    from: rfc(start),
                    until: rfc(u),
                })
            }
            Some(u) => Some((u - start).num_milliseconds().max(0) as SimTime),
            None => None,
        };
        let mut jobs = Vec::with_capacity(self.workload.jobs.len());
        for job in &self.workload.jobs {
            let at = match job.submitted_at {
                SubmittedAt::Offset(ms) => ms,
                SubmittedAt::At(t) => {
                    let d: Duration = t - start;
                    if d < Duration::zero() {
                        continue;
                    }
                    d.num_milliseconds() as SimTime
                }
            };
            if until.is_some_and(|u| at > u) {
                continue;
            }
            let runner = match (&job.runner, self.any_runner) {
                (Some(name), false) => Some(
                    runners
                        .iter()
                        .position(|r| r.name == *name && is_machine_runner(r))
                        .ok_or_else(|| ScenarioError::UnknownRunner {
                            line: job.line,
                            name: name.clone(),
                            known: runners
                                .iter()
                                .filter(|r| is_machine_runner(r))
                                .map(|r| format!("{:?}", r.name))
                                .collect::<Vec<_>>()
                                .join(", "),
                        })?,
                ),
                _ => None,
            };
            jobs.push(TimedJob {
                at,
                duration: job.duration,
                runner,
            });
        }
        jobs.sort_by_key(|j| j.at);
        let span = until.unwrap_or_else(|| jobs.last().map_or(0, |j| j.at));
        if span > MAX_PERIOD {
            let end = start
                .checked_add_signed(Duration::milliseconds(span.min(i64::MAX as u64) as i64))
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            return Err(ScenarioError::TooLong {
                days: span / 86_400_000,
                from: rfc(start),
                until: rfc(end),
            });
        }
        Ok(Resolved { start, until, jobs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;

    const CONFIG: &str = "concurrent = 2\n\
        [[runners]]\nname = \"auto\"\nurl = \"https://x\"\ntoken = \"t\"\nexecutor = \"docker+machine\"\n\
        [runners.machine]\nMachineName = \"m-%s\"\nMachineDriver = \"google\"\n\
        [[runners]]\nname = \"shell\"\nurl = \"https://x\"\ntoken = \"t2\"\nexecutor = \"shell\"\n";

    fn resolve(
        jobs: &str,
        from: Option<&str>,
        until: Option<&str>,
        any: bool,
    ) -> Result<Resolved, ScenarioError> {
        let config = load_str(CONFIG, "c.toml").unwrap().config;
        let workload = Workload::parse(jobs, "w.csv").unwrap();
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        Scenario {
            config: &config,
            workload: &workload,
            from: from.map(t),
            until: until.map(t),
            model: ProviderModel::default(),
            any_runner: any,
        }
        .resolve()
    }

    #[test]
    fn lays_jobs_out_from_midnight_of_the_first_job() {
        let r = resolve(
            "submitted_at,duration_s,runner\n2026-03-04T10:00:00Z,5,auto\n60,1,\n",
            None,
            None,
            false,
        )
        .unwrap();
        assert_eq!(r.start.to_rfc3339(), "2026-03-04T00:00:00+00:00");
        assert_eq!(
            r.jobs[0],
            TimedJob {
                at: 60_000,
                duration: 1_000,
                runner: None
            }
        );
        assert_eq!(
            r.jobs[1],
            TimedJob {
                at: 36_000_000,
                duration: 5_000,
                runner: Some(0)
            }
        );
        assert_eq!(r.until, None);
    }

    #[test]
    fn from_and_until_cut_the_workload() {
        let jobs = "submitted_at,duration_s\n2026-03-04T09:00:00Z,1\n2026-03-04T10:00:00Z,1\n\
                    2026-03-04T11:00:00Z,1\n";
        let r = resolve(
            jobs,
            Some("2026-03-04T09:30:00Z"),
            Some("2026-03-04T10:30:00Z"),
            false,
        )
        .unwrap();
        assert_eq!(r.jobs.len(), 1);
        assert_eq!(r.jobs[0].at, 1_800_000);
        assert_eq!(r.until, Some(3_600_000));
        let e = resolve(
            jobs,
            Some("2026-03-04T10:00:00Z"),
            Some("2026-03-04T09:00:00Z"),
            false,
        );
        assert!(matches!(e, Err(ScenarioError::EmptyPeriod { .. })));
        // Relative times only: the default Monday.
        let r = resolve("submitted_at,duration_s\n5,1\n", None, None, false).unwrap();
        assert_eq!(r.start, default_start());
        let e = resolve(
            "submitted_at,duration_s\n0,1\n40000000,1\n",
            None,
            None,
            false,
        );
        assert!(
            matches!(e, Err(ScenarioError::TooLong { days: 462, .. })),
            "{e:?}"
        );
    }

    #[test]
    fn runners_must_be_autoscaled_ones_unless_ignored() {
        let jobs = "submitted_at,duration_s,runner\n0,1,shell\n";
        let e = resolve(jobs, None, None, false).unwrap_err().to_string();
        assert!(e.starts_with("workload line 2: runner \"shell\""), "{e}");
        assert!(e.contains("those are: \"auto\""), "{e}");
        assert_eq!(
            resolve(jobs, None, None, true).unwrap().jobs[0].runner,
            None
        );
    }
}
