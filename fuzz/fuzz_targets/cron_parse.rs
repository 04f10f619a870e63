//! Fuzz target: any string given to the cron parser, the period compiler and the linter must
//! produce a value or an error, never a panic, a hang or a huge message; a parsed expression
//! must survive `next`, `in_period` and `next_change` in zones with DST.
#![no_main]

use chrono::{TimeDelta, TimeZone, Utc};
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
                        assert!(n.timestamp() > 0);
                    }
                }
            }
            let list = vec![text.to_string()];
            if let Ok(p) = TimePeriod::compile(&list, "Europe/Berlin") {
                for start in starts.iter().filter_map(|s| s.single()) {
                    let _ = p.in_period(start);
                    let _ = p.next_change(start, TimeDelta::hours(3));
                }
            }
            let _ = findings;
        }
    }
});
