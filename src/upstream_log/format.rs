//! One log record → one line, in gitlab-runner's three formats (spec `upstream-logs.md` §1.2–
//! §1.5): `runner` (its own formatter: level prefix, message padded to 50 columns, sorted
//! unquoted fields), `text` (logrus' text formatter: `time="…" level=… msg=…` then the sorted
//! fields, values quoted Go-style when they hold anything outside `[A-Za-z0-9-._/@^+]`; on a
//! terminal its coloured `INFO[0012] message` form) and `json` (logrus' JSON formatter: one
//! object, keys sorted, HTML characters escaped).
//!
//! Both writers of gitlab-runner-shaped logs use this: drover's own log (`crate::cli::logging`)
//! and the simulator's replay of a run as upstream's log ([`super::emit`]).
//!
//! Pure: the caller passes the time and whether colours are wanted. Values render as Go
//! renders the type upstream logs under the same key ([`Value`]).
//!
//! Where drover deliberately differs (README "What differs"): no line can carry a raw control
//! character. The runner format writes a value holding one in Go's `%q` quotes, and the
//! message with the control characters escaped. The text format's terminal form escapes them
//! in the message too. Upstream writes both raw, so a newline in an error message sent by
//! GitLab forges a log line there.

use std::fmt::Write as _;

use chrono::{DateTime, FixedOffset};

pub use super::line::{Format, Level};

/// The value to log under a `time.Time` key (drover's log renders such keys as upstream
/// renders the Go type, see `crate::cli::logging`): the instant in nanoseconds since the epoch.
pub fn time_field(t: chrono::DateTime<chrono::Utc>) -> i64 {
    t.timestamp_nanos_opt().unwrap_or(i64::MAX)
}

/// The value to log under a `time.Duration` key: nanoseconds.
pub fn duration_field(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// ANSI reset, as gitlab-runner writes it.
pub const RESET: &str = "\x1b[0;m";

/// A field value, typed as upstream's Go value under the same key.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A string (or an `error`, a `fmt.Stringer`).
    Str(String),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    Uint(u64),
    /// A float64.
    Float(f64),
    /// A bool.
    Bool(bool),
    /// A `time.Duration` in nanoseconds: Go text in runner/text lines, an integer in JSON.
    Duration(i64),
    /// A `time.Time` with its monotonic reading (seconds since the process started), which
    /// runner/text lines show as ` m=+…`; JSON drops it.
    Time(DateTime<FixedOffset>, Option<f64>),
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str(s.to_string())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Str(s)
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}

impl From<std::time::Duration> for Value {
    fn from(d: std::time::Duration) -> Value {
        Value::Duration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }
}

/// How lines are written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Style {
    /// The format.
    pub format: Format,
    /// Colours (and, for `text`, logrus' terminal form): only when the output is a terminal.
    pub terminal: bool,
    /// When the process started: the `[0012]` seconds of the text format on a terminal.
    pub started: DateTime<FixedOffset>,
}

/// One record to write.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// When (the text/json `time`).
    pub time: DateTime<FixedOffset>,
    /// Level.
    pub level: Level,
    /// Message.
    pub msg: &'a str,
    /// Fields, in any order (they are written sorted).
    pub fields: &'a [(&'a str, Value)],
}

/// logrus' lower-case level name (`warning`, not `warn`).
pub fn level_name(l: Level) -> &'static str {
    match l {
        Level::Debug => "debug",
        Level::Info => "info",
        Level::Warning => "warning",
        Level::Error => "error",
        Level::Fatal => "fatal",
        Level::Panic => "panic",
    }
}

/// Appends `r` as one line (with its `\n`) to `out`.
pub fn write_line(out: &mut String, style: &Style, r: &Record<'_>) {
    match style.format {
        Format::Runner => runner(out, style.terminal, r),
        Format::Text if style.terminal => text_terminal(out, style.started, r),
        Format::Text => text(out, r),
        Format::Json => json(out, r),
    }
    out.push('\n');
}

/// The line as a new string.
pub fn line(style: &Style, r: &Record<'_>) -> String {
    let mut s = String::with_capacity(128);
    write_line(&mut s, style, r);
    s
}

/// Field keys sorted bytewise (Go `sort.Strings`), keeping the first of duplicated keys.
fn sorted<'a>(fields: &'a [(&'a str, Value)]) -> Vec<(&'a str, &'a Value)> {
    let mut v: Vec<(&str, &Value)> = fields.iter().map(|(k, v)| (*k, v)).collect();
    v.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    v.dedup_by(|b, a| a.0 == b.0);
    v
}

/// logrus renames data fields that clash with its own keys (`prefixFieldClashes`).
fn clash(k: &str) -> std::borrow::Cow<'_, str> {
    match k {
        "time" | "msg" | "level" => format!("fields.{k}").into(),
        _ => k.into(),
    }
}

fn runner(out: &mut String, colours: bool, r: &Record<'_>) {
    let (colour, prefix) = match r.level {
        Level::Debug => ("\x1b[37;1m", ""),
        Level::Info => ("", ""),
        Level::Warning => ("\x1b[0;33m", "WARNING: "),
        Level::Error => ("\x1b[31;1m", "ERROR: "),
        Level::Fatal => ("\x1b[31;1m", "FATAL: "),
        Level::Panic => ("\x1b[31;1m", "PANIC: "),
    };
    let (colour, reset) = if colours { (colour, RESET) } else { ("", "") };
    out.push_str(colour);
    out.push_str(prefix);
    let msg = escape_controls(r.msg);
    out.push_str(&msg);
    // Go's %-*s pads to a width in runes.
    let width = 50usize.saturating_sub(prefix.len());
    for _ in msg.chars().count()..width {
        out.push(' ');
    }
    out.push_str(reset);
    out.push(' ');
    for (k, v) in sorted(r.fields) {
        let _ = write!(out, " {colour}{k}{reset}=");
        let text = go_text(v);
        if text.chars().any(needs_escape) {
            quote_into(out, &text);
        } else {
            out.push_str(&text);
        }
    }
}

fn text(out: &mut String, r: &Record<'_>) {
    out.push_str("time=");
    push_text_value(out, &rfc3339_nano(r.time));
    out.push_str(" level=");
    out.push_str(level_name(r.level));
    if !r.msg.is_empty() {
        out.push_str(" msg=");
        push_text_value(out, r.msg);
    }
    for (k, v) in renamed(r.fields) {
        let _ = write!(out, " {k}=");
        push_text_value(out, &go_text(v));
    }
}

/// The fields with logrus' clash renames, sorted.
fn renamed<'a>(fields: &'a [(&'a str, Value)]) -> Vec<(std::borrow::Cow<'a, str>, &'a Value)> {
    let mut out: Vec<(std::borrow::Cow<'_, str>, &Value)> = sorted(fields)
        .into_iter()
        .map(|(k, v)| (clash(k), v))
        .collect();
    out.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out
}

/// logrus' text formatter on a terminal: `INFO[0012] message` (level cut to 4 letters,
/// seconds since start, message padded to 44), then coloured keys.
fn text_terminal(out: &mut String, started: DateTime<FixedOffset>, r: &Record<'_>) {
    let (colour, name) = match r.level {
        Level::Debug => (37, "DEBU"),
        Level::Info => (36, "INFO"),
        Level::Warning => (33, "WARN"),
        Level::Error => (31, "ERRO"),
        Level::Fatal => (31, "FATA"),
        Level::Panic => (31, "PANI"),
    };
    let secs = (r.time - started).num_seconds().max(0);
    let msg = escape_controls(r.msg.strip_suffix('\n').unwrap_or(r.msg));
    let _ = write!(out, "\x1b[{colour}m{name}\x1b[0m[{secs:04}] {msg:<44} ");
    for (k, v) in renamed(r.fields) {
        let _ = write!(out, " \x1b[{colour}m{k}\x1b[0m=");
        push_text_value(out, &go_text(v));
    }
}

fn json(out: &mut String, r: &Record<'_>) {
    // Keys sorted (Go's encoder sorts map keys), clashing ones renamed as logrus does.
    let mut entries: Vec<(std::borrow::Cow<'_, str>, JsonVal<'_>)> = renamed(r.fields)
        .into_iter()
        .map(|(k, v)| (k, JsonVal::Field(v)))
        .collect();
    let time = rfc3339_nano(r.time);
    entries.push(("level".into(), JsonVal::Text(level_name(r.level))));
    entries.push(("msg".into(), JsonVal::Text(r.msg)));
    entries.push(("time".into(), JsonVal::Owned(time)));
    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.push('{');
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_string(out, k);
        out.push(':');
        match v {
            JsonVal::Text(s) => json_string(out, s),
            JsonVal::Owned(s) => json_string(out, s),
            JsonVal::Field(v) => json_value(out, v),
        }
    }
    out.push('}');
}

enum JsonVal<'a> {
    Text(&'a str),
    Owned(String),
    Field(&'a Value),
}

fn json_value(out: &mut String, v: &Value) {
    match v {
        Value::Str(s) => json_string(out, s),
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Uint(u) => {
            let _ = write!(out, "{u}");
        }
        Value::Float(f) => match go_json_float(*f) {
            Some(t) => out.push_str(&t),
            // Go's encoder refuses NaN and ±Inf; the value is kept as text instead.
            None => json_string(out, &go_float(*f)),
        },
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Duration(ns) => {
            let _ = write!(out, "{ns}");
        }
        Value::Time(t, _) => json_string(out, &rfc3339_nano(*t)),
    }
}

/// A JSON string as Go's encoder writes it with HTML escaping on: `<`, `>`, `&`, U+2028 and
/// U+2029 as `\u00xx`, control characters as `\n`, `\r`, `\t` or `\u00xx`.
pub fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// logrus' text value: as is when every byte is in `[A-Za-z0-9-._/@^+]` (or it is empty),
/// else Go-quoted.
fn push_text_value(out: &mut String, s: &str) {
    if text_needs_quoting(s) {
        quote_into(out, s);
    } else {
        out.push_str(s);
    }
}

/// Whether logrus' text formatter quotes `s`.
pub fn text_needs_quoting(s: &str) -> bool {
    !s.bytes().all(|c| {
        c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'/' | b'@' | b'^' | b'+')
    })
}

/// Characters Go's `strconv.Quote` escapes: controls, and the non-printing characters
/// (spaces other than U+0020, format and bidirectional controls). Unassigned and private-use
/// code points, which Go also escapes, are kept (deliberate: no Unicode tables here).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || (c != ' ' && c.is_whitespace())
        || matches!(c,
            '\u{00ad}'
            | '\u{061c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}')
}

fn escape_char(out: &mut String, c: char) {
    match c {
        '\x07' => out.push_str("\\a"),
        '\x08' => out.push_str("\\b"),
        '\x0c' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\x0b' => out.push_str("\\v"),
        c if (c as u32) < 0x80 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if (c as u32) < 0x10000 => {
            let _ = write!(out, "\\u{:04x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\U{:08x}", c as u32);
        }
    }
}

/// Go's `%q` of a string (`strconv.Quote`).
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    quote_into(&mut out, s);
    out
}

fn quote_into(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if needs_escape(c) => escape_char(out, c),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `s` with every control or non-printing character escaped Go-style (no quotes): the
/// message of a runner-format line, which upstream writes raw.
pub fn escape_controls(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if needs_escape(c) {
            escape_char(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// Reverses [`go_quote`] (and logrus' text quoting): `None` when `s` is not one quoted string.
pub fn go_unquote(s: &str) -> Option<String> {
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return None,
            '\\' => {
                let e = chars.next()?;
                match e {
                    'a' => out.push('\x07'),
                    'b' => out.push('\x08'),
                    'f' => out.push('\x0c'),
                    'n' => out.push('\n'),
                    'r' => out.push('\r'),
                    't' => out.push('\t'),
                    'v' => out.push('\x0b'),
                    '\\' | '"' | '\'' => out.push(e),
                    'x' | 'u' | 'U' => {
                        let n = match e {
                            'x' => 2,
                            'u' => 4,
                            _ => 8,
                        };
                        let hex: String = chars.by_ref().take(n).collect();
                        if hex.len() != n {
                            return None;
                        }
                        let v = u32::from_str_radix(&hex, 16).ok()?;
                        out.push(char::from_u32(v).unwrap_or('\u{fffd}'));
                    }
                    // Go never writes another escape; read leniently.
                    other => out.push(other),
                }
            }
            c => out.push(c),
        }
    }
    Some(out)
}

/// Go's `%v` of a value, as runner and text lines print it.
pub fn go_text(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Uint(u) => u.to_string(),
        Value::Float(f) => go_float(*f),
        Value::Bool(b) => b.to_string(),
        Value::Duration(ns) => go_duration(*ns),
        Value::Time(t, mono) => go_time(*t, *mono),
    }
}

/// The shortest decimal digits of `f` and its decimal exponent (`d.ddd × 10^exp`).
fn shortest(f: f64) -> (bool, String, i32) {
    let e = format!("{:e}", f.abs());
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    (
        f.is_sign_negative() && f != 0.0,
        digits,
        exp.parse().unwrap_or(0),
    )
}

fn go_exp(out: &mut String, digits: &str, exp: i32) {
    out.push_str(&digits[..1]);
    if digits.len() > 1 {
        out.push('.');
        out.push_str(&digits[1..]);
    }
    let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
}

fn go_fixed(out: &mut String, digits: &str, exp: i32) {
    if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(digits);
        return;
    }
    let int_len = exp as usize + 1;
    if digits.len() <= int_len {
        out.push_str(digits);
        for _ in digits.len()..int_len {
            out.push('0');
        }
    } else {
        out.push_str(&digits[..int_len]);
        out.push('.');
        out.push_str(&digits[int_len..]);
    }
}

/// Go's `%v` of a float64: shortest `%g` (`strconv.FormatFloat(f, 'g', -1, 64)`), in
/// exponent form below 1e-4 and from 1e6 on.
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let (neg, digits, exp) = shortest(f);
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    // Shortest %g decides with precision 6.
    if !(-4..6).contains(&exp) {
        go_exp(&mut out, &digits, exp);
    } else {
        go_fixed(&mut out, &digits, exp);
    }
    out
}

/// A float64 as Go's JSON encoder writes it (`None` for NaN and ±Inf, which it refuses).
pub fn go_json_float(f: f64) -> Option<String> {
    if !f.is_finite() {
        return None;
    }
    if f == 0.0 {
        return Some(if f.is_sign_negative() { "-0" } else { "0" }.into());
    }
    let (neg, digits, exp) = shortest(f);
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    let abs = f.abs();
    if !(1e-6..1e21).contains(&abs) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        // Go trims a leading zero of a negative two-digit exponent: e-07 → e-7.
        let _ = write!(out, "e{}{}", if exp < 0 { '-' } else { '+' }, exp.abs());
    } else {
        go_fixed(&mut out, &digits, exp);
    }
    Some(out)
}

/// Go's `time.RFC3339Nano`: fraction with trailing zeros trimmed (none when zero), `Z` for
/// UTC.
pub fn rfc3339_nano(t: DateTime<FixedOffset>) -> String {
    let mut out = t.format("%Y-%m-%dT%H:%M:%S").to_string();
    let frac = t.timestamp_subsec_nanos();
    if frac != 0 {
        let f = format!("{frac:09}");
        out.push('.');
        out.push_str(f.trim_end_matches('0'));
    }
    let off = t.offset().local_minus_utc();
    if off == 0 {
        out.push('Z');
    } else {
        let sign = if off < 0 { '-' } else { '+' };
        let _ = write!(
            out,
            "{sign}{:02}:{:02}",
            off.abs() / 3600,
            (off.abs() / 60) % 60
        );
    }
    out
}

/// Go's `time.Duration.String()` of a number of nanoseconds.
pub fn go_duration(ns: i64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let neg = ns < 0;
    let u = ns.unsigned_abs();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    let frac = |out: &mut String, whole: u64, part: u64, digits: usize| {
        let _ = write!(out, "{whole}");
        if part != 0 {
            let f = format!("{part:0digits$}");
            out.push('.');
            out.push_str(f.trim_end_matches('0'));
        }
    };
    if u < 1_000 {
        let _ = write!(out, "{u}ns");
    } else if u < 1_000_000 {
        frac(&mut out, u / 1_000, u % 1_000, 3);
        out.push_str("µs");
    } else if u < 1_000_000_000 {
        frac(&mut out, u / 1_000_000, u % 1_000_000, 6);
        out.push_str("ms");
    } else {
        let h = u / 3_600_000_000_000;
        let m = (u / 60_000_000_000) % 60;
        let s = (u / 1_000_000_000) % 60;
        if h > 0 {
            let _ = write!(out, "{h}h");
        }
        if h > 0 || m > 0 {
            let _ = write!(out, "{m}m");
        }
        frac(&mut out, s, u % 1_000_000_000, 9);
        out.push('s');
    }
    out
}

/// Go's `time.Time.String()`: `2006-01-02 15:04:05.999999999 -0700 MST` (fraction trimmed),
/// with ` m=±<seconds>.<9 digits>` when the value carries a monotonic reading.
pub fn go_time(t: DateTime<FixedOffset>, mono: Option<f64>) -> String {
    let mut out = t.format("%Y-%m-%d %H:%M:%S").to_string();
    let frac = t.timestamp_subsec_nanos();
    if frac != 0 {
        let f = format!("{frac:09}");
        out.push('.');
        out.push_str(f.trim_end_matches('0'));
    }
    let off = t.offset().local_minus_utc();
    let sign = if off < 0 { '-' } else { '+' };
    let _ = write!(
        out,
        " {sign}{:02}{:02}",
        off.abs() / 3600,
        (off.abs() / 60) % 60
    );
    if off == 0 {
        out.push_str(" UTC");
    } else {
        // A zone without a name prints its offset again, as Go does.
        let _ = write!(
            out,
            " {sign}{:02}{:02}",
            off.abs() / 3600,
            (off.abs() / 60) % 60
        );
    }
    if let Some(m) = mono.filter(|m| m.is_finite()) {
        let sign = if m < 0.0 { '-' } else { '+' };
        let _ = write!(out, " m={sign}{:.9}", m.abs());
    }
    out
}
