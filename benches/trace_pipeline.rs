//! Trace pipeline throughput: job output masked and timestamped (the executor's `Trace`, with
//! `FF_TIMESTAMPS` on as by default), buffered and sent by the GitLab side's per-job
//! `JobTrace` as ≤ 1 MiB `PATCH /jobs/:id/trace` calls to the local GitLab simulator, then the
//! final update. Prints MB/s of job output (1 MB = 10^6 bytes) for four stages: masking alone,
//! masking + timestamps, buffer + PATCH alone, and the whole pipeline.
//!
//! Run: `cargo bench --bench trace_pipeline` (loopback only; no Docker needed). Each figure is
//! the median of 5 runs over 32 MiB of log lines holding a masked variable and job tokens.
//! The upload side is measured from the first write to the accepted final update, with
//! upstream's 3 s update interval; most bytes go out in the final flush, back to back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use drover::executor::trace::mask::Masker;
use drover::executor::trace::{timestamp, Trace, TraceSink};
use drover::gitlab::{
    Client, ClientSettings, FinalState, Info, JobOutcome, JobRequest, JobRequestOutcome, JobTrace,
    TraceOptions,
};
use gitlab_sim::{JobSpec, Sim};

const TOTAL: usize = 32 * 1024 * 1024;
const WRITE: usize = 16 * 1024;
const RUNS: usize = 5;
const TOKEN: &str = "glrt-t1_BenchRunner000000";

fn log_bytes() -> Vec<u8> {
    let mut out = Vec::with_capacity(TOTAL + 200);
    let mut i = 0u64;
    while out.len() < TOTAL {
        let line = match i % 10 {
            0 => format!("Step {i}: using secret hunter2hunter2 and glcbt-66_abcdefghijklmn\n"),
            1 => format!("\x1b[32;1m$ make -j4 target-{i}\x1b[0;m\n"),
            _ => format!("compiling module {i:08} ........................................ ok\n"),
        };
        out.extend_from_slice(line.as_bytes());
        i += 1;
    }
    out.truncate(TOTAL);
    out
}

/// The executor's sink over the job's trace buffer (as `drover run`'s).
struct Upload(drover::gitlab::TraceWriter);

impl TraceSink for Upload {
    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.0.write_bytes(data);
        Ok(())
    }
    fn limits_output(&self) -> bool {
        true
    }
}

/// A sink that only counts.
struct Count(usize);

impl TraceSink for Count {
    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.0 += data.len();
        Ok(())
    }
}

fn job_trace<'a>(sink: &'a mut dyn TraceSink) -> Trace<'a> {
    Trace::new(sink, Masker::new(&["hunter2hunter2"], &[]), 2 * TOTAL, true)
        .with_timestamps(true, timestamp::system_clock())
}

fn mb_per_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

async fn one_upload(
    sim: &Sim,
    client: &Arc<Client>,
    info: &Arc<Info>,
    data: &[u8],
    mask: bool,
) -> Duration {
    sim.enqueue(JobSpec::default());
    let job = match client
        .request_job(&JobRequest {
            token: TOKEN,
            info,
            system_id: "s_0123456789ab",
            session: None,
            runner_name: "",
        })
        .await
        .outcome
    {
        JobRequestOutcome::Job(j) => j,
        other => panic!("no job: {other:?}"),
    };
    let opts = TraceOptions {
        output_limit: 2 * TOTAL,
        ..TraceOptions::default()
    };
    let started = Instant::now();
    let trace = JobTrace::start(client.clone(), info.clone(), &job, opts).await;
    let mut sink = Upload(trace.writer());
    if mask {
        let mut t = job_trace(&mut sink);
        for chunk in data.chunks(WRITE) {
            t.write(chunk);
            tokio::task::yield_now().await;
        }
        t.finish();
    } else {
        for chunk in data.chunks(WRITE) {
            sink.0.write_bytes(chunk);
            tokio::task::yield_now().await;
        }
    }
    let report = trace.finish(JobOutcome::success()).await;
    let elapsed = started.elapsed();
    assert_eq!(report.state, FinalState::Accepted);
    let stored = sim.job(job.id).map(|j| j.trace_len).unwrap_or(0);
    assert_eq!(
        stored as u64, report.bytesize,
        "the simulator holds every byte"
    );
    elapsed
}

fn main() {
    let data = log_bytes();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");

    let mask_only: Vec<f64> = (0..RUNS)
        .map(|_| {
            let mut m = Masker::new(&["hunter2hunter2"], &[]);
            let t = Instant::now();
            let mut n = 0;
            for chunk in data.chunks(WRITE) {
                n += m.push(chunk).len();
            }
            n += m.finish().len();
            assert!(n > 0);
            mb_per_s(data.len(), t.elapsed())
        })
        .collect();

    let stamped: Vec<f64> = (0..RUNS)
        .map(|_| {
            let mut sink = Count(0);
            let t = Instant::now();
            {
                let mut trace = job_trace(&mut sink);
                for chunk in data.chunks(WRITE) {
                    trace.write(chunk);
                }
                trace.finish();
            }
            assert!(sink.0 > data.len());
            mb_per_s(data.len(), t.elapsed())
        })
        .collect();

    let (upload, pipeline) = rt.block_on(async {
        let sim = Sim::start().await.expect("simulator");
        sim.add_runner(TOKEN);
        let client = Arc::new(
            Client::new(&ClientSettings {
                url: sim.url().into(),
                ..Default::default()
            })
            .expect("client"),
        );
        let runner = drover::config::RunnerConfig {
            executor: "docker".into(),
            ..Default::default()
        };
        let info = Arc::new(Info::for_runner(&runner, &Default::default()));
        let mut upload = Vec::new();
        let mut pipeline = Vec::new();
        for _ in 0..RUNS {
            upload.push(mb_per_s(
                data.len(),
                one_upload(&sim, &client, &info, &data, false).await,
            ));
            pipeline.push(mb_per_s(
                data.len(),
                one_upload(&sim, &client, &info, &data, true).await,
            ));
        }
        (upload, pipeline)
    });
    println!(
        "trace pipeline over {} MiB of job output, median of {RUNS} runs:",
        TOTAL / (1024 * 1024)
    );
    println!("  mask only                 {:8.1} MB/s", median(mask_only));
    println!("  mask + timestamps         {:8.1} MB/s", median(stamped));
    println!("  buffer + PATCH + final    {:8.1} MB/s", median(upload));
    println!("  mask + timestamps + PATCH {:8.1} MB/s", median(pipeline));
}
