//! One physical log line → one [`Record`]: strips the transport (journald short or
//! short-iso-precise output, syslog files, `docker logs -t`), undoes rsyslog's `#033`/`#012`
//! escapes and ANSI colours, detects the format (`json`, `text` or `runner`, spec
//! `upstream-logs.md` §1) and splits the message from its fields.
//!
//! Pure functions over strings: no I/O, no clock. Lines longer than [`MAX_LINE`] bytes are
//! cut there (the caller counts them).

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, TimeZone};

/// The longest line kept, in bytes; the rest of a longer line is dropped.
pub const MAX_LINE: usize = 64 * 1024;
/// The most fields kept per line.
pub const MAX_FIELDS: usize = 64;

/// Log level of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// debug (or an uncoloured runner-format line whose level the format does not say: info).
    Debug,
    /// info.
    Info,
    /// warning.
    Warning,
    /// error.
    Error,
    /// fatal.
    Fatal,
    /// panic.
    Panic,
}

/// The three formats gitlab-runner writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// The default `runner` format (padded message, unquoted sorted fields, ANSI colours).
    Runner,
    /// logrus `text` (`time="…" level=… msg="…" k=v`).
    Text,
    /// logrus `json`.
    Json,
}

/// What carried the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// No prefix: `journalctl -o cat`, a plain file, or `docker logs` without `-t`.
    Raw,
    /// `Mon DD HH:MM:SS host ident[pid]: ` (journalctl default short output or a syslog file).
    Short,
    /// `journalctl -o short-iso(-precise)`: `2026-09-08T09:05:07.981330+0000 host ident[pid]: `.
    Iso,
    /// `docker logs -t`: `2026-09-08T09:05:07.981330123Z `.
    Docker,
}

/// A timestamp from the transport prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefixTime {
    /// A full instant (ISO prefix or docker).
    Full(DateTime<FixedOffset>),
    /// Local wall time without year or zone: (month 1-12, day, seconds of day).
    Short {
        /// Month, 1-12.
        month: u32,
        /// Day of month.
        day: u32,
        /// Seconds since local midnight.
        secs: u32,
    },
}

/// One parsed line (before continuation lines are glued on).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The transport that carried it.
    pub transport: Transport,
    /// The transport's time, if any.
    pub prefix_time: Option<PrefixTime>,
    /// The syslog/journald identifier (`gitlab-runner`, `systemd`, …), if any.
    pub ident: Option<String>,
    /// The format of the body.
    pub format: Format,
    /// The level (runner format: from the prefix; info when there is none).
    pub level: Level,
    /// The message.
    pub msg: String,
    /// The `time` of json/text lines.
    pub time: Option<DateTime<FixedOffset>>,
    /// The other fields, in line order (json: `fields.time` style keys kept as written).
    pub fields: Vec<(String, String)>,
    /// A body-less line that only continues the previous record.
    pub continuation: Option<Continuation>,
}

/// How a physical line continues the previous record.
#[derive(Debug, Clone, PartialEq)]
pub enum Continuation {
    /// A TAB (or 8 spaces in journald output) line: more text of the previous message.
    Text(String),
    /// Only fields (the pre-18.6 second line of a failed job's message).
    Fields(Vec<(String, String)>),
}

impl Record {
    /// The value of a field.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Removes ANSI colour sequences (`ESC[…m`), bare `[0;m`-style residue and other control
/// characters except TAB.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == 0x1b {
            i += 1;
            if i < b.len() && b[i] == b'[' {
                i += 1;
                while i < b.len() && (b[i].is_ascii_digit() || b[i] == b';') {
                    i += 1;
                }
                if i < b.len() && b[i].is_ascii_alphabetic() {
                    i += 1;
                }
            }
            continue;
        }
        if c == b'[' {
            // Residue of a naive stripper: "[0;m", "[31;1m", "[0;33m".
            let mut j = i + 1;
            while j < b.len() && (b[j].is_ascii_digit() || b[j] == b';') {
                j += 1;
            }
            if j > i + 1 && j < b.len() && b[j] == b'm' && b[i + 1..j].contains(&b';') {
                i = j + 1;
                continue;
            }
        }
        let ch_len = utf8_len(c);
        let end = (i + ch_len).min(b.len());
        if let Some(ch) = s.get(i..end) {
            if !(c < 0x20 && c != b'\t') && c != 0x7f {
                out.push_str(ch);
            }
        }
        i = end.max(i + 1);
    }
    out
}

fn utf8_len(first: u8) -> usize {
    match first {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => 1,
    }
}

/// Undoes rsyslog's octal escapes of control bytes (`#033` → ESC, `#011` → TAB,
/// `#012` → newline).
pub fn unescape_syslog(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains('#') {
        return s.into();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('#') {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos + 1..];
        let code = tail
            .get(..3)
            .filter(|d| d.bytes().all(|c| (b'0'..=b'7').contains(&c)));
        match code.and_then(|d| u8::from_str_radix(d, 8).ok()) {
            Some(v) if v < 0x20 || v == 0x7f => {
                out.push(v as char);
                rest = &tail[3..];
            }
            _ => {
                out.push('#');
                rest = tail;
            }
        }
    }
    out.push_str(rest);
    out.into()
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Splits `host ident[pid]: rest` into (ident, rest).
fn split_host_ident(s: &str) -> Option<(String, &str)> {
    let (host, rest) = s.split_once(' ')?;
    if host.is_empty() || host.starts_with(char::is_whitespace) || host.contains('\t') {
        return None;
    }
    let colon = rest
        .find(": ")
        .or_else(|| rest.strip_suffix(':').map(|r| r.len()))?;
    let tag = &rest[..colon];
    if tag.is_empty() || tag.contains(' ') || tag.len() > 128 {
        return None;
    }
    // `ident[pid]`, as journald and syslog print it.
    let (ident, pid) = tag.split_once('[')?;
    let pid = pid.strip_suffix(']')?;
    if ident.is_empty() || pid.is_empty() || !pid.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let ident = ident.to_string();
    let body = rest.get(colon + 2..).unwrap_or("");
    Some((ident, body))
}

fn parse_short_prefix(s: &str) -> Option<(PrefixTime, &str)> {
    // "Mon DD HH:MM:SS " (day may be space-padded).
    let month = MONTHS.iter().position(|m| s.starts_with(m))? as u32 + 1;
    let rest = s.get(3..)?.strip_prefix(' ')?;
    let rest = rest.trim_start_matches(' ');
    let (day, rest) = rest.split_once(' ')?;
    let day: u32 = day.parse().ok().filter(|d| (1..=31).contains(d))?;
    let (clock, rest) = rest.split_once(' ')?;
    let secs = parse_clock(clock)?;
    Some((PrefixTime::Short { month, day, secs }, rest))
}

fn parse_clock(clock: &str) -> Option<u32> {
    let mut it = clock.split(':');
    let h: u32 = it.next()?.parse().ok().filter(|h| *h < 24)?;
    let m: u32 = it.next()?.parse().ok().filter(|m| *m < 60)?;
    let s: u32 = it.next()?.parse().ok().filter(|s| *s < 61)?;
    if it.next().is_some() {
        return None;
    }
    Some(h * 3600 + m * 60 + s)
}

/// Parses an RFC 3339 time, also with a `+0000` offset (journalctl's ISO output).
pub fn parse_rfc3339ish(s: &str) -> Option<DateTime<FixedOffset>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t);
    }
    DateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f%z").ok()
}

fn parse_iso_prefix(s: &str) -> Option<(DateTime<FixedOffset>, &str)> {
    let b = s.as_bytes();
    if b.len() < 20 || !b[0].is_ascii_digit() || b.get(4) != Some(&b'-') || b.get(10) != Some(&b'T')
    {
        return None;
    }
    let (stamp, rest) = s.split_once(' ')?;
    let t = parse_rfc3339ish(stamp)?;
    Some((t, rest))
}

/// Parses Go's `time.Time` rendering: `2006-01-02 15:04:05.999999999 -0700 MST`, optionally
/// followed by ` m=+<seconds>`. Returns the instant and the monotonic reading.
pub fn parse_go_time(s: &str) -> Option<(DateTime<FixedOffset>, Option<f64>)> {
    let mut parts = s.split(' ');
    let date = parts.next()?;
    let clock = parts.next()?;
    let offset = parts.next()?;
    let mut mono = None;
    for p in parts {
        if let Some(m) = p.strip_prefix("m=") {
            mono = m.parse::<f64>().ok().filter(|v| v.is_finite());
        }
    }
    let naive =
        NaiveDateTime::parse_from_str(&format!("{date} {clock}"), "%Y-%m-%d %H:%M:%S%.f").ok()?;
    let off = parse_offset(offset)?;
    let t = off.from_local_datetime(&naive).single()?;
    Some((t, mono))
}

fn parse_offset(s: &str) -> Option<FixedOffset> {
    let (sign, digits) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    if digits.len() != 4 || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let h: i32 = digits[..2].parse().ok()?;
    let m: i32 = digits[2..].parse().ok()?;
    FixedOffset::east_opt(sign * (h * 3600 + m * 60))
}

/// Parses a Go `time.Duration` string (`1m31.27s`, `310.05ms`, `40.24µs`, `2h0m0s`, `0s`) or a
/// plain number of seconds, into seconds.
pub fn parse_go_duration(s: &str) -> Option<f64> {
    let s = s.trim();
    if s.is_empty() || s.len() > 64 {
        return None;
    }
    if let Ok(v) = s.parse::<f64>() {
        return v.is_finite().then_some(v);
    }
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let mut total = 0.0;
    let mut any = false;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_end == 0 {
            return None;
        }
        let v: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let mult = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "µs" | "us" | "μs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += v * mult;
        any = true;
        rest = &rest[unit_end..];
    }
    any.then_some(if neg { -total } else { total })
}

fn is_key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'.'
}

/// Splits runner-format fields: ` key=value` pairs whose keys come in sorted order (values may
/// contain spaces; a ` k=` inside a value whose key would not sort after the previous key
/// stays part of the value).
pub fn split_runner_fields(s: &str) -> Vec<(String, String)> {
    let b = s.as_bytes();
    // Candidate field starts: position of the key (start of string or after a space).
    let mut starts: Vec<(usize, usize)> = Vec::new(); // (key start, '=' index)
    let mut i = 0;
    while i < b.len() {
        if i == 0 || b[i - 1] == b' ' {
            let mut j = i;
            while j < b.len() && is_key_char(b[j]) {
                j += 1;
            }
            if j > i && j < b.len() && b[j] == b'=' && b[i].is_ascii_alphabetic() {
                starts.push((i, j));
            }
        }
        i += 1;
    }
    // The fields are sorted, so the real field starts are the longest run of candidates with
    // strictly increasing keys (a ` m=` inside a `now=` value, or a ` key=` inside an error
    // text, breaks the order and is left in the value). The first field starts the text.
    starts.truncate(256);
    let chosen = longest_increasing(s, &starts);
    let mut out = Vec::with_capacity(chosen.len());
    for (n, &(k, eq)) in chosen.iter().enumerate() {
        let end = chosen.get(n + 1).map_or(s.len(), |&(nk, _)| nk);
        let value = s[eq + 1..end].trim_end_matches(' ');
        // drover quotes a value holding control characters (upstream never quotes here).
        let value = match value.starts_with('"') && value.contains('\\') {
            true => super::format::go_unquote(value).unwrap_or_else(|| value.to_string()),
            false => value.to_string(),
        };
        out.push((s[k..eq].to_string(), value));
        if out.len() >= MAX_FIELDS {
            break;
        }
    }
    out
}

/// The longest chain of candidates (by position) whose keys strictly increase, starting with
/// the candidate at position 0 if there is one.
fn longest_increasing(s: &str, starts: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let key = |i: usize| &s[starts[i].0..starts[i].1];
    let n = starts.len();
    let mut best = vec![0usize; n];
    let mut prev = vec![usize::MAX; n];
    for i in 0..n {
        if starts[i].0 == 0 {
            best[i] = 1;
            continue;
        }
        for j in 0..i {
            if best[j] > 0 && key(j) < key(i) && best[j] + 1 > best[i] {
                best[i] = best[j] + 1;
                prev[i] = j;
            }
        }
    }
    let Some(mut end) = (0..n)
        .filter(|&i| best[i] > 0)
        .max_by_key(|&i| (best[i], usize::MAX - i))
    else {
        return Vec::new();
    };
    let mut chain = vec![starts[end]];
    while prev[end] != usize::MAX {
        end = prev[end];
        chain.push(starts[end]);
    }
    chain.reverse();
    chain
}

/// Finds where the fields of a runner-format body begin: two spaces followed by `key=`.
fn runner_fields_start(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    while i + 1 < b.len() {
        if b[i] == b' ' && b[i + 1] == b' ' {
            let mut j = i;
            while j < b.len() && b[j] == b' ' {
                j += 1;
            }
            let mut k = j;
            while k < b.len() && is_key_char(b[k]) {
                k += 1;
            }
            if k > j && k < b.len() && b[k] == b'=' && b[j].is_ascii_alphabetic() {
                return Some(j);
            }
            i = j;
        } else {
            i += 1;
        }
    }
    None
}

fn runner_level(msg: &str) -> (Level, &str) {
    for (p, l) in [
        ("WARNING: ", Level::Warning),
        ("ERROR: ", Level::Error),
        ("FATAL: ", Level::Fatal),
        ("PANIC: ", Level::Panic),
    ] {
        if let Some(rest) = msg.strip_prefix(p) {
            return (l, rest);
        }
    }
    (Level::Info, msg)
}

fn level_of(s: &str) -> Level {
    match s {
        "debug" | "trace" => Level::Debug,
        "warning" | "warn" => Level::Warning,
        "error" => Level::Error,
        "fatal" => Level::Fatal,
        "panic" => Level::Panic,
        _ => Level::Info,
    }
}

fn json_value_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// What a JSON line holds: level, message, `time` and the other fields.
type JsonParts = (
    Level,
    String,
    Option<DateTime<FixedOffset>>,
    Vec<(String, String)>,
);

fn parse_json(body: &str) -> Option<JsonParts> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let obj = v.as_object()?;
    let msg = obj.get("msg").map(json_value_text).unwrap_or_default();
    let level = obj
        .get("level")
        .and_then(|l| l.as_str())
        .map_or(Level::Info, level_of);
    let time = obj
        .get("time")
        .and_then(|t| t.as_str())
        .and_then(parse_rfc3339ish);
    let fields = obj
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "msg" | "level" | "time"))
        .take(MAX_FIELDS)
        .map(|(k, v)| (k.clone(), json_value_text(v)))
        .collect();
    Some((level, msg, time, fields))
}

/// Parses logrus text `k=v k="quoted \"v\""` pairs.
fn parse_text_pairs(body: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut rest = body.trim_start();
    while !rest.is_empty() {
        let eq = rest.find('=')?;
        let key = &rest[..eq];
        if key.is_empty() || !key.bytes().all(is_key_char) {
            return None;
        }
        rest = &rest[eq + 1..];
        let value;
        if rest.starts_with('"') {
            // A Go-quoted value: up to the first unescaped quote.
            let b = rest.as_bytes();
            let mut i = 1;
            let mut end = None;
            while i < b.len() {
                match b[i] {
                    b'\\' => i += 2,
                    b'"' => {
                        end = Some(i + 1);
                        break;
                    }
                    _ => i += 1,
                }
            }
            let end = end?;
            value = super::format::go_unquote(&rest[..end])?;
            rest = &rest[end..];
        } else {
            let end = rest.find(' ').unwrap_or(rest.len());
            value = rest[..end].to_string();
            rest = &rest[end..];
        }
        if out.len() < MAX_FIELDS + 3 {
            out.push((key.to_string(), value));
        }
        rest = rest.trim_start();
    }
    Some(out)
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Strips the transport prefix of a line: (transport, time, ident, body).
pub fn split_transport(line: &str) -> (Transport, Option<PrefixTime>, Option<String>, &str) {
    if let Some((t, rest)) = parse_short_prefix(line) {
        if let Some((ident, body)) = split_host_ident(rest) {
            return (Transport::Short, Some(t), Some(ident), body);
        }
    }
    if let Some((t, rest)) = parse_iso_prefix(line) {
        // journalctl ISO output has host and ident; docker logs -t has neither.
        let looks_json_or_text = rest.starts_with('{') || rest.starts_with("time=\"");
        if !looks_json_or_text {
            if let Some((ident, body)) = split_host_ident(rest) {
                if ident
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
                {
                    return (Transport::Iso, Some(PrefixTime::Full(t)), Some(ident), body);
                }
            }
        }
        return (Transport::Docker, Some(PrefixTime::Full(t)), None, rest);
    }
    (Transport::Raw, None, None, line)
}

/// Parses one physical line (already split at newlines). `None` for a blank line.
pub fn parse_line(line: &str) -> Option<Record> {
    let line = truncate(line.trim_end_matches(['\r', '\n']), MAX_LINE);
    if line.trim().is_empty() {
        return None;
    }
    let (transport, prefix_time, ident, body) = split_transport(line);
    let body = unescape_syslog(body);
    let body = if body.contains('\x1b') || body.contains(";m") {
        strip_ansi(&body)
    } else {
        body.into_owned()
    };
    let mut rec = Record {
        transport,
        prefix_time,
        ident,
        format: Format::Runner,
        level: Level::Info,
        msg: String::new(),
        time: None,
        fields: Vec::new(),
        continuation: None,
    };
    // Continuations: a TAB (or 8 spaces) line, or a fields-only line.
    if body.starts_with('\t') || body.starts_with("        ") || body.starts_with("  ") {
        let trimmed = body.trim_start();
        if trimmed.is_empty() {
            return None;
        }
        let fields = split_runner_fields(trimmed);
        if !fields.is_empty() && trimmed.starts_with(fields[0].0.as_str()) {
            rec.continuation = Some(Continuation::Fields(fields));
        } else {
            rec.continuation = Some(Continuation::Text(trimmed.to_string()));
        }
        return Some(rec);
    }
    let trimmed = body.trim();
    if trimmed.starts_with('{') {
        if let Some((level, msg, time, fields)) = parse_json(trimmed) {
            rec.format = Format::Json;
            rec.level = level;
            rec.msg = msg;
            rec.time = time;
            rec.fields = fields;
            return Some(rec);
        }
    }
    if trimmed.starts_with("time=\"") || trimmed.starts_with("level=") {
        if let Some(pairs) = parse_text_pairs(trimmed) {
            rec.format = Format::Text;
            for (k, v) in pairs {
                match k.as_str() {
                    "time" => rec.time = parse_rfc3339ish(&v),
                    "level" => rec.level = level_of(&v),
                    "msg" => rec.msg = v,
                    _ if rec.fields.len() < MAX_FIELDS => rec.fields.push((k, v)),
                    _ => {}
                }
            }
            return Some(rec);
        }
    }
    // Runner format.
    let (level, text) = runner_level(trimmed);
    rec.level = level;
    match runner_fields_start(text) {
        Some(start) => {
            rec.msg = text[..start].trim_end().to_string();
            rec.fields = split_runner_fields(&text[start..]);
        }
        None => rec.msg = text.trim_end().to_string(),
    }
    Some(rec)
}

/// Builds a local date from a short prefix and a year, in a fixed offset.
pub fn short_to_instant(
    year: i32,
    month: u32,
    day: u32,
    secs: u32,
    offset: FixedOffset,
) -> Option<DateTime<FixedOffset>> {
    let date = NaiveDate::from_ymd_opt(year, month, day)?;
    let naive = date.and_hms_opt(secs / 3600, (secs / 60) % 60, (secs % 60).min(59))?;
    offset.from_local_datetime(&naive).single()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runner_fields_with_spaces_and_sorted_keys() {
        let f = split_runner_fields(
            "lifetime=1m0s name=runner-abc-1 now=2021-04-12 21:07:46.637317249 +0000 UTC m=+10.5 reason=too many idle machines used=3s usedCount=2",
        );
        let keys: Vec<&str> = f.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            ["lifetime", "name", "now", "reason", "used", "usedCount"]
        );
        assert_eq!(f[2].1, "2021-04-12 21:07:46.637317249 +0000 UTC m=+10.5");
        assert_eq!(f[3].1, "too many idle machines");
        let f = split_runner_fields(
            "created=2026-09-08 07:00:00 +0000 UTC m=+5.1 docker=tcp://10.1.2.3:2376 job=9001 name=x",
        );
        let keys: Vec<&str> = f.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["created", "docker", "job", "name"]);
    }

    #[test]
    fn go_durations_and_times() {
        assert_eq!(parse_go_duration("1m31.5s"), Some(91.5));
        assert_eq!(parse_go_duration("310ms"), Some(0.31));
        assert!((parse_go_duration("40µs").unwrap_or(0.0) - 40e-6).abs() < 1e-12);
        assert_eq!(parse_go_duration("0s"), Some(0.0));
        assert_eq!(parse_go_duration("2h0m0s"), Some(7200.0));
        assert_eq!(parse_go_duration("abc"), None);
        let (t, m) = parse_go_time("2021-04-12 21:07:46.637317249 +0000 UTC m=+10146199.428603329")
            .unwrap_or_else(|| panic!("parse"));
        assert_eq!(t.to_rfc3339(), "2021-04-12T21:07:46.637317249+00:00");
        assert!(m.is_some_and(|m| m > 10146199.0));
    }

    #[test]
    fn syslog_escapes_and_ansi() {
        let l = "Dec  6 02:43:17 host01 gitlab-runner[15131]: #033[0;33mWARNING: Checking for jobs... failed#033[0;m  #033[0;33mrunner#033[0;m=Bfkz1fyb #033[0;33mstatus#033[0;m=couldn't execute POST";
        let r = parse_line(l).unwrap_or_else(|| panic!("parse"));
        assert_eq!(r.transport, Transport::Short);
        assert_eq!(r.ident.as_deref(), Some("gitlab-runner"));
        assert_eq!(r.level, Level::Warning);
        assert_eq!(r.msg, "Checking for jobs... failed");
        assert_eq!(r.field("runner"), Some("Bfkz1fyb"));
        assert_eq!(r.field("status"), Some("couldn't execute POST"));
        assert_eq!(strip_ansi("a[0;mb"), "ab");
    }
}
