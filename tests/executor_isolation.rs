//! Isolation of `[runners.docker]` options against job-controlled input, on the real Docker
//! Engine:
//!
//! - a job variable used in a `volumes` entry only ever changes the destination: a value with
//!   `:` cannot turn a cache volume into a bind of a host directory (the job is refused, and
//!   the host file never reaches the job log), while a plain value is expanded as upstream does;
//! - `**` inside a path segment of `allowed_images` does not cross `/`: an image under a
//!   deeper path than the rule allows is refused before anything runs.

mod docker_engine;
mod executor_common;

use std::process::Command;

use drover::executor::{FailureReason, JobError};
use executor_common::*;
use serde_json::json;

fn reason(r: &Result<(), JobError>) -> Option<FailureReason> {
    match r {
        Err(JobError::Failed(f)) => Some(f.reason),
        _ => None,
    }
}

#[tokio::test]
async fn a_job_variable_cannot_turn_a_cache_volume_into_a_host_bind() {
    let _guard = engine_test!();
    let host = tempfile::tempdir().unwrap();
    let secret_dir = host.path().join("x");
    std::fs::create_dir_all(&secret_dir).unwrap();
    let marker = format!("HOST-SECRET-{}", std::process::id());
    std::fs::write(secret_dir.join("secret.txt"), &marker).unwrap();

    let mut s = settings("volisolation");
    // A destination-only entry (a cache volume) whose destination uses a job variable.
    s.docker.volumes = vec![
        "/cache".into(),
        format!("{}/$CACHE_SUBDIR", host.path().display()),
    ];
    let job = no_git_job(
        7101,
        7101,
        &["cat /hostsecret/secret.txt || echo no-host-file"],
        json!({"variables": [
            {"key": "CACHE_SUBDIR", "value": "x:/hostsecret", "public": true}
        ]}),
    );
    let ran = run_job(&job, &s).await;
    assert!(
        !ran.trace.contains(&marker),
        "the host file reached the job:\n{}",
        ran.trace
    );
    assert_eq!(
        reason(&ran.result),
        Some(FailureReason::RunnerConfigurationError),
        "{:?}\n{}",
        ran.result,
        ran.trace
    );
    assert!(
        ran.trace.contains("contains ':'"),
        "the refusal says why:\n{}",
        ran.trace
    );

    // A plain value is expanded in the destination as upstream does: the job writes there.
    let job = no_git_job(
        7102,
        7101,
        &["echo hello > /vol-$CACHE_SUBDIR/f && cat /vol-data/f && grep -c ' /vol-data ' /proc/mounts"],
        json!({"variables": [{"key": "CACHE_SUBDIR", "value": "data", "public": true}]}),
    );
    s.docker.volumes = vec!["/cache".into(), "/vol-$CACHE_SUBDIR".into()];
    let ran = run_job(&job, &s).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert!(ran.trace.contains("\nhello\n"), "{}", ran.trace);
    assert_clean_and_remove_reusable(&short_token(&s));
}

#[tokio::test]
async fn a_globstar_inside_a_segment_does_not_cross_slashes() {
    let _guard = engine_test!();
    // A real local image under a deeper path than the rule allows.
    let deep = "drover-test-team/other/evil:1";
    output_of(Command::new("docker").args(["tag", BUILD_IMAGE, deep]));
    let _tag = Tag(deep.to_string());
    let mut s = settings("globseg");
    s.docker.allowed_images = vec!["drover-test-team**".into()];
    let job = no_git_job(
        7201,
        7201,
        &["echo RAN-THE-DISALLOWED-IMAGE"],
        json!({"image": {"name": deep}}),
    );
    let ran = run_job(&job, &s).await;
    assert!(
        !ran.trace.contains("\nRAN-THE-DISALLOWED-IMAGE"),
        "the image ran:\n{}",
        ran.trace
    );
    assert_eq!(
        reason(&ran.result),
        Some(FailureReason::RunnerConfigurationError),
        "{:?}\n{}",
        ran.result,
        ran.trace
    );
    // One segment deep the same rule allows it (`**` there is `*`).
    let shallow = "drover-test-team-ok:1";
    output_of(Command::new("docker").args(["tag", BUILD_IMAGE, shallow]));
    let _tag2 = Tag(shallow.to_string());
    let job = no_git_job(
        7202,
        7201,
        &["echo RAN-THE-ALLOWED-IMAGE"],
        json!({"image": {"name": shallow}}),
    );
    let ran = run_job(&job, &s).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert!(
        ran.trace.contains("\nRAN-THE-ALLOWED-IMAGE"),
        "{}",
        ran.trace
    );
    // The pull manager's lines, as upstream prints them (a local tag has no repo digest).
    for line in [
        "Using helper image:  drover-test-executor-helper:latest  (overridden, default would be  \
         registry.gitlab.com/gitlab-org/gitlab-runner/gitlab-runner-helper:x86_64-v19.4.0 )",
        "Using effective pull policy of [if-not-present] for container \
         drover-test-executor-helper:latest",
        "Using effective pull policy of [if-not-present] for container drover-test-team-ok:1",
    ] {
        assert!(ran.trace.contains(line), "{line}\n{}", ran.trace);
    }
    assert!(
        ran.trace.lines().any(|l| l
            .trim_start_matches("\x1b[0K")
            .starts_with("Using docker image sha256:")
            && l.contains(" for drover-test-team-ok:1 ...")
            && !l.contains("with digest")),
        "{}",
        ran.trace
    );
    assert_clean_and_remove_reusable(&short_token(&s));
}
