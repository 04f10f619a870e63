//! `drover autoscale decide`, black-box: the binary on fixture configs and state files.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/autoscale")
        .join(name)
}

fn decide(config: &Path, state: &Path, extra: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(["autoscale", "decide", "-c"])
        .arg(config)
        .arg("--state")
        .arg(state)
        .args(extra)
        .output()
        .expect("drover runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(config: &Path, state: &Path, now: &str) -> Value {
    let (code, out, err) = decide(config, state, &["--now", now, "--format", "json"]);
    assert_eq!(code, 0, "stderr: {err}");
    serde_json::from_str(&out).expect("valid JSON")
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const SATURDAY_8: &str = "2026-11-21T08:00:00Z";
const FRIDAY_10: &str = "2026-11-20T10:00:00Z";

#[test]
fn json_contract_on_the_fixture() {
    let v = json(&fixture("config.toml"), &fixture("state.json"), SATURDAY_8);
    assert_eq!(
        v["runner"], "autoscale",
        "default: first docker+machine runner"
    );
    assert_eq!(v["machine_filter"], "runner-abcdefghi-auto-%s");
    assert_eq!(v["active_autoscaling"], Value::Null);
    assert_eq!(v["effective"]["IdleCount"], 2);
    assert_eq!(v["effective"]["IdleTime"], 1800);
    assert_eq!(v["effective"]["limit"], 10);
    assert_eq!(v["effective"]["MaxBuilds"], 5);
    assert_eq!(v["effective"]["IdleScaleFactor"], 0.0);
    assert_eq!(v["can_create_idle"], false);
    assert_eq!(v["can_create_on_demand"], false);
    let removals: Vec<(String, String)> = v["removals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        removals,
        vec![
            (
                "runner-abcdefghi-auto-1763625200-00000003".into(),
                "too many idle machines".into()
            ),
            (
                "runner-abcdefghi-auto-1763625400-00000005".into(),
                "too many builds".into()
            ),
            (
                "runner-abcdefghi-auto-1763625700-00000008".into(),
                "machine is unavailable".into()
            ),
        ]
    );
    assert_eq!(v["create"], 0);
    assert_eq!(
        v["acquire"]["machine"],
        "runner-abcdefghi-auto-1763625600-00000007"
    );
    assert_eq!(v["acquire"]["error"], Value::Null);
    let after = &v["counts_after"];
    assert_eq!(
        [
            &after["acquired"],
            &after["creating"],
            &after["idle"],
            &after["used"],
            &after["removing"],
            &after["stuck_on_removing"]
        ],
        [1, 1, 2, 1, 3, 1].map(Value::from).each_ref()
    );
}

#[test]
fn the_active_period_changes_the_effective_settings() {
    let v = json(&fixture("config.toml"), &fixture("state.json"), FRIDAY_10);
    assert_eq!(v["active_autoscaling"], 0);
    assert_eq!(v["effective"]["IdleCount"], 4);
    assert_eq!(v["effective"]["IdleTime"], 600);
    assert_eq!(
        v["effective"]["IdleCountMin"], 0,
        "unset in the section: zero"
    );
}

#[test]
fn text_explains_each_decision_in_a_sentence() {
    let (code, out, err) = decide(
        &fixture("config.toml"),
        &fixture("state.json"),
        &["--now", SATURDAY_8],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "removed runner-abcdefghi-auto-1763625200-00000003: idle for 1830 s > IdleTime 1800 s \
         and 2 available >= IdleCount 2 (too many idle machines)"
        ),
        "{out}"
    );
    assert!(
        out.contains("used 5 times >= MaxBuilds 5 (too many builds)"),
        "{out}"
    );
    assert!(out.contains("(machine is unavailable)"), "{out}");
    assert!(
        out.contains("acquired runner-abcdefghi-auto-1763625600-00000007"),
        "{out}"
    );
}

#[test]
fn an_empty_pool_pre_creates_and_refuses_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let state = write(&dir, "state.json", r#"{"machines": []}"#);
    let v = json(&fixture("config.toml"), &state, SATURDAY_8);
    assert_eq!(v["can_create_idle"], true);
    assert_eq!(v["create"], 2);
    assert_eq!(v["acquire"]["machine"], Value::Null);
    assert_eq!(
        v["acquire"]["error"],
        "no free machines that can process builds"
    );
    assert_eq!(v["counts_after"]["creating"], 2);
}

const RUNNER: &str = r#"
[[runners]]
  name = "r"
  url = "https://gitlab.example.com/"
  token = "glrt-abcdefghijk"
  executor = "docker+machine"
"#;

#[test]
fn errors_exit_non_zero_with_the_message_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let state = write(&dir, "state.json", r#"{"machines": []}"#);
    let cases = [
        (
            "bad period",
            format!(
                "{RUNNER}  [runners.machine]\n    MachineName = \"auto-%s\"\n    \
                 [[runners.machine.autoscaling]]\n      Periods = [\"* * 25 * * * *\"]\n"
            ),
            "",
        ),
        (
            "no machine section",
            RUNNER.to_string(),
            "[runners.machine]",
        ),
        (
            "empty MachineName",
            format!("{RUNNER}  [runners.machine]\n    IdleCount = 1\n"),
            "MachineName",
        ),
    ];
    for (what, config, needle) in cases {
        let config = write(&dir, "config.toml", &config);
        let (code, out, err) = decide(&config, &state, &["--now", SATURDAY_8]);
        assert_ne!(code, 0, "{what}: {out}");
        assert!(out.is_empty(), "{what}: nothing on stdout");
        assert!(err.starts_with("drover: "), "{what}: {err}");
        assert!(err.contains(needle), "{what}: {err}");
    }
    let (code, _, err) = decide(&fixture("config.toml"), &state, &["--runner", "nope"]);
    assert_ne!(code, 0);
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn a_machine_name_without_verb_loads_matches_nothing_and_warns() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir,
        "config.toml",
        &format!("{RUNNER}  [runners.machine]\n    MachineName = \"auto\"\n    IdleCount = 0\n"),
    );
    let state = write(
        &dir,
        "state.json",
        r#"{"machines": [{"name": "runner-abcdefghi-auto"}, {"name": "runner-abcdefghi-auto-1"}]}"#,
    );
    let (code, out, err) = decide(&config, &state, &["--now", SATURDAY_8, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("has no %s"), "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["counts_after"]["idle"], 0, "no listed machine matches");
    assert_eq!(v["acquire"]["error"], Value::Null, "IdleCount 0: on demand");
}

#[test]
fn runner_flag_picks_by_name_and_bad_state_is_reported_with_position() {
    let dir = tempfile::tempdir().unwrap();
    let state = write(&dir, "state.json", "{\"machines\": [\n {\"name\": 3}]}");
    let (code, _, err) = decide(&fixture("config.toml"), &state, &["--runner", "autoscale"]);
    assert_ne!(code, 0);
    assert!(err.contains("state.json:2:"), "{err}");
    let (code, _, err) = decide(
        &fixture("config.toml"),
        &fixture("state.json"),
        &["--runner", "shell-runner"],
    );
    assert_ne!(code, 0);
    assert!(err.contains("[runners.machine]"), "{err}");
}

#[test]
fn the_engines_warnings_are_shown() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir,
        "config.toml",
        "[[runners]]\nname = \"absurd\"\nurl = \"https://gitlab.example.com\"\n\
         token = \"glrt-abcdefghijklmno\"\nexecutor = \"docker+machine\"\nlimit = 0\n\
         [runners.machine]\nMachineDriver = \"google\"\nMachineName = \"auto-%s\"\n\
         IdleCount = 1000000000\nIdleTime = 600\n",
    );
    let state = write(&dir, "state.json", "{\"machines\": []}");
    let (code, out, err) = decide(&config, &state, &["--now", FRIDAY_10, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("drover: warning: stopped after starting 100000 creations in one pass"),
        "stderr: {err}"
    );
    let v: Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["create"], 100_000);
    assert!(
        v["warnings"].as_array().is_some_and(|w| w
            .iter()
            .any(|w| w.as_str().is_some_and(|w| w.contains("stopped after")))),
        "{}",
        v["warnings"]
    );
}
