//! Unit tests for the parser internals: entry classification is checked exhaustively against
//! an oracle built from cronexpr's documented token patterns (as regular expressions), and the
//! Go `time.Date` resolution against hand-worked DST cases.

use std::collections::HashMap;

use chrono::{NaiveDate, NaiveDateTime, Offset, TimeZone};
use regex::Regex;

use super::error::{CronError, Field};
use super::field::{classify, descending_fix, Entry};
use super::next::resolve;

const FIELDS: [Field; 7] = [
    Field::Second,
    Field::Minute,
    Field::Hour,
    Field::DayOfMonth,
    Field::Month,
    Field::DayOfWeek,
    Field::Year,
];

/// cronexpr's value patterns and token tables, restated as data for the oracle.
fn pattern(field: Field) -> &'static str {
    match field {
        Field::Second | Field::Minute => "0?[0-9]|[1-5][0-9]",
        Field::Hour => "0?[0-9]|1[0-9]|2[0-3]",
        Field::DayOfMonth => "0?[1-9]|[12][0-9]|3[01]",
        Field::Month => "0?[1-9]|1[012]|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec|january|february|march|april|june|july|august|september|october|november|december",
        Field::DayOfWeek => "0?[0-7]|sun|mon|tue|wed|thu|fri|sat|sunday|monday|tuesday|wednesday|thursday|friday|saturday",
        Field::Year => "19[789][0-9]|20[0-9]{2}",
    }
}

fn tokens(field: Field) -> HashMap<String, u32> {
    let mut m = HashMap::new();
    match field {
        Field::Month => {
            let names = [
                "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
            ];
            let full = [
                "january",
                "february",
                "march",
                "april",
                "may",
                "june",
                "july",
                "august",
                "september",
                "october",
                "november",
                "december",
            ];
            for i in 0..12u32 {
                m.insert((i + 1).to_string(), i + 1);
                if i < 9 {
                    m.insert(format!("0{}", i + 1), i + 1);
                }
                m.insert(names[i as usize].to_string(), i + 1);
                m.insert(full[i as usize].to_string(), i + 1);
            }
        }
        Field::DayOfWeek => {
            let names = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
            let full = [
                "sunday",
                "monday",
                "tuesday",
                "wednesday",
                "thursday",
                "friday",
                "saturday",
            ];
            for i in 0..7u32 {
                m.insert(i.to_string(), i);
                m.insert(format!("0{i}"), i);
                m.insert(names[i as usize].to_string(), i);
                m.insert(full[i as usize].to_string(), i);
            }
            m.insert("7".into(), 0);
        }
        _ => {
            for i in 0..60u32 {
                m.insert(i.to_string(), i);
            }
            for i in 0..10u32 {
                m.insert(format!("0{i}"), i);
            }
            for y in 1970..=2099u32 {
                m.insert(y.to_string(), y);
            }
        }
    }
    m
}

struct Oracle {
    toks: HashMap<String, u32>,
    numbers: HashMap<String, u32>,
    one: Regex,
    range: Regex,
    wstep: Regex,
    vstep: Regex,
    rstep: Regex,
}

impl Oracle {
    fn new(field: Field) -> Option<Oracle> {
        let v = pattern(field);
        let re = |l: &str| Regex::new(&l.replace("%v%", v)).ok();
        Some(Oracle {
            toks: tokens(field),
            numbers: tokens(Field::Second),
            one: re("^(%v%)$")?,
            range: re("^(%v%)-(%v%)$")?,
            wstep: re(r"^\*/(\d+)$")?,
            vstep: re(r"^(%v%)/(\d+)$")?,
            rstep: re(r"^(%v%)-(%v%)/(\d+)$")?,
        })
    }

    fn classify(&self, field: Field, e: &str) -> Result<Entry, ()> {
        let atoi = |s: &str| self.toks.get(s).copied().unwrap_or(0);
        let number = |s: &str| self.numbers.get(s).copied().unwrap_or(0);
        let (max, min) = (field.max(), field.min());
        let check = |n: u32| if n < 1 || n > max { Err(()) } else { Ok(n) };
        if e == "*" || e == "?" {
            return Ok(Entry::All);
        }
        if self.one.is_match(e) {
            return Ok(Entry::One(atoi(e)));
        }
        if let Some(c) = self.range.captures(e) {
            return Ok(Entry::Span {
                first: atoi(&c[1]),
                last: atoi(&c[2]),
                step: 1,
            });
        }
        if let Some(c) = self.wstep.captures(e) {
            return Ok(Entry::Span {
                first: min,
                last: max,
                step: check(number(&c[1]))?,
            });
        }
        if let Some(c) = self.vstep.captures(e) {
            return Ok(Entry::Span {
                first: atoi(&c[1]),
                last: max,
                step: check(number(&c[2]))?,
            });
        }
        if let Some(c) = self.rstep.captures(e) {
            return Ok(Entry::Span {
                first: atoi(&c[1]),
                last: atoi(&c[2]),
                step: check(number(&c[3]))?,
            });
        }
        Ok(Entry::Special)
    }
}

/// Every string of up to 4 characters over an alphabet that exercises all forms, plus names
/// and longer numbers, classified identically by the parser and by the regex oracle.
#[test]
fn classification_matches_cronexpr_patterns() {
    let alphabet: Vec<char> = "0123569*?-/lw#".chars().collect();
    let mut inputs: Vec<String> = vec![String::new()];
    let mut frontier = vec![String::new()];
    for _ in 0..4 {
        let mut next = Vec::new();
        for s in &frontier {
            for c in &alphabet {
                next.push(format!("{s}{c}"));
            }
        }
        inputs.extend(next.iter().cloned());
        frontier = next;
    }
    for extra in [
        "jan",
        "january",
        "sun-sat",
        "sat-sun",
        "mon/2",
        "fri-mon/3",
        "dec-jan",
        "may",
        "1970",
        "2099",
        "2100",
        "1969",
        "1970-2099/1970",
        "*/1970",
        "*/2099",
        "*/2100",
        "007",
        "060",
        "59",
        "60",
        "23",
        "24",
        "31",
        "32",
        "12",
        "13",
        "7-7",
        "07",
        "sunl",
        "thursday",
    ] {
        inputs.push(extra.to_string());
    }
    let mut mismatches = Vec::new();
    for field in FIELDS {
        let Some(oracle) = Oracle::new(field) else {
            panic!("oracle regex for {field} does not compile");
        };
        for e in &inputs {
            let ours = classify(field, e).map_err(|err| {
                assert!(matches!(err, CronError::InvalidStep { .. }), "{err}");
            });
            let theirs = oracle.classify(field, e);
            if ours != theirs {
                mismatches.push(format!("{field} {e:?}: ours {ours:?}, oracle {theirs:?}"));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches[..mismatches.len().min(20)].join("\n")
    );
}

#[test]
fn descending_fixes() {
    let cases = [
        (Field::Hour, "22-6", 22, 6, 1, "22-23,0-6"),
        (Field::Hour, "22-6/2", 22, 6, 2, "22,0-6/2"),
        (Field::Hour, "20-4/3", 20, 4, 3, "20-23/3,2"),
        (Field::DayOfWeek, "sat-sun", 6, 0, 1, "sat,sun"),
        (Field::DayOfWeek, "fri-mon", 5, 1, 1, "fri-sat,sun-mon"),
        (Field::DayOfWeek, "5-7", 5, 0, 1, "5-6,0"),
        (Field::Month, "nov-feb", 11, 2, 1, "nov-dec,jan-feb"),
        (Field::DayOfMonth, "25-5", 25, 5, 1, "25-31,1-5"),
        (Field::Year, "2030-2025", 2030, 2025, 1, "2025-2030"),
    ];
    for (field, entry, a, b, step, want) in cases {
        assert_eq!(descending_fix(field, entry, a, b, step), want, "{entry}");
    }
}

fn wall(s: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S").unwrap_or(NaiveDateTime::MIN)
}

#[test]
fn go_date_resolution() {
    let cases = [
        // (zone, wall time, expected UTC)
        (
            "Europe/Berlin",
            "2026-03-29 02:30:00",
            "2026-03-29 01:30:00",
        ), // gap → forward
        (
            "Europe/Berlin",
            "2026-10-25 02:30:00",
            "2026-10-25 01:30:00",
        ), // overlap → second
        (
            "America/New_York",
            "2026-03-08 02:30:00",
            "2026-03-08 06:30:00",
        ), // gap → backward
        (
            "America/New_York",
            "2026-11-01 01:30:00",
            "2026-11-01 05:30:00",
        ), // overlap → first
        (
            "Australia/Sydney",
            "2026-10-04 02:30:00",
            "2026-10-03 16:30:00",
        ), // gap → forward
        (
            "Australia/Sydney",
            "2026-04-05 02:30:00",
            "2026-04-04 16:30:00",
        ), // overlap → second
        (
            "Europe/London",
            "2026-03-29 01:30:00",
            "2026-03-29 01:30:00",
        ), // offset 0 before
        ("UTC", "2026-03-29 01:30:00", "2026-03-29 01:30:00"),
    ];
    for (zone, w, want) in cases {
        let tz: chrono_tz::Tz = zone.parse().unwrap_or(chrono_tz::Tz::UTC);
        let off = |u: NaiveDateTime| {
            Some(i64::from(
                tz.offset_from_utc_datetime(&u).fix().local_minus_utc(),
            ))
        };
        assert_eq!(resolve(wall(w), &off), Some(wall(want)), "{zone} {w}");
    }
}

#[test]
fn macros_expand_anywhere_case_sensitively() {
    let e = super::CronExpr::parse("@hourly").ok();
    assert_eq!(e.as_ref().map(|e| e.field_count()), Some(7));
    assert_eq!(
        e.as_ref().and_then(|e| e.field_text(Field::Minute)),
        Some("0")
    );
    // Text after a macro adds fields beyond the 7th, which are ignored.
    assert!(super::CronExpr::parse("@daily extra").is_ok());
    assert!(super::CronExpr::parse("@DAILY").is_err());
    let _ = NaiveDate::from_ymd_opt(2026, 1, 1);
}
