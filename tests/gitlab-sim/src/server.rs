//! The HTTP side of the simulator: routes, the recording and fault middleware, handlers.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Multipart, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post, put};
use axum::{Json, Router};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::jobs::{payload, JobSpec, PayloadContext};
use crate::{
    random_token, Artifact, Fault, FaultKind, Inner, JobState, Recorded, Route, Runner, Settings,
    TlsFiles,
};

type Sim = State<Arc<Inner>>;

/// The largest request body read (artifact uploads are limited separately, by setting).
const MAX_BODY: usize = 512 * 1024 * 1024;

fn router(inner: Arc<Inner>) -> Router {
    Router::new()
        .route("/api/v4/jobs/request", post(request_job))
        .route("/api/v4/jobs/{id}", put(update_job))
        .route("/api/v4/jobs/{id}/trace", patch(patch_trace))
        .route(
            "/api/v4/jobs/{id}/artifacts",
            post(upload_artifacts).get(download_artifacts),
        )
        .route("/_sim/artifacts/{id}/download", get(direct_download))
        .route("/api/v4/runners", post(register).delete(unregister))
        .route("/api/v4/runners/verify", post(verify))
        .route("/api/v4/runners/managers", delete(unregister_manager))
        .route(
            "/api/v4/runners/reset_authentication_token",
            post(reset_token),
        )
        .route(
            "/api/v4/runners/{id}/reset_authentication_token",
            post(reset_token_by_id),
        )
        .route("/repos/{*path}", get(repo_file))
        .route("/_sim/runners", post(sim_add_runner))
        .route(
            "/_sim/registration_tokens",
            post(sim_add_registration_token),
        )
        .route("/_sim/jobs", post(sim_enqueue).get(sim_jobs))
        .route("/_sim/jobs/{id}/trace", get(sim_trace))
        .route("/_sim/jobs/{id}/cancel", post(sim_cancel))
        .route("/_sim/requests", get(sim_requests))
        .route("/_sim/faults", post(sim_fault))
        .route("/_sim/settings", post(sim_settings))
        .layer(middleware::from_fn_with_state(inner.clone(), intercept))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(inner)
}

/// Starts serving on `listener` until `stop` fires.
pub(crate) fn serve(
    inner: Arc<Inner>,
    listener: tokio::net::TcpListener,
    tls: Option<TlsFiles>,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> std::io::Result<()> {
    let app = router(inner);
    match tls {
        None => {
            tokio::spawn(async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stop.await;
                    })
                    .await;
            });
        }
        Some(files) => {
            let acceptor = tls_acceptor(&files)?;
            tokio::spawn(async move {
                let mut stop = stop;
                loop {
                    let (tcp, _) = tokio::select! {
                        _ = &mut stop => return,
                        accepted = listener.accept() => match accepted {
                            Ok(a) => a,
                            Err(_) => continue,
                        },
                    };
                    let acceptor = acceptor.clone();
                    let app = app.clone();
                    tokio::spawn(async move {
                        let Ok(stream) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let service = hyper_util::service::TowerToHyperService::new(app);
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        }
    }
    Ok(())
}

fn tls_acceptor(files: &TlsFiles) -> std::io::Result<tokio_rustls::TlsAcceptor> {
    let certs = rustls_pemfile::certs(&mut std::io::BufReader::new(std::fs::File::open(
        &files.cert,
    )?))
    .collect::<Result<Vec<_>, _>>()?;
    let key = rustls_pemfile::private_key(&mut std::io::BufReader::new(std::fs::File::open(
        &files.key,
    )?))?
    .ok_or_else(|| std::io::Error::other("no private key in the key file"))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(std::io::Error::other)?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(std::io::Error::other)?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

fn classify(method: &Method, path: &str) -> Route {
    let p = path.trim_end_matches('/');
    if p == "/api/v4/jobs/request" {
        Route::RequestJob
    } else if p.starts_with("/api/v4/jobs/") && p.ends_with("/trace") {
        Route::PatchTrace
    } else if p.starts_with("/api/v4/jobs/") && p.ends_with("/artifacts") {
        if method == Method::GET {
            Route::DownloadArtifacts
        } else {
            Route::UploadArtifacts
        }
    } else if p.starts_with("/api/v4/jobs/") {
        Route::UpdateJob
    } else if p.starts_with("/api/v4/runners") {
        Route::Runners
    } else {
        Route::Other
    }
}

/// A response whose body fails at once: the client sees the connection drop.
fn dropped() -> Response {
    let stream = futures_util::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::other("simulated dropped connection"))
    });
    Response::new(Body::from_stream(stream))
}

fn message(status: u16, text: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, Json(json!({ "message": text }))).into_response()
}

/// Records every request and applies faults.
async fn intercept(State(inner): Sim, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return message(400, "body too large or broken");
    };
    let path = parts.uri.path().to_owned();
    if path.starts_with("/_sim") {
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    }
    let route = classify(&parts.method, &path);
    let fault = {
        let mut s = inner.lock();
        s.requests.push(Recorded {
            method: parts.method.to_string(),
            path: path.clone(),
            query: parts.uri.query().unwrap_or("").to_owned(),
            headers: parts
                .headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: bytes.to_vec(),
            at_ms: inner.started.elapsed().as_millis() as u64,
        });
        let pos = s
            .faults
            .iter()
            .position(|f| f.route == route && f.times > 0);
        pos.map(|i| {
            let f = &mut s.faults[i];
            f.times -= 1;
            let kind = f.kind.clone();
            if f.times == 0 {
                s.faults.remove(i);
            }
            kind
        })
    };
    let req = Request::from_parts(parts, Body::from(bytes));
    match fault {
        None => next.run(req).await,
        Some(FaultKind::Status(code)) => message(code, "simulated fault"),
        Some(FaultKind::RetryAfter(code, secs)) => {
            let mut r = message(code, "simulated rate limit");
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                r.headers_mut().insert("retry-after", v);
            }
            r
        }
        Some(FaultKind::DropBefore) => dropped(),
        Some(FaultKind::DropAfter) => {
            let _ = next.run(req).await;
            dropped()
        }
        Some(FaultKind::DelayMs(ms)) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            next.run(req).await
        }
        Some(FaultKind::JobStatus(status)) => {
            let mut r = next.run(req).await;
            if let Ok(v) = HeaderValue::from_str(&status) {
                r.headers_mut().insert("job-status", v);
            }
            r
        }
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn body_json(bytes: &Bytes) -> Option<Value> {
    serde_json::from_slice(bytes).ok()
}

fn body_token(v: &Value) -> Option<String> {
    v.get("token").and_then(Value::as_str).map(str::to_owned)
}

fn with_headers(mut r: Response, headers: &[(&str, String)]) -> Response {
    for (k, v) in headers {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            r.headers_mut().insert(name, value);
        }
    }
    r
}

fn valid_system_id(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 14
        && (b[0] == b's' || b[0] == b'r')
        && b[1] == b'_'
        && b[2..].iter().all(u8::is_ascii_alphanumeric)
}

async fn request_job(State(inner): Sim, headers: HeaderMap, body: Bytes) -> Response {
    let Some(v) = body_json(&body) else {
        return message(400, "body is not JSON");
    };
    let Some(token) = body_token(&v) else {
        return message(400, "token is missing");
    };
    if header(&headers, "runner-token") != Some(token.as_str()) {
        // GitLab reads the body token; the simulator also wants the header to match, as
        // upstream always sends both.
        return message(403, "RUNNER-TOKEN header and body token differ");
    }
    let system_id = v
        .get("system_id")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if !valid_system_id(&system_id) {
        return message(400, "system_id is missing or malformed");
    }
    let features = v.pointer("/info/features").cloned().unwrap_or(Value::Null);
    let last_update = v
        .get("last_update")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let long_poll = {
        let mut s = inner.lock();
        if s.requeue_unacknowledged() {
            inner.queue_changed.notify_waiters();
        }
        let version = s.version.to_string();
        let Some(runner) = s.runners.get_mut(&token) else {
            return message(403, "403 Forbidden");
        };
        runner
            .managers
            .entry(system_id.clone())
            .or_default()
            .features = features.clone();
        if runner.paused {
            return with_headers(
                StatusCode::NO_CONTENT.into_response(),
                &[("x-gitlab-last-update", version)],
            );
        }
        let hold = s.settings.long_poll_ms;
        (last_update.as_deref() == Some(version.as_str())).then_some(hold)
    };
    if let Some(hold) = long_poll {
        if hold == 0 {
            let version = inner.lock().version.to_string();
            return with_headers(
                StatusCode::NO_CONTENT.into_response(),
                &[("x-gitlab-last-update", version)],
            );
        }
        // Workhorse: hold until the queue changes or the poll times out, then 204 without
        // a Last-Update header.
        let changed = inner.queue_changed.notified();
        let still_same =
            inner.lock().version.to_string() == last_update.clone().unwrap_or_default();
        if still_same {
            let _ = tokio::time::timeout(Duration::from_millis(hold), changed).await;
        }
        return with_headers(
            StatusCode::NO_CONTENT.into_response(),
            &[("gitlab-ci-builds-polling", "yes".into())],
        );
    }
    let base_url = inner.base_url.lock().map(|u| u.clone()).unwrap_or_default();
    let mut s = inner.lock();
    let two_phase = features
        .get("two_phase_job_commit")
        .and_then(Value::as_bool)
        == Some(true);
    let graceful = features.get("cancel_gracefully").and_then(Value::as_bool) == Some(true);
    let refspecs = features.get("refspecs").and_then(Value::as_bool) == Some(true);
    let pos = s.queue.iter().position(|id| {
        s.jobs.get(id).is_some_and(|j| {
            j.target.as_deref().is_none_or(|t| t == token) && (refspecs || !j.spec.refspecs)
        })
    });
    let version = s.version.to_string();
    let Some(pos) = pos else {
        return with_headers(
            StatusCode::NO_CONTENT.into_response(),
            &[("x-gitlab-last-update", version)],
        );
    };
    let Some(id) = s.queue.remove(pos) else {
        return message(500, "queue changed");
    };
    s.version += 1;
    let deps: Vec<_> = s.jobs[&id]
        .spec
        .dependencies
        .iter()
        .filter_map(|d| s.jobs.get(d))
        .map(|d| {
            let archive = d
                .view
                .artifacts
                .iter()
                .find(|a| a.artifact_type == "archive")
                .map(|a| (a.filename.clone(), a.bytes.len() as u64));
            (
                d.view.id,
                d.view.name.clone(),
                d.view.token.clone(),
                archive,
            )
        })
        .collect();
    let Some(job) = s.jobs.get(&id).cloned() else {
        return message(500, "job vanished");
    };
    let sha = if !job.spec.sha.is_empty() {
        job.spec.sha.clone()
    } else if let Some(repo) = s.repos.get(&job.spec.repo) {
        repo.sha.clone()
    } else {
        "265c14cf140a66cfc61e40e4ab45c95ba8df5ed1".to_owned()
    };
    let (scheme, authority) = base_url.split_once("://").unwrap_or(("http", &base_url));
    let body = payload(
        &job.spec,
        &PayloadContext {
            id,
            token: &job.view.token,
            pipeline_id: 9000 + id,
            base_url: &base_url,
            authority,
            scheme,
            sha: &sha,
            dependencies: deps,
        },
    );
    if let Some(j) = s.jobs.get_mut(&id) {
        j.view.state = if two_phase {
            JobState::Assigned
        } else {
            JobState::Running
        };
        j.view.runner = Some(token.clone());
        j.view.system_id = Some(system_id);
        j.cancel_gracefully = graceful;
        j.assigned_at = two_phase.then(std::time::Instant::now);
    }
    drop(s);
    inner.queue_changed.notify_waiters();
    (StatusCode::CREATED, Json(body)).into_response()
}

fn job_headers(state: JobState, settings: &Settings) -> Vec<(&'static str, String)> {
    vec![
        ("job-status", state.wire().to_owned()),
        (
            "x-gitlab-trace-update-interval",
            settings.trace_update_interval.to_string(),
        ),
    ]
}

async fn update_job(
    State(inner): Sim,
    Path(id): Path<i64>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut s = inner.lock();
    let settings = s.settings.clone();
    let Some(job) = s.jobs.get_mut(&id) else {
        return message(404, "404 Not Found");
    };
    if header(&headers, "job-token") != Some(job.view.token.as_str()) {
        return with_headers(
            message(403, "403 Forbidden"),
            &job_headers(job.view.state, &settings),
        );
    }
    let Some(v) = body_json(&body) else {
        return message(400, "body is not JSON");
    };
    if !matches!(
        job.view.state,
        JobState::Assigned | JobState::Running | JobState::Canceling
    ) {
        return with_headers(
            message(403, "403 Forbidden - Job is not processing on runner"),
            &job_headers(job.view.state, &settings),
        );
    }
    let state = v.get("state").and_then(Value::as_str).unwrap_or("");
    match state {
        "running" | "pending" => {
            job.view.running_updates += 1;
            if state == "running" && job.view.state == JobState::Assigned {
                job.view.state = JobState::Running;
                job.assigned_at = None;
            }
            let h = job_headers(job.view.state, &settings);
            with_headers((StatusCode::OK, "200").into_response(), &h)
        }
        "success" | "failed" if job.view.state == JobState::Assigned => {
            // Rails authenticates the job before the update: a job that was never acknowledged
            // is not processing on the runner, as the trace endpoint also answers.
            job.view.final_updates += 1;
            with_headers(
                message(403, "403 Forbidden - Job is not processing on runner"),
                &job_headers(job.view.state, &settings),
            )
        }
        "success" | "failed" => {
            job.view.final_updates += 1;
            let checksum = v
                .pointer("/output/checksum")
                .and_then(Value::as_str)
                .or_else(|| v.get("checksum").and_then(Value::as_str))
                .map(str::to_owned);
            if checksum.is_some() && s.settings.final_pending_rounds > 0 {
                s.settings.final_pending_rounds -= 1;
                let state = s.jobs[&id].view.state;
                return with_headers(
                    (StatusCode::ACCEPTED, "202").into_response(),
                    &job_headers(state, &settings),
                );
            }
            let Some(job) = s.jobs.get_mut(&id) else {
                return message(404, "404 Not Found");
            };
            // Rails reads the status when it authenticates the job, before the transition.
            let before = job.view.state;
            let bytesize = v.pointer("/output/bytesize").and_then(Value::as_u64);
            job.view.output_matches = Some(
                checksum.as_deref() == Some(crate::checksum(&job.view.trace).as_str())
                    && bytesize.unwrap_or(0) == job.view.trace.len() as u64,
            );
            job.view.checksum = checksum;
            job.view.bytesize = bytesize;
            job.view.exit_code = v.get("exit_code").and_then(Value::as_i64);
            if state == "failed" {
                let reason = v
                    .get("failure_reason")
                    .and_then(Value::as_str)
                    .unwrap_or("script_failure");
                let known = job.spec.failure_reasons.iter().any(|r| r == reason);
                job.view.failure_reason = Some(if known {
                    reason.to_owned()
                } else {
                    "unknown_failure".to_owned()
                });
            }
            job.view.state = if job.view.state == JobState::Canceling {
                JobState::Canceled
            } else if state == "success" {
                JobState::Success
            } else {
                JobState::Failed
            };
            let h = job_headers(before, &settings);
            with_headers((StatusCode::OK, "200").into_response(), &h)
        }
        _ => message(400, "state is invalid"),
    }
}

async fn patch_trace(
    State(inner): Sim,
    Path(id): Path<i64>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut s = inner.lock();
    let settings = s.settings.clone();
    let Some(job) = s.jobs.get_mut(&id) else {
        return message(404, "404 Not Found");
    };
    let mut h = job_headers(job.view.state, &settings);
    if header(&headers, "job-token") != Some(job.view.token.as_str())
        || !job.view.state.is_processing()
    {
        return with_headers(message(403, "403 Forbidden"), &h);
    }
    let stored = job.view.trace.len();
    h.push(("range", format!("0-{stored}")));
    let Some(range) = header(&headers, "content-range") else {
        return with_headers(message(400, "Content-Range is missing"), &h);
    };
    let parsed = range.split_once('-').and_then(|(a, b)| {
        Some((
            a.trim().parse::<usize>().ok()?,
            b.trim().parse::<usize>().ok()?,
        ))
    });
    let Some((start, end)) = parsed else {
        return with_headers(message(400, "Content-Range is malformed"), &h);
    };
    if start != stored || body.is_empty() || end + 1 != start + body.len() {
        return with_headers(StatusCode::RANGE_NOT_SATISFIABLE.into_response(), &h);
    }
    if let Some(limit) = settings.trace_size_limit {
        if stored + body.len() > limit {
            job.view.state = JobState::Failed;
            job.view.failure_reason = Some("trace_size_exceeded".into());
            return with_headers(
                message(403, "403 Forbidden - trace size exceeded"),
                &job_headers(job.view.state, &settings),
            );
        }
    }
    job.view.trace.extend_from_slice(&body);
    job.view.trace_len = job.view.trace.len();
    let mut h = job_headers(job.view.state, &settings);
    h.push(("range", format!("0-{}", job.view.trace.len())));
    with_headers(StatusCode::ACCEPTED.into_response(), &h)
}

#[derive(Deserialize, Default)]
struct ArtifactQuery {
    artifact_format: Option<String>,
    artifact_type: Option<String>,
    expire_in: Option<String>,
    direct_download: Option<String>,
}

async fn upload_artifacts(
    State(inner): Sim,
    Path(id): Path<i64>,
    Query(q): Query<ArtifactQuery>,
    headers: HeaderMap,
    mut multipart: Multipart,
) -> Response {
    let limit = {
        let s = inner.lock();
        let Some(job) = s.jobs.get(&id) else {
            return message(404, "404 Not Found");
        };
        if header(&headers, "job-token") != Some(job.view.token.as_str())
            || !job.view.state.is_processing()
        {
            return message(403, "403 Forbidden");
        }
        s.settings.artifact_size_limit
    };
    let mut file: Option<(String, Vec<u8>)> = None;
    let mut fields = std::collections::HashMap::new();
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => return message(400, &format!("multipart: {e}")),
        };
        let name = field.name().unwrap_or("").to_owned();
        if name == "file" {
            let filename = field.file_name().unwrap_or("").to_owned();
            match field.bytes().await {
                Ok(b) => {
                    if b.len() > limit {
                        return message(413, "413 Request Entity Too Large");
                    }
                    file = Some((filename, b.to_vec()));
                }
                Err(e) => return message(400, &format!("multipart: {e}")),
            }
        } else if let Ok(text) = field.text().await {
            fields.insert(name, text);
        }
    }
    let Some((filename, bytes)) = file else {
        return message(400, "file is missing");
    };
    let from_query =
        q.artifact_format.is_some() || q.artifact_type.is_some() || q.expire_in.is_some();
    let from_fields = ["artifact_format", "artifact_type", "expire_in"]
        .iter()
        .any(|k| fields.contains_key(*k));
    let pick = |q: Option<String>, k: &str, default: &str| {
        q.or_else(|| fields.get(k).cloned())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| default.to_owned())
    };
    let artifact = Artifact {
        filename,
        format: pick(q.artifact_format, "artifact_format", "zip"),
        artifact_type: pick(q.artifact_type, "artifact_type", "archive"),
        expire_in: pick(q.expire_in, "expire_in", ""),
        params_from: if from_query {
            "query"
        } else if from_fields {
            "multipart"
        } else {
            "default"
        }
        .into(),
        bytes,
    };
    let mut s = inner.lock();
    if let Some(job) = s.jobs.get_mut(&id) {
        job.view.artifacts.push(artifact);
    }
    (StatusCode::CREATED, Json(json!({}))).into_response()
}

fn archive_of(inner: &Inner, id: i64, token: Option<&str>) -> Result<Vec<u8>, (u16, &'static str)> {
    let s = inner.lock();
    let Some(job) = s.jobs.get(&id) else {
        return Err((404, "404 Not Found"));
    };
    if token != Some(job.view.token.as_str()) {
        return Err((403, "403 Forbidden"));
    }
    job.view
        .artifacts
        .iter()
        .find(|a| a.artifact_type == "archive")
        .map(|a| a.bytes.clone())
        .ok_or((404, "404 Not Found"))
}

async fn download_artifacts(
    State(inner): Sim,
    Path(id): Path<i64>,
    Query(q): Query<ArtifactQuery>,
    headers: HeaderMap,
) -> Response {
    let token = header(&headers, "job-token");
    let bytes = match archive_of(&inner, id, token) {
        Ok(b) => b,
        Err((code, text)) => return message(code, text),
    };
    if q.direct_download.as_deref() == Some("true") {
        let base = inner.base_url.lock().map(|u| u.clone()).unwrap_or_default();
        let location = format!(
            "{base}/_sim/artifacts/{id}/download?token={}",
            token.unwrap_or("")
        );
        return with_headers(StatusCode::FOUND.into_response(), &[("location", location)]);
    }
    (StatusCode::OK, bytes).into_response()
}

#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

async fn direct_download(
    State(inner): Sim,
    Path(id): Path<i64>,
    Query(q): Query<TokenQuery>,
) -> Response {
    match archive_of(&inner, id, q.token.as_deref()) {
        Ok(b) => (StatusCode::OK, b).into_response(),
        Err((code, text)) => message(code, text),
    }
}

fn credentials_json(id: i64, token: &str) -> Value {
    json!({"id": id, "token": token, "token_expires_at": null})
}

async fn register(State(inner): Sim, body: Bytes) -> Response {
    let Some(v) = body_json(&body) else {
        return message(400, "body is not JSON");
    };
    let token = body_token(&v).unwrap_or_default();
    let mut s = inner.lock();
    if !s.registration_tokens.contains(&token) {
        return message(403, "403 Forbidden");
    }
    let id = s.next_runner_id;
    s.next_runner_id += 1;
    let new_token = random_token("", 20);
    s.runners.insert(
        new_token.clone(),
        Runner {
            id,
            description: v
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            tags: v
                .get("tag_list")
                .and_then(Value::as_str)
                .unwrap_or("")
                .split(',')
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect(),
            paused: v.get("paused").and_then(Value::as_bool).unwrap_or(false),
            managers: Default::default(),
        },
    );
    (StatusCode::CREATED, Json(credentials_json(id, &new_token))).into_response()
}

async fn verify(State(inner): Sim, headers: HeaderMap, body: Bytes) -> Response {
    let Some(v) = body_json(&body) else {
        return message(400, "body is not JSON");
    };
    let token = body_token(&v).unwrap_or_default();
    if header(&headers, "runner-token") != Some(token.as_str()) {
        return message(403, "RUNNER-TOKEN header and body token differ");
    }
    let system_id = v.get("system_id").and_then(Value::as_str).unwrap_or("");
    let mut s = inner.lock();
    let Some(runner) = s.runners.get_mut(&token) else {
        return message(403, "403 Forbidden");
    };
    if !system_id.is_empty() {
        runner
            .managers
            .entry(system_id.to_owned())
            .or_default()
            .features = v.pointer("/info/features").cloned().unwrap_or(Value::Null);
    }
    (StatusCode::OK, Json(credentials_json(runner.id, &token))).into_response()
}

async fn unregister(State(inner): Sim, body: Bytes) -> Response {
    let token = body_json(&body)
        .and_then(|v| body_token(&v))
        .unwrap_or_default();
    let mut s = inner.lock();
    if s.runners.remove(&token).is_none() {
        return message(403, "403 Forbidden");
    }
    StatusCode::NO_CONTENT.into_response()
}

async fn unregister_manager(State(inner): Sim, body: Bytes) -> Response {
    let Some(v) = body_json(&body) else {
        return message(400, "body is not JSON");
    };
    let token = body_token(&v).unwrap_or_default();
    let system_id = v.get("system_id").and_then(Value::as_str).unwrap_or("");
    let mut s = inner.lock();
    let Some(runner) = s.runners.get_mut(&token) else {
        return message(403, "403 Forbidden");
    };
    if runner.managers.remove(system_id).is_none() {
        return message(404, "404 Runner manager not found");
    }
    StatusCode::NO_CONTENT.into_response()
}

fn rotate(s: &mut crate::State, old: &str) -> Option<String> {
    let runner = s.runners.remove(old)?;
    let prefix = if old.starts_with("glrt-") {
        "glrt-"
    } else {
        ""
    };
    let new = random_token(prefix, 20);
    s.runners.insert(new.clone(), runner);
    Some(new)
}

async fn reset_token(State(inner): Sim, body: Bytes) -> Response {
    let token = body_json(&body)
        .and_then(|v| body_token(&v))
        .unwrap_or_default();
    let mut s = inner.lock();
    match rotate(&mut s, &token) {
        Some(new) => (
            StatusCode::CREATED,
            Json(json!({"token": new, "token_expires_at": null})),
        )
            .into_response(),
        None => message(403, "403 Forbidden"),
    }
}

async fn reset_token_by_id(State(inner): Sim, Path(id): Path<i64>, headers: HeaderMap) -> Response {
    let mut s = inner.lock();
    let pat = header(&headers, "private-token").unwrap_or("");
    if !s.pats.contains(pat) {
        return message(403, "403 Forbidden");
    }
    let Some(old) = s
        .runners
        .iter()
        .find(|(_, r)| r.id == id)
        .map(|(t, _)| t.clone())
    else {
        return message(404, "404 Runner Not Found");
    };
    match rotate(&mut s, &old) {
        Some(new) => (
            StatusCode::CREATED,
            Json(json!({"token": new, "token_expires_at": null})),
        )
            .into_response(),
        None => message(404, "404 Runner Not Found"),
    }
}

async fn repo_file(State(inner): Sim, Path(path): Path<String>) -> Response {
    if path
        .split('/')
        .any(|c| c == ".." || c.is_empty() || c.starts_with(".work-"))
    {
        return message(404, "not found");
    }
    match tokio::fs::read(inner.repo_dir.join(&path)).await {
        Ok(bytes) => (StatusCode::OK, bytes).into_response(),
        Err(_) => message(404, "not found"),
    }
}

// ---- the inspection API, for a simulator run as a process ----

#[derive(Deserialize)]
struct TokenBody {
    token: String,
}

async fn sim_add_runner(State(inner): Sim, Json(b): Json<TokenBody>) -> Response {
    let mut s = inner.lock();
    let id = s.next_runner_id;
    s.next_runner_id += 1;
    s.runners.insert(
        b.token,
        Runner {
            id,
            description: String::new(),
            tags: Vec::new(),
            paused: false,
            managers: Default::default(),
        },
    );
    Json(json!({"id": id})).into_response()
}

async fn sim_add_registration_token(State(inner): Sim, Json(b): Json<TokenBody>) -> Response {
    inner.lock().registration_tokens.insert(b.token);
    StatusCode::NO_CONTENT.into_response()
}

#[derive(Deserialize)]
#[serde(default)]
struct EnqueueBody {
    name: String,
    script: Vec<String>,
    after_script: Vec<String>,
    image: Option<String>,
    variables: Vec<(String, String)>,
    timeout: i64,
    runner: Option<String>,
}

impl Default for EnqueueBody {
    fn default() -> Self {
        let d = JobSpec::default();
        EnqueueBody {
            name: d.name,
            script: d.script,
            after_script: Vec::new(),
            image: d.image,
            variables: Vec::new(),
            timeout: d.timeout,
            runner: None,
        }
    }
}

async fn sim_enqueue(State(inner): Sim, Json(b): Json<EnqueueBody>) -> Response {
    let mut spec = JobSpec::script(b.script)
        .name(&b.name)
        .image(b.image.as_deref())
        .timeout(b.timeout)
        .after_script(b.after_script);
    for (k, v) in b.variables {
        spec = spec.variable(&k, &v);
    }
    let handle = crate::Handle(inner);
    let id = handle.enqueue(spec, b.runner);
    Json(json!({"id": id})).into_response()
}

async fn sim_jobs(State(inner): Sim) -> Response {
    let jobs: Vec<_> = inner.lock().jobs.values().map(|j| j.view.clone()).collect();
    Json(jobs).into_response()
}

async fn sim_trace(State(inner): Sim, Path(id): Path<i64>) -> Response {
    match inner.lock().jobs.get(&id) {
        Some(j) => (StatusCode::OK, j.view.trace.clone()).into_response(),
        None => message(404, "no such job"),
    }
}

async fn sim_cancel(State(inner): Sim, Path(id): Path<i64>) -> Response {
    crate::Handle(inner).cancel(id);
    StatusCode::NO_CONTENT.into_response()
}

async fn sim_requests(State(inner): Sim) -> Response {
    Json(inner.lock().requests.clone()).into_response()
}

async fn sim_fault(State(inner): Sim, Json(f): Json<Fault>) -> Response {
    inner.lock().faults.push(f);
    StatusCode::NO_CONTENT.into_response()
}

async fn sim_settings(State(inner): Sim, Json(settings): Json<Settings>) -> Response {
    inner.lock().settings = settings;
    StatusCode::NO_CONTENT.into_response()
}
