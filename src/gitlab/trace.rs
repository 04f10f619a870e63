//! The per-job object (spec §6): created at pickup, it sends the `running` ack, buffers the
//! job's log, sends it incrementally with keep-alives, turns `Job-Status` answers into two
//! cancellation tokens, and at the end flushes the log and runs the final-update loop.
//!
//! ```text
//! let trace = JobTrace::start(client, info, &job, TraceOptions::for_job(&runner, &job)).await;
//! match trace.pickup() { Pickup::Abort => return /* dropped silently */, .. }
//! let mut w = trace.writer();        // io::Write, never blocks on the network
//! // run the job, writing its (masked) output to `w`, watching trace.graceful_cancel()
//! // (cancel the user script, keep after_script) and trace.abort() (stop everything)
//! let report = trace.finish(JobOutcome::failed("script_failure", 1)).await;
//! ```
//!
//! The writer appends to a bounded in-memory log (`output_limit`, default 4096 KiB; after it a
//! one-line notice and nothing more, while the job keeps running). A tokio task PATCHes at most
//! 1 MiB per update interval (3 s, or what GitLab asks) from the sent offset and sends a
//! keep-alive `PUT running` when nothing was sent for the force-send interval (30 s).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::client::Client;
use super::failure::negotiate;
use super::info::Info;
use super::jobs::{JobCredentials, JobState, JobUpdate, TraceOutput, UpdateResult, UpdateState};
use crate::config::RunnerConfig;
use crate::executor::trace::OutputCap;
use crate::job::JobPayload;

/// Largest PATCH body.
pub const MAX_CHUNK: usize = 1024 * 1024;

/// How many 202 (or 412) rounds the final update makes before giving up; with the shortest
/// interval (3 s) that is at least 5 minutes of GitLab migrating live chunks.
pub const MAX_ACCEPTED_ROUNDS: u32 = 100;

/// Consecutive 416 answers one flush accepts before it counts as a failed attempt.
pub const MAX_RANGE_MISMATCHES: u32 = 10;

/// `running` acks sent when the connection fails before any answer (a deliberate difference:
/// upstream sends one and runs the job anyway, which GitLab then refuses as never acknowledged).
pub const ACK_ATTEMPTS: u32 = 4;

/// Tunables of the trace loop; [`Default`] is upstream's.
#[derive(Debug, Clone)]
pub struct TraceOptions {
    /// Log bytes kept (`output_limit` KiB × 1024).
    pub output_limit: usize,
    /// `debug_trace=` sent with every PATCH (`CI_DEBUG_TRACE` active and not disabled).
    pub debug_trace: bool,
    /// The initial update interval (3 s).
    pub update_interval: Duration,
    /// Keep-alive after this long without a successful send (30 s).
    pub force_send_interval: Duration,
    /// Retryable final-update failures tolerated (`job_status_final_update_retry_limit`, 10).
    pub final_update_retry_limit: u32,
    /// First backoff between final-update attempts (1 s), doubling.
    pub final_backoff_base: Duration,
    /// Longest backoff between final-update attempts (60 min).
    pub final_backoff_cap: Duration,
    /// Largest PATCH body (1 MiB).
    pub max_chunk: usize,
    /// First wait before resending a `running` ack that got no answer (1 s), doubling.
    pub ack_retry_base: Duration,
}

impl Default for TraceOptions {
    fn default() -> Self {
        TraceOptions {
            output_limit: 4096 * 1024,
            debug_trace: false,
            update_interval: Duration::from_secs(3),
            force_send_interval: Duration::from_secs(30),
            final_update_retry_limit: 10,
            final_backoff_base: Duration::from_secs(1),
            final_backoff_cap: Duration::from_secs(60 * 60),
            max_chunk: MAX_CHUNK,
            ack_retry_base: Duration::from_secs(1),
        }
    }
}

impl TraceOptions {
    /// The options for a job of a configured runner: `output_limit`,
    /// `job_status_final_update_retry_limit`, and `debug_trace` from `CI_DEBUG_TRACE` unless
    /// `debug_trace_disabled`.
    pub fn for_job(runner: &RunnerConfig, job: &JobPayload) -> TraceOptions {
        let mut o = TraceOptions::default();
        if runner.output_limit > 0 {
            o.output_limit = usize::try_from(runner.output_limit)
                .unwrap_or(usize::MAX / 1024)
                .saturating_mul(1024);
        }
        if runner.job_status_final_update_retry_limit > 0 {
            o.final_update_retry_limit =
                u32::try_from(runner.job_status_final_update_retry_limit).unwrap_or(u32::MAX);
        }
        o.debug_trace = !runner.debug_trace_disabled
            && job
                .variable("CI_DEBUG_TRACE")
                .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        o
    }
}

/// What the `running` ack said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pickup {
    /// Run the job (also when the ack failed for a reason other than abort, as upstream).
    Proceed,
    /// 403, 404 or `Job-Status: canceled|failed`: drop the job silently; no final update.
    Abort,
    /// `Job-Status: canceling`: fail at once with the raw reason `job_canceled`.
    Canceling,
}

/// How a job ended, in wire terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOutcome {
    /// `Success` or `Failed` (`Running` is treated as failed).
    pub state: JobState,
    /// The runner-side reason (`script_failure`, `job_canceled`, …); empty means
    /// `script_failure` when failed.
    pub failure_reason: String,
    /// The script's exit code (0 is not sent).
    pub exit_code: i32,
    /// Map the reason against the job's supported list (the normal end of a build). Early
    /// failures (§6.1) send the raw reason.
    pub negotiate: bool,
}

impl JobOutcome {
    /// The job passed.
    pub fn success() -> JobOutcome {
        JobOutcome {
            state: JobState::Success,
            failure_reason: String::new(),
            exit_code: 0,
            negotiate: true,
        }
    }

    /// The job failed at the end of the build, with a runner-side reason to negotiate.
    pub fn failed(reason: impl Into<String>, exit_code: i32) -> JobOutcome {
        JobOutcome {
            state: JobState::Failed,
            failure_reason: reason.into(),
            exit_code,
            negotiate: true,
        }
    }

    /// An early failure whose reason is sent as is (pickup-time `job_canceled`, invalid
    /// payload with `runner_system_failure`).
    pub fn failed_raw(reason: impl Into<String>, exit_code: i32) -> JobOutcome {
        JobOutcome {
            negotiate: false,
            ..JobOutcome::failed(reason, exit_code)
        }
    }
}

/// How the final update ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalState {
    /// GitLab accepted the final state (200).
    Accepted,
    /// GitLab aborted the job (403, 404, `Job-Status: canceled|failed`); nothing more to do.
    Aborted,
    /// The job was dropped at pickup; no final update was sent.
    Dropped,
    /// The retry limit was reached without an accepted update.
    GaveUp,
}

/// What [`JobTrace::finish`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishReport {
    /// How it ended.
    pub state: FinalState,
    /// The failure reason sent, after negotiation.
    pub failure_reason: Option<String>,
    /// Bytes in the log.
    pub bytesize: u64,
    /// `crc32:%08x` of the log.
    pub checksum: String,
    /// The update interval in force after the final update (the default, or what GitLab's
    /// last answer asked for).
    pub update_interval: Duration,
}

/// The job's log as it is sent to GitLab (upstream's `helpers/trace` buffer): invalid UTF-8
/// replaced with U+FFFD, capped at `output_limit` bytes ([`OutputCap`]), with its running
/// CRC-32 for the final update.
#[derive(Debug)]
pub struct LogBuffer {
    bytes: Vec<u8>,
    crc: crc32fast::Hasher,
    cap: OutputCap,
    /// The start of a UTF-8 sequence cut by a write boundary (≤ 3 bytes).
    carry: Vec<u8>,
}

impl LogBuffer {
    /// An empty log keeping at most `limit` bytes (and the limit notice).
    pub fn new(limit: usize) -> Self {
        LogBuffer {
            bytes: Vec::new(),
            crc: crc32fast::Hasher::new(),
            cap: OutputCap::new(limit),
            carry: Vec::new(),
        }
    }

    fn push_raw(&mut self, data: &[u8]) {
        let (bytes, crc) = (&mut self.bytes, &mut self.crc);
        self.cap.pass(data, &mut |p| {
            crc.update(p);
            bytes.extend_from_slice(p);
        });
    }

    /// Appends `data`, replacing invalid UTF-8 with U+FFFD and keeping a sequence cut at the
    /// end for the next write.
    pub fn write(&mut self, data: &[u8]) {
        if self.carry.is_empty() {
            self.write_checked(data);
        } else {
            let mut joined = std::mem::take(&mut self.carry);
            joined.extend_from_slice(data);
            self.write_checked(&joined);
        }
    }

    fn write_checked(&mut self, mut rest: &[u8]) {
        loop {
            match std::str::from_utf8(rest) {
                Ok(_) => return self.push_raw(rest),
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    self.push_raw(valid);
                    match e.error_len() {
                        Some(n) => {
                            self.push_raw("\u{FFFD}".as_bytes());
                            rest = &after[n..];
                        }
                        None => {
                            self.carry = after.to_vec();
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Ends the log: a UTF-8 sequence left incomplete becomes U+FFFD.
    pub fn close(&mut self) {
        if !self.carry.is_empty() {
            self.carry.clear();
            self.push_raw("\u{FFFD}".as_bytes());
        }
    }

    /// The log's bytes so far.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// At most `max` bytes of the log from `offset` (none past the end), as a PATCH sends.
    pub fn chunk(&self, offset: usize, max: usize) -> &[u8] {
        let start = offset.min(self.bytes.len());
        let end = self.bytes.len().min(start.saturating_add(max));
        &self.bytes[start..end]
    }

    /// The log's size and checksum, as the job update sends them.
    pub fn output(&self) -> TraceOutput {
        TraceOutput {
            checksum: format!("crc32:{:08x}", self.crc.clone().finalize()),
            bytesize: self.bytes.len() as u64,
        }
    }
}

struct Shared {
    log: Mutex<LogBuffer>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, LogBuffer> {
        // A writer that panicked mid-append leaves a consistent buffer (append is one
        // extend); keep going rather than lose the log.
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next chunk to send from `sent`, at most `max` bytes.
    fn chunk(&self, sent: u64, max: usize) -> Option<Bytes> {
        let log = self.lock();
        let chunk = log.chunk(usize::try_from(sent).ok()?, max);
        (!chunk.is_empty()).then(|| Bytes::copy_from_slice(chunk))
    }

    fn output(&self) -> TraceOutput {
        self.lock().output()
    }
}

/// Appends to a job's log. Cheap to clone; never blocks on the network. Writes after the
/// output limit are dropped (after a one-line notice), and always succeed.
#[derive(Clone)]
pub struct TraceWriter {
    shared: Arc<Shared>,
}

impl TraceWriter {
    /// Appends bytes to the log.
    pub fn write_bytes(&self, data: &[u8]) {
        self.shared.lock().write(data);
    }
}

impl io::Write for TraceWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_bytes(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The state the sending side carries from the watch loop into the final update.
struct Pump {
    sent: u64,
    interval: Duration,
    last_sent: Instant,
}

/// What the loops share: the client, the job, the tokens.
#[derive(Clone)]
struct Ctx {
    client: Arc<Client>,
    info: Arc<Info>,
    job: JobCredentials,
    shared: Arc<Shared>,
    graceful: CancellationToken,
    abort: CancellationToken,
    opts: Arc<TraceOptions>,
    /// The update interval in force, in milliseconds, for [`JobTrace::update_interval`].
    interval_ms: Arc<AtomicU64>,
}

impl Ctx {
    fn set_interval(&self, pump: &mut Pump, interval: Duration) {
        pump.interval = interval;
        self.interval_ms.store(
            u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Applies the `Job-Status` and interval of an answer.
    fn observe(&self, pump: &mut Pump, r: &UpdateResult) {
        if let Some(i) = r.update_interval {
            self.set_interval(pump, i);
        }
        if r.cancel_requested && !self.graceful.is_cancelled() {
            tracing::info!(
                job = self.job.id,
                "GitLab asked to cancel the job gracefully"
            );
            self.graceful.cancel();
        }
        if r.state == UpdateState::Abort && !self.abort.is_cancelled() {
            tracing::warn!(
                job = self.job.id,
                status = r.status,
                "GitLab aborted the job"
            );
            self.abort.cancel();
        }
    }

    async fn patch(&self, pump: &mut Pump) -> Option<UpdateResult> {
        let chunk = self.shared.chunk(pump.sent, self.opts.max_chunk)?;
        let r = self
            .client
            .patch_trace(&self.job, pump.sent, chunk, self.opts.debug_trace)
            .await;
        self.observe(pump, &r);
        match r.state {
            UpdateState::Succeeded => {
                if let Some(o) = r.offset {
                    pump.sent = o;
                }
                pump.last_sent = Instant::now();
            }
            UpdateState::RangeMismatch => {
                if let Some(o) = r.offset {
                    tracing::warn!(
                        job = self.job.id,
                        from = pump.sent,
                        to = o,
                        "GitLab holds a different log length; continuing from its length"
                    );
                    pump.sent = o;
                }
            }
            _ => {}
        }
        Some(r)
    }

    async fn update(&self, pump: &mut Pump, update: &JobUpdate) -> UpdateResult {
        let r = self.client.update_job(&self.job, &self.info, update).await;
        self.observe(pump, &r);
        r
    }

    /// One watch-loop tick (§6.3). Returns false when the job was aborted.
    async fn tick(&self, pump: &mut Pump) -> bool {
        let patched = self.patch(pump).await;
        if self.abort.is_cancelled() {
            return false;
        }
        // As upstream: the keep-alive follows only a PATCH that succeeded (or had nothing to
        // send); after a 404, a range mismatch or a failure the tick ends there.
        let patch_ok = patched
            .as_ref()
            .is_none_or(|r| r.state == UpdateState::Succeeded);
        if patch_ok && pump.last_sent.elapsed() > self.opts.force_send_interval {
            let update = JobUpdate {
                state: JobState::Running,
                failure_reason: None,
                exit_code: 0,
                output: self.shared.output(),
            };
            let r = self.update(pump, &update).await;
            if r.state == UpdateState::Succeeded {
                pump.last_sent = Instant::now();
            }
        }
        !self.abort.is_cancelled()
    }

    async fn watch(self, stop: CancellationToken, mut pump: Pump) -> Pump {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return pump,
                _ = self.abort.cancelled() => return pump,
                _ = tokio::time::sleep(pump.interval) => {}
            }
            if !self.tick(&mut pump).await {
                return pump;
            }
        }
    }
}

enum Flush {
    /// Everything sent, or sending stopped (403/abort/404): go on to the final PUT.
    Done,
    /// A failure: retry the whole round later.
    Retry,
}

/// One job's trace and status updates. See the module docs.
pub struct JobTrace {
    ctx: Ctx,
    supported_reasons: Vec<String>,
    pickup: Pickup,
    stop: CancellationToken,
    task: Option<JoinHandle<Pump>>,
}

impl JobTrace {
    /// Starts the job's trace: sends the `running` ack (§6.1) and, unless GitLab aborted the
    /// job, starts the incremental loop.
    pub async fn start(
        client: Arc<Client>,
        info: Arc<Info>,
        job: &JobPayload,
        opts: TraceOptions,
    ) -> JobTrace {
        let shared = Arc::new(Shared {
            log: Mutex::new(LogBuffer::new(opts.output_limit)),
        });
        let ctx = Ctx {
            client,
            info,
            job: JobCredentials::of(job),
            shared,
            graceful: CancellationToken::new(),
            abort: CancellationToken::new(),
            interval_ms: Arc::new(AtomicU64::new(
                u64::try_from(opts.update_interval.as_millis()).unwrap_or(u64::MAX),
            )),
            opts: Arc::new(opts),
        };
        let mut pump = Pump {
            sent: 0,
            interval: ctx.opts.update_interval,
            last_sent: Instant::now(),
        };
        let ack_update = JobUpdate {
            state: JobState::Running,
            failure_reason: None,
            exit_code: 0,
            output: TraceOutput::default(),
        };
        let mut ack = ctx.update(&mut pump, &ack_update).await;
        // An ack lost with the connection (no answer at all) is sent again: until GitLab has
        // it, the job is not running there and its log and result would be refused. Any
        // answer, even a failure, is final (HTTP-level retries already ran).
        let mut attempt = 1;
        while ack.state == UpdateState::Failed && ack.status < 0 && attempt < ACK_ATTEMPTS {
            let wait = ctx.opts.ack_retry_base.saturating_mul(1 << (attempt - 1));
            tracing::warn!(
                job = ctx.job.id,
                attempt,
                retry_in = ?wait,
                "the running ack got no answer; sending it again"
            );
            tokio::time::sleep(wait).await;
            ack = ctx.update(&mut pump, &ack_update).await;
            attempt += 1;
        }
        let pickup = if ack.state == UpdateState::Abort {
            Pickup::Abort
        } else if ack.cancel_requested {
            Pickup::Canceling
        } else {
            Pickup::Proceed
        };
        if ack.state == UpdateState::Failed {
            tracing::warn!(
                job = ctx.job.id,
                status = ack.status,
                "the running ack failed; running the job anyway"
            );
        }
        let stop = CancellationToken::new();
        let task =
            (pickup != Pickup::Abort).then(|| tokio::spawn(ctx.clone().watch(stop.clone(), pump)));
        JobTrace {
            supported_reasons: job.features.failure_reasons.clone(),
            ctx,
            pickup,
            stop,
            task,
        }
    }

    /// What the ack said.
    pub fn pickup(&self) -> Pickup {
        self.pickup
    }

    /// The job ID.
    pub fn job_id(&self) -> i64 {
        self.ctx.job.id
    }

    /// A writer for the job's log.
    pub fn writer(&self) -> TraceWriter {
        TraceWriter {
            shared: self.ctx.shared.clone(),
        }
    }

    /// Cancelled when GitLab asks for a graceful cancel (`Job-Status: canceling`): stop the
    /// user script, still run `after_script`, then finish with `job_canceled`.
    pub fn graceful_cancel(&self) -> CancellationToken {
        self.ctx.graceful.clone()
    }

    /// Cancelled when GitLab aborts the job (`canceled`/`failed`, 403): stop everything.
    pub fn abort(&self) -> CancellationToken {
        self.ctx.abort.clone()
    }

    /// The update interval in force: the initial one, or what GitLab's last answer asked for.
    pub fn update_interval(&self) -> Duration {
        Duration::from_millis(self.ctx.interval_ms.load(Ordering::Relaxed))
    }

    /// Checksum and size of the log so far.
    pub fn output(&self) -> TraceOutput {
        self.ctx.shared.output()
    }

    /// Stops the incremental loop, sends the rest of the log and the final state, with
    /// upstream's final-update loop (§6.4). Does nothing when the job was dropped at pickup.
    pub async fn finish(mut self, outcome: JobOutcome) -> FinishReport {
        self.ctx.shared.lock().close();
        self.stop.cancel();
        let output = self.ctx.shared.output();
        let reason = (outcome.state != JobState::Success).then(|| {
            if outcome.negotiate {
                negotiate(&outcome.failure_reason, &self.supported_reasons)
            } else if outcome.failure_reason.is_empty() {
                "script_failure".to_owned()
            } else {
                outcome.failure_reason.clone()
            }
        });
        let mut report = FinishReport {
            state: FinalState::Dropped,
            failure_reason: reason.clone(),
            bytesize: output.bytesize,
            checksum: output.checksum.clone(),
            update_interval: self.update_interval(),
        };
        let Some(task) = self.task.take() else {
            return report;
        };
        let mut pump = match task.await {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(job = self.ctx.job.id, error = %e, "the trace loop stopped unexpectedly; resending the log from GitLab's length");
                Pump {
                    sent: 0,
                    interval: self.ctx.opts.update_interval,
                    last_sent: Instant::now(),
                }
            }
        };
        // As upstream, the final update starts from the default interval, and GitLab's
        // answers may change it again.
        self.ctx
            .set_interval(&mut pump, self.ctx.opts.update_interval);
        let update = JobUpdate {
            state: if outcome.state == JobState::Success {
                JobState::Success
            } else {
                JobState::Failed
            },
            failure_reason: reason,
            exit_code: outcome.exit_code,
            output,
        };
        report.state = self.final_loop(&mut pump, &update).await;
        report.update_interval = self.update_interval();
        report
    }

    async fn flush(&self, pump: &mut Pump) -> Flush {
        let mut mismatches = 0;
        loop {
            let Some(r) = self.ctx.patch(pump).await else {
                return Flush::Done;
            };
            match r.state {
                UpdateState::Succeeded => mismatches = 0,
                UpdateState::Abort | UpdateState::NotFound => return Flush::Done,
                UpdateState::RangeMismatch => {
                    // A server that keeps moving its length is a failure to retry later,
                    // not a loop without end.
                    mismatches += 1;
                    if mismatches >= MAX_RANGE_MISMATCHES {
                        return Flush::Retry;
                    }
                    tokio::time::sleep(pump.interval).await
                }
                _ => {
                    tokio::time::sleep(pump.interval).await;
                    return Flush::Retry;
                }
            }
        }
    }

    async fn final_loop(&self, pump: &mut Pump, update: &JobUpdate) -> FinalState {
        let opts = &self.ctx.opts;
        let mut failures = 0u32;
        let mut rounds = 0u32;
        loop {
            let retry = match self.flush(pump).await {
                Flush::Retry => true,
                Flush::Done => {
                    let r = self.ctx.update(pump, update).await;
                    match r.state {
                        UpdateState::Succeeded => return FinalState::Accepted,
                        UpdateState::Abort | UpdateState::NotFound => return FinalState::Aborted,
                        UpdateState::Accepted | UpdateState::TraceValidationFailed => {
                            rounds += 1;
                            if rounds >= MAX_ACCEPTED_ROUNDS {
                                tracing::error!(
                                    job = self.ctx.job.id,
                                    "GitLab kept the final update pending; giving up"
                                );
                                return FinalState::GaveUp;
                            }
                            if r.state == UpdateState::TraceValidationFailed {
                                tracing::warn!(
                                    job = self.ctx.job.id,
                                    "GitLab rejected the log's checksum; resending the whole log"
                                );
                                pump.sent = 0;
                            }
                            tokio::time::sleep(pump.interval).await;
                            false
                        }
                        _ => {
                            tokio::time::sleep(pump.interval).await;
                            true
                        }
                    }
                }
            };
            if retry {
                failures += 1;
                if failures >= opts.final_update_retry_limit {
                    tracing::error!(
                        job = self.ctx.job.id,
                        attempts = failures,
                        "the final job update failed; giving up"
                    );
                    return FinalState::GaveUp;
                }
                let backoff = opts
                    .final_backoff_base
                    .saturating_mul(1u32 << (failures - 1).min(20))
                    .min(opts.final_backoff_cap);
                tokio::time::sleep(backoff).await;
            }
        }
    }
}

impl Drop for JobTrace {
    fn drop(&mut self) {
        // A trace dropped without finish() stops its loop rather than PATCHing forever.
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_split_across_writes_is_kept() {
        let mut b = LogBuffer::new(1000);
        let e = "é".as_bytes();
        b.write(&[b'a', e[0]]);
        b.write(&[e[1], b'b']);
        b.write(&[0xff, b'c']);
        b.close();
        assert_eq!(String::from_utf8_lossy(b.bytes()), "aéb\u{FFFD}c");
        assert_eq!(
            b.output().checksum,
            format!("crc32:{:08x}", crc32fast::hash(b.bytes()))
        );
    }

    #[test]
    fn chunks_stop_at_the_end() {
        let mut b = LogBuffer::new(1000);
        b.write(b"0123456789");
        assert_eq!(b.chunk(4, 3), b"456");
        assert_eq!(b.chunk(8, 100), b"89");
        assert_eq!(b.chunk(20, 100), b"");
    }
}
