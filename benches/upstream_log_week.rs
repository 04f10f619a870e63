//! Benchmark: a one-week gitlab-runner log of a fleet doing 50,000 jobs a day, parsed and
//! compared.
//!
//! `cargo bench --bench upstream_log_week` builds in release mode, then:
//! 1. simulates the week with drover (7 × 50,000 jobs, fixed seed) and writes it as upstream's
//!    JSON log to `target/upstream-bench/week.json.log` (skipped when the file is there), with
//!    the config beside it (`config.toml`);
//! 2. times the parse (first pass: every job and machine) and prints MB/s;
//! 3. times the whole `compare --upstream-log` (both passes, every decision judged by the
//!    engine, the week replayed through the simulator) and prints the verdict.
//!
//! Peak memory is measured on the release binary with the files this writes:
//! `/usr/bin/time -v target/release/drover workload import target/upstream-bench/week.json.log -o /dev/null`
//! and the same with `compare -c target/upstream-bench/config.toml --upstream-log …`.

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::Instant;

use drover::config::load_str;
use drover::sim::provider::{Latency, ProviderModel};
use drover::sim::queue::SimTime;
use drover::sim::workload::{Job, SubmittedAt, Workload};
use drover::sim::{Scenario, Simulation};
use drover::upstream_log::emit::{EmitFormat, Emitter};
use drover::upstream_log::{collect, ReadOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const CONFIG: &str = r#"
concurrent = 800
check_interval = 3
[[runners]]
  name = "fleet"
  url = "https://gitlab.example.com"
  token = "glrt-fleetbenchtoken"
  executor = "docker+machine"
  limit = 700
  [runners.docker]
    image = "alpine"
  [runners.machine]
    IdleCount = 30
    IdleTime = 1200
    MaxBuilds = 20
    MaxGrowthRate = 0
    MachineDriver = "google"
    MachineName = "auto-%s"
    [[runners.machine.autoscaling]]
      Periods = ["* * 8-18 * * mon-fri *"]
      Timezone = "UTC"
      IdleCount = 80
      IdleTime = 900
"#;

const JOBS_PER_DAY: u64 = 50_000;

/// 50,000 jobs on each of 7 days: 80 % in working hours, 1-20 minutes each.
fn week() -> Workload {
    let mut rng = ChaCha8Rng::seed_from_u64(50_000);
    let mut jobs = Vec::with_capacity(7 * JOBS_PER_DAY as usize);
    for day in 0..7u64 {
        for _ in 0..JOBS_PER_DAY {
            let second = if rng.random_bool(0.8) {
                7 * 3600 + rng.random_range(0..11 * 3600)
            } else {
                rng.random_range(0..86_400)
            };
            jobs.push(Job {
                submitted_at: SubmittedAt::Offset((day * 86_400 + second) as SimTime * 1000),
                duration: rng.random_range(60..1200) * 1000,
                runner: None,
                tags: Vec::new(),
                line: 0,
            });
        }
    }
    jobs.sort_by_key(|j| j.submitted_at);
    Workload { jobs }
}

fn die(e: impl std::fmt::Display) -> ! {
    eprintln!("{e}");
    std::process::exit(1)
}

fn generate(dir: &Path, log: &Path) {
    let config = load_str(CONFIG, "bench.toml").map_or_else(|e| die(e), |l| l.config);
    std::fs::create_dir_all(dir).unwrap_or_else(|e| die(e));
    std::fs::write(dir.join("config.toml"), CONFIG).unwrap_or_else(|e| die(e));
    let workload = week();
    let started = Instant::now();
    let scenario = Scenario {
        config: &config,
        workload: &workload,
        from: Some(
            chrono::DateTime::parse_from_rfc3339("2026-09-07T00:00:00Z")
                .map_or_else(|e| die(e), |t| t.to_utc()),
        ),
        until: None,
        model: ProviderModel {
            create_latency: Latency::Uniform(60_000, 150_000),
            create_failure_rate: 0.01,
            remove_latency: Latency::Uniform(5_000, 20_000),
            remove_failure_rate: 0.0,
            seed: 1,
        },
        any_runner: false,
    };
    let trace = Simulation::new(&scenario)
        .unwrap_or_else(|e| die(e))
        .record_events()
        .run();
    let f = std::fs::File::create(log).unwrap_or_else(|e| die(e));
    let mut w = BufWriter::new(f);
    Emitter::new(&trace, &config, EmitFormat::Json)
        .emit_to(&mut w, "19.3.0")
        .unwrap_or_else(|e| die(e));
    drop(w);
    println!(
        "generated {} ({} jobs, {} events) in {:.1} s",
        log.display(),
        workload.jobs.len(),
        trace.events.len(),
        started.elapsed().as_secs_f64()
    );
}

fn main() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/upstream-bench");
    let log = dir.join("week.json.log");
    if !log.exists() {
        generate(&dir, &log);
    }
    let bytes = std::fs::metadata(&log).map_or(0, |m| m.len());
    let mb = bytes as f64 / 1e6;
    let opts = ReadOptions::default();
    let paths = vec![log.clone()];

    let started = Instant::now();
    let (c, stats) = collect(&paths, opts).unwrap_or_else(|e| die(e));
    let secs = started.elapsed().as_secs_f64();
    println!(
        "parse: {mb:.0} MB, {} lines, {} jobs, {} machines in {secs:.2} s = {:.0} MB/s",
        stats.lines,
        c.jobs.len(),
        c.machines.len(),
        mb / secs
    );
    drop(c);

    let config = load_str(CONFIG, "bench.toml").map_or_else(|e| die(e), |l| l.config);
    let opts = ReadOptions {
        create_line_delay_ms: 0,
        ..opts
    };
    let started = Instant::now();
    let report =
        drover::sim::upstream::compare(&config, &paths, opts, 1, None).unwrap_or_else(|e| die(e));
    let secs = started.elapsed().as_secs_f64();
    println!(
        "compare --upstream-log: {secs:.1} s end to end; {}",
        report.verdict_line()
    );
}
