//! Services on the real Docker Engine: a job reaches a service by each of its aliases on the
//! default bridge (ExtraHosts links) and on a per-build network (`FF_NETWORK_PER_BUILD`), with
//! a non-root job image user; an unhealthy service only warns; nothing is left behind.

mod docker_engine;
mod executor_common;

use std::process::Command;

use drover::executor::RunnerSettings;
use executor_common::*;
use serde_json::json;

const SERVICE_IMAGE: &str = "drover-test-executor-service:latest";

/// Settings on the default bridge (the shared helper uses the host network), with one
/// service from config.toml.
fn service_settings(test: &str) -> RunnerSettings {
    let mut s = settings(test);
    s.docker.network_mode = None;
    s.docker.services.services = vec![drover::executor::settings::ConfigService {
        name: SERVICE_IMAGE.into(),
        alias: "from-config".into(),
        ..Default::default()
    }];
    s
}

/// Networks carrying this runner's labels.
fn networks(short: &str) -> Vec<String> {
    output_of(Command::new("docker").args([
        "network",
        "ls",
        "--filter",
        &format!("label=com.gitlab.gitlab-runner.runner.id={short}"),
        "--format",
        "{{.Name}}",
    ]))
    .lines()
    .map(str::to_string)
    .collect()
}

/// A job whose service (with a command and a variable) answers HTTP, and whose script, as uid
/// 1000, fetches from every alias with bash's /dev/tcp.
fn alias_job(id: i64, extra_vars: serde_json::Value) -> drover::job::JobPayload {
    let mut variables = vec![
        json!({"key": "PUBLIC_X", "value": "pub", "public": true}),
        json!({"key": "SECRET_X", "value": "secret", "public": false}),
        // A public .gitlab-ci.yml default overridden by a masked project variable: the job
        // gets the project value, a service only the public default.
        json!({"key": "DB_PW", "value": "yaml-default", "public": true}),
        json!({"key": "DB_PW", "value": "project-secret", "public": false, "masked": true}),
    ];
    if let Some(v) = extra_vars.as_array() {
        variables.extend(v.iter().cloned());
    }
    no_git_job(
        id,
        601,
        &[
            "echo uid=$(id -u)",
            "sed 's/^/hosts: /' /etc/hosts",
            "for h in db web cache drover-test-executor-service from-config; do exec 3<>/dev/tcp/$h/8080 && printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' >&3 && echo \"reached $h: $(tail -n 1 <&3)\"; exec 3<&-; done",
        ],
        json!({
            "image": {"name": BUILD_IMAGE, "executor_opts": {"docker": {"user": "1000"}}},
            "services": [{
                "name": SERVICE_IMAGE, "alias": "db,web cache",
                "command": ["sh", "-c", "echo svc-$GREETING-$PUBLIC_X-${SECRET_X}x-$DB_PW > /tmp/index.html && exec httpd -f -p 8080 -h /tmp"],
                "variables": [{"key": "GREETING", "value": "hello-$GIT_STRATEGY"}]
            }],
            "variables": variables,
        }),
    )
}

fn assert_reached_every_alias(trace: &str) {
    assert!(trace.contains("uid=1000"), "{trace}");
    // The job's service: its command ran with its variables (expanded) and the job's public
    // variables; the secret one did not reach it.
    for alias in ["db", "web", "cache"] {
        assert!(
            trace.contains(&format!(
                "reached {alias}: svc-hello-none-pub-x-yaml-default"
            )),
            "alias {alias} not reached:\n{trace}"
        );
    }
    // The config.toml service comes first, so it owns the image's default alias (the job's
    // service loses it with a warning) and serves the image's default page.
    for alias in ["from-config", "drover-test-executor-service"] {
        assert!(
            trace.contains(&format!("reached {alias}: drover-service-ok")),
            "alias {alias} not reached:\n{trace}"
        );
    }
    assert!(
        trace.contains(
            "Skipping alias \"drover-test-executor-service\" for service \
             \"drover-test-executor-service:latest\" (services[1]): alias is already in use by \
             another service."
        ),
        "{trace}"
    );
    assert!(
        trace.contains("Starting service drover-test-executor-service:latest..."),
        "{trace}"
    );
    assert!(
        trace.contains("Waiting for services to be up and running (timeout 30 seconds)..."),
        "{trace}"
    );
    assert!(!trace.contains("probably didn't start properly"), "{trace}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_reached_by_every_alias_on_the_default_bridge() {
    let _guard = engine_test!();
    let runner = service_settings("svcbridge");
    let ran = run_job(&alias_job(41, json!([])), &runner).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert_reached_every_alias(&ran.trace);
    // As upstream, each service's 12-character container ID is a host name too.
    let id_host = regex::Regex::new(r"(?m)^hosts: [0-9.]+\s+[0-9a-f]{12}$").expect("regex");
    assert_eq!(
        id_host.find_iter(&ran.trace).count(),
        2,
        "no service ID host entries:\n{}",
        ran.trace
    );
    let short = short_token(&runner);
    assert!(networks(&short).is_empty());
    assert_clean_and_remove_reusable(&short);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_reached_by_every_alias_on_a_per_build_network() {
    let _guard = engine_test!();
    let runner = service_settings("svcnet");
    let job = alias_job(
        42,
        json!([{"key": "FF_NETWORK_PER_BUILD", "value": "true"}]),
    );
    let mut job = job;
    if let Some(step) = job.steps.first_mut() {
        step.script.push(
            "echo network=$CI_BUILD_NETWORK_NAME; cat /etc/hosts | grep -c ' db' || true".into(),
        );
    }
    let ran = run_job(&job, &runner).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert_reached_every_alias(&ran.trace);
    let short = short_token(&runner);
    let network = format!("network=runner-{short}-601-0-42");
    assert!(ran.trace.contains(&network), "{}", ran.trace);
    // Reached through the network's DNS, not through /etc/hosts links.
    assert!(ran.trace.contains("\n0\n"), "{}", ran.trace);
    assert!(networks(&short).is_empty(), "network left behind");
    assert_clean_and_remove_reusable(&short);
}

/// Removes a network made for a test when dropped.
struct Network(String);

impl Drop for Network {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["network", "rm", &self.0])
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_reached_by_every_alias_on_a_user_defined_network_mode() {
    let _guard = engine_test!();
    let name = format!("drover-test-usernet-{}", std::process::id());
    output_of(Command::new("docker").args(["network", "create", &name]));
    let _network = Network(name.clone());
    let mut runner = service_settings("svcuser");
    runner.docker.network_mode = Some(name.clone());
    let mut job = alias_job(45, json!([]));
    if let Some(step) = job.steps.first_mut() {
        step.script.push("grep -c ' db' /etc/hosts || true".into());
    }
    let ran = run_job(&job, &runner).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert_reached_every_alias(&ran.trace);
    // Reached through the network's DNS (endpoint aliases), not through /etc/hosts links.
    assert!(ran.trace.contains("\n0\n"), "{}", ran.trace);
    assert_clean_and_remove_reusable(&short_token(&runner));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_debug_services_follows_the_service_logs_into_the_job_log() {
    let _guard = engine_test!();
    let mut runner = settings("svcdebug");
    runner.docker.network_mode = None;
    let job = |debug: &str| {
        no_git_job(
            46,
            604,
            &["sleep 1", "echo script-ran"],
            json!({
                "services": [{"name": SERVICE_IMAGE, "alias": "logger",
                    "command": ["sh", "-c", "echo svc-first-line; echo svc-second-line >&2; exec httpd -f -p 8080 -h /www"]}],
                "variables": [{"key": "CI_DEBUG_SERVICES", "value": debug}]
            }),
        )
    };
    let ran = run_job(&job("true"), &runner).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    for line in ["svc-first-line", "svc-second-line"] {
        let found = ran.trace.lines().any(|l| {
            l.starts_with("\x1b[0;37m[service:drover-test-executor-service-logger] ")
                && l.ends_with(&format!("Z {line}\x1b[0;m"))
        });
        assert!(found, "{line} not followed:\n{}", ran.trace);
    }
    assert!(ran.trace.contains("\nscript-ran"), "{}", ran.trace);
    let ran = run_job(&job("false"), &runner).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert!(!ran.trace.contains("[service:"), "{}", ran.trace);
    assert_clean_and_remove_reusable(&short_token(&runner));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhealthy_service_warns_and_the_job_still_runs() {
    let _guard = engine_test!();
    let mut runner = settings("svcsick");
    runner.docker.network_mode = None;
    runner.docker.services.wait_timeout = 3;
    let ran = run_job(
        &no_git_job(
            43,
            602,
            &["echo script-ran"],
            json!({"services": [{"name": SERVICE_IMAGE, "alias": "quiet",
                   "command": ["sh", "-c", "echo not-listening; sleep 300"]}]}),
        ),
        &runner,
    )
    .await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert!(
        ran.trace
            .contains("Waiting for services to be up and running (timeout 3 seconds)..."),
        "{}",
        ran.trace
    );
    assert!(
        ran.trace.contains("*** WARNING: Service ")
            && ran.trace.contains("probably didn't start properly."),
        "{}",
        ran.trace
    );
    assert!(
        ran.trace.contains("waiting for TCP connection to "),
        "{}",
        ran.trace
    );
    // The service container's own output is in the warning.
    assert!(ran.trace.contains("not-listening"), "{}", ran.trace);
    assert!(ran.trace.contains("\nscript-ran"), "{}", ran.trace);
    assert_clean_and_remove_reusable(&short_token(&runner));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disallowed_service_fails_before_anything_is_created() {
    let _guard = engine_test!();
    let mut runner = settings("svcdeny");
    runner.docker.services.allowed = vec!["postgres:*".into()];
    let ran = run_job(
        &no_git_job(
            44,
            603,
            &["echo should-not-run"],
            json!({"services": [{"name": SERVICE_IMAGE}]}),
        ),
        &runner,
    )
    .await;
    match &ran.result {
        Err(drover::executor::JobError::Failed(f)) => {
            assert!(f.message.contains("allowed services"), "{}", f.message)
        }
        other => panic!("expected a job failure, got {other:?}\n{}", ran.trace),
    }
    assert!(!ran.trace.contains("should-not-run"));
    assert_clean_and_remove_reusable(&short_token(&runner));
}
