//! The executor over TLS, as on a docker-machine VM: a TLS front (client certificates
//! required, certificate for the IP 127.0.0.1) relays to the local Engine's socket. A job runs
//! through it (attach, script on stdin with a TLS half-close, wait), and a certificate
//! directory whose `ca.pem` is another CA is refused (only `ca.pem` is trusted).

mod docker_engine;
mod docker_tls_front;
mod executor_common;
mod test_certs;

use docker_tls_front::{make_certs, tls_front};
use drover::executor::{self, connect, DockerEndpoint, JobControl, JobRequest, MemorySink};
use executor_common::*;

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
