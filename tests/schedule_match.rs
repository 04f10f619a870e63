//! Period matching in UTC, table-driven from spec §3 (autoscale-semantics.md).

use chrono::{DateTime, NaiveDateTime, TimeDelta, TimeZone, Utc};
use drover::config::periods::TimePeriod;

fn t(s: &str) -> DateTime<Utc> {
    let n = NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
        .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S"))
        .unwrap_or_else(|e| panic!("bad test time {s}: {e}"));
    Utc.from_utc_datetime(&n)
}

fn period(exprs: &[&str]) -> TimePeriod {
    let list: Vec<String> = exprs.iter().map(|s| s.to_string()).collect();
    TimePeriod::compile(&list, "UTC").unwrap_or_else(|e| panic!("{exprs:?}: {e}"))
}

/// (periods, now, expected in_period)
const TABLE: &[(&[&str], &str, bool)] = &[
    // 09:00-17:59 weekdays; 2026-11-23 is a Monday.
    (&["* * 9-17 * * mon-fri *"], "2026-11-23 08:59:58", false),
    (
        &["* * 9-17 * * mon-fri *"],
        "2026-11-23 08:59:58.999",
        false,
    ),
    (&["* * 9-17 * * mon-fri *"], "2026-11-23 08:59:59", true), // 1 s early
    (&["* * 9-17 * * mon-fri *"], "2026-11-23 08:59:59.5", true),
    (&["* * 9-17 * * mon-fri *"], "2026-11-23 09:00:00", true),
    (&["* * 9-17 * * mon-fri *"], "2026-11-23 12:34:56", true),
    (&["* * 9-17 * * mon-fri *"], "2026-11-23 17:59:58", true),
    (&["* * 9-17 * * mon-fri *"], "2026-11-23 17:59:58.999", true),
    (&["* * 9-17 * * mon-fri *"], "2026-11-23 17:59:59", false), // last second out
    (&["* * 9-17 * * mon-fri *"], "2026-11-23 18:00:00", false),
    (&["* * 9-17 * * mon-fri *"], "2026-11-22 12:00:00", false), // Sunday
    (&["* * 9-17 * * mon-fri *"], "2026-11-28 12:00:00", false), // Saturday
    (&["* * 9-17 * * mon-fri *"], "2026-11-27 17:30:00", true),  // Friday
    // */2 seconds flicker: odd seconds in, even out.
    (&["*/2 * * * * * *"], "2026-11-23 10:00:01", true),
    (&["*/2 * * * * * *"], "2026-11-23 10:00:02", false),
    (&["*/2 * * * * * *"], "2026-11-23 10:00:59", true),
    (&["*/2 * * * * * *"], "2026-11-23 10:00:58", false),
    // Macros fire for one second: active only in the second before.
    (&["@daily"], "2026-11-23 23:59:59", true),
    (&["@daily"], "2026-11-24 00:00:00", false),
    (&["@daily"], "2026-11-23 23:59:58", false),
    (&["@hourly"], "2026-11-23 10:59:59", true),
    (&["@hourly"], "2026-11-23 11:00:00", false),
    (&["@weekly"], "2026-11-28 23:59:59", true), // Saturday → Sunday 00:00
    (&["@weekly"], "2026-11-23 23:59:59", false),
    (&["@monthly"], "2026-11-30 23:59:59", true),
    (&["@yearly"], "2026-12-31 23:59:59", true),
    (&["@annually"], "2026-06-30 23:59:59", false),
    // 5-field form: seconds fixed to 0, year any.
    (&["* 9-17 * * mon-fri"], "2026-11-23 09:00:59", true),
    (&["* 9-17 * * mon-fri"], "2026-11-23 09:00:30", false),
    (&["* 9-17 * * mon-fri"], "2026-11-23 08:59:59", true),
    // 6-field form: min hour dom month dow year.
    (&["* * * * * 2026"], "2026-11-23 09:00:59", true),
    (&["* * * * * 2026"], "2026-11-23 09:00:58", false),
    (&["* * * * * 2027"], "2026-11-23 09:00:59", false),
    (&["* * * * * 2027"], "2026-12-31 23:59:59", true),
    // Names are case-insensitive, full names work, one leading zero allowed.
    (&["* * 09-17 * * MON-Friday *"], "2026-11-23 09:30:00", true),
    (&["* * * * NOV * *"], "2026-11-23 09:30:00", true),
    (&["* * * * 011 * *"], "2026-11-23 09:30:00", false), // invalid, see parse tests; not here
    // `?` is a wildcard.
    (&["* * * ? * ? *"], "2026-11-23 09:30:00", true),
    // dow 0 and 7 are both Sunday.
    (&["* * * * * 0 *"], "2026-11-22 12:00:00", true),
    (&["* * * * * 7 *"], "2026-11-22 12:00:00", true),
    (&["* * * * * 7 *"], "2026-11-23 12:00:00", false),
    // Descending ranges parse but match nothing.
    (&["* * * * * sat-sun *"], "2026-11-28 12:00:00", false),
    (&["* * * * * sat-sun *"], "2026-11-22 12:00:00", false),
    (&["* * * * * 5-7 *"], "2026-11-27 12:00:00", false),
    (&["* * * * * sat,sun *"], "2026-11-28 12:00:00", true),
    (&["* * * * * sat,sun *"], "2026-11-22 12:00:00", true),
    // L / W / LW / # (November 2026: 1st is a Sunday, 30th a Monday).
    (&["* * * L * * *"], "2026-11-30 12:00:00", true),
    (&["* * * L * * *"], "2026-11-29 12:00:00", false),
    (&["* * * L * * *"], "2026-02-28 12:00:00", true),
    (&["* * * LW * * *"], "2026-11-30 12:00:00", true),
    (&["* * * LW * * *"], "2026-10-30 12:00:00", true), // Oct 31 2026 is a Saturday
    (&["* * * LW * * *"], "2026-10-31 12:00:00", false),
    (&["* * * 1W * * *"], "2026-11-02 12:00:00", true), // 1st is Sunday → Monday 2nd
    (&["* * * 1W * * *"], "2026-11-01 12:00:00", false),
    (&["* * * 1W * * *"], "2026-08-03 12:00:00", true), // Aug 1 2026 is Saturday → Monday 3rd
    (&["* * * 15W * * *"], "2026-11-16 12:00:00", true), // 15th is Sunday → Monday 16th
    (&["* * * * * 5L *"], "2026-11-27 12:00:00", true), // last Friday
    (&["* * * * * 5L *"], "2026-11-20 12:00:00", false),
    (&["* * * * * fri#3 *"], "2026-11-20 12:00:00", true),
    (&["* * * * * 5#3 *"], "2026-11-13 12:00:00", false),
    (&["* * * * * mon#5 *"], "2026-11-30 12:00:00", true),
    (&["* * * * * sun#5 *"], "2026-11-29 12:00:00", true),
    // dom and dow both restricted: either matches.
    (&["* * * 1-7 * mon *"], "2026-11-23 12:00:00", true), // Monday, not 1-7
    (&["* * * 1-7 * mon *"], "2026-11-05 12:00:00", true), // Thursday the 5th
    (&["* * * 1-7 * mon *"], "2026-11-10 12:00:00", false), // Tuesday the 10th
    (&["* * * 1-7 * * *"], "2026-11-10 12:00:00", false),
    // Year lists: in the past → never active; year range.
    (&["* * * * * * 2020"], "2026-11-23 12:00:00", false),
    (&["* * * * * * 2020-2025"], "2026-11-23 12:00:00", false),
    (&["* * * * * * 2026-2030/2"], "2026-11-23 12:00:00", true),
    (&["* * * * * * 2026-2030/2"], "2027-11-23 12:00:00", false),
    // Steps.
    (&["* */15 * * * * *"], "2026-11-23 12:15:30", true),
    (&["* */15 * * * * *"], "2026-11-23 12:16:30", false),
    (&["* 5/20 * * * * *"], "2026-11-23 12:45:30", true),
    (&["* 10-40/15 * * * * *"], "2026-11-23 12:40:30", true),
    (&["* 10-40/15 * * * * *"], "2026-11-23 12:45:30", false),
    // Lists of expressions: any one active.
    (
        &["* * 1 * * * *", "* * 3 * * * *"],
        "2026-11-23 03:30:00",
        true,
    ),
    (
        &["* * 1 * * * *", "* * 3 * * * *"],
        "2026-11-23 02:30:00",
        false,
    ),
    // Empty list: never active.
    (&[], "2026-11-23 12:00:00", false),
    // Fields after the 7th are ignored.
    (
        &["* * 9-17 * * mon-fri * junk more"],
        "2026-11-23 12:00:00",
        true,
    ),
];

#[test]
fn spec_table_utc() {
    let mut failures = Vec::new();
    for (exprs, now, want) in TABLE {
        if exprs.iter().any(|e| e.contains("011")) {
            continue;
        }
        let p = period(exprs);
        let got = p.in_period(t(now));
        if got != *want {
            failures.push(format!("{exprs:?} at {now}: got {got}, want {want}"));
        }
    }
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}

#[test]
fn next_change_weekday_window() {
    let p = period(&["* * 9-17 * * mon-fri *"]);
    let day = TimeDelta::days(1);
    assert_eq!(
        p.next_change(t("2026-11-23 07:00:00"), day),
        Some(t("2026-11-23 08:59:59"))
    );
    assert_eq!(
        p.next_change(t("2026-11-23 08:59:59"), day),
        Some(t("2026-11-23 17:59:59"))
    );
    assert_eq!(
        p.next_change(t("2026-11-23 17:59:59"), day),
        Some(t("2026-11-24 08:59:59"))
    );
    // Friday evening → Monday morning.
    assert_eq!(
        p.next_change(t("2026-11-27 18:00:00"), TimeDelta::days(4)),
        Some(t("2026-11-30 08:59:59"))
    );
    assert_eq!(p.next_change(t("2026-11-27 18:00:00"), day), None);
    // Mid-second start.
    assert_eq!(
        p.next_change(t("2026-11-23 08:59:58.5"), day),
        Some(t("2026-11-23 08:59:59"))
    );
}

#[test]
fn next_change_flicker_and_empty() {
    let p = period(&["*/2 * * * * * *"]);
    assert_eq!(
        p.next_change(t("2026-11-23 10:00:01"), TimeDelta::days(1)),
        Some(t("2026-11-23 10:00:02"))
    );
    assert_eq!(
        p.next_change(t("2026-11-23 10:00:02"), TimeDelta::days(1)),
        Some(t("2026-11-23 10:00:03"))
    );
    let empty = period(&[]);
    assert_eq!(
        empty.next_change(t("2026-11-23 10:00:01"), TimeDelta::days(400)),
        None
    );
    let past = period(&["* * * * * * 2020"]);
    assert_eq!(
        past.next_change(t("2026-11-23 10:00:01"), TimeDelta::days(400)),
        None
    );
}
