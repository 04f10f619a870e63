//! The manager's view of GitLab: where jobs come from and where their traces and results go.
//!
//! The run loop only needs these few facts, so it is written against two small traits; the
//! GitLab API client implements them in [`super::gitlab_link`]. Tests of the run loop's gates
//! may implement them too (GitLab is one of the two things drover's tests may simulate).

use std::future::Future;

use tokio_util::sync::CancellationToken;

use crate::executor::{FailureReason, JobControl, TraceSink};
use crate::job::JobPayload;

/// What one job request came back with.
pub enum Requested<J> {
    /// A job to run, and the link to report on it.
    Job(Box<JobPayload>, J),
    /// No job right now (204, or the long poll ended empty).
    NoJob,
    /// No job, and the server pushed back (429 or 5xx after retries): the adaptive request
    /// concurrency halves.
    PushedBack,
    /// The request failed in a way that counts against the runner's health (403, or a client
    /// that cannot be built): spec §7.4.
    Unhealthy(String),
    /// Any other failure (network, 5xx…): logged; resets the health count as upstream does.
    Failed(String),
}

/// How a job ended, as sent to GitLab in the final update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobOutcome {
    /// `success`.
    Success,
    /// `failed` with a reason already mapped against the job's `failure_reasons`.
    Failed {
        /// The reason.
        reason: FailureReason,
        /// The script's exit code, when a script failed.
        exit_code: Option<i32>,
    },
}

/// The answer to the `running` ack (spec §6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// Go on (also when the ack failed for any reason other than an abort).
    Proceed,
    /// GitLab said the job is gone (403/404, `canceled`/`failed`): drop it silently, no final
    /// update.
    Drop,
    /// `Job-Status: canceling` at the ack: fail at once with the raw `job_canceled`.
    Canceling,
}

/// GitLab as the run loop sees it. One value serves every runner of the config.
pub trait JobSource: Send + Sync + 'static {
    /// The per-job link.
    type Link: JobLink;
    /// Asks GitLab for a job for the runner with this token (`POST /jobs/request`); gives up
    /// with [`Requested::NoJob`] when `cancel` fires (SIGQUIT cancels in-flight requests).
    fn request_job(
        &self,
        runner: &crate::config::model::RunnerConfig,
        cancel: &CancellationToken,
    ) -> impl Future<Output = Requested<Self::Link>> + Send;
}

/// One running job's connection to GitLab: ack, trace, cancellation and the final update.
pub trait JobLink: Send + 'static {
    /// The sink the executor writes the masked trace into (fed to the incremental trace).
    type Sink: TraceSink + Send + 'static;
    /// Sends the `running` ack and starts the watch loop (incremental trace, keep-alive).
    fn start(&mut self) -> impl Future<Output = Ack> + Send;
    /// The trace sink for the executor.
    fn sink(&mut self) -> Self::Sink;
    /// Tokens GitLab's `Job-Status` cancels: `cancel` on `canceling`, `abort` on
    /// `canceled`/`failed`/403.
    fn control(&self) -> JobControl;
    /// Flushes the trace and sends the final update (spec §6.4).
    fn finish(self, outcome: JobOutcome) -> impl Future<Output = ()> + Send;
    /// The TLS files of the connection the job came through (`CI_SERVER_TLS_*`).
    fn tls(&self) -> crate::executor::settings::TlsData {
        crate::executor::settings::TlsData::default()
    }
}
