//! Go `time.Duration` values as gitlab-runner's `config.toml` writes them.
//!
//! Upstream's decoder accepts a duration either as a Go duration string (`"15m"`, `"1h30m"`,
//! `"1.5s"`, `"-2h"`) or as a plain integer counting nanoseconds. This module parses the string
//! form with Go's rules and formats values back the way Go prints them (`15m0s`). It knows
//! nothing about TOML or about where a value came from: the loader calls [`parse_go_duration`]
//! and attaches positions to any error.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A signed span of time with nanosecond resolution, as Go's `time.Duration`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct GoDuration {
    nanos: i64,
}

impl GoDuration {
    /// A duration of `nanos` nanoseconds.
    pub const fn from_nanos(nanos: i64) -> Self {
        GoDuration { nanos }
    }

    /// A duration of `secs` seconds, saturating at Go's limits.
    pub const fn from_secs(secs: i64) -> Self {
        GoDuration {
            nanos: secs.saturating_mul(1_000_000_000),
        }
    }

    /// The duration in nanoseconds.
    pub const fn as_nanos(self) -> i64 {
        self.nanos
    }

    /// The duration in whole seconds, truncated toward zero.
    pub const fn as_secs(self) -> i64 {
        self.nanos / 1_000_000_000
    }

    /// The duration as a `std::time::Duration`, or `None` when it is negative.
    pub fn to_std(self) -> Option<std::time::Duration> {
        u64::try_from(self.nanos)
            .ok()
            .map(std::time::Duration::from_nanos)
    }

    /// The duration as a `chrono::Duration`.
    pub fn to_chrono(self) -> chrono::Duration {
        chrono::Duration::nanoseconds(self.nanos)
    }
}

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The text is not of the form `[-+]?(number unit)+` (or a lone `0`).
    #[error(
        "invalid duration {0:?}: expected a Go duration such as \"90s\", \"15m\" or \"1h30m\""
    )]
    Invalid(String),
    /// A number was followed by something that is not a Go duration unit.
    #[error("unknown unit {unit:?} in duration {text:?}: use ns, us, ms, s, m or h")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
        /// The whole duration text.
        text: String,
    },
    /// A number was not followed by any unit.
    #[error("missing unit in duration {0:?}: write for example \"30s\" rather than \"30\"")]
    MissingUnit(String),
    /// The value does not fit Go's 64-bit nanosecond count (about ±292 years).
    #[error("duration {0:?} is out of range (Go durations are limited to about 292 years)")]
    Overflow(String),
}

fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        "us" | "\u{00b5}s" | "\u{03bc}s" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

/// Parses a Go duration string such as `"1h30m"`, `"1.5s"`, `"-300ms"` or `"0"`.
///
/// The rules are Go's `time.ParseDuration`: an optional sign, then one or more `number unit`
/// pairs with no spaces; a number may have a fraction; units are `ns`, `us` (or `µs`), `ms`,
/// `s`, `m` and `h`; a lone `0` needs no unit; the total must fit in an `i64` of nanoseconds.
pub fn parse_go_duration(text: &str) -> Result<GoDuration, DurationError> {
    let invalid = || DurationError::Invalid(text.to_string());
    let mut rest = text;
    let mut negative = false;
    if let Some(r) = rest.strip_prefix('-') {
        negative = true;
        rest = r;
    } else if let Some(r) = rest.strip_prefix('+') {
        rest = r;
    }
    if rest == "0" {
        return Ok(GoDuration::from_nanos(0));
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        // Integer part.
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_digits, after_int) = rest.split_at(int_len);
        let mut whole: u64 = 0;
        for d in int_digits.bytes() {
            whole = whole
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(d - b'0')))
                .ok_or_else(|| DurationError::Overflow(text.to_string()))?;
        }
        rest = after_int;
        // Optional fraction.
        let mut frac: u64 = 0;
        let mut scale: f64 = 1.0;
        let mut frac_len = 0;
        if let Some(r) = rest.strip_prefix('.') {
            frac_len = r.bytes().take_while(u8::is_ascii_digit).count();
            let (frac_digits, after_frac) = r.split_at(frac_len);
            let mut overflowed = false;
            for d in frac_digits.bytes() {
                if overflowed {
                    continue;
                }
                match frac
                    .checked_mul(10)
                    .and_then(|v| v.checked_add(u64::from(d - b'0')))
                {
                    // Digits beyond what fits are dropped, as Go does.
                    Some(v) if v < (1u64 << 63) => {
                        frac = v;
                        scale *= 10.0;
                    }
                    _ => overflowed = true,
                }
            }
            rest = after_frac;
        }
        if int_len == 0 && frac_len == 0 {
            return Err(invalid());
        }
        // Unit.
        let unit_len = rest
            .char_indices()
            .find(|&(_, c)| c == '.' || c.is_ascii_digit())
            .map_or(rest.len(), |(i, _)| i);
        let (unit, after_unit) = rest.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit(text.to_string()));
        }
        let per = unit_nanos(unit).ok_or_else(|| DurationError::UnknownUnit {
            unit: unit.to_string(),
            text: text.to_string(),
        })?;
        rest = after_unit;
        let mut value = whole
            .checked_mul(per)
            .filter(|v| *v <= 1u64 << 63)
            .ok_or_else(|| DurationError::Overflow(text.to_string()))?;
        if frac > 0 {
            // Go adds the fraction through a float64 and truncates.
            let extra = (frac as f64 * (per as f64 / scale)) as u64;
            value = value
                .checked_add(extra)
                .filter(|v| *v <= 1u64 << 63)
                .ok_or_else(|| DurationError::Overflow(text.to_string()))?;
        }
        total = total
            .checked_add(value)
            .filter(|v| *v <= 1u64 << 63)
            .ok_or_else(|| DurationError::Overflow(text.to_string()))?;
    }
    if negative {
        // -(1<<63) is representable.
        let nanos = 0i64
            .checked_sub_unsigned(total)
            .ok_or_else(|| DurationError::Overflow(text.to_string()))?;
        Ok(GoDuration::from_nanos(nanos))
    } else {
        let nanos = i64::try_from(total).map_err(|_| DurationError::Overflow(text.to_string()))?;
        Ok(GoDuration::from_nanos(nanos))
    }
}

impl fmt::Display for GoDuration {
    /// Formats as Go's `Duration.String`: `1h30m0s`, `1.5s`, `300ms`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let neg = self.nanos < 0;
        let u = self.nanos.unsigned_abs();
        let sign = if neg { "-" } else { "" };
        if u == 0 {
            return f.write_str("0s");
        }
        if u < 1_000_000_000 {
            // Sub-second: pick the largest unit that keeps a non-zero integer part.
            let (unit, div) = if u < 1_000 {
                ("ns", 1u64)
            } else if u < 1_000_000 {
                ("\u{00b5}s", 1_000)
            } else {
                ("ms", 1_000_000)
            };
            return write!(f, "{sign}{}{unit}", fixed(u, div));
        }
        let secs_total = u / 1_000_000_000;
        let sub = u % 1_000_000_000;
        let hours = secs_total / 3600;
        let mins = (secs_total % 3600) / 60;
        let secs = secs_total % 60;
        let secs_text = fixed(secs * 1_000_000_000 + sub, 1_000_000_000);
        if hours > 0 {
            write!(f, "{sign}{hours}h{mins}m{secs_text}s")
        } else if mins > 0 {
            write!(f, "{sign}{mins}m{secs_text}s")
        } else {
            write!(f, "{sign}{secs_text}s")
        }
    }
}

/// `value / div` with the fraction written out and trailing zeros dropped.
fn fixed(value: u64, div: u64) -> String {
    let whole = value / div;
    let frac = value % div;
    if frac == 0 {
        return whole.to_string();
    }
    let width = div.to_string().len() - 1;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(text: &str) -> i64 {
        match parse_go_duration(text) {
            Ok(d) => d.as_nanos(),
            Err(e) => panic!("{text}: {e}"),
        }
    }

    #[test]
    fn parses_go_forms() {
        assert_eq!(ns("0"), 0);
        assert_eq!(ns("-0"), 0);
        assert_eq!(ns("5s"), 5_000_000_000);
        assert_eq!(ns("15m"), 900_000_000_000);
        assert_eq!(ns("15m0s"), 900_000_000_000);
        assert_eq!(ns("1h30m"), 5_400_000_000_000);
        assert_eq!(ns("1.5s"), 1_500_000_000);
        assert_eq!(ns(".5s"), 500_000_000);
        assert_eq!(ns("1.s"), 1_000_000_000);
        assert_eq!(ns("-2h"), -7_200_000_000_000);
        assert_eq!(ns("+3ms"), 3_000_000);
        assert_eq!(ns("10us"), 10_000);
        assert_eq!(ns("10\u{00b5}s"), 10_000);
        assert_eq!(ns("10\u{03bc}s"), 10_000);
        assert_eq!(ns("7ns"), 7);
        assert_eq!(ns("1h1m1s1ms"), 3_661_001_000_000);
        assert_eq!(ns("9223372036854775807ns"), i64::MAX);
        assert_eq!(ns("-9223372036854775808ns"), i64::MIN);
    }

    #[test]
    fn rejects_what_go_rejects() {
        for bad in [
            "", "-", "s", "30", "1.5", "1h30", ".s", "1x", "1 h", "1min", "1hh", "--1s",
        ] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} should fail");
        }
        assert!(matches!(
            parse_go_duration("9223372036854775808ns"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse_go_duration("3000000h"),
            Err(DurationError::Overflow(_))
        ));
        assert!(matches!(
            parse_go_duration("30"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_go_duration("1min"),
            Err(DurationError::UnknownUnit { .. })
        ));
    }

    #[test]
    fn formats_as_go() {
        let f = |n: i64| GoDuration::from_nanos(n).to_string();
        assert_eq!(f(0), "0s");
        assert_eq!(f(900_000_000_000), "15m0s");
        assert_eq!(f(5_400_000_000_000), "1h30m0s");
        assert_eq!(f(1_500_000_000), "1.5s");
        assert_eq!(f(300_000_000), "300ms");
        assert_eq!(f(1_500), "1.5\u{00b5}s");
        assert_eq!(f(-5_000_000_000), "-5s");
        assert_eq!(f(7), "7ns");
    }
}
