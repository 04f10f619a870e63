//! The engine driven by a real config: policies built from `[[runners]]`, idle settings
//! following `[[runners.machine.autoscaling]]` periods, drain settings from `[machine]`.

use chrono::{TimeZone, Utc};
use drover::config::load_str;
use drover::engine::{AcquireStep, Engine, RunnerId};

const CONFIG: &str = r#"
shutdown_timeout = 600
[machine.shutdown_drain]
  enabled = true
  max_retries = 0
  retry_backoff = "2s"

[[runners]]
  name = "r"
  url = "https://gitlab.example.com/"
  token = "glrt-t1_abcdefghijk"
  executor = "docker+machine"
  limit = 4
  [runners.machine]
    IdleCount = 1
    IdleTime = 300
    MaxBuilds = 10
    MaxGrowthRate = 2
    MaxRemovalAttempts = 7
    MachineDriver = "google"
    MachineName = "auto-%s"
    MachineOptions = ["google-zone=europe-west1-b"]
    MachineOptionsWithName = ["google-tags=%s"]
    [[runners.machine.autoscaling]]
      Periods = ["* * 9-17 * * mon-fri *"]
      Timezone = "UTC"
      IdleCount = 3
      IdleTime = 60
"#;

#[test]
fn policy_from_runner_follows_the_periods() {
    let loaded = load_str(CONFIG, "config.toml").expect("loads");
    let p = drover::engine::policy_from_runner(&loaded.config.runners[0]).unwrap();
    assert_eq!(p.limits.limit, 4);
    assert_eq!(p.limits.max_builds, 10);
    assert_eq!(p.limits.max_growth_rate, 2);
    assert_eq!(p.max_removal_attempts, 7);
    // Friday 2026-11-20: the section is active from 08:59:59 (one second early) and ends
    // one second early at 17:59:59.
    let at = |h, m, s| Utc.with_ymd_and_hms(2026, 11, 20, h, m, s).unwrap();
    let cases = [
        (at(8, 59, 58), 1, 300, None),
        (at(8, 59, 59), 3, 60, Some(0)),
        (at(12, 0, 0), 3, 60, Some(0)),
        (at(17, 59, 58), 3, 60, Some(0)),
        (at(17, 59, 59), 1, 300, None),
    ];
    for (now, ic, it, section) in cases {
        let idle = p.idle.idle_at(now);
        assert_eq!(
            (idle.idle_count, idle.idle_time, idle.active_section),
            (ic, it, section),
            "{now}"
        );
        assert_eq!(idle.idle_count_min, 0);
    }
    let mut e = Engine::new(vec![p], 3);
    let names: [&str; 0] = [];
    let AcquireStep::Done(o) = e.begin_acquire(RunnerId(0), &names, at(12, 0, 0)).unwrap() else {
        panic!("no machines: done at once");
    };
    assert_eq!(o.report.filter, "runner-abcdefghi-auto-%s");
    // IdleCount 3 in the period, but MaxGrowthRate 2 bounds the pass.
    assert_eq!(o.report.created.len(), 2);
    let Some(drover::engine::Command::Create {
        driver, options, ..
    }) = e.poll_command()
    else {
        panic!("a create command");
    };
    assert_eq!(driver, "google");
    assert_eq!(options[0], "google-zone=europe-west1-b");
    assert!(options[1].starts_with("google-tags=runner-abcdefghi-auto-"));
}

#[test]
fn drain_settings_from_config() {
    let loaded = load_str(CONFIG, "config.toml").expect("loads");
    let d = drover::engine::drain_settings(&loaded.config);
    assert!(d.enabled);
    assert_eq!(d.concurrency(), 3);
    assert_eq!(d.attempts(), 4, "max_retries 0 still means 3 retries");
    assert_eq!(d.backoff().num_seconds(), 2);
    assert_eq!(d.timeout().num_seconds(), 600);
    let none = load_str("concurrent = 1\n", "c.toml").unwrap();
    assert!(!drover::engine::drain_settings(&none.config).enabled);
}

#[test]
fn a_runner_without_machine_section_has_no_policy() {
    let loaded = load_str(
        "[[runners]]\n  name = \"s\"\n  token = \"x\"\n  executor = \"shell\"\n",
        "c.toml",
    )
    .unwrap();
    let err = drover::engine::policy_from_runner(&loaded.config.runners[0]).unwrap_err();
    assert!(err.to_string().contains("[runners.machine]"));
}
