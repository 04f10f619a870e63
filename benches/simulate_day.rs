//! Harness: one GitLab.com-sized manager-day through the simulator (issue 24's target).
//!
//! `cargo bench --bench simulate_day` builds in release mode, generates the workload from a
//! fixed seed (ChaCha8), runs it once through [`drover::sim::simulate`] (what `drover
//! simulate` runs) and prints the wall time and the process's peak RSS (`VmHWM`). Targets:
//! at most 5 s and 200 MB on the 2-core build machine.
//!
//! The day: 570,000 jobs in 24 h arriving around two peaks (10:00 and 15:00 UTC) over a
//! steady base, durations lognormal with a median of 180 s (σ = 0.7, capped at 3 h);
//! `concurrent = 2500`, one runner with `limit = 2500`, `IdleCount = 1000`, `IdleTime = 1800`,
//! `MaxBuilds = 1`, `MaxGrowthRate = 0`.
//!
//! `-- --thin K` keeps every K-th job of the day (the same day, a K-th of the load): a run short
//! enough for an instruction count (`valgrind --tool=callgrind`), which compares two builds
//! exactly where wall times on a shared machine vary by a third from run to run.
//!
//! `cargo bench --bench simulate_day -- --write DIR` also writes `DIR/config.toml` and
//! `DIR/day.csv`, so the same run can be measured through the binary:
//! `/usr/bin/time -v target/release/drover simulate -c DIR/config.toml -w DIR/day.csv`.

mod sim_support;

use drover::config::load_str;
use drover::sim::queue::SimTime;
use drover::sim::report::Summary;
use drover::sim::workload::{Job, SubmittedAt, Workload};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const CONFIG: &str = r#"concurrent = 2500
check_interval = 3
[[runners]]
  name = "manager-day"
  url = "https://gitlab.example.com"
  token = "glrt-managerdaytoken"
  executor = "docker+machine"
  limit = 2500
  [runners.docker]
    image = "alpine"
  [runners.machine]
    IdleCount = 1000
    IdleTime = 1800
    MaxBuilds = 1
    MaxGrowthRate = 0
    MachineDriver = "google"
    MachineName = "auto-%s"
"#;

const JOBS: usize = 570_000;
const DAY_SECS: f64 = 86_400.0;

/// Relative arrival intensity at second `t` of the day: a base plus two Gaussian peaks.
fn intensity(t: f64) -> f64 {
    let peak = |centre: f64| {
        let z = (t - centre) / 5_400.0;
        (-0.5 * z * z).exp()
    };
    0.35 + peak(10.0 * 3600.0) + 0.8 * peak(15.0 * 3600.0)
}

/// A standard normal draw (Box-Muller).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = rng.random_range(f64::EPSILON..1.0);
    let u2: f64 = rng.random_range(0.0..1.0);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The manager-day workload: always the same 570,000 jobs, in submission order.
fn day() -> Workload {
    let mut rng = ChaCha8Rng::seed_from_u64(570_000);
    let top = 0.35 + 1.0 + 0.8;
    let mut at: Vec<SimTime> = Vec::with_capacity(JOBS);
    while at.len() < JOBS {
        let t = rng.random_range(0.0..DAY_SECS);
        if rng.random_range(0.0..top) < intensity(t) {
            at.push((t * 1000.0) as SimTime);
        }
    }
    at.sort_unstable();
    let jobs = at
        .into_iter()
        .map(|ms| {
            let secs = (180f64.ln() + 0.7 * normal(&mut rng))
                .exp()
                .clamp(1.0, 3.0 * 3600.0);
            Job {
                submitted_at: SubmittedAt::Offset(ms),
                duration: (secs * 1000.0) as SimTime,
                runner: None,
                tags: Vec::new(),
                line: 0,
            }
        })
        .collect();
    Workload { jobs }
}

/// The process's peak resident set size in MB (`VmHWM`), if the kernel reports it.
fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn write_files(dir: &std::path::Path, workload: &Workload) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let config = dir.join("config.toml");
    std::fs::write(&config, CONFIG)
        .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
    let csv = dir.join("day.csv");
    std::fs::write(&csv, workload.to_csv())
        .map_err(|e| format!("cannot write {}: {e}", csv.display()))?;
    println!("wrote {} and {}", config.display(), csv.display());
    Ok(())
}

fn main() {
    let config = match load_str(CONFIG, "manager-day.toml") {
        Ok(l) => l.config,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let args: Vec<String> = std::env::args().collect();
    let thin = match args.iter().position(|a| a == "--thin") {
        None => 1,
        Some(i) => match args.get(i + 1).and_then(|k| k.parse::<usize>().ok()) {
            Some(k) if k > 0 => k,
            _ => {
                eprintln!("simulate_day: --thin takes a whole number of at least 1");
                std::process::exit(2);
            }
        },
    };
    let mut workload = day();
    if thin > 1 {
        workload.jobs = workload.jobs.into_iter().step_by(thin).collect();
    }
    if let Some(dir) = args
        .iter()
        .position(|a| a == "--write")
        .and_then(|i| args.get(i + 1))
    {
        if let Err(e) = write_files(std::path::Path::new(dir), &workload) {
            eprintln!("simulate_day: {e}");
            std::process::exit(1);
        }
    }
    let (trace, secs) = sim_support::run_timed(&config, workload);
    let s = Summary::of(&trace);
    let rss = peak_rss_mb().map_or_else(|| "unknown".to_string(), |mb| format!("{mb:.0} MB"));
    println!(
        "simulate_day: {} jobs ({} completed, {} creations, {} timeline rows, {} decisions)",
        s.jobs,
        s.jobs_completed,
        s.creations,
        trace.timeline.len(),
        trace.decisions.len()
    );
    println!("simulate_day: wall {secs:.2} s (target <= 5 s), peak RSS {rss} (target <= 200 MB)");
}
