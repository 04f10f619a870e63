//! The set of running jobs: `gitlab_runner_jobs` (computed at scrape time) and
//! `/debug/jobs/list` read it; [`RunningJob`] handles add to it and leave it.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGaugeVec, Opts};

use super::{MetricsError, RunnerLabels, RunnerMetrics};
use crate::config::GoDuration;

const JOBS_NAME: &str = "gitlab_runner_jobs";
const JOBS_HELP: &str = "Jobs running now, by state, stage and executor stage";
const JOBS_LABELS: [&str; 6] = [
    "runner",
    "runner_name",
    "system_id",
    "state",
    "stage",
    "executor_stage",
];

/// A job's runtime state (the `state` label and `/debug/jobs/list` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobState {
    /// Accepted, not started yet.
    Pending,
    /// Running its stages.
    Running,
    /// Ended (success or failure).
    Finished,
    /// Canceled from GitLab.
    Canceled,
    /// Aborted (a forceful shutdown).
    Terminated,
    /// Ran past its timeout.
    Timedout,
}

impl JobState {
    /// Upstream's name for the state.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Finished => "finished",
            JobState::Canceled => "canceled",
            JobState::Terminated => "terminated",
            JobState::Timedout => "timedout",
        }
    }
}

/// What the manager knows about a job at pickup, from the payload's `job_info`.
#[derive(Debug, Clone, Copy)]
pub struct JobPickup<'a> {
    /// The job's web URL (`<project URL>/-/jobs/<id>`), shown by `/debug/jobs/list`.
    pub url: &'a str,
    /// `job_info.time_in_queue_seconds`.
    pub time_in_queue_seconds: f64,
    /// `job_info.project_jobs_running_on_instance_runners_count` as sent (`"+Inf"` possible;
    /// empty when GitLab did not send it).
    pub project_jobs_running: &'a str,
    /// `job_info.queue_size`, when sent.
    pub queue_size: Option<i64>,
    /// `job_info.queue_depth`, when sent.
    pub queue_depth: Option<i64>,
}

/// One line of `/debug/jobs/list`. `Display` writes it in upstream's format (version 2), with
/// its newline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobListEntry {
    /// The job's web URL.
    pub url: String,
    /// Its state.
    pub state: JobState,
    /// Its build stage (empty before the first one).
    pub stage: String,
    /// Its executor stage (empty until the executor starts).
    pub executor_stage: String,
    /// How long it has run.
    pub duration: Duration,
}

impl fmt::Display for JobListEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "url={} state={} stage={} executor_stage={} duration={}",
            self.url,
            self.state.as_str(),
            self.stage,
            self.executor_stage,
            GoDuration::from_nanos(i64::try_from(self.duration.as_nanos()).unwrap_or(i64::MAX))
        )
    }
}

struct Entry {
    runner: Arc<RunnerLabels>,
    url: String,
    state: JobState,
    stage: String,
    executor_stage: String,
    started: Instant,
}

#[derive(Default)]
struct Jobs {
    next_id: u64,
    running: BTreeMap<u64, Entry>,
    seen: BTreeMap<RunnerLabels, String>,
}

/// The running set, shared by the handles, the collector and the HTTP server.
#[derive(Default)]
pub(crate) struct JobsState {
    jobs: Mutex<Jobs>,
}

impl JobsState {
    fn lock(&self) -> MutexGuard<'_, Jobs> {
        // A panic while holding the lock leaves plain data behind: keep serving it.
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn see_runner(&self, labels: &RunnerLabels, system_id: &str) {
        self.lock()
            .seen
            .insert(labels.clone(), system_id.to_string());
    }

    pub(crate) fn forget_runner(&self, labels: &RunnerLabels) {
        self.lock().seen.remove(labels);
    }

    pub(crate) fn list(&self) -> Vec<JobListEntry> {
        let now = Instant::now();
        self.lock()
            .running
            .values()
            .map(|e| JobListEntry {
                url: e.url.clone(),
                state: e.state,
                stage: e.stage.clone(),
                executor_stage: e.executor_stage.clone(),
                duration: now.saturating_duration_since(e.started),
            })
            .collect()
    }

    fn update(&self, id: u64, f: impl FnOnce(&mut Entry)) {
        if let Some(e) = self.lock().running.get_mut(&id) {
            f(e);
        }
    }

    /// (labels, system_id, state, stage, executor_stage) → count: an idle series with 0 for
    /// every runner seen, plus one per distinct running permutation.
    fn permutations(&self) -> BTreeMap<[String; 6], i64> {
        let jobs = self.lock();
        let mut out = BTreeMap::new();
        for (labels, system_id) in &jobs.seen {
            out.insert(
                [
                    labels.runner.clone(),
                    labels.runner_name.clone(),
                    system_id.clone(),
                    "idle".into(),
                    "idle".into(),
                    "idle".into(),
                ],
                0,
            );
        }
        for e in jobs.running.values() {
            let system_id = jobs.seen.get(&e.runner).cloned().unwrap_or_default();
            *out.entry([
                e.runner.runner.clone(),
                e.runner.runner_name.clone(),
                system_id,
                e.state.as_str().into(),
                e.stage.clone(),
                e.executor_stage.clone(),
            ])
            .or_insert(0) += 1;
        }
        out
    }
}

/// Computes `gitlab_runner_jobs` from the running set at every scrape.
pub(crate) struct JobsCollector {
    jobs: Arc<JobsState>,
    descs: Vec<Desc>,
}

impl JobsCollector {
    pub(crate) fn new(jobs: Arc<JobsState>) -> Result<JobsCollector, MetricsError> {
        let descs = Self::vec()?.desc().into_iter().cloned().collect();
        Ok(JobsCollector { jobs, descs })
    }

    fn vec() -> prometheus::Result<IntGaugeVec> {
        IntGaugeVec::new(Opts::new(JOBS_NAME, JOBS_HELP), &JOBS_LABELS)
    }
}

impl Collector for JobsCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        // The same definition succeeded in `new`, so this cannot fail; answer nothing if it did.
        let Ok(vec) = Self::vec() else {
            return Vec::new();
        };
        for (labels, count) in self.jobs.permutations() {
            let values: Vec<&str> = labels.iter().map(String::as_str).collect();
            vec.with_label_values(&values).set(count);
        }
        vec.collect()
    }
}

/// A job in the running set. Update its state and stages as it goes; [`RunningJob::finish`]
/// (or dropping it) takes it out, observing `gitlab_runner_job_duration_seconds`.
pub struct RunningJob {
    id: u64,
    runner: RunnerMetrics,
    jobs: Arc<JobsState>,
    started: Instant,
    done: bool,
}

impl fmt::Debug for RunningJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunningJob")
            .field("id", &self.id)
            .field("runner", self.runner.labels())
            .finish_non_exhaustive()
    }
}

impl RunningJob {
    pub(crate) fn start(runner: RunnerMetrics, jobs: Arc<JobsState>, url: &str) -> RunningJob {
        let started = Instant::now();
        let id = {
            let mut j = jobs.lock();
            j.next_id += 1;
            let id = j.next_id;
            j.running.insert(
                id,
                Entry {
                    runner: runner.labels.clone(),
                    url: url.to_string(),
                    state: JobState::Pending,
                    stage: String::new(),
                    executor_stage: String::new(),
                    started,
                },
            );
            id
        };
        RunningJob {
            id,
            runner,
            jobs,
            started,
            done: false,
        }
    }

    /// Sets the job's runtime state.
    pub fn set_state(&self, state: JobState) {
        self.jobs.update(self.id, |e| e.state = state);
    }

    /// Sets the job's build stage (`prepare_executor`, `get_sources`, `step_script`, …).
    pub fn set_stage(&self, stage: &str) {
        self.jobs.update(self.id, |e| {
            if e.stage != stage {
                e.stage = stage.to_string();
            }
        });
    }

    /// Sets the executor's own stage (`docker_prepare`, `docker_run`, …).
    pub fn set_executor_stage(&self, stage: &str) {
        self.jobs.update(self.id, |e| {
            if e.executor_stage != stage {
                e.executor_stage = stage.to_string();
            }
        });
    }

    /// How long the job has been in the running set.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The job ended: it leaves the running set, its duration is observed, and a
    /// `failure_reason` (as sent to GitLab) counts it in `gitlab_runner_failed_jobs_total`.
    pub fn finish(mut self, failure_reason: Option<&str>) {
        self.leave(failure_reason);
    }

    fn leave(&mut self, failure_reason: Option<&str>) {
        if self.done {
            return;
        }
        self.done = true;
        self.jobs.lock().running.remove(&self.id);
        self.runner.job_left(self.started.elapsed(), failure_reason);
    }
}

impl Drop for RunningJob {
    fn drop(&mut self) {
        self.leave(None);
    }
}
