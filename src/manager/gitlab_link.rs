//! The run loop's [`JobSource`]/[`JobLink`] over the GitLab API client: job requests through
//! [`Client::request_job`], and per job a [`JobTrace`] (ack, incremental trace, `Job-Status`
//! cancellation, final update) behind a [`TraceSink`] the executor writes into.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::source::{Ack, JobLink, JobOutcome, JobSource, Requested};
use crate::config::model::RunnerConfig;
use crate::executor::{JobControl, TraceSink};
use crate::gitlab::{
    self, Client, ClientSettings, Info, JobRequest, JobRequestOutcome, JobTrace, Pickup,
    TraceOptions, TraceWriter,
};
use crate::job::JobPayload;

/// GitLab for every runner of one config: one client per URL and TLS setting.
pub struct Gitlab {
    certs_dir: Option<PathBuf>,
    system_id: String,
    global_labels: Mutex<std::collections::BTreeMap<String, String>>,
    clients: Mutex<HashMap<String, Arc<Client>>>,
    metrics: Option<crate::metrics::Metrics>,
}

impl Gitlab {
    /// A source identifying as `system_id`, with GitLab's TLS fallbacks looked up in
    /// `certs_dir`.
    pub fn new(
        certs_dir: Option<PathBuf>,
        system_id: String,
        global_labels: std::collections::BTreeMap<String, String>,
        metrics: Option<crate::metrics::Metrics>,
    ) -> Gitlab {
        Gitlab {
            certs_dir,
            system_id,
            global_labels: Mutex::new(global_labels),
            clients: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// Top-level `labels` after a reload.
    pub fn set_global_labels(&self, labels: std::collections::BTreeMap<String, String>) {
        *self.global_labels.lock().unwrap_or_else(|p| p.into_inner()) = labels;
    }

    /// The runner's client (one per runner: its API metrics carry the runner's labels).
    fn client(&self, r: &RunnerConfig) -> Result<Arc<Client>, gitlab::GitlabError> {
        let settings = ClientSettings::for_runner(r, self.certs_dir.as_deref());
        let key = format!(
            "{}|{}|{}|{:?}|{:?}|{:?}",
            r.token,
            r.name,
            settings.url,
            settings.tls_ca_file,
            settings.tls_cert_file,
            settings.tls_key_file
        );
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let mut c = Client::new(&settings)?;
        if let Some(m) = &self.metrics {
            let labels = crate::metrics::RunnerLabels::new(
                crate::engine::naming::short_token(&r.token),
                r.name.clone(),
            );
            c = c.with_observer(Arc::new(super::observe::ApiObserver {
                runner: m.runner(&labels),
                metrics: m.clone(),
            }));
        }
        let c = Arc::new(c);
        clients.insert(key, c.clone());
        Ok(c)
    }
}

impl JobSource for Gitlab {
    type Link = GitlabJob;

    async fn request_job(
        &self,
        runner: &RunnerConfig,
        cancel: &CancellationToken,
    ) -> Requested<GitlabJob> {
        let client = match self.client(runner) {
            Ok(c) => c,
            Err(e) => return Requested::Unhealthy(e.to_string()),
        };
        let labels = self
            .global_labels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let info = Arc::new(Info::for_runner(runner, &labels));
        let req = JobRequest {
            token: &runner.token,
            info: &info,
            system_id: &self.system_id,
            session: None,
            runner_name: &runner.name,
        };
        let result = tokio::select! {
            r = client.request_job(&req) => r,
            () = cancel.cancelled() => return Requested::NoJob,
        };
        match result.outcome {
            JobRequestOutcome::Job(payload) => {
                let opts = TraceOptions::for_job(runner, &payload);
                let tls = tls_data(
                    &ClientSettings::for_runner(runner, self.certs_dir.as_deref()),
                    client.server_ca_chain(),
                );
                let link = GitlabJob {
                    client,
                    info,
                    opts,
                    payload: payload.clone(),
                    trace: None,
                    tls,
                };
                Requested::Job(payload, link)
            }
            JobRequestOutcome::NoJob if result.pushed_back => Requested::PushedBack,
            JobRequestOutcome::NoJob => Requested::NoJob,
            JobRequestOutcome::Forbidden => Requested::Unhealthy("403 Forbidden".into()),
            JobRequestOutcome::ClientError(e) => Requested::Unhealthy(e.to_string()),
            JobRequestOutcome::Failed(_) if result.pushed_back => Requested::PushedBack,
            JobRequestOutcome::Failed(e) => Requested::Failed(e.to_string()),
        }
    }
}

/// One job's link to GitLab: a [`JobTrace`] once started.
pub struct GitlabJob {
    client: Arc<Client>,
    info: Arc<Info>,
    opts: TraceOptions,
    payload: Box<JobPayload>,
    trace: Option<JobTrace>,
    tls: crate::executor::settings::TlsData,
}

/// The biggest TLS file handed to a job.
const MAX_TLS_FILE: u64 = 1024 * 1024;

/// The contents of the runner's TLS files for the job (`CI_SERVER_TLS_*`); a file that cannot
/// be read is left out with a warning (the connection to GitLab would have failed first).
/// Without a CA file, the job gets the chain GitLab's certificate was verified with
/// (`seen_chain`), as upstream.
fn tls_data(
    settings: &ClientSettings,
    seen_chain: Option<String>,
) -> crate::executor::settings::TlsData {
    let read = |p: &Option<std::path::PathBuf>| -> String {
        let Some(path) = p else {
            return String::new();
        };
        let result = std::fs::File::open(path).and_then(|f| {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::Read::take(f, MAX_TLS_FILE), &mut s)
                .map(|_| s)
        });
        result.unwrap_or_else(|e| {
            tracing::warn!(file = %path.display(), error = %e, "reading a TLS file for the job's CI_SERVER_TLS_* variables failed; the job gets none");
            String::new()
        })
    };
    crate::executor::settings::TlsData {
        ca_chain: match &settings.tls_ca_file {
            Some(_) => read(&settings.tls_ca_file),
            None => seen_chain.unwrap_or_default(),
        },
        auth_cert: read(&settings.tls_cert_file),
        auth_key: read(&settings.tls_key_file),
    }
}

/// The executor's sink over the job's trace buffer (never blocks on the network).
pub struct GitlabSink(Option<TraceWriter>);

impl TraceSink for GitlabSink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        match &mut self.0 {
            Some(w) => w.write_all(data),
            None => Ok(()),
        }
    }

    fn limits_output(&self) -> bool {
        // The job's trace buffer applies `output_limit` (gitlab::trace), as upstream's.
        true
    }
}

impl JobLink for GitlabJob {
    type Sink = GitlabSink;

    async fn start(&mut self) -> Ack {
        let trace = JobTrace::start(
            self.client.clone(),
            self.info.clone(),
            &self.payload,
            self.opts.clone(),
        )
        .await;
        let ack = match trace.pickup() {
            Pickup::Proceed => Ack::Proceed,
            Pickup::Abort => Ack::Drop,
            Pickup::Canceling => Ack::Canceling,
        };
        self.trace = Some(trace);
        ack
    }

    fn sink(&mut self) -> GitlabSink {
        GitlabSink(self.trace.as_ref().map(JobTrace::writer))
    }

    fn control(&self) -> JobControl {
        match &self.trace {
            Some(t) => JobControl {
                cancel: t.graceful_cancel(),
                abort: t.abort(),
            },
            None => JobControl::default(),
        }
    }

    async fn finish(self, outcome: JobOutcome) {
        let Some(trace) = self.trace else {
            return;
        };
        let out = match outcome {
            JobOutcome::Success => gitlab::JobOutcome::success(),
            // Reasons at pickup are sent raw (spec §6.1).
            JobOutcome::Failed {
                reason: crate::executor::FailureReason::JobCanceled,
                exit_code: None,
            } if trace.pickup() == Pickup::Canceling => {
                gitlab::JobOutcome::failed_raw("job_canceled", 0)
            }
            JobOutcome::Failed { reason, exit_code } => {
                gitlab::JobOutcome::failed(reason.as_str(), exit_code.unwrap_or(0))
            }
        };
        // Each PUT logs `Updating job...` and its answer (`gitlab::jobs`); a final update that
        // gives up logs why.
        let _ = trace.finish(out).await;
    }

    fn tls(&self) -> crate::executor::settings::TlsData {
        self.tls.clone()
    }
}
