//! The gitlab-runner log parser on the fixtures of `fixtures/upstream-logs/` (one scenario in
//! every format, wrapper and runner version; see `make.py` there), on hostile input, and the
//! `compare --upstream-log` / `workload import` commands on them.

use std::path::{Path, PathBuf};
use std::process::Command;

use chrono::{DateTime, TimeZone, Utc};
use drover::upstream_log::{self, collect, parse_str, Collector, ReadOptions, Stats};
use proptest::prelude::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/upstream-logs");

fn fixture(name: &str) -> PathBuf {
    Path::new(FIXTURES).join(name)
}

/// The anchor-less fallback deliberately wrong: the files must anchor their own dates.
fn opts() -> ReadOptions {
    ReadOptions {
        fallback_year: 2001,
        ..ReadOptions::default()
    }
}

fn load(name: &str) -> (Collector, Stats) {
    match collect(&[fixture(name)], opts()) {
        Ok(r) => r,
        Err(e) => panic!("{name}: {e}"),
    }
}

fn t(secs: f64) -> DateTime<Utc> {
    let base = Utc
        .with_ymd_and_hms(2026, 9, 8, 7, 0, 0)
        .single()
        .unwrap_or_default();
    base + chrono::TimeDelta::milliseconds((secs * 1000.0).round() as i64)
}

const T0: i64 = 1_788_850_800;

fn m(kind: &str, offset: i64, hex: &str) -> String {
    let (tok, mn) = match kind {
        "a" => ("alphatoke", "auto"),
        _ => ("betatoken", "b"),
    };
    format!("runner-{tok}-{mn}-{}-{hex}", T0 + offset)
}

/// (file, version, has queue times, whole-second line times, duplicated, continuation lines,
/// foreign lines)
#[rustfmt::skip]
const ALL: [(&str, &str, bool, bool, bool, u64, u64); 8] = [
    ("v19-json-journal-cat.log",     "19.3.0",  true,  false, false, 0, 0),
    ("v19-runner-journal-iso.log",   "19.3.0",  true,  false, false, 1, 1),
    ("v19-text-docker.log",          "19.3.0",  true,  false, false, 0, 0),
    ("v18-runner-journal-short.log", "18.2.0",  true,  true,  false, 2, 1),
    ("v17-text-journal-short.log",   "17.5.0",  true,  true,  false, 0, 1),
    ("v16-runner-syslog-dup.log",    "16.11.0", true,  true,  true,  3, 1),
    ("v15-runner-docker.log",        "15.9.0",  false, false, false, 2, 0),
    ("v14-json-journal-cat.log",     "14.10.0", false, true,  false, 0, 0),
];

#[test]
fn every_format_and_wrapper_gives_the_same_jobs_and_machines() {
    for (file, version, tiq, whole, dup, cont, foreign) in ALL {
        let (c, s) = load(file);
        let ctx = format!("{file}: {s:?}");
        assert_eq!(s.unknown_lines, 0, "{ctx}");
        assert_eq!(s.versions, vec![version.to_string()], "{ctx}");
        assert_eq!(c.restarts.len(), 2, "{ctx}");
        assert_eq!(s.continuation_lines, cont, "{ctx}");
        assert_eq!(s.foreign_lines, foreign, "{ctx}");
        assert_eq!(s.duplicate_lines > 50, dup, "{ctx}");
        // Jobs.
        let ids: Vec<u64> = c.jobs.iter().map(|j| j.id).collect();
        assert_eq!(ids, [9001, 9002, 9003, 9004], "{file}");
        let j1 = c.job(9001).unwrap_or_else(|| panic!("{file}: job 9001"));
        assert_eq!(
            j1.picked_at,
            Some(t(20.0)),
            "{file}: pickup anchored in UTC"
        );
        assert_eq!(j1.queued_at, tiq.then(|| t(16.0)), "{file}");
        assert_eq!(
            j1.machine.as_deref(),
            Some(m("b", 20, "44444444").as_str()),
            "{file}"
        );
        assert_eq!(j1.existing, Some(false), "{file}");
        assert_eq!(j1.on_machine_s(), Some(61.0), "{file}");
        assert_eq!(j1.status.as_deref(), Some("success"), "{file}");
        let j3 = c.job(9003).unwrap_or_else(|| panic!("{file}: job 9003"));
        let failed = if version.starts_with("19") {
            "script_failure"
        } else {
            "failed"
        };
        assert_eq!(j3.status.as_deref(), Some(failed), "{file}");
        assert_eq!(
            j3.duration_s,
            Some(52.5),
            "{file}: fields of the failed job"
        );
        // Machines.
        let pre = c
            .machine(&m("a", -7200, "0badcafe"))
            .unwrap_or_else(|| panic!("{file}: machine from before the log"));
        assert!(pre.before_log, "{file}");
        assert_eq!(pre.first_used_count, Some(3), "{file}");
        assert_eq!(
            pre.removal_reason.as_deref(),
            Some("too many builds"),
            "{file}"
        );
        for (name, reason, retries, created) in [
            (m("a", 5, "11111111"), "too many machines", 0, true),
            (m("a", 5, "22222222"), "too many idle machines", 0, true),
            (m("b", 20, "44444444"), "Too many builds", 1, true),
            (m("a", 40, "33333333"), "Failed to create", 0, false),
            (m("b", 300, "55555555"), "", 0, true),
        ] {
            let mm = c.machine(&name).unwrap_or_else(|| panic!("{file}: {name}"));
            assert!(!mm.before_log, "{file}: {name}");
            assert_eq!(mm.created_at.is_some(), created, "{file}: {name}");
            assert_eq!(mm.create_failed, !created, "{file}: {name}");
            if !reason.is_empty() {
                assert_eq!(mm.removal_reason.as_deref(), Some(reason), "{file}: {name}");
                assert!(mm.removed_at.is_some(), "{file}: {name}");
                assert_eq!(mm.removal_retries, retries, "{file}: {name}");
            }
        }
        let m2 = c
            .machine(&m("a", 5, "22222222"))
            .unwrap_or_else(|| panic!("m2"));
        assert_eq!(
            m2.creation_s,
            Some(70.5),
            "{file}: Machine created duration"
        );
        if !whole {
            assert_eq!(m2.created_at, Some(t(75.55)), "{file}");
        }
        let m4 = c
            .machine(&m("a", 1000, "66666666"))
            .unwrap_or_else(|| panic!("m4"));
        assert_eq!(m4.removal_reason.as_deref(), Some("machine is unavailable"));
        assert_eq!(m4.removal_gave_up, version.starts_with("19"), "{file}");
        assert_eq!(c.machines.len(), 7, "{file}");
    }
}

#[test]
fn journald_short_times_are_anchored_on_full_precision_fields() {
    // Local times at +02:00, no year; the file's now=/time fields give 2026 and the offset.
    let (c, s) = load("v18-runner-journal-short.log");
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("year 2026") && n.contains("+02:00")),
        "{s:?}"
    );
    assert_eq!(c.span.map(|(a, _)| a), Some(t(0.0)));
}

#[test]
fn workload_import_reads_a_runner_log_and_says_what_it_left_out() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = dir.path().join("w.csv");
    let run = |file: &str| {
        Command::new(env!("CARGO_BIN_EXE_drover"))
            .args(["workload", "import", "-c"])
            .arg(fixture("config.toml"))
            .arg(fixture(file))
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let o = run("v19-json-journal-cat.log");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{e}"));
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 5, "{csv}");
    assert!(
        lines[1].starts_with("2026-09-08T07:00:16Z,61,beta"),
        "{csv}"
    );
    // 16.10+ logs have queue times; 15.x ones do not, and the command says so.
    let o = run("v15-runner-docker.log");
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("imported 0 of 4"), "{err}");
    assert!(
        err.contains("left out 4 job(s): no time_in_queue_seconds"),
        "{err}"
    );
    // A GitLab jobs export supplies them: queue entry = started_at - queued_duration.
    let export = dir.path().join("jobs.json");
    let jobs: Vec<String> = (9001..=9004)
        .map(|id| {
            format!(
                "{{\"id\": {id}, \"created_at\": \"2026-09-08T06:00:00Z\", \
                 \"started_at\": \"2026-09-08T07:00:20Z\", \"queued_duration\": 4.0}}"
            )
        })
        .collect();
    std::fs::write(&export, format!("[{}]", jobs.join(","))).unwrap_or_else(|e| panic!("{e}"));
    let o = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(["workload", "import", "-c"])
        .arg(fixture("config.toml"))
        .arg(fixture("v15-runner-docker.log"))
        .arg("--jobs-export")
        .arg(&export)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success() && err.contains("imported 4 of 4"),
        "{err}"
    );
    let csv = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{e}"));
    let first = csv.lines().nth(1).unwrap_or_default();
    assert!(first.starts_with("2026-09-08T07:00:16Z,61,beta"), "{csv}");
}

#[test]
fn compare_reports_each_upstream_decision_and_the_facts() {
    let o = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(["compare", "-c"])
        .arg(fixture("config.toml"))
        .arg("--upstream-log")
        .arg(fixture("v19-runner-journal-iso.log"))
        .args(["--format", "json"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
    let up = &v["upstream"];
    assert_eq!(up["version"], "19.3.0");
    assert_eq!(up["restarts"].as_array().map(Vec::len), Some(2));
    let job = &up["jobs"][0];
    for k in [
        "id",
        "runner",
        "queued_at",
        "picked_at",
        "machine",
        "on_machine_s",
        "status",
    ] {
        assert!(job.get(k).is_some(), "job field {k}: {job}");
    }
    assert_eq!(job["queued_at"], "2026-09-08T07:00:16Z");
    assert_eq!(job["runner"], "beta");
    let machines = up["machines"].as_array().cloned().unwrap_or_default();
    let failed = machines
        .iter()
        .find(|m| m["create_failed"] == true)
        .unwrap_or_else(|| panic!("no failed creation: {machines:?}"));
    for k in [
        "name",
        "create_requested_at",
        "created_at",
        "jobs",
        "removal_reason",
        "removal_requested_at",
        "removed_at",
        "removal_retries",
    ] {
        assert!(failed.get(k).is_some(), "machine field {k}");
    }
    assert!(failed["created_at"].is_null());
    let decisions = v["decisions"].as_array().cloned().unwrap_or_default();
    let by_reason = |r: &str| {
        decisions
            .iter()
            .find(|d| d["upstream_reason"] == r)
            .unwrap_or_else(|| panic!("no decision {r}: {decisions:#?}"))
            .clone()
    };
    assert_eq!(by_reason("Too many builds")["drover"], "same");
    assert_eq!(by_reason("Failed to create")["drover"], "same");
    assert_eq!(by_reason("machine is unavailable")["drover"], "ambiguous");
    for d in &decisions {
        for k in [
            "at",
            "kind",
            "machine",
            "upstream_reason",
            "drover",
            "drover_reason",
            "explanation",
        ] {
            assert!(d.get(k).is_some(), "decision field {k}");
        }
        let at = d["at"].as_str().unwrap_or_default();
        assert!(
            at.ends_with('Z') && DateTime::parse_from_rfc3339(at).is_ok(),
            "{at}"
        );
    }
    for side in ["upstream", "drover"] {
        let s = &v["summary"][side];
        for k in [
            "peak_machines",
            "machine_seconds",
            "creations",
            "removals",
            "jobs_waited_for_creation",
            "queue_wait_s",
        ] {
            assert!(s.get(k).is_some(), "summary.{side}.{k}: {s}");
        }
    }
    // The text report leads with the verdict.
    let o = Command::new(env!("CARGO_BIN_EXE_drover"))
        .args(["compare", "-c"])
        .arg(fixture("config.toml"))
        .arg("--upstream-log")
        .arg(fixture("v19-json-journal-cat.log"))
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&o.stdout);
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.contains(" of ") && first.contains("decisions agree"),
        "{text}"
    );
}

#[test]
fn rotated_files_in_any_order_read_as_one_log() {
    let text = std::fs::read_to_string(fixture("v19-json-journal-cat.log"))
        .unwrap_or_else(|e| panic!("{e}"));
    let lines: Vec<&str> = text.lines().collect();
    let cut = lines.len() / 2;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let a = dir.path().join("runner.log.1");
    let b = dir.path().join("runner.log");
    std::fs::write(&a, lines[..cut].join("\n")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&b, lines[cut..].join("\n")).unwrap_or_else(|e| panic!("{e}"));
    let order = upstream_log::order_files(&[b.clone(), a.clone()], opts());
    assert_eq!(order, vec![a, b]);
    let (c, _) = collect(&order, opts()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.jobs.len(), 4);
    assert_eq!(c.machines.len(), 7);
}

#[test]
fn a_huge_line_is_cut_and_counted() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let p = dir.path().join("huge.log");
    let mut text = String::from("{\"level\":\"info\",\"msg\":\"Checking for jobs... received\",\"job\":1,\"runner\":\"x\",\"time\":\"2026-09-08T07:00:00Z\"}\n");
    text.push_str(&"A".repeat(5 << 20));
    text.push('\n');
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
    let (c, s) = collect(&[p], opts()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.truncated_lines, 1);
    assert_eq!(c.jobs.len(), 1);
}

#[test]
fn something_else_is_not_taken_for_a_log() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let p = dir.path().join("w.csv");
    std::fs::write(&p, "submitted_at,duration_s\n0,10\n").unwrap_or_else(|e| panic!("{e}"));
    let err = collect(&[p], opts())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("no gitlab-runner line found"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_input_never_panics(lines in proptest::collection::vec(".{0,200}", 0..40)) {
        let (_, s) = parse_str(&lines.join("\n"), opts());
        prop_assert!(s.lines as usize <= lines.len().max(1) * 2 + 1);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let mut p = upstream_log::Parser::new(2026, chrono::FixedOffset::east_opt(0).unwrap_or_else(|| chrono::Utc.fix()));
        for l in bytes.split(|b| *b == b'\n') {
            p.push_bytes(l);
            while p.poll().is_some() {}
        }
        p.finish();
    }

    #[test]
    fn truncated_and_shuffled_fixtures_never_panic(
        file in 0..ALL.len(),
        cut in 0usize..30_000,
        drop_every in 2usize..9,
    ) {
        let text = std::fs::read(fixture(ALL[file].0)).unwrap_or_default();
        let text = &text[..cut.min(text.len())];
        let text = String::from_utf8_lossy(text);
        let kept: Vec<&str> = text.lines().enumerate().filter(|(i, _)| i % drop_every != 0).map(|(_, l)| l).collect();
        let (events, _) = parse_str(&kept.join("\n"), opts());
        let mut c = Collector::default();
        for e in &events { c.push(e); }
        c.finish();
        let mut replay = upstream_log::Replay::new(&c);
        let mut n = 0;
        for e in &events { replay.push(e, &mut |_| n += 1); }
        prop_assert!(n <= events.len());
    }
}

use chrono::Offset;

/// The pools the replay hands to the judge, by machine decided on.
fn pools(text: &str) -> Vec<(String, Vec<upstream_log::PoolMachine>)> {
    let (events, _) = parse_str(text, opts());
    let mut c = Collector::default();
    for e in &events {
        c.push(e);
    }
    c.finish();
    let mut replay = upstream_log::Replay::new(&c);
    let mut out = Vec::new();
    for e in &events {
        replay.push(e, &mut |p| out.push((p.machine.clone(), p.pool.clone())));
    }
    out
}

fn json_line(time: &str, level: &str, msg: &str, fields: &str) -> String {
    format!(
        "{{{fields}\"level\":\"{level}\",\"msg\":\"{msg}\",\"time\":\"2026-09-08T07:{time}Z\"}}\n"
    )
}

#[test]
fn a_restart_finds_every_machine_again_idle_with_one_use() {
    let a = format!("runner-alphatoke-auto-{}-aaaaaaaa", T0 - 100);
    let b = format!("runner-alphatoke-auto-{}-bbbbbbbb", T0 - 50);
    let mut log = String::new();
    log += &json_line(
        "00:00.0",
        "info",
        "Runtime platform",
        "\"pid\":1,\"version\":\"19.3.0\",",
    );
    log += &json_line(
        "00:01.0",
        "info",
        "Running pre-create checks...",
        &format!("\"name\":\"{a}\",\"operation\":\"create\","),
    );
    log += &json_line(
        "01:01.0",
        "info",
        "Machine created",
        &format!("\"duration\":60000000000,\"name\":\"{a}\","),
    );
    log += &json_line(
        "01:02.0",
        "info",
        "Checking for jobs... received",
        "\"job\":1,\"runner\":\"alphatoke\",",
    );
    log += &json_line(
        "01:04.0",
        "info",
        "Using existing docker-machine",
        &format!("\"job\":1,\"name\":\"{a}\",\"usedCount\":3,"),
    );
    log += &json_line(
        "02:00.0",
        "info",
        "Runtime platform",
        "\"pid\":2,\"version\":\"19.3.0\",",
    );
    log += &json_line(
        "02:05.0",
        "warning",
        "Requesting machine removal",
        &format!("\"name\":\"{b}\",\"reason\":\"too many idle machines\",\"usedCount\":1,"),
    );
    let p = pools(&log);
    let removal = p
        .iter()
        .find(|(m, _)| *m == b)
        .unwrap_or_else(|| panic!("{p:#?}"));
    let ma = removal
        .1
        .iter()
        .find(|m| m.name == a)
        .unwrap_or_else(|| panic!("{removal:#?}"));
    // Before the restart it was Used with 3 builds; the new process finds it Idle, used once.
    assert_eq!(ma.state, upstream_log::PoolState::Idle);
    assert_eq!(ma.used_count, 1);
    assert_eq!(ma.last_used, t(120.0));
    // The first creation was judged on a pool holding only the machine from before the log:
    // the log starts with a process start, which finds it again (Idle, used once): its state
    // is known.
    let (first, pool) = p.first().unwrap_or_else(|| panic!("no decision"));
    assert_eq!(first, &a);
    let names: Vec<(&str, bool)> = pool
        .iter()
        .map(|m| (m.name.as_str(), m.confirmed))
        .collect();
    assert_eq!(names, [(b.as_str(), true)]);
}

#[test]
fn the_machine_a_job_will_use_is_acquired_from_its_pickup() {
    let a = format!("runner-alphatoke-auto-{}-aaaaaaaa", T0 - 100);
    let b = format!("runner-alphatoke-auto-{}-bbbbbbbb", T0 - 50);
    let mut log = String::new();
    log += &json_line(
        "00:00.0",
        "info",
        "Runtime platform",
        "\"pid\":1,\"version\":\"19.3.0\",",
    );
    for (n, s) in [(&a, "00"), (&b, "10")] {
        log += &json_line(
            &format!("00:{s}.5"),
            "info",
            "Running pre-create checks...",
            &format!("\"name\":\"{n}\",\"operation\":\"create\","),
        );
        log += &json_line(
            &format!("01:{s}.0"),
            "info",
            "Machine created",
            &format!("\"name\":\"{n}\","),
        );
    }
    log += &json_line(
        "05:00.0",
        "info",
        "Checking for jobs... received",
        "\"job\":7,\"runner\":\"alphatoke\",",
    );
    log += &json_line(
        "05:00.5",
        "warning",
        "Requesting machine removal",
        &format!("\"name\":\"{a}\",\"reason\":\"too many idle machines\",\"usedCount\":0,"),
    );
    log += &json_line(
        "05:02.0",
        "info",
        "Using existing docker-machine",
        &format!("\"job\":7,\"name\":\"{b}\",\"usedCount\":1,"),
    );
    let p = pools(&log);
    let removal = p
        .iter()
        .rfind(|(m, _)| *m == a)
        .unwrap_or_else(|| panic!("{p:#?}"));
    let mb = removal
        .1
        .iter()
        .find(|m| m.name == b)
        .unwrap_or_else(|| panic!("{removal:#?}"));
    assert_eq!(mb.state, upstream_log::PoolState::Acquired);
    let ma = removal
        .1
        .iter()
        .find(|m| m.name == a)
        .unwrap_or_else(|| panic!("{removal:#?}"));
    assert_eq!(ma.state, upstream_log::PoolState::Idle);
    assert_eq!(ma.last_used, t(60.0));
}

#[test]
fn a_restart_without_runtime_platform_shows_in_the_monotonic_clock() {
    let name = format!("runner-alphatoke-auto-{}-aaaaaaaa", T0);
    let line = |clock: &str, m: &str| {
        format!("Machine created                                     duration=1s name={name} now=2026-09-08 07:{clock} +0000 UTC m=+{m}\n")
    };
    let log = line("00:10", "10.000000000")
        + &line("05:00", "300.000000000")
        + &line("06:00", "5.000000000");
    let (events, _) = parse_str(&log, opts());
    let starts = events
        .iter()
        .filter(|e| matches!(e.kind, upstream_log::EventKind::ProcessStart { .. }))
        .count();
    assert_eq!(starts, 1, "{events:#?}");
}
