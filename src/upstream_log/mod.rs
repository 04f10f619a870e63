//! gitlab-runner's own log as input: a streaming parser for the logs of an operator's
//! production `docker+machine` runner (spec `upstream-logs.md`), and the reconstruction of what
//! upstream did from them, for `drover workload import` and `drover compare --upstream-log`.
//!
//! One concern per file:
//!
//! * [`line`]: one physical line → a record (transport prefix, `#033` escapes, ANSI colours,
//!   the `runner`/`text`/`json` formats, the message and its fields);
//! * [`events`]: records → events ([`events::Parser`]: continuation lines, duplicates, date
//!   anchoring, restarts, the messages the comparison needs; the rest is counted);
//! * [`rebuild`]: events → upstream's jobs and machines ([`rebuild::Collector`]) and its pool
//!   replayed decision by decision ([`rebuild::Replay`]);
//! * [`format`]: the reverse of [`line`]: one record → one line in the `runner`, `text` or
//!   `json` format, as gitlab-runner writes it (drover's own log and [`emit`] both use it);
//! * [`emit`]: the reverse, for tests and benchmarks: writes what drover's simulator did as
//!   upstream would have logged it.
//!
//! Nothing here decides anything about scaling: the comparison (`crate::sim::upstream`) hands
//! each rebuilt pool to drover's engine. Reading is bounded: lines are cut at
//! [`line::MAX_LINE`] bytes, and per-entity state is capped (see [`rebuild`]).

pub mod emit;
pub mod events;
pub mod format;
pub mod line;
pub mod rebuild;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Datelike, FixedOffset, Offset, Utc};

pub use events::{Event, EventKind, Parser, Stats};
pub use rebuild::{Collector, DecisionKind, DecisionPoint, PoolMachine, PoolState, Replay};

/// A log file that could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The file could not be opened or read.
    #[error("cannot read upstream log {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Nothing in the files looks like a gitlab-runner log.
    #[error(
        "{0}: no gitlab-runner line found (expected the runner's log as journalctl, syslog, \
         docker logs or a plain file writes it; see docs/check-against-your-fleet.md)"
    )]
    NotALog(String),
}

/// How to read year-less journald times before the first full date.
#[derive(Debug, Clone, Copy)]
pub struct ReadOptions {
    /// The year assumed until a line with a full date anchors it.
    pub fallback_year: i32,
    /// The host's UTC offset assumed until then.
    pub fallback_offset: FixedOffset,
    /// How long upstream takes from a creation decision to its first docker-machine line
    /// (see [`Replay::with_create_line_delay`]), in milliseconds.
    pub create_line_delay_ms: i64,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            fallback_year: Utc::now().year(),
            fallback_offset: Utc.fix(),
            create_line_delay_ms: 500,
        }
    }
}

fn open(path: &Path) -> Result<Box<dyn Read>, LogError> {
    let io = |source| LogError::Io {
        path: path.display().to_string(),
        source,
    };
    let f = std::fs::File::open(path).map_err(io)?;
    if path.extension().is_some_and(|e| e == "gz") {
        return Ok(Box::new(flate2::read::MultiGzDecoder::new(f)));
    }
    Ok(Box::new(f))
}

/// Reads `r` line by line into `f`, never holding more than [`line::MAX_LINE`] bytes of one
/// line (the rest of a longer line is skipped; the parser counts it as truncated).
pub fn for_each_line(r: impl Read, mut f: impl FnMut(&[u8])) -> std::io::Result<()> {
    let mut r = BufReader::with_capacity(256 * 1024, r);
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut overflow = false;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            if !buf.is_empty() || overflow {
                f(&buf);
            }
            return Ok(());
        }
        let (used, newline) = match chunk.iter().position(|&b| b == b'\n') {
            Some(p) => (p + 1, Some(p)),
            None => (chunk.len(), None),
        };
        let data = &chunk[..newline.unwrap_or(used)];
        let room = (line::MAX_LINE + 1).saturating_sub(buf.len());
        if data.len() > room {
            buf.extend_from_slice(&data[..room]);
            overflow = true;
        } else {
            buf.extend_from_slice(data);
        }
        r.consume(used);
        if newline.is_some() {
            f(&buf);
            buf.clear();
            overflow = false;
        }
    }
}

/// The first time found in the first lines of a file (to put rotated files in order).
fn first_time(path: &Path, opts: ReadOptions) -> Option<DateTime<Utc>> {
    let r = open(path).ok()?;
    let mut p = Parser::new(opts.fallback_year, opts.fallback_offset);
    let mut first = None;
    let mut n = 0;
    let mut r = BufReader::new(r.take(1 << 20));
    let mut line = Vec::new();
    while n < 500 && first.is_none() {
        line.clear();
        match r.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        n += 1;
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        p.push_bytes(&line);
        if let Some(e) = p.poll() {
            first = Some(e.at);
        }
    }
    p.finish();
    first.or_else(|| p.poll().map(|e| e.at))
}

/// The files in the order to read them: oldest first by their first timestamp (rotated logs
/// can be given in any order), files without one keep their place at the end.
pub fn order_files(paths: &[PathBuf], opts: ReadOptions) -> Vec<PathBuf> {
    let mut keyed: Vec<(Option<DateTime<Utc>>, usize, PathBuf)> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| (first_time(p, opts), i, p.clone()))
        .collect();
    keyed.sort_by(|a, b| match (a.0, b.0) {
        (Some(x), Some(y)) => x.cmp(&y).then(a.1.cmp(&b.1)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.1.cmp(&b.1),
    });
    keyed.into_iter().map(|(_, _, p)| p).collect()
}

/// Streams the events of `paths` (already in order) into `f`; returns the parser's stats.
pub fn stream_events(
    paths: &[PathBuf],
    opts: ReadOptions,
    mut f: impl FnMut(&Event),
) -> Result<Stats, LogError> {
    let mut p = Parser::new(opts.fallback_year, opts.fallback_offset);
    for path in paths {
        p.start_file();
        let r = open(path)?;
        for_each_line(r, |l| {
            p.push_bytes(l);
            while let Some(e) = p.poll() {
                f(&e);
            }
        })
        .map_err(|source| LogError::Io {
            path: path.display().to_string(),
            source,
        })?;
    }
    p.finish();
    while let Some(e) = p.poll() {
        f(&e);
    }
    Ok(p.stats)
}

/// Parses text already in memory (tests, fuzzing): every event and the stats.
pub fn parse_str(text: &str, opts: ReadOptions) -> (Vec<Event>, Stats) {
    let mut p = Parser::new(opts.fallback_year, opts.fallback_offset);
    let mut out = Vec::new();
    for l in text.split('\n') {
        p.push_line(l);
        while let Some(e) = p.poll() {
            out.push(e);
        }
    }
    p.finish();
    while let Some(e) = p.poll() {
        out.push(e);
    }
    (out, p.stats)
}

/// The first pass over `paths`: jobs, machines, restarts, and the parser's stats.
pub fn collect(paths: &[PathBuf], opts: ReadOptions) -> Result<(Collector, Stats), LogError> {
    let mut c = Collector::default();
    let stats = stream_events(paths, opts, |e| c.push(e))?;
    c.finish();
    let gitlab_lines = stats.ignored_lines
        + c.jobs.len() as u64
        + c.machines.len() as u64
        + c.restarts.len() as u64;
    if gitlab_lines == 0 {
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(LogError::NotALog(names.join(", ")));
    }
    Ok((c, stats))
}

/// Whether `text` (the start of a file) looks like a gitlab-runner log rather than a workload
/// CSV or a GitLab jobs export.
pub fn looks_like_runner_log(text: &str) -> bool {
    const MARKERS: [&str; 8] = [
        "Checking for jobs",
        "Runtime platform",
        "docker-machine",
        "Requesting machine removal",
        "Machine created",
        "gitlab-runner[",
        "Configuration loaded",
        "processing list",
    ];
    text.lines()
        .take(2000)
        .any(|l| MARKERS.iter().any(|m| l.contains(m)))
}
