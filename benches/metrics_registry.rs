//! The metrics registry at fleet size: 100 runners with 50 running jobs each (5,000 jobs, each
//! in a running state with a stage and an executor stage), every runner with API traffic on
//! the four labelled endpoints, and a docker+machine pool of 100 targets.
//!
//! Prints: the heap the registry holds (a counting allocator: live bytes after building minus
//! before), the resident-memory growth, the size of one scrape, and scrape latency (encode only,
//! and a full `GET /metrics` over TCP on 127.0.0.1) as p50 / p99 / max over `DROVER_BENCH_RUNS`
//! scrapes (default 200).
//!
//! `cargo bench --bench metrics_registry`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use drover::engine::{Counts, TargetLabels};
use drover::metrics::server::{self, ListenAddress, Readiness};
use drover::metrics::{BuildInfo, JobPickup, JobState, MachineAction, Metrics, RunnerLabels};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const RUNNERS: usize = 100;
const JOBS_PER_RUNNER: usize = 50;
const STAGES: [&str; 5] = [
    "prepare_executor",
    "get_sources",
    "step_script",
    "after_script",
    "upload_artifacts_on_success",
];

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    pages * page
}

fn percentiles(mut v: Vec<Duration>) -> String {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        at(1.0).as_secs_f64() * 1e3
    )
}

fn build() -> (Metrics, Vec<drover::metrics::RunningJob>) {
    let m = Metrics::new("s_0123456789ab", &BuildInfo::current()).expect("registry");
    m.set_concurrent((RUNNERS * JOBS_PER_RUNNER) as i64);
    m.worker_slots((RUNNERS * JOBS_PER_RUNNER) as i64);
    let mut jobs = Vec::with_capacity(RUNNERS * JOBS_PER_RUNNER);
    for r in 0..RUNNERS {
        let runner = m.runner(&RunnerLabels::new(
            format!("t{r:02}_abcdef"),
            format!("fleet-runner-{r}"),
        ));
        runner.set_limit(JOBS_PER_RUNNER as i64);
        runner.request_concurrency_limits(4, 2.5, 3);
        for (endpoint, method, status) in [
            ("request_job", "POST", 201),
            ("request_job", "POST", 204),
            ("update_job", "PUT", 200),
            ("patch_trace", "PATCH", 202),
            ("reset_token", "POST", 201),
        ] {
            runner.api_request(endpoint, method, status, Duration::from_millis(80));
        }
        for j in 0..JOBS_PER_RUNNER {
            let url = format!(
                "https://gitlab.example.com/group/project-{r}/-/jobs/{}",
                r * 1000 + j
            );
            let job = runner.job_started(JobPickup {
                url: &url,
                time_in_queue_seconds: j as f64,
                project_jobs_running: "3",
                queue_size: Some(j as i64),
                queue_depth: Some(1),
            });
            job.set_state(JobState::Running);
            job.set_stage(STAGES[j % STAGES.len()]);
            job.set_executor_stage("docker_run");
            jobs.push(job);
        }
    }
    let a = m.autoscaling();
    let mut states = Vec::new();
    for t in 0..RUNNERS {
        let labels = TargetLabels {
            zone: format!("europe-west1-{t}"),
            region: "europe-west1".into(),
            project: "fleet".into(),
            machine_type: "n1-standard-2".into(),
        };
        a.action(MachineAction::Created, &labels);
        a.action(MachineAction::Used, &labels);
        states.push((
            labels,
            Counts {
                used: JOBS_PER_RUNNER as i64,
                idle: 2,
                ..Counts::default()
            },
        ));
    }
    a.set_machine_states(states);
    (m, jobs)
}

async fn get_metrics(addr: std::net::SocketAddr) -> usize {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read");
    assert!(buf.starts_with(b"HTTP/1.1 200"), "scrape failed");
    buf.len()
}

fn main() {
    // `cargo bench` passes `--bench`; a plain `cargo test --benches` run passes nothing and
    // only checks that the harness works once.
    let runs: usize = std::env::var("DROVER_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
        .max(1);

    let rss_before = rss_bytes();
    let live_before = LIVE.load(Ordering::Relaxed);
    let (m, jobs) = build();
    let live_after = LIVE.load(Ordering::Relaxed);
    let rss_after = rss_bytes();
    let text = m.encode_text().expect("encode");
    let series = text
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
        .count();
    println!(
        "registry with {RUNNERS} runners x {JOBS_PER_RUNNER} running jobs ({} jobs):",
        jobs.len()
    );
    println!(
        "  heap held: {:.2} MiB ({} bytes per running job, all series included)",
        (live_after - live_before) as f64 / 1048576.0,
        (live_after - live_before) / jobs.len() as isize
    );
    println!(
        "  RSS growth: {:.2} MiB",
        rss_after.saturating_sub(rss_before) as f64 / 1048576.0
    );
    println!(
        "  one scrape: {series} series, {:.1} KiB of text",
        text.len() as f64 / 1024.0
    );

    let mut encode = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let out = m.encode_text().expect("encode");
        encode.push(t.elapsed());
        std::hint::black_box(out);
    }
    println!("  encode only ({runs} scrapes): {}", percentiles(encode));

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let listener = ListenAddress::parse("127.0.0.1:0")
            .expect("address")
            .bind()
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let stop = CancellationToken::new();
        let task = tokio::spawn(server::serve(
            listener,
            m.clone(),
            Readiness::new(),
            stop.clone(),
        ));
        let mut http = Vec::with_capacity(runs);
        let mut bytes = 0;
        for _ in 0..runs {
            let t = Instant::now();
            bytes = get_metrics(addr).await;
            http.push(t.elapsed());
        }
        println!(
            "  GET /metrics over TCP ({runs} scrapes, {:.1} KiB each): {}",
            bytes as f64 / 1024.0,
            percentiles(http)
        );
        stop.cancel();
        let _ = task.await;
    });
    drop(jobs);
}
