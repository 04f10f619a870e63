//! A TLS front for the local Engine, as on a docker-machine VM: client certificates required,
//! a server certificate for the IP 127.0.0.1, relaying to /var/run/docker.sock. Shared by the
//! TLS tests and the prepare bench.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use crate::test_certs::{leaf, make_ca};

/// Makes `ca.pem`, `server-cert.pem`/`server-key.pem` (IP SAN 127.0.0.1) and the client's
/// `cert.pem`/`key.pem` in `dir`.
pub fn make_certs(dir: &Path) {
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
pub async fn tls_front(dir: &Path) -> u16 {
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
