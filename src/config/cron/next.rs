//! cronexpr's `Next` search on the zone's wall clock, including how it lands on local times
//! that do not exist or exist twice.
//!
//! The search reads the wall-clock fields of the start time, finds the first field that does
//! not match, and builds the next candidate from the sorted value lists, exactly in the order
//! cronexpr's `Next`/`nextYear`…`nextSecond` do. Every candidate wall time is turned into an
//! instant with [`resolve`], which reproduces Go's `time.Date` (see there). No second-by-second
//! scanning happens: the cost is a handful of bitmap lookups per call.
//!
//! [`run_end`](CronExpr::run_end) and [`matches_wall`](CronExpr::matches_wall) serve the period
//! scanner: they answer "how long does a run of consecutive matching seconds last".

use chrono::{Datelike, NaiveDate, NaiveDateTime, TimeDelta, Timelike};

use super::field::Bits;
use super::CronExpr;

/// Offset (local minus UTC, in seconds) of the zone at a UTC instant.
pub(crate) type OffsetFn<'a> = &'a dyn Fn(NaiveDateTime) -> Option<i64>;

/// Upper bound on month/year hops in one search (130 years × 12 months, with margin). Only
/// reached if a zone moves a candidate backwards across a month boundary forever, where Go's
/// cronexpr would recurse until its stack overflows.
const MAX_HOPS: usize = 4096;

/// Go's `time.Date(wall…, loc)`: the wall time `w` read as UTC is `u`; take the offset in
/// force at `u`, step back by it, and use the offset in force *there*. For a wall time that
/// exists once this is the only answer. For a skipped wall time (spring forward) and for a
/// repeated one (fall back) the result depends on the sign of the offset:
///
/// * east of UTC (Europe/Berlin, Australia/Sydney): a skipped time moves forward by the gap
///   (02:30 → 03:30 CEST) and a repeated time resolves to its **second** occurrence;
/// * west of UTC (America/New_York): a skipped time moves back by the gap (02:30 → 01:30 EST)
///   and a repeated time resolves to its **first** occurrence.
pub(crate) fn resolve(w: NaiveDateTime, off: OffsetFn<'_>) -> Option<NaiveDateTime> {
    let o1 = off(w)?;
    let probe = w.checked_sub_signed(TimeDelta::seconds(o1))?;
    let o2 = off(probe)?;
    w.checked_sub_signed(TimeDelta::seconds(o2))
}

/// The wall time of a UTC instant.
pub(crate) fn to_wall(utc: NaiveDateTime, off: OffsetFn<'_>) -> Option<NaiveDateTime> {
    utc.checked_add_signed(TimeDelta::seconds(off(utc)?))
}

fn date(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> Option<NaiveDateTime> {
    NaiveDate::from_ymd_opt(y, mo, d)?.and_hms_opt(h, mi, s)
}

/// The wall-clock fields cronexpr reads from a time.
#[derive(Clone, Copy)]
struct Wall {
    y: i32,
    mo: u32,
    d: u32,
    h: u32,
    mi: u32,
    s: u32,
}

impl Wall {
    fn of(t: NaiveDateTime) -> Wall {
        Wall {
            y: t.year(),
            mo: t.month(),
            d: t.day(),
            h: t.hour(),
            mi: t.minute(),
            s: t.second(),
        }
    }
}

impl CronExpr {
    fn year_ge(&self, y: i32) -> Option<i32> {
        let from = u32::try_from(y.saturating_sub(1970)).unwrap_or(0);
        self.years.next_ge(from).map(|v| v as i32 + 1970)
    }

    fn firsts(&self) -> Option<(u32, u32, u32)> {
        Some((
            self.hours.first()?,
            self.minutes.first()?,
            self.seconds.first()?,
        ))
    }

    /// cronexpr's `Next` from the wall-clock fields `from`; returns a UTC instant.
    pub(crate) fn next_from_wall(
        &self,
        from: NaiveDateTime,
        off: OffsetFn<'_>,
    ) -> Option<NaiveDateTime> {
        let t = Wall::of(from);
        // year: past the list → no next time at all
        let y = self.year_ge(t.y)?;
        if y != t.y {
            return self.next_year(t.y, off);
        }
        // month
        match self.months.next_ge(t.mo) {
            None => return self.next_year(t.y, off),
            Some(m) if m != t.mo => return self.next_month(t.y, t.mo, off),
            Some(_) => {}
        }
        let days = self.days.actual(t.y, t.mo);
        if days.is_empty() {
            return self.next_month(t.y, t.mo, off);
        }
        match days.next_ge(t.d) {
            None => return self.next_month(t.y, t.mo, off),
            Some(d) if d != t.d => return self.next_day(t, &days, off),
            Some(_) => {}
        }
        match self.hours.next_ge(t.h) {
            None => return self.next_day(t, &days, off),
            Some(h) if h != t.h => return self.next_hour(t, &days, off),
            Some(_) => {}
        }
        match self.minutes.next_ge(t.mi) {
            None => return self.next_hour(t, &days, off),
            Some(m) if m != t.mi => return self.next_minute(t, &days, off),
            Some(_) => {}
        }
        match self.seconds.next_ge(t.s) {
            None => self.next_minute(t, &days, off),
            Some(_) => self.next_second(t, &days, off),
        }
    }

    fn next_second(&self, t: Wall, days: &Bits, off: OffsetFn<'_>) -> Option<NaiveDateTime> {
        match self.seconds.next_ge(t.s + 1) {
            None => self.next_minute(t, days, off),
            Some(s) => resolve(date(t.y, t.mo, t.d, t.h, t.mi, s)?, off),
        }
    }

    fn next_minute(&self, t: Wall, days: &Bits, off: OffsetFn<'_>) -> Option<NaiveDateTime> {
        match self.minutes.next_ge(t.mi + 1) {
            None => self.next_hour(t, days, off),
            Some(mi) => resolve(date(t.y, t.mo, t.d, t.h, mi, self.seconds.first()?)?, off),
        }
    }

    fn next_hour(&self, t: Wall, days: &Bits, off: OffsetFn<'_>) -> Option<NaiveDateTime> {
        match self.hours.next_ge(t.h + 1) {
            None => self.next_day(t, days, off),
            Some(h) => {
                let (_, mi0, s0) = self.firsts()?;
                resolve(date(t.y, t.mo, t.d, h, mi0, s0)?, off)
            }
        }
    }

    fn next_day(&self, t: Wall, days: &Bits, off: OffsetFn<'_>) -> Option<NaiveDateTime> {
        match days.next_ge(t.d + 1) {
            None => self.next_month(t.y, t.mo, off),
            Some(d) => {
                let (h0, mi0, s0) = self.firsts()?;
                resolve(date(t.y, t.mo, d, h0, mi0, s0)?, off)
            }
        }
    }

    fn next_year(&self, y: i32, off: OffsetFn<'_>) -> Option<NaiveDateTime> {
        self.hop(y, 0, true, off)
    }

    fn next_month(&self, y: i32, mo: u32, off: OffsetFn<'_>) -> Option<NaiveDateTime> {
        self.hop(y, mo, false, off)
    }

    /// cronexpr's mutually recursive `nextMonth`/`nextYear`, as a loop. When a month has no
    /// matching day, cronexpr builds the 1st of that month at the first hour/minute/second,
    /// lets `time.Date` normalise it and continues from that time's year and month; so do we.
    fn hop(
        &self,
        mut y: i32,
        mut mo: u32,
        mut year_mode: bool,
        off: OffsetFn<'_>,
    ) -> Option<NaiveDateTime> {
        let (h0, mi0, s0) = self.firsts()?;
        for _ in 0..MAX_HOPS {
            let (ny, nm) = if year_mode {
                (self.year_ge(y.checked_add(1)?)?, self.months.first()?)
            } else {
                match self.months.next_ge(mo + 1) {
                    None => {
                        year_mode = true;
                        continue;
                    }
                    Some(m) => (y, m),
                }
            };
            let days = self.days.actual(ny, nm);
            match days.first() {
                Some(d) => return resolve(date(ny, nm, d, h0, mi0, s0)?, off),
                None => {
                    let t = to_wall(resolve(date(ny, nm, 1, h0, mi0, s0)?, off)?, off)?;
                    y = t.year();
                    mo = t.month();
                    year_mode = false;
                }
            }
        }
        None
    }

    /// Whether the wall-clock second `w` matches every field.
    pub(crate) fn matches_wall(&self, w: NaiveDateTime) -> bool {
        let Ok(yo) = u32::try_from(w.year() - 1970) else {
            return false;
        };
        self.years.contains(yo)
            && self.months.contains(w.month())
            && self.hours.contains(w.hour())
            && self.minutes.contains(w.minute())
            && self.seconds.contains(w.second())
            && self.days.actual(w.year(), w.month()).contains(w.day())
    }

    /// Given a matching wall second `w`, the first wall second `>= w` that does not match,
    /// or `cap` if the run of matching seconds reaches it. Skips whole minutes, hours and days
    /// when the lower fields match every value.
    pub(crate) fn run_end(&self, w: NaiveDateTime, cap: NaiveDateTime) -> NaiveDateTime {
        let full_s = self.seconds.covers(0, 59);
        let full_m = self.minutes.covers(0, 59);
        let full_h = self.hours.covers(0, 23);
        let mut cur = w;
        loop {
            if cur >= cap {
                return cap;
            }
            if !self.matches_wall(cur) {
                return cur;
            }
            let day_start = cur.date().and_time(chrono::NaiveTime::MIN);
            let next = if !full_s {
                let end = self.seconds.run_end(cur.second());
                cur.with_second(0)
                    .and_then(|m| m.checked_add_signed(TimeDelta::seconds(i64::from(end) + 1)))
            } else if !full_m {
                let end = self.minutes.run_end(cur.minute());
                day_start.checked_add_signed(TimeDelta::seconds(
                    i64::from(cur.hour()) * 3600 + (i64::from(end) + 1) * 60,
                ))
            } else if !full_h {
                let end = self.hours.run_end(cur.hour());
                day_start.checked_add_signed(TimeDelta::hours(i64::from(end) + 1))
            } else {
                day_start.checked_add_signed(TimeDelta::days(1))
            };
            match next {
                Some(n) if n > cur => cur = n,
                _ => return cap,
            }
        }
    }
}
