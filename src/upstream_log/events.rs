//! Records → events: glues continuation lines, drops duplicated lines, resolves each record's
//! instant (anchoring journald's year-less local times on the full-precision `now=`/`time`
//! fields), detects restarts, and turns the messages the comparison needs into [`Event`]s
//! (spec `upstream-logs.md` §5.5). Everything else is counted.
//!
//! [`Parser`] is a streaming state machine: feed it lines with [`Parser::push_line`], take
//! events with [`Parser::poll`], call [`Parser::finish`] at the end. Its memory is bounded:
//! one pending record, a ring of recent fingerprints, a bounded buffer of records waiting for a
//! date anchor, and a capped table of unknown messages.

use std::collections::{BTreeMap, VecDeque};

use chrono::{DateTime, Datelike, FixedOffset, TimeDelta, Utc};

use super::line::{
    parse_go_duration, parse_go_time, parse_line, short_to_instant, Continuation, Format, Level,
    PrefixTime, Record, Transport, MAX_LINE,
};

/// Records kept while waiting for a date anchor (journald short output before the first line
/// with a full date); past this the fallback year is used.
pub const MAX_UNANCHORED: usize = 20_000;
/// Distinct unknown messages remembered (for the report); more are only counted.
pub const MAX_UNKNOWN_KINDS: usize = 50;
/// Recent lines compared for duplicates (syslog on a systemd host writes each line twice).
const DEDUP_RING: usize = 16;
/// Longest kept value of a name, reason or similar field.
const MAX_VALUE: usize = 256;

/// What a parsed line meant for the comparison.
#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    /// `Runtime platform`, or `m=` readings that jumped back: a new process.
    ProcessStart {
        /// The process id, when logged.
        pid: Option<u64>,
        /// The runner version, when logged.
        version: Option<String>,
    },
    /// `Configuration loaded` (a reload: the config may have changed).
    ConfigLoaded,
    /// `Removed job from processing list` (after the runner's deferred Release).
    JobRemoved {
        /// Job id.
        job: u64,
    },
    /// `Checking for jobs... received`.
    Pickup {
        /// Job id.
        job: u64,
        /// Short token (`runner`).
        runner: String,
        /// `runner_name` (18.9+).
        runner_name: Option<String>,
    },
    /// `Added job to processing list`.
    Added {
        /// Job id.
        job: u64,
        /// `time_in_queue_seconds` (16.10+).
        time_in_queue_s: Option<f64>,
        /// `runner_name` (18.9+).
        runner_name: Option<String>,
    },
    /// `Using existing docker-machine` / `Created docker-machine`.
    Use {
        /// Job id.
        job: u64,
        /// Machine.
        name: String,
        /// `usedCount` after the increment.
        used_count: Option<i64>,
        /// True for `Using existing` (the machine Acquire reserved).
        existing: bool,
    },
    /// `Cleaned up docker-machine` (the machine is released).
    Cleanup {
        /// Job id.
        job: u64,
        /// Machine.
        name: Option<String>,
    },
    /// `Job succeeded` / `Job failed…`.
    JobEnd {
        /// Job id.
        job: u64,
        /// `success`, `failed`, or the failure reason.
        status: String,
        /// `duration_s` (or the older `duration`).
        duration_s: Option<f64>,
    },
    /// The first docker-machine line of a creation (`Running pre-create checks...` etc.).
    CreateStart {
        /// Machine.
        name: String,
    },
    /// `Machine created`.
    Created {
        /// Machine.
        name: String,
        /// Creation time in seconds.
        duration_s: Option<f64>,
    },
    /// `Machine creation failed`.
    CreateFailed {
        /// Machine.
        name: String,
    },
    /// `Requesting machine removal`.
    RemovalRequested {
        /// Machine.
        name: String,
        /// `reason`.
        reason: String,
        /// `usedCount`.
        used_count: Option<i64>,
        /// `used`: seconds since the last use.
        idle_s: Option<f64>,
    },
    /// `Removing machine` (one attempt of `docker-machine rm`).
    RemovalAttempt {
        /// Machine.
        name: String,
    },
    /// `Machine removed` / `Machine state cleared after give-up`.
    Removed {
        /// Machine.
        name: String,
        /// `retries`.
        retries: Option<u32>,
        /// True after `Giving up on machine removal`.
        gave_up: bool,
    },
}

/// One event with its instant and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// When (UTC).
    pub at: DateTime<Utc>,
    /// Whether `at` has sub-second precision.
    pub precise: bool,
    /// What.
    pub kind: EventKind,
    /// The 1-based line of its source file.
    pub line: u64,
}

/// What the parser saw besides events.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Stats {
    /// Physical lines read.
    pub lines: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Lines longer than the cap (cut).
    pub truncated_lines: u64,
    /// Lines that were not UTF-8 (decoded lossily).
    pub non_utf8_lines: u64,
    /// Continuation lines glued onto the previous record.
    pub continuation_lines: u64,
    /// Duplicated lines dropped.
    pub duplicate_lines: u64,
    /// Lines of other processes (systemd's own lines for the unit, …).
    pub foreign_lines: u64,
    /// Lines with a known message that the comparison does not need.
    pub ignored_lines: u64,
    /// Lines whose message is not one the parser knows.
    pub unknown_lines: u64,
    /// Known machine or job lines missing a field they need (name, job id).
    pub incomplete_lines: u64,
    /// Lines with no time at all (no prefix, no `time`, no `now`).
    pub untimed_lines: u64,
    /// `Suppressed N messages` reported by journald (lines lost to rate limiting).
    pub suppressed_by_journald: u64,
    /// The most frequent unknown messages (capped), with counts.
    pub unknown_messages: BTreeMap<String, u64>,
    /// Formats seen, with line counts.
    pub formats: BTreeMap<String, u64>,
    /// Transports seen, with line counts.
    pub transports: BTreeMap<String, u64>,
    /// Runner versions announced by `Runtime platform`.
    pub versions: Vec<String>,
    /// Notes on what the parser had to assume.
    pub notes: Vec<String>,
}

/// The streaming parser. See the module docs.
#[derive(Debug)]
pub struct Parser {
    line_no: u64,
    pending: Option<(Record, u64)>,
    ring: VecDeque<(u64, Option<i64>)>,
    /// Local offset and year learned from lines with both a short prefix and a full time.
    anchor: Option<(i32, FixedOffset, DateTime<Utc>)>,
    fallback_year: i32,
    fallback_offset: FixedOffset,
    unanchored: VecDeque<(Record, u64)>,
    /// Records with no time before the first timed one (a runner-format log starts with
    /// untimed lines): they take the first time seen.
    untimed_head: VecDeque<(Record, u64)>,
    out: VecDeque<Event>,
    last_at: Option<DateTime<Utc>>,
    /// Process start derived from `now - m`, to detect restarts without `Runtime platform`.
    process_start: Option<DateTime<Utc>>,
    /// Stats so far.
    pub stats: Stats,
}

impl Parser {
    /// A parser. Year-less journald times before the first anchor use `fallback_year` and
    /// `fallback_offset` (the host zone's offset, if the caller knows it).
    pub fn new(fallback_year: i32, fallback_offset: FixedOffset) -> Parser {
        Parser {
            line_no: 0,
            pending: None,
            ring: VecDeque::new(),
            anchor: None,
            fallback_year,
            fallback_offset,
            unanchored: VecDeque::new(),
            untimed_head: VecDeque::new(),
            out: VecDeque::new(),
            last_at: None,
            process_start: None,
            stats: Stats::default(),
        }
    }

    /// Starts a new file: line numbers restart at 1.
    pub fn start_file(&mut self) {
        self.flush_pending();
        self.line_no = 0;
    }

    /// Feeds one physical line (raw bytes, without the newline).
    pub fn push_bytes(&mut self, raw: &[u8]) {
        let raw = if raw.len() > MAX_LINE {
            self.stats.truncated_lines += 1;
            &raw[..MAX_LINE]
        } else {
            raw
        };
        match std::str::from_utf8(raw) {
            Ok(s) => self.push_line(s),
            Err(_) => {
                self.stats.non_utf8_lines += 1;
                let s = String::from_utf8_lossy(raw).into_owned();
                self.push_line(&s);
            }
        }
    }

    /// Feeds one physical line.
    pub fn push_line(&mut self, line: &str) {
        self.line_no += 1;
        self.stats.lines += 1;
        self.stats.bytes += line.len() as u64 + 1;
        // rsyslog writes a newline inside a message as #012: each part is a physical line.
        if line.contains("#012") {
            let un = super::line::unescape_syslog(line).into_owned();
            let mut parts = un.split('\n');
            if let Some(first) = parts.next() {
                self.push_record_line(first);
            }
            for p in parts {
                self.push_record_line(&format!("\t{p}"));
            }
            return;
        }
        self.push_record_line(line);
    }

    fn push_record_line(&mut self, line: &str) {
        let Some(rec) = parse_line(line) else {
            return;
        };
        *self
            .stats
            .transports
            .entry(format!("{:?}", rec.transport).to_lowercase())
            .or_insert(0) += 1;
        if let Some(ident) = &rec.ident {
            if !ident.contains("gitlab-runner") && !ident.contains("gitlab_runner") {
                self.foreign(&rec);
                return;
            }
        }
        if let Some(c) = rec.continuation.clone() {
            if let Some((p, _)) = self.pending.as_mut() {
                self.stats.continuation_lines += 1;
                match c {
                    Continuation::Text(t) => {
                        if let Some(last) = p.fields.last_mut() {
                            push_capped(&mut last.1, "\n");
                            push_capped(&mut last.1, &t);
                        } else {
                            push_capped(&mut p.msg, "\n");
                            push_capped(&mut p.msg, &t);
                        }
                    }
                    Continuation::Fields(f) => {
                        for kv in f {
                            if p.fields.len() < super::line::MAX_FIELDS {
                                p.fields.push(kv);
                            }
                        }
                    }
                }
                return;
            }
            self.stats.unknown_lines += 1;
            return;
        }
        *self
            .stats
            .formats
            .entry(format!("{:?}", rec.format).to_lowercase())
            .or_insert(0) += 1;
        self.flush_pending();
        self.pending = Some((rec, self.line_no));
    }

    fn foreign(&mut self, rec: &Record) {
        self.stats.foreign_lines += 1;
        if let Some(n) = rec.msg.strip_prefix("Suppressed ").and_then(|r| {
            r.split(' ')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .filter(|_| r.contains("gitlab-runner"))
        }) {
            self.stats.suppressed_by_journald += n;
        }
    }

    fn flush_pending(&mut self) {
        let Some((rec, line)) = self.pending.take() else {
            return;
        };
        if self.is_duplicate(&rec) {
            self.stats.duplicate_lines += 1;
            return;
        }
        self.learn_anchor(&rec);
        let short_unanchored = self.anchor.is_none()
            && matches!(rec.prefix_time, Some(PrefixTime::Short { .. }))
            && full_time(&rec).is_none();
        if short_unanchored && self.unanchored.len() < MAX_UNANCHORED {
            self.unanchored.push_back((rec, line));
            return;
        }
        if self.anchor.is_some() || !short_unanchored {
            self.drain_unanchored();
        }
        self.emit(rec, line);
    }

    fn drain_unanchored(&mut self) {
        while let Some((r, l)) = self.unanchored.pop_front() {
            self.emit(r, l);
        }
    }

    fn is_duplicate(&mut self, rec: &Record) -> bool {
        use std::hash::{Hash, Hasher};
        let mut h = rustc_hash::FxHasher::default();
        rec.msg.hash(&mut h);
        rec.level.hash(&mut h);
        for (k, v) in &rec.fields {
            k.hash(&mut h);
            v.hash(&mut h);
        }
        if let Some(t) = rec.time {
            t.hash(&mut h);
        }
        let fp = h.finish();
        let secs = match rec.prefix_time {
            Some(PrefixTime::Full(t)) => Some(t.timestamp()),
            Some(PrefixTime::Short { month, day, secs }) => {
                Some(i64::from(month) * 100_000_000 + i64::from(day) * 100_000 + i64::from(secs))
            }
            None => None,
        };
        let dup = self.ring.iter().any(|&(f, s)| {
            f == fp
                && match (s, secs) {
                    (Some(a), Some(b)) => (a - b).abs() <= 2,
                    _ => true,
                }
        });
        if !dup {
            if self.ring.len() >= DEDUP_RING {
                self.ring.pop_front();
            }
            self.ring.push_back((fp, secs));
        }
        dup
    }

    /// A line with a short (year-less, local) prefix and a full-precision time teaches the
    /// year and the local offset.
    fn learn_anchor(&mut self, rec: &Record) {
        let (Some(PrefixTime::Short { month, day, secs }), Some(full)) =
            (rec.prefix_time, full_time(rec))
        else {
            return;
        };
        let utc = full.with_timezone(&Utc);
        for year in [utc.year(), utc.year() - 1, utc.year() + 1] {
            let Some(local) = short_to_instant(
                year,
                month,
                day,
                secs,
                FixedOffset::east_opt(0).unwrap_or(self.fallback_offset),
            ) else {
                continue;
            };
            // local wall time − UTC instant = offset (rounded to 15 minutes).
            let diff = (local.naive_utc() - utc.naive_utc()).num_seconds();
            if diff.abs() > 15 * 3600 {
                continue;
            }
            let q = ((diff as f64) / 900.0).round() as i32 * 900;
            if let Some(off) = FixedOffset::east_opt(q) {
                if self.anchor.is_none() {
                    self.stats.notes.push(format!(
                        "journald times anchored on the full-precision fields: year {year}, \
                         local offset {off}"
                    ));
                }
                self.anchor = Some((year, off, utc));
                return;
            }
        }
    }

    fn resolve_time(&mut self, rec: &Record) -> Option<(DateTime<Utc>, bool)> {
        if let Some((t, precise)) = full_time_precise(rec) {
            return Some((t.with_timezone(&Utc), precise));
        }
        match rec.prefix_time? {
            PrefixTime::Full(t) => Some((t.with_timezone(&Utc), true)),
            PrefixTime::Short { month, day, secs } => {
                let (year, off, anchor_at) = match self.anchor {
                    Some(a) => a,
                    None => {
                        let note = format!(
                            "no line with a full date before year-less journald times: assumed \
                             year {} and offset {}",
                            self.fallback_year, self.fallback_offset
                        );
                        if !self.stats.notes.contains(&note) {
                            self.stats.notes.push(note);
                        }
                        (
                            self.fallback_year,
                            self.fallback_offset,
                            DateTime::<Utc>::MIN_UTC,
                        )
                    }
                };
                // Pick the year that puts the line nearest the anchor (a log across New Year).
                let mut best: Option<DateTime<Utc>> = None;
                for y in [year, year + 1, year - 1] {
                    if let Some(t) = short_to_instant(y, month, day, secs, off) {
                        let t = t.with_timezone(&Utc);
                        let better =
                            best.is_none_or(|b| (t - anchor_at).abs() < (b - anchor_at).abs());
                        if anchor_at == DateTime::<Utc>::MIN_UTC {
                            best = Some(t);
                            break;
                        }
                        if better {
                            best = Some(t);
                        }
                    }
                }
                best.map(|t| (t, false))
            }
        }
    }

    fn emit(&mut self, rec: Record, line: u64) {
        let resolved = self.resolve_time(&rec);
        if resolved.is_none() && self.last_at.is_none() && self.untimed_head.len() < MAX_UNANCHORED
        {
            self.untimed_head.push_back((rec, line));
            return;
        }
        if let Some((t, _)) = resolved {
            if self.last_at.is_none() {
                while let Some((r, l)) = self.untimed_head.pop_front() {
                    self.stats.untimed_lines += 1;
                    self.emit_at(r, l, t, false);
                }
            }
        }
        let (at, precise) = match resolved {
            Some(r) => r,
            None => {
                self.stats.untimed_lines += 1;
                (self.last_at.unwrap_or(DateTime::<Utc>::UNIX_EPOCH), false)
            }
        };
        self.emit_at(rec, line, at, precise);
    }

    fn emit_at(&mut self, rec: Record, line: u64, at: DateTime<Utc>, precise: bool) {
        // Stream order is reliable; a whole-second time may read slightly before the previous
        // precise one: never let time go backwards within the stream.
        let at = match self.last_at {
            Some(prev) if at < prev && prev - at < TimeDelta::seconds(2) => prev,
            _ => at,
        };
        self.last_at = Some(at);
        self.detect_monotonic_restart(&rec, at, line);
        let Some(kind) = self.classify(&rec) else {
            return;
        };
        self.out.push_back(Event {
            at,
            precise,
            kind,
            line,
        });
    }

    fn detect_monotonic_restart(&mut self, rec: &Record, at: DateTime<Utc>, line: u64) {
        let Some(mono) = ["now", "created"]
            .iter()
            .find_map(|k| rec.field(k).and_then(parse_go_time).and_then(|(_, m)| m))
        else {
            return;
        };
        let Some(ms) = TimeDelta::try_milliseconds((mono * 1000.0) as i64) else {
            return;
        };
        let start = at - ms;
        match self.process_start {
            Some(prev) if (start - prev).num_seconds().abs() > 5 && start > prev => {
                self.process_start = Some(start);
                self.out.push_back(Event {
                    at,
                    precise: false,
                    kind: EventKind::ProcessStart {
                        pid: None,
                        version: None,
                    },
                    line,
                });
            }
            Some(_) => {}
            None => self.process_start = Some(start),
        }
    }

    fn classify(&mut self, rec: &Record) -> Option<EventKind> {
        let msg = rec.msg.as_str();
        let name = || rec.field("name").map(cap);
        let job = || rec.field("job").and_then(|j| j.trim().parse::<u64>().ok());
        let kind = match msg {
            "Runtime platform" => {
                self.process_start = None;
                let version = rec.field("version").map(cap);
                if let Some(v) = &version {
                    if !self.stats.versions.contains(v) && self.stats.versions.len() < 32 {
                        self.stats.versions.push(v.clone());
                    }
                }
                Some(EventKind::ProcessStart {
                    pid: rec.field("pid").and_then(|p| p.parse().ok()),
                    version,
                })
            }
            "Configuration loaded" => Some(EventKind::ConfigLoaded),
            "Removed job from processing list" => job().map(|job| EventKind::JobRemoved { job }),
            "Checking for jobs... received" => job().map(|job| EventKind::Pickup {
                job,
                runner: rec.field("runner").map(cap).unwrap_or_default(),
                runner_name: rec.field("runner_name").map(cap),
            }),
            "Added job to processing list" => job().map(|job| EventKind::Added {
                job,
                time_in_queue_s: rec
                    .field("time_in_queue_seconds")
                    .and_then(|v| v.parse::<f64>().ok())
                    .filter(|v| v.is_finite() && *v >= 0.0),
                runner_name: rec.field("runner_name").map(cap),
            }),
            "Using existing docker-machine" | "Created docker-machine" => match (job(), name()) {
                (Some(job), Some(name)) => Some(EventKind::Use {
                    job,
                    name,
                    used_count: rec.field("usedCount").and_then(|v| v.parse().ok()),
                    existing: msg.starts_with("Using"),
                }),
                _ => return self.incomplete(),
            },
            "Cleaned up docker-machine" => match job() {
                Some(job) => Some(EventKind::Cleanup { job, name: name() }),
                None => return self.incomplete(),
            },
            "Machine created" => match name() {
                Some(name) => Some(EventKind::Created {
                    name,
                    duration_s: ["duration", "time", "fields.time"]
                        .iter()
                        .find_map(|k| rec.field(k).and_then(duration_secs)),
                }),
                None => return self.incomplete(),
            },
            "Machine creation failed" => match name() {
                Some(name) => Some(EventKind::CreateFailed { name }),
                None => return self.incomplete(),
            },
            "Requesting machine removal" => match name() {
                Some(name) => Some(EventKind::RemovalRequested {
                    name,
                    reason: rec.field("reason").map(cap).unwrap_or_default(),
                    used_count: rec.field("usedCount").and_then(|v| v.parse().ok()),
                    idle_s: rec.field("used").and_then(duration_secs),
                }),
                None => return self.incomplete(),
            },
            "Removing machine" => match name() {
                Some(name) => Some(EventKind::RemovalAttempt { name }),
                None => return self.incomplete(),
            },
            "Machine removed" | "Machine state cleared after give-up" => match name() {
                Some(name) => Some(EventKind::Removed {
                    name,
                    retries: rec.field("retries").and_then(|v| v.parse().ok()),
                    gave_up: msg.starts_with("Machine state cleared"),
                }),
                None => return self.incomplete(),
            },
            _ if msg == "Job succeeded" || msg.starts_with("Job failed") => match job() {
                Some(job) => Some(EventKind::JobEnd {
                    job,
                    status: if msg == "Job succeeded" {
                        "success".to_string()
                    } else {
                        rec.field("failure_reason")
                            .map(cap)
                            .filter(|s| !s.is_empty())
                            .unwrap_or_else(|| "failed".to_string())
                    },
                    duration_s: ["duration_s", "duration"]
                        .iter()
                        .find_map(|k| rec.field(k).and_then(duration_secs)),
                }),
                None => return self.incomplete(),
            },
            _ if rec.field("operation") == Some("create") => {
                // docker-machine create output: the first one marks the creation.
                name().map(|name| EventKind::CreateStart { name })
            }
            _ => {
                if is_known(msg, rec) {
                    self.stats.ignored_lines += 1;
                } else {
                    self.stats.unknown_lines += 1;
                    let key: String = msg.chars().take(80).collect();
                    let n = self.stats.unknown_messages.len();
                    if let Some(c) = self.stats.unknown_messages.get_mut(&key) {
                        *c += 1;
                    } else if n < MAX_UNKNOWN_KINDS {
                        self.stats.unknown_messages.insert(key, 1);
                    }
                }
                None
            }
        };
        kind
    }

    fn incomplete(&mut self) -> Option<EventKind> {
        self.stats.incomplete_lines += 1;
        None
    }

    /// The next event, if any.
    pub fn poll(&mut self) -> Option<Event> {
        self.out.pop_front()
    }

    /// Ends the input: flushes the pending record and any records still waiting for an
    /// anchor.
    pub fn finish(&mut self) {
        self.flush_pending();
        self.drain_unanchored();
        let at = self.last_at.unwrap_or(DateTime::<Utc>::UNIX_EPOCH);
        while let Some((r, l)) = self.untimed_head.pop_front() {
            self.stats.untimed_lines += 1;
            self.emit_at(r, l, at, false);
        }
    }
}

fn push_capped(s: &mut String, add: &str) {
    if s.len() + add.len() <= MAX_LINE {
        s.push_str(add);
    }
}

fn cap(s: &str) -> String {
    let mut end = s.len().min(MAX_VALUE);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// A duration field: Go duration text (runner/text format) or integer nanoseconds (json).
fn duration_secs(v: &str) -> Option<f64> {
    let v = v.trim();
    if !v.is_empty() && v.bytes().all(|c| c.is_ascii_digit()) && v.len() >= 7 {
        // JSON encodes time.Duration as integer nanoseconds.
        return v.parse::<f64>().ok().map(|ns| ns / 1e9);
    }
    parse_go_duration(v).filter(|s| s.is_finite() && *s >= 0.0)
}

/// The record's full-precision time: json/text `time`, else a `now=` Go time.
fn full_time(rec: &Record) -> Option<DateTime<FixedOffset>> {
    full_time_precise(rec).map(|(t, _)| t)
}

fn full_time_precise(rec: &Record) -> Option<(DateTime<FixedOffset>, bool)> {
    let now = rec
        .field("now")
        .and_then(parse_go_time)
        .or_else(|| {
            rec.field("now")
                .and_then(super::line::parse_rfc3339ish)
                .map(|t| (t, None))
        })
        .map(|(t, _)| t);
    let from_time = rec.time.map(|t| (t, t.timestamp_subsec_nanos() != 0));
    match (from_time, now) {
        (Some((t, true)), _) => Some((t, true)),
        (_, Some(n)) => Some((n, true)),
        (Some((t, false)), None) => {
            // A whole-second `time` (before 18.6): precise only if the transport is not better.
            match rec.prefix_time {
                Some(PrefixTime::Full(p)) if p.timestamp() == t.timestamp() => Some((p, true)),
                _ => Some((t, false)),
            }
        }
        (None, None) => None,
    }
}

/// Messages only drover writes (its own log is read like upstream's, see
/// `crate::cli::logging`): known, not needed by the comparison.
const DROVER_MESSAGES: [&str; 45] = [
    "Configuration warning",
    "cannot renew the GitLab connection",
    "Removed work a previous drover left",
    "the machine cannot serve a job",
    "cannot end the work a previous drover left",
    "metrics server on",
    "Machine pool warning",
    "No machine ledger yet",
    "Machine ledger is unusable",
    "Machines restored from the ledger",
    "Resuming the retries of machine removals",
    "Cannot list machines to reconcile",
    "Starting a machine pool",
    "New docker+machine runner joined",
    "Configuration change:",
    "Failed to load config",
    "autoscaling settings not applied",
    "provider plugin",
    "new docker+machine runner not served",
    "Reconciled machine",
    "Removal of an orphaned machine failed again",
    "Error while removing machine",
    "Machine ready",
    "Machine used",
    "Shutdown drain report",
    "shutdown_timeout expired",
    "max-builds reached",
    "wait-timeout reached",
    "--user is accepted",
    "Failed to request job",
    "no machine pool for this runner",
    "cannot release machine",
    "cannot apply the new autoscaling policy",
    "cannot list machines",
    "cannot get the machine's credentials",
    "cannot reconcile machines",
    "GitLab asked to cancel the job",
    "GitLab aborted the job",
    "GitLab holds a different log length",
    "the running ack",
    "the trace loop stopped",
    "GitLab kept the final update pending",
    "GitLab rejected the log's checksum",
    "the final job update failed",
    "the system ID file",
];

/// Messages gitlab-runner writes that the comparison does not need (so they are not counted
/// as unknown).
fn is_known(msg: &str, rec: &Record) -> bool {
    const PREFIXES: [&str; 40] = [
        "Checking for jobs",
        "Updating job",
        "Submitting job to coordinator",
        "Appending trace to coordinator",
        "Removed job from processing list",
        "Starting docker-machine build",
        "Finished docker-machine build",
        "Preparing docker-machine wrapped executor failed",
        "Preparation failed",
        "Will be retried",
        "Stopping machine",
        "Error while stopping machine",
        "Skipping machine removal",
        "Giving up on machine removal",
        "ForceRemove on give-up failed",
        "Could not inspect docker-machine state",
        "Starting multi-runner",
        "Running in system-mode",
        "Running in user-mode",
        "Usage logger",
        "Metrics server listening",
        "listen_address not defined",
        "[session_server]",
        "Initializing executor providers",
        "Initializing docker+machine executor provider",
        "Created missing unique system ID",
        "[runWait]",
        "Graceful shutdown",
        "Starting forceful shutdown",
        "Starting graceful shutdown",
        "All workers stopped",
        "Shutting down",
        "All executor providers shut down",
        "Can exit now",
        "No shutdown drain config",
        "Shutdown drain is disabled",
        "Failed to process runner",
        "Docker Machine Details",
        "IdleCount is set to 0",
        "Storing usage log information",
    ];
    const MORE: [&str; 18] = [
        "Checking runtime mode",
        "You need to manually start builds processing",
        "The user-mode requires you to manually start builds processing",
        "Use sudo for system-mode",
        "$ gitlab-runner run",
        "$ sudo gitlab-runner",
        "Starting machine pool drain",
        "shutdown_timeout may be too short",
        "No machines to drain",
        "Draining machine pool",
        "Waiting for in-flight operation",
        "Machine drained",
        "Failed to drain machine",
        "In-flight removal gave up",
        "Drain operation cancelled",
        "Machine drain cancelled",
        "Machine pool drain completed",
        "Executing ",
    ];
    msg.is_empty()
        || rec.field("operation").is_some()
        // drover relays its provider plugin's stderr lines with the plugin's name.
        || rec.field("plugin").is_some()
        || DROVER_MESSAGES.iter().any(|p| msg.starts_with(p))
        || PREFIXES
            .iter()
            .chain(MORE.iter())
            .any(|p| msg.starts_with(p))
        || msg.contains("WARNING: This action will delete")
        || (msg.starts_with("Runner ")
            && (msg.contains(" is unhealthy and will be disabled for ")
                || msg.contains(" is not healthy, but check for a new job will be forced")))
        || (rec.format == Format::Runner && rec.level == Level::Debug)
        || rec.transport == Transport::Raw
            && msg.starts_with("Problem while reading command output")
}
