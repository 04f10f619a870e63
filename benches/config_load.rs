//! Benchmark: loading a `config.toml` with many runners, to keep the loader linear in the size
//! of the file (it was quadratic: 10,000 runners took 8 s, 20,000 took 32 s).
//!
//! `cargo bench --bench config_load` builds in release mode, loads generated configs of 1,000,
//! 10,000 and 100,000 runners (each runner a realistic `docker+machine` section with a duplicate
//! key, so the loader also produces one warning per runner) three times each and prints each
//! wall time, the best, and the time per runner. The target: 100,000 runners well under a
//! second. Pass sizes as arguments to pick others: `cargo bench --bench config_load -- 20000`.

use std::time::{Duration, Instant};

use drover::config::load_str;

fn config(runners: usize) -> String {
    let mut text = String::from("concurrent = 10\ncheck_interval = 3\n");
    for i in 0..runners {
        text.push_str(&format!(
            r#"[[runners]]
  name = "runner-{i}"
  url = "https://gitlab.example.com/"
  token = "glrt-token{i}"
  executor = "docker+machine"
  limit = 10
  [runners.docker]
    image = "alpine:3"
    memory = "512m"
    cpus = "1.5"
  [runners.machine]
    IdleCount = 1
    idlecount = 1
    IdleTime = 600
    MachineDriver = "none"
    MachineName = "auto-{i}-%s"
"#
        ));
    }
    text
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1_000, 10_000, 100_000]
    } else {
        sizes
    };
    for runners in sizes {
        let text = config(runners);
        let mut times = Vec::new();
        for _ in 0..3 {
            let start = Instant::now();
            let loaded = load_str(&text, "bench.toml");
            let took = start.elapsed();
            match loaded {
                Ok(l) if l.config.runners.len() == runners && l.warnings.len() >= runners => {}
                Ok(l) => panic!(
                    "loaded {} runners and {} warnings, expected {runners} of each",
                    l.config.runners.len(),
                    l.warnings.len()
                ),
                Err(e) => panic!("the generated config does not load: {e}"),
            }
            times.push(took);
        }
        let best = times.iter().min().copied().unwrap_or(Duration::ZERO);
        let shown: Vec<String> = times.iter().map(|t| format!("{t:.2?}")).collect();
        println!(
            "config_load {runners} runners ({:.1} MB): {} best {best:.2?} ({:.2?} per runner)",
            text.len() as f64 / 1e6,
            shown.join(" "),
            best / runners.max(1) as u32,
        );
    }
}
