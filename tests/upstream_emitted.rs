//! drover's simulator written as upstream's log (json and runner formats) must come out of
//! `compare --upstream-log` in full agreement with drover on the same config, and a
//! deliberately changed config must not.

use std::path::PathBuf;

use drover::config::{load_str, Config};
use drover::sim::provider::{Latency, ProviderModel};
use drover::sim::queue::SimTime;
use drover::sim::upstream::{compare, Report, Verdict};
use drover::sim::workload::{Job, SubmittedAt, Workload};
use drover::sim::{Scenario, Simulation};
use drover::upstream_log::emit::{EmitFormat, Emitter};
use drover::upstream_log::{DecisionKind, ReadOptions};

use chrono::{DateTime, Utc};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn config(machine: &str, limit: i64) -> Config {
    let text = format!(
        "concurrent = 20\ncheck_interval = 3\n\
         [[runners]]\nname = \"auto\"\nurl = \"https://gitlab.example.com\"\n\
         token = \"glrt-emittoken12345\"\nexecutor = \"docker+machine\"\nlimit = {limit}\n\
         [runners.docker]\nimage = \"alpine\"\n\
         [runners.machine]\nMachineDriver = \"google\"\nMachineName = \"auto-%s\"\n{machine}\n"
    );
    match load_str(&text, "test.toml") {
        Ok(l) => l.config,
        Err(e) => panic!("{e}"),
    }
}

const MACHINE: &str = "IdleCount = 2\nIdleTime = 300\nMaxBuilds = 4\n";

/// Jobs on whole seconds over six hours, in bursts, 30 s to 15 min long.
fn workload(seed: u64, n: usize) -> Workload {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut jobs: Vec<Job> = (0..n)
        .map(|_| {
            let burst = rng.random_range(0..6u64) * 3600;
            let at = burst + rng.random_range(0..1800u64);
            Job {
                submitted_at: SubmittedAt::Offset(at as SimTime * 1000),
                duration: rng.random_range(30..900u64) * 1000,
                runner: None,
                tags: Vec::new(),
                line: 0,
            }
        })
        .collect();
    jobs.sort_by_key(|j| j.submitted_at);
    Workload { jobs }
}

fn start() -> DateTime<Utc> {
    match DateTime::parse_from_rfc3339("2026-09-07T06:00:00Z") {
        Ok(t) => t.with_timezone(&Utc),
        Err(e) => panic!("{e}"),
    }
}

fn emitted(config: &Config, w: &Workload, format: EmitFormat, failures: f64) -> String {
    emitted_with(config, w, format, failures, false)
}

fn emitted_with(
    config: &Config,
    w: &Workload,
    format: EmitFormat,
    failures: f64,
    journal: bool,
) -> String {
    let scenario = Scenario {
        config,
        workload: w,
        from: Some(start()),
        until: None,
        model: ProviderModel {
            create_latency: Latency::Uniform(60_000, 120_000),
            create_failure_rate: failures,
            remove_latency: Latency::Fixed(10_000),
            remove_failure_rate: 0.0,
            seed: 7,
        },
        any_runner: false,
    };
    let trace = match Simulation::new(&scenario) {
        Ok(s) => s.record_events().run(),
        Err(e) => panic!("{e}"),
    };
    assert!(!trace.events.is_empty(), "the run recorded no events");
    let e = Emitter::new(&trace, config, format);
    let e = if journal { e.journal_iso() } else { e };
    e.emit("19.3.0")
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let p = dir.path().join(name);
    if let Err(e) = std::fs::write(&p, text) {
        panic!("{e}");
    }
    p
}

fn run(config: &Config, paths: &[PathBuf]) -> Report {
    // drover's emitter writes a creation's first line at the decision instant.
    let opts = ReadOptions {
        create_line_delay_ms: 0,
        ..ReadOptions::default()
    };
    match compare(config, paths, opts, 1, None) {
        Ok(r) => r,
        Err(e) => panic!("{e:#}"),
    }
}

fn assert_full_agreement(r: &Report) {
    let (same, judged) = r.agreement();
    let bad: Vec<String> = r
        .decisions
        .iter()
        .filter(|d| d.drover != Some(Verdict::Same))
        .take(5)
        .map(|d| {
            format!(
                "{:?} {} line {}: {:?} {}",
                d.kind, d.machine, d.line, d.drover, d.explanation
            )
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{} of {} agree; first others: {bad:#?}",
        same,
        judged
    );
    assert!(
        r.drover_only.is_empty(),
        "drover-only decisions: {:#?}",
        r.drover_only
            .iter()
            .take(3)
            .map(|d| &d.explanation)
            .collect::<Vec<_>>()
    );
    let creates = r
        .decisions
        .iter()
        .filter(|d| d.kind == DecisionKind::Create)
        .count();
    let removes = r.decisions.len() - creates;
    assert!(
        creates >= 10 && removes >= 10,
        "too few decisions: {creates} creations, {removes} removals"
    );
    assert_eq!(same, judged);
    assert!(r.all_agree());
    assert_eq!(
        r.stats.unknown_lines, 0,
        "unknown: {:?}",
        r.stats.unknown_messages
    );
}

#[test]
fn drover_logs_in_json_agree_with_drover() {
    let c = config(MACHINE, 12);
    let w = workload(1, 300);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let p = write(
        &dir,
        "runner.json.log",
        &emitted(&c, &w, EmitFormat::Json, 0.0),
    );
    let r = run(&c, &[p]);
    assert_full_agreement(&r);
    // Every job of the log is placed for the replay.
    assert_eq!(r.drover_trace.jobs.len(), w.jobs.len());
    assert!(r.unplaced.is_empty(), "{:?}", r.unplaced);
}

#[test]
fn drover_logs_in_text_format_agree_with_drover() {
    let c = config(MACHINE, 12);
    let w = workload(3, 300);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let p = write(
        &dir,
        "runner.text.log",
        &emitted(&c, &w, EmitFormat::Text, 0.0),
    );
    let r = run(&c, &[p]);
    assert_full_agreement(&r);
    assert_eq!(r.drover_trace.jobs.len(), w.jobs.len());
    assert!(r.unplaced.is_empty(), "{:?}", r.unplaced);
}

#[test]
fn drover_logs_in_runner_format_with_failures_agree_with_drover() {
    let c = config(MACHINE, 12);
    let w = workload(2, 300);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let p = write(
        &dir,
        "runner.log",
        &emitted_with(&c, &w, EmitFormat::Runner, 0.1, true),
    );
    let r = run(&c, &[p]);
    assert_full_agreement(&r);
    assert!(
        r.decisions
            .iter()
            .any(|d| d.upstream_reason.as_deref() == Some("Failed to create")),
        "no failed creation in the log"
    );
}

#[test]
fn a_changed_config_does_not_agree() {
    let c = config(MACHINE, 12);
    let w = workload(3, 300);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let p = write(
        &dir,
        "runner.json.log",
        &emitted(&c, &w, EmitFormat::Json, 0.0),
    );
    for changed in [
        config("IdleCount = 2\nIdleTime = 300\nMaxBuilds = 10\n", 12),
        config("IdleCount = 4\nIdleTime = 300\nMaxBuilds = 4\n", 12),
        config("IdleCount = 2\nIdleTime = 3000\nMaxBuilds = 4\n", 12),
    ] {
        let r = run(&changed, std::slice::from_ref(&p));
        let (same, judged) = r.agreement();
        assert!(
            !r.all_agree(),
            "{same} of {judged} agree on a changed config"
        );
        assert!(r.verdict_line().contains("differ") || !r.drover_only.is_empty());
    }
    // A higher IdleCount: drover starts creations upstream never did, and says so.
    let more_idle = config("IdleCount = 4\nIdleTime = 300\nMaxBuilds = 4\n", 12);
    let r = run(&more_idle, std::slice::from_ref(&p));
    let creations: Vec<_> = r
        .drover_only
        .iter()
        .filter(|d| d.kind == drover::upstream_log::DecisionKind::Create)
        .collect();
    assert!(
        !creations.is_empty(),
        "no drover-only creation reported: {:?}",
        r.drover_only
    );
    assert!(
        creations[0].explanation.contains("IdleCount 4"),
        "{}",
        creations[0].explanation
    );
    // ... and on the config that wrote the log, none.
    let r = run(&c, std::slice::from_ref(&p));
    assert!(r.drover_only.is_empty(), "{:?}", r.drover_only);
}
