//! A hook for metrics: every call to GitLab and every HTTP-level retry is reported to a
//! [`RequestObserver`], so the manager can feed `gitlab_runner_api_request_*` without this module
//! knowing about Prometheus.

use std::time::Duration;

/// The GitLab endpoints drover calls, named as upstream's `endpoint` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST /jobs/request`.
    RequestJob,
    /// `PUT /jobs/:id`.
    UpdateJob,
    /// `PATCH /jobs/:id/trace`.
    PatchTrace,
    /// `POST /runners` (legacy registration).
    RegisterRunner,
    /// `POST /runners/verify`.
    VerifyRunner,
    /// `DELETE /runners`.
    UnregisterRunner,
    /// `DELETE /runners/managers`.
    UnregisterManager,
    /// `POST /runners/reset_authentication_token` and the by-ID form.
    ResetToken,
}

impl Endpoint {
    /// The metric label value (`request_job`, `update_job`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::RequestJob => "request_job",
            Endpoint::UpdateJob => "update_job",
            Endpoint::PatchTrace => "patch_trace",
            Endpoint::RegisterRunner => "register_runner",
            Endpoint::VerifyRunner => "verify_runner",
            Endpoint::UnregisterRunner => "unregister_runner",
            Endpoint::UnregisterManager => "unregister_runner_manager",
            Endpoint::ResetToken => "reset_token",
        }
    }

    /// Whether upstream labels this endpoint in `gitlab_runner_api_request_*` (only job request,
    /// update, trace and token reset are).
    pub fn is_labelled_upstream(self) -> bool {
        matches!(
            self,
            Endpoint::RequestJob
                | Endpoint::UpdateJob
                | Endpoint::PatchTrace
                | Endpoint::ResetToken
        )
    }
}

/// Receives one report per HTTP response and per retry. Implementations must be cheap and must
/// not block: they run on the request path. Both methods default to doing nothing.
pub trait RequestObserver: Send + Sync {
    /// A response arrived: `method` in lower case (`post`), `status` the HTTP status. Calls that
    /// never reached the server are not reported, as upstream does not count them.
    fn request(&self, endpoint: Endpoint, method: &str, status: u16, duration: Duration) {
        let _ = (endpoint, method, status, duration);
    }

    /// A call ended after `attempts` HTTP attempts (1 when nothing was retried, also when the
    /// connection failed), for the request `path` with numeric segments as `{id}` (see
    /// [`normalized_path`]) and `method` in lower case; upstream's retries counter adds them.
    fn attempts(&self, path: &str, method: &str, attempts: u32) {
        let _ = (path, method, attempts);
    }
}

/// A URL path with every segment that is a whole (64-bit) number written `{id}`, as upstream
/// labels its retries counter: `/api/v4/jobs/123/trace` is `/api/v4/jobs/{id}/trace`, so the
/// series do not grow with job IDs.
pub fn normalized_path(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            if !segment.is_empty() && segment.parse::<i64>().is_ok() {
                "{id}"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The observer that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopObserver;

impl RequestObserver for NoopObserver {}
