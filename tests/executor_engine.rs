//! Executor on the real Docker Engine: git clone and fetch at a sha from a local HTTP git
//! server, scripts with variables and file variables, exit codes and failure reasons,
//! timeouts, graceful cancel and abort, a non-root image user, masking, and no leftovers.

mod docker_engine;
mod executor_common;

use drover::executor::{FailureReason, JobError};
use executor_common::*;
use serde_json::json;

fn failure(r: &Result<(), JobError>) -> (FailureReason, Option<i32>) {
    match r {
        Err(JobError::Failed(f)) => (f.reason, f.exit_code),
        other => panic!("expected a job failure, got {other:?}"),
    }
}

/// The message of a system failure; panics with the trace on any other outcome.
fn system_failure(ran: &Ran) -> String {
    match &ran.result {
        Err(JobError::System(e)) => e.to_string(),
        other => panic!("expected a system failure, got {other:?}\n{}", ran.trace),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clone_then_fetch_at_a_sha() {
    let _guard = engine_test!();
    let token = "glcbt-fetchtesttoken0001";
    let server = GitServer::start(token);
    let first = server.commit("README", "first\n");
    let runner = settings("fetch");
    let job = |sha: &str, strategy: &str, script: Vec<&str>| {
        payload(json!({
            "id": 11, "token": token,
            "job_info": {"project_id": 501, "name": "fetch"},
            "git_info": {"repo_url": server.repo_url(), "sha": sha, "ref": "main", "depth": 0,
                         "refspecs": ["+refs/heads/main:refs/remotes/origin/main"]},
            "runner_info": {"timeout": 120},
            "variables": [{"key": "GIT_STRATEGY", "value": strategy},
                          {"key": "CI_JOB_TOKEN", "value": token, "masked": true}],
            "steps": [{"name": "script", "script": script}]
        }))
    };
    let check_config = "if grep -q gitlab-ci-token .git/config; then echo LEAKED-$((1+1)); fi";
    // A clone at the first commit.
    let ran = run_job(
        &job(
            &first,
            "clone",
            vec!["cat README", "git rev-parse HEAD", check_config],
        ),
        &runner,
    )
    .await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert!(
        ran.trace.contains("Initialized empty Git repository"),
        "{}",
        ran.trace
    );
    assert!(ran.trace.contains(&format!(
        "Checking out {} as detached HEAD (ref is main)...",
        &first[..8]
    )));
    assert!(ran.trace.contains("\nfirst\n"), "{}", ran.trace);
    // FF_TIMESTAMPS is on by default: every line of the log as written has its header, the
    // runner's on stream 00, the job's output on 01.
    let header = regex::Regex::new(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z 0[01][OE][ +]")
        .expect("a valid pattern");
    assert!(ran.raw.lines().all(|l| header.is_match(l)), "{}", ran.raw);
    assert!(ran.raw.contains(" 01O first\n"), "{}", ran.raw);
    assert!(
        ran.raw.contains(" 00O \x1b[0KRunning with drover"),
        "{}",
        ran.raw
    );
    assert!(ran.trace.contains(&first));
    assert!(!ran.trace.contains("LEAKED-2"), "{}", ran.trace);
    assert!(
        !ran.trace.contains(token),
        "the job token reached the trace"
    );

    // fetch: the first run makes the checkout in a reusable volume ...
    let ran = run_job(
        &job(&first, "fetch", vec!["touch untracked-file", "cat README"]),
        &runner,
    )
    .await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    // ... the second fetches a new commit into it.
    let second = server.commit("README", "second\n");
    let ran = run_job(
        &job(
            &second,
            "fetch",
            vec![
                "cat README",
                "git rev-parse HEAD",
                "ls untracked-file || echo cleaned",
                check_config,
            ],
        ),
        &runner,
    )
    .await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    // The checkout in the reusable volume is reused (its .git/config is rebuilt each time, as
    // upstream's clean_git_config does, so "Created fresh repository." is printed again).
    assert!(
        ran.trace.contains("Reinitialized existing Git repository"),
        "the checkout was not reused:\n{}",
        ran.trace
    );
    assert!(ran.trace.contains("\nsecond\n"), "{}", ran.trace);
    assert!(ran.trace.contains(&second));
    assert!(ran.trace.contains("cleaned"));
    assert!(!ran.trace.contains("LEAKED-2"), "{}", ran.trace);
    // And back to the older sha by fetch.
    let ran = run_job(&job(&first, "fetch", vec!["cat README"]), &runner).await;
    assert!(ran.trace.contains("\nfirst\n"), "{}", ran.trace);
    // GIT_DEPTH arrives as git_info.depth: a shallow clone of the tip.
    let mut shallow = job(
        &second,
        "clone",
        vec!["echo commits=$(git rev-list --count HEAD)"],
    );
    shallow.git_info.depth = 1;
    let ran = run_job(&shallow, &runner).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert!(
        ran.trace
            .contains("Fetching changes with git depth set to 1..."),
        "{}",
        ran.trace
    );
    assert!(ran.trace.contains("\ncommits=1\n"), "{}", ran.trace);
    assert_clean_and_remove_reusable(&short_token(&runner));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_variables_and_file_variables() {
    let _guard = engine_test!();
    let runner = settings("vars");
    let ran = run_job(
        &payload(json!({
            "id": 12, "token": "glcbt-varstoken",
            "job_info": {"project_id": 502},
            "git_info": {"repo_url": "http://127.0.0.1:9/g/p.git"},
            "runner_info": {"timeout": 120},
            "variables": [
                {"key": "GIT_STRATEGY", "value": "none"},
                {"key": "GREETING", "value": "hello world"},
                {"key": "NESTED", "value": "[$GREETING]"},
                {"key": "RAW", "value": "$GREETING", "raw": true},
                {"key": "CONFIG_FILE", "value": "key: value\nquote: 'x'\n", "file": true},
                {"key": "REFERS_FILE", "value": "path=$CONFIG_FILE"}
            ],
            "steps": [{"name": "script", "script": [
                "echo \"greeting=$GREETING\"",
                "echo \"nested=$NESTED raw=$RAW\"",
                "if [ -f \"$CONFIG_FILE\" ]; then\n  echo \"file-content:\"\n  cat \"$CONFIG_FILE\"\nfi",
                "echo \"$REFERS_FILE\"",
                "echo FROM_ENV=passed >> \"$GITLAB_ENV\"",
                "echo project=$CI_PROJECT_DIR builds=$CI_BUILDS_DIR status=$CI_JOB_STATUS"
            ]}, {"name": "after_script", "script": ["echo \"after: $FROM_ENV $CI_JOB_STATUS\""]}],
            "features": {"trace_sections": true}
        })),
        &runner,
    )
    .await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    let t = &ran.trace;
    assert!(t.contains("greeting=hello world"), "{t}");
    assert!(t.contains("nested=[hello world] raw=$GREETING"), "{t}");
    assert!(
        t.contains("$ if [ -f \"$CONFIG_FILE\" ]; then # collapsed multi-line command"),
        "{t}"
    );
    assert!(t.contains("file-content:\nkey: value\nquote: 'x'\n"), "{t}");
    assert!(t.contains("path=/builds/g/p.tmp/CONFIG_FILE"), "{t}");
    assert!(
        t.contains("project=/builds/g/p builds=/builds status=running"),
        "{t}"
    );
    assert!(t.contains("after: passed success"), "{t}");
    assert!(
        t.contains("section_start:") && t.contains(":step_script\r\x1b[0K"),
        "{t}"
    );
    assert!(
        t.contains("Running on runner-dtevars-project-502-concurrent-0 via test-machine..."),
        "{t}"
    );
    assert!(t.contains("Job succeeded"));
    assert_clean_and_remove_reusable(&short_token(&runner));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_script_reports_exit_code() {
    let _guard = engine_test!();
    let runner = settings("fail");
    let ran = run_job(
        &payload(json!({
            "id": 13, "job_info": {"project_id": 503},
            "runner_info": {"timeout": 120},
            "variables": [{"key": "GIT_STRATEGY", "value": "empty"}],
            "steps": [{"name": "script", "script": ["echo before", "exit 42", "echo not-reached"]},
                      {"name": "after_script", "script": ["echo \"after status=$CI_JOB_STATUS\"", "exit 7"]}]
        })),
        &runner,
    )
    .await;
    assert_eq!(
        failure(&ran.result),
        (FailureReason::ScriptFailure, Some(42)),
        "{}",
        ran.trace
    );
    assert!(ran.trace.contains("before"));
    assert!(!ran.trace.contains("\nnot-reached"));
    assert!(ran.trace.contains("after status=failed"), "{}", ran.trace);
    assert!(ran
        .trace
        .contains("after_script failed, but job will continue unaffected"));
    assert!(ran.trace.contains("ERROR: Job failed: exit code 42"));
    assert_clean_and_remove_reusable(&short_token(&runner));
}

/// A repository URL that does not parse fails the job before anything runs, as upstream's
/// external git config setup: a system failure, worded so, without the URL (it carries the
/// job token) in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unparsable_repository_url_is_a_system_failure_before_anything_runs() {
    let _guard = engine_test!();
    let runner = settings("badrepo");
    let ran = run_job(
        &payload(json!({
            "id": 19, "token": "glcbt-badrepotoken", "job_info": {"project_id": 519},
            "git_info": {"repo_url": "https://gitlab-ci-token:glcbt-badrepotoken@[invalid/g/p.git",
                         "sha": "0", "ref": "main"},
            "runner_info": {"timeout": 120},
            "variables": [{"key": "GIT_STRATEGY", "value": "fetch"}],
            "steps": [{"name": "script", "script": ["echo should-not-run"]}]
        })),
        &runner,
    )
    .await;
    assert_eq!(
        failure(&ran.result).0,
        FailureReason::RunnerSystemFailure,
        "{}",
        ran.trace
    );
    assert!(
        ran.trace.contains(
            "ERROR: Job failed (system failure): setting up the external git config: the \
             repository URL GitLab sent for the job (git_info.repo_url) is not a valid URL"
        ),
        "{}",
        ran.trace
    );
    assert!(!ran.trace.contains("[invalid"), "{}", ran.trace);
    assert!(!ran.trace.contains("should-not-run"), "{}", ran.trace);
    assert_clean_and_remove_reusable(&short_token(&runner));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_timeout_stops_everything() {
    let _guard = engine_test!();
    let runner = settings("timeout");
    let started = std::time::Instant::now();
    let ran = run_job(
        &payload(json!({
            "id": 14, "job_info": {"project_id": 504},
            "runner_info": {"timeout": 8},
            "variables": [{"key": "GIT_STRATEGY", "value": "none"}],
            "steps": [{"name": "script", "script": ["echo sleeping", "sleep 120"]},
                      {"name": "after_script", "script": ["echo after-script-ran"]}]
        })),
        &runner,
    )
    .await;
    assert_eq!(
        failure(&ran.result).0,
        FailureReason::JobExecutionTimeout,
        "{}",
        ran.trace
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    assert!(!ran.trace.contains("after-script-ran"), "{}", ran.trace);
    assert!(
        ran.trace.contains("execution took longer than 8s"),
        "{}",
        ran.trace
    );
    assert_clean_and_remove_reusable(&short_token(&runner));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_timeout_still_runs_after_script() {
    let _guard = engine_test!();
    let runner = settings("stimeout");
    let ran = run_job(
        &payload(json!({
            "id": 15, "job_info": {"project_id": 505},
            "runner_info": {"timeout": 120},
            "variables": [{"key": "GIT_STRATEGY", "value": "none"}, {"key": "RUNNER_SCRIPT_TIMEOUT", "value": "3s"}],
            "steps": [{"name": "script", "script": ["sleep 120"]},
                      {"name": "after_script", "script": ["echo \"after status=$CI_JOB_STATUS\""]}]
        })),
        &runner,
    )
    .await;
    assert_eq!(
        failure(&ran.result).0,
        FailureReason::JobExecutionTimeout,
        "{}",
        ran.trace
    );
    assert!(ran.trace.contains("after status=timedout"), "{}", ran.trace);
    assert_clean_and_remove_reusable(&short_token(&runner));
}

fn cancel_job() -> drover::job::JobPayload {
    payload(json!({
        "id": 16, "job_info": {"project_id": 506},
        "runner_info": {"timeout": 300},
        "variables": [{"key": "GIT_STRATEGY", "value": "none"}],
        "steps": [{"name": "script", "script": ["echo script-started", "sleep 300", "echo script-finished"]},
                  {"name": "after_script", "script": ["echo \"after status=$CI_JOB_STATUS\""]}]
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_cancel_runs_after_script() {
    let _guard = engine_test!();
    let runner = settings("cancel");
    let started = std::time::Instant::now();
    let labels_seen = std::sync::Mutex::new(None);
    let ran = run_job_with(&cancel_job(), &runner, |trace, control| {
        if trace.contains("\nscript-started") && !control.cancel.is_cancelled() {
            // Upstream's labels on what the job made, looked up while it runs.
            let list = |args: &[&str]| {
                let out = std::process::Command::new("docker")
                    .args(args)
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&out.stdout).trim().to_string()
            };
            let by = |kind: &str| format!("label=com.gitlab.gitlab-runner.type={kind}");
            let runner_id = "label=com.gitlab.gitlab-runner.runner.id=dtecancel";
            let build = list(&[
                "ps",
                "-a",
                "-q",
                "--filter",
                runner_id,
                "--filter",
                &by("build"),
                "--filter",
                "label=com.gitlab.gitlab-runner.job.id=16",
                "--filter",
                "label=com.gitlab.gitlab-runner.managed=true",
            ]);
            let helper = list(&[
                "ps",
                "-a",
                "-q",
                "--filter",
                runner_id,
                "--filter",
                &by("predefined"),
            ]);
            let volumes = list(&[
                "volume",
                "ls",
                "-q",
                "--filter",
                runner_id,
                "--filter",
                &by("cache"),
            ]);
            *labels_seen.lock().unwrap() = Some((build, helper, volumes));
            control.cancel.cancel();
        }
    })
    .await;
    let (build, helper, volumes) = labels_seen
        .lock()
        .unwrap()
        .clone()
        .expect("the script never started");
    assert_eq!(
        build.lines().count(),
        1,
        "build container by labels: {build:?}"
    );
    assert_eq!(
        helper.lines().count(),
        1,
        "helper container by labels: {helper:?}"
    );
    assert_eq!(
        volumes.lines().count(),
        2,
        "/cache and /builds volumes by labels: {volumes:?}"
    );
    assert_eq!(
        failure(&ran.result).0,
        FailureReason::JobCanceled,
        "{}",
        ran.trace
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    assert!(
        ran.trace.contains("script canceled externally (UI, API)"),
        "{}",
        ran.trace
    );
    assert!(!ran.trace.contains("\nscript-finished"));
    assert!(ran.trace.contains("after status=canceled"), "{}", ran.trace);
    assert_clean_and_remove_reusable(&short_token(&runner));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_skips_after_script() {
    let _guard = engine_test!();
    let runner = settings("abort");
    let ran = run_job_with(&cancel_job(), &runner, |trace, control| {
        if trace.contains("\nscript-started") {
            control.abort.cancel();
        }
    })
    .await;
    assert_eq!(
        failure(&ran.result).0,
        FailureReason::JobCanceled,
        "{}",
        ran.trace
    );
    assert!(!ran.trace.contains("after status="), "{}", ran.trace);
    assert!(
        !ran.trace.contains("Cleaning up project directory"),
        "{}",
        ran.trace
    );
    assert_clean_and_remove_reusable(&short_token(&runner));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_root_image_user_can_write_the_checkout() {
    let _guard = engine_test!();
    let token = "glcbt-usertesttoken";
    let server = GitServer::start(token);
    let sha = server.commit("file.txt", "content\n");
    let runner = settings("user");
    let since = unix_now();
    let ran = run_job(
        &payload(json!({
            "id": 17, "token": token, "job_info": {"project_id": 507},
            "git_info": {"repo_url": server.repo_url(), "sha": sha, "ref": "main",
                         "refspecs": ["+refs/heads/main:refs/remotes/origin/main"]},
            "image": {"name": BUILD_IMAGE, "executor_opts": {"docker": {"user": 1000}}},
            "runner_info": {"timeout": 120},
            "variables": [{"key": "GIT_STRATEGY", "value": "clone"}],
            "steps": [{"name": "script", "script": [
                "echo uid=$(id -u)", "echo more >> file.txt", "mkdir -p out && touch out/x",
                "touch /cache/x /builds/x", "stat -c 'mode %a %n' /builds /cache", "echo wrote-ok"
            ]}]
        })),
        &runner,
    )
    .await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert!(ran.trace.contains("uid=1000"), "{}", ran.trace);
    assert!(ran.trace.contains("\nmode 777 /builds"), "{}", ran.trace);
    assert!(ran.trace.contains("\nmode 777 /cache"), "{}", ran.trace);
    assert!(ran.trace.contains("\nwrote-ok"), "{}", ran.trace);
    // Without services, both fixes ran at the top of prepare_script, not in containers.
    let short = short_token(&runner);
    assert_eq!(permission_containers_since(&short, since), 0);
    assert_clean_and_remove_reusable(&short);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_umask_gives_the_checkout_to_the_image_user() {
    let _guard = engine_test!();
    // The build image with `USER 1000:1000` in its config.
    let tag = "drover-test-executor-build-user:latest";
    let c = format!("drover-test-umask-{}", std::process::id());
    output_of(std::process::Command::new("docker").args(["create", "--name", &c, BUILD_IMAGE]));
    let committed = std::process::Command::new("docker")
        .args(["commit", "--change", "USER 1000:1000", &c, tag])
        .output();
    let _ = std::process::Command::new("docker")
        .args(["rm", "-f", &c])
        .output();
    assert!(committed.is_ok_and(|o| o.status.success()), "docker commit");
    let _tag = Tag(tag.to_string());
    let runner = settings("umask");
    let job = |ff: &str| {
        payload(json!({
            "id": 19, "job_info": {"project_id": 509},
            "git_info": {"repo_url": "http://127.0.0.1:9/group/project.git"},
            "image": {"name": tag},
            "runner_info": {"timeout": 120},
            "variables": [{"key": "GIT_STRATEGY", "value": "none"},
                          {"key": "FF_DISABLE_UMASK_FOR_DOCKER_EXECUTOR", "value": ff}],
            "steps": [{"name": "script", "script": [
                "echo uid=$(id -u)", "stat -c 'owner %u:%g' \"$CI_PROJECT_DIR\""
            ]}]
        }))
    };
    let ran = run_job(&job("true"), &runner).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert!(ran.trace.contains("uid=1000"), "{}", ran.trace);
    assert!(
        ran.trace
            .contains("Changing ownership of files at \"/builds/group/project\" to 1000:1000"),
        "{}",
        ran.trace
    );
    assert!(ran.trace.contains("\nowner 1000:1000"), "{}", ran.trace);
    // Without the flag the helper's files stay root's (world-writable through its umask).
    let ran = run_job(&job("false"), &runner).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert!(!ran.trace.contains("Changing ownership"), "{}", ran.trace);
    assert!(ran.trace.contains("\nowner 0:0"), "{}", ran.trace);
    assert_clean_and_remove_reusable(&short_token(&runner));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_only_volume_is_read_write_whatever_its_mode() {
    let _guard = engine_test!();
    let mut runner = settings("rovol");
    runner.docker.volumes = vec!["/cache".into(), "/data:ro".into()];
    let since = unix_now();
    let ran = run_job(
        &payload(json!({
            "id": 18, "job_info": {"project_id": 508},
            "git_info": {"repo_url": "http://127.0.0.1:9/group/project.git"},
            "runner_info": {"timeout": 120},
            "variables": [{"key": "GIT_STRATEGY", "value": "none"}],
            "steps": [{"name": "script", "script": [
                "stat -c 'mode %a %n' /builds /cache /data",
                "touch /data/x && echo data-is-writable"
            ]}]
        })),
        &runner,
    )
    .await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    for dir in ["/builds", "/cache", "/data"] {
        assert!(
            ran.trace.contains(&format!("\nmode 777 {dir}")),
            "{dir}: {}",
            ran.trace
        );
    }
    // Upstream makes a cache volume of a destination-only entry and binds it without the
    // mode: read-write, so its permission fix runs in prepare_script like the others.
    assert!(ran.trace.contains("\ndata-is-writable"), "{}", ran.trace);
    let short = short_token(&runner);
    assert_eq!(permission_containers_since(&short, since), 0);
    assert_clean_and_remove_reusable(&short);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masked_variable_never_reaches_the_trace() {
    let _guard = engine_test!();
    let runner = settings("mask");
    let secret = "S3cr3tValue_xyz";
    let ran = run_job(
        &payload(json!({
            "id": 18, "token": "glcbt-masktesttoken9", "job_info": {"project_id": 508},
            "runner_info": {"timeout": 120},
            "variables": [{"key": "GIT_STRATEGY", "value": "none"},
                          {"key": "MY_SECRET", "value": secret, "masked": true},
                          {"key": "CI_JOB_TOKEN", "value": "glcbt-masktesttoken9", "masked": true}],
            "steps": [{"name": "script", "script": [
                "echo \"plain: $MY_SECRET\"",
                "printf 'S3cr3t'; sleep 1; printf 'Value_xyz\\n'",
                "echo \"$MY_SECRET\" >&2",
                "echo \"token: $CI_JOB_TOKEN\"",
                "echo glpat-abcdefABCDEF123456",
                "echo 'https://example.invalid/x?X-Amz-Signature=deadbeef&a=1'"
            ]}]
        })),
        &runner,
    )
    .await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert!(!ran.trace.contains(secret), "{}", ran.trace);
    assert!(!ran.trace.contains("masktesttoken9"), "{}", ran.trace);
    assert!(!ran.trace.contains("abcdefABCDEF123456"));
    assert!(!ran.trace.contains("deadbeef"));
    assert!(ran.trace.contains("plain: [MASKED]"), "{}", ran.trace);
    assert!(ran.trace.matches("[MASKED]").count() >= 6, "{}", ran.trace);
    assert_clean_and_remove_reusable(&short_token(&runner));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_image_is_an_image_pull_failure() {
    let _guard = engine_test!();
    let mut runner = settings("noimage");
    runner.docker.pull_policy = vec!["never".into()];
    let ran = run_job(
        &payload(json!({
            "id": 19, "job_info": {"project_id": 509},
            "image": {"name": "drover-test-executor-does-not-exist:1"},
            "steps": [{"name": "script", "script": ["true"]}]
        })),
        &runner,
    )
    .await;
    assert_eq!(
        failure(&ran.result).0,
        FailureReason::ImagePullFailure,
        "{}",
        ran.trace
    );
    // A job asking for a policy the runner does not allow is a configuration error.
    let ran = run_job(
        &payload(json!({
            "id": 20, "job_info": {"project_id": 509},
            "image": {"name": BUILD_IMAGE, "pull_policy": ["always"]},
            "steps": [{"name": "script", "script": ["true"]}]
        })),
        &runner,
    )
    .await;
    assert_eq!(
        failure(&ran.result).0,
        FailureReason::RunnerConfigurationError,
        "{}",
        ran.trace
    );
    assert_clean_and_remove_reusable(&short_token(&runner));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_sources_are_retried_then_skip_the_script() {
    let _guard = engine_test!();
    let server = GitServer::start("glcbt-theservertoken");
    let sha = server.commit("README", "x\n");
    let runner = settings("srcfail");
    // The job's token is not the one the server accepts: every fetch fails.
    let url = server
        .repo_url()
        .replace("glcbt-theservertoken", "glcbt-awrongtoken");
    let ran = run_job(
        &payload(json!({
            "id": 21, "token": "glcbt-awrongtoken", "job_info": {"project_id": 510},
            "git_info": {"repo_url": url, "sha": sha, "ref": "main",
                         "refspecs": ["+refs/heads/main:refs/remotes/origin/main"]},
            "runner_info": {"timeout": 120},
            "variables": [{"key": "GIT_STRATEGY", "value": "clone"}, {"key": "GET_SOURCES_ATTEMPTS", "value": "2"}],
            "steps": [{"name": "script", "script": ["echo script-ran"]},
                      {"name": "after_script", "script": ["echo after-script-ran"]}]
        })),
        &runner,
    )
    .await;
    let (reason, code) = failure(&ran.result);
    assert_eq!(reason, FailureReason::ScriptFailure, "{}", ran.trace);
    assert!(code.is_some_and(|c| c != 0));
    assert_eq!(
        ran.trace
            .matches("Getting source from Git repository")
            .count(),
        2,
        "{}",
        ran.trace
    );
    assert!(
        ran.trace
            .contains("Deleting all tracked and untracked files"),
        "{}",
        ran.trace
    );
    assert!(!ran.trace.contains("\nscript-ran"));
    assert!(!ran.trace.contains("\nafter-script-ran"));
    assert!(ran
        .trace
        .contains("Cleaning up project directory and file based variables"));
    assert!(!ran.trace.contains("awrongtoken"), "{}", ran.trace);
    assert_clean_and_remove_reusable(&short_token(&runner));
}

/// Replaces the test helper's `gitlab-runner-helper` with one whose `cache-init` fails.
const BREAK_CACHE_INIT: &str = concat!(
    "printf '#!/bin/sh\\n",
    "if [ \"$1\" = cache-init ]; then echo \"cache-init: operation not permitted\" >&2; exit 9; fi\\n",
    "exec /usr/libexec/drover helper \"$@\"\\n' > /usr/bin/gitlab-runner-helper",
    " && chmod 0755 /usr/bin/gitlab-runner-helper"
);

/// A helper image whose `cache-init` fails, derived from the test helper with `docker commit`.
fn helper_with_failing_cache_init() -> String {
    let tag = "drover-test-executor-helper-badinit:latest";
    let work = format!("drover-test-badinit-{}", std::process::id());
    let docker = |args: &[&str]| {
        std::process::Command::new("docker")
            .args(args)
            .output()
            .expect("docker")
    };
    let made = docker(&[
        "run",
        "--name",
        &work,
        "--network",
        "none",
        HELPER_IMAGE,
        "sh",
        "-c",
        BREAK_CACHE_INIT,
    ]);
    let commit = docker(&["commit", &work, tag]);
    // Remove the work container whatever happened, then report.
    let _ = docker(&["rm", "-f", &work]);
    for out in [made, commit] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    tag.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_permission_fix_in_prepare_script_is_a_system_failure() {
    let _guard = engine_test!();
    let mut runner = settings("badinit");
    runner.docker.helper_image = Some(helper_with_failing_cache_init());
    let ran = run_job(
        &payload(json!({
            "id": 19, "job_info": {"project_id": 509},
            "git_info": {"repo_url": "http://127.0.0.1:9/group/project.git"},
            "runner_info": {"timeout": 120},
            "variables": [{"key": "GIT_STRATEGY", "value": "none"}],
            "steps": [{"name": "script", "script": ["echo never-runs"]}]
        })),
        &runner,
    )
    .await;
    let e = system_failure(&ran);
    assert!(
        e.contains("setting permissions on the job's volumes"),
        "{e}"
    );
    assert!(
        ran.trace.contains("cache-init: operation not permitted"),
        "{}",
        ran.trace
    );
    assert!(
        ran.trace
            .contains("setting permissions on /cache failed: cache-init exited with 9"),
        "{}",
        ran.trace
    );
    assert!(!ran.trace.contains("\nnever-runs"), "{}", ran.trace);
    assert_clean_and_remove_reusable(&short_token(&runner));
}

/// A job whose build container is force-removed from outside once, when the script has
/// printed its first line.
async fn run_with_build_container_removed_once(test: &str, attempts: Option<&str>) -> Ran {
    let runner = settings(test);
    let short = short_token(&runner);
    let mut variables = vec![json!({"key": "GIT_STRATEGY", "value": "none"})];
    if let Some(n) = attempts {
        variables.push(json!({"key": "EXECUTOR_JOB_SECTION_ATTEMPTS", "value": n}));
    }
    let removed = std::sync::atomic::AtomicBool::new(false);
    let ran = run_job_with(
        &payload(json!({
            "id": 20, "job_info": {"project_id": 510},
            "git_info": {"repo_url": "http://127.0.0.1:9/group/project.git"},
            "runner_info": {"timeout": 120},
            "variables": variables,
            "steps": [{"name": "script", "script": ["echo script-started", "sleep 2", "echo script-finished"]}]
        })),
        &runner,
        |trace, _| {
            if trace.contains("\nscript-started") && !removed.swap(true, std::sync::atomic::Ordering::SeqCst) {
                let ids = output_of(std::process::Command::new("docker").args([
                    "ps",
                    "-q",
                    "--filter",
                    &format!("label=com.gitlab.gitlab-runner.runner.id={short}"),
                    "--filter",
                    "label=com.gitlab.gitlab-runner.type=build",
                ]));
                for id in ids.lines() {
                    output_of(std::process::Command::new("docker").args(["rm", "-f", id]));
                }
            }
        },
    )
    .await;
    assert_clean_and_remove_reusable(&short);
    ran
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vanished_build_container_is_recreated_within_section_attempts() {
    let _guard = engine_test!();
    let ran = run_with_build_container_removed_once("vanish2", Some("2")).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert_eq!(
        ran.trace.matches("\nscript-started").count(),
        2,
        "{}",
        ran.trace
    );
    assert_eq!(
        ran.trace.matches("\nscript-finished").count(),
        1,
        "{}",
        ran.trace
    );
    assert!(
        ran.trace
            .contains("running the step_script stage again (attempt 2 of 2)"),
        "{}",
        ran.trace
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vanished_build_container_is_a_system_failure_by_default() {
    let _guard = engine_test!();
    let ran = run_with_build_container_removed_once("vanish1", None).await;
    let e = system_failure(&ran);
    assert!(e.contains("was not found or was removed"), "{e}");
    assert!(!ran.trace.contains("\nscript-finished"), "{}", ran.trace);
}

/// As upstream, an `executor_opts` key the docker executor does not know fails the job as a
/// system failure (exit code 3) before anything runs, on a service as on the image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_executor_opts_on_a_service_fail_the_job_before_it_runs() {
    let _guard = engine_test!();
    let runner = settings("svcopts");
    let ran = run_job(
        &no_git_job(
            19,
            509,
            &["echo the-script-ran"],
            json!({
                "image": {"name": BUILD_IMAGE},
                "services": [{"name": BUILD_IMAGE, "alias": "svc",
                              "executor_opts": {"docker": {"powpow": "x"}}}],
            }),
        ),
        &runner,
    )
    .await;
    let failure = match &ran.result {
        Err(drover::executor::JobError::Failed(f)) => f.clone(),
        other => panic!("expected a job failure, got {other:?}\n{}", ran.trace),
    };
    assert_eq!(failure.exit_code, Some(3), "{failure:?}");
    assert_eq!(
        failure.reason,
        drover::executor::FailureReason::RunnerSystemFailure
    );
    assert!(failure.message.contains("powpow (service "), "{failure:?}");
    assert!(!ran.trace.contains("the-script-ran"), "{}", ran.trace);
    assert_clean_and_remove_reusable(&short_token(&runner));
}

/// `prepare_timeout` and `get_sources_timeout` end the job as upstream does: a
/// `job_execution_timeout` naming the phase and its limit, long before the job timeout; a
/// phase that fails on its own inside its limit is not called a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phase_time_limits_end_the_job_with_a_timeout_naming_the_phase() {
    use drover::config::GoDuration;
    use drover::executor::{FailureReason, JobError};
    let _guard = engine_test!();
    let failure = |ran: &Ran| match &ran.result {
        Err(JobError::Failed(f)) => f.clone(),
        other => panic!("expected a job failure, got {other:?}\n{}", ran.trace),
    };

    let mut runner = settings("prepto");
    runner.prepare_timeout = Some(GoDuration::from_nanos(1_000_000));
    let ran = run_job(
        &no_git_job(20, 510, &["echo the-script-ran"], json!({})),
        &runner,
    )
    .await;
    let f = failure(&ran);
    assert_eq!(f.reason, FailureReason::JobExecutionTimeout, "{f:?}");
    assert_eq!(f.message, "prepare timeout: exceeded timeout of 1ms");
    assert!(!ran.trace.contains("the-script-ran"), "{}", ran.trace);
    assert_clean_and_remove_reusable(&short_token(&runner));

    let mut runner = settings("srcto");
    runner.get_sources_timeout = Some(GoDuration::from_secs(3));
    runner.pre_get_sources_script = Some("sleep 60".into());
    let started = std::time::Instant::now();
    let clone = json!({"variables": [{"key": "GIT_STRATEGY", "value": "clone"}]});
    let ran = run_job(
        &no_git_job(21, 511, &["echo the-script-ran"], clone.clone()),
        &runner,
    )
    .await;
    let f = failure(&ran);
    assert_eq!(f.reason, FailureReason::JobExecutionTimeout, "{f:?}");
    assert_eq!(f.message, "get sources timeout: exceeded timeout of 3s");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "the sleep ran out"
    );
    assert!(!ran.trace.contains("the-script-ran"), "{}", ran.trace);
    assert_clean_and_remove_reusable(&short_token(&runner));

    // A get_sources that fails by itself within its limit is a script failure, as before.
    let mut runner = settings("srcfail");
    runner.get_sources_timeout = Some(GoDuration::from_secs(60));
    runner.pre_get_sources_script = Some("exit 7".into());
    let ran = run_job(
        &no_git_job(22, 512, &["echo the-script-ran"], clone),
        &runner,
    )
    .await;
    let f = failure(&ran);
    assert_eq!(f.reason, FailureReason::ScriptFailure, "{f:?}");
    assert_clean_and_remove_reusable(&short_token(&runner));
}

/// `GET_SOURCES_ATTEMPTS=2`: the first `get_sources` fails (the runner's
/// `pre_get_sources_script` exits 3 once), the retry succeeds, and the job passes: the first
/// attempt's failure does not outlive the retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_sources_retry_that_succeeds_leaves_the_job_passing() {
    let _guard = engine_test!();
    let token = "glcbt-retrytesttoken001";
    let server = GitServer::start(token);
    let sha = server.commit("README", "retried\n");
    let mut runner = settings("gsretry");
    runner.pre_get_sources_script = Some(
        "if [ ! -f \"$CI_BUILDS_DIR/.first-attempt\" ]; then touch \"$CI_BUILDS_DIR/.first-attempt\"; echo failing-once; exit 3; fi"
            .into(),
    );
    let ran = run_job(
        &payload(json!({
            "id": 19, "token": token, "job_info": {"project_id": 509},
            "git_info": {"repo_url": server.repo_url(), "sha": sha, "ref": "main", "depth": 0,
                         "refspecs": ["+refs/heads/main:refs/remotes/origin/main"]},
            "runner_info": {"timeout": 120},
            "variables": [{"key": "GIT_STRATEGY", "value": "clone"},
                          {"key": "GET_SOURCES_ATTEMPTS", "value": "2"}],
            "steps": [{"name": "script", "script": ["cat README"]}]
        })),
        &runner,
    )
    .await;
    let t = &ran.trace;
    assert!(t.contains("failing-once"), "{t}");
    assert!(t.contains("Retrying get_sources"), "{t}");
    assert!(t.contains("\nretried\n"), "{t}");
    assert!(ran.result.is_ok(), "{:?}\n{t}", ran.result);
    assert_clean_and_remove_reusable(&short_token(&runner));
}

/// A private submodule on the same GitLab (`../sub.git`, the server wants the job token): the
/// host-level job-token rewrite lets `git submodule update` authenticate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_submodule_on_the_same_host_is_fetched_with_the_job_token() {
    let _guard = engine_test!();
    let token = "glcbt-submoduletoken001";
    let server = GitServer::start(token);
    let run = |dir: &std::path::Path, args: &[&str]| {
        let out = std::process::Command::new("git")
            .current_dir(dir)
            .args(["-c", "protocol.file.allow=always"])
            .args(args)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    let root = server.dir.path();
    let sub_bare = root.join("group/sub.git");
    std::fs::create_dir_all(&sub_bare).unwrap();
    run(&sub_bare, &["init", "-q", "--bare", "-b", "main"]);
    let sub_work = root.join("sub-work");
    std::fs::create_dir_all(&sub_work).unwrap();
    run(&sub_work, &["init", "-q", "-b", "main"]);
    std::fs::write(sub_work.join("subfile"), "from-the-submodule\n").unwrap();
    run(&sub_work, &["add", "."]);
    run(&sub_work, &["commit", "-q", "-m", "sub"]);
    run(
        &sub_work,
        &["push", "-q", sub_bare.to_str().unwrap(), "main"],
    );
    run(&sub_bare, &["update-server-info"]);
    server.commit("README", "main\n");
    let work = root.join("work");
    run(&work, &["submodule", "add", "-q", "../sub.git", "libsub"]);
    run(&work, &["commit", "-q", "-m", "add submodule"]);
    run(&work, &["push", "-q", "origin", "main"]);
    let head = std::process::Command::new("git")
        .current_dir(&work)
        .args(["rev-parse", "HEAD"])
        .output()
        .expect("git");
    let sha = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let runner = settings("submod");
    let ran = run_job(
        &payload(json!({
            "id": 21, "token": token, "job_info": {"project_id": 511},
            "git_info": {"repo_url": server.repo_url(), "sha": sha, "ref": "main", "depth": 0,
                         "refspecs": ["+refs/heads/main:refs/remotes/origin/main"]},
            "runner_info": {"timeout": 120},
            "variables": [{"key": "GIT_STRATEGY", "value": "clone"},
                          {"key": "GIT_SUBMODULE_STRATEGY", "value": "normal"}],
            "steps": [{"name": "script", "script": [
                "cat libsub/subfile",
                "if grep -rq gitlab-ci-token .git/config .git/modules/*/config; then echo LEAKED-$((1+1)); fi"
            ]}]
        })),
        &runner,
    )
    .await;
    let t = &ran.trace;
    assert!(ran.result.is_ok(), "{:?}\n{t}", ran.result);
    assert!(t.contains("\nfrom-the-submodule\n"), "{t}");
    assert!(!t.contains("LEAKED-2"), "{t}");
    assert_clean_and_remove_reusable(&short_token(&runner));
}
