//! Summaries of a simulation run: the numbers, as text and JSON, and the timeline CSV.
//!
//! Every figure is computed from a [`Trace`]; `docs/simulation.md` explains each one. This module
//! formats and measures; it does not simulate.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::SecondsFormat;
use serde::Serialize;

use super::queue::SimTime;
use super::trace::{Counts, Trace};

/// Machine-seconds spent in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MachineSeconds {
    /// Idle (including acquired).
    pub idle: f64,
    /// Running a job.
    pub used: f64,
    /// Being created.
    pub creating: f64,
    /// Being removed.
    pub removing: f64,
}

/// Queue-wait percentiles, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Waits {
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// Longest.
    pub max: f64,
}

/// The numbers of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Start of the simulated period (RFC 3339).
    pub from: String,
    /// End of the simulated period (RFC 3339).
    pub until: String,
    /// Seed of the provider model.
    pub seed: u64,
    /// The largest number of machines in any state at one time.
    pub peak_machines: u32,
    /// Machine-seconds by state.
    pub machine_seconds: MachineSeconds,
    /// Idle machine-seconds divided by 3600.
    pub idle_machine_hours: f64,
    /// Creations started.
    pub creations: u64,
    /// Creations that failed.
    pub creation_failures: u64,
    /// Completed removals by reason.
    pub removals: BTreeMap<String, u64>,
    /// Jobs in the simulated period.
    pub jobs: u64,
    /// Jobs that finished before the end.
    pub jobs_completed: u64,
    /// Jobs that never started.
    pub jobs_never_started: u64,
    /// Jobs that failed because every on-demand creation for them failed.
    pub jobs_failed: u64,
    /// Wait between submission and start, over the jobs that started.
    pub queue_wait_s: Waits,
    /// Jobs whose machine finished its creation after the job was submitted.
    pub jobs_waited_for_creation: u64,
    /// Warnings the engine raised during the run (for example a deadlocked growth rate).
    pub warnings: Vec<String>,
}

fn secs(ms: SimTime) -> f64 {
    ms as f64 / 1000.0
}

/// Nearest-rank percentile of sorted values (`q` in 0..=100).
fn percentile(sorted: &[SimTime], q: u64) -> SimTime {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as u64).div_ceil(100).max(1) as usize;
    sorted.get(rank - 1).or(sorted.last()).copied().unwrap_or(0)
}

impl Summary {
    /// Computes the summary of `trace`.
    pub fn of(trace: &Trace) -> Self {
        let mut ms = [0u128; 4];
        let mut peak = 0;
        for (i, row) in trace.timeline.iter().enumerate() {
            let next = trace
                .timeline
                .get(i + 1)
                .map_or(trace.end, |r| r.at)
                .max(row.at);
            let span = u128::from(next.min(trace.end).saturating_sub(row.at));
            let c = row.counts;
            for (slot, n) in ms.iter_mut().zip([c.idle, c.used, c.creating, c.removing]) {
                *slot += u128::from(n) * span;
            }
            if row.at <= trace.end {
                peak = peak.max(c.total());
            }
        }
        let s = |v: u128| v as f64 / 1000.0;
        let machine_seconds = MachineSeconds {
            idle: s(ms[0]),
            used: s(ms[1]),
            creating: s(ms[2]),
            removing: s(ms[3]),
        };
        let removals = trace.removals.clone();
        let mut waits: Vec<SimTime> = trace
            .jobs
            .iter()
            .filter_map(|j| j.started.map(|s| s.saturating_sub(j.submitted)))
            .collect();
        waits.sort_unstable();
        let rfc = |at| trace.wall(at).to_rfc3339_opts(SecondsFormat::AutoSi, true);
        Summary {
            from: rfc(0),
            until: rfc(trace.end),
            seed: trace.seed,
            peak_machines: peak,
            idle_machine_hours: machine_seconds.idle / 3600.0,
            machine_seconds,
            creations: trace.creations,
            creation_failures: trace.creation_failures,
            removals,
            jobs: trace.jobs.len() as u64,
            jobs_completed: trace.jobs.iter().filter(|j| j.finished.is_some()).count() as u64,
            jobs_never_started: trace
                .jobs
                .iter()
                .filter(|j| j.started.is_none() && !j.failed)
                .count() as u64,
            jobs_failed: trace.jobs.iter().filter(|j| j.failed).count() as u64,
            queue_wait_s: Waits {
                p50: secs(percentile(&waits, 50)),
                p95: secs(percentile(&waits, 95)),
                max: secs(waits.last().copied().unwrap_or(0)),
            },
            jobs_waited_for_creation: trace.jobs.iter().filter(|j| j.waited_for_creation).count()
                as u64,
            warnings: trace.warnings.clone(),
        }
    }

    /// The summary as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The figures as (label, value) pairs, in display order; shared by text and comparisons.
    pub fn figures(&self) -> Vec<(String, f64)> {
        let mut v = vec![
            ("peak machines".to_string(), f64::from(self.peak_machines)),
            ("machine-seconds idle".into(), self.machine_seconds.idle),
            ("machine-seconds used".into(), self.machine_seconds.used),
            (
                "machine-seconds creating".into(),
                self.machine_seconds.creating,
            ),
            (
                "machine-seconds removing".into(),
                self.machine_seconds.removing,
            ),
            ("idle machine-hours".into(), self.idle_machine_hours),
            ("creations".into(), self.creations as f64),
            ("creation failures".into(), self.creation_failures as f64),
        ];
        for (reason, n) in &self.removals {
            v.push((format!("removals: {reason}"), *n as f64));
        }
        v.extend([
            ("jobs".to_string(), self.jobs as f64),
            ("jobs completed".into(), self.jobs_completed as f64),
            ("jobs never started".into(), self.jobs_never_started as f64),
            ("jobs failed (no machine)".into(), self.jobs_failed as f64),
            ("queue wait p50 (s)".into(), self.queue_wait_s.p50),
            ("queue wait p95 (s)".into(), self.queue_wait_s.p95),
            ("queue wait max (s)".into(), self.queue_wait_s.max),
            (
                "jobs that waited for a creation".into(),
                self.jobs_waited_for_creation as f64,
            ),
        ]);
        v
    }

    /// The summary as aligned text.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "simulated {} .. {} (seed {})\n",
            self.from, self.until, self.seed
        );
        let removals = self.removals.values().sum::<u64>();
        for (label, value) in self.figures() {
            let _ = writeln!(out, "  {label:<34} {}", number(value));
            if label == "creation failures" && removals == 0 {
                let _ = writeln!(out, "  {:<34} 0", "removals");
            }
        }
        out
    }
}

/// Formats a figure: integers without decimals, others with up to two.
pub fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// The timeline as CSV: one row per change, with wall-clock times.
pub fn timeline_csv(trace: &Trace) -> String {
    let mut out = String::from("time,idle,used,creating,removing,total,queued\n");
    for row in trace.timeline.iter().filter(|r| r.at <= trace.end) {
        let Counts {
            idle,
            used,
            creating,
            removing,
            queued,
        } = row.counts;
        let _ = writeln!(
            out,
            "{},{idle},{used},{creating},{removing},{},{queued}",
            trace
                .wall(row.at)
                .to_rfc3339_opts(SecondsFormat::AutoSi, true),
            row.counts.total()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::trace::JobOutcome;
    use super::*;
    use chrono::DateTime;

    fn trace() -> Trace {
        let mut t = Trace::new(DateTime::UNIX_EPOCH, 7);
        let c = |idle, used, creating, queued| Counts {
            idle,
            used,
            creating,
            removing: 0,
            queued,
        };
        t.record(0, c(0, 0, 2, 1));
        t.record(60_000, c(1, 1, 0, 0));
        t.record(120_000, c(2, 0, 0, 0));
        t.end = 180_000;
        t.creations = 2;
        t.count_removal("too many idle machines");
        t.count_removal("Failed to create");
        for (submitted, started) in [(0, Some(60_000)), (10_000, Some(10_000)), (0, None)] {
            t.jobs.push(JobOutcome {
                submitted,
                started,
                finished: started.map(|s| s + 1),
                waited_for_creation: started == Some(60_000),
                failed: false,
            });
        }
        t
    }

    #[test]
    fn integrates_the_timeline_and_measures_jobs() {
        let s = Summary::of(&trace());
        assert_eq!(s.peak_machines, 2);
        assert_eq!(s.machine_seconds.creating, 120.0);
        assert_eq!(s.machine_seconds.idle, 60.0 + 120.0);
        assert_eq!(s.machine_seconds.used, 60.0);
        assert_eq!(s.idle_machine_hours, 0.05);
        assert_eq!(s.jobs, 3);
        assert_eq!(s.jobs_completed, 2);
        assert_eq!(s.jobs_never_started, 1);
        assert_eq!(s.queue_wait_s.p50, 0.0);
        assert_eq!(s.queue_wait_s.max, 60.0);
        assert_eq!(s.jobs_waited_for_creation, 1);
        assert_eq!(s.removals.get("Failed to create"), Some(&1));
        let json: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
        for key in [
            "peak_machines",
            "machine_seconds",
            "idle_machine_hours",
            "creations",
            "creation_failures",
            "removals",
            "jobs",
            "jobs_completed",
            "queue_wait_s",
        ] {
            assert!(json.get(key).is_some(), "missing {key}");
        }
        assert_eq!(json["queue_wait_s"]["p95"], 60.0);
        assert!(s.to_text().contains("peak machines"));
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<SimTime> = (1..=20).collect();
        assert_eq!(percentile(&v, 50), 10);
        assert_eq!(percentile(&v, 95), 19);
        assert_eq!(percentile(&v, 100), 20);
        assert_eq!(percentile(&[], 50), 0);
        assert_eq!(percentile(&[5], 95), 5);
    }

    #[test]
    fn timeline_csv_has_one_line_per_row() {
        let csv = timeline_csv(&trace());
        let lines: Vec<_> = csv.lines().collect();
        assert_eq!(lines[0], "time,idle,used,creating,removing,total,queued");
        assert_eq!(lines[1], "1970-01-01T00:00:00Z,0,0,2,0,2,1");
        assert_eq!(lines.len(), 4);
        assert_eq!(number(2.0), "2");
        assert_eq!(number(0.126), "0.13");
    }
}
