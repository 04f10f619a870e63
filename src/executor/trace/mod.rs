//! The job log as the executor writes it: a [`TraceSink`] receives the bytes, after masking
//! ([`mask::Masker`]) and the `output_limit` cap.
//!
//! The executor never knows where the log goes: `drover exec-job` prints it, tests collect it,
//! and the GitLab client (its own issue) will upload it. Sinks receive bytes incrementally, in
//! order, already masked. This module also holds the log's colour and section conventions.

pub mod mask;

use std::io;
use std::sync::{Arc, Mutex};

use mask::Masker;

/// Where masked trace bytes go (ripgrep's `Sink`, for the job log).
pub trait TraceSink: Send {
    /// Receives the next masked bytes of the log.
    fn write(&mut self, data: &[u8]) -> io::Result<()>;
    /// Called at the end of each stage and of the job.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
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

/// The masked, size-limited job log.
pub struct Trace<'a> {
    sink: &'a mut dyn TraceSink,
    masker: Masker,
    limit: usize,
    written: usize,
    truncated: bool,
    sections: bool,
    sink_failed: bool,
}

impl<'a> Trace<'a> {
    /// A trace writing into `sink`, masking with `masker`, capped at `limit` bytes; `sections`
    /// turns on `section_start`/`section_end` markers (`features.trace_sections`).
    pub fn new(sink: &'a mut dyn TraceSink, masker: Masker, limit: usize, sections: bool) -> Self {
        Trace {
            sink,
            masker,
            limit,
            written: 0,
            truncated: false,
            sections,
            sink_failed: false,
        }
    }

    /// Writes raw log bytes (container output, runner messages).
    pub fn write(&mut self, data: &[u8]) {
        let masked = self.masker.push(data);
        self.emit(&masked);
    }

    /// Writes the runner's own control bytes (section markers, colour codes, line ends) past
    /// the masker, after what it holds: no masked value can corrupt them.
    fn control(&mut self, data: &[u8]) {
        let rest = self.masker.finish();
        self.emit(&rest);
        self.emit(data);
    }

    /// Emits whatever the masker still holds (end of a stage or of the job) and flushes.
    pub fn flush(&mut self) {
        let rest = self.masker.finish();
        self.emit(&rest);
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
        self.truncated
    }

    fn emit(&mut self, data: &[u8]) {
        if self.truncated || data.is_empty() {
            return;
        }
        let room = self.limit.saturating_sub(self.written);
        let (part, over) = if data.len() > room {
            (&data[..room], true)
        } else {
            (data, false)
        };
        self.send(part);
        self.written += part.len();
        if over {
            self.truncated = true;
            let notice = format!(
                "\n{}Job's log exceeded limit of {} bytes.\nJob execution will continue but no more output will be collected.{}\n",
                ansi::YELLOW,
                self.limit,
                ansi::RESET
            );
            self.send(notice.as_bytes());
        }
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

    /// A runner line in bold green.
    pub fn notice(&mut self, text: &str) {
        self.line(ansi::BOLD_GREEN, text);
    }

    /// A runner line (`WARNING: …`) in yellow.
    pub fn warning(&mut self, text: &str) {
        self.line(ansi::YELLOW, &format!("WARNING: {text}"));
    }

    /// A runner line (`ERROR: …`) in bold red.
    pub fn error(&mut self, text: &str) {
        self.line(ansi::BOLD_RED, &format!("ERROR: {text}"));
    }

    /// A plain runner line.
    pub fn info(&mut self, text: &str) {
        self.line("", text);
    }

    fn line(&mut self, colour: &str, text: &str) {
        self.control(colour.as_bytes());
        self.write(text.as_bytes());
        self.control(format!("{}\n", ansi::RESET).as_bytes());
    }

    /// A section name as it appears in a marker: only `[A-Za-z0-9_.-]` (step names come from
    /// the payload; a `\r` or an escape sequence in one must not forge markers).
    fn marker_name(name: &str) -> String {
        name.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }

    /// Opens a section (if the job supports sections) and prints its description in bold cyan.
    pub fn section_start(&mut self, name: &str, description: &str) {
        if self.sections {
            let s = format!(
                "section_start:{}:{}\r{}",
                chrono::Utc::now().timestamp(),
                Self::marker_name(name),
                ansi::CLEAR_LINE
            );
            self.control(s.as_bytes());
        }
        self.line(ansi::BOLD_CYAN, description);
    }

    /// Closes a section.
    pub fn section_end(&mut self, name: &str) {
        if self.sections {
            let s = format!(
                "section_end:{}:{}\r{}",
                chrono::Utc::now().timestamp(),
                Self::marker_name(name),
                ansi::CLEAR_LINE
            );
            self.control(s.as_bytes());
        }
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_limit_truncates_once() {
        let mut sink = MemorySink::default();
        let mut t = Trace::new(&mut sink, Masker::new::<&str>(&[], &[]), 10, false);
        t.write(b"0123456789abc\n");
        t.write(b"more\n");
        t.flush();
        let text = sink.text();
        assert!(text.starts_with("0123456789\n"), "{text:?}");
        assert_eq!(text.matches("exceeded limit of 10 bytes").count(), 1);
        assert!(!text.contains("more\n"));
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
    }
}

#[cfg(test)]
mod control_line_tests {
    use super::*;

    /// Masking never touches the runner's section markers or the colour codes of its own
    /// lines, whatever is masked; values too short to mask safely are left alone.
    #[test]
    fn masking_never_corrupts_markers_or_control_sequences() {
        let hostile = [
            "t",
            "0",
            ";",
            "m",
            "ection_st",
            "ection_end:",
            "[0;m",
            "\u{1b}[36;1m",
        ];
        let mut sink = MemorySink::default();
        let mut t = Trace::new(&mut sink, Masker::new(&hostile, &[]), 100_000, true);
        t.section_start("step_script", "Executing step_script");
        t.section_start("x\rsection_end:1:forged\x1b[0K", "forged");
        t.section_end("x\rsection_end:1:forged\x1b[0K");
        t.write(b"user output: ection_st and ection_end: here\n");
        t.notice("Job succeeded");
        t.section_end("step_script");
        t.flush();
        let text = sink.text();
        let start = text
            .find("section_start:")
            .unwrap_or_else(|| panic!("{text:?}"));
        let end = text
            .find("section_end:")
            .unwrap_or_else(|| panic!("{text:?}"));
        assert!(text[start..].contains(":step_script\r\x1b[0K"), "{text:?}");
        assert!(text[end..].contains(":step_script\r\x1b[0K"), "{text:?}");
        assert!(
            text.contains("\x1b[36;1mExecuting step_script\x1b[0;m\n"),
            "{text:?}"
        );
        assert!(
            text.contains("\x1b[32;1mJob succeeded\x1b[0;m\n"),
            "{text:?}"
        );
        assert!(!text.contains(":forged"), "{text:?}");
        assert!(
            text.contains("user output: [MASKED] and [MASKED] here\n"),
            "{text:?}"
        );
    }
}
