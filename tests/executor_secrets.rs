//! Secrets never reach drover's own log, at any level: `drover --debug exec-job` and
//! `drover -l trace exec-job` on the real Engine with a masked variable, a job token, registry
//! credentials (payload `credentials` and `DOCKER_AUTH_CONFIG`), the runner token and cache
//! credentials. Neither stdout (the masked job log) nor stderr (the debug log, where the Docker
//! API request bodies carry every variable) may show one, raw or JSON-escaped.
//!
//! `DROVER_TEST_BIN` runs it against another drover binary (to watch it fail without the fix).

mod docker_engine;
mod executor_common;

use std::process::Command;

use base64::Engine as _;
use executor_common::*;

const JOB_TOKEN: &str = "glcbt-secretsTestJobToken01";
const MASKED: &str = "Sup3r-S3cret\"Value\\x";
const REGISTRY_PASSWORD: &str = "registry-Pa55word-xyz";
const AUTH_PASSWORD: &str = "docker-auth-Pa55word";
const RUNNER_TOKEN: &str = "glrt-dtesecretRunnerTok77";
const CACHE_SECRET: &str = "cache-S3cretKey-abcdef";
const CACHE_ACCESS: &str = "AKIACACHEACCESS1234";

#[test]
fn no_secret_reaches_stdout_or_stderr_at_any_level() {
    assert!(engine_available(), "this test needs the Docker Engine");
    ensure_images();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        r#"[[runners]]
  name = "drover-test-executor-secrets"
  token = "{RUNNER_TOKEN}"
  executor = "docker"
  [runners.docker]
    image = "{BUILD_IMAGE}"
    helper_image = "{HELPER_IMAGE}"
    pull_policy = ["if-not-present"]
  [runners.cache]
    Type = "s3"
    Shared = true
    [runners.cache.s3]
      ServerAddress = "127.0.0.1:9"
      AccessKey = "{CACHE_ACCESS}"
      SecretKey = "{CACHE_SECRET}"
      BucketName = "b"
"#
    );
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("user:{AUTH_PASSWORD}"));
    let docker_auth = format!(r#"{{"auths": {{"registry.example.com": {{"auth": "{auth}"}}}}}}"#);
    let job = serde_json::json!({
        "id": 51, "token": JOB_TOKEN, "job_info": {"project_id": 603},
        "runner_info": {"timeout": 120},
        "variables": [
            {"key": "GIT_STRATEGY", "value": "none"},
            {"key": "CI_JOB_TOKEN", "value": JOB_TOKEN, "masked": true},
            {"key": "MY_SECRET", "value": MASKED, "masked": true},
            {"key": "CI_REGISTRY_PASSWORD", "value": REGISTRY_PASSWORD, "masked": true},
            {"key": "DOCKER_AUTH_CONFIG", "value": docker_auth}
        ],
        "credentials": [{"type": "registry", "url": "registry.example.com",
                         "username": "gitlab-ci-token", "password": REGISTRY_PASSWORD}],
        "steps": [{"name": "script", "script": ["echo \"secret: $MY_SECRET\"", "echo done"]}]
    });
    let c = dir.path().join("config.toml");
    let j = dir.path().join("job.json");
    std::fs::write(&c, config).unwrap();
    std::fs::write(&j, job.to_string()).unwrap();
    let mut secrets: Vec<String> = [
        JOB_TOKEN,
        MASKED,
        REGISTRY_PASSWORD,
        AUTH_PASSWORD,
        RUNNER_TOKEN,
        CACHE_SECRET,
        CACHE_ACCESS,
        auth.as_str(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // The forms a secret takes in JSON bodies and in Debug output.
    secrets.push(
        serde_json::to_string(MASKED)
            .unwrap()
            .trim_matches('"')
            .to_string(),
    );
    secrets.push(format!("{MASKED:?}").trim_matches('"').to_string());
    secrets.push("Sup3r-S3cret".to_string());
    let short: String = "dtesecretRunnerTok77".chars().take(9).collect();
    // With the dependencies held at info, then with them at trace (their request bodies in
    // the log): the redaction alone must hold.
    for (level, deps) in [(&["--debug"][..], ""), (&["-l", "trace"][..], "1")] {
        let out = Command::new(test_bin())
            .env("DROVER_DEBUG_DEPENDENCIES", deps)
            .args(level)
            .arg("exec-job")
            .arg("--job")
            .arg(&j)
            .arg("-c")
            .arg(&c)
            .env_remove("RUNNER_DEBUG")
            .env_remove("LOG_LEVEL")
            // The text format names every line's level, so the check below can see debug lines.
            .env("LOG_FORMAT", "text")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_clean_and_remove_reusable(&short);
        assert_eq!(out.status.code(), Some(0), "{level:?}\n{stdout}\n{stderr}");
        assert!(stdout.contains("secret: [MASKED]"), "{stdout}");
        // The debug log is on and shows the Docker API traffic, or the check proves nothing.
        assert!(
            stderr.contains("level=debug"),
            "{level:?}: no debug log:\n{stderr}"
        );
        if deps.is_empty() {
            assert!(
                !stderr.contains("/containers/create"),
                "{level:?}: dependency debug output with the dependencies held at info:\n{stderr}"
            );
        } else {
            assert!(
                stderr.contains("/containers/create") && stderr.contains("CI_JOB_TOKEN="),
                "{level:?}: the log does not show the Docker API request bodies:\n{stderr}"
            );
        }
        for s in &secrets {
            assert!(
                !stdout.contains(s.as_str()),
                "{level:?}: {s:?} on stdout:\n{stdout}"
            );
            let at = stderr.find(s.as_str());
            assert!(
                at.is_none(),
                "{level:?}: {s:?} on stderr: …{}…",
                &stderr[at.unwrap().saturating_sub(200)..(at.unwrap() + 100).min(stderr.len())]
            );
        }
    }
}
