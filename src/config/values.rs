//! Small value conversions for the schema walk: TOML integers and floats with Go's range
//! rules, TOML datetimes as UTC instants (local ones in the host's zone, as upstream), and how
//! a found value is described in messages. Pure functions; no positions, no I/O.

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};
use toml::de::DeValue;

/// A TOML datetime as a UTC instant: offset datetimes exactly, local datetimes and dates in
/// the host's zone, a lone time on 0000-01-01; `None` when it does not exist (e.g. in a DST gap).
pub(crate) fn toml_datetime_to_utc(dt: &toml::value::Datetime) -> Option<DateTime<Utc>> {
    let date = dt
        .date
        .and_then(|d| NaiveDate::from_ymd_opt(d.year.into(), d.month.into(), d.day.into()));
    let time = dt.time.and_then(|t| {
        NaiveTime::from_hms_nano_opt(
            t.hour.into(),
            t.minute.into(),
            t.second.unwrap_or(0).into(),
            t.nanosecond.unwrap_or(0),
        )
    });
    let naive = match (date, time) {
        (Some(d), Some(t)) => Some(NaiveDateTime::new(d, t)),
        (Some(d), None) => Some(NaiveDateTime::new(d, NaiveTime::MIN)),
        (None, Some(t)) => NaiveDate::from_ymd_opt(0, 1, 1).map(|d| NaiveDateTime::new(d, t)),
        (None, None) => None,
    }?;
    match dt.offset {
        Some(toml::value::Offset::Z) => Some(Utc.from_utc_datetime(&naive)),
        Some(toml::value::Offset::Custom { minutes }) => {
            chrono::FixedOffset::east_opt(i32::from(minutes) * 60)
                .and_then(|o| o.from_local_datetime(&naive).single())
                .map(|d| d.with_timezone(&Utc))
        }
        None => chrono::Local
            .from_local_datetime(&naive)
            .earliest()
            .map(|d| d.with_timezone(&Utc)),
    }
}

/// Parses a TOML integer's digits (underscores already removed by the parser, but tolerated).
pub(crate) fn int_value(digits: &str, radix: u32) -> Option<i64> {
    let cleaned: String = digits.chars().filter(|c| *c != '_').collect();
    i64::from_str_radix(&cleaned, radix).ok()
}

/// Parses a TOML float; `None` when it overflows to infinity without saying `inf`.
pub(crate) fn float_value(text: &str) -> Option<f64> {
    let cleaned: String = text.chars().filter(|c| *c != '_').collect();
    let x: f64 = cleaned.parse().ok()?;
    if x.is_infinite() && !cleaned.contains("inf") {
        None
    } else {
        Some(x)
    }
}

/// `string "5"`, `integer 5`, `a table`, … for messages.
pub(crate) fn found(v: &DeValue<'_>) -> String {
    match v {
        DeValue::String(s) => {
            let short: String = s.chars().take(40).collect();
            if short.len() < s.len() {
                format!("string {short:?}…")
            } else {
                format!("string {short:?}")
            }
        }
        DeValue::Integer(i) => format!("integer {i}"),
        DeValue::Float(f) => format!("float {f}"),
        DeValue::Boolean(b) => format!("boolean {b}"),
        DeValue::Datetime(d) => format!("datetime {d}"),
        DeValue::Array(_) => "an array".to_string(),
        DeValue::Table(_) => "a table".to_string(),
    }
}

pub(crate) fn quote_hint(v: &DeValue<'_>) -> Option<String> {
    match v {
        DeValue::Integer(_) | DeValue::Float(_) | DeValue::Boolean(_) => {
            Some("put the value in double quotes".to_string())
        }
        _ => None,
    }
}
