//! gitlab-runner's Prometheus metrics, under upstream's names, types, labels and buckets, so that
//! existing Grafana dashboards and alerts keep working when drover replaces gitlab-runner
//! (shared/spec/metrics.md, autoscale-semantics.md §11).
//!
//! This module knows metric names, types, labels and buckets, and nothing else: it does not know
//! GitLab, providers or the engine's internals. The manager feeds it plain values:
//!
//! | who | calls |
//! |---|---|
//! | the run loop | [`Metrics::set_concurrent`], [`Metrics::worker_slots`], [`Metrics::worker_slot_operation`] |
//! | per `[[runners]]` | [`Metrics::runner`] → [`RunnerMetrics`]: limit, feeds, request concurrency, job start/finish, API requests |
//! | per job | [`RunnerMetrics::job_started`] → [`RunningJob`]: state, stage, executor stage, then [`RunningJob::finish`] |
//! | the GitLab client's observer | [`RunnerMetrics::api_request`], [`Metrics::api_retry`] |
//! | docker+machine | [`Metrics::autoscaling`] → [`AutoscalingMetrics`]: actions, machine states, durations |
//! | the log subscriber | [`Metrics::errors_layer`], a `tracing` layer counting warnings and errors |
//!
//! [`server`] serves `/metrics`, `/health/ready` and `/debug/jobs/list` on `listen_address`.
//!
//! `process_*` come from the `prometheus` crate's process collector; drover exposes no `go_*`.

mod autoscaling;
mod errors_layer;
mod jobs;
pub mod server;

use std::sync::Arc;
use std::time::Duration;

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

pub use autoscaling::{
    creation_buckets, AutoscalingMetrics, MachineAction, MACHINE_DURATION_BUCKETS,
};
pub use errors_layer::ErrorsLayer;
pub use jobs::{JobListEntry, JobPickup, JobState, RunningJob};

use jobs::{JobsCollector, JobsState};

/// The content type of `/metrics` (Prometheus text exposition format 0.0.4).
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `gitlab_runner_job_duration_seconds` buckets.
pub const JOB_DURATION_BUCKETS: [f64; 10] = [
    30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 10800.0, 18000.0, 36000.0,
];
/// `gitlab_runner_job_queue_duration_seconds` and `gitlab_runner_job_stage_duration_seconds`
/// buckets.
pub const QUEUE_DURATION_BUCKETS: [f64; 10] = [
    1.0, 3.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0,
];
/// `gitlab_runner_api_request_duration_seconds` buckets.
pub const API_DURATION_BUCKETS: [f64; 9] = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// The levels `gitlab_runner_errors_total` has a series for from the start.
pub const ERROR_LEVELS: [&str; 4] = ["panic", "fatal", "error", "warning"];

const RUNNER_LABELS: [&str; 3] = ["runner", "runner_name", "system_id"];

/// A metrics error: only a metric definition clash can cause one, which is a bug in drover.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The Prometheus registry refused a metric or encoding failed.
    #[error("metrics registry: {0} (a bug in drover: please report it)")]
    Prometheus(#[from] prometheus::Error),
}

/// What `gitlab_runner_version_info` reports. The manager fills it from the build's version
/// module; [`BuildInfo::current`] gives values for this build with neutral revision and date.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    /// `name`: the binary's name.
    pub name: String,
    /// `version`.
    pub version: String,
    /// `revision`: the short commit.
    pub revision: String,
    /// `branch`.
    pub branch: String,
    /// `go_version`: the toolchain (drover reports its Rust toolchain here).
    pub go_version: String,
    /// `built_at`.
    pub built_at: String,
    /// `os`, Go's name (`linux`).
    pub os: String,
    /// `architecture`, Go's name (`amd64`, `arm64`).
    pub architecture: String,
}

impl BuildInfo {
    /// This build: name `drover`, the crate version, revision and date from the compile-time
    /// variables `DROVER_GIT_REVISION` / `DROVER_BUILD_DATE` when set (else `HEAD` / `unknown`).
    pub fn current() -> BuildInfo {
        BuildInfo {
            name: "drover".into(),
            version: crate::version::DROVER_VERSION.into(),
            revision: crate::version::revision().into(),
            branch: crate::version::branch(),
            go_version: "rust".into(),
            built_at: crate::version::built().into(),
            os: std::env::consts::OS.into(),
            architecture: go_arch(std::env::consts::ARCH).into(),
        }
    }
}

/// Go's GOARCH name for a Rust target architecture.
pub fn go_arch(rust_arch: &str) -> &str {
    match rust_arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// A runner as its metric labels name it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunnerLabels {
    /// `runner`: the runner's short token (autoscale-semantics.md §5).
    pub runner: String,
    /// `runner_name`: the `[[runners]] name`.
    pub runner_name: String,
}

impl RunnerLabels {
    /// Labels for a runner.
    pub fn new(runner: impl Into<String>, runner_name: impl Into<String>) -> RunnerLabels {
        RunnerLabels {
            runner: runner.into(),
            runner_name: runner_name.into(),
        }
    }
}

/// Why a worker failed to process a runner (`gitlab_runner_worker_processing_failures_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessingFailure {
    /// Any other failure (a job request error, an unknown executor…).
    Other,
    /// The executor provider refused to hand out capacity (docker+machine's capacity gate).
    NoFreeExecutor,
    /// The job failed after it was received.
    JobFailure,
}

impl ProcessingFailure {
    /// The `failure_type` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessingFailure::Other => "other",
            ProcessingFailure::NoFreeExecutor => "no_free_executor",
            ProcessingFailure::JobFailure => "job_failure",
        }
    }
    const ALL: [ProcessingFailure; 3] = [
        ProcessingFailure::Other,
        ProcessingFailure::NoFreeExecutor,
        ProcessingFailure::JobFailure,
    ];
}

/// A worker slot operation (`gitlab_runner_worker_slot_operations_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotOperation {
    /// A worker started.
    Started,
    /// A worker stopped.
    Stopped,
}

impl SlotOperation {
    /// The `operation` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SlotOperation::Started => "started",
            SlotOperation::Stopped => "stopped",
        }
    }
}

/// Every metric drover exposes, in one registry. Cheap to clone; share it between the run loop,
/// the workers and the HTTP server.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("system_id", &self.inner.system_id)
            .finish_non_exhaustive()
    }
}

struct Inner {
    registry: Registry,
    system_id: String,
    jobs: Arc<JobsState>,
    autoscaling: AutoscalingMetrics,
    concurrent: IntGauge,
    limit: IntGaugeVec,
    jobs_total: IntCounterVec,
    job_duration: HistogramVec,
    queue_duration: HistogramVec,
    queue_size: IntGaugeVec,
    queue_depth: IntGaugeVec,
    queuing_exceeded: IntCounterVec,
    stage_duration: HistogramVec,
    request_concurrency: IntGaugeVec,
    request_concurrency_exceeded: IntCounterVec,
    request_concurrency_hard: IntGaugeVec,
    request_concurrency_adaptive: GaugeVec,
    request_concurrency_used: IntGaugeVec,
    api_statuses: IntCounterVec,
    api_duration: HistogramVec,
    api_retries: IntCounterVec,
    leftovers_removed: IntCounterVec,
    errors: IntCounterVec,
    failed_jobs: IntCounterVec,
    worker_slots: IntGauge,
    slot_operations: IntCounterVec,
    feeds: IntCounterVec,
    feed_failures: IntCounterVec,
    processing_failures: IntCounterVec,
}

impl Inner {
    /// The values of the runner labels and of the (runner, system_id) labels.
    fn label_values<'a>(&'a self, labels: &'a RunnerLabels) -> ([&'a str; 3], [&'a str; 2]) {
        let runner = labels.runner.as_str();
        let system_id = self.system_id.as_str();
        (
            [runner, labels.runner_name.as_str(), system_id],
            [runner, system_id],
        )
    }
}

fn register<C: prometheus::core::Collector + Clone + 'static>(
    r: &Registry,
    c: C,
) -> Result<C, MetricsError> {
    r.register(Box::new(c.clone()))?;
    Ok(c)
}

/// Registers a labelled metric made by `new` (`IntCounterVec::new`, `IntGaugeVec::new`, …).
fn labelled<V: prometheus::core::Collector + Clone + 'static>(
    r: &Registry,
    new: impl FnOnce(Opts, &[&str]) -> prometheus::Result<V>,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<V, MetricsError> {
    register(r, new(Opts::new(name, help), labels)?)
}

fn histogram_vec(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: &[f64],
) -> Result<HistogramVec, MetricsError> {
    let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    register(r, HistogramVec::new(opts, labels)?)
}

impl Metrics {
    /// A registry with every metric, the process collector and `gitlab_runner_version_info`
    /// for `build`. `system_id` is the manager's system ID (`.runner_system_id`).
    pub fn new(system_id: &str, build: &BuildInfo) -> Result<Metrics, MetricsError> {
        let r = Registry::new();
        #[cfg(target_os = "linux")]
        r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;

        let version = labelled(
            &r,
            IntGaugeVec::new,
            "gitlab_runner_version_info",
            "Version of the running runner (this is drover, a gitlab-runner drop-in)",
            &[
                "name",
                "version",
                "revision",
                "branch",
                "go_version",
                "built_at",
                "os",
                "architecture",
            ],
        )?;
        version
            .with_label_values(&[
                &build.name,
                &build.version,
                &build.revision,
                &build.branch,
                &build.go_version,
                &build.built_at,
                &build.os,
                &build.architecture,
            ])
            .set(1);

        let jobs = Arc::new(JobsState::default());
        r.register(Box::new(JobsCollector::new(jobs.clone())?))?;

        let errors = labelled(
            &r,
            IntCounterVec::new,
            "gitlab_runner_errors_total",
            "Log lines written at warning level or above, by level",
            &["level"],
        )?;
        for level in ERROR_LEVELS {
            errors.with_label_values(&[level]);
        }
        let rc = ["runner", "system_id"];
        let inner = Inner {
            system_id: system_id.to_string(),
            autoscaling: AutoscalingMetrics::new(&r)?,
            concurrent: register(
                &r,
                IntGauge::new(
                    "gitlab_runner_concurrent",
                    "The global concurrent setting: how many jobs may run at once",
                )?,
            )?,
            limit: labelled(
                &r,
                IntGaugeVec::new,
                "gitlab_runner_limit",
                "The runner's limit setting: how many jobs it may run at once (0: no limit)",
                &RUNNER_LABELS,
            )?,
            jobs_total: labelled(
                &r,
                IntCounterVec::new,
                "gitlab_runner_jobs_total",
                "Jobs this runner accepted",
                &RUNNER_LABELS,
            )?,
            job_duration: histogram_vec(
                &r,
                "gitlab_runner_job_duration_seconds",
                "How long jobs ran, from acceptance to the end",
                &RUNNER_LABELS,
                &JOB_DURATION_BUCKETS,
            )?,
            queue_duration: histogram_vec(
                &r,
                "gitlab_runner_job_queue_duration_seconds",
                "How long jobs waited in GitLab's queue before this runner picked them up",
                &["runner", "runner_name", "system_id", "project_jobs_running"],
                &QUEUE_DURATION_BUCKETS,
            )?,
            queue_size: labelled(
                &r,
                IntGaugeVec::new,
                "gitlab_runner_job_queue_size",
                "The queue size GitLab reported with the last job picked up",
                &RUNNER_LABELS,
            )?,
            queue_depth: labelled(
                &r,
                IntGaugeVec::new,
                "gitlab_runner_job_queue_depth",
                "The queue depth GitLab reported with the last job picked up",
                &RUNNER_LABELS,
            )?,
            queuing_exceeded: labelled(
                &r,
                IntCounterVec::new,
                "gitlab_runner_acceptable_job_queuing_duration_exceeded_total",
                "Jobs whose time in the queue exceeded the configured acceptable duration",
                &RUNNER_LABELS,
            )?,
            stage_duration: histogram_vec(
                &r,
                "gitlab_runner_job_stage_duration_seconds",
                "How long each job stage ran (with FF_EXPORT_HIGH_CARDINALITY_METRICS)",
                &["runner", "runner_name", "system_id", "stage"],
                &QUEUE_DURATION_BUCKETS,
            )?,
            request_concurrency: labelled(
                &r,
                IntGaugeVec::new,
                "gitlab_runner_request_concurrency",
                "Job requests to GitLab in flight for this runner",
                &rc,
            )?,
            request_concurrency_exceeded: labelled(
                &r,
                IntCounterVec::new,
                "gitlab_runner_request_concurrency_exceeded_total",
                "Job request attempts refused because request_concurrency was reached",
                &rc,
            )?,
            request_concurrency_hard: labelled(
                &r,
                IntGaugeVec::new,
                "gitlab_runner_request_concurrency_hard_limit",
                "The configured request_concurrency",
                &rc,
            )?,
            request_concurrency_adaptive: labelled(
                &r,
                GaugeVec::new,
                "gitlab_runner_request_concurrency_adaptive_limit",
                "The adaptive request concurrency value before rounding",
                &rc,
            )?,
            request_concurrency_used: labelled(
                &r,
                IntGaugeVec::new,
                "gitlab_runner_request_concurrency_used_limit",
                "The request concurrency limit actually applied",
                &rc,
            )?,
            api_statuses: labelled(
                &r,
                IntCounterVec::new,
                "gitlab_runner_api_request_statuses_total",
                "Answers from GitLab's runner API, by endpoint, status and method",
                &["runner", "system_id", "endpoint", "status", "method"],
            )?,
            api_duration: histogram_vec(
                &r,
                "gitlab_runner_api_request_duration_seconds",
                "How long calls to GitLab's runner API took, by endpoint, status class and method",
                &["runner", "system_id", "endpoint", "status_class", "method"],
                &API_DURATION_BUCKETS,
            )?,
            api_retries: labelled(
                &r,
                IntCounterVec::new,
                "gitlab_runner_api_request_retries_total",
                "Calls to GitLab retried, by request path and method",
                &["path", "method"],
            )?,
            leftovers_removed: labelled(
                &r,
                IntCounterVec::new,
                "drover_leftovers_removed_total",
                "Containers, networks and volumes a previous drover left that were ended before a machine or the local Engine served a job, by kind",
                &["kind"],
            )?,
            errors,
            failed_jobs: labelled(
                &r,
                IntCounterVec::new,
                "gitlab_runner_failed_jobs_total",
                "Jobs that ended failed, by the failure reason sent to GitLab",
                &["runner", "runner_name", "system_id", "failure_reason"],
            )?,
            worker_slots: register(
                &r,
                IntGauge::new(
                    "gitlab_runner_worker_slots_number",
                    "Worker slots: how many jobs may be requested and run at once",
                )?,
            )?,
            slot_operations: labelled(
                &r,
                IntCounterVec::new,
                "gitlab_runner_worker_slot_operations_total",
                "Worker slots started and stopped",
                &["operation"],
            )?,
            feeds: labelled(
                &r,
                IntCounterVec::new,
                "gitlab_runner_worker_feeds_total",
                "Times the runner was handed to a worker",
                &RUNNER_LABELS,
            )?,
            feed_failures: labelled(
                &r,
                IntCounterVec::new,
                "gitlab_runner_worker_feed_failures_total",
                "Times the runner could not be handed to a worker",
                &RUNNER_LABELS,
            )?,
            processing_failures: labelled(
                &r,
                IntCounterVec::new,
                "gitlab_runner_worker_processing_failures_total",
                "Times a worker could not process the runner, by failure type",
                &["failure_type", "runner", "runner_name", "system_id"],
            )?,
            jobs,
            registry: r,
        };
        for op in [SlotOperation::Started, SlotOperation::Stopped] {
            inner.slot_operations.with_label_values(&[op.as_str()]);
        }
        Ok(Metrics {
            inner: Arc::new(inner),
        })
    }

    /// The manager's system ID, as the `system_id` label carries it.
    pub fn system_id(&self) -> &str {
        &self.inner.system_id
    }

    /// The registry, to gather from or to register more collectors in.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The whole registry in the Prometheus text exposition format ([`TEXT_CONTENT_TYPE`]).
    pub fn encode_text(&self) -> Result<Vec<u8>, MetricsError> {
        let families = self.inner.registry.gather();
        let mut out = Vec::with_capacity(16 * 1024);
        TextEncoder::new().encode(&families, &mut out)?;
        Ok(out)
    }

    /// `gitlab_runner_concurrent`: the `concurrent` setting (follow reloads).
    pub fn set_concurrent(&self, concurrent: i64) {
        self.inner.concurrent.set(concurrent);
    }

    /// `gitlab_runner_worker_slots_number`: the current number of worker slots.
    pub fn worker_slots(&self, slots: i64) {
        self.inner.worker_slots.set(slots);
    }

    /// `gitlab_runner_worker_slot_operations_total`: a worker started or stopped.
    pub fn worker_slot_operation(&self, op: SlotOperation) {
        self.inner
            .slot_operations
            .with_label_values(&[op.as_str()])
            .inc();
    }

    /// `gitlab_runner_api_request_retries_total{path,method}`: a call to `path` (numeric
    /// segments already `{id}`) ended after `attempts` attempts; as upstream, every attempt
    /// counts, the first one included.
    pub fn api_attempts(&self, path: &str, method: &str, attempts: u32) {
        self.inner
            .api_retries
            .with_label_values(&[path, &method.to_ascii_lowercase()])
            .inc_by(u64::from(attempts));
    }

    /// `drover_leftovers_removed_total{kind}`: one container, network or volume a previous
    /// drover left was ended.
    pub fn leftover_removed(&self, kind: &str) {
        self.inner
            .leftovers_removed
            .with_label_values(&[kind])
            .inc();
    }

    /// The docker+machine autoscaling metrics.
    pub fn autoscaling(&self) -> &AutoscalingMetrics {
        &self.inner.autoscaling
    }

    /// A `tracing` layer counting warning and error events in `gitlab_runner_errors_total`.
    /// Add it to the process's subscriber (`cli::logging::install_with`).
    pub fn errors_layer(&self) -> ErrorsLayer {
        ErrorsLayer::new(&self.inner.errors)
    }

    /// Counts a panic in `gitlab_runner_errors_total{level="panic"}`.
    pub fn count_panic(&self) {
        self.inner.errors.with_label_values(&["panic"]).inc();
    }

    /// Counts a fatal error in `gitlab_runner_errors_total{level="fatal"}`: one that ends the
    /// process.
    pub fn count_fatal(&self) {
        self.inner.errors.with_label_values(&["fatal"]).inc();
    }

    /// The running jobs, as `/debug/jobs/list` shows them, in start order.
    pub fn running_jobs(&self) -> Vec<JobListEntry> {
        self.inner.jobs.list()
    }

    /// The metric handles of one `[[runners]]` entry. Creates its always-present series with 0
    /// (jobs, feeds, failures, request concurrency) and makes the runner "seen" for
    /// `gitlab_runner_jobs`. Calling it again for the same labels returns the same series.
    pub fn runner(&self, labels: &RunnerLabels) -> RunnerMetrics {
        let i = &self.inner;
        let (l, rc) = i.label_values(labels);
        for f in ProcessingFailure::ALL {
            i.processing_failures
                .with_label_values(&[f.as_str(), l[0], l[1], l[2]]);
        }
        i.jobs.see_runner(labels, &i.system_id);
        RunnerMetrics {
            metrics: self.clone(),
            labels: Arc::new(labels.clone()),
            limit: i.limit.with_label_values(&l),
            jobs_total: i.jobs_total.with_label_values(&l),
            job_duration: i.job_duration.with_label_values(&l),
            queue_size: i.queue_size.with_label_values(&l),
            queue_depth: i.queue_depth.with_label_values(&l),
            queuing_exceeded: i.queuing_exceeded.with_label_values(&l),
            feeds: i.feeds.with_label_values(&l),
            feed_failures: i.feed_failures.with_label_values(&l),
            request_concurrency: i.request_concurrency.with_label_values(&rc),
            request_concurrency_exceeded: i.request_concurrency_exceeded.with_label_values(&rc),
            request_concurrency_hard: i.request_concurrency_hard.with_label_values(&rc),
            request_concurrency_adaptive: i.request_concurrency_adaptive.with_label_values(&rc),
            request_concurrency_used: i.request_concurrency_used.with_label_values(&rc),
        }
    }

    /// Removes every series of a runner that left the config (a reload), so dashboards stop
    /// showing it. Its running jobs, if any, stay listed until they finish.
    pub fn forget_runner(&self, labels: &RunnerLabels) {
        let i = &self.inner;
        let (l, rc) = i.label_values(labels);
        for v in [&i.limit, &i.queue_size, &i.queue_depth] {
            let _ = v.remove_label_values(&l);
        }
        for v in [
            &i.jobs_total,
            &i.queuing_exceeded,
            &i.feeds,
            &i.feed_failures,
        ] {
            let _ = v.remove_label_values(&l);
        }
        let _ = i.job_duration.remove_label_values(&l);
        for f in ProcessingFailure::ALL {
            let _ = i
                .processing_failures
                .remove_label_values(&[f.as_str(), l[0], l[1], l[2]]);
        }
        for v in [
            &i.request_concurrency,
            &i.request_concurrency_hard,
            &i.request_concurrency_used,
        ] {
            let _ = v.remove_label_values(&rc);
        }
        let _ = i.request_concurrency_exceeded.remove_label_values(&rc);
        let _ = i.request_concurrency_adaptive.remove_label_values(&rc);
        i.jobs.forget_runner(labels);
    }
}

/// The metric handles of one runner. Cheap to clone.
#[derive(Clone)]
pub struct RunnerMetrics {
    metrics: Metrics,
    labels: Arc<RunnerLabels>,
    limit: IntGauge,
    jobs_total: IntCounter,
    job_duration: prometheus::Histogram,
    queue_size: IntGauge,
    queue_depth: IntGauge,
    queuing_exceeded: IntCounter,
    feeds: IntCounter,
    feed_failures: IntCounter,
    request_concurrency: IntGauge,
    request_concurrency_exceeded: IntCounter,
    request_concurrency_hard: IntGauge,
    request_concurrency_adaptive: prometheus::Gauge,
    request_concurrency_used: IntGauge,
}

impl std::fmt::Debug for RunnerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerMetrics")
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

impl RunnerMetrics {
    /// The labels these handles carry.
    pub fn labels(&self) -> &RunnerLabels {
        &self.labels
    }

    fn label_values(&self) -> [&str; 3] {
        self.metrics.inner.label_values(&self.labels).0
    }

    /// `gitlab_runner_limit`: the runner's `limit` (follow reloads).
    pub fn set_limit(&self, limit: i64) {
        self.limit.set(limit);
    }

    /// `gitlab_runner_worker_feeds_total`: the feeder handed the runner to a worker.
    pub fn feed(&self) {
        self.feeds.inc();
    }

    /// `gitlab_runner_worker_feed_failures_total`: the feeder could not hand it over.
    pub fn feed_failure(&self) {
        self.feed_failures.inc();
    }

    /// `gitlab_runner_worker_processing_failures_total`.
    pub fn processing_failure(&self, failure: ProcessingFailure) {
        let [a, b, c] = self.label_values();
        self.metrics
            .inner
            .processing_failures
            .with_label_values(&[failure.as_str(), a, b, c])
            .inc();
    }

    /// `gitlab_runner_request_concurrency`: job requests in flight now.
    pub fn request_concurrency(&self, in_flight: i64) {
        self.request_concurrency.set(in_flight);
    }

    /// `gitlab_runner_request_concurrency_exceeded_total`: a request attempt was refused at
    /// the limit.
    pub fn request_concurrency_exceeded(&self) {
        self.request_concurrency_exceeded.inc();
    }

    /// The three request-concurrency limits: the configured `hard` one, the `adaptive` value
    /// and the limit actually `used` (gitlab-api.md §7.2).
    pub fn request_concurrency_limits(&self, hard: i64, adaptive: f64, used: i64) {
        self.request_concurrency_hard.set(hard);
        self.request_concurrency_adaptive.set(adaptive);
        self.request_concurrency_used.set(used);
    }

    /// `gitlab_runner_api_request_statuses_total` and `…_duration_seconds`: GitLab answered a
    /// call to `endpoint` (`request_job`, `update_job`, `patch_trace`, `reset_token`) with
    /// `status`. Calls that never reached the server are not to be reported.
    pub fn api_request(&self, endpoint: &str, method: &str, status: u16, duration: Duration) {
        let i = &self.metrics.inner;
        let method = method.to_ascii_lowercase();
        let status_text = status.to_string();
        let class = format!("{}xx", status / 100);
        let runner = self.labels.runner.as_str();
        i.api_statuses
            .with_label_values(&[runner, &i.system_id, endpoint, &status_text, &method])
            .inc();
        i.api_duration
            .with_label_values(&[runner, &i.system_id, endpoint, &class, &method])
            .observe(duration.as_secs_f64());
    }

    /// A job was picked up: counts it in `gitlab_runner_jobs_total`, observes its time in the
    /// queue, sets the queue gauges, and adds it to the running set (`gitlab_runner_jobs`,
    /// `/debug/jobs/list`) until the returned handle is finished or dropped.
    pub fn job_started(&self, pickup: JobPickup<'_>) -> RunningJob {
        let [a, b, c] = self.label_values();
        self.metrics
            .inner
            .queue_duration
            .with_label_values(&[a, b, c, pickup.project_jobs_running])
            .observe(pickup.time_in_queue_seconds.max(0.0));
        if let Some(size) = pickup.queue_size {
            self.queue_size.set(size);
        }
        if let Some(depth) = pickup.queue_depth {
            self.queue_depth.set(depth);
        }
        self.jobs_total.inc();
        RunningJob::start(self.clone(), self.metrics.inner.jobs.clone(), pickup.url)
    }

    /// `gitlab_runner_acceptable_job_queuing_duration_exceeded_total`: a picked-up job waited
    /// longer than the runner's `[runners.monitoring]` threshold.
    pub fn acceptable_queuing_duration_exceeded(&self) {
        self.queuing_exceeded.inc();
    }

    /// `gitlab_runner_job_stage_duration_seconds` (only with
    /// `FF_EXPORT_HIGH_CARDINALITY_METRICS`: the caller decides).
    pub fn stage_duration(&self, stage: &str, duration: Duration) {
        let [a, b, c] = self.label_values();
        self.metrics
            .inner
            .stage_duration
            .with_label_values(&[a, b, c, stage])
            .observe(duration.as_secs_f64());
    }

    fn job_left(&self, duration: Duration, failure_reason: Option<&str>) {
        self.job_duration.observe(duration.as_secs_f64());
        if let Some(reason) = failure_reason {
            let [a, b, c] = self.label_values();
            self.metrics
                .inner
                .failed_jobs
                .with_label_values(&[a, b, c, reason])
                .inc();
        }
    }
}
