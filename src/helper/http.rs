//! The helper's HTTP client: rustls with the ring provider, trusting the system roots plus the
//! CA chain in `CI_SERVER_TLS_CA_FILE` when the job exports one (GitLab behind a private CA),
//! no redirects followed silently for uploads (the caller decides), and an overall timeout.

use std::sync::Arc;
use std::time::Duration;

/// Builds a client with `timeout` for each whole request.
pub fn client(timeout: Duration) -> Result<reqwest::Client, String> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = std::env::var_os("CI_SERVER_TLS_CA_FILE").filter(|p| !p.is_empty()) {
        let pem = std::fs::read(&path).map_err(|e| {
            format!(
                "reading CI_SERVER_TLS_CA_FILE {}: {e}",
                path.to_string_lossy()
            )
        })?;
        for cert in rustls_pemfile::certs(&mut pem.as_slice()).flatten() {
            let _ = roots.add(cert);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::limited(10))
        .build()
        .map_err(|e| format!("HTTP client setup: {e}"))
}

/// A URL for logs: the query string (which carries presigned credentials) cut off.
pub fn redact(url: &str) -> &str {
    url.split_once('?').map(|(u, _)| u).unwrap_or(url)
}
