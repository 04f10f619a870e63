//! Workloads: the jobs a simulation replays, and their CSV file format.
//!
//! A workload is a list of jobs, each with a submission time, a duration, and optionally the
//! runner that must take it and its tags. The format is documented in `docs/simulation.md`:
//!
//! ```text
//! submitted_at,duration_s,runner,tags
//! 2026-01-05T09:00:12Z,340,docker-autoscaler,"docker,linux"
//! 75.5,120,,
//! ```
//!
//! `submitted_at` is RFC 3339 or seconds from the start of the simulation. Parsing is strict:
//! every problem is reported with the file name and line. This module only reads and writes
//! workloads; it does not run them ([`crate::sim`] does) and does not import GitLab exports
//! ([`crate::sim::import`] does).

use std::fmt::Write as _;
use std::path::Path;

use chrono::{DateTime, SecondsFormat, Utc};

use super::csv::{quote, split_record};
use super::queue::{secs_to_ms, SimTime};

/// When a job was submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SubmittedAt {
    /// At this wall-clock instant.
    At(DateTime<Utc>),
    /// This many milliseconds after the start of the simulation.
    Offset(SimTime),
}

/// One job of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// When the job entered GitLab's queue.
    pub submitted_at: SubmittedAt,
    /// How long the job runs once it has a machine, in milliseconds.
    pub duration: SimTime,
    /// The `name` of the `[[runners]]` entry that must take the job; `None` means any runner.
    pub runner: Option<String>,
    /// The job's tags (informational: `config.toml` holds no tags to match them against).
    pub tags: Vec<String>,
    /// The line of the source file the job came from (0 when built in code).
    pub line: usize,
}

impl Job {
    /// Why this job cannot be written as a workload CSV row that reads back unchanged, if it
    /// cannot: a line break in the runner or a tag (records are one line), a comma in a tag
    /// (tags are a comma-separated list), an empty runner name or tag, or one with surrounding
    /// spaces (read back trimmed), a duration or offset beyond the format's bounds, or a time
    /// outside RFC 3339's years 0-9999.
    pub fn csv_problem(&self) -> Option<String> {
        let breaks = |s: &str| s.contains(['\n', '\r']);
        if let Some(r) = &self.runner {
            if r.is_empty() || breaks(r) {
                return Some(format!(
                    "runner name {r:?} cannot be written in a workload CSV (an empty name or a line break)"
                ));
            }
        }
        if let Some(t) = self
            .tags
            .iter()
            .find(|t| t.is_empty() || breaks(t) || t.contains(',') || t.trim() != t.as_str())
        {
            return Some(format!(
                "tag {t:?} cannot be written in a workload CSV (tags are one comma-separated field: no commas, line breaks, empty tags or surrounding spaces)"
            ));
        }
        if self.duration > MAX_DURATION {
            return Some(format!(
                "duration {}s is longer than a workload's bound of {}s (a year)",
                format_secs(self.duration),
                MAX_DURATION / 1000
            ));
        }
        match self.submitted_at {
            SubmittedAt::Offset(ms) if ms > MAX_OFFSET => Some(format!(
                "submitted_at {}s is later than a workload's bound of {}s (100 years)",
                format_secs(ms),
                MAX_OFFSET / 1000
            )),
            SubmittedAt::At(t) if !(0..=9999).contains(&chrono::Datelike::year(&t)) => Some(
                format!("submitted_at {t} is outside the years 0-9999 RFC 3339 can write"),
            ),
            _ => None,
        }
    }
}

/// A list of jobs, in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workload {
    /// The jobs.
    pub jobs: Vec<Job>,
}

/// A workload file that could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkloadError {
    /// The file could not be read.
    #[error("cannot read workload {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A line is malformed.
    #[error("{source_name}:{line}: {message}")]
    Syntax {
        /// The file name (or `<embedded>`).
        source_name: String,
        /// The 1-based line number.
        line: usize,
        /// What is wrong and what to do.
        message: String,
    },
}

/// The latest relative submission accepted: 100 years, in milliseconds.
pub const MAX_OFFSET: SimTime = 100 * 365 * 86_400 * 1000;
/// The longest job accepted: one year, in milliseconds.
pub const MAX_DURATION: SimTime = 365 * 86_400 * 1000;

/// The columns a workload CSV may have.
const COLUMNS: [&str; 4] = ["submitted_at", "duration_s", "runner", "tags"];

/// Parses `submitted_at`: a number of seconds (offset) or an RFC 3339 timestamp.
pub fn parse_submitted_at(text: &str) -> Option<SubmittedAt> {
    if let Ok(secs) = text.parse::<f64>() {
        return secs_to_ms(secs)
            .filter(|ms| *ms <= MAX_OFFSET)
            .map(SubmittedAt::Offset);
    }
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| SubmittedAt::At(t.with_timezone(&Utc)))
}

impl Workload {
    /// Reads and parses a workload CSV file.
    pub fn load(path: &Path) -> Result<Self, WorkloadError> {
        let text = crate::bounded::read_file_string(path, crate::bounded::MAX_DATA_FILE).map_err(
            |source| WorkloadError::Io {
                path: path.display().to_string(),
                source,
            },
        )?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses workload CSV text; `source_name` names it in error messages.
    pub fn parse(text: &str, source_name: &str) -> Result<Self, WorkloadError> {
        let err = |line: usize, message: String| WorkloadError::Syntax {
            source_name: source_name.to_string(),
            line,
            message,
        };
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim_start_matches('\u{feff}')))
            .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        let Some((header_line, header)) = lines.next() else {
            return Err(err(
                1,
                "the file is empty; it needs a header line such as `submitted_at,duration_s`"
                    .into(),
            ));
        };
        let header = split_record(header).map_err(|e| err(header_line, e.to_string()))?;
        // Column index of each known column.
        let mut index = [None; 4];
        for (i, name) in header.iter().enumerate() {
            let Some(k) = COLUMNS.iter().position(|c| c.eq_ignore_ascii_case(name)) else {
                return Err(err(
                    header_line,
                    format!(
                        "unknown column {name:?}; the columns are {}",
                        COLUMNS.join(", ")
                    ),
                ));
            };
            if index[k].replace(i).is_some() {
                return Err(err(header_line, format!("column {name:?} appears twice")));
            }
        }
        let (Some(at_col), Some(dur_col)) = (index[0], index[1]) else {
            return Err(err(
                header_line,
                "the header must name the columns `submitted_at` and `duration_s`".into(),
            ));
        };
        let mut jobs = Vec::new();
        for (line, text) in lines {
            let fields = split_record(text).map_err(|e| err(line, e.to_string()))?;
            if fields.len() != header.len() {
                return Err(err(
                    line,
                    format!(
                        "{} fields, but the header has {} columns",
                        fields.len(),
                        header.len()
                    ),
                ));
            }
            let field = |k: Option<usize>| k.and_then(|i| fields.get(i)).map(String::as_str);
            let at_text = field(Some(at_col)).unwrap_or_default();
            let submitted_at = parse_submitted_at(at_text).ok_or_else(|| {
                err(
                    line,
                    format!(
                        "submitted_at {at_text:?} is neither an RFC 3339 time \
                         (2026-01-05T09:00:00Z) nor a number of seconds from the start"
                    ),
                )
            })?;
            let dur_text = field(Some(dur_col)).unwrap_or_default();
            let duration = dur_text
                .parse::<f64>()
                .ok()
                .and_then(secs_to_ms)
                .filter(|ms| *ms <= MAX_DURATION)
                .ok_or_else(|| {
                    err(
                        line,
                        format!(
                            "duration_s {dur_text:?} is not a number of seconds between 0 and \
                             31536000 (a year)"
                        ),
                    )
                })?;
            let runner = field(index[2])
                .filter(|r| !r.is_empty())
                .map(str::to_string);
            let tags = field(index[3])
                .map(|t| {
                    t.split(',')
                        .map(str::trim)
                        .filter(|t| !t.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            jobs.push(Job {
                submitted_at,
                duration,
                runner,
                tags,
                line,
            });
        }
        Ok(Workload { jobs })
    }

    /// The first job [`Workload::to_csv`] cannot write so that [`Workload::parse`] reads it
    /// back unchanged, with why: `(index, reason)`.
    pub fn csv_problem(&self) -> Option<(usize, String)> {
        self.jobs
            .iter()
            .enumerate()
            .find_map(|(i, j)| j.csv_problem().map(|why| (i, why)))
    }

    /// Writes the workload as CSV, with all four columns. Check [`Workload::csv_problem`] first:
    /// a job it names does not read back unchanged.
    pub fn to_csv(&self) -> String {
        let mut out = String::from("submitted_at,duration_s,runner,tags\n");
        for job in &self.jobs {
            let at = match job.submitted_at {
                SubmittedAt::At(t) => t.to_rfc3339_opts(SecondsFormat::AutoSi, true),
                SubmittedAt::Offset(ms) => format_secs(ms),
            };
            let _ = writeln!(
                out,
                "{},{},{},{}",
                at,
                format_secs(job.duration),
                quote(job.runner.as_deref().unwrap_or("")),
                quote(&job.tags.join(","))
            );
        }
        out
    }

    /// The earliest absolute submission time, if any job has one.
    pub fn first_absolute(&self) -> Option<DateTime<Utc>> {
        self.jobs
            .iter()
            .filter_map(|j| match j.submitted_at {
                SubmittedAt::At(t) => Some(t),
                SubmittedAt::Offset(_) => None,
            })
            .min()
    }
}

/// Formats milliseconds as seconds without trailing zeros (`1.5`, `90`).
pub fn format_secs(ms: SimTime) -> String {
    if ms % 1000 == 0 {
        (ms / 1000).to_string()
    } else {
        let s = format!("{}.{:03}", ms / 1000, ms % 1000);
        s.trim_end_matches('0').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Workload, String> {
        Workload::parse(text, "jobs.csv").map_err(|e| e.to_string())
    }

    #[test]
    fn parses_both_time_forms_and_optional_columns() {
        let w = parse(
            "# a comment\nsubmitted_at,duration_s,runner,tags\n\
             2026-01-05T09:00:00+01:00,340,ci-big,\"docker,linux\"\n\
             75.5,120.25,,\n",
        )
        .unwrap();
        assert_eq!(w.jobs.len(), 2);
        let t = DateTime::parse_from_rfc3339("2026-01-05T08:00:00Z").unwrap();
        assert_eq!(
            w.jobs[0].submitted_at,
            SubmittedAt::At(t.with_timezone(&Utc))
        );
        assert_eq!(w.jobs[0].duration, 340_000);
        assert_eq!(w.jobs[0].runner.as_deref(), Some("ci-big"));
        assert_eq!(w.jobs[0].tags, ["docker", "linux"]);
        assert_eq!(w.jobs[0].line, 3);
        assert_eq!(w.jobs[1].submitted_at, SubmittedAt::Offset(75_500));
        assert_eq!(w.jobs[1].duration, 120_250);
        assert_eq!(w.jobs[1].runner, None);
        assert!(w.jobs[1].tags.is_empty());
    }

    #[test]
    fn columns_may_come_in_any_order_and_optional_ones_may_be_missing() {
        let w = parse("duration_s,submitted_at\n10,0\n").unwrap();
        assert_eq!(w.jobs[0].duration, 10_000);
        assert_eq!(w.jobs[0].submitted_at, SubmittedAt::Offset(0));
    }

    #[test]
    fn errors_name_the_line_and_the_fix() {
        let cases = [
            ("", "jobs.csv:1: the file is empty"),
            (
                "submitted_at,duration\n",
                "jobs.csv:1: unknown column \"duration\"",
            ),
            ("runner\n", "must name the columns"),
            (
                "submitted_at,duration_s\n0,1\nyesterday,5\n",
                "jobs.csv:3: submitted_at \"yesterday\"",
            ),
            (
                "submitted_at,duration_s\n0,-5\n",
                "jobs.csv:2: duration_s \"-5\"",
            ),
            (
                "submitted_at,duration_s\n0\n",
                "jobs.csv:2: 1 fields, but the header has 2",
            ),
            (
                "submitted_at,duration_s\n0,\"5\n",
                "jobs.csv:2: unterminated",
            ),
            ("submitted_at,submitted_at\n", "appears twice"),
        ];
        for (text, want) in cases {
            let got = parse(text).unwrap_err();
            assert!(got.contains(want), "{text:?}: got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn csv_output_parses_back() {
        let w = parse(
            "submitted_at,duration_s,runner,tags\n2026-01-05T09:00:00.5Z,1.5,a,\"x,y\"\n3,4,,\n",
        )
        .unwrap();
        let again = parse(&w.to_csv()).unwrap();
        let strip = |w: Workload| {
            w.jobs
                .into_iter()
                .map(|j| (j.submitted_at, j.duration, j.runner, j.tags))
                .collect::<Vec<_>>()
        };
        assert_eq!(strip(w), strip(again));
    }
}

#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any text is either a workload or an error naming a line; parsing never panics, and a
        /// parsed workload survives a round trip through CSV.
        #[test]
        fn parse_never_panics(text in "(submitted_at|duration_s|runner|tags|[0-9.,\"eZT:-]|\n| ){0,120}") {
            if let Ok(w) = Workload::parse(&text, "f.csv") {
                let again = Workload::parse(&w.to_csv(), "g.csv").map(|w| w.jobs.len());
                prop_assert_eq!(again.ok(), Some(w.jobs.len()));
            }
        }

        /// Workloads written by `to_csv` parse back to the same jobs.
        #[test]
        fn csv_round_trips(rows in proptest::collection::vec(
            (0u64..10_000_000, 0u64..10_000_000, "[a-z ,\"]{0,6}", proptest::collection::vec("[a-z0-9-]{1,5}", 0..3)),
            0..20,
        )) {
            let jobs: Vec<Job> = rows
                .into_iter()
                .map(|(at, duration, runner, tags)| Job {
                    submitted_at: SubmittedAt::Offset(at),
                    duration,
                    runner: Some(runner.trim().to_string()).filter(|r| !r.is_empty()),
                    tags,
                    line: 0,
                })
                .collect();
            let w = Workload { jobs };
            let back = Workload::parse(&w.to_csv(), "r.csv").map_err(|e| e.to_string());
            let strip = |w: &Workload| {
                w.jobs
                    .iter()
                    .map(|j| (j.submitted_at, j.duration, j.runner.clone(), j.tags.clone()))
                    .collect::<Vec<_>>()
            };
            prop_assert_eq!(back.map(|b| strip(&b)), Ok(strip(&w)));
        }

        /// Hostile jobs (line breaks, commas, quotes and spaces in names and tags, durations
        /// and times past the bounds): a job `csv_problem` accepts reads back unchanged.
        #[test]
        fn csv_round_trips_or_is_refused(rows in proptest::collection::vec(
            (
                prop_oneof![
                    (0u64..2 * MAX_OFFSET).prop_map(SubmittedAt::Offset),
                    (-70_000_000_000_000i64..300_000_000_000_000i64).prop_map(|ms| {
                        SubmittedAt::At(DateTime::from_timestamp_millis(ms).unwrap_or_default())
                    }),
                ],
                0u64..2 * MAX_DURATION,
                proptest::option::of("[a-z ,\"\n\r\t#\u{feff}]{0,6}"),
                proptest::collection::vec("[a-z ,\"\n\r]{0,4}", 0..3),
            ),
            0..12,
        )) {
            let jobs: Vec<Job> = rows
                .into_iter()
                .map(|(submitted_at, duration, runner, tags)| Job {
                    submitted_at,
                    duration,
                    runner,
                    tags,
                    line: 0,
                })
                .collect();
            let w = Workload { jobs };
            let writable = Workload {
                jobs: w.jobs.iter().filter(|j| j.csv_problem().is_none()).cloned().collect(),
            };
            let back = Workload::parse(&writable.to_csv(), "r.csv").map_err(|e| e.to_string());
            let strip = |w: &Workload| {
                w.jobs
                    .iter()
                    .map(|j| (j.submitted_at, j.duration, j.runner.clone(), j.tags.clone()))
                    .collect::<Vec<_>>()
            };
            prop_assert_eq!(back.map(|b| strip(&b)), Ok(strip(&writable)));
        }
    }
}
