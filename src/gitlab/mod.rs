//! GitLab I/O: the runner ⇄ GitLab job API (`/work/shared/spec/gitlab-api.md` §1–§6).
//!
//! The job payload's wire types live in [`crate::job`], the one job model that both this
//! module (which receives it) and the executor (which runs it) use; it is re-exported here as
//! `gitlab::job` for callers that think of it as GitLab's wire format. This module knows
//! nothing about machines, the engine or the executor: it takes and returns wire-level values
//! (failure reasons as their wire strings, exit codes, byte slices).
//!
//! # Public API
//!
//! * [`Client`] (built from [`ClientSettings`], e.g. [`ClientSettings::for_runner`]): one per
//!   GitLab URL and TLS setting, shared behind an `Arc`. It adds the headers of every call, the
//!   HTTP-level retries (408/429/5xx, `RateLimit-ResetTime`, `Retry-After`, backoff), and keeps
//!   the last `X-GitLab-Last-Update` to echo. Its endpoint methods:
//!   * [`Client::request_job`] → [`JobRequestResult`] (job, none, forbidden, failed; health and
//!     push-back for the adaptive `request_concurrency`);
//!   * [`Client::update_job`] and [`Client::patch_trace`] → [`UpdateResult`] (low level; the
//!     manager normally uses [`JobTrace`]);
//!   * [`Client::register_runner`], [`Client::verify_runner`], [`Client::unregister_runner`],
//!     [`Client::unregister_manager`], [`Client::reset_token`], [`Client::reset_token_with_pat`].
//! * [`Info`]: the `info` object (features, executor, shell, labels); [`Info::for_runner`].
//! * [`system_id::load_or_create`]: the manager's ID from `.runner_system_id` beside the config.
//! * [`JobTrace`]: the per-job object. [`JobTrace::start`] sends the `running` ack and starts
//!   the incremental PATCH/keep-alive task; [`JobTrace::writer`] gives an `io::Write` that never
//!   blocks on the network; [`JobTrace::graceful_cancel`] and [`JobTrace::abort`] are the two
//!   cancellation tokens; [`JobTrace::finish`] flushes and runs the final-update loop.
//! * [`RequestObserver`]: a hook for the `gitlab_runner_api_request_*` metrics.
//! * [`failure::negotiate`]: failure reasons against the job's supported list.
//!
//! Logs carry only the short token ([`crate::engine::naming::short_token`]), never a token.

pub use crate::job;

pub mod ca_chain;
pub mod client;
pub mod error;
pub mod failure;
pub mod info;
pub mod jobs;
pub mod observer;
pub mod runners;
pub mod system_id;
pub mod token;
pub mod trace;
/// What drover reports about itself (a crate-level module; kept here under its old path).
pub use crate::version;

pub use client::{retry_wait, Client, ClientSettings, RetryPolicy};
pub use error::GitlabError;
pub use info::{Features, Info};
pub use jobs::{
    JobCredentials, JobRequest, JobRequestOutcome, JobRequestResult, JobState, JobUpdate,
    SessionInfo, TraceOutput, UpdateResult, UpdateState,
};
pub use observer::{normalized_path, Endpoint, NoopObserver, RequestObserver};
pub use runners::{RegisterParams, RunnerCredentials};
pub use trace::{
    FinalState, FinishReport, JobOutcome, JobTrace, LogBuffer, Pickup, TraceOptions, TraceWriter,
};
