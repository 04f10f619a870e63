//! Non-fatal findings about `Periods`: expressions gitlab-runner accepts but that almost
//! certainly do not mean what their author intended. Each finding names the entry and shows
//! the fix. Nothing here changes what a period matches; fatal problems come from
//! [`TimePeriod::compile`](super::TimePeriod::compile).

use chrono::{NaiveDate, TimeZone, Utc};

use crate::config::cron::{CronExpr, Field};

const MACRO_SPANS: [(&str, &str); 6] = [
    ("@yearly", "a year"),
    ("@annually", "a year"),
    ("@monthly", "a month"),
    ("@weekly", "a week"),
    ("@daily", "a day"),
    ("@hourly", "an hour"),
];

/// Findings for one `Periods` list, one message per finding (empty when all is well).
/// Entries that do not parse are skipped: `TimePeriod::compile` reports them.
pub fn lint_periods(periods: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    if periods.is_empty() {
        out.push("Periods is empty, so this section is never active".to_string());
    }
    for (i, p) in periods.iter().enumerate() {
        let Ok(expr) = CronExpr::parse(p) else {
            continue;
        };
        let at = format!("Periods[{i}] = {:?}", crate::config::cron::clip(p));
        lint_one(&at, p, &expr, &mut out);
    }
    out
}

fn lint_one(at: &str, p: &str, expr: &CronExpr, out: &mut Vec<String>) {
    let macro_used = MACRO_SPANS.iter().find(|(m, _)| p.contains(m));
    if let Some((m, span)) = macro_used {
        out.push(format!(
            "{at}: `{m}` fires for a single second, so as a period it is active for only ~1 s \
             {span}; write a 7-field expression covering the whole window, e.g. \
             `* * 9-17 * * mon-fri *` (every second of 09:00-17:59 on weekdays)"
        ));
    } else if expr.field_count() < 7 {
        let fix = if expr.field_count() == 5 {
            format!("* {} *", p.trim())
        } else {
            format!("* {}", p.trim())
        };
        out.push(format!(
            "{at}: the {}-field form fixes seconds to 0, so the period is active only during \
             the second before each matching minute; use the 7-field form `{fix}`",
            expr.field_count()
        ));
    } else if !expr.every_second() {
        let sec = expr.field_text(Field::Second).unwrap_or("?");
        out.push(format!(
            "{at}: seconds field `{sec}` makes the period active only in the second before each \
             listed second (with `*/2`: odd seconds in, even seconds out); write `*` for whole minutes"
        ));
    }
    for d in expr.descending() {
        let what = match d.field {
            Field::Year => "matches nothing".to_string(),
            Field::DayOfWeek | Field::DayOfMonth => {
                "matches nothing (ranges do not wrap around, as in gitlab-runner)".to_string()
            }
            f => format!("adds no {f} (ranges do not wrap around, as in gitlab-runner)"),
        };
        out.push(format!(
            "{at}: {} range `{}` is descending and {what}; write `{}`",
            d.field, d.entry, d.fix
        ));
    }
    if let Some(dow) = expr.field_text(Field::DayOfWeek) {
        for e in dow.split(',').filter(|e| !e.is_empty()) {
            let lower = e.to_ascii_lowercase();
            let Some((a, b)) = lower.split_once('-') else {
                continue;
            };
            let b = b.split('/').next().unwrap_or(b);
            let is_sunday0 = |t: &str| matches!(t, "0" | "00" | "sun" | "sunday");
            if is_sunday0(a) && matches!(b, "7" | "07") {
                out.push(format!(
                    "{at}: day-of-week range `{e}` matches only Sunday because 7 is Sunday too; \
                     write `*` (or `0-6`) for every day"
                ));
            }
        }
    }
    if expr.days_or() {
        let dom = expr.field_text(Field::DayOfMonth).unwrap_or("?");
        let dow = expr.field_text(Field::DayOfWeek).unwrap_or("?");
        out.push(format!(
            "{at}: day-of-month `{dom}` and day-of-week `{dow}` are both restricted, so a day \
             matches if EITHER matches (crontab rule); for \"the first Monday\" write \
             day-of-month `*` and day-of-week `mon#1`"
        ));
    }
    let start = NaiveDate::from_ymd_opt(1969, 12, 31).and_then(|d| d.and_hms_opt(23, 59, 59));
    if let Some(start) = start {
        if expr.next(&Utc.from_utc_datetime(&start)).is_none() && expr.descending().is_empty() {
            out.push(format!(
                "{at}: matches no date between 1970 and 2099 (e.g. the 30th of February), so it \
                 is never active"
            ));
        }
    }
}
