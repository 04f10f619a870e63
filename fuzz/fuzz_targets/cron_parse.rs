//! Fuzz target: any string given to the cron parser, the period compiler and the linter must
//! produce a value or an error, never a panic, a hang or a huge message; a parsed expression
//! must survive `next`, `in_period` and `next_change` in zones with DST.
#![no_main]

use chrono::{Datelike, TimeDelta, TimeZone, Utc};
use drover::config::cron::CronExpr;
use drover::config::periods::{lint_periods, TimePeriod};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = CronExpr::parse(text);
    let findings = lint_periods(&[text.to_string()]);
    match parsed {
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.is_empty());
        }
        Ok(expr) => {
            let starts = [
                Utc.with_ymd_and_hms(2026, 3, 29, 0, 59, 59),
                Utc.with_ymd_and_hms(2026, 11, 1, 5, 59, 59),
                Utc.with_ymd_and_hms(1969, 12, 31, 23, 59, 59),
                Utc.with_ymd_and_hms(2099, 12, 31, 23, 59, 59),
            ];
            for start in starts.iter().filter_map(|s| s.single()) {
                for tz in [
                    chrono_tz::UTC,
                    chrono_tz::Europe::Berlin,
                    chrono_tz::America::New_York,
                    chrono_tz::Australia::Sydney,
                ] {
                    if let Some(n) = expr.next(&start.with_timezone(&tz)) {
                        // Matches are confined to cronexpr's year range (local time).
                        assert!((1970..=2099).contains(&n.year()), "{text:?}: {n}");
                    }
                }
            }
            let list = vec![text.to_string()];
            if let Ok(p) = TimePeriod::compile(&list, "Europe/Berlin") {
                for start in starts.iter().filter_map(|s| s.single()) {
                    let _ = p.in_period(start);
                }
                // Jumping search away from DST; the per-second window around one change.
                if let Some(summer) = Utc.with_ymd_and_hms(2026, 7, 1, 12, 0, 0).single() {
                    if let Some(c) = p.next_change(summer, TimeDelta::days(3)) {
                        assert!(c > summer);
                    }
                }
                if let Some(spring) = starts[0].single() {
                    let _ = p.next_change(spring, TimeDelta::minutes(2));
                }
            }
            let _ = findings;
        }
    }
});
