//! The CA chain GitLab's certificate was verified with, as gitlab-runner hands it to a job when
//! no CA file is configured (`CI_SERVER_TLS_CA_FILE`, git's `sslCAInfo`): the verified path from
//! GitLab's certificate through the intermediates to the trusted root, as PEM, each certificate
//! once. A GitLab whose private CA the runner host trusts (system store, `SSL_CERT_FILE`) can so
//! be cloned from job containers that do not trust it.
//!
//! [`RecordingVerifier`] wraps rustls' WebPKI verifier, which stays the only judge of the
//! certificate; after it accepts one, the path is rebuilt with webpki against the same roots to
//! learn which root and intermediates it went through, and stored in a [`SeenChain`] the
//! [`super::Client`] shares with the job.

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// The chain of the latest verified handshake of one client (PEM; `None` before any HTTPS
/// handshake).
pub type SeenChain = Arc<Mutex<Option<String>>>;

/// A trusted root: its trust anchor (what webpki's path names) and its certificate (what the
/// job gets).
struct Root {
    subject: Vec<u8>,
    spki: Vec<u8>,
    der: CertificateDer<'static>,
}

/// rustls' WebPKI verifier, also recording the verified chain in `seen`.
pub(crate) struct RecordingVerifier {
    inner: Arc<WebPkiServerVerifier>,
    anchors: Vec<rustls::pki_types::TrustAnchor<'static>>,
    roots: Vec<Root>,
    algorithms: WebPkiSupportedAlgorithms,
    seen: SeenChain,
}

impl std::fmt::Debug for RecordingVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingVerifier")
            .field("roots", &self.roots.len())
            .finish_non_exhaustive()
    }
}

impl RecordingVerifier {
    /// A verifier trusting `roots` (certificates rustls cannot use as anchors are skipped, as
    /// the root store skips them).
    pub(crate) fn new(
        roots: Vec<CertificateDer<'static>>,
        provider: Arc<rustls::crypto::CryptoProvider>,
        seen: SeenChain,
    ) -> Result<RecordingVerifier, String> {
        let mut store = rustls::RootCertStore::empty();
        let mut kept = Vec::new();
        let mut anchors = Vec::new();
        for der in roots {
            let Ok(anchor) = webpki::anchor_from_trusted_cert(&der) else {
                continue;
            };
            let anchor = anchor.to_owned();
            if store.add(der.clone()).is_err() {
                continue;
            }
            kept.push(Root {
                subject: anchor.subject.to_vec(),
                spki: anchor.subject_public_key_info.to_vec(),
                der,
            });
            anchors.push(anchor);
        }
        let algorithms = provider.signature_verification_algorithms;
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider)
            .build()
            .map_err(|e| format!("TLS verifier: {e}"))?;
        Ok(RecordingVerifier {
            inner,
            anchors,
            roots: kept,
            algorithms,
            seen,
        })
    }

    /// The verified path of an accepted certificate: it, the intermediates webpki chose, the
    /// root. When the path cannot be rebuilt (it was just built by rustls), what the server sent.
    fn chain(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Vec<CertificateDer<'static>> {
        let sent = || {
            std::iter::once(end_entity)
                .chain(intermediates)
                .map(|c| c.clone().into_owned())
                .collect::<Vec<_>>()
        };
        let Ok(cert) = webpki::EndEntityCert::try_from(end_entity) else {
            return sent();
        };
        let Ok(path) = cert.verify_for_usage(
            self.algorithms.all,
            &self.anchors,
            intermediates,
            now,
            webpki::KeyUsage::server_auth(),
            None,
            None,
        ) else {
            return sent();
        };
        let mut chain = vec![end_entity.clone().into_owned()];
        chain.extend(
            path.intermediate_certificates()
                .map(|c| c.der().into_owned()),
        );
        let anchor = path.anchor();
        if let Some(root) = self.roots.iter().find(|r| {
            r.subject == anchor.subject.as_ref()
                && r.spki == anchor.subject_public_key_info.as_ref()
        }) {
            chain.push(root.der.clone());
        }
        chain
    }
}

/// Certificates as PEM blocks, each certificate once, without the final newline (upstream's
/// form of the chain).
pub fn pem_chain(certs: &[CertificateDer<'_>]) -> String {
    let mut out = String::new();
    let mut seen: Vec<&[u8]> = Vec::new();
    for cert in certs {
        if seen.contains(&cert.as_ref()) {
            continue;
        }
        seen.push(cert.as_ref());
        let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        out.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
    }
    out.trim_end().to_owned()
}

impl ServerCertVerifier for RecordingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        let pem = pem_chain(&self.chain(end_entity, intermediates, now));
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(pem);
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;

    #[test]
    fn pem_blocks_are_wrapped_deduplicated_and_trimmed() {
        let a = CertificateDer::from(vec![0xAB; 60]);
        let b = CertificateDer::from(vec![1, 2, 3]);
        let pem = pem_chain(&[a.clone(), b.clone(), a.clone()]);
        assert_eq!(pem.matches("BEGIN CERTIFICATE").count(), 2, "{pem}");
        assert!(pem.ends_with("-----END CERTIFICATE-----"), "{pem}");
        let first = pem.lines().nth(1).expect("a base64 line");
        assert_eq!(first.len(), 64, "{pem}");
        let back: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<_, _>>()
            .expect("PEM parses");
        assert_eq!(back, vec![a, b]);
        assert_eq!(pem_chain(&[]), "");
    }
}
