//! Figures of `drover run` (issue 11), printed, never asserted:
//!
//! 1. pickup latency, job queued → `running` ack, docker+machine with an idle machine and
//!    Workhorse long polling (the simulator holds requests 50 s): p50 / p90 / max;
//! 2. docker-machine processes per job through `drover run` on warm machines (from the fake's
//!    call log; creations and removals of other machines excluded);
//! 3. manager RSS idle, and RSS and CPU with 1, 10 and 50 jobs running (plain docker runner,
//!    `sleep` jobs), per job = (RSS at N − idle) / N; CPU over a 5 s window while N run.
//!
//! Run: `cargo bench --bench manager_figures` (needs the Docker Engine and stunnel, as the
//! end-to-end tests; `DROVER_BENCH_RUNS` sets the pickups measured, default 20;
//! `DROVER_BENCH_LOADS` the job counts, default `1,10,50`).

#[path = "../tests/docker_engine/mod.rs"]
mod docker_engine;
#[path = "../tests/executor_common/mod.rs"]
mod executor_common;
#[path = "../tests/provider_support/mod.rs"]
mod provider_support;
#[path = "../tests/run_machine_support/mod.rs"]
mod run_machine_support;
#[path = "../tests/run_support/mod.rs"]
mod run_support;
#[path = "../tests/test_certs/mod.rs"]
mod test_certs;

use std::time::{Duration, Instant};

use gitlab_sim::{JobState, Sim};
use provider_support::FakeWorld;
use run_machine_support::*;
use run_support::*;
use serde_json::json;

fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}

fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn pickup_latency(runs: usize) {
    let token = "glrt-droverbenchpickup1";
    let world = FakeWorld::new();
    world.set_faults(json!({"copy_certs": true}));
    let (_proxy, port) = tls_endpoint(&world).await;
    let sim = Sim::start().await.expect("simulator");
    sim.configure(|s| s.long_poll_ms = 50_000);
    sim.add_runner(token);
    let drover = Drover::start(&machine_config(&sim, token, port, 1, 0), &env(&world));
    until(&drover, Duration::from_secs(60), "an idle machine", || {
        machines(&world).into_iter().next()
    })
    .await;
    // One warm-up job, then wait for the request loop to be parked in a long poll.
    let warm = sim.enqueue(job(&["true"]));
    finished(&sim, &drover, warm, Duration::from_secs(120)).await;
    let mut lat = Vec::new();
    let mut calls = Vec::new();
    for _ in 0..runs {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let before = world.calls().len();
        let t0 = Instant::now();
        let id = sim.enqueue(job(&["true"]));
        until(&drover, Duration::from_secs(60), "the running ack", || {
            sim.job(id).filter(|j| j.running_updates > 0).map(|_| ())
        })
        .await;
        lat.push(t0.elapsed().as_secs_f64());
        let v = finished(&sim, &drover, id, Duration::from_secs(120)).await;
        assert_eq!(v.state, JobState::Success);
        let all = world.calls();
        let n = all[before..]
            .iter()
            .filter(|(_, a)| {
                !matches!(a.get(1).map(String::as_str), Some("create" | "rm" | "stop"))
            })
            .count();
        calls.push(n);
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    println!(
        "pickup latency (queued -> running ack, docker+machine, idle machine, long polling 50 s), {runs} jobs: p50 {:.3} s, p90 {:.3} s, max {:.3} s",
        percentile(&lat, 0.5),
        percentile(&lat, 0.9),
        lat.last().copied().unwrap_or(f64::NAN)
    );
    let total: usize = calls.iter().sum();
    println!(
        "docker-machine processes per warm job through drover run: {:.2} (max {}, {runs} jobs; creations/removals excluded)",
        total as f64 / runs.max(1) as f64,
        calls.iter().max().copied().unwrap_or(0)
    );
}

async fn load(loads: &[usize]) {
    let token = "glrt-droverbenchloadrss";
    let sim = Sim::start().await.expect("simulator");
    sim.add_runner(token);
    let max = loads.iter().copied().max().unwrap_or(1);
    let mut drover = Drover::start(&docker_config(&sim, token, max as u32, ""), &[]);
    until(&drover, Duration::from_secs(30), "start-up", || {
        drover.log().contains("Configuration loaded").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pid = drover.pid();
    let idle = rss_kib(pid);
    println!("manager idle RSS: {:.1} MB", idle as f64 / 1024.0);
    for &n in loads {
        let ids: Vec<i64> = (0..n)
            .map(|i| sim.enqueue(job(&[&format!("echo load-{i}"), "sleep 40"])))
            .collect();
        until(
            &drover,
            Duration::from_secs(600),
            &format!("{n} jobs running"),
            || {
                ids.iter()
                    .all(|id| {
                        sim.job(*id).is_some_and(|j| {
                            j.state == JobState::Running
                                && String::from_utf8_lossy(&j.trace).contains("load-")
                        })
                    })
                    .then_some(())
            },
        )
        .await;
        let c0 = cpu_ticks(pid);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let cpu = (cpu_ticks(pid) - c0) as f64 / ticks_per_sec() / 5.0 * 100.0;
        let rss = rss_kib(pid);
        println!(
            "{n} running jobs: manager RSS {:.1} MB ({:.2} MB per job over idle), CPU {:.1} % of a core ({:.2} % per job)",
            rss as f64 / 1024.0,
            rss.saturating_sub(idle) as f64 / 1024.0 / n as f64,
            cpu,
            cpu / n as f64
        );
        for id in ids {
            finished(&sim, &drover, id, Duration::from_secs(600)).await;
        }
    }
    drover.signal(libc::SIGQUIT);
    let _ = drover.wait_exit(Duration::from_secs(120));
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("manager_figures: bench");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        if !executor_common::engine_available() {
            eprintln!("manager_figures: no Docker Engine");
            return;
        }
        executor_common::ensure_images();
        let _ = provider_support::shim_bin();
        let runs = std::env::var("DROVER_BENCH_RUNS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20);
        let loads: Vec<usize> = std::env::var("DROVER_BENCH_LOADS")
            .unwrap_or_else(|_| "1,10,50".into())
            .split(',')
            .filter_map(|v| v.trim().parse().ok())
            .collect();
        pickup_latency(runs).await;
        load(&loads).await;
    });
}
