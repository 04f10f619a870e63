//! Cron expressions with the semantics of `github.com/gorhill/cronexpr`, which gitlab-runner
//! uses for `[[runners.machine.autoscaling]] Periods`.
//!
//! This module parses one expression and answers "which second comes next"; it knows nothing
//! about periods, sections or config files ([`super::periods`] builds on it) and never reads
//! the clock: every time comes in as an argument.
//!
//! # Syntax (as cronexpr accepts it)
//!
//! * Fields are separated by spaces, tabs, CR, LF or FF. 7 fields are
//!   `sec min hour dom month dow year`; 6 fields drop `sec` (fixed to 0); 5 fields also drop
//!   `year` (any). Fewer than 5 is an error, fields after the 7th are ignored.
//! * `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`, `@hourly` are replaced textually
//!   (wherever they occur, case-sensitively) by 7-field forms starting `0 0 …`.
//! * Each field is a comma list of `*`, `?`, `a`, `a-b`, `*/n`, `a/n`, `a-b/n`; day-of-month
//!   also takes `L`, `LW`, `15W`; day-of-week `5L`, `5#3`. Names are case-insensitive, one
//!   leading zero is allowed, `7` is Sunday. A step must be 1..=the field's maximum (6 for
//!   day-of-week, so `*/7` is invalid).
//! * A descending range (`sat-sun`, hour `22-6`) is accepted but contributes no value. Where
//!   that leaves a second, minute, hour or month field with no value at all, gitlab-runner
//!   crashes at its first period check; drover rejects the expression with
//!   [`CronError::DescendingRange`] and shows the wrap-around (`22-23,0-6`). Elsewhere drover
//!   keeps cronexpr's meaning (matches nothing) and [`super::periods::lint_periods`] warns.
//! * If both day fields are restricted, a day matches when either does (crontab's rule).
//!
//! # Time zones
//!
//! [`CronExpr::next`] works on the wall clock of the zone of its argument and turns candidate
//! wall times into instants as Go's `time.Date` does; see [`next`](CronExpr::next) for what
//! that means around DST changes.

mod days;
mod error;
mod field;
mod next;

use chrono::{DateTime, NaiveDate, Offset, TimeZone};

pub use error::{CronError, Field};

pub(crate) use error::clip;

pub(crate) use field::Descending;

use field::{generic, Bits};

/// cronexpr's textual macros, in its replacement order.
const MACROS: [(&str, &str); 6] = [
    ("@yearly", "0 0 0 1 1 * *"),
    ("@annually", "0 0 0 1 1 * *"),
    ("@monthly", "0 0 0 1 * * *"),
    ("@weekly", "0 0 0 * * 0 *"),
    ("@daily", "0 0 0 * * * *"),
    ("@hourly", "0 0 * * * * *"),
];

/// A parsed cron expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CronExpr {
    source: String,
    field_count: usize,
    /// The fields as written (after macro expansion), in 7-field order; `None` if implied.
    texts: [Option<String>; 7],
    pub(crate) seconds: Bits,
    pub(crate) minutes: Bits,
    pub(crate) hours: Bits,
    pub(crate) months: Bits,
    /// Years as offsets from 1970.
    pub(crate) years: Bits,
    pub(crate) days: days::Days,
    descending: Vec<Descending>,
}

/// Replaces the macros wherever they occur, left to right, like Go's `strings.Replacer`.
fn expand_macros(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    'outer: while let Some(c) = rest.chars().next() {
        if c == '@' {
            for (name, with) in MACROS {
                if let Some(after) = rest.strip_prefix(name) {
                    out.push_str(with);
                    rest = after;
                    continue 'outer;
                }
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Go's `\s` (ASCII space, tab, LF, FF, CR; not vertical tab or Unicode spaces).
fn is_go_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0c' | '\r')
}

impl CronExpr {
    /// Parses an expression the way cronexpr's `Parse` does (see the module docs), except that
    /// a field left empty by descending ranges is an error instead of a later crash.
    pub fn parse(expr: &str) -> Result<CronExpr, CronError> {
        let expanded = expand_macros(expr);
        let fields: Vec<&str> = expanded
            .split(is_go_space)
            .filter(|f| !f.is_empty())
            .collect();
        if fields.len() < 5 {
            return Err(CronError::MissingFields {
                expr: expr.to_string(),
                found: fields.len(),
            });
        }
        let count = fields.len().min(7);
        let mut texts: [Option<String>; 7] = Default::default();
        let first_slot = if count == 7 { 0 } else { 1 };
        for (k, f) in fields.iter().take(count).enumerate() {
            if let Some(slot) = texts.get_mut(first_slot + k) {
                *slot = Some((*f).to_string());
            }
        }
        let mut it = fields.iter().take(count).copied();
        let mut next_field = || it.next().unwrap_or("*");
        let mut descending = Vec::new();
        let seconds = if count == 7 {
            generic(Field::Second, next_field(), 0, &mut descending)?
        } else {
            let mut b = Bits::default();
            b.insert(0);
            b
        };
        let minutes = generic(Field::Minute, next_field(), 0, &mut descending)?;
        let hours = generic(Field::Hour, next_field(), 0, &mut descending)?;
        let dom = next_field();
        let months = generic(Field::Month, next_field(), 0, &mut descending)?;
        let days = days::Days::parse(dom, next_field(), &mut descending)?;
        let years = if count >= 6 {
            generic(Field::Year, next_field(), 1970, &mut descending)?
        } else {
            let mut b = Bits::default();
            field::populate(&mut b, 0, 2099 - 1970, 1);
            b
        };
        Ok(CronExpr {
            source: expr.to_string(),
            field_count: count,
            texts,
            seconds,
            minutes,
            hours,
            months,
            years,
            days,
            descending,
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// How many fields were used (5, 6 or 7) after expanding macros.
    pub fn field_count(&self) -> usize {
        self.field_count
    }

    /// The text of a field as written (after macro expansion); `None` if the form omits it.
    pub fn field_text(&self, field: Field) -> Option<&str> {
        let i = match field {
            Field::Second => 0,
            Field::Minute => 1,
            Field::Hour => 2,
            Field::DayOfMonth => 3,
            Field::Month => 4,
            Field::DayOfWeek => 5,
            Field::Year => 6,
        };
        self.texts.get(i).and_then(|t| t.as_deref())
    }

    /// Descending ranges that were accepted (they contribute no value).
    pub(crate) fn descending(&self) -> &[Descending] {
        &self.descending
    }

    /// Whether both day fields are restricted, so days match if either one matches.
    pub(crate) fn days_or(&self) -> bool {
        self.days.dom_restricted && self.days.dow_restricted
    }

    /// Whether the seconds field matches every second.
    pub(crate) fn every_second(&self) -> bool {
        self.seconds.covers(0, 59)
    }

    /// cronexpr's `Next`: the first matching whole second strictly after `after` on the wall
    /// clock of `after`'s zone. Sub-seconds of `after` are ignored; the result has none.
    /// `None` when nothing matches any more (the year list is exhausted, or past 2099).
    ///
    /// Candidate wall times become instants the way Go's `time.Date` does (see
    /// `next::resolve`), so around DST changes the result mirrors cronexpr, quirks included:
    ///
    /// * a candidate in a spring-forward gap moves by the gap: forward east of UTC
    ///   (Berlin 02:30 → 03:30 CEST, Sydney 02:30 → 03:30 AEDT), backward west of UTC
    ///   (New York 02:00 → 01:00 EST, which is *earlier* than `after` when `after` is 01:59:59);
    /// * a candidate in a fall-back overlap takes the second occurrence east of UTC and the
    ///   first occurrence west of UTC; so during Berlin's first 02:xx hour, or New York's
    ///   second 01:xx hour, the "next" second of `* * * * * * *` is an hour away from `after`.
    ///
    /// Outside those two cases the result is strictly after `after` and matches every field.
    pub fn next<Tz: TimeZone>(&self, after: &DateTime<Tz>) -> Option<DateTime<Tz>> {
        let tz = after.timezone();
        let utc = after.naive_utc();
        // Go's zero time (0001-01-01 00:00:00 UTC) is "no time": cronexpr returns it unchanged.
        if NaiveDate::from_ymd_opt(1, 1, 1).and_then(|d| d.and_hms_opt(0, 0, 0)) == Some(utc) {
            return None;
        }
        let off = |u: chrono::NaiveDateTime| -> Option<i64> {
            Some(i64::from(
                tz.offset_from_utc_datetime(&u).fix().local_minus_utc(),
            ))
        };
        let wall = next::to_wall(utc, &off)?;
        let result = self.next_from_wall(wall, &off)?;
        Some(tz.from_utc_datetime(&result))
    }
}

impl std::fmt::Display for CronExpr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests;
