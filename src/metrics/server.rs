//! The HTTP server on `listen_address` / `--listen-address` (gitlab-api.md §7.7, metrics.md):
//!
//! | route | answer |
//! |---|---|
//! | `GET`/`HEAD /metrics` | the Prometheus text exposition of [`Metrics`]; other methods get 405 |
//! | `/health/ready` | `200 ready` once the manager said [`Readiness::set_ready`], else `503 not ready` |
//! | `/debug/jobs/list` | `X-List-Version: 2`, one `url=… state=… stage=… executor_stage=… duration=…` line per running job |
//! | anything else | 404, including upstream's Go-specific `/debug/process/state` and `/debug/pprof/*` |
//!
//! There is no authentication, as upstream: do not expose the address publicly.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::Metrics;

/// The port used when the address names none.
pub const DEFAULT_PORT: u16 = 9252;

/// How long in-flight requests may take to finish after shutdown was asked for.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Why the server cannot start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The address does not parse.
    #[error("listen address {address:?}: {reason}")]
    Address {
        /// The address as given.
        address: String,
        /// What is wrong and what to write instead.
        reason: String,
    },
    /// Binding failed (port taken, no permission, unknown host).
    #[error("cannot listen on {address} for metrics: {source}; free the port or change listen_address in config.toml or --listen-address")]
    Bind {
        /// The address.
        address: String,
        /// The system's error.
        source: std::io::Error,
    },
}

/// The address the server listens on, parsed as upstream does: `host:port`, `:port` (every
/// interface), `[v6]:port`, and a missing port means [`DEFAULT_PORT`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenAddress {
    /// The host name or IP (without brackets); empty for every interface.
    pub host: String,
    /// The TCP port (0: any free port).
    pub port: u16,
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// The address to serve on: `--listen-address` (or `LISTEN_ADDRESS`) when set and non-empty,
/// else the config's `listen_address`; `None` when both are empty (no server, as upstream).
pub fn effective_listen_address<'a>(cli: Option<&'a str>, config: &'a str) -> Option<&'a str> {
    match cli {
        Some(a) if !a.is_empty() => Some(a),
        _ if !config.is_empty() => Some(config),
        _ => None,
    }
}

impl ListenAddress {
    /// Parses `address` as Go's `net.SplitHostPort` does, with a missing port meaning 9252.
    /// IPv6 addresses need brackets (`[::1]:9252`), as in gitlab-runner.
    pub fn parse(address: &str) -> Result<ListenAddress, ServerError> {
        let err = |reason: &str| ServerError::Address {
            address: address.to_string(),
            reason: reason.to_string(),
        };
        let (host, port) = if let Some(rest) = address.strip_prefix('[') {
            let Some((host, after)) = rest.split_once(']') else {
                return Err(err("missing ']' after an IPv6 address: write [::1]:9252"));
            };
            if host.contains(['[', ']']) {
                return Err(err("unexpected bracket: write [::1]:9252"));
            }
            match after {
                "" => (host, None),
                _ => match after.strip_prefix(':') {
                    Some(p) => (host, Some(p)),
                    None => return Err(err("unexpected text after ']': write [::1]:9252")),
                },
            }
        } else {
            match address.matches(':').count() {
                0 => (address, None),
                1 => {
                    let (h, p) = address.split_once(':').unwrap_or((address, ""));
                    (h, Some(p))
                }
                _ => {
                    return Err(err(
                        "too many colons: put an IPv6 address in brackets, as [::1]:9252",
                    ))
                }
            }
        };
        if host.contains(['[', ']']) {
            return Err(err("unexpected bracket: write [::1]:9252"));
        }
        let port = match port {
            None | Some("") => DEFAULT_PORT,
            Some(p) => p.parse::<u16>().map_err(|_| {
                err(&format!(
                    "port {p:?} is not a number from 0 to 65535: write host:9252"
                ))
            })?,
        };
        Ok(ListenAddress {
            host: host.to_string(),
            port,
        })
    }

    /// Binds a TCP listener: every interface (IPv6 and IPv4, or IPv4 alone where IPv6 is off)
    /// for an empty host, else the host's first address that binds.
    pub async fn bind(&self) -> Result<TcpListener, ServerError> {
        let bind_err = |source| ServerError::Bind {
            address: self.to_string(),
            source,
        };
        if self.host.is_empty() {
            let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), self.port);
            return match TcpListener::bind(v6).await {
                Ok(l) => Ok(l),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(bind_err(e)),
                Err(_) => {
                    let v4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), self.port);
                    TcpListener::bind(v4).await.map_err(bind_err)
                }
            };
        }
        TcpListener::bind((self.host.as_str(), self.port))
            .await
            .map_err(bind_err)
    }
}

/// Whether `/health/ready` answers 200. Cheap to clone; the manager flips it once its loop runs
/// and back when it shuts down.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Not ready yet.
    pub fn new() -> Readiness {
        Readiness::default()
    }

    /// Sets readiness.
    pub fn set_ready(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }

    /// Whether it is ready.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    readiness: Readiness,
}

/// The routes, for tests or for embedding in another server.
pub fn router(metrics: Metrics, readiness: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/health/ready", any(ready_handler))
        .route("/debug/jobs/list", any(jobs_handler))
        .with_state(AppState { metrics, readiness })
}

async fn metrics_handler(State(s): State<AppState>) -> Response {
    match s.metrics.encode_text() {
        Ok(body) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(super::TEXT_CONTENT_TYPE),
            )],
            body,
        )
            .into_response(),
        Err(e) => {
            tracing::error!("metrics: {e}");
            (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
        }
    }
}

async fn ready_handler(State(s): State<AppState>) -> Response {
    if s.readiness.is_ready() {
        (StatusCode::OK, "ready").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response()
    }
}

async fn jobs_handler(State(s): State<AppState>) -> Response {
    let mut body = String::new();
    for job in s.metrics.running_jobs() {
        body.push_str(&job.to_string());
    }
    (
        [
            ("x-list-version", HeaderValue::from_static("2")),
            (
                header::CONTENT_TYPE.as_str(),
                HeaderValue::from_static("text/plain"),
            ),
        ],
        body,
    )
        .into_response()
}

/// Connections served at once. Past it, new connections wait in the kernel's accept queue
/// (holding no descriptor of drover's) until one ends, so held connections can never take
/// the descriptors that jobs and the Docker client need.
pub const MAX_CONNECTIONS: usize = 256;

/// How long a client may take to send a request's headers, from connecting or from the end
/// of its previous answer (an idle keep-alive connection is closed after it too).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The limits of [`serve_with`]; [`Default`] is [`MAX_CONNECTIONS`] and
/// [`HEADER_READ_TIMEOUT`].
#[derive(Debug, Clone, Copy)]
pub struct ServeLimits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Header read (and keep-alive idle) timeout.
    pub header_read_timeout: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            max_connections: MAX_CONNECTIONS,
            header_read_timeout: HEADER_READ_TIMEOUT,
        }
    }
}

/// Serves the routes on `listener` until `shutdown` is cancelled, then lets in-flight requests
/// finish for at most [`SHUTDOWN_GRACE`].
pub async fn serve(
    listener: TcpListener,
    metrics: Metrics,
    readiness: Readiness,
    shutdown: CancellationToken,
) {
    serve_with(
        listener,
        router(metrics, readiness),
        ServeLimits::default(),
        shutdown,
    )
    .await
}

/// Serves `routes` on `listener` within `limits` until `shutdown` is cancelled. Serving never
/// fails: a failed `accept` (out of descriptors, a reset) is logged and retried.
pub async fn serve_with(
    listener: TcpListener,
    routes: Router,
    limits: ServeLimits,
    shutdown: CancellationToken,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;

    let address = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let mut connections = tokio::task::JoinSet::new();
    let mut full_logged = false;
    loop {
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if !full_logged {
                    tracing::warn!(
                        connections = limits.max_connections,
                        "metrics server on {address}: connection limit reached; new connections wait"
                    );
                    full_logged = true;
                }
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => break,
                    },
                }
            }
        };
        let stream = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors or a connection reset before it was taken: wait a
                    // moment and go on, as Go's server does; never stop serving.
                    tracing::warn!("metrics server on {address}: accept failed: {e}; retrying");
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(Duration::from_millis(100)) => {}
                    }
                    continue;
                }
            },
        };
        if slots.available_permits() > 0 {
            full_logged = false;
        }
        let service = TowerToHyperService::new(routes.clone());
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        let stop = shutdown.clone();
        connections.spawn(async move {
            let _slot = slot;
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
        while connections.try_join_next().is_some() {}
    }
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drained).await.is_err() {
        tracing::warn!("metrics server on {address}: requests still open {SHUTDOWN_GRACE:?} after shutdown; closing them");
        connections.abort_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> (String, u16) {
        let a = ListenAddress::parse(s).unwrap();
        (a.host, a.port)
    }

    #[test]
    fn addresses_parse_as_upstream() {
        assert_eq!(parse("localhost"), ("localhost".into(), 9252));
        assert_eq!(parse(":9252"), ("".into(), 9252));
        assert_eq!(parse("0.0.0.0:9000"), ("0.0.0.0".into(), 9000));
        assert_eq!(parse("[::1]:9100"), ("::1".into(), 9100));
        assert_eq!(parse("[::1]"), ("::1".into(), 9252));
        assert_eq!(parse("127.0.0.1:0"), ("127.0.0.1".into(), 0));
        assert_eq!(parse("host:"), ("host".into(), 9252));
        assert_eq!(
            ListenAddress::parse("[::1]:1").unwrap().to_string(),
            "[::1]:1"
        );
        assert_eq!(ListenAddress::parse(":1").unwrap().to_string(), ":1");
    }

    #[test]
    fn bad_addresses_say_what_to_write() {
        for (bad, hint) in [
            ("::1", "brackets"),
            ("[::1", "missing ']'"),
            ("[::1]x", "after ']'"),
            ("host:http", "not a number"),
            ("host:70000", "not a number"),
            ("a]:1", "bracket"),
        ] {
            let e = ListenAddress::parse(bad).unwrap_err().to_string();
            assert!(e.contains(hint), "{bad}: {e}");
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn the_command_line_wins_over_the_config() {
        assert_eq!(effective_listen_address(Some(":1"), ":2"), Some(":1"));
        assert_eq!(effective_listen_address(Some(""), ":2"), Some(":2"));
        assert_eq!(effective_listen_address(None, ":2"), Some(":2"));
        assert_eq!(effective_listen_address(None, ""), None);
    }
}
