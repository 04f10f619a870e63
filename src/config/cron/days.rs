//! The two day fields and cronexpr's per-month day list.
//!
//! Day-of-month and day-of-week are parsed into specs; [`Days::actual`] turns them into the
//! bitmap of matching days for one month, the way cronexpr's `calculateActualDaysOfMonth`
//! does: if both fields are restricted (neither is a wildcard entry) a day matches when either
//! matches; if one is a wildcard, only the other counts; if both are, every day matches.

use chrono::{Datelike, NaiveDate};

use super::error::{CronError, Field};
use super::field::{parse_entries, populate, syntax_hint, value, Bits, Descending, Entry};

/// Parsed day-of-month and day-of-week fields.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Days {
    pub(crate) dom_restricted: bool,
    dom: Bits,
    workdays: Bits,
    last_day: bool,
    last_workday: bool,
    pub(crate) dow_restricted: bool,
    dow: Bits,
    /// Encoded `(week - 1) * 7 + weekday` for `weekday#week`.
    specific: Bits,
    /// Weekdays for `weekdayL`.
    last_week: Bits,
}

impl Days {
    pub(crate) fn parse(
        dom_text: &str,
        dow_text: &str,
        descending: &mut Vec<Descending>,
    ) -> Result<Days, CronError> {
        let mut d = Days {
            dom_restricted: true,
            dom: Bits::default(),
            workdays: Bits::default(),
            last_day: false,
            last_workday: false,
            dow_restricted: true,
            dow: Bits::default(),
            specific: Bits::default(),
            last_week: Bits::default(),
        };
        d.parse_dom(dom_text, descending)?;
        d.parse_dow(dow_text, descending)?;
        Ok(d)
    }

    fn span(
        field: Field,
        raw: &str,
        set: &mut Bits,
        (first, last, step): (u32, u32, u32),
        descending: &mut Vec<Descending>,
    ) {
        if first > last {
            descending.push(Descending {
                field,
                entry: raw.to_string(),
                fix: super::field::descending_fix(field, raw, first, last, step),
            });
        }
        populate(set, first, last, step);
    }

    fn parse_dom(&mut self, text: &str, descending: &mut Vec<Descending>) -> Result<(), CronError> {
        let field = Field::DayOfMonth;
        for (raw, entry) in parse_entries(field, text)? {
            match entry {
                Entry::All => self.dom_restricted = false,
                Entry::One(v) => self.dom.insert(v),
                Entry::Span { first, last, step } => {
                    Self::span(field, raw, &mut self.dom, (first, last, step), descending)
                }
                Entry::Special => {
                    let e = raw.to_ascii_lowercase();
                    if e == "l" {
                        self.last_day = true;
                    } else if e == "lw" {
                        self.last_workday = true;
                    } else if let Some(v) = e.strip_suffix('w').and_then(|n| value(field, n)) {
                        self.workdays.insert(v);
                    } else {
                        return Err(CronError::Syntax {
                            field,
                            entry: raw.to_string(),
                            hint: syntax_hint(field, &e),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    fn parse_dow(&mut self, text: &str, descending: &mut Vec<Descending>) -> Result<(), CronError> {
        let field = Field::DayOfWeek;
        for (raw, entry) in parse_entries(field, text)? {
            match entry {
                Entry::All => self.dow_restricted = false,
                Entry::One(v) => self.dow.insert(v),
                Entry::Span { first, last, step } => {
                    Self::span(field, raw, &mut self.dow, (first, last, step), descending)
                }
                Entry::Special => {
                    let e = raw.to_ascii_lowercase();
                    if let Some(v) = e.strip_suffix('l').and_then(|n| value(field, n)) {
                        self.last_week.insert(v);
                    } else if let Some((v, week)) = e.split_once('#').and_then(|(d, w)| {
                        let week = match w.as_bytes() {
                            [c @ b'1'..=b'5'] => u32::from(c - b'0'),
                            _ => return None,
                        };
                        Some((value(field, d)?, week))
                    }) {
                        self.specific.insert((week - 1) * 7 + v % 7);
                    } else {
                        return Err(CronError::Syntax {
                            field,
                            entry: raw.to_string(),
                            hint: syntax_hint(field, &e),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// The days of `year-month` that match, as a bitmap over 1..=31 (0 if the month is invalid).
    pub(crate) fn actual(&self, year: i32, month: u32) -> Bits {
        let mut out = Bits::default();
        let Some(first) = NaiveDate::from_ymd_opt(year, month, 1) else {
            return out;
        };
        let last = days_in_month(year, month);
        if !self.dom_restricted && !self.dow_restricted {
            populate(&mut out, 1, last, 1);
            return out;
        }
        if self.dom_restricted {
            if self.last_day {
                out.insert(last);
            }
            if self.last_workday {
                out.insert(workday(last, weekday_of(first, last), last));
            }
            for v in 1..=last {
                if self.dom.contains(v) {
                    out.insert(v);
                }
                if self.workdays.contains(v) {
                    out.insert(workday(v, weekday_of(first, v), last));
                }
            }
        }
        if self.dow_restricted {
            let wd1 = first.weekday().num_days_from_sunday();
            // Day of month of the first `d`-day: 1 + (7 - wd1 + d) % 7.
            let first_of = |d: u32| 1 + (7 - wd1 + d) % 7;
            for d in 0..7 {
                if self.dow.contains(d) {
                    let mut day = first_of(d);
                    while day <= last {
                        out.insert(day);
                        day += 7;
                    }
                }
            }
            for code in 0..35 {
                if self.specific.contains(code) {
                    let day = 1 + 7 * (code / 7) + (7 - wd1 + code % 7) % 7;
                    if day <= last {
                        out.insert(day);
                    }
                }
            }
            // The last week is the 7 days ending on the last day of the month.
            let origin = last - 6;
            let wd_origin = (wd1 + origin - 1) % 7;
            for d in 0..7 {
                if self.last_week.contains(d) {
                    out.insert(origin + (7 - wd_origin + d) % 7);
                }
            }
        }
        out
    }
}

/// Weekday (0 = Sunday) of day `day` in the month whose first day is `first`.
fn weekday_of(first: NaiveDate, day: u32) -> u32 {
    (first.weekday().num_days_from_sunday() + day - 1) % 7
}

/// cronexpr's `workdayOfMonth`: Saturday moves to Friday (or to Monday the 3rd if it is the
/// 1st), Sunday moves to Monday (or to Friday if it is the last day); months are not crossed.
fn workday(day: u32, weekday: u32, last: u32) -> u32 {
    match weekday {
        6 if day > 1 => day - 1,
        6 => day + 2,
        0 if day < last => day + 1,
        0 => day.saturating_sub(2),
        _ => day,
    }
}

/// Number of days in `year-month` (28-31).
pub(crate) fn days_in_month(year: i32, month: u32) -> u32 {
    let (ny, nm) = if month >= 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    match (
        NaiveDate::from_ymd_opt(year, month, 1),
        NaiveDate::from_ymd_opt(ny, nm, 1),
    ) {
        (Some(a), Some(b)) => (b - a).num_days() as u32,
        _ => 0,
    }
}
