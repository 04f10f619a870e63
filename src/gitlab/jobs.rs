//! The job endpoints: request a job (§3.5), update it (§3.6), append to its log (§3.7), and
//! the meaning upstream gives to each answer.

use std::time::Duration;

use bytes::Bytes;
use reqwest::Method;
use serde::Serialize;

use super::client::{Body, Call, Client, Reply};
use super::error::GitlabError;
use super::info::Info;
use super::observer::Endpoint;
use crate::engine::naming::short_token;
use crate::job::JobPayload;

/// The longest update interval GitLab may ask for (15 min).
pub const MAX_UPDATE_INTERVAL: Duration = Duration::from_secs(15 * 60);

/// The `session` object of a job request (interactive web terminal), when a session server
/// is configured.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SessionInfo {
    /// Where GitLab connects.
    pub url: String,
    /// The server's certificate (PEM).
    pub certificate: String,
    /// The token GitLab must send.
    pub authorization: String,
}

/// What a job request carries besides the runner token.
#[derive(Debug, Clone)]
pub struct JobRequest<'a> {
    /// The runner authentication token.
    pub token: &'a str,
    /// The runner's info (features, executor, …).
    pub info: &'a Info,
    /// The manager's system ID.
    pub system_id: &'a str,
    /// The session, when configured.
    pub session: Option<&'a SessionInfo>,
    /// The runner's `name`, for the log lines upstream writes with `runner_name`.
    pub runner_name: &'a str,
}

#[derive(Serialize)]
struct JobRequestBody<'a> {
    info: &'a Info,
    token: &'a str,
    system_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_update: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<&'a SessionInfo>,
}

/// What a job request ended in (spec §3.5).
#[derive(Debug)]
pub enum JobRequestOutcome {
    /// 201: a job. The payload was read leniently.
    Job(Box<JobPayload>),
    /// 204: nothing to do (also a long poll that timed out).
    NoJob,
    /// 403: the token is unknown or invalid; counts toward unhealthiness.
    Forbidden,
    /// Anything else that is not a job: 409 races, 422, 429/5xx after retries, a transport
    /// error, a 201 whose body cannot be read.
    Failed(GitlabError),
    /// The client could not make the call at all (−100); counts toward unhealthiness.
    ClientError(GitlabError),
}

/// A job request's outcome plus what the adaptive request concurrency needs.
#[derive(Debug)]
pub struct JobRequestResult {
    /// What happened.
    pub outcome: JobRequestOutcome,
    /// The server pushed back with a retried 429/5xx/408 (adaptive concurrency halves).
    pub pushed_back: bool,
    /// The HTTP status, or −1/−100.
    pub status: i32,
}

impl JobRequestResult {
    /// Whether this result counts as healthy (§7.4): everything except 403 and client errors.
    pub fn is_healthy(&self) -> bool {
        !matches!(
            self.outcome,
            JobRequestOutcome::Forbidden | JobRequestOutcome::ClientError(_)
        )
    }
}

/// A job's state as sent in `PUT /jobs/:id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Ack and keep-alive.
    Running,
    /// Final: passed.
    Success,
    /// Final: failed.
    Failed,
}

/// `output` of a job update: the CRC-32 and size of the log as buffered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TraceOutput {
    /// `crc32:%08x`, omitted when empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub checksum: String,
    /// Bytes buffered, omitted when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub bytesize: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_i32(n: &i32) -> bool {
    *n == 0
}

/// A job update (spec §3.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobUpdate {
    /// The state to report.
    pub state: JobState,
    /// The wire failure reason, when failed (already negotiated).
    pub failure_reason: Option<String>,
    /// The script's exit code (omitted when 0).
    pub exit_code: i32,
    /// Checksum and size of the log.
    pub output: TraceOutput,
}

#[derive(Serialize)]
struct JobUpdateBody<'a> {
    info: &'a Info,
    token: &'a str,
    state: JobState,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure_reason: Option<&'a str>,
    #[serde(skip_serializing_if = "String::is_empty")]
    checksum: &'a String,
    output: &'a TraceOutput,
    #[serde(skip_serializing_if = "is_zero_i32")]
    exit_code: i32,
}

/// What GitLab said about the job in a PUT or PATCH answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateState {
    /// 200 (PUT) / 202 (PATCH): done.
    Succeeded,
    /// PUT 202: live log chunks are still being migrated; resend after the interval.
    Accepted,
    /// PUT 412: resend the whole log from offset 0, then the update.
    TraceValidationFailed,
    /// PATCH 416: the server holds a different length; continue from [`UpdateResult::offset`].
    RangeMismatch,
    /// `Job-Status: canceled|failed`, 403, PUT 404 or a client error: stop everything.
    Abort,
    /// PATCH 404: ignored during the job; stops the final flush.
    NotFound,
    /// Anything else: retry later.
    Failed,
}

/// A PUT or PATCH result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateResult {
    /// The classification.
    pub state: UpdateState,
    /// `Job-Status: canceling` was seen: graceful cancel requested.
    pub cancel_requested: bool,
    /// `X-GitLab-Trace-Update-Interval`, when valid (> 0), capped at 15 min.
    pub update_interval: Option<Duration>,
    /// PATCH: where the next append starts. On 202 the end of the sent bytes (upstream ignores
    /// the `Range` of a 202); on 416 (and an abort) the server's stored length from its
    /// `Range: 0-<n>`, when given.
    pub offset: Option<u64>,
    /// The HTTP status, or −1/−100 (0: an empty patch, not sent).
    pub status: i32,
}

impl UpdateResult {
    fn from_error(e: &GitlabError) -> UpdateResult {
        let status = e.status();
        UpdateResult {
            state: if status == -100 {
                UpdateState::Abort
            } else {
                UpdateState::Failed
            },
            cancel_requested: false,
            update_interval: None,
            offset: None,
            status,
        }
    }
}

/// Identifies one job for the job-scoped endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobCredentials {
    /// The job ID.
    pub id: i64,
    /// The job token (JOB-TOKEN).
    pub token: String,
}

impl JobCredentials {
    /// The credentials of a picked-up job.
    pub fn of(job: &JobPayload) -> JobCredentials {
        JobCredentials {
            id: job.id,
            token: job.token.clone(),
        }
    }
}

/// Parses `X-GitLab-Trace-Update-Interval`: ignored when ≤ 0 or unreadable; capped at 15 min.
pub fn parse_update_interval(value: Option<&str>) -> Option<Duration> {
    let secs: i64 = value?.trim().parse().ok()?;
    (secs > 0).then(|| Duration::from_secs(secs.unsigned_abs()).min(MAX_UPDATE_INTERVAL))
}

/// Parses a `Range: 0-<n>` header into `n` (the stored length).
pub fn parse_range_end(value: Option<&str>) -> Option<u64> {
    let text = value?.trim();
    let text = text.strip_prefix("bytes=").unwrap_or(text);
    let (_, end) = text.split_once('-')?;
    end.trim().parse().ok()
}

fn job_status(reply: &Reply) -> (bool, bool) {
    let status = reply.header("job-status").unwrap_or("").trim();
    (
        matches!(status, "canceled" | "failed"),
        status == "canceling",
    )
}

fn json_body<T: Serialize>(value: &T) -> Result<Bytes, GitlabError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| GitlabError::Client(format!("cannot encode the request: {e}")))
}

impl Client {
    /// `POST /jobs/request`: asks for a job, echoing the last `X-GitLab-Last-Update` seen. A
    /// long poll may hold this call for up to about 50 s.
    pub async fn request_job(&self, req: &JobRequest<'_>) -> JobRequestResult {
        let endpoint = Endpoint::RequestJob;
        let body = JobRequestBody {
            info: req.info,
            token: req.token,
            system_id: req.system_id,
            last_update: self.last_update(),
            session: req.session,
        };
        let body = match json_body(&body) {
            Ok(b) => b,
            Err(e) => {
                return JobRequestResult {
                    status: e.status(),
                    outcome: JobRequestOutcome::ClientError(e),
                    pushed_back: false,
                }
            }
        };
        let call = Call {
            endpoint,
            method: Method::POST,
            path: "jobs/request".into(),
            headers: vec![("RUNNER-TOKEN", req.token.to_owned())],
            body: Body::Json(body),
            accept_json: true,
        };
        let runner = short_token(req.token);
        let reply = match self.call(&call).await {
            Ok(r) => r,
            Err(e) => {
                let status = e.status();
                let outcome = if status == -100 {
                    tracing::error!(runner = %runner, error = %e, "Checking for jobs... client error");
                    JobRequestOutcome::ClientError(e)
                } else {
                    tracing::warn!(runner = %runner, error = %e, "Checking for jobs... failed");
                    JobRequestOutcome::Failed(e)
                };
                return JobRequestResult {
                    outcome,
                    pushed_back: false,
                    status,
                };
            }
        };
        let pushed_back = reply.pushed_back;
        let status = i32::from(reply.status);
        let outcome = match reply.status {
            201 => {
                if !reply.is_json() {
                    JobRequestOutcome::Failed(GitlabError::Decode {
                        endpoint: endpoint.as_str(),
                        status: 201,
                        message: "the job is not declared as application/json".into(),
                    })
                } else {
                    match std::str::from_utf8(&reply.body)
                        .map_err(|e| e.to_string())
                        .and_then(|t| JobPayload::from_json(t).map_err(|e| e.to_string()))
                    {
                        Ok(mut job) => {
                            job.request_correlation_id = reply.correlation_id().to_owned();
                            tracing::info!(correlation_id = reply.correlation_id(), job = job.id, repo_url = %crate::executor::paths::url_without_credentials(&job.git_info.repo_url), runner = %runner, runner_name = req.runner_name, "Checking for jobs... received");
                            JobRequestOutcome::Job(Box::new(job))
                        }
                        Err(message) => {
                            tracing::warn!(runner = %runner, error = %message, "Checking for jobs... failed: the job cannot be read");
                            JobRequestOutcome::Failed(GitlabError::Decode {
                                endpoint: endpoint.as_str(),
                                status: 201,
                                message,
                            })
                        }
                    }
                }
            }
            204 => {
                tracing::debug!(runner = %runner, status = "204 No Content", "Checking for jobs...no content");
                JobRequestOutcome::NoJob
            }
            403 => {
                tracing::error!(runner = %runner, status = 403, "Checking for jobs... forbidden");
                JobRequestOutcome::Forbidden
            }
            _ => {
                let e = reply.error(endpoint);
                if reply.status == 503 {
                    tracing::warn!(runner = %runner, "Checking for jobs... GitLab instance currently unavailable");
                } else {
                    tracing::warn!(runner = %runner, error = %e, "Checking for jobs... failed");
                }
                JobRequestOutcome::Failed(e)
            }
        };
        JobRequestResult {
            outcome,
            pushed_back,
            status,
        }
    }

    /// `PUT /jobs/:id`, classified as upstream does (§3.6).
    pub async fn update_job(
        &self,
        job: &JobCredentials,
        info: &Info,
        update: &JobUpdate,
    ) -> UpdateResult {
        let body = JobUpdateBody {
            info,
            token: &job.token,
            state: update.state,
            failure_reason: update.failure_reason.as_deref().filter(|r| !r.is_empty()),
            checksum: &update.output.checksum,
            output: &update.output,
            exit_code: update.exit_code,
        };
        let body = match json_body(&body) {
            Ok(b) => b,
            Err(e) => return UpdateResult::from_error(&e),
        };
        let call = Call {
            endpoint: Endpoint::UpdateJob,
            method: Method::PUT,
            path: format!("jobs/{}", job.id),
            headers: vec![("JOB-TOKEN", job.token.clone())],
            body: Body::Json(body),
            accept_json: false,
        };
        tracing::info!(
            bytesize = update.output.bytesize,
            checksum = %update.output.checksum,
            job = job.id,
            "Updating job..."
        );
        let reply = match self.call(&call).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(job = job.id, error = %e, "Submitting job to coordinator... failed");
                return UpdateResult::from_error(&e);
            }
        };
        let (abort, canceling) = job_status(&reply);
        let state = if abort || reply.status == 403 {
            UpdateState::Abort
        } else {
            match reply.status {
                200 => UpdateState::Succeeded,
                202 => UpdateState::Accepted,
                412 => UpdateState::TraceValidationFailed,
                404 => UpdateState::Abort,
                _ => UpdateState::Failed,
            }
        };
        match (state, reply.status) {
            (UpdateState::Succeeded, _) => tracing::info!(
                code = reply.status,
                job = job.id,
                "Submitting job to coordinator...ok"
            ),
            (UpdateState::Accepted, _) => tracing::info!(
                code = reply.status,
                job = job.id,
                "Submitting job to coordinator...accepted, but not yet completed"
            ),
            (UpdateState::TraceValidationFailed, _) => tracing::info!(
                code = reply.status,
                job = job.id,
                "Submitting job to coordinator...trace validation failed"
            ),
            (_, 403) => tracing::error!(
                code = reply.status,
                job = job.id,
                "Submitting job to coordinator... forbidden"
            ),
            (_, 404) => tracing::warn!(
                code = reply.status,
                job = job.id,
                "Submitting job to coordinator... not found"
            ),
            (UpdateState::Abort, _) => tracing::warn!(
                code = reply.status,
                job = job.id,
                "Submitting job to coordinator... job failed"
            ),
            _ => tracing::warn!(
                code = reply.status,
                job = job.id,
                "Submitting job to coordinator... failed"
            ),
        }
        UpdateResult {
            state,
            cancel_requested: canceling,
            update_interval: parse_update_interval(reply.header("x-gitlab-trace-update-interval")),
            offset: None,
            status: i32::from(reply.status),
        }
    }

    /// `PATCH /jobs/:id/trace`: appends `bytes` at `offset` (at most 1 MiB). An empty patch
    /// is not sent and succeeds at `offset` (status 0), as upstream skips it.
    pub async fn patch_trace(
        &self,
        job: &JobCredentials,
        offset: u64,
        bytes: Bytes,
        debug_trace: bool,
    ) -> UpdateResult {
        if bytes.is_empty() {
            tracing::debug!(
                job = job.id,
                "Appending trace to coordinator...skipped due to empty patch"
            );
            return UpdateResult {
                state: UpdateState::Succeeded,
                cancel_requested: false,
                update_interval: None,
                offset: Some(offset),
                status: 0,
            };
        }
        let len = bytes.len() as u64;
        let end = offset + len.saturating_sub(1);
        let call = Call {
            endpoint: Endpoint::PatchTrace,
            method: Method::PATCH,
            path: format!("jobs/{}/trace?debug_trace={debug_trace}", job.id),
            headers: vec![
                ("JOB-TOKEN", job.token.clone()),
                ("Content-Range", format!("{offset}-{end}")),
            ],
            body: Body::Raw("text/plain", bytes),
            accept_json: false,
        };
        let reply = match self.call(&call).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(job = job.id, error = %e, "Appending trace to coordinator... failed");
                return UpdateResult::from_error(&e);
            }
        };
        let (abort, canceling) = job_status(&reply);
        let range_end = parse_range_end(reply.header("range"));
        let (state, offset) = if abort || reply.status == 403 {
            (UpdateState::Abort, range_end)
        } else {
            match reply.status {
                // As upstream, a 202 advances by what was sent, whatever its `Range` says: a
                // server answering `Range: 0-0` to every append cannot hold the log in a
                // resend loop. A length that really differs comes back as 416 next time.
                202 => (UpdateState::Succeeded, Some(offset + len)),
                416 => (UpdateState::RangeMismatch, range_end),
                404 => (UpdateState::NotFound, None),
                _ => (UpdateState::Failed, None),
            }
        };
        let state = if state == UpdateState::RangeMismatch && offset.is_none() {
            // A 416 without a readable Range cannot be recovered from here; retry later.
            UpdateState::Failed
        } else {
            state
        };
        let sent = format!("{}-{end}", end + 1 - len);
        match state {
            UpdateState::Succeeded => {
                tracing::info!(code = reply.status, job = job.id, "sent-log" = %sent, "Appending trace to coordinator...ok")
            }
            UpdateState::RangeMismatch => {
                tracing::warn!(code = reply.status, job = job.id, "sent-log" = %sent, "Appending trace to coordinator... range mismatch")
            }
            UpdateState::NotFound => {
                tracing::warn!(code = reply.status, job = job.id, "sent-log" = %sent, "Appending trace to coordinator... not-found")
            }
            UpdateState::Abort => {
                tracing::warn!(code = reply.status, job = job.id, "sent-log" = %sent, "Appending trace to coordinator... job failed")
            }
            _ => {
                tracing::warn!(code = reply.status, job = job.id, "sent-log" = %sent, "Appending trace to coordinator... failed")
            }
        }
        UpdateResult {
            state,
            cancel_requested: canceling,
            update_interval: parse_update_interval(reply.header("x-gitlab-trace-update-interval")),
            offset,
            status: i32::from(reply.status),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_intervals() {
        assert_eq!(
            parse_update_interval(Some("60")),
            Some(Duration::from_secs(60))
        );
        assert_eq!(parse_update_interval(Some("0")), None);
        assert_eq!(parse_update_interval(Some("-3")), None);
        assert_eq!(parse_update_interval(Some("x")), None);
        assert_eq!(parse_update_interval(None), None);
        assert_eq!(
            parse_update_interval(Some("100000")),
            Some(MAX_UPDATE_INTERVAL)
        );
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range_end(Some("0-17")), Some(17));
        assert_eq!(parse_range_end(Some("bytes=0-5")), Some(5));
        assert_eq!(parse_range_end(Some("junk")), None);
    }

    #[test]
    fn update_body_shape() {
        let info = Info::registration();
        let out = TraceOutput::default();
        let ack = JobUpdateBody {
            info: &info,
            token: "t",
            state: JobState::Running,
            failure_reason: None,
            checksum: &out.checksum,
            output: &out,
            exit_code: 0,
        };
        let v = serde_json::to_value(&ack).unwrap();
        assert_eq!(v["output"], serde_json::json!({}));
        assert_eq!(v["state"], "running");
        assert!(v.get("exit_code").is_none() && v.get("checksum").is_none());
        let out = TraceOutput {
            checksum: "crc32:0000abcd".into(),
            bytesize: 5,
        };
        let fin = JobUpdateBody {
            failure_reason: Some("script_failure"),
            checksum: &out.checksum,
            output: &out,
            exit_code: 2,
            state: JobState::Failed,
            ..ack
        };
        let v = serde_json::to_value(&fin).unwrap();
        assert_eq!(v["checksum"], "crc32:0000abcd");
        assert_eq!(v["output"]["bytesize"], 5);
        assert_eq!(v["exit_code"], 2);
        assert_eq!(v["failure_reason"], "script_failure");
    }
}
