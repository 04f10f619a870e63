//! Periods across DST changes in Europe/Berlin, America/New_York and Australia/Sydney.
//!
//! cronexpr turns candidate wall times into instants with Go's `time.Date`. East of UTC a
//! skipped wall time moves forward and a repeated one takes its second occurrence; west of UTC
//! a skipped time moves backward and a repeated one takes its first occurrence. The tables
//! below pin the consequences (all instants in UTC), worked out from that rule.

use chrono::{DateTime, NaiveDateTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use drover::config::cron::CronExpr;
use drover::config::periods::TimePeriod;

fn t(s: &str) -> DateTime<Utc> {
    let n = NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S")
        .unwrap_or_else(|e| panic!("bad test time {s}: {e}"));
    Utc.from_utc_datetime(&n)
}

fn period(expr: &str, zone: &str) -> TimePeriod {
    TimePeriod::compile(&[expr.to_string()], zone).unwrap_or_else(|e| panic!("{expr}: {e}"))
}

/// (zone, expression, now in UTC, expected)
const IN_PERIOD: &[(&str, &str, &str, bool)] = &[
    // --- Europe/Berlin, spring forward 2026-03-29 01:00Z (02:00 CET → 03:00 CEST).
    // Hour 2 does not exist that day: Date(02:00) lands on 03:00 CEST, so the period is
    // active for the single second before the jump.
    (
        "Europe/Berlin",
        "* * 2 * * * *",
        "2026-03-29 00:59:58",
        false,
    ),
    (
        "Europe/Berlin",
        "* * 2 * * * *",
        "2026-03-29 00:59:59",
        true,
    ),
    (
        "Europe/Berlin",
        "* * 2 * * * *",
        "2026-03-29 01:00:00",
        false,
    ),
    (
        "Europe/Berlin",
        "* * 2 * * * *",
        "2026-03-30 00:30:00",
        true,
    ), // 02:30 CEST next day
    // Every second stays on across the jump.
    (
        "Europe/Berlin",
        "* * * * * * *",
        "2026-03-29 00:59:59",
        true,
    ),
    (
        "Europe/Berlin",
        "* * * * * * *",
        "2026-03-29 01:00:00",
        true,
    ),
    // Business hours follow local time: 09:00 CEST = 07:00Z after the change.
    (
        "Europe/Berlin",
        "* * 9-17 * * * *",
        "2026-03-30 06:59:58",
        false,
    ),
    (
        "Europe/Berlin",
        "* * 9-17 * * * *",
        "2026-03-30 06:59:59",
        true,
    ),
    (
        "Europe/Berlin",
        "* * 9-17 * * * *",
        "2026-03-27 07:59:59",
        true,
    ), // 08:59:59 CET
    (
        "Europe/Berlin",
        "* * 9-17 * * * *",
        "2026-03-27 06:59:59",
        false,
    ),
    // --- Europe/Berlin, fall back 2026-10-25 01:00Z (03:00 CEST → 02:00 CET).
    // Repeated wall times resolve to the second (CET) occurrence, so during the first
    // (CEST) 02:xx hour "the next second" is an hour away: an always-on period is off
    // from 23:59:59Z to 00:59:59Z inclusive.
    (
        "Europe/Berlin",
        "* * * * * * *",
        "2026-10-24 23:59:58",
        true,
    ),
    (
        "Europe/Berlin",
        "* * * * * * *",
        "2026-10-24 23:59:59",
        false,
    ),
    (
        "Europe/Berlin",
        "* * * * * * *",
        "2026-10-25 00:30:00",
        false,
    ),
    (
        "Europe/Berlin",
        "* * * * * * *",
        "2026-10-25 00:59:59",
        false,
    ),
    (
        "Europe/Berlin",
        "* * * * * * *",
        "2026-10-25 01:00:00",
        true,
    ),
    (
        "Europe/Berlin",
        "* * * * * * *",
        "2026-10-25 01:30:00",
        true,
    ),
    // Hour 2 only during the second occurrence (CET), starting 1 s early.
    (
        "Europe/Berlin",
        "* * 2 * * * *",
        "2026-10-25 00:30:00",
        false,
    ),
    (
        "Europe/Berlin",
        "* * 2 * * * *",
        "2026-10-25 00:59:59",
        false,
    ),
    (
        "Europe/Berlin",
        "* * 2 * * * *",
        "2026-10-25 01:00:00",
        true,
    ),
    (
        "Europe/Berlin",
        "* * 2 * * * *",
        "2026-10-25 01:59:58",
        true,
    ),
    (
        "Europe/Berlin",
        "* * 2 * * * *",
        "2026-10-25 01:59:59",
        false,
    ),
    // --- America/New_York, spring forward 2026-03-08 07:00Z (02:00 EST → 03:00 EDT).
    // West of UTC a skipped time moves *back*: Date(02:00) is 01:00 EST. Hour 2 is then
    // "next" at 06:00Z, within 1 s of now for three seconds.
    (
        "America/New_York",
        "* * 2 * * * *",
        "2026-03-08 05:59:58",
        false,
    ),
    (
        "America/New_York",
        "* * 2 * * * *",
        "2026-03-08 05:59:59",
        true,
    ),
    (
        "America/New_York",
        "* * 2 * * * *",
        "2026-03-08 06:00:00",
        true,
    ),
    (
        "America/New_York",
        "* * 2 * * * *",
        "2026-03-08 06:00:01",
        true,
    ),
    (
        "America/New_York",
        "* * 2 * * * *",
        "2026-03-08 06:00:02",
        false,
    ),
    (
        "America/New_York",
        "* * 2 * * * *",
        "2026-03-08 06:59:59",
        false,
    ),
    (
        "America/New_York",
        "* * 2 * * * *",
        "2026-03-08 07:00:00",
        false,
    ),
    // Always-on drops for the one second before the jump (next = 01:00 EST, an hour back).
    (
        "America/New_York",
        "* * * * * * *",
        "2026-03-08 06:59:58",
        true,
    ),
    (
        "America/New_York",
        "* * * * * * *",
        "2026-03-08 06:59:59",
        false,
    ),
    (
        "America/New_York",
        "* * * * * * *",
        "2026-03-08 07:00:00",
        true,
    ),
    // --- America/New_York, fall back 2026-11-01 06:00Z (02:00 EDT → 01:00 EST).
    // Repeated times resolve to the first (EDT) occurrence: always-on is off during the
    // second (EST) 01:xx hour, starting one second before it.
    (
        "America/New_York",
        "* * * * * * *",
        "2026-11-01 05:59:58",
        true,
    ),
    (
        "America/New_York",
        "* * * * * * *",
        "2026-11-01 05:59:59",
        false,
    ),
    (
        "America/New_York",
        "* * * * * * *",
        "2026-11-01 06:30:00",
        false,
    ),
    (
        "America/New_York",
        "* * * * * * *",
        "2026-11-01 06:59:58",
        false,
    ),
    (
        "America/New_York",
        "* * * * * * *",
        "2026-11-01 06:59:59",
        true,
    ),
    (
        "America/New_York",
        "* * * * * * *",
        "2026-11-01 07:00:00",
        true,
    ),
    // Hour 1 only during the first (EDT) occurrence.
    (
        "America/New_York",
        "* * 1 * * * *",
        "2026-11-01 04:59:59",
        true,
    ),
    (
        "America/New_York",
        "* * 1 * * * *",
        "2026-11-01 05:30:00",
        true,
    ),
    (
        "America/New_York",
        "* * 1 * * * *",
        "2026-11-01 05:59:58",
        true,
    ),
    (
        "America/New_York",
        "* * 1 * * * *",
        "2026-11-01 05:59:59",
        false,
    ),
    (
        "America/New_York",
        "* * 1 * * * *",
        "2026-11-01 06:30:00",
        false,
    ),
    // Business hours: 09:00 EST = 14:00Z in winter, 13:00Z in summer.
    (
        "America/New_York",
        "* * 9-17 * * mon-fri *",
        "2026-11-02 13:59:59",
        true,
    ),
    (
        "America/New_York",
        "* * 9-17 * * mon-fri *",
        "2026-11-02 12:59:59",
        false,
    ),
    (
        "America/New_York",
        "* * 9-17 * * mon-fri *",
        "2026-10-30 12:59:59",
        true,
    ),
    // --- Australia/Sydney (southern hemisphere), DST ends 2026-04-05 at 16:00Z Apr 4
    // (03:00 AEDT → 02:00 AEST): east of UTC, so like Berlin's fall back.
    (
        "Australia/Sydney",
        "* * * * * * *",
        "2026-04-04 14:59:58",
        true,
    ),
    (
        "Australia/Sydney",
        "* * * * * * *",
        "2026-04-04 14:59:59",
        false,
    ),
    (
        "Australia/Sydney",
        "* * * * * * *",
        "2026-04-04 15:30:00",
        false,
    ),
    (
        "Australia/Sydney",
        "* * * * * * *",
        "2026-04-04 16:00:00",
        true,
    ),
    (
        "Australia/Sydney",
        "* * 2 * * * *",
        "2026-04-04 15:30:00",
        false,
    ),
    (
        "Australia/Sydney",
        "* * 2 * * * *",
        "2026-04-04 16:30:00",
        true,
    ),
    // DST starts 2026-10-04 at 16:00Z Oct 3 (02:00 AEST → 03:00 AEDT): like Berlin's spring.
    (
        "Australia/Sydney",
        "* * 2 * * * *",
        "2026-10-03 15:59:58",
        false,
    ),
    (
        "Australia/Sydney",
        "* * 2 * * * *",
        "2026-10-03 15:59:59",
        true,
    ),
    (
        "Australia/Sydney",
        "* * 2 * * * *",
        "2026-10-03 16:00:00",
        false,
    ),
    (
        "Australia/Sydney",
        "* * * * * * *",
        "2026-10-03 15:59:59",
        true,
    ),
    (
        "Australia/Sydney",
        "* * * * * * *",
        "2026-10-03 16:00:00",
        true,
    ),
    // Weekday mornings in Sydney: Monday 2026-10-05 08:00 AEDT = Sunday 21:00Z.
    (
        "Australia/Sydney",
        "* * 8-11 * * mon *",
        "2026-10-04 20:59:59",
        true,
    ),
    (
        "Australia/Sydney",
        "* * 8-11 * * mon *",
        "2026-10-04 20:59:58",
        false,
    ),
];

#[test]
fn dst_in_period_table() {
    let mut failures = Vec::new();
    for (zone, expr, now, want) in IN_PERIOD {
        let got = period(expr, zone).in_period(t(now));
        if got != *want {
            failures.push(format!("{zone} {expr:?} at {now}Z: got {got}, want {want}"));
        }
    }
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}

/// (zone, expression, after in UTC, expected next in UTC)
const NEXT: &[(&str, &str, &str, &str)] = &[
    // Skipped 02:30 moves forward east of UTC...
    (
        "Europe/Berlin",
        "0 30 2 * * * *",
        "2026-03-28 23:00:00",
        "2026-03-29 01:30:00",
    ),
    (
        "Australia/Sydney",
        "0 30 2 * * * *",
        "2026-10-03 14:00:00",
        "2026-10-03 16:30:00",
    ),
    // ...and backward west of UTC (02:30 → 01:30 EST = 06:30Z).
    (
        "America/New_York",
        "0 30 2 * * * *",
        "2026-03-08 05:00:00",
        "2026-03-08 06:30:00",
    ),
    // Repeated 02:30 takes the second occurrence east of UTC...
    (
        "Europe/Berlin",
        "0 30 2 * * * *",
        "2026-10-24 23:00:00",
        "2026-10-25 01:30:00",
    ),
    (
        "Australia/Sydney",
        "0 30 2 * * * *",
        "2026-04-04 14:00:00",
        "2026-04-04 16:30:00",
    ),
    // ...and the first west of UTC (01:30 EDT = 05:30Z).
    (
        "America/New_York",
        "0 30 1 * * * *",
        "2026-11-01 04:00:00",
        "2026-11-01 05:30:00",
    ),
    // From inside the second occurrence, New York's "next 01:30" is the first one again,
    // which is in the past: cronexpr's Next is not monotonic there.
    (
        "America/New_York",
        "0 30 1 * * * *",
        "2026-11-01 06:10:00",
        "2026-11-01 05:30:00",
    ),
    // Ordinary days are plain local time.
    (
        "America/New_York",
        "0 0 9 * * * *",
        "2026-07-01 00:00:00",
        "2026-07-01 13:00:00",
    ),
    (
        "Australia/Sydney",
        "0 0 9 * * * *",
        "2026-07-01 00:00:00",
        "2026-07-01 23:00:00",
    ),
];

#[test]
fn dst_next_table() {
    let mut failures = Vec::new();
    for (zone, expr, after, want) in NEXT {
        let tz: Tz = zone.parse().unwrap_or_else(|e| panic!("{zone}: {e}"));
        let e = CronExpr::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
        let got = e
            .next(&t(after).with_timezone(&tz))
            .map(|d| d.with_timezone(&Utc));
        if got != Some(t(want)) {
            failures.push(format!(
                "{zone} {expr:?} after {after}Z: got {got:?}, want {want}Z"
            ));
        }
    }
    assert!(failures.is_empty(), "mismatches:\n{}", failures.join("\n"));
}

/// `next_change` must agree with a second-by-second scan of `in_period` around each change.
#[test]
fn next_change_matches_brute_force_around_dst() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "Europe/Berlin",
            "2026-03-28 22:00:00",
            "2026-03-29 03:00:00",
        ),
        (
            "Europe/Berlin",
            "2026-10-24 22:00:00",
            "2026-10-25 03:00:00",
        ),
        (
            "America/New_York",
            "2026-03-08 04:00:00",
            "2026-03-08 09:00:00",
        ),
        (
            "America/New_York",
            "2026-11-01 03:00:00",
            "2026-11-01 08:00:00",
        ),
        (
            "Australia/Sydney",
            "2026-04-04 13:00:00",
            "2026-04-04 18:00:00",
        ),
        (
            "Australia/Sydney",
            "2026-10-03 13:00:00",
            "2026-10-03 18:00:00",
        ),
    ];
    let exprs = [
        "* * * * * * *",
        "* * 1 * * * *",
        "* * 2 * * * *",
        "* * 3 * * * *",
        "*/7 * 1-3 * * * *",
        "* 30-59 1 * * * *",
        "0 * * * *",
    ];
    for (zone, from, to) in cases {
        for expr in exprs {
            let p = period(expr, zone);
            let (start, end) = (t(from), t(to));
            // Brute force: every second.
            let mut brute = Vec::new();
            let mut prev = p.in_period(start);
            let mut s = start + TimeDelta::seconds(1);
            while s <= end {
                let v = p.in_period(s);
                if v != prev {
                    brute.push(s);
                    prev = v;
                }
                s += TimeDelta::seconds(1);
            }
            // next_change chain.
            let mut fast = Vec::new();
            let mut cur = start;
            while let Some(c) = p.next_change(cur, end - cur) {
                fast.push(c);
                cur = c;
            }
            assert_eq!(fast, brute, "{zone} {expr:?} {from}..{to}");
        }
    }
}
