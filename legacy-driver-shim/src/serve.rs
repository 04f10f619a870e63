//! Serving the provider protocol on stdio: read request lines, run each operation in its own
//! task (the shim is `concurrent` and supports `cancel`), write one response line per request.
//!
//! Unknown fields are ignored, unknown operations answered with kind `unsupported`, malformed
//! lines with `bad_request` (or logged, when they carry no id). On EOF every operation still
//! running is cancelled (its docker-machine child killed) and the loop returns once all have
//! answered. Logs go to stderr; stdout carries nothing but responses.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover_protocol::bounded::{read_line, skip_line, Line, MAX_LINE};
use drover_protocol::{
    ErrorKind, Operation, PluginInfo, Request, Response, CAP_CANCEL, CAP_CONCURRENT,
    PROTOCOL_VERSION,
};
use serde::Serialize;
use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::ops::{Ctx, OpResult, Shim};

/// The operations this plugin knows (anything else is `unsupported`).
const KNOWN: [&str; 10] = [
    "handshake",
    "create",
    "list",
    "exists",
    "can_connect",
    "credentials",
    "stop",
    "remove",
    "force_remove",
    "inspect",
];

fn respond<T: Serialize>(id: u64, r: OpResult<T>) -> Response {
    match r {
        Ok(v) => Response::success(id, v),
        Err(e) => Response::failure(id, e.kind, e.message),
    }
}

async fn perform(shim: &Shim, id: u64, op: Operation, ctx: Ctx) -> Response {
    match op {
        Operation::Handshake(h) => {
            if h.protocol_version != PROTOCOL_VERSION {
                return Response::failure(
                    id,
                    ErrorKind::Unsupported,
                    format!(
                        "legacy-driver-shim speaks protocol version {PROTOCOL_VERSION}, not {}",
                        h.protocol_version
                    ),
                );
            }
            shim.set_handshake_prefix(h.name_prefix);
            Response::success(
                id,
                PluginInfo {
                    protocol_version: PROTOCOL_VERSION,
                    name: "legacy-driver-shim".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    capabilities: vec![CAP_CONCURRENT.into(), CAP_CANCEL.into()],
                },
            )
        }
        // The protocol's result is always an object, never null.
        Operation::Create(p) => respond(id, shim.create(&p, &ctx).await.map(|_| Empty {})),
        Operation::List => respond(id, shim.list()),
        Operation::Exists(p) => respond(id, shim.exists(&p.name, &ctx).await),
        Operation::CanConnect(p) => respond(id, shim.can_connect(&p.name, &ctx).await),
        Operation::Credentials(p) => respond(id, shim.credentials(&p.name, &ctx).await),
        Operation::Stop(p) => respond(id, shim.stop(&p.name, &ctx).await.map(|_| Empty {})),
        Operation::Remove(p) => respond(id, shim.remove(&p.name, &ctx).await),
        Operation::ForceRemove(p) => respond(id, shim.force_remove(&p.name, &ctx).await),
        Operation::Inspect(p) => respond(id, shim.inspect(&p.name)),
    }
}

#[derive(Serialize)]
struct Empty {}

/// Serves requests from `input`, writing responses to `output`, until EOF.
pub async fn serve<R, W>(shim: Arc<Shim>, input: R, mut output: W)
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<Response>();
    let writer = tokio::spawn(async move {
        while let Some(resp) = rx.recv().await {
            let Ok(mut line) = serde_json::to_string(&resp) else {
                continue;
            };
            line.push('\n');
            if output.write_all(line.as_bytes()).await.is_err() || output.flush().await.is_err() {
                break;
            }
        }
    });
    let inflight: Arc<Mutex<HashMap<u64, CancellationToken>>> = Arc::default();
    let mut tasks = tokio::task::JoinSet::new();
    let mut input = input;
    while let Ok(Some(line)) = read_line(&mut input, MAX_LINE).await {
        let line = match line {
            Line::Complete(line) => line,
            Line::Cut(_) => {
                let dropped = skip_line(&mut input).await.unwrap_or(0);
                tracing::error!(
                    "ignoring a request line longer than {MAX_LINE} bytes (the limit; {dropped} more bytes cut)"
                );
                continue;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "ignoring a request line that is not JSON");
                continue;
            }
        };
        let op = value.get("op").and_then(|o| o.as_str()).unwrap_or_default();
        if op == "cancel" {
            if let Some(target) = value.get("target").and_then(|t| t.as_u64()) {
                if let Some(tok) = inflight
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&target)
                {
                    tok.cancel();
                }
            }
            continue;
        }
        let Some(id) = value.get("id").and_then(|i| i.as_u64()) else {
            tracing::error!(line = %line, "ignoring a request without an id");
            continue;
        };
        if !KNOWN.contains(&op) {
            let _ = tx.send(Response::failure(
                id,
                ErrorKind::Unsupported,
                format!("legacy-driver-shim does not implement operation {op:?}"),
            ));
            continue;
        }
        let req: Request = match serde_json::from_value(value) {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Response::failure(id, ErrorKind::BadRequest, e.to_string()));
                continue;
            }
        };
        let token = CancellationToken::new();
        inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, token.clone());
        let ctx = Ctx {
            timeout: req.timeout_ms.map(Duration::from_millis),
            cancel: token,
        };
        let shim = shim.clone();
        let tx = tx.clone();
        let inflight = inflight.clone();
        tasks.spawn(async move {
            let resp = perform(&shim, req.id, req.op, ctx).await;
            inflight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&req.id);
            let _ = tx.send(resp);
        });
    }
    for tok in inflight.lock().unwrap_or_else(|p| p.into_inner()).values() {
        tok.cancel();
    }
    while tasks.join_next().await.is_some() {}
    drop(tx);
    let _ = writer.await;
}
