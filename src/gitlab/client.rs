//! The transport every endpoint shares (spec §1): base URL, TLS, the headers sent on every
//! call, HTTP-level retries honouring `RateLimit-ResetTime` and `Retry-After`, bounded response
//! bodies, the `X-GitLab-Last-Update` cache and the [`RequestObserver`] reports.
//!
//! Endpoint logic lives in [`super::jobs`] and [`super::runners`]; they give meaning to the
//! [`Reply`] this module returns.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE, USER_AGENT};
use reqwest::{Method, Url};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::ca_chain::{RecordingVerifier, SeenChain};
use super::error::GitlabError;
use super::observer::normalized_path;
use super::observer::{Endpoint, NoopObserver, RequestObserver};
use super::version;
use crate::config::RunnerConfig;

/// The largest response body read (a job payload is typically a few KiB; 16 MiB leaves room
/// for huge variable sets while keeping memory bounded).
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// How a [`Client`] is built: where GitLab is and how to trust it.
#[derive(Debug, Clone, Default)]
pub struct ClientSettings {
    /// The runner's `url` as configured (`/ci` suffix and trailing slashes allowed).
    pub url: String,
    /// `tls-ca-file`: extra roots, added to the system's.
    pub tls_ca_file: Option<PathBuf>,
    /// `tls-cert-file`: client certificate chain (PEM).
    pub tls_cert_file: Option<PathBuf>,
    /// `tls-key-file`: client key (PEM).
    pub tls_key_file: Option<PathBuf>,
    /// `connection_max_age`: idle connections are closed after this long (default 15 min).
    pub connection_max_age: Option<Duration>,
    /// HTTP-level retry policy.
    pub retry: RetryPolicy,
    /// How long to wait for a response's headers after sending a request (None: upstream's
    /// 10 minutes). A request past it fails as a transport error, so a server that accepts
    /// and never answers cannot hold a worker for the whole 60-minute request timeout.
    pub response_header_timeout: Option<Duration>,
}

/// Upstream's wait for response headers.
pub const RESPONSE_HEADER_TIMEOUT: Duration = Duration::from_secs(10 * 60);

impl ClientSettings {
    /// Settings for one `[[runners]]` entry. When the TLS files are unset, upstream's fallbacks
    /// in `certs_dir` are used if they exist: `<host>.crt`, `<host>.auth.crt`, `<host>.auth.key`
    /// (`drover run` and the runner commands pass
    /// [`crate::config::default_certificate_directory`], as upstream, whatever `-c` names).
    pub fn for_runner(runner: &RunnerConfig, certs_dir: Option<&Path>) -> ClientSettings {
        let set = |s: &str| (!s.trim().is_empty()).then(|| PathBuf::from(s));
        let mut settings = ClientSettings {
            url: runner.url.clone(),
            tls_ca_file: set(&runner.tls_ca_file),
            tls_cert_file: set(&runner.tls_cert_file),
            tls_key_file: set(&runner.tls_key_file),
            ..ClientSettings::default()
        };
        let host = Url::parse(runner.url.trim())
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned));
        if let (Some(certs), Some(host)) = (certs_dir, host) {
            let existing = |name: String| Some(certs.join(name)).filter(|p| p.is_file());
            if settings.tls_ca_file.is_none() {
                settings.tls_ca_file = existing(format!("{host}.crt"));
            }
            if settings.tls_cert_file.is_none() && settings.tls_key_file.is_none() {
                settings.tls_cert_file = existing(format!("{host}.auth.crt"));
                settings.tls_key_file = existing(format!("{host}.auth.key"));
            }
        }
        settings
    }
}

/// Upstream's HTTP-level retry: at most `max_attempts` tries for 408, 429, 500, 502, 503, 504
/// and ≥ 512, waiting what `RateLimit-ResetTime` or `Retry-After` asks, else an exponential
/// backoff from `base` doubling with jitter up to `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts (5 upstream).
    pub max_attempts: u32,
    /// First backoff (100 ms upstream).
    pub base: Duration,
    /// Longest backoff, also the longest server-requested wait honoured (60 s upstream).
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base: Duration::from_millis(100),
            cap: Duration::from_secs(60),
        }
    }
}

/// Whether upstream retries a response with this status.
pub fn is_retried_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504) || status >= 512
}

/// A request body.
#[derive(Debug, Clone)]
pub(crate) enum Body {
    /// No body.
    Empty,
    /// A JSON document (already serialised, so each retry resends the same bytes).
    Json(Bytes),
    /// Raw bytes with a content type.
    Raw(&'static str, Bytes),
}

/// One call to make.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub endpoint: Endpoint,
    pub method: Method,
    /// Path below `/api/v4/`, query included (`jobs/5/trace?debug_trace=false`).
    pub path: String,
    /// Extra headers (auth, Content-Range).
    pub headers: Vec<(&'static str, String)>,
    pub body: Body,
    /// Send `Accept: application/json` (only when a JSON body is expected).
    pub accept_json: bool,
}

/// What came back.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The server pushed back: at least one attempt got a retried status (429/5xx/408).
    pub pushed_back: bool,
    /// The `X-Request-Id` drover sent on the attempt that got this reply.
    pub request_id: String,
}

impl Reply {
    /// A header as text, when present and printable.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Whether the body is declared as JSON.
    pub fn is_json(&self) -> bool {
        self.header("content-type")
            .and_then(|ct| ct.split(';').next())
            .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
    }

    /// The request's correlation ID as upstream takes it: GitLab's `X-Request-Id` answer, else
    /// the one drover sent.
    pub fn correlation_id(&self) -> &str {
        self.header("x-request-id")
            .filter(|id| !id.is_empty())
            .unwrap_or(&self.request_id)
    }

    /// Decodes the JSON body, requiring a JSON content type as upstream does.
    pub fn json<T: serde::de::DeserializeOwned>(
        &self,
        endpoint: Endpoint,
    ) -> Result<T, GitlabError> {
        if !self.is_json() {
            return Err(GitlabError::Decode {
                endpoint: endpoint.as_str(),
                status: self.status,
                message: format!(
                    "content type is {:?}, not application/json",
                    self.header("content-type").unwrap_or("")
                ),
            });
        }
        serde_json::from_slice(&self.body).map_err(|e| GitlabError::Decode {
            endpoint: endpoint.as_str(),
            status: self.status,
            message: e.to_string(),
        })
    }

    /// GitLab's `message` from an error body: a string, or a map of field → messages.
    pub fn message(&self) -> Option<String> {
        let value: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        match value.get("message")? {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Object(map) => Some(
                map.iter()
                    .map(|(k, v)| match v {
                        serde_json::Value::Array(items) => format!(
                            "{k}: {}",
                            items
                                .iter()
                                .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_owned))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        other => format!("{k}: {other}"),
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            other => Some(other.to_string()),
        }
    }

    /// The reply as a [`GitlabError::Status`].
    pub fn error(&self, endpoint: Endpoint) -> GitlabError {
        GitlabError::Status {
            endpoint: endpoint.as_str(),
            status: self.status,
            message: self.message(),
        }
    }
}

/// A client for one GitLab instance and one set of TLS settings. Cheap to share behind an
/// `Arc`; all methods take `&self`. Dropping a request future cancels it, including any
/// retry wait.
pub struct Client {
    transport: Mutex<Transport>,
    /// The CA chain of the latest verified TLS handshake with GitLab.
    seen_chain: SeenChain,
    settings: ClientSettings,
    max_age: Duration,
    base: Url,
    retry: RetryPolicy,
    header_timeout: Duration,
    last_update: Mutex<Option<String>>,
    observer: Arc<dyn RequestObserver>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

/// The API base for a configured URL: trailing `/` and a legacy `/ci` suffix stripped, then
/// `/api/v4/` appended. Only http and https are accepted.
pub fn api_base(url: &str) -> Result<Url, GitlabError> {
    let mut trimmed = url.trim().trim_end_matches('/');
    if let Some(stripped) = trimmed.strip_suffix("/ci") {
        tracing::warn!(
            url = trimmed,
            "the runner URL ends in /ci, a legacy suffix; drover ignores it"
        );
        trimmed = stripped.trim_end_matches('/');
    }
    let parsed = Url::parse(&format!("{trimmed}/api/v4/"))
        .map_err(|e| GitlabError::Client(format!("runner url {url:?} is not a URL: {e}")))?;
    match parsed.scheme() {
        "http" | "https" => Ok(parsed),
        other => Err(GitlabError::Client(format!(
            "runner url {url:?} uses the scheme {other:?}; only http and https are supported"
        ))),
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, GitlabError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            GitlabError::Client(format!(
                "cannot read certificates from {}: {e}",
                path.display()
            ))
        })?;
    if certs.is_empty() {
        return Err(GitlabError::Client(format!(
            "{} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

fn tls_config(
    settings: &ClientSettings,
    seen: &SeenChain,
) -> Result<rustls::ClientConfig, GitlabError> {
    // A system root rustls cannot parse is skipped, as Go's x509 pool skips it.
    let mut roots = rustls_native_certs::load_native_certs().certs;
    if let Some(ca) = &settings.tls_ca_file {
        let mut check = rustls::RootCertStore::empty();
        for cert in read_certs(ca)? {
            check
                .add(cert.clone())
                .map_err(|e| GitlabError::Client(format!("tls-ca-file {}: {e}", ca.display())))?;
            roots.push(cert);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = RecordingVerifier::new(roots, provider.clone(), seen.clone())
        .map_err(GitlabError::Client)?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| GitlabError::Client(format!("TLS setup: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    match (&settings.tls_cert_file, &settings.tls_key_file) {
        (Some(cert), Some(key)) => {
            let chain = read_certs(cert)?;
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                GitlabError::Client(format!("cannot read the key in {}: {e}", key.display()))
            })?;
            builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                GitlabError::Client(format!(
                    "tls-cert-file {} and tls-key-file {} do not make a client identity: {e}",
                    cert.display(),
                    key.display()
                ))
            })
        }
        (None, None) => Ok(builder.with_no_client_auth()),
        _ => Err(GitlabError::Client(
            "tls-cert-file and tls-key-file must be set together".into(),
        )),
    }
}

fn request_id() -> String {
    let bytes: [u8; 16] = rand::random();
    hex::encode(bytes)
}

/// The longest wait a server may ask for between two attempts (upstream sets none; a GitLab
/// asking for days would hold a worker that long).
pub const MAX_SERVER_WAIT: Duration = Duration::from_secs(60 * 60);

/// How long to wait before the next attempt after a retried status, as upstream decides it:
/// until `RateLimit-ResetTime` (an RFC 1123 date) when that lies in the future, else
/// `Retry-After` seconds when above zero, else `backoff` (the client's own, capped). What the
/// server asks for is not cut to the backoff cap, only to [`MAX_SERVER_WAIT`].
pub fn retry_wait(
    headers: &HeaderMap,
    now: chrono::DateTime<chrono::Utc>,
    backoff: Duration,
) -> Duration {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let reset = text("ratelimit-resettime")
        .and_then(|t| chrono::DateTime::parse_from_rfc2822(t).ok())
        .and_then(|at| (at.with_timezone(&chrono::Utc) - now).to_std().ok())
        .filter(|wait| !wait.is_zero());
    let retry_after = || {
        text("retry-after")
            .and_then(|t| t.parse::<u64>().ok())
            .filter(|secs| *secs > 0)
            .map(Duration::from_secs)
    };
    match reset.or_else(retry_after) {
        Some(wait) => wait.min(MAX_SERVER_WAIT),
        None => backoff,
    }
}

impl RetryPolicy {
    /// The backoff before attempt `attempt + 1` (0-based `attempt` just failed): `base × 2^n`
    /// with up to 50 % jitter, capped.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self.base.saturating_mul(1u32 << attempt.min(20));
        let jitter = exp.mul_f64(rand::random::<f64>() * 0.5);
        (exp + jitter).min(self.cap)
    }
}

/// Idle connections are closed after this long, as by upstream's transport.
pub const IDLE_CONNECTION_TIMEOUT: Duration = Duration::from_secs(90);

/// Upstream's default `connection_max_age`.
pub const CONNECTION_MAX_AGE: Duration = Duration::from_secs(15 * 60);

/// The HTTP client of one [`Client`] and what it was built from: replaced, with its pool of
/// connections, once it is older than `connection_max_age` (so polling reconnects now and then,
/// as upstream's periodic close of idle connections makes it) or when a TLS file changed.
struct Transport {
    http: reqwest::Client,
    built: Instant,
    tls_files: Vec<Option<std::time::SystemTime>>,
}

/// The modification times of the TLS files, to notice a renewed certificate.
fn tls_stamps(settings: &ClientSettings) -> Vec<Option<std::time::SystemTime>> {
    [
        &settings.tls_ca_file,
        &settings.tls_cert_file,
        &settings.tls_key_file,
    ]
    .into_iter()
    .map(|f| {
        f.as_ref()
            .and_then(|p| std::fs::metadata(p).ok())
            .and_then(|m| m.modified().ok())
    })
    .collect()
}

fn build_transport(settings: &ClientSettings, seen: &SeenChain) -> Result<Transport, GitlabError> {
    let tls_files = tls_stamps(settings);
    let tls = tls_config(settings, seen)?;
    let http = reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .connect_timeout(Duration::from_secs(30))
        .timeout(Duration::from_secs(60 * 60))
        .pool_idle_timeout(IDLE_CONNECTION_TIMEOUT)
        .gzip(true)
        .build()
        .map_err(|e| GitlabError::Client(format!("HTTP client: {e}")))?;
    Ok(Transport {
        http,
        built: Instant::now(),
        tls_files,
    })
}

impl Client {
    /// Builds a client. Fails (upstream's "client error", −100) on a bad URL or TLS file.
    pub fn new(settings: &ClientSettings) -> Result<Client, GitlabError> {
        let base = api_base(&settings.url)?;
        let seen_chain = SeenChain::default();
        let transport = build_transport(settings, &seen_chain)?;
        Ok(Client {
            transport: Mutex::new(transport),
            seen_chain,
            settings: settings.clone(),
            max_age: settings.connection_max_age.unwrap_or(CONNECTION_MAX_AGE),
            base,
            retry: settings.retry,
            header_timeout: settings
                .response_header_timeout
                .unwrap_or(RESPONSE_HEADER_TIMEOUT),
            last_update: Mutex::new(None),
            observer: Arc::new(NoopObserver),
        })
    }

    /// The HTTP client for the next request: a new one (new connections, TLS files read
    /// again) when the current one is older than `connection_max_age` or a TLS file changed.
    /// A rebuild that fails keeps the current client and logs why.
    fn http(&self) -> reqwest::Client {
        let mut t = self.transport.lock().unwrap_or_else(|p| p.into_inner());
        let stale = t.built.elapsed() >= self.max_age;
        if stale || tls_stamps(&self.settings) != t.tls_files {
            match build_transport(&self.settings, &self.seen_chain) {
                Ok(fresh) => *t = fresh,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot renew the GitLab connection; keeping the current one");
                    t.built = Instant::now();
                    t.tls_files = tls_stamps(&self.settings);
                }
            }
        }
        t.http.clone()
    }

    /// Reports every response and retry to `observer` (metrics).
    pub fn with_observer(mut self, observer: Arc<dyn RequestObserver>) -> Client {
        self.observer = observer;
        self
    }

    /// The CA chain the job gets when no CA file is configured, as upstream hands it over: the
    /// verified path (GitLab's certificate, intermediates, trusted root; PEM) of the latest TLS
    /// handshake with GitLab. `None` over plain HTTP or before the first handshake.
    pub fn server_ca_chain(&self) -> Option<String> {
        self.seen_chain
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|pem| !pem.is_empty())
    }

    /// The API base URL (`https://host/api/v4/`).
    pub fn base_url(&self) -> &Url {
        &self.base
    }

    /// The latest non-empty `X-GitLab-Last-Update` seen on any response.
    pub fn last_update(&self) -> Option<String> {
        self.last_update.lock().ok().and_then(|g| g.clone())
    }

    fn remember_last_update(&self, headers: &HeaderMap) {
        if let Some(v) = headers
            .get("x-gitlab-last-update")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
        {
            if let Ok(mut g) = self.last_update.lock() {
                *g = Some(v.to_owned());
            }
        }
    }

    /// Makes one call with upstream's HTTP-level retries. Transport errors are never retried
    /// here; a retried status that persists is returned as the final reply.
    pub(crate) async fn call(&self, call: &Call) -> Result<Reply, GitlabError> {
        let url = self.base.join(&call.path).map_err(|e| {
            GitlabError::Client(format!("cannot build the URL for {}: {e}", call.path))
        })?;
        let method_lc = call.method.as_str().to_ascii_lowercase();
        let mut attempt = 0u32;
        let result = self.attempts(call, &url, &method_lc, &mut attempt).await;
        if attempt > 0 {
            self.observer
                .attempts(&normalized_path(url.path()), &method_lc, attempt);
        }
        result
    }

    /// The attempts of one call, counted in `attempt`.
    async fn attempts(
        &self,
        call: &Call,
        url: &Url,
        method_lc: &str,
        attempt: &mut u32,
    ) -> Result<Reply, GitlabError> {
        let mut pushed_back = false;
        loop {
            let sent_id = request_id();
            let mut req = self
                .http()
                .request(call.method.clone(), url.clone())
                .header(USER_AGENT, version::user_agent())
                .header("X-Request-Id", &sent_id);
            for (name, value) in &call.headers {
                req = req.header(*name, value);
            }
            if call.accept_json {
                req = req.header(ACCEPT, HeaderValue::from_static("application/json"));
            }
            req = match &call.body {
                Body::Empty => req,
                Body::Json(bytes) => req
                    .header(CONTENT_TYPE, "application/json")
                    .body(bytes.clone()),
                Body::Raw(ct, bytes) => req.header(CONTENT_TYPE, *ct).body(bytes.clone()),
            };
            let started = Instant::now();
            let transport = |message: String| GitlabError::Transport {
                endpoint: call.endpoint.as_str(),
                url: url.to_string(),
                message,
            };
            *attempt += 1;
            let resp = match tokio::time::timeout(self.header_timeout, req.send()).await {
                Ok(sent) => sent.map_err(|e| transport(error_chain(&e)))?,
                Err(_) => {
                    return Err(transport(format!(
                        "no response headers within {:?}",
                        self.header_timeout
                    )))
                }
            };
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let body = read_bounded(resp, call, url).await?;
            self.observer
                .request(call.endpoint, method_lc, status, started.elapsed());
            self.remember_last_update(&headers);
            let correlation = headers
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            tracing::debug!(
                endpoint = call.endpoint.as_str(),
                method = %call.method,
                status,
                correlation_id = correlation,
                "GitLab answered"
            );
            if is_retried_status(status) && *attempt < self.retry.max_attempts {
                pushed_back = true;
                let wait = retry_wait(
                    &headers,
                    chrono::Utc::now(),
                    self.retry.backoff(*attempt - 1),
                );
                tracing::debug!(
                    endpoint = call.endpoint.as_str(),
                    status,
                    attempt,
                    wait_ms = wait.as_millis() as u64,
                    "retrying the GitLab call"
                );
                tokio::time::sleep(wait).await;
                continue;
            }
            if is_retried_status(status) {
                pushed_back = true;
            }
            return Ok(Reply {
                status,
                headers,
                body,
                pushed_back,
                request_id: sent_id,
            });
        }
    }
}

/// The error and its sources, on one line (reqwest's top-level message hides the cause).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Reads a response body, at most [`MAX_RESPONSE_BYTES`]. A longer body is an error where the
/// call reads the body (JSON answers); elsewhere (status updates, trace appends, deletes) only
/// the status counts, as upstream, so the rest is left unread and the connection dropped.
async fn read_bounded(
    mut resp: reqwest::Response,
    call: &Call,
    url: &Url,
) -> Result<Bytes, GitlabError> {
    let status = resp.status().as_u16();
    let mut buf = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if buf.len() + chunk.len() > MAX_RESPONSE_BYTES {
                    if !call.accept_json {
                        let room = MAX_RESPONSE_BYTES - buf.len();
                        buf.extend_from_slice(&chunk[..room]);
                        return Ok(Bytes::from(buf));
                    }
                    return Err(GitlabError::Decode {
                        endpoint: call.endpoint.as_str(),
                        status,
                        message: format!("the body is larger than {MAX_RESPONSE_BYTES} bytes"),
                    });
                }
                buf.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(Bytes::from(buf)),
            Err(e) => {
                return Err(GitlabError::Transport {
                    endpoint: call.endpoint.as_str(),
                    url: url.to_string(),
                    message: format!("reading the body: {}", error_chain(&e)),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        assert_eq!(
            api_base("https://h/").unwrap().as_str(),
            "https://h/api/v4/"
        );
        assert_eq!(
            api_base("https://h/ci").unwrap().as_str(),
            "https://h/api/v4/"
        );
        assert_eq!(
            api_base("https://h/gitlab/ci/").unwrap().as_str(),
            "https://h/gitlab/api/v4/"
        );
        assert_eq!(api_base("ftp://h").unwrap_err().status(), -100);
        assert_eq!(api_base("not a url").unwrap_err().status(), -100);
    }

    #[test]
    fn correlation_id_is_gitlabs_answer_else_the_one_sent() {
        let reply = |answer: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(a) = answer {
                headers.insert("x-request-id", HeaderValue::from_str(a).unwrap());
            }
            Reply {
                status: 201,
                headers,
                body: Bytes::new(),
                pushed_back: false,
                request_id: "sent-id".into(),
            }
        };
        assert_eq!(reply(Some("01HGITLAB")).correlation_id(), "01HGITLAB");
        assert_eq!(reply(None).correlation_id(), "sent-id");
        assert_eq!(reply(Some("")).correlation_id(), "sent-id");
    }

    #[test]
    fn retried_statuses() {
        for s in [408, 429, 500, 502, 503, 504, 512, 599] {
            assert!(is_retried_status(s), "{s}");
        }
        for s in [200, 400, 403, 409, 501, 505, 511] {
            assert!(!is_retried_status(s), "{s}");
        }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy::default();
        assert!(p.backoff(0) >= Duration::from_millis(100));
        assert!(p.backoff(0) <= Duration::from_millis(150));
        assert!(p.backoff(3) >= Duration::from_millis(800));
        assert_eq!(p.backoff(30), Duration::from_secs(60));
    }
}
