//! `drover check-config` as an operator runs it: exit codes 0/1/2, the text report and the
//! JSON shape other tools read.

use std::path::PathBuf;
use std::process::Command;

fn drover() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_drover"));
    c.env_remove("CONFIG_FILE");
    c
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn json(args: &[&str]) -> (i32, serde_json::Value) {
    let out = drover()
        .arg("check-config")
        .args(args)
        .args(["--format", "json"])
        .output()
        .expect("runs");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

#[test]
fn example_config_text_report() {
    let example = root().join("config.toml.example");
    let out = drover()
        .args(["check-config", "-c"])
        .arg(&example)
        .args(["--now", "2026-03-02T10:00:00Z"])
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("runners[0] \"gce-autoscaler\": executor docker+machine, limit 20"),
        "{text}"
    );
    assert!(text.contains("active now: autoscaling[0]"), "{text}");
    assert!(
        text.contains(
            "effective now: IdleCount 10, IdleCountMin 2, IdleScaleFactor 0.5, IdleTime 3600s"
        ),
        "{text}"
    );
    // 18:59:59 Berlin (CET, UTC+1) is the first second out of the 8-18 period.
    assert!(
        text.contains("from 2026-03-02T17:59:59+00:00: none"),
        "{text}"
    );
    assert_eq!(
        text.matches("\n  from ").count(),
        3,
        "three upcoming changes: {text}"
    );
    assert!(text.contains("no warnings"));
}

#[test]
fn json_report_shape() {
    let example = root().join("config.toml.example");
    let (code, v) = json(&[
        "-c",
        example.to_str().expect("utf-8 path"),
        "--now",
        "2026-03-07T12:00:00+01:00",
    ]);
    assert_eq!(code, 0);
    assert_eq!(v["concurrent"], 20);
    assert_eq!(v["check_interval"], 3);
    let r = &v["runners"][0];
    assert_eq!(r["name"], "gce-autoscaler");
    assert_eq!(r["executor"], "docker+machine");
    assert_eq!(r["limit"], 20);
    let m = &r["machine"];
    assert_eq!(m["IdleCount"], 1);
    assert_eq!(m["IdleTime"], 1800);
    assert_eq!(m["MaxBuilds"], 50);
    assert_eq!(m["MaxGrowthRate"], 5);
    assert_eq!(m["MachineDriver"], "google");
    assert_eq!(m["MachineName"], "gce-%s");
    assert_eq!(m["MachineOptions"].as_array().map(Vec::len), Some(9));
    assert_eq!(m["autoscaling_sections"], 2);
    // Saturday: the weekend section.
    assert_eq!(m["active_section"], 1);
    assert_eq!(m["effective"]["IdleCount"], 0);
    assert_eq!(m["effective"]["IdleTime"], 300);
    assert_eq!(m["effective"]["IdleCountMin"], 0);
    assert_eq!(m["effective"]["IdleScaleFactor"], 0.0);
    assert_eq!(v["warnings"], serde_json::json!([]));
    assert_eq!(v["errors"], serde_json::json!([]));
}

#[test]
fn json_warnings_have_lines() {
    let f = root().join("fixtures/configs/valid/utf8_bom.toml");
    let (code, v) = json(&["-c", f.to_str().expect("path")]);
    assert_eq!(code, 0);
    assert_eq!(
        v["runners"][0]["machine"]["active_section"],
        serde_json::Value::Null
    );
    let corpus =
        PathBuf::from("/work/shared/corpus/configs/real/dmwm__CRABServer__etc-gitlab-runner.toml");
    if corpus.exists() {
        let (code, v) = json(&["-c", corpus.to_str().expect("path")]);
        assert_eq!(code, 0);
        assert_eq!(v["runners"][0]["machine"], serde_json::Value::Null);
        assert_eq!(v["warnings"][0]["line"], 4);
    }
}

#[test]
fn errors_exit_1_and_are_in_json() {
    let f = root().join("fixtures/configs/malformed/bad_cron.toml");
    let (code, v) = json(&["-c", f.to_str().expect("path")]);
    assert_eq!(code, 1);
    let e = &v["errors"][0];
    assert_eq!(e["line"], 14);
    assert_eq!(e["column"], 44);
    assert!(e["message"]
        .as_str()
        .is_some_and(|m| m.contains("Periods[1]")));

    let out = drover()
        .arg("check-config")
        .arg("-c")
        .arg(&f)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("drover: "), "{err}");
    assert!(err.contains("bad_cron.toml:14:44: error:"), "{err}");
}

#[test]
fn missing_file_exits_1() {
    let (code, v) = json(&["-c", "/nonexistent/drover/config.toml"]);
    assert_eq!(code, 1);
    assert!(v["errors"][0]["message"]
        .as_str()
        .is_some_and(|m| m.contains("/nonexistent/drover/config.toml")));
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        vec!["check-config", "--now", "yesterday"],
        vec!["check-config", "--format", "yaml"],
        vec!["check-config", "--bogus"],
    ] {
        let out = drover().args(&args).output().expect("runs");
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn config_file_from_environment() {
    let example = root().join("config.toml.example");
    let out = drover()
        .arg("check-config")
        .env("CONFIG_FILE", &example)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("gce-autoscaler"));
}

#[test]
fn files_that_never_end_are_refused_with_the_limit() {
    // A device, or a file growing without end, is read only up to a limit and then refused.
    let out = drover()
        .args(["check-config", "-c", "/dev/zero"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("/dev/zero is larger than 134217728 bytes"),
        "{stderr}"
    );
}

#[test]
fn json_syntax_errors_carry_key_section_and_source_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("syntax.toml");
    std::fs::write(
        &path,
        "[[runners]]\n  name = \"a\"\n[[runners]]\n  name = \"b\"\n  [runners.machine]\n    IdleCount = 5\n    IdleTime = \n",
    )
    .expect("write");
    let (code, v) = json(&["-c", path.to_str().expect("path")]);
    assert_eq!(code, 1);
    let e = &v["errors"][0];
    assert_eq!(e["line"], 7, "{e}");
    assert_eq!(e["key"], "runners[1].machine.IdleTime", "{e}");
    assert_eq!(e["section"], "[runners.machine]", "{e}");
    assert_eq!(e["source_line"], "    IdleTime = ", "{e}");
    // The text report names the same.
    let out = drover()
        .args(["check-config", "-c"])
        .arg(&path)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("= in: [runners.machine], key runners[1].machine.IdleTime"),
        "{stderr}"
    );
}
