//! The executor over TLS, as on a docker-machine VM: a TLS front (client certificates
//! required, certificate for the IP 127.0.0.1) relays to the local Engine's socket. A job runs
//! through it (attach, script on stdin with a TLS half-close, wait), and a certificate
//! directory whose `ca.pem` is another CA is refused (only `ca.pem` is trusted).

mod docker_engine;
mod executor_common;
mod test_certs;

use std::path::Path;
use std::sync::Arc;

use drover::executor::{self, connect, DockerEndpoint, JobControl, JobRequest, MemorySink};
use executor_common::*;
use test_certs::{leaf, make_ca};

/// Makes `ca.pem`, `server-cert.pem`/`server-key.pem` (IP SAN 127.0.0.1) and the client's
/// `cert.pem`/`key.pem` in `dir`.
fn make_certs(dir: &Path) {
    make_ca(dir, "ca");
    leaf(
        dir,
        "ca",
        "server-key.pem",
        "server-cert.pem",
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    );
    leaf(
        dir,
        "ca",
        "key.pem",
        "cert.pem",
        "extendedKeyUsage=clientAuth\n",
    );
}

fn certs(path: &Path) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    let pem = std::fs::read(path).unwrap();
    rustls_pemfile::certs(&mut pem.as_slice())
        .collect::<Result<_, _>>()
        .unwrap()
}

/// A TLS front for /var/run/docker.sock on 127.0.0.1; returns its port.
async fn tls_front(dir: &Path) -> u16 {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(&dir.join("ca.pem")) {
        roots.add(c).unwrap();
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let key_pem = std::fs::read(dir.join("server-key.pem")).unwrap();
    let key = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .unwrap()
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs(&dir.join("server-cert.pem")), key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut unix) = tokio::net::UnixStream::connect("/var/run/docker.sock").await
                else {
                    return;
                };
                // Propagates each side's EOF (TLS close_notify → socket half-close).
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut unix).await;
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_runs_over_tls_and_only_ca_pem_is_trusted() {
    if !engine_available() {
        return;
    }
    ensure_images();
    let _guard = ENGINE_LOCK.lock().await;
    let dir = tempfile::tempdir().unwrap();
    make_certs(dir.path());
    let port = tls_front(dir.path()).await;
    let endpoint = DockerEndpoint {
        host: Some(format!("tcp://127.0.0.1:{port}")),
        tls_cert_path: Some(dir.path().to_path_buf()),
        tls_verify: true,
        ssh: None,
    };
    let engine = connect::connect(&endpoint).await.expect("connect over TLS");
    assert!(!engine.api_version.is_empty());

    let runner = settings("tls");
    let payload = payload(serde_json::json!({
        "id": 41, "job_info": {"project_id": 701}, "runner_info": {"timeout": 120},
        "variables": [{"key": "GIT_STRATEGY", "value": "none"}],
        "steps": [{"name": "script", "script": ["echo over-tls-$((6*7))"]}]
    }));
    let mut sink = MemorySink::default();
    let req = JobRequest {
        payload: &payload,
        runner: &runner,
        endpoint: &endpoint,
        machine_name: None,
        slot: Default::default(),
    };
    let result = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        executor::run_job(req, &mut sink, JobControl::default()),
    )
    .await
    .expect("the job hung: stdin EOF did not reach the daemon over TLS");
    assert!(result.is_ok(), "{result:?}\n{}", sink.text());
    assert!(
        plain_text(&sink).contains("\nover-tls-42\n"),
        "{}",
        sink.text()
    );
    assert_clean_and_remove_reusable(&short_token(&runner));

    // A directory whose ca.pem is another CA: the daemon's certificate is not trusted, even
    // though the system roots are available.
    let other = tempfile::tempdir().unwrap();
    make_certs(other.path());
    for f in ["cert.pem", "key.pem"] {
        std::fs::copy(dir.path().join(f), other.path().join(f)).unwrap();
    }
    let wrong = DockerEndpoint {
        tls_cert_path: Some(other.path().to_path_buf()),
        ..endpoint.clone()
    };
    let err = connect::connect(&wrong)
        .await
        .expect_err("a foreign CA must be refused");
    assert!(
        matches!(err, connect::ConnectError::Unreachable { .. }),
        "{err}"
    );
}
