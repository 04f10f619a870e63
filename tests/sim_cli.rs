//! `drover simulate`, `drover compare` and `drover workload import` as an operator runs them.

use std::path::Path;
use std::process::{Command, Output};

fn drover(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(args)
        .current_dir(dir)
        .env_remove("CONFIG_FILE")
        .output()
        .expect("run drover")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const CONFIG: &str = r#"
concurrent = 20
[[runners]]
  name = "auto"
  url = "https://gitlab.example.com"
  token = "glrt-clitesttoken123"
  executor = "docker+machine"
  limit = 10
  [runners.docker]
    image = "alpine"
  [runners.machine]
    IdleCount = IDLE
    IdleTime = 300
    MachineDriver = "google"
    MachineName = "auto-%s"
"#;

const JOBS: &str = "submitted_at,duration_s\n0,60\n5,120\n300,30\n";

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.toml"), CONFIG.replace("IDLE", "1")).unwrap();
    std::fs::write(dir.path().join("a2.toml"), CONFIG.replace("IDLE", "1")).unwrap();
    std::fs::write(dir.path().join("b.toml"), CONFIG.replace("IDLE", "2")).unwrap();
    std::fs::write(dir.path().join("jobs.csv"), JOBS).unwrap();
    dir
}

#[test]
fn simulate_with_no_arguments_runs_the_bundled_example() {
    let dir = tempfile::tempdir().unwrap();
    let out = drover(&["simulate"], dir.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("peak machines"), "{stdout}");
    assert!(
        stdout.contains("jobs completed                     1392"),
        "{stdout}"
    );
}

#[test]
fn simulate_writes_json_timeline_and_plot() {
    let dir = setup();
    let out = drover(
        &[
            "simulate",
            "-c",
            "a.toml",
            "--workload",
            "jobs.csv",
            "--format",
            "json",
            "--timeline",
            "t.csv",
            "--plot",
            "p.svg",
            "--seed",
            "3",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["jobs"], 3);
    assert_eq!(json["jobs_completed"], 3);
    assert_eq!(json["seed"], 3);
    assert!(json["machine_seconds"]["used"].as_f64().unwrap() >= 210.0);
    assert!(json["queue_wait_s"]["max"].is_number());
    let timeline = std::fs::read_to_string(dir.path().join("t.csv")).unwrap();
    assert!(timeline.starts_with("time,idle,used,creating,removing,total,queued\n"));
    assert!(timeline.lines().count() > 3);
    let svg = std::fs::read_to_string(dir.path().join("p.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    // The same seed gives the same bytes.
    let again = drover(
        &[
            "simulate", "-c", "a.toml", "-w", "jobs.csv", "--format", "json", "--seed", "3",
        ],
        dir.path(),
    );
    assert_eq!(out.stdout, again.stdout);
}

#[test]
fn compare_expect_identical_passes_for_equal_configs_and_fails_for_a_changed_idle_count() {
    let dir = setup();
    let same = drover(
        &[
            "compare",
            "a.toml",
            "a2.toml",
            "-w",
            "jobs.csv",
            "--expect-identical",
        ],
        dir.path(),
    );
    assert!(
        same.status.success(),
        "{}{}",
        text(&same.stdout),
        text(&same.stderr)
    );
    assert!(text(&same.stdout).contains("identical"));

    let changed = drover(
        &[
            "compare",
            "a.toml",
            "b.toml",
            "-w",
            "jobs.csv",
            "--expect-identical",
            "--plot",
            "o.svg",
        ],
        dir.path(),
    );
    assert_eq!(changed.status.code(), Some(1));
    let stdout = text(&changed.stdout);
    assert!(stdout.contains("decisions diverge"), "{stdout}");
    assert!(stdout.contains("2026-01-05T00:00:00Z"), "{stdout}");
    assert!(text(&changed.stderr).starts_with("drover: "));
    assert!(dir.path().join("o.svg").exists());

    // Without --expect-identical a difference is not an error.
    let plain = drover(
        &["compare", "a.toml", "b.toml", "-w", "jobs.csv"],
        dir.path(),
    );
    assert!(plain.status.success());
}

#[test]
fn bad_inputs_give_one_located_message() {
    let dir = setup();
    std::fs::write(
        dir.path().join("bad.csv"),
        "submitted_at,duration_s\n0,60\n1,soon\n",
    )
    .unwrap();
    let out = drover(&["simulate", "-c", "a.toml", "-w", "bad.csv"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("drover: bad.csv:3: duration_s \"soon\""),
        "{stderr}"
    );

    let out = drover(&["simulate", "-c", "missing.toml"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).starts_with("drover: "));

    let out = drover(&["simulate", "--from", "tomorrow"], dir.path());
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn workload_import_converts_an_export() {
    let dir = setup();
    let export = r#"[{"id": 1, "created_at": "2026-01-05T09:00:00Z",
        "started_at": "2026-01-05T09:00:05Z", "finished_at": "2026-01-05T09:01:05Z",
        "tag_list": ["docker"], "runner": {"description": "auto"}},
        {"id": 2, "created_at": "2026-01-05T09:00:00Z", "started_at": null}]"#;
    std::fs::write(dir.path().join("export.json"), export).unwrap();
    let out = drover(
        &["workload", "import", "export.json", "-o", "w.csv"],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let csv = std::fs::read_to_string(dir.path().join("w.csv")).unwrap();
    assert_eq!(
        csv,
        "submitted_at,duration_s,runner,tags\n2026-01-05T09:00:00Z,60,auto,docker\n"
    );
    assert!(text(&out.stderr).contains("left out 1 that never started"));
    // simulate reads the export directly.
    let out = drover(
        &[
            "simulate",
            "-c",
            "a.toml",
            "-w",
            "export.json",
            "--format",
            "json",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["jobs_completed"], 1);
}

#[test]
fn config_log_level_and_format_apply_unless_a_flag_sets_them() {
    let dir = setup();
    let with = |settings: &str| {
        let text = format!("{settings}\n{}", CONFIG.replace("IDLE", "1"));
        std::fs::write(dir.path().join("logged.toml"), text).unwrap();
    };
    let run = |extra: &[&str]| {
        let mut args = vec!["simulate", "-c", "logged.toml", "-w", "jobs.csv"];
        args.extend_from_slice(extra);
        let out = Command::new(env!("CARGO_BIN_EXE_drover"))
            .args(&args)
            .current_dir(dir.path())
            .env_remove("CONFIG_FILE")
            .env_remove("LOG_LEVEL")
            .env_remove("LOG_FORMAT")
            .env_remove("RUNNER_DEBUG")
            .output()
            .expect("run drover");
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stderr)
    };
    with("log_level = \"debug\"");
    assert!(
        run(&[]).contains("loaded the config file"),
        "config log_level = debug applies"
    );
    assert!(
        !run(&["--log-level", "warn"]).contains("loaded the config file"),
        "--log-level wins over the config"
    );
    with("log_level = \"warn\"");
    assert!(!run(&[]).contains("loaded the config file"));
    assert!(run(&["--debug"]).contains("loaded the config file"));
    with("log_level = \"debug\"\nlog_format = \"json\"");
    let stderr = run(&[]);
    let line = stderr
        .lines()
        .find(|l| l.contains("loaded the config file"))
        .unwrap_or_else(|| panic!("no debug line: {stderr}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(v["level"], "debug", "{line}");
    assert!(
        !run(&["--log-format", "text"])
            .lines()
            .any(|l| l.starts_with('{')),
        "--log-format wins over the config"
    );
    // An unknown value is a load error at its line.
    with("log_level = \"loud\"");
    let out = drover(
        &["simulate", "-c", "logged.toml", "-w", "jobs.csv"],
        dir.path(),
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("logged.toml:1:13") && stderr.contains("unknown log_level \"loud\""),
        "{stderr}"
    );
}
