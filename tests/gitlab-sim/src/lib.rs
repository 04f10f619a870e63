//! A GitLab simulator for drover's tests: the runner-facing job API of
//! `shared/spec/gitlab-api.md` §3 with the behaviour §9 lists, served over HTTP (or HTTPS) on
//! loopback, plus an inspection API (`/_sim/…` and the [`Sim`] methods) for assertions.
//!
//! What it does:
//! * runners: `glrt-` authentication tokens ([`Sim::add_runner`]), legacy registration tokens
//!   ([`Sim::add_registration_token`]), managers keyed by (token, system_id) created on first
//!   contact with their advertised features, paused runners (204), register / verify /
//!   unregister (runner and manager) / reset-token (with the token or a PAT);
//! * a FIFO job queue with a per-runner `X-GitLab-Last-Update` version, optional Workhorse
//!   long polling, the two-phase `running` ack, realistic payloads ([`JobSpec`]);
//! * trace assembly with exact appends only (416 with `Range` otherwise), `Range` and
//!   `Job-Status` on every reply, a size limit (403, `trace_size_exceeded`), the update
//!   interval header, 202 "live chunks pending" final updates, checksum/bytesize checks;
//! * cancellation (`canceling` for runners that advertise `cancel_gracefully`, else
//!   `canceled`), 403 once a job is over;
//! * artifacts upload (query or multipart parameters, 413 over the limit) and download (200,
//!   or 302 to a second path for `direct_download=true`), authorised by the job's token;
//! * git repositories over dumb HTTP for `repo_url` ([`Sim::create_repo`]);
//! * faults on demand ([`Fault`]): statuses (5xx, 409, 412, 416, 429 with `Retry-After`),
//!   dropped connections (before or after the request took effect), slow answers.

mod jobs;
mod server;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Notify;

pub use jobs::{JobSpec, RAILS_FAILURE_REASONS};

/// A job's state on the simulated GitLab.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Queued, not handed out.
    Pending,
    /// Handed out to a runner that advertised `two_phase_job_commit`, awaiting the ack.
    Assigned,
    /// Running.
    Running,
    /// Cancel requested (graceful).
    Canceling,
    /// Canceled.
    Canceled,
    /// Passed.
    Success,
    /// Failed.
    Failed,
}

impl JobState {
    /// The `Job-Status` header value.
    pub fn wire(self) -> &'static str {
        match self {
            JobState::Pending | JobState::Assigned => "pending",
            JobState::Running => "running",
            JobState::Canceling => "canceling",
            JobState::Canceled => "canceled",
            JobState::Success => "success",
            JobState::Failed => "failed",
        }
    }

    /// Whether the runner may still update the job (running or canceling).
    pub fn is_processing(self) -> bool {
        matches!(self, JobState::Running | JobState::Canceling)
    }
}

/// One uploaded artifact.
#[derive(Debug, Clone, Serialize)]
pub struct Artifact {
    /// The multipart file name.
    pub filename: String,
    /// `artifact_format` (zip when not given).
    pub format: String,
    /// `artifact_type` (archive when not given).
    pub artifact_type: String,
    /// `expire_in`, when given.
    pub expire_in: String,
    /// Where the parameters came from: `query` or `multipart` (or `default`).
    pub params_from: String,
    /// The bytes.
    #[serde(skip)]
    pub bytes: Vec<u8>,
}

/// A job as the simulator holds it.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    /// ID.
    pub id: i64,
    /// Name.
    pub name: String,
    /// Job token.
    pub token: String,
    /// State.
    pub state: JobState,
    /// The runner token it was handed to.
    pub runner: Option<String>,
    /// The manager's system ID.
    pub system_id: Option<String>,
    /// The stored log.
    #[serde(skip)]
    pub trace: Vec<u8>,
    /// Log length.
    pub trace_len: usize,
    /// The final `failure_reason` as stored (unknown ones become `unknown_failure`).
    pub failure_reason: Option<String>,
    /// The final `exit_code`.
    pub exit_code: Option<i64>,
    /// The final update's `output.checksum`.
    pub checksum: Option<String>,
    /// The final update's `output.bytesize`.
    pub bytesize: Option<u64>,
    /// Whether the final checksum and bytesize matched the stored log.
    pub output_matches: Option<bool>,
    /// `PUT state=running` calls (the ack and keep-alives).
    pub running_updates: u32,
    /// Final updates received (including those answered 202).
    pub final_updates: u32,
    /// Times an assignment that was never acknowledged went back to the queue.
    pub requeues: u32,
    /// Uploaded artifacts.
    pub artifacts: Vec<Artifact>,
}

/// A request the simulator saw.
#[derive(Debug, Clone, Serialize)]
pub struct Recorded {
    /// Method.
    pub method: String,
    /// Path.
    pub path: String,
    /// Query string (without `?`).
    pub query: String,
    /// Headers, names in lower case, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body.
    #[serde(skip)]
    pub body: Vec<u8>,
    /// Milliseconds since the simulator started.
    pub at_ms: u64,
}

impl Recorded {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (Null when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// Which endpoint a fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// `POST /jobs/request`.
    RequestJob,
    /// `PUT /jobs/:id`.
    UpdateJob,
    /// `PATCH /jobs/:id/trace`.
    PatchTrace,
    /// `POST /jobs/:id/artifacts`.
    UploadArtifacts,
    /// `GET /jobs/:id/artifacts`.
    DownloadArtifacts,
    /// The runner endpoints (`/runners…`).
    Runners,
    /// Anything else (repositories, the simulator's own paths are never faulted).
    Other,
}

/// What a fault does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// Answer this status (with a JSON message) without handling the request.
    Status(u16),
    /// Answer this status with `Retry-After: secs`.
    RetryAfter(u16, u64),
    /// Close the connection without an answer; the request has no effect.
    DropBefore,
    /// Handle the request, then close the connection instead of answering.
    DropAfter,
    /// Wait this many milliseconds, then handle the request normally.
    DelayMs(u64),
    /// Handle the request, but answer with this `Job-Status` header value.
    JobStatus(String),
}

/// A fault: `kind` for the next `times` requests to `route`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fault {
    /// The endpoint.
    pub route: Route,
    /// What happens.
    pub kind: FaultKind,
    /// How many requests it applies to.
    pub times: u32,
}

impl Fault {
    /// `kind` once on `route`.
    pub fn once(route: Route, kind: FaultKind) -> Fault {
        Fault {
            route,
            kind,
            times: 1,
        }
    }
}

/// Behaviour settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// `X-GitLab-Trace-Update-Interval` on PATCH and PUT answers (Rails: 60, or 3 watched).
    pub trace_update_interval: u64,
    /// Answer the next N final updates (that carry a checksum) with 202.
    pub final_pending_rounds: u32,
    /// Hold job requests that carry the current `last_update` this long (Workhorse: 50 s).
    pub long_poll_ms: u64,
    /// Largest log in bytes (None: unlimited).
    pub trace_size_limit: Option<usize>,
    /// Largest artifact upload in bytes.
    pub artifact_size_limit: usize,
    /// A two-phase assignment not acknowledged (`PUT state=running`) within this long goes back
    /// to the queue with a new job token, as Rails drops an unacknowledged assignment (None:
    /// never; the job waits for its ack forever).
    pub ack_timeout_ms: Option<u64>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            trace_update_interval: 3,
            final_pending_rounds: 0,
            long_poll_ms: 0,
            trace_size_limit: None,
            artifact_size_limit: 100 * 1024 * 1024,
            ack_timeout_ms: None,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Manager {
    features: Value,
}

#[derive(Debug, Clone)]
struct Runner {
    id: i64,
    description: String,
    tags: Vec<String>,
    paused: bool,
    managers: BTreeMap<String, Manager>,
}

#[derive(Debug, Clone)]
struct Job {
    view: JobView,
    spec: JobSpec,
    target: Option<String>,
    cancel_gracefully: bool,
    /// When a two-phase assignment was handed out (cleared by the ack).
    assigned_at: Option<std::time::Instant>,
}

/// Information on a served repository.
#[derive(Debug, Clone)]
pub struct Repo {
    /// The head commit.
    pub sha: String,
    /// The clone URL without credentials.
    pub url: String,
}

#[derive(Default)]
struct State {
    runners: HashMap<String, Runner>,
    next_runner_id: i64,
    registration_tokens: HashSet<String>,
    pats: HashSet<String>,
    jobs: BTreeMap<i64, Job>,
    queue: VecDeque<i64>,
    next_job_id: i64,
    version: u64,
    requests: Vec<Recorded>,
    faults: Vec<Fault>,
    settings: Settings,
    repos: HashMap<String, Repo>,
}

impl State {
    /// Puts assignments whose ack did not come within `ack_timeout_ms` back at the head of the
    /// queue, with a new job token (the old one is refused from then on). Returns whether any
    /// job went back.
    fn requeue_unacknowledged(&mut self) -> bool {
        let Some(ms) = self.settings.ack_timeout_ms else {
            return false;
        };
        let timeout = std::time::Duration::from_millis(ms);
        let expired: Vec<i64> = self
            .jobs
            .iter()
            .filter(|(_, j)| {
                j.view.state == JobState::Assigned
                    && j.assigned_at.is_some_and(|t| t.elapsed() >= timeout)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in &expired {
            if let Some(j) = self.jobs.get_mut(id) {
                j.view.state = JobState::Pending;
                j.view.token = random_token("glcbt-66_", 20);
                j.view.runner = None;
                j.view.system_id = None;
                j.view.requeues += 1;
                j.assigned_at = None;
                self.queue.push_front(*id);
            }
        }
        if !expired.is_empty() {
            self.version += 1;
        }
        !expired.is_empty()
    }
}

pub(crate) struct Inner {
    state: Mutex<State>,
    queue_changed: Notify,
    started: std::time::Instant,
    base_url: Mutex<String>,
    repo_dir: PathBuf,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Operations shared by [`Sim`] and the HTTP inspection API.
pub(crate) struct Handle(pub(crate) Arc<Inner>);

impl Handle {
    pub(crate) fn enqueue(&self, spec: JobSpec, target: Option<String>) -> i64 {
        let id = {
            let mut s = self.0.lock();
            let id = s.next_job_id;
            s.next_job_id += 1;
            let token = random_token("glcbt-66_", 20);
            s.jobs.insert(
                id,
                Job {
                    view: JobView {
                        id,
                        name: spec.name.clone(),
                        token,
                        state: JobState::Pending,
                        runner: None,
                        system_id: None,
                        trace: Vec::new(),
                        trace_len: 0,
                        failure_reason: None,
                        exit_code: None,
                        checksum: None,
                        bytesize: None,
                        output_matches: None,
                        running_updates: 0,
                        final_updates: 0,
                        requeues: 0,
                        artifacts: Vec::new(),
                    },
                    spec,
                    target,
                    cancel_gracefully: false,
                    assigned_at: None,
                },
            );
            s.queue.push_back(id);
            s.version += 1;
            id
        };
        self.0.queue_changed.notify_waiters();
        id
    }

    /// Cancels a job as a user would: `canceling` when its runner advertised
    /// `cancel_gracefully`, else `canceled`; a queued job is canceled at once.
    pub(crate) fn cancel(&self, id: i64) {
        let mut s = self.0.lock();
        let in_queue = s.queue.contains(&id);
        if let Some(job) = s.jobs.get_mut(&id) {
            job.view.state = match job.view.state {
                JobState::Running | JobState::Assigned if job.cancel_gracefully => {
                    JobState::Canceling
                }
                JobState::Pending
                | JobState::Running
                | JobState::Assigned
                | JobState::Canceling => JobState::Canceled,
                other => other,
            };
        }
        if in_queue {
            s.queue.retain(|j| *j != id);
        }
    }
}

/// TLS material for an HTTPS simulator: PEM files of the server certificate chain and key.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// Certificate chain.
    pub cert: PathBuf,
    /// Private key.
    pub key: PathBuf,
}

/// A running simulator. Stops when dropped.
pub struct Sim {
    inner: Arc<Inner>,
    addr: SocketAddr,
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

fn random_token(prefix: &str, len: usize) -> String {
    use rand::distr::{Alphanumeric, SampleString};
    format!(
        "{prefix}{}",
        Alphanumeric.sample_string(&mut rand::rng(), len)
    )
}

impl Sim {
    /// Starts a plain-HTTP simulator on 127.0.0.1 (a free port).
    pub async fn start() -> std::io::Result<Sim> {
        Sim::start_on("127.0.0.1:0".parse().expect("literal address"), None).await
    }

    /// Starts an HTTPS simulator on 127.0.0.1 with the given certificate.
    pub async fn start_tls(tls: TlsFiles) -> std::io::Result<Sim> {
        Sim::start_on("127.0.0.1:0".parse().expect("literal address"), Some(tls)).await
    }

    /// Starts on `addr` (e.g. the docker bridge gateway, so containers can clone).
    pub async fn start_on(addr: SocketAddr, tls: Option<TlsFiles>) -> std::io::Result<Sim> {
        let dir = tempfile::tempdir()?;
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                next_runner_id: 1,
                next_job_id: 1000,
                version: 1,
                ..State::default()
            }),
            queue_changed: Notify::new(),
            started: std::time::Instant::now(),
            base_url: Mutex::new(String::new()),
            repo_dir: dir.path().join("repos"),
        });
        std::fs::create_dir_all(&inner.repo_dir)?;
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let host = if addr.ip().is_loopback() && tls.is_some() {
            format!("localhost:{}", addr.port())
        } else {
            addr.to_string()
        };
        let url = format!("{scheme}://{host}");
        *inner.base_url.lock().unwrap_or_else(|p| p.into_inner()) = url.clone();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        server::serve(inner.clone(), listener, tls, stop_rx)?;
        Ok(Sim {
            inner,
            addr,
            url,
            stop: Some(stop_tx),
            _dir: dir,
        })
    }

    /// The base URL (`http://127.0.0.1:PORT`), what a runner's `url` is set to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Adds a runner with an authentication token (`glrt-…` or legacy); returns its ID.
    pub fn add_runner(&self, token: &str) -> i64 {
        let mut s = self.inner.lock();
        let id = s.next_runner_id;
        s.next_runner_id += 1;
        s.runners.insert(
            token.to_owned(),
            Runner {
                id,
                description: String::new(),
                tags: Vec::new(),
                paused: false,
                managers: BTreeMap::new(),
            },
        );
        id
    }

    /// Accepts a legacy registration token for `POST /runners`.
    pub fn add_registration_token(&self, token: &str) {
        self.inner
            .lock()
            .registration_tokens
            .insert(token.to_owned());
    }

    /// Accepts a personal access token for reset-by-ID.
    pub fn add_pat(&self, token: &str) {
        self.inner.lock().pats.insert(token.to_owned());
    }

    /// Pauses or resumes a runner (paused runners get 204).
    pub fn set_paused(&self, token: &str, paused: bool) {
        if let Some(r) = self.inner.lock().runners.get_mut(token) {
            r.paused = paused;
        }
    }

    /// The runner tokens currently valid.
    pub fn runner_tokens(&self) -> Vec<String> {
        let mut v: Vec<_> = self.inner.lock().runners.keys().cloned().collect();
        v.sort();
        v
    }

    /// The system IDs of a runner's managers.
    pub fn managers(&self, token: &str) -> Vec<String> {
        self.inner
            .lock()
            .runners
            .get(token)
            .map(|r| r.managers.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The features a manager advertised.
    pub fn manager_features(&self, token: &str, system_id: &str) -> Option<Value> {
        self.inner
            .lock()
            .runners
            .get(token)
            .and_then(|r| r.managers.get(system_id))
            .map(|m| m.features.clone())
    }

    /// A runner's description and tags as registered.
    pub fn runner_details(&self, token: &str) -> Option<(i64, String, Vec<String>)> {
        self.inner
            .lock()
            .runners
            .get(token)
            .map(|r| (r.id, r.description.clone(), r.tags.clone()))
    }

    /// Enqueues a job for any runner; returns its ID.
    pub fn enqueue(&self, spec: JobSpec) -> i64 {
        self.enqueue_inner(spec, None)
    }

    /// Enqueues a job only `runner_token` may take.
    pub fn enqueue_for(&self, runner_token: &str, spec: JobSpec) -> i64 {
        self.enqueue_inner(spec, Some(runner_token.to_owned()))
    }

    fn enqueue_inner(&self, spec: JobSpec, target: Option<String>) -> i64 {
        Handle(self.inner.clone()).enqueue(spec, target)
    }

    /// A job's state and data.
    pub fn job(&self, id: i64) -> Option<JobView> {
        self.inner.lock().jobs.get(&id).map(|j| j.view.clone())
    }

    /// Every job, by ID.
    pub fn jobs(&self) -> Vec<JobView> {
        self.inner
            .lock()
            .jobs
            .values()
            .map(|j| j.view.clone())
            .collect()
    }

    /// A job's stored log.
    pub fn trace(&self, id: i64) -> Vec<u8> {
        self.job(id).map(|j| j.trace).unwrap_or_default()
    }

    /// Cancels a job as a user would: `canceling` when its runner advertised
    /// `cancel_gracefully`, else `canceled`; a queued job is canceled at once.
    pub fn cancel(&self, id: i64) {
        Handle(self.inner.clone()).cancel(id);
    }

    /// Force-cancels a job (`canceled` at once: a hard abort for the runner).
    pub fn force_cancel(&self, id: i64) {
        let mut s = self.inner.lock();
        s.queue.retain(|j| *j != id);
        if let Some(job) = s.jobs.get_mut(&id) {
            if !matches!(job.view.state, JobState::Success | JobState::Failed) {
                job.view.state = JobState::Canceled;
            }
        }
    }

    /// Every request seen, in order (the simulator's own `/_sim` paths excluded).
    pub fn requests(&self) -> Vec<Recorded> {
        self.inner.lock().requests.clone()
    }

    /// The requests to paths that contain `fragment`.
    pub fn requests_to(&self, method: &str, fragment: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && r.path.contains(fragment))
            .collect()
    }

    /// Adds a fault.
    pub fn fault(&self, fault: Fault) {
        self.inner.lock().faults.push(fault);
    }

    /// Changes the settings.
    pub fn configure(&self, f: impl FnOnce(&mut Settings)) {
        f(&mut self.inner.lock().settings);
    }

    /// Creates a git repository served at `<url>/repos/<name>.git` with `files` committed on
    /// `main`; returns its head commit. Needs the `git` CLI.
    pub fn create_repo(&self, name: &str, files: &[(&str, &str)]) -> std::io::Result<Repo> {
        let work = self.inner.repo_dir.join(format!(".work-{name}"));
        std::fs::create_dir_all(&work)?;
        for (path, content) in files {
            let p = work.join(path);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(p, content)?;
        }
        let git = |dir: &Path, args: &[&str]| -> std::io::Result<String> {
            let out = std::process::Command::new("git")
                .args([
                    "-c",
                    "user.name=sim",
                    "-c",
                    "user.email=sim@example.invalid",
                    "-c",
                    "init.defaultBranch=main",
                ])
                .args(args)
                .current_dir(dir)
                .output()?;
            if !out.status.success() {
                return Err(std::io::Error::other(format!(
                    "git {args:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                )));
            }
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        };
        git(&work, &["init", "-q", "-b", "main"])?;
        git(&work, &["add", "-A"])?;
        git(&work, &["commit", "-q", "-m", "initial"])?;
        let sha = git(&work, &["rev-parse", "HEAD"])?;
        let bare = self.inner.repo_dir.join(format!("{name}.git"));
        let _ = std::fs::remove_dir_all(&bare);
        git(
            &self.inner.repo_dir,
            &[
                "clone",
                "-q",
                "--bare",
                &work.to_string_lossy(),
                &bare.to_string_lossy(),
            ],
        )?;
        git(&bare, &["update-server-info"])?;
        let repo = Repo {
            sha,
            url: format!("{}/repos/{name}.git", self.url),
        };
        self.inner
            .lock()
            .repos
            .insert(name.to_owned(), repo.clone());
        Ok(repo)
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// CRC-32 as the runner reports it (`crc32:%08x`).
pub fn checksum(bytes: &[u8]) -> String {
    format!("crc32:{:08x}", crc32fast::hash(bytes))
}
