//! Connecting to a machine's Docker Engine: a unix socket, plain TCP, or TCP with TLS using the
//! machine's `ca.pem`/`cert.pem`/`key.pem` (trusting that CA only, as upstream), then API
//! version negotiation and the `info` facts the executor needs (OS type, architecture).
//!
//! `DOCKER_HOST` / `DOCKER_CERT_PATH` / `DOCKER_TLS_VERIFY` semantics follow the Docker CLI:
//! an endpoint without a host falls back to the environment, then to the local socket. One
//! client serves one job for its whole life, cleanup included.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bollard::{Docker, API_DEFAULT_VERSION};

/// The local Engine's socket.
pub const DEFAULT_SOCKET: &str = "unix:///var/run/docker.sock";

/// How long bollard waits for response headers (long streams are not cut by it).
const CLIENT_TIMEOUT_SECS: u64 = 300;

/// How long connecting may take: TCP connect, TLS handshake and the Engine's answers to the
/// version and `info` requests together. A healthy Engine, even a docker-machine VM across a
/// WAN, answers in well under a second; one that accepts the connection and then says nothing
/// is reported after this long (per preparation attempt) instead of holding the job until its
/// timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a job's Engine is (what a provider returns for a machine).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DockerEndpoint {
    /// `unix:///path`, `tcp://host:port`, `http://…` or `https://…`; `None` uses the environment.
    pub host: Option<String>,
    /// Directory holding `ca.pem`, `cert.pem` and `key.pem`.
    pub tls_cert_path: Option<PathBuf>,
    /// Whether to use TLS (certificates are ignored without it, as upstream).
    pub tls_verify: bool,
    /// Reach the Engine over SSH instead (`docker system dial-stdio` on the machine); `host`
    /// and the TLS fields are then unused.
    pub ssh: Option<super::ssh::SshTarget>,
}

impl DockerEndpoint {
    /// A runner's own `[runners.docker] host` (with its `tls_cert_path` and `tls_verify`), as
    /// upstream's docker executor uses it; `None` when the runner sets no host.
    pub fn configured(docker: Option<&crate::config::model::DockerConfig>) -> Option<Self> {
        let d = docker.filter(|d| !d.host.is_empty())?;
        Some(DockerEndpoint {
            host: Some(d.host.clone()),
            tls_cert_path: (!d.tls_cert_path.is_empty()).then(|| PathBuf::from(&d.tls_cert_path)),
            tls_verify: d.tls_verify,
            ssh: None,
        })
    }

    /// The endpoint of a machine a provider hands out over SSH.
    pub fn over_ssh(e: &drover_protocol::SshEndpoint) -> Self {
        let path = |p: &Option<String>| p.as_deref().filter(|p| !p.is_empty()).map(PathBuf::from);
        DockerEndpoint {
            ssh: Some(super::ssh::SshTarget {
                address: e.address.clone(),
                username: e.username.clone(),
                key_path: path(&e.key_path),
                key: e.key.clone().filter(|k| !k.0.is_empty()),
                host_key: e.host_key.clone().filter(|k| !k.is_empty()),
                known_hosts: path(&e.known_hosts),
            }),
            ..Default::default()
        }
    }

    /// The endpoint from `DOCKER_HOST`, `DOCKER_CERT_PATH` and `DOCKER_TLS_VERIFY`.
    pub fn from_env() -> Self {
        let host = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty());
        let tls_cert_path = std::env::var_os("DOCKER_CERT_PATH")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        let tls_verify = std::env::var("DOCKER_TLS_VERIFY")
            .map(|v| !v.is_empty() && v != "0" && v != "false")
            .unwrap_or(false);
        DockerEndpoint {
            host,
            tls_cert_path,
            tls_verify,
            ssh: None,
        }
    }

    /// The endpoint with an empty host filled from the environment.
    pub fn resolved(&self) -> Self {
        if self.ssh.is_some() {
            return self.clone();
        }
        match self.host.as_deref().filter(|h| !h.is_empty()) {
            Some(_) => self.clone(),
            None => {
                let env = DockerEndpoint::from_env();
                if env.host.is_some() {
                    env
                } else {
                    DockerEndpoint {
                        host: Some(DEFAULT_SOCKET.to_string()),
                        ..Default::default()
                    }
                }
            }
        }
    }
}

/// Why the Engine could not be reached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The host is not a supported URL.
    #[error("docker host {0:?} is not supported: use unix:///path, tcp://host:port, http:// or https://")]
    UnsupportedHost(String),
    /// TLS is on but no certificate directory was given.
    #[error("TLS verification is on for {0:?} but no certificate directory was given (--tls-cert-path / DOCKER_CERT_PATH)")]
    NoCertPath(String),
    /// A certificate file could not be read or parsed.
    #[error("TLS certificate {path}: {message}")]
    Certificate {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The TLS configuration was rejected.
    #[error("TLS configuration: {0}")]
    Tls(String),
    /// The Engine did not answer.
    #[error("cannot reach the Docker Engine at {host}: {source}; is it running and reachable?")]
    Unreachable {
        /// The host.
        host: String,
        /// Bollard's error.
        #[source]
        source: bollard::errors::Error,
    },
    /// The Engine accepted the connection but did not answer in time.
    #[error("the Docker Engine at {host} did not answer within {}s (connection, TLS handshake or first response); check that the daemon on the machine is running and not wedged", after.as_secs())]
    NoAnswer {
        /// The host.
        host: String,
        /// How long drover waited.
        after: Duration,
    },
    /// The SSH connection could not be made (unreachable, host key, authentication).
    #[error(transparent)]
    Ssh(#[from] super::ssh::SshError),
    /// The Engine's OS is not one the executor supports.
    #[error("the Docker Engine at {host} runs {os:?}; only linux is supported")]
    UnsupportedOs {
        /// The host.
        host: String,
        /// `info.OSType`.
        os: String,
    },
}

/// A connected Engine and the facts read from it.
#[derive(Debug, Clone)]
pub struct Engine {
    /// The client.
    pub docker: Docker,
    /// The host it talks to.
    pub host: String,
    /// `info.OSType`.
    pub os_type: String,
    /// `info.Architecture` (`x86_64`, `aarch64`, …).
    pub architecture: String,
    /// Negotiated API version (`1.41`).
    pub api_version: String,
}

/// Connects, negotiates the API version and reads `info`.
pub async fn connect(endpoint: &DockerEndpoint) -> Result<Engine, ConnectError> {
    let ep = endpoint.resolved();
    let host = match &ep.ssh {
        Some(t) => t.display(),
        None => ep
            .host
            .clone()
            .unwrap_or_else(|| DEFAULT_SOCKET.to_string()),
    };
    let unreachable = |source| ConnectError::Unreachable {
        host: host.clone(),
        source,
    };
    let handshake = async {
        let docker = match &ep.ssh {
            Some(t) => ssh_client(t).await?,
            None => client(&ep, &host)?,
        };
        let docker = docker.negotiate_version().await.map_err(unreachable)?;
        let info = docker.info().await.map_err(unreachable)?;
        Ok::<_, ConnectError>((docker, info))
    };
    let (docker, info) = tokio::time::timeout(CONNECT_TIMEOUT, handshake)
        .await
        .map_err(|_| ConnectError::NoAnswer {
            host: host.clone(),
            after: CONNECT_TIMEOUT,
        })??;
    let os_type = info.os_type.unwrap_or_default();
    if !os_type.is_empty() && os_type != "linux" {
        return Err(ConnectError::UnsupportedOs { host, os: os_type });
    }
    let v = docker.client_version();
    Ok(Engine {
        api_version: format!("{}.{}", v.major_version, v.minor_version),
        docker,
        host,
        os_type,
        architecture: info.architecture.unwrap_or_default(),
    })
}

fn client(ep: &DockerEndpoint, host: &str) -> Result<Docker, ConnectError> {
    let unreachable = |source| ConnectError::Unreachable {
        host: host.to_string(),
        source,
    };
    if let Some(path) = host.strip_prefix("unix://") {
        return Docker::connect_with_unix(path, CLIENT_TIMEOUT_SECS, API_DEFAULT_VERSION)
            .map_err(unreachable);
    }
    let addr = ["tcp://", "http://", "https://"]
        .iter()
        .find_map(|p| host.strip_prefix(p))
        .ok_or_else(|| ConnectError::UnsupportedHost(host.to_string()))?;
    let addr = addr.trim_end_matches('/');
    if addr.is_empty() {
        return Err(ConnectError::UnsupportedHost(host.to_string()));
    }
    if !ep.tls_verify {
        return Docker::connect_with_http(
            &format!("http://{addr}"),
            CLIENT_TIMEOUT_SECS,
            API_DEFAULT_VERSION,
        )
        .map_err(unreachable);
    }
    let dir = ep
        .tls_cert_path
        .as_deref()
        .ok_or_else(|| ConnectError::NoCertPath(host.to_string()))?;
    let config = tls_config(dir)?;
    tls_client(config, addr).map_err(unreachable)
}

/// Opens the SSH session (blocking work on the blocking pool) and builds a client over it.
async fn ssh_client(t: &super::ssh::SshTarget) -> Result<Docker, ConnectError> {
    let target = t.clone();
    let session =
        tokio::task::spawn_blocking(move || super::ssh::connect_blocking(&target, CONNECT_TIMEOUT))
            .await
            .map_err(|e| {
                ConnectError::Ssh(super::ssh::SshError::Connect {
                    target: t.display(),
                    message: format!("the connecting task failed: {e}"),
                })
            })??;
    super::ssh::docker_client(session, CLIENT_TIMEOUT_SECS).map_err(|source| {
        ConnectError::Unreachable {
            host: t.display(),
            source,
        }
    })
}

fn read_pem(path: &Path) -> Result<Vec<u8>, ConnectError> {
    std::fs::read(path).map_err(|e| ConnectError::Certificate {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// A rustls client configuration trusting only `<dir>/ca.pem`, authenticating with
/// `<dir>/cert.pem` and `<dir>/key.pem`, TLS ≥ 1.2.
pub fn tls_config(dir: &Path) -> Result<rustls::ClientConfig, ConnectError> {
    let bad = |path: &Path, message: String| ConnectError::Certificate {
        path: path.to_path_buf(),
        message,
    };
    let ca_path = dir.join("ca.pem");
    let cert_path = dir.join("cert.pem");
    let key_path = dir.join("key.pem");
    let ca = read_pem(&ca_path)?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut ca.as_slice()) {
        let cert = cert.map_err(|e| bad(&ca_path, e.to_string()))?;
        roots.add(cert).map_err(|e| bad(&ca_path, e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(bad(&ca_path, "no certificate found".into()));
    }
    let cert_pem = read_pem(&cert_path)?;
    let certs = rustls_pemfile::certs(&mut cert_pem.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&cert_path, e.to_string()))?;
    if certs.is_empty() {
        return Err(bad(&cert_path, "no certificate found".into()));
    }
    let key_pem = read_pem(&key_path)?;
    let key = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .map_err(|e| bad(&key_path, e.to_string()))?
        .ok_or_else(|| bad(&key_path, "no private key found".into()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConnectError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(|e| ConnectError::Tls(e.to_string()))
}

/// Bollard's request body type.
pub(crate) type BollardBody = <bollard::BollardRequest as RequestBody>::Body;

/// Names the body type of a request (bollard does not export its own).
pub trait RequestBody {
    /// The body.
    type Body;
}

impl<B> RequestBody for http::Request<B> {
    type Body = B;
}

fn tls_client(config: rustls::ClientConfig, addr: &str) -> Result<Docker, bollard::errors::Error> {
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .wrap_connector(http);
    let client: Client<_, BollardBody> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build(https);
    custom_transport(client, &format!("https://{addr}"), CLIENT_TIMEOUT_SECS)
}

/// A bollard client sending every request through `client` (its connector decides how bytes
/// reach the Engine), addressed as `addr`.
pub(crate) fn custom_transport<C>(
    client: hyper_util::client::legacy::Client<C, BollardBody>,
    addr: &str,
    timeout_secs: u64,
) -> Result<Docker, bollard::errors::Error>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    let client = Arc::new(client);
    Docker::connect_with_custom_transport(
        move |req: bollard::BollardRequest| {
            let client = Arc::clone(&client);
            async move {
                client
                    .request(req)
                    .await
                    .map_err(bollard::errors::Error::from)
            }
        },
        Some(addr.to_string()),
        timeout_secs,
        API_DEFAULT_VERSION,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_hosts_are_rejected() {
        let ep = DockerEndpoint {
            host: Some("ssh://x".into()),
            ..Default::default()
        };
        assert!(matches!(
            client(&ep, "ssh://x"),
            Err(ConnectError::UnsupportedHost(_))
        ));
    }

    #[test]
    fn missing_certificates_are_reported_with_their_path() {
        let dir = tempfile::tempdir().unwrap();
        let err = tls_config(dir.path()).unwrap_err();
        assert!(err.to_string().contains("ca.pem"), "{err}");
        let ep = DockerEndpoint {
            host: Some("tcp://127.0.0.1:2376".into()),
            tls_cert_path: None,
            tls_verify: true,
            ssh: None,
        };
        assert!(matches!(
            client(&ep, "tcp://127.0.0.1:2376"),
            Err(ConnectError::NoCertPath(_))
        ));
    }
}
