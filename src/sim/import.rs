//! Import of real history: a GitLab jobs API export converted into a [`Workload`].
//!
//! The input is what `GET /projects/:id/jobs` (or the group/instance job lists) returns: a JSON
//! array of job objects. Several pages may simply be concatenated in one file (`[...][...]`).
//! For each job, `created_at` becomes `submitted_at`, `finished_at - started_at` becomes
//! `duration_s`, `tag_list` becomes `tags` and `runner.description` (the runner's `name` in
//! `config.toml`) becomes `runner`. Jobs that never started or never finished (pending,
//! canceled before start, skipped, manual) are left out and counted. Unknown fields are
//! ignored. This module only converts; the simulator runs the result.

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::queue::SimTime;
use super::workload::{Job, SubmittedAt, Workload};

/// The fields of a jobs API object that the import reads.
#[derive(Debug, Deserialize)]
struct ApiJob {
    #[serde(default)]
    id: Option<u64>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    started_at: Option<String>,
    #[serde(default)]
    finished_at: Option<String>,
    #[serde(default)]
    queued_duration: Option<f64>,
    #[serde(default)]
    tag_list: Vec<String>,
    #[serde(default)]
    runner: Option<ApiRunner>,
}

#[derive(Debug, Deserialize)]
struct ApiRunner {
    #[serde(default)]
    description: Option<String>,
}

/// A jobs export that could not be converted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The text is not a JSON array (or a sequence of arrays) of job objects.
    #[error("{source_name}: not a GitLab jobs export (a JSON array of jobs): {source}")]
    Json {
        /// The file name.
        source_name: String,
        /// Where and why parsing failed.
        source: serde_json::Error,
    },
    /// A timestamp is not RFC 3339.
    #[error("{source_name}: job {job}: {field} {value:?} is not an RFC 3339 time")]
    Time {
        /// The file name.
        source_name: String,
        /// The job id (or its position when it has none).
        job: String,
        /// Which field.
        field: &'static str,
        /// The text found.
        value: String,
    },
    /// A job the workload CSV format cannot hold (see [`Job::csv_problem`]).
    #[error("{source_name}: job {job}: {reason}; fix or remove this job in the export")]
    Unwritable {
        /// The file name.
        source_name: String,
        /// The job id (or its position when it has none).
        job: String,
        /// What the format cannot hold.
        reason: String,
    },
}

/// The result of an import: the workload and what was left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Imported {
    /// The jobs that ran, sorted by submission time.
    pub workload: Workload,
    /// Jobs left out because they never started.
    pub not_started: usize,
    /// Jobs left out because they started but never finished.
    pub not_finished: usize,
}

/// True if `text` looks like a JSON export rather than CSV (its first non-space byte is `[`).
pub fn looks_like_export(text: &str) -> bool {
    text.trim_start_matches('\u{feff}')
        .trim_start()
        .starts_with('[')
}

/// Converts a jobs API export; `source_name` names it in error messages.
pub fn import_jobs_export(text: &str, source_name: &str) -> Result<Imported, ImportError> {
    let mut api_jobs = Vec::new();
    for page in serde_json::Deserializer::from_str(text).into_iter::<Vec<ApiJob>>() {
        api_jobs.extend(page.map_err(|source| ImportError::Json {
            source_name: source_name.to_string(),
            source,
        })?);
    }
    let mut out = Imported::default();
    let mut jobs = Vec::with_capacity(api_jobs.len());
    for (position, job) in api_jobs.into_iter().enumerate() {
        let label = job
            .id
            .map(|id| id.to_string())
            .unwrap_or_else(|| format!("#{}", position + 1));
        let time = |field: &'static str, value: &Option<String>| {
            value
                .as_deref()
                .map(|v| {
                    DateTime::parse_from_rfc3339(v)
                        .map(|t| t.with_timezone(&Utc))
                        .map_err(|_| ImportError::Time {
                            source_name: source_name.to_string(),
                            job: label.clone(),
                            field,
                            value: v.to_string(),
                        })
                })
                .transpose()
        };
        let created = time("created_at", &job.created_at)?;
        let started = time("started_at", &job.started_at)?;
        let finished = time("finished_at", &job.finished_at)?;
        let (Some(started), Some(created)) = (started, created.or(started)) else {
            out.not_started += 1;
            continue;
        };
        let Some(finished) = finished else {
            out.not_finished += 1;
            continue;
        };
        let duration = (finished - started).num_milliseconds().max(0) as SimTime;
        let imported = Job {
            submitted_at: SubmittedAt::At(created),
            duration,
            runner: job
                .runner
                .and_then(|r| r.description)
                .filter(|d| !d.is_empty()),
            // GitLab strips tags; a workload reads them trimmed, without empty ones.
            tags: job
                .tag_list
                .iter()
                .map(|t| t.trim())
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect(),
            line: 0,
        };
        if let Some(reason) = imported.csv_problem() {
            return Err(ImportError::Unwritable {
                source_name: source_name.to_string(),
                job: label,
                reason,
            });
        }
        jobs.push(imported);
    }
    // The API lists newest first; a workload reads best in submission order.
    jobs.sort_by_key(|j| j.submitted_at);
    out.workload = Workload { jobs };
    Ok(out)
}

/// Each job's queue entry by id, from a jobs export: `started_at − queued_duration` when both
/// are there, else `created_at`. For gitlab-runner logs without `time_in_queue_seconds`
/// (runners before 16.10), whose jobs the log identifies by id.
pub fn queue_entries(
    text: &str,
    source_name: &str,
) -> Result<std::collections::HashMap<u64, DateTime<Utc>>, ImportError> {
    let mut out = std::collections::HashMap::new();
    for page in serde_json::Deserializer::from_str(text).into_iter::<Vec<ApiJob>>() {
        let page = page.map_err(|source| ImportError::Json {
            source_name: source_name.to_string(),
            source,
        })?;
        for job in page {
            let Some(id) = job.id else { continue };
            let parse = |v: &Option<String>| {
                v.as_deref()
                    .and_then(|v| DateTime::parse_from_rfc3339(v).ok())
                    .map(|t| t.with_timezone(&Utc))
            };
            let from_queue = parse(&job.started_at).and_then(|s| {
                let q = job.queued_duration.filter(|q| q.is_finite() && *q >= 0.0)?;
                chrono::TimeDelta::try_milliseconds((q * 1000.0).round() as i64)
                    .and_then(|d| s.checked_sub_signed(d))
            });
            if let Some(t) = from_queue.or_else(|| parse(&job.created_at)) {
                out.insert(id, t);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_entries_prefer_started_minus_queued_duration() {
        let text = r#"[{"id": 5, "created_at": "2026-01-05T09:00:00Z",
            "started_at": "2026-01-05T09:10:00Z", "queued_duration": 30.5},
            {"id": 6, "created_at": "2026-01-05T09:01:00Z", "started_at": null}, {"status": "x"}]"#;
        let q = queue_entries(text, "e.json").unwrap();
        assert_eq!(q.len(), 2);
        assert_eq!(q[&5].to_rfc3339(), "2026-01-05T09:09:29.500+00:00");
        assert_eq!(q[&6].to_rfc3339(), "2026-01-05T09:01:00+00:00");
    }

    const EXPORT: &str = r#"[
      {"id": 3, "status": "success", "created_at": "2026-01-05T09:10:00.000Z",
       "started_at": "2026-01-05T09:11:00.000Z", "finished_at": "2026-01-05T09:16:30.500Z",
       "tag_list": ["docker"], "runner": {"id": 7, "description": "autoscale-1", "active": true},
       "pipeline": {"id": 1}},
      {"id": 2, "status": "pending", "created_at": "2026-01-05T09:05:00Z",
       "started_at": null, "finished_at": null, "tag_list": [], "runner": null},
      {"id": 1, "status": "success", "created_at": "2026-01-05T10:00:00+01:00",
       "started_at": "2026-01-05T09:00:30Z", "finished_at": "2026-01-05T09:01:00Z",
       "tag_list": [], "runner": null}
    ]
    [{"id": 0, "status": "running", "created_at": "2026-01-05T08:00:00Z",
      "started_at": "2026-01-05T08:00:01Z", "finished_at": null}]"#;

    #[test]
    fn converts_finished_jobs_in_submission_order() {
        let got = import_jobs_export(EXPORT, "export.json").unwrap();
        assert_eq!((got.not_started, got.not_finished), (1, 1));
        let jobs = &got.workload.jobs;
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].duration, 30_000);
        assert_eq!(jobs[0].runner, None);
        assert_eq!(jobs[1].duration, 330_500);
        assert_eq!(jobs[1].runner.as_deref(), Some("autoscale-1"));
        assert_eq!(jobs[1].tags, ["docker"]);
        assert!(jobs[0].submitted_at < jobs[1].submitted_at);
        // The CSV it produces is a valid workload.
        let csv = got.workload.to_csv();
        assert_eq!(Workload::parse(&csv, "x").unwrap().jobs.len(), 2);
    }

    #[test]
    fn reports_bad_input() {
        let e = import_jobs_export("{\"id\": 1}", "e.json")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("e.json: not a GitLab jobs export"), "{e}");
        let e = import_jobs_export(r#"[{"id": 9, "created_at": "monday"}]"#, "e.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("job 9: created_at \"monday\""), "{e}");
        assert!(looks_like_export("\n  [{}]"));
        assert!(!looks_like_export("submitted_at,duration_s"));
    }
}

#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Arbitrary JSON-ish text never panics the import.
        #[test]
        fn import_never_panics(text in "(\\[|\\]|\\{|\\}|\"[a-z_]{0,12}\"|:|,|null|[0-9]{1,4}|\"2026-01-05T0[0-9]:00:00Z\"){0,60}") {
            let _ = import_jobs_export(&text, "x.json");
        }

        /// An export with hostile runner names and tags, and long jobs, either imports into a
        /// workload whose CSV reads back unchanged or is refused naming the job.
        #[test]
        fn import_writes_csv_that_reads_back(jobs in proptest::collection::vec(
            ("[a-z ,\"\n\r\t]{0,5}", proptest::collection::vec("[a-z ,\n]{0,4}", 0..3), 0i64..800),
            1..6,
        )) {
            let export: Vec<serde_json::Value> = jobs
                .iter()
                .enumerate()
                .map(|(i, (runner, tags, days))| serde_json::json!({
                    "id": i + 1,
                    "created_at": "2026-01-05T09:00:00Z",
                    "started_at": "2026-01-05T09:00:01Z",
                    "finished_at": (DateTime::parse_from_rfc3339("2026-01-05T09:00:01.250Z").unwrap_or_default()
                        + chrono::Duration::days(*days)).to_rfc3339(),
                    "tag_list": tags,
                    "runner": {"description": runner},
                }))
                .collect();
            let text = serde_json::Value::Array(export).to_string();
            match import_jobs_export(&text, "e.json") {
                Ok(imported) => {
                    let csv = imported.workload.to_csv();
                    let back = Workload::parse(&csv, "r.csv")
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    let strip = |w: &Workload| {
                        w.jobs
                            .iter()
                            .map(|j| (j.submitted_at, j.duration, j.runner.clone(), j.tags.clone()))
                            .collect::<Vec<_>>()
                    };
                    prop_assert_eq!(strip(&back), strip(&imported.workload));
                }
                Err(e) => {
                    let m = e.to_string();
                    prop_assert!(m.contains("e.json: job ") && m.contains("cannot be written") || m.contains("longer than"), "{}", m);
                }
            }
        }
    }
}
