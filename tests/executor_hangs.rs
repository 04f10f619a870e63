//! A Docker endpoint that accepts TCP connections but never answers (a wedged daemon, a
//! firewall that black-holes after the handshake) must give a prompt system failure naming the
//! endpoint, over plain TCP and over TLS, not a wait as long as the job's timeout.

mod test_certs;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use drover::executor::RunnerSettings;
use drover::executor::{self, DockerEndpoint, JobControl, JobError, JobRequest, MemorySink};
use drover::job::JobPayload;

/// Accepts every connection and keeps it open without reading or writing a byte.
fn silent_listener() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            held.push(s);
        }
    });
    port
}

/// What the test allows at most; drover's own bound is well below it.
const TEST_CAP: Duration = Duration::from_secs(75);

async fn run_against(endpoint: DockerEndpoint) -> (Result<(), JobError>, Duration, String) {
    let payload = JobPayload::from_json(
        r#"{"id": 7, "token": "hang-test-job-token", "runner_info": {"timeout": 3600},
            "steps": [{"name": "script", "script": ["true"]}]}"#,
    )
    .unwrap();
    let mut runner = RunnerSettings {
        name: "hang".into(),
        executor: "docker".into(),
        ..Default::default()
    };
    runner.docker.image = "alpine:3".into();
    let mut sink = MemorySink::default();
    let req = JobRequest {
        payload: &payload,
        runner: &runner,
        endpoint: &endpoint,
        machine_name: None,
        slot: Default::default(),
    };
    let started = Instant::now();
    let result = tokio::time::timeout(
        TEST_CAP,
        executor::run_job(req, &mut sink, JobControl::default()),
    )
    .await
    .unwrap_or_else(|_| panic!("still waiting after {TEST_CAP:?}: {}", sink.text()));
    (result, started.elapsed(), sink.text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_endpoint_is_a_prompt_system_failure() {
    let plain_port = silent_listener();
    let tls_port = silent_listener();
    let dir = tempfile::tempdir().unwrap();
    test_certs::make_ca(dir.path(), "ca");
    test_certs::leaf(
        dir.path(),
        "ca",
        "key.pem",
        "cert.pem",
        "extendedKeyUsage=clientAuth\n",
    );
    let plain = DockerEndpoint {
        host: Some(format!("tcp://127.0.0.1:{plain_port}")),
        ..Default::default()
    };
    let tls = DockerEndpoint {
        host: Some(format!("tcp://127.0.0.1:{tls_port}")),
        tls_cert_path: Some(dir.path().to_path_buf()),
        tls_verify: true,
        ssh: None,
    };
    let (a, b) = tokio::join!(run_against(plain), run_against(tls));
    for ((result, took, trace), port) in [(a, plain_port), (b, tls_port)] {
        let e = match result {
            Err(JobError::System(e)) => e.to_string(),
            other => panic!("expected a system failure, got {other:?}\n{trace}"),
        };
        assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
        assert!(e.contains("did not answer"), "{e}");
        assert!(
            !trace.contains("timed out") && !trace.contains("execution took longer"),
            "{trace}"
        );
        assert!(took < Duration::from_secs(60), "took {took:?}");
    }
}
