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

use std::time::{SystemTime, UNIX_EPOCH};

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
pub type Clock = Box<dyn FnMut() -> SystemTime + Send>;

/// The system clock.
pub fn system_clock() -> Clock {
    Box::new(SystemTime::now)
}

/// Seconds since the Unix epoch and the microseconds past that second (times before the epoch
/// count as the epoch).
pub fn unix_micros(t: SystemTime) -> (i64, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    (
        i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        d.subsec_micros(),
    )
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
            let (sec, micros) = unix_micros(clock());
            let mut h = match self.cached {
                Some((s, h)) if s == sec => h,
                _ => {
                    // The date and time of day are worked out once per second.
                    let t = DateTime::<Utc>::from_timestamp(sec, 0).unwrap_or_default();
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
            let mut micros = micros;
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

/// Whether `p` starts with a header with its time part.
fn is_header(p: &[u8]) -> bool {
    const DIGITS: [usize; 20] = [
        0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22, 23, 24, 25,
    ];
    p.len() >= TIME_LEN + 4
        && DIGITS.iter().all(|&i| p[i].is_ascii_digit())
        && p[4] == b'-'
        && p[7] == b'-'
        && p[10] == b'T'
        && p[13] == b':'
        && p[16] == b':'
        && p[19] == b'.'
        && p[26] == b'Z'
        && p[27] == b' '
        && p[28..30].iter().all(|b| b.is_ascii_hexdigit())
        && matches!(p[30], b'O' | b'E')
        && matches!(p[31], b' ' | b'+')
}

/// The log as GitLab shows it: each line's header removed, and a `+` entry joined to the one
/// before it (the `\n` that ended that one was added by the timestamper). Text without
/// headers comes back unchanged.
pub fn strip(log: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(log.len());
    let mut at = 0;
    while at < log.len() {
        let end = memchr::memchr(b'\n', &log[at..]).map_or(log.len(), |i| at + i + 1);
        let line = &log[at..end];
        if is_header(line) {
            if line[31] == b'+' && out.last() == Some(&b'\n') {
                out.pop();
            }
            out.extend_from_slice(&line[TIME_LEN + 4..]);
        } else {
            out.extend_from_slice(line);
        }
        at = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn strip_gives_the_plain_log_back() {
        let t = Utc
            .with_ymd_and_hms(2021, 1, 1, 0, 0, 0)
            .single()
            .expect("a valid date");
        let mut clock: Clock = Box::new(move || t.into());
        let mut ts = Timestamper::new(
            StreamId {
                number: 1,
                kind: b'O',
            },
            true,
        );
        let mut out = Vec::new();
        let text: [&[u8]; 5] = [b"a\nb", b"c\n", b"progress\r", b"done\n", b"tail"];
        for p in text {
            ts.write(p, &mut clock, &mut out);
        }
        ts.close(&mut out);
        assert_eq!(out.iter().filter(|b| **b == b'Z').count(), 5);
        assert_eq!(strip(&out), b"a\nbc\nprogress\rdone\ntail\n");
        assert_eq!(strip(b"plain\nlog"), b"plain\nlog");
    }
}
