//! Parse errors for cron expressions: what is wrong, in which field, and how to fix it.
//!
//! Messages are lowercase, quote the offending text and end with the fix, so the config loader
//! can print them after a `file:line:col` prefix without further context.

use std::fmt;

/// One of the seven cronexpr fields, in the order they appear in the 7-field form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// Seconds, 0-59 (only in the 7-field form; otherwise fixed to 0).
    Second,
    /// Minutes, 0-59.
    Minute,
    /// Hours, 0-23.
    Hour,
    /// Day of month, 1-31, plus `L`, `LW` and `nW`.
    DayOfMonth,
    /// Month, 1-12 or `jan`…`dec`.
    Month,
    /// Day of week, 0-7 (0 and 7 are Sunday) or `sun`…`sat`, plus `nL` and `n#k`.
    DayOfWeek,
    /// Year, 1970-2099 (6- and 7-field forms; otherwise `*`).
    Year,
}

impl Field {
    /// cronexpr's name for the field, as used in its own messages.
    pub fn name(self) -> &'static str {
        match self {
            Field::Second => "second",
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
            Field::Year => "year",
        }
    }

    /// Smallest value of the field.
    pub fn min(self) -> u32 {
        match self {
            Field::DayOfMonth | Field::Month => 1,
            Field::Year => 1970,
            _ => 0,
        }
    }

    /// Largest value of the field (6 for day-of-week: 7 is an alias of 0).
    pub fn max(self) -> u32 {
        match self {
            Field::Second | Field::Minute => 59,
            Field::Hour => 23,
            Field::DayOfMonth => 31,
            Field::Month => 12,
            Field::DayOfWeek => 6,
            Field::Year => 2099,
        }
    }

    /// A one-line summary of what the field accepts.
    pub fn accepts(self) -> &'static str {
        match self {
            Field::Second | Field::Minute => {
                "0-59 (one leading zero allowed), `*`, `?`, `a-b`, `*/n`, `a/n`, `a-b/n` and comma lists"
            }
            Field::Hour => {
                "0-23 (one leading zero allowed), `*`, `?`, `a-b`, `*/n`, `a/n`, `a-b/n` and comma lists"
            }
            Field::DayOfMonth => {
                "1-31, `L` (last day), `LW` (last weekday), `15W` (weekday nearest the 15th), `*`, `?`, ranges, steps and comma lists"
            }
            Field::Month => "1-12 or jan…dec (full names too), `*`, `?`, ranges, steps and comma lists",
            Field::DayOfWeek => {
                "0-7 (0 and 7 are Sunday) or sun…sat (full names too), `5L` (last Friday), `5#3` (third Friday), `*`, `?`, ranges, steps and comma lists"
            }
            Field::Year => "1970-2099, `*`, `?`, ranges, steps and comma lists",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Shortens user text quoted in a message so an error always fits on one screen.
pub(crate) fn clip(s: &str) -> String {
    const MAX: usize = 60;
    if s.chars().count() <= MAX {
        return s.to_string();
    }
    let head: String = s.chars().take(MAX - 1).collect();
    format!("{head}…")
}

/// Why a cron expression was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CronError {
    /// Fewer than 5 whitespace-separated fields (after expanding `@daily` and friends).
    #[error(
        "missing field(s): `{}` has {found} field(s) but at least 5 are needed; \
         write 7 fields `sec min hour dom month dow year`, e.g. `* * 9-17 * * mon-fri *`",
        clip(expr)
    )]
    MissingFields {
        /// The expression as written.
        expr: String,
        /// How many fields were found.
        found: usize,
    },
    /// A field holds only commas, so it has no entry at all.
    #[error("{field} field `{}`: missing directive; it takes {}", clip(text), field.accepts())]
    MissingDirective {
        /// The field.
        field: Field,
        /// The field's text.
        text: String,
    },
    /// An entry that is not valid in its field (unknown name, value out of range, bad syntax).
    #[error("syntax error in {field} field: `{}`: {hint}", clip(entry))]
    Syntax {
        /// The field.
        field: Field,
        /// The offending comma-separated entry.
        entry: String,
        /// What is wrong and what the field takes.
        hint: String,
    },
    /// A step (`/n`) below 1 or above the field's maximum.
    #[error(
        "invalid interval `{}` in {field} field: the step must be between 1 and {}{}",
        clip(entry),
        field.max(),
        if *field == Field::DayOfWeek { " (so `*/7` is invalid: write `*` for every day, or `sun` for Sundays)" } else { "" }
    )]
    InvalidStep {
        /// The field.
        field: Field,
        /// The offending entry, lowercased as cronexpr reports it.
        entry: String,
    },
    /// Every entry of a second/minute/hour/month field is a descending range, so the field
    /// matches no value. Upstream's cronexpr accepts this and then crashes on the first
    /// period check; drover refuses it when the config loads.
    #[error(
        "{field} range `{entry}` is descending, so the {field} field matches nothing \
         (gitlab-runner crashes on it at the first period check); ranges do not wrap around: write `{fix}`"
    )]
    DescendingRange {
        /// The field.
        field: Field,
        /// The descending entry as written.
        entry: String,
        /// The wrap-around the user most likely meant, e.g. `22-23,0-6`.
        fix: String,
    },
}
