//! The job log as the executor writes it: a [`TraceSink`] receives the bytes, after masking
//! ([`mask::Masker`]), per-line timestamps ([`timestamp::Timestamper`], `FF_TIMESTAMPS`) and
//! the `output_limit` cap.
//!
//! As upstream, the log is made of streams, each masked and timestamped on its own: the
//! runner's lines (stream 0, stdout), and the job's output (stream 1, stdout and stderr).
//! The executor never knows where the log goes: `drover exec-job` prints it, tests collect it,
//! and the GitLab client uploads it. Sinks receive bytes incrementally, in order, already
//! masked. This module also holds the log's colour and section conventions.

pub mod limit;
pub mod timestamp;

/// The masker, at [`crate::mask`]; here too for the paths callers already use.
pub use crate::mask;

use std::io;
use std::sync::{Arc, Mutex};

use crate::mask::Masker;
pub use limit::{limit_cut, limit_notice, OutputCap};
use timestamp::{Clock, StreamId, Timestamper};

/// Where masked trace bytes go (ripgrep's `Sink`, for the job log).
pub trait TraceSink: Send {
    /// Receives the next masked bytes of the log.
    fn write(&mut self, data: &[u8]) -> io::Result<()>;
    /// Called at the end of each stage and of the job.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// Whether the sink applies `output_limit` itself (the GitLab log buffer does, as
    /// upstream's); the trace then does not cut the log.
    fn limits_output(&self) -> bool {
        false
    }
}
/// A sink that collects the log in memory, shareable so that a caller can watch it while the
/// job runs (tests, benchmarks).
#[derive(Debug, Clone, Default)]
pub struct MemorySink(pub Arc<Mutex<Vec<u8>>>);

impl MemorySink {
    /// The log so far, as (lossy) text.
    pub fn text(&self) -> String {
        match self.0.lock() {
            Ok(buf) => String::from_utf8_lossy(&buf).into_owned(),
            Err(poisoned) => String::from_utf8_lossy(&poisoned.into_inner()).into_owned(),
        }
    }
}

impl TraceSink for MemorySink {
    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        match self.0.lock() {
            Ok(mut buf) => buf.extend_from_slice(data),
            Err(poisoned) => poisoned.into_inner().extend_from_slice(data),
        }
        Ok(())
    }
}

/// A sink that writes to any `io::Write` (stdout for `drover exec-job`), flushing each write.
pub struct WriterSink<W: io::Write + Send>(pub W);

impl<W: io::Write + Send> TraceSink for WriterSink<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        self.0.write_all(data)?;
        self.0.flush()
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// ANSI sequences used in the log (upstream's `helpers/ansi_colors.go` conventions).
pub mod ansi {
    /// Bold green (notices, `$ cmd` lines).
    pub const BOLD_GREEN: &str = "\x1b[32;1m";
    /// Bold yellow (the output-limit notice).
    pub const BOLD_YELLOW: &str = "\x1b[33;1m";
    /// Bold cyan (stage descriptions).
    pub const BOLD_CYAN: &str = "\x1b[36;1m";
    /// Bold red (errors).
    pub const BOLD_RED: &str = "\x1b[31;1m";
    /// Yellow (warnings).
    pub const YELLOW: &str = "\x1b[0;33m";
    /// Reset.
    pub const RESET: &str = "\x1b[0;m";
    /// Clear to end of line (after section markers).
    pub const CLEAR_LINE: &str = "\x1b[0K";
}

/// A stream of the job log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// The runner's own lines, section markers (stream 0, stdout).
    Runner,
    /// The runner's error output: service health-check reports (stream 0, stderr).
    RunnerStderr,
    /// The job's standard output (stream 1).
    Stdout,
    /// The job's standard error (stream 1).
    Stderr,
}

impl Stream {
    fn id(self) -> StreamId {
        match self {
            Stream::Runner => StreamId {
                number: 0,
                kind: b'O',
            },
            Stream::RunnerStderr => StreamId {
                number: 0,
                kind: b'E',
            },
            Stream::Stdout => StreamId {
                number: 1,
                kind: b'O',
            },
            Stream::Stderr => StreamId {
                number: 1,
                kind: b'E',
            },
        }
    }

    fn index(self) -> usize {
        match self {
            Stream::Runner => 0,
            Stream::RunnerStderr => 1,
            Stream::Stdout => 2,
            Stream::Stderr => 3,
        }
    }

    const ALL: [Stream; 4] = [
        Stream::Runner,
        Stream::RunnerStderr,
        Stream::Stdout,
        Stream::Stderr,
    ];
}

/// One stream's filters.
struct Channel {
    masker: Masker,
    stamper: Option<Timestamper>,
}

/// The masked, timestamped, size-limited job log.
pub struct Trace<'a> {
    sink: &'a mut dyn TraceSink,
    template: Masker,
    channels: Vec<Channel>,
    timestamps: bool,
    clock: Clock,
    cap: Option<OutputCap>,
    written: usize,
    sections: bool,
    sink_failed: bool,
    scratch: Vec<u8>,
}

impl<'a> Trace<'a> {
    /// A trace writing into `sink`, masking each stream with a copy of `masker`, capped at
    /// `limit` bytes (unless the sink applies the limit itself); `sections` turns on
    /// `section_start`/`section_end` markers (`features.trace_sections`). Timestamps are off
    /// until [`Trace::with_timestamps`].
    pub fn new(sink: &'a mut dyn TraceSink, masker: Masker, limit: usize, sections: bool) -> Self {
        let cap = (!sink.limits_output()).then(|| OutputCap::new(limit));
        let channels = Stream::ALL
            .iter()
            .map(|_| Channel {
                masker: masker.clone(),
                stamper: None,
            })
            .collect();
        Trace {
            sink,
            template: masker,
            channels,
            timestamps: false,
            clock: timestamp::system_clock(),
            cap,
            written: 0,
            sections,
            sink_failed: false,
            scratch: Vec::new(),
        }
    }

    /// Turns per-line timestamps on or off (`FF_TIMESTAMPS`), reading the time from `clock`
    /// (also used for section markers).
    pub fn with_timestamps(mut self, on: bool, clock: Clock) -> Self {
        self.timestamps = on;
        self.clock = clock;
        for (ch, s) in self.channels.iter_mut().zip(Stream::ALL) {
            ch.stamper = on.then(|| Timestamper::new(s.id(), true));
        }
        self
    }

    /// Writes the job's standard output.
    pub fn write(&mut self, data: &[u8]) {
        self.write_stream(Stream::Stdout, data);
    }

    /// Writes one write of a stream.
    pub fn write_stream(&mut self, stream: Stream, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        let ch = &mut self.channels[stream.index()];
        let clock = &mut self.clock;
        match &mut ch.stamper {
            Some(st) => ch.masker.write(data, &mut |p| st.write(p, clock, &mut out)),
            None => ch.masker.write(data, &mut |p| out.extend_from_slice(p)),
        }
        self.emit(&out);
        self.scratch = out;
    }

    /// Ends a stream: what its filters hold goes out; the next write starts it afresh.
    fn close_stream(&mut self, stream: Stream) {
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        let ch = &mut self.channels[stream.index()];
        let clock = &mut self.clock;
        match &mut ch.stamper {
            Some(st) => {
                ch.masker.close(&mut |p| st.write(p, clock, &mut out));
                st.close(&mut out);
            }
            None => ch.masker.close(&mut |p| out.extend_from_slice(p)),
        }
        if matches!(stream, Stream::Stdout | Stream::Stderr) {
            // The job's streams are made anew for each stage, as upstream's.
            ch.masker = self.template.clone();
            if self.timestamps {
                ch.stamper = Some(Timestamper::new(stream.id(), true));
            }
        }
        self.emit(&out);
        self.scratch = out;
    }

    /// Ends the job's output streams (end of a stage) and flushes the sink.
    pub fn flush(&mut self) {
        self.close_stream(Stream::Stdout);
        self.close_stream(Stream::Stderr);
        self.flush_sink();
    }

    /// Ends every stream (end of the job) and flushes the sink.
    pub fn finish(&mut self) {
        self.close_stream(Stream::Stdout);
        self.close_stream(Stream::Stderr);
        self.close_stream(Stream::RunnerStderr);
        self.close_stream(Stream::Runner);
        self.flush_sink();
    }

    fn flush_sink(&mut self) {
        if !self.sink_failed {
            if let Err(e) = self.sink.flush() {
                self.sink_failed(e);
            }
        }
    }

    /// Bytes handed to the sink so far.
    pub fn written(&self) -> usize {
        self.written
    }

    /// Whether `output_limit` was reached.
    pub fn truncated(&self) -> bool {
        self.cap.as_ref().is_some_and(OutputCap::reached)
    }

    fn emit(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let Some(mut cap) = self.cap.take() else {
            self.written += data.len();
            return self.send(data);
        };
        cap.pass(data, &mut |p| self.send(p));
        self.written = cap.written();
        self.cap = Some(cap);
    }

    fn send(&mut self, data: &[u8]) {
        if self.sink_failed || data.is_empty() {
            return;
        }
        if let Err(e) = self.sink.write(data) {
            self.sink_failed(e);
        }
    }

    fn sink_failed(&mut self, e: io::Error) {
        self.sink_failed = true;
        tracing::warn!(error = %e, "trace sink failed; further job output is dropped");
    }

    /// A runner line in bold green (upstream's `Infoln`).
    pub fn notice(&mut self, text: &str) {
        tracing::info!(target: "drover::job_log", "{text}");
        self.line(ansi::BOLD_GREEN, text);
    }

    /// A runner line `WARNING: …` in yellow (upstream's `Warningln`).
    pub fn warning(&mut self, text: &str) {
        tracing::warn!(target: "drover::job_log", "{text}");
        self.line(&format!("{}WARNING: ", ansi::YELLOW), text);
    }

    /// A runner line `ERROR: …` in bold red (upstream's `Errorln`).
    pub fn error(&mut self, text: &str) {
        tracing::error!(target: "drover::job_log", "{text}");
        self.line(&format!("{}ERROR: ", ansi::BOLD_RED), text);
    }

    /// The job's result line (`Job succeeded` in bold green, `Job failed…` as an error), in
    /// the job log only: the one who ran the job logs the result in its own log with the job's
    /// fields (`drover run`'s run loop, as upstream's build logger does), so it is not teed.
    pub fn result(&mut self, ok: bool, text: &str) {
        if ok {
            self.line(ansi::BOLD_GREEN, text);
        } else {
            self.line(&format!("{}ERROR: ", ansi::BOLD_RED), text);
        }
    }

    /// A plain runner line, after a clear-line code (upstream's `Println`).
    pub fn info(&mut self, text: &str) {
        tracing::debug!(target: "drover::job_log", "{text}");
        self.line(ansi::CLEAR_LINE, text);
    }

    /// One runner line, one write of the runner stream: `lead`, the text, a colour reset.
    fn line(&mut self, lead: &str, text: &str) {
        let line = format!("{lead}{text}{}\n", ansi::RESET);
        self.write_stream(Stream::Runner, line.as_bytes());
    }

    /// A section name as it appears in a marker: the name as is, but with control characters
    /// (a `\r`, an escape sequence) replaced by `_`, so that a name cannot forge markers.
    fn marker_name(name: &str) -> String {
        name.chars()
            .map(|c| if c.is_control() { '_' } else { c })
            .collect()
    }

    /// A section marker on the runner stream (if the job supports sections).
    fn marker(&mut self, kind: &str, name: &str, options: &str) {
        if self.sections {
            let (now, _) = timestamp::unix_micros((self.clock)());
            let s = format!(
                "{kind}:{now}:{}{options}\r{}",
                Self::marker_name(name),
                ansi::CLEAR_LINE
            );
            self.write_stream(Stream::Runner, s.as_bytes());
        }
    }

    /// Opens a section and prints its description in bold cyan.
    pub fn section_start(&mut self, name: &str, description: &str) {
        self.marker("section_start", name, "");
        self.info(&format!("{}{description}{}", ansi::BOLD_CYAN, ansi::RESET));
    }

    /// Opens a section with options (`[hide_duration=true,collapsed=true]`), no description.
    pub fn section_start_with(&mut self, name: &str, options: &str) {
        self.marker("section_start", name, options);
    }

    /// Closes a section without ending the job's streams.
    pub fn section_mark_end(&mut self, name: &str) {
        self.marker("section_end", name, "");
    }

    /// Closes a section.
    pub fn section_end(&mut self, name: &str) {
        self.flush();
        self.marker("section_end", name, "");
        self.flush_sink();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn fixed_clock() -> Clock {
        let t = Utc
            .with_ymd_and_hms(2026, 11, 28, 3, 15, 33)
            .single()
            .expect("a valid date");
        Box::new(move || t.into())
    }

    use chrono::Utc;

    #[test]
    fn output_limit_truncates_once() {
        let mut sink = MemorySink::default();
        let mut t = Trace::new(&mut sink, Masker::new::<&str>(&[], &[]), 10, false);
        t.write(b"0123456789abc\n");
        t.write(b"more\n");
        t.flush();
        let text = sink.text();
        assert!(text.starts_with("0123456789\n\x1b[33;1m"), "{text:?}");
        assert_eq!(text.matches("exceeded limit of 10 bytes").count(), 1);
        assert!(!text.contains("more\n"));
    }

    #[test]
    fn reaching_the_limit_exactly_writes_the_notice() {
        let mut sink = MemorySink::default();
        let mut t = Trace::new(&mut sink, Masker::new::<&str>(&[], &[]), 10, false);
        t.write(b"01234");
        t.write(b"56789");
        t.finish();
        assert!(sink
            .text()
            .starts_with("0123456789\n\x1b[33;1mJob's log exceeded limit of 10 bytes."));
    }

    #[test]
    fn a_sink_that_limits_itself_gets_everything() {
        struct Limiting(Vec<u8>);
        impl TraceSink for Limiting {
            fn write(&mut self, data: &[u8]) -> io::Result<()> {
                self.0.extend_from_slice(data);
                Ok(())
            }
            fn limits_output(&self) -> bool {
                true
            }
        }
        let mut sink = Limiting(Vec::new());
        let mut t = Trace::new(&mut sink, Masker::new::<&str>(&[], &[]), 4, false);
        t.write(b"0123456789\n");
        t.finish();
        assert_eq!(sink.0, b"0123456789\n");
    }

    #[test]
    fn masked_before_the_sink() {
        let mut sink = MemorySink::default();
        let mut t = Trace::new(&mut sink, Masker::new(&["hunter22"], &[]), 1000, true);
        t.write(b"pw=hun");
        t.write(b"ter22\n");
        t.section_start("step_script", "Executing");
        t.section_end("step_script");
        let text = sink.text();
        assert!(text.starts_with("pw=[MASKED]\n"), "{text:?}");
        assert!(text.contains("section_start:"));
        assert!(text.contains(":step_script\r\x1b[0K"));
        assert!(
            text.contains("\x1b[0K\x1b[36;1mExecuting\x1b[0;m\x1b[0;m\n"),
            "{text:?}"
        );
    }

    /// Runner lines, section markers and the job's output each carry their stream's header;
    /// the job's unfinished last line is ended at the end of the stage.
    #[test]
    fn timestamps_per_stream() {
        let mut sink = MemorySink::default();
        let mut t = Trace::new(&mut sink, Masker::new::<&str>(&[], &[]), 1 << 20, true)
            .with_timestamps(true, fixed_clock());
        t.info("Running with drover");
        t.section_start("step_script", "Executing");
        t.write_stream(Stream::Stdout, b"out glpat-abc\npartial");
        t.write_stream(Stream::Stderr, b"err\n");
        t.section_end("step_script");
        t.notice("Job succeeded");
        t.finish();
        let ts = "2026-11-28T03:15:33.000000Z";
        let want = format!(
            "{ts} 00O \x1b[0KRunning with drover\x1b[0;m\n\
             {ts} 00O section_start:1795835733:step_script\r\x1b[0K\n\
             {ts} 00O+\x1b[0K\x1b[36;1mExecuting\x1b[0;m\x1b[0;m\n\
             {ts} 01O out glpat-[MASKED]\n\
             {ts} 01E err\n\
             {ts} 01O partial\n\
             {ts} 00O section_end:1795835733:step_script\r\x1b[0K\n\
             {ts} 00O+\x1b[32;1mJob succeeded\x1b[0;m\n"
        );
        assert_eq!(sink.text(), want);
    }

    #[test]
    fn timestamps_off_leave_lines_alone() {
        let mut sink = MemorySink::default();
        let mut t = Trace::new(&mut sink, Masker::new::<&str>(&[], &[]), 1 << 20, false)
            .with_timestamps(false, fixed_clock());
        t.write(b"a\nb");
        t.finish();
        assert_eq!(sink.text(), "a\nb");
    }
}
