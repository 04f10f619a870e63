//! Artifacts on the real Docker Engine through the GitLab simulator (tests/gitlab-sim), driven
//! by the executor API (`drover run` is not part of this branch): a two-job pipeline where the
//! first job uploads its artifacts (a zip archive and a gzip junit report, from a uid-1000 job)
//! and the second downloads them before its script; an upload over GitLab's size limit (413)
//! fails the job. Nothing is left behind.

mod docker_engine;
mod executor_common;

use drover::executor::JobError;
use drover::gitlab::{Client, ClientSettings, Info, JobRequest, JobRequestOutcome};
use drover::job::JobPayload;
use executor_common::*;
use gitlab_sim::{JobSpec, Sim};
use serde_json::json;

const TOKEN: &str = "glrt-t1_ArtifactsRunner01";

async fn pickup(sim: &Sim) -> JobPayload {
    let client = Client::new(&ClientSettings {
        url: sim.url().into(),
        ..ClientSettings::default()
    })
    .expect("client");
    let runner = drover::config::RunnerConfig {
        executor: "docker".into(),
        ..Default::default()
    };
    let mut info = Info::for_runner(&runner, &Default::default());
    // Without the two-phase commit the job is running as soon as it is handed out (no ack
    // needed before the helper uploads).
    info.features.two_phase_job_commit = false;
    match client
        .request_job(&JobRequest {
            token: TOKEN,
            info: &info,
            system_id: "s_0123456789ab",
            session: None,
            runner_name: "",
        })
        .await
        .outcome
    {
        JobRequestOutcome::Job(job) => *job,
        other => panic!("expected a job, got {other:?}"),
    }
}

fn spec(script: &[&str]) -> JobSpec {
    JobSpec::script(script.iter().copied())
        .variable("GIT_STRATEGY", "none")
        .override_key(
            "image",
            json!({"name": BUILD_IMAGE, "executor_opts": {"docker": {"user": "1000"}}}),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_job_pipeline_passes_artifacts() {
    let _guard = engine_test!();
    let sim = Sim::start().await.expect("simulator");
    sim.add_runner(TOKEN);
    let mut runner = settings("artifacts");
    runner.url = sim.url().into();

    let build = sim.enqueue(
        spec(&[
            "mkdir -p out && echo built-by-job-one > out/result.txt && echo noise > out/skip.log",
            "echo '<testsuite/>' > report.xml",
            // The paths below use a GITLAB_ENV value and a default: the helper expands them.
            "echo OUT_DIR=out >> \"$GITLAB_ENV\"",
        ])
        .name("build")
        .override_key(
            "artifacts",
            json!([
                {"name": "", "paths": ["$OUT_DIR/"], "exclude": ["${LOG_DIR:-out}/*.log"],
                 "when": "on_success",
                 "artifact_type": "archive", "artifact_format": "zip", "expire_in": "1 week"},
                {"name": "", "paths": ["report.xml"], "when": "always",
                 "artifact_type": "junit", "artifact_format": "gzip", "expire_in": "1 week"}
            ]),
        ),
    );
    let payload = pickup(&sim).await;
    assert_eq!(payload.id, build);
    let ran = run_job(&payload, &runner).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert!(
        ran.trace.contains("Uploading artifacts for successful job"),
        "{}",
        ran.trace
    );
    assert!(
        !ran.trace.contains(&payload.token),
        "the job token reached the trace"
    );
    let uploaded = sim.job(build).expect("job").artifacts;
    let kinds: Vec<(String, String, String, String)> = uploaded
        .iter()
        .map(|a| {
            (
                a.filename.clone(),
                a.format.clone(),
                a.artifact_type.clone(),
                a.expire_in.clone(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            (
                "artifacts.zip".into(),
                "zip".into(),
                "archive".into(),
                "1 week".into()
            ),
            (
                "artifacts.gz".into(),
                "gzip".into(),
                "junit".into(),
                "1 week".into()
            ),
        ]
    );

    let test = sim.enqueue(
        spec(&["cat out/result.txt", "ls out", "id -u"])
            .name("test")
            .dependency(build),
    );
    let payload = pickup(&sim).await;
    assert_eq!(payload.id, test);
    let ran = run_job(&payload, &runner).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    let t = &ran.trace;
    assert!(
        t.contains(&format!("Downloading artifacts for build ({build})...")),
        "{t}"
    );
    assert!(t.contains("\nbuilt-by-job-one\n"), "{t}");
    assert!(!t.contains("skip.log"), "excluded file was uploaded:\n{t}");
    assert!(t.contains("\n1000\n"), "{t}");
    assert_eq!(
        sim.requests_to("GET", &format!("/api/v4/jobs/{build}/artifacts"))
            .len(),
        1
    );
    assert_clean_and_remove_reusable(&short_token(&runner));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_large_artifacts_fail_the_job() {
    let _guard = engine_test!();
    let sim = Sim::start().await.expect("simulator");
    sim.add_runner(TOKEN);
    sim.configure(|s| s.artifact_size_limit = 64);
    let mut runner = settings("artifacts413");
    runner.url = sim.url().into();
    sim.enqueue(
        spec(&["head -c 4096 /dev/zero > big.bin"])
            .name("big")
            .artifact("", &["big.bin"], "on_success"),
    );
    let payload = pickup(&sim).await;
    let ran = run_job(&payload, &runner).await;
    match &ran.result {
        Err(JobError::Failed(f)) => assert_eq!(f.exit_code, Some(1), "{f:?}"),
        other => panic!("expected a job failure, got {other:?}\n{}", ran.trace),
    }
    assert!(ran.trace.contains("too large archive"), "{}", ran.trace);
    assert!(sim.job(payload.id).expect("job").artifacts.is_empty());
    assert_clean_and_remove_reusable(&short_token(&runner));
}
