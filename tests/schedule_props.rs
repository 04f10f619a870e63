//! Property tests: random expressions whose value sets the test knows independently, checked
//! against a naive second-by-second matcher written here.
//!
//! * `next(t)` is strictly after `t`, matches, and no matching second is skipped;
//! * `in_period(t)` holds iff a matching second lies in `(t, t + 1 s]`;
//! * `next_change` finds exactly the flips a second-by-second scan finds.
//!
//! Zones: UTC, and Europe/Berlin / America/New_York / Australia/Sydney away from DST changes
//! (the DST behaviour itself is pinned by `schedule_dst.rs`).

use std::collections::BTreeSet;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, TimeDelta, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use drover::config::cron::CronExpr;
use drover::config::periods::TimePeriod;
use proptest::prelude::*;

/// One field: its text and the values it stands for.
#[derive(Debug, Clone)]
struct F {
    text: String,
    values: BTreeSet<u32>,
    wildcard: bool,
}

fn field(min: u32, max: u32) -> impl Strategy<Value = F> {
    let all = move || (min..=max).collect::<BTreeSet<u32>>();
    prop_oneof![
        Just(F {
            text: "*".into(),
            values: all(),
            wildcard: true
        }),
        (min..=max).prop_map(|v| F {
            text: v.to_string(),
            values: [v].into(),
            wildcard: false
        }),
        (min..=max, min..=max).prop_map(|(a, b)| {
            let (a, b) = (a.min(b), a.max(b));
            F {
                text: format!("{a}-{b}"),
                values: (a..=b).collect(),
                wildcard: false,
            }
        }),
        (1..=max.max(1)).prop_map(move |n| F {
            text: format!("*/{n}"),
            values: (min..=max).step_by(n as usize).collect(),
            wildcard: false,
        }),
        (min..=max, 1..=max.max(1)).prop_map(move |(a, n)| F {
            text: format!("{a}/{n}"),
            values: (a..=max).step_by(n as usize).collect(),
            wildcard: false,
        }),
        (min..=max, min..=max).prop_map(|(a, b)| F {
            text: format!("{a},{b}"),
            values: [a, b].into(),
            wildcard: false,
        }),
    ]
}

/// Dense fields (so matches are frequent enough for windowed checks).
fn dense(min: u32, max: u32) -> impl Strategy<Value = F> {
    prop_oneof![
        3 => Just(F { text: "*".into(), values: (min..=max).collect(), wildcard: true }),
        1 => field(min, max),
    ]
}

#[derive(Debug, Clone)]
struct Expr {
    text: String,
    sec: F,
    min: F,
    hour: F,
    dom: F,
    month: F,
    dow: F,
}

fn expr() -> impl Strategy<Value = Expr> {
    (
        field(0, 59),
        dense(0, 59),
        dense(0, 23),
        dense(1, 31),
        dense(1, 12),
        dense(0, 6),
    )
        .prop_map(|(sec, min, hour, dom, month, dow)| Expr {
            text: format!(
                "{} {} {} {} {} {} *",
                sec.text, min.text, hour.text, dom.text, month.text, dow.text
            ),
            sec,
            min,
            hour,
            dom,
            month,
            dow,
        })
}

impl Expr {
    /// The naive matcher: every field, with crontab's either-day rule.
    fn matches(&self, w: NaiveDateTime) -> bool {
        let dom_ok = self.dom.values.contains(&w.day());
        let dow_ok = self
            .dow
            .values
            .contains(&w.weekday().num_days_from_sunday());
        let day_ok = match (self.dom.wildcard, self.dow.wildcard) {
            (true, true) => true,
            (false, true) => dom_ok,
            (true, false) => dow_ok,
            (false, false) => dom_ok || dow_ok,
        };
        day_ok
            && self.sec.values.contains(&w.second())
            && self.min.values.contains(&w.minute())
            && self.hour.values.contains(&w.hour())
            && self.month.values.contains(&w.month())
    }
}

fn zone() -> impl Strategy<Value = Tz> {
    prop_oneof![
        Just(Tz::UTC),
        Just(chrono_tz::Europe::Berlin),
        Just(chrono_tz::America::New_York),
        Just(chrono_tz::Australia::Sydney),
    ]
}

/// Instants in 2026 away from every DST change of the three zones (January and July).
fn instant() -> impl Strategy<Value = DateTime<Utc>> {
    (
        prop_oneof![Just(1u32), Just(7u32)],
        1u32..=28,
        0i64..86_400,
        0u32..1_000_000_000,
    )
        .prop_map(|(m, d, secs, nanos)| {
            let base = NaiveDate::from_ymd_opt(2026, m, d)
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .unwrap_or_default();
            Utc.from_utc_datetime(&base)
                + TimeDelta::seconds(secs)
                + TimeDelta::nanoseconds(i64::from(nanos))
        })
}

fn floor(t: DateTime<Utc>) -> DateTime<Utc> {
    t.with_nanosecond(0).unwrap_or(t)
}

const WINDOW: i64 = 900;

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn next_is_the_first_match_after(e in expr(), tz in zone(), t in instant()) {
        let parsed = CronExpr::parse(&e.text).map_err(|err| TestCaseError::fail(format!("{}: {err}", e.text)))?;
        let local = t.with_timezone(&tz);
        let next = parsed.next(&local);
        // Scan the window second by second with the naive matcher.
        let start = floor(t);
        let mut first = None;
        for k in 1..=WINDOW {
            let s = start + TimeDelta::seconds(k);
            if e.matches(s.with_timezone(&tz).naive_local()) {
                first = Some(s);
                break;
            }
        }
        match (first, next) {
            (Some(f), n) => prop_assert_eq!(n.map(|n| n.with_timezone(&Utc)), Some(f), "{}", e.text),
            (None, Some(n)) => {
                let n = n.with_timezone(&Utc);
                prop_assert!(n > start + TimeDelta::seconds(WINDOW), "{}: next {} inside empty window", e.text, n);
                prop_assert!(e.matches(n.with_timezone(&tz).naive_local()), "{}: next {} does not match", e.text, n);
                prop_assert_eq!(n.nanosecond(), 0);
            }
            (None, None) => {}
        }
    }

    #[test]
    fn in_period_is_match_within_one_second(e in expr(), tz in zone(), t in instant()) {
        let p = TimePeriod::compile(std::slice::from_ref(&e.text), tz.name())
            .map_err(|err| TestCaseError::fail(format!("{}: {err}", e.text)))?;
        // Matching seconds are whole seconds, so (t, t+1s] holds exactly floor(t)+1s.
        let want = e.matches((floor(t) + TimeDelta::seconds(1)).with_timezone(&tz).naive_local());
        prop_assert_eq!(p.in_period(t), want, "{} at {}", e.text, t);
    }

    #[test]
    fn next_change_agrees_with_scan(e in expr(), e2 in expr(), tz in zone(), t in instant()) {
        let list = vec![e.text.clone(), e2.text.clone()];
        let p = TimePeriod::compile(&list, tz.name())
            .map_err(|err| TestCaseError::fail(format!("{list:?}: {err}")))?;
        let horizon = TimeDelta::seconds(WINDOW);
        let end = t + horizon;
        let mut brute = Vec::new();
        let mut prev = p.in_period(t);
        let mut s = floor(t) + TimeDelta::seconds(1);
        while s <= end {
            let v = p.in_period(s);
            if v != prev {
                brute.push(s);
                prev = v;
            }
            s += TimeDelta::seconds(1);
        }
        let mut fast = Vec::new();
        let mut cur = t;
        while let Some(c) = p.next_change(cur, end - cur) {
            prop_assert!(c > cur);
            fast.push(c);
            cur = c;
        }
        prop_assert_eq!(fast, brute, "{:?}", list);
    }
}

#[test]
fn next_change_skips_long_stretches_quickly() {
    // A year-long search must not scan seconds: these would take minutes if it did.
    let cases: &[(&str, &str)] = &[
        ("* * * * * * *", "Europe/Berlin"),
        ("* * 9-17 * * mon-fri *", "America/New_York"),
        ("* * * 29 feb * *", "Australia/Sydney"),
        ("@yearly", "UTC"),
        ("* * * * * * 2020", "UTC"),
    ];
    let start = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .unwrap_or_default();
    for (e, z) in cases {
        let p = TimePeriod::compile(&[e.to_string()], z).unwrap_or_else(|err| panic!("{e}: {err}"));
        let mut cur = start;
        let mut flips = 0;
        while let Some(c) = p.next_change(cur, TimeDelta::days(366) - (cur - start)) {
            assert!(c > cur);
            cur = c;
            flips += 1;
            assert!(flips < 2000, "{e}: too many flips");
        }
    }
}
