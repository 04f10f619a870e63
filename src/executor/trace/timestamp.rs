//! Per-line timestamps of the job log (`FF_TIMESTAMPS`, on by default), as upstream writes
//! them: each line starts with
//!
//! ```text
//! 2026-11-28T03:15:33.123456Z 01O <line>
//! ```
//!
//! the UTC time the line began (microseconds), the stream number in two hex digits, `O`
//! (stdout) or `E` (stderr), and a space, or `+` when the line continues the previous entry.
//!
//! The rules, per write:
//! * each `\n` ends an entry; a line started by an earlier write is completed by this one;
//! * what is left after the last `\n`, if it holds a `\r` (a progress bar, a section
//!   marker), becomes an entry of its own at once, ended by an added `\n`, and the next
//!   entry is marked `+`;
//! * otherwise it is held (at most [`HOLD`] bytes) for the rest of its line; a write that
//!   would pass that bound goes out at once, ended by an added `\n`, and the next entry is
//!   marked `+`;
//! * closing the stream ends a held line with an added `\n`.
//!
//! The clock is given by the caller, so tests are deterministic. No I/O.

use chrono::{DateTime, Datelike, Timelike, Utc};

/// Bytes of an unfinished line held back before it is written out as a partial entry.
pub const HOLD: usize = 8 * 1024;

/// Length of the time part of a header (`YYYY-MM-DDTHH:MM:SS.ffffffZ `).
pub const TIME_LEN: usize = 28;

/// Which stream of the job a line belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamId {
    /// 0: the runner's own lines; 1: the job's output; 15 and up: services.
    pub number: u8,
    /// `b'O'` (stdout) or `b'E'` (stderr).
    pub kind: u8,
}

/// A source of the current time.
pub type Clock = Box<dyn FnMut() -> DateTime<Utc> + Send>;

/// The system clock.
pub fn system_clock() -> Clock {
    Box::new(Utc::now)
}

/// Adds the line headers to one stream.
pub struct Timestamper {
    stream: StreamId,
    with_time: bool,
    continues: bool,
    line: Vec<u8>,
    /// The header of the second last formatted, to reuse its date and time of day.
    cached: Option<(i64, [u8; TIME_LEN])>,
}

impl Timestamper {
    /// A timestamper for `stream`; `with_time` false writes only the stream part of the
    /// header (upstream's own tests use that form).
    pub fn new(stream: StreamId, with_time: bool) -> Self {
        Timestamper {
            stream,
            with_time,
            continues: false,
            line: Vec::new(),
            cached: None,
        }
    }

    fn header(&mut self, clock: &mut Clock, into: &mut Vec<u8>) {
        if self.with_time {
            let t = clock();
            let sec = t.timestamp();
            let mut h = match self.cached {
                Some((s, h)) if s == sec => h,
                _ => {
                    let mut h = [0u8; TIME_LEN];
                    let text = format!(
                        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.000000Z ",
                        t.year().clamp(0, 9999),
                        t.month(),
                        t.day(),
                        t.hour(),
                        t.minute(),
                        t.second()
                    );
                    h.copy_from_slice(&text.as_bytes()[..TIME_LEN]);
                    h
                }
            };
            let mut micros = (t.timestamp_subsec_nanos() % 1_000_000_000) / 1000;
            for i in (20..26).rev() {
                h[i] = b'0' + (micros % 10) as u8;
                micros /= 10;
            }
            self.cached = Some((sec, h));
            into.extend_from_slice(&h);
        }
        const HEX: &[u8; 16] = b"0123456789abcdef";
        into.extend_from_slice(&[
            HEX[usize::from(self.stream.number >> 4)],
            HEX[usize::from(self.stream.number & 0x0f)],
            self.stream.kind,
            if self.continues { b'+' } else { b' ' },
        ]);
        self.continues = false;
    }

    /// Adds one write of the stream; what is ready goes into `out`.
    pub fn write(&mut self, p: &[u8], clock: &mut Clock, out: &mut Vec<u8>) {
        let mut at = 0;
        if let Some(nl) = memchr::memchr(b'\n', p) {
            if !self.line.is_empty() {
                out.append(&mut self.line);
            } else {
                self.header(clock, out);
            }
            out.extend_from_slice(&p[..=nl]);
            at = nl + 1;
            while let Some(off) = memchr::memchr(b'\n', &p[at..]) {
                self.header(clock, out);
                out.extend_from_slice(&p[at..=at + off]);
                at += off + 1;
            }
        }
        let rest = &p[at..];
        if rest.is_empty() {
            return;
        }
        if memchr::memchr(b'\r', rest).is_some() {
            if !self.line.is_empty() {
                out.append(&mut self.line);
            } else {
                self.header(clock, out);
            }
            out.extend_from_slice(rest);
            out.push(b'\n');
            self.continues = true;
            return;
        }
        // The bound counts the held line's header too, as upstream's.
        if self.line.len() + rest.len() > HOLD {
            if self.line.is_empty() {
                self.header(clock, out);
            } else {
                out.append(&mut self.line);
            }
            out.extend_from_slice(rest);
            out.push(b'\n');
            self.continues = true;
            return;
        }
        if self.line.is_empty() {
            let mut line = std::mem::take(&mut self.line);
            self.header(clock, &mut line);
            self.line = line;
        }
        self.line.extend_from_slice(rest);
    }

    /// Ends the stream: a held line goes out with an added `\n`.
    pub fn close(&mut self, out: &mut Vec<u8>) {
        if !self.line.is_empty() {
            out.append(&mut self.line);
            out.push(b'\n');
        }
    }
}
