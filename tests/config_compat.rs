//! Upstream decoder habits operators' files rely on: TOML 1.1 syntax, a UTF-8 BOM, empty
//! files, case-insensitive keys, integers for floats, Go durations, `$VAR` in url/token,
//! unknown keys as warnings; plus the effective-idle rule (spec §2) and the example config.

use chrono::{DateTime, Utc};
use drover::config::{load_file, load_str, AutoscalingConfig, Loaded};

fn ok(text: &str) -> Loaded {
    match load_str(text, "test.toml") {
        Ok(l) => l,
        Err(e) => panic!("must load:\n{e}"),
    }
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("instant")
        .with_timezone(&Utc)
}

const RUNNER: &str = r#"
[[runners]]
  name = "r"
  url = "https://gitlab.example.com/"
  token = "glrt-FAKE"
  executor = "docker+machine"
"#;

#[test]
fn empty_and_comment_only_files_give_defaults() {
    for text in ["", "\n\n", "# only a comment\n   # another\n", "\u{feff}"] {
        let l = ok(text);
        assert_eq!(l.config.concurrent, 1);
        assert!(l.config.runners.is_empty());
        assert!(l.warnings.is_empty());
        assert_eq!(l.config.session_server.session_timeout, 1800);
    }
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/configs/valid");
    for name in ["empty.toml", "comments_only.toml"] {
        let l = load_file(&dir.join(name)).expect("loads");
        assert_eq!((l.config.concurrent, l.config.runners.len()), (1, 0));
    }
}

#[test]
fn utf8_byte_order_mark_is_accepted() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/configs/valid");
    let l = load_file(&dir.join("utf8_bom.toml")).expect("BOM file loads");
    assert_eq!(l.config.concurrent, 4);
    assert_eq!(l.config.runners[0].name, "first");
}

#[test]
fn toml_1_1_syntax() {
    let text = r#"
concurrent = 2
labels = {
    team = "ci",
    tier = "prod",
}
[[runners]]
  name = "esc\e[0m and \x41"
  url = "https://gitlab.example.com/"
  token = "t"
  executor = "docker"
  token_obtained_at = 2025-07-30T13:09Z
  [runners.docker]
    tmpfs = {
      "/tmp" = "rw,size=64m",
    }
"#;
    let l = ok(text);
    assert_eq!(
        l.config.labels.get("tier").map(String::as_str),
        Some("prod")
    );
    let r = &l.config.runners[0];
    assert_eq!(r.name, "esc\u{1b}[0m and A");
    assert_eq!(
        r.token_obtained_at,
        Some(at("2025-07-30T13:09:00Z")),
        "time without seconds"
    );
    assert_eq!(
        r.docker
            .as_ref()
            .and_then(|d| d.tmpfs.get("/tmp"))
            .map(String::as_str),
        Some("rw,size=64m")
    );
}

#[test]
fn keys_match_ignoring_case_exact_first() {
    let text = format!(
        "{RUNNER}  [runners.Machine]\n    idlecount = 3\n    IDLETIME = 60\n    machinename = \"m-%s\"\n    MachineDriver = \"google\"\n"
    );
    let l = ok(&text);
    let m = l.config.runners[0]
        .machine
        .as_ref()
        .expect("[runners.Machine] is [runners.machine]");
    assert_eq!(
        (m.idle_count, m.idle_time, m.machine_name.as_str()),
        (3, 60, "m-%s")
    );
    let w = l
        .warnings
        .iter()
        .find(|w| w.message.contains("`idlecount` is read as `IdleCount`"))
        .expect("case warning");
    assert_eq!(w.line, 8);

    // The same setting twice: the exactly spelled key wins, with a warning.
    let text = format!("{RUNNER}  [runners.machine]\n    idlecount = 3\n    IdleCount = 5\n");
    let l = ok(&text);
    assert_eq!(
        l.config.runners[0].machine.as_ref().map(|m| m.idle_count),
        Some(5)
    );
    assert!(l
        .warnings
        .iter()
        .any(|w| w.message.contains("sets the same setting")));
    let text = format!("{RUNNER}  [runners.machine]\n    IdleCount = 5\n    idlecount = 3\n");
    let l = ok(&text);
    assert_eq!(
        l.config.runners[0].machine.as_ref().map(|m| m.idle_count),
        Some(5)
    );
}

#[test]
fn integers_are_accepted_for_floats() {
    let text = format!("{RUNNER}  [runners.machine]\n    IdleScaleFactor = 2\n    [[runners.machine.autoscaling]]\n      Periods = [\"* * * * * * *\"]\n      Timezone = \"UTC\"\n      IdleScaleFactor = -3\n");
    let l = ok(&text);
    let m = l.config.runners[0].machine.as_ref().expect("machine");
    assert_eq!(m.idle_scale_factor, 2.0);
    assert_eq!(m.autoscaling[0].idle_scale_factor, -3.0);
}

#[test]
fn durations_are_go_strings_or_nanoseconds() {
    let l = ok(
        "connection_max_age = \"1h30m\"\n[machine.shutdown_drain]\n  retry_backoff = 2500000000\n",
    );
    assert_eq!(l.config.connection_max_age.map(|d| d.as_secs()), Some(5400));
    let drain = l
        .config
        .machine
        .as_ref()
        .and_then(|m| m.shutdown_drain.as_ref())
        .expect("drain");
    assert_eq!(
        drain.retry_backoff.map(|d| d.as_nanos()),
        Some(2_500_000_000)
    );
    let l = ok(&format!("{RUNNER}  unhealthy_interval = \"1.5s\"\n"));
    assert_eq!(
        l.config.runners[0].unhealthy_interval.map(|d| d.as_nanos()),
        Some(1_500_000_000)
    );
    let e = load_str("connection_max_age = \"15\"\n", "d.toml").expect_err("no unit");
    assert!(e.to_string().contains("missing unit"), "{e}");
    let e = load_str("connection_max_age = true\n", "d.toml").expect_err("bool");
    assert!(e.to_string().contains("expected a duration"), "{e}");
}

#[test]
fn url_and_token_expand_environment_variables() {
    // A variable only this test sets, so parallel tests are unaffected.
    std::env::set_var("DROVER_CONFIG_TEST_TOKEN", "glrt-from-env");
    std::env::set_var("DROVER_CONFIG_TEST_HOST", "gitlab.internal");
    let l = ok("[[runners]]\n  url = \"https://${DROVER_CONFIG_TEST_HOST}/\"\n  token = \"$DROVER_CONFIG_TEST_TOKEN\"\n  executor = \"docker\"\n  builds_dir = \"/b/$DROVER_CONFIG_TEST_HOST\"\n");
    let r = &l.config.runners[0];
    assert_eq!(r.url, "https://gitlab.internal/");
    assert_eq!(r.token, "glrt-from-env");
    assert_eq!(
        r.builds_dir, "/b/$DROVER_CONFIG_TEST_HOST",
        "only url and token are expanded"
    );
    let l =
        ok("[[runners]]\n  token = \"${DROVER_CONFIG_TEST_UNSET_VAR}\"\n  executor = \"docker\"\n");
    assert_eq!(l.config.runners[0].token, "");
}

#[test]
fn unknown_and_newer_keys_are_warnings_with_lines() {
    let text = format!("future_global = 1\n{RUNNER}  some_new_runner_key = \"x\"\n  [runners.machine]\n    IdleTme = 5\n  [runners.docker]\n    image = \"alpine\"\n    shiny_new_option = [1, 2]\n[some_new_section]\n  a = 1\n");
    let l = ok(&text);
    let lines: Vec<(usize, bool)> = l
        .warnings
        .iter()
        .map(|w| (w.line, w.message.contains("unknown key")))
        .collect();
    assert!(lines.contains(&(1, true)), "{:?}", l.warnings);
    assert!(lines.contains(&(8, true)));
    assert!(lines.contains(&(10, true)));
    assert!(lines.contains(&(13, true)));
    assert!(
        lines.contains(&(14, true)),
        "an unknown section is one warning at its header"
    );
    let typo = l
        .warnings
        .iter()
        .find(|w| w.line == 10)
        .expect("typo warning");
    assert!(typo
        .hint
        .as_deref()
        .is_some_and(|h| h.contains("did you mean `IdleTime`")));
}

#[test]
fn other_executor_sections_load_as_warnings() {
    let text = format!("{}  [runners.kubernetes]\n    namespace = \"ci\"\n    [runners.kubernetes.node_selector]\n      \"a/b\" = \"c\"\n  [runners.autoscaler]\n    plugin = \"x\"\n    [[runners.autoscaler.policy]]\n      idle_count = 1\n", RUNNER.replace("docker+machine", "docker"));
    let l = ok(&text);
    let r = &l.config.runners[0];
    assert!(r.kubernetes.is_some() && r.autoscaler.is_some());
    assert_eq!(l.warnings.len(), 2, "{:?}", l.warnings);
}

fn machine_with_sections(sections: &str) -> Loaded {
    ok(&format!(
        "{RUNNER}  [runners.machine]\n    IdleCount = 4\n    IdleCountMin = 1\n    IdleScaleFactor = 0.25\n    IdleTime = 900\n    MachineName = \"m-%s\"\n    MachineDriver = \"google\"\n{sections}"
    ))
}

#[test]
fn effective_idle_last_matching_section_wins_and_unset_values_are_zero() {
    let l = machine_with_sections(
        r#"    [[runners.machine.autoscaling]]
      Periods = ["* * 9-17 * * mon-fri *"]
      Timezone = "UTC"
      IdleCount = 10
      IdleCountMin = 3
      IdleScaleFactor = 1.5
      IdleTime = 3600
    [[runners.machine.autoscaling]]
      Periods = ["* * 12-13 * * * *"]
      Timezone = "UTC"
      IdleCount = 20
    [[runners.machine.autoscaling]]
      Periods = []
      Timezone = "UTC"
      IdleCount = 99
"#,
    );
    let m = l.config.runners[0].machine.as_ref().expect("machine");
    // Monday 10:00: only section 0.
    let e = m.effective_idle(at("2026-11-23T10:00:00Z"));
    assert_eq!(
        (
            e.active_section,
            e.idle_count,
            e.idle_count_min,
            e.idle_scale_factor,
            e.idle_time
        ),
        (Some(0), 10, 3, 1.5, 3600)
    );
    // Monday 12:30: sections 0 and 1 match; the last wins and its unset values are 0.
    let e = m.effective_idle(at("2026-11-23T12:30:00Z"));
    assert_eq!(
        (
            e.active_section,
            e.idle_count,
            e.idle_count_min,
            e.idle_scale_factor,
            e.idle_time
        ),
        (Some(1), 20, 0, 0.0, 0)
    );
    // Monday 20:00: nothing matches; the root values apply. Empty Periods never match.
    let e = m.effective_idle(at("2026-11-23T20:00:00Z"));
    assert_eq!(
        (
            e.active_section,
            e.idle_count,
            e.idle_count_min,
            e.idle_scale_factor,
            e.idle_time
        ),
        (None, 4, 1, 0.25, 900)
    );
    assert!(
        l.warnings
            .iter()
            .any(|w| w.message.contains("never active")),
        "{:?}",
        l.warnings
    );

    let changes = m.idle_changes(at("2026-11-23T10:00:00Z"), 3, chrono::Duration::days(7));
    let got: Vec<_> = changes
        .iter()
        .map(|(t, e)| (t.to_rfc3339(), e.active_section, e.idle_count))
        .collect();
    assert_eq!(
        got,
        [
            ("2026-11-23T11:59:59+00:00".to_string(), Some(1), 20),
            ("2026-11-23T13:59:59+00:00".to_string(), Some(0), 10),
            ("2026-11-23T17:59:59+00:00".to_string(), None, 4),
        ]
    );
}

#[test]
fn autoscaling_sections_can_be_built_in_code() {
    let mut a =
        AutoscalingConfig::new(vec!["* * * * * sat,sun *".into()], "UTC").expect("compiles");
    a.idle_count = 7;
    assert!(a.is_active(at("2026-11-28T12:00:00Z")));
    assert!(!a.is_active(at("2026-11-23T12:00:00Z")));
    assert!(AutoscalingConfig::new(vec!["* * 25 * * * *".into()], "UTC").is_err());
    assert!(AutoscalingConfig::new(vec![], "Mars/Olympus").is_err());
}

#[test]
fn offpeak_is_never_parsed() {
    // Invalid OffPeak values are not errors: upstream never parses them.
    let l = machine_with_sections(
        "    OffPeakPeriods = [\"not a cron\"]\n    OffPeakTimezone = \"Nowhere/Nothing\"\n",
    );
    assert!(l.warnings.iter().any(|w| w.message.contains("deprecated")));
}

#[test]
fn example_config_loads_without_warnings() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config.toml.example");
    let l = match load_file(&path) {
        Ok(l) => l,
        Err(e) => panic!("config.toml.example must load:\n{e}"),
    };
    assert!(l.warnings.is_empty(), "{:#?}", l.warnings);
    let c = &l.config;
    assert!(c
        .machine
        .as_ref()
        .and_then(|m| m.shutdown_drain.as_ref())
        .is_some_and(|d| d.enabled));
    let r = &c.runners[0];
    assert_eq!(r.executor, "docker+machine");
    assert!(r.docker.is_some());
    assert_eq!(r.cache.as_ref().map(|c| c.cache_type.as_str()), Some("s3"));
    let m = r.machine.as_ref().expect("machine");
    assert_eq!(m.autoscaling.len(), 2);
    assert!(m.autoscaling.iter().all(|a| !a.timezone().is_empty()
        && a.periods()
            .iter()
            .all(|p| p.split_whitespace().count() == 7)));
    // Monday 2026-03-02 10:00 UTC is 11:00 in Berlin: working hours.
    assert_eq!(
        m.effective_idle(at("2026-03-02T10:00:00Z")).active_section,
        Some(0)
    );
}

#[test]
fn model_serialises_back_to_upstream_keys() {
    let l = machine_with_sections("    [[runners.machine.autoscaling]]\n      Periods = [\"* * * * * * *\"]\n      Timezone = \"UTC\"\n      IdleCount = 1\n");
    let text = toml::to_string(&l.config).expect("serialises");
    assert!(text.contains("IdleScaleFactor = 0.25"), "{text}");
    assert!(text.contains("Periods = ["), "{text}");
    let again = load_str(&text, "roundtrip.toml").expect("round trip loads");
    let m = again.config.runners[0].machine.as_ref().expect("machine");
    assert_eq!(
        (
            m.idle_count,
            m.autoscaling.len(),
            m.autoscaling[0].idle_count
        ),
        (4, 1, 1)
    );
}

#[test]
fn labels_are_validated_as_upstream() {
    let l = ok("labels = { team = \"ci\", \"cost.center\" = \"r-and-d_1\" }\n[[runners]]\n  executor = \"docker\"\n  labels = { zone = \"eu-west\" }\n");
    assert_eq!(
        l.config.runners[0].labels.get("zone").map(String::as_str),
        Some("eu-west")
    );
    let e = load_str("labels = { ab = \"x\" }\n", "l.toml").expect_err("key too short");
    assert!(
        e.to_string()
            .contains("l.toml:1:12: error: global labels, key labels.ab: invalid label key \"ab\""),
        "{e}"
    );
    let e = load_str(
        "[[runners]]\n  name = \"r\"\n  labels = { team = \"has space\" }\n",
        "l.toml",
    )
    .expect_err("bad value");
    assert!(
        e.to_string().contains(
            "l.toml:3:21: error: runners[0] \"r\", key labels.team: invalid value \"has space\""
        ),
        "{e}"
    );
    let many: Vec<String> = (0..33).map(|i| format!("k{i:03} = \"v\"")).collect();
    let text = format!(
        "[[runners]]\n  name = \"r\"\n  [runners.labels]\n{}\n",
        many.join("\n")
    );
    let e = load_str(&text, "l.toml").expect_err("too many");
    assert!(e.to_string().contains("33 labels"), "{e}");
}

#[test]
fn idle_changes_ignore_flicker_under_the_winner() {
    // Section 0 flickers every other second, but section 1 is always active and wins.
    let l = machine_with_sections(
        "    [[runners.machine.autoscaling]]\n      Periods = [\"*/2 * * * * * *\"]\n      Timezone = \"UTC\"\n      IdleCount = 1\n    [[runners.machine.autoscaling]]\n      Periods = [\"* * * * * * *\"]\n      Timezone = \"UTC\"\n      IdleCount = 2\n",
    );
    let m = l.config.runners[0].machine.as_ref().expect("machine");
    let changes = m.idle_changes(at("2026-11-23T10:00:00Z"), 3, chrono::Duration::days(400));
    assert!(changes.is_empty(), "{changes:?}");
    // When the flickering section is the winner, each flip is a change.
    let l = machine_with_sections(
        "    [[runners.machine.autoscaling]]\n      Periods = [\"*/2 * * * * * *\"]\n      Timezone = \"UTC\"\n      IdleCount = 1\n",
    );
    let m = l.config.runners[0].machine.as_ref().expect("machine");
    let changes = m.idle_changes(at("2026-11-23T10:00:00Z"), 3, chrono::Duration::days(1));
    let secs: Vec<_> = changes
        .iter()
        .map(|(t, e)| (t.timestamp() % 60, e.active_section))
        .collect();
    assert_eq!(secs.len(), 3);
    assert!(secs.windows(2).all(|w| w[0].1 != w[1].1), "{secs:?}");
}

#[test]
fn configs_compare_by_what_is_written() {
    let a = machine_with_sections("    [[runners.machine.autoscaling]]\n      Periods = [\"* * 9-17 * * * *\"]\n      Timezone = \"UTC\"\n");
    let b = machine_with_sections("    [[runners.machine.autoscaling]]\n      Periods = [\"* * 9-17 * * * *\"]\n      Timezone = \"UTC\"\n");
    let c = machine_with_sections("    [[runners.machine.autoscaling]]\n      Periods = [\"* * 9-18 * * * *\"]\n      Timezone = \"UTC\"\n");
    assert_eq!(a.config, b.config);
    assert_ne!(a.config, c.config);
}
