//! The conformance suite against real plugin executables: the example shell plugin and the
//! shim (against the fake docker-machine) pass; broken plugins fail; `drover provider test`
//! prints one line per check and sets its exit status.

mod provider_support;

use std::process::Command;

use drover::provider::conformance::{self, CheckResult, SuiteConfig};
use drover::provider::plugin::PluginCommand;
use provider_support::*;

fn run_suite(cmd: PluginCommand, cfg: &SuiteConfig) -> Vec<CheckResult> {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(conformance::run(cmd, cfg, |r| eprintln!("{}", r.line())))
}

fn failures(results: &[CheckResult]) -> Vec<String> {
    results
        .iter()
        .filter(|r| !r.passed())
        .map(|r| r.line())
        .collect()
}

#[test]
fn example_plugin_passes() {
    let state = tempfile::tempdir().expect("tempdir");
    let cmd = PluginCommand::new(
        example_plugin(),
        vec!["--state-dir".into(), state.path().display().to_string()],
    );
    let results = run_suite(cmd, &SuiteConfig::default());
    assert!(results.len() >= 20, "suite stopped early: {results:?}");
    assert_eq!(failures(&results), Vec::<String>::new());
}

#[test]
fn shim_passes_against_the_fake() {
    let world = FakeWorld::new();
    let cfg = SuiteConfig {
        driver: "none".into(),
        options: vec!["url=tcp://127.0.0.1:9".into()],
        name_prefix: "drover-test-provider-".into(),
        ..SuiteConfig::default()
    };
    // Provisioning copies the store's certs into the machine directory (cert_dir).
    world.set_faults(serde_json::json!({"copy_certs": true}));
    let results = run_suite(world.shim(&[]), &cfg);
    assert!(results.len() >= 20, "suite stopped early: {results:?}");
    assert_eq!(failures(&results), Vec::<String>::new());
    // The suite's machine is gone and the store holds nothing else.
    let left: Vec<_> = std::fs::read_dir(world.store().join("machines"))
        .expect("machines dir")
        .collect();
    assert!(left.is_empty(), "machines left behind: {left:?}");
}

#[test]
fn shim_passes_against_the_real_docker_machine() {
    let Some(dm) = real_dm() else {
        return;
    };
    let world = FakeWorld::new();
    let cfg = SuiteConfig {
        driver: "none".into(),
        options: vec!["url=tcp://127.0.0.1:9".into()],
        name_prefix: "drover-test-provider-".into(),
        ..SuiteConfig::default()
    };
    let results = run_suite(world.shim_with(&dm, &[]), &cfg);
    assert!(results.len() >= 20, "suite stopped early: {results:?}");
    // The `none` driver provisions nothing: the machine directory (docker-machine's cert path
    // for it) holds no certificates, and the suite says so. Everything else passes.
    let failed = failures(&results);
    assert!(
        failed.len() == 1
            && failed[0].contains("credentials")
            && failed[0].contains("lacks ca.pem"),
        "{failed:?}"
    );
    let left: Vec<_> = std::fs::read_dir(world.store().join("machines"))
        .expect("machines dir")
        .collect();
    assert!(left.is_empty(), "machines left behind: {left:?}");
}

/// Writes a Python plugin and returns a wrapper-free command for it: exec'ing a file that
/// another test thread just wrote races (ETXTBSY), so scripts run through `python3`.
fn script(dir: &std::path::Path, name: &str, body: &str) -> PluginCommand {
    let p = dir.join(name);
    std::fs::write(&p, body).expect("write script");
    PluginCommand::new("python3", vec![p.display().to_string()])
}

/// Says yes to everything: no kinds, no idempotence, no refusal.
const YES_MAN: &str = r#"#!/usr/bin/env python3
import json, sys
for line in sys.stdin:
    req = json.loads(line)
    if "id" not in req:
        continue
    if req["op"] == "handshake":
        r = {"protocol_version": 1, "name": "yes-man", "version": "0"}
    else:
        r = {}
    print(json.dumps({"id": req["id"], "ok": True, "result": r}), flush=True)
"#;

#[test]
fn a_plugin_that_says_yes_to_everything_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = script(dir.path(), "yes-man", YES_MAN);
    let results = run_suite(p, &SuiteConfig::default());
    let failed = failures(&results);
    for check in [
        "unknown_operation",
        "exists_absent",
        "credentials_absent",
        "refuse_outside_prefix",
        "create_duplicate_refused",
    ] {
        assert!(
            failed.iter().any(|l| l.contains(check)),
            "{check} should fail: {failed:?}"
        );
    }
}

/// Answers `create` with CREATE_RESULT and `credentials` with a TLS endpoint whose cert files
/// do not exist; everything else as YES_MAN.
const LAZY: &str = r#"#!/usr/bin/env python3
import json, sys
for line in sys.stdin:
    req = json.loads(line)
    if "id" not in req:
        continue
    op = req["op"]
    if op == "handshake":
        r = {"protocol_version": 1, "name": "lazy", "version": "0"}
    elif op == "create":
        r = CREATE_RESULT
    elif op == "credentials":
        r = {"endpoint": {"type": "tcp_tls", "host": "tcp://127.0.0.1:2376",
                          "cert_dir": "/nonexistent/drover-test-certs", "tls_verify": True}}
    elif op == "exists":
        r = {"exists": True}
    else:
        r = {}
    print(json.dumps({"id": req["id"], "ok": True, "result": r}), flush=True)
"#;

#[test]
fn a_null_create_result_and_missing_cert_files_fail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let null = script(dir.path(), "null", &LAZY.replace("CREATE_RESULT", "None"));
    let failed = failures(&run_suite(null, &SuiteConfig::default()));
    assert!(
        failed
            .iter()
            .any(|l| l.contains("create") && l.contains("result null")),
        "a null create result must fail: {failed:?}"
    );
    let certless = script(dir.path(), "certless", &LAZY.replace("CREATE_RESULT", "{}"));
    let failed = failures(&run_suite(certless, &SuiteConfig::default()));
    assert!(
        !failed.iter().any(|l| l.starts_with("FAIL  create ")),
        "{failed:?}"
    );
    assert!(
        failed
            .iter()
            .any(|l| l.contains("credentials") && l.contains("lacks ca.pem, cert.pem, key.pem")),
        "a credentials answer without cert files must fail: {failed:?}"
    );
}

#[test]
fn a_wrong_protocol_version_is_refused_at_the_handshake() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = script(
        dir.path(),
        "v2",
        &YES_MAN.replace("\"protocol_version\": 1", "\"protocol_version\": 2"),
    );
    let results = run_suite(p, &SuiteConfig::default());
    assert_eq!(results.len(), 1);
    let line = results[0].line();
    assert!(line.starts_with("FAIL  handshake"), "{line}");
    assert!(line.contains("protocol version 2"), "{line}");
}

#[test]
fn cli_prints_one_line_per_check_and_sets_the_exit_status() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let good = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(["provider", "test"])
        .arg(example_plugin())
        .arg("--")
        .arg("--state-dir")
        .arg(&state)
        .output()
        .expect("run drover");
    let stdout = String::from_utf8_lossy(&good.stdout);
    assert!(good.status.success(), "{stdout}");
    assert!(stdout.lines().filter(|l| l.starts_with("ok    ")).count() >= 20);
    assert!(stdout.contains("0 failed"), "{stdout}");

    let yes_man = script(dir.path(), "yes-man", YES_MAN);
    let bad = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(["provider", "test"])
        .arg(&yes_man.program)
        .arg("--")
        .args(&yes_man.args)
        .output()
        .expect("run drover");
    let stdout = String::from_utf8_lossy(&bad.stdout);
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(1), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("FAIL  ")), "{stdout}");
    assert!(stderr.starts_with("drover: "), "{stderr}");

    let missing = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(["provider", "test", "/nonexistent/plugin"])
        .output()
        .expect("run drover");
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stdout).contains("FAIL  handshake: cannot start"));
}
