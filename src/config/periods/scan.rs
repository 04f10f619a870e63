//! `next_change`: when a period's `in_period` value flips next, without scanning every second.
//!
//! Away from DST changes the zone's offset is constant, so `in_period(S)` for a whole second
//! `S` is exactly "the wall second after `S` matches some expression". Then:
//! * while inactive, nothing can change before `min(next) - 1 s`;
//! * while active, nothing can change before the end of the run of consecutive matching wall
//!   seconds (computed field by field, see `CronExpr::run_end`).
//!
//! Near a DST change cronexpr's `time.Date` quirks make `in_period` deviate from that rule, so
//! within `|shift| + 60 s` of a change the scan steps one second at a time and asks
//! `in_period` directly. Offsets are sampled hourly to find changes; two changes less than an
//! hour apart that cancel out would be missed (no zone in the database does this).

use chrono::{DateTime, Offset, TimeDelta, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

use super::TimePeriod;
use crate::config::cron::CronExpr;

const SAMPLE: i64 = 3600;
const MARGIN: i64 = 3 * 3600;

fn offset(tz: Tz, t: DateTime<Utc>) -> i64 {
    i64::from(
        tz.offset_from_utc_datetime(&t.naive_utc())
            .fix()
            .local_minus_utc(),
    )
}

fn add(t: DateTime<Utc>, secs: i64) -> Option<DateTime<Utc>> {
    t.checked_add_signed(TimeDelta::seconds(secs))
}

/// The first offset change in `(from, to]`, with the size of the shift in seconds.
fn first_transition(
    tz: Tz,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Option<(DateTime<Utc>, i64)> {
    let mut lo = from;
    let base = offset(tz, from);
    while lo < to {
        let hi = add(lo, SAMPLE)?.min(to);
        let oh = offset(tz, hi);
        if oh != base {
            // Binary search for the first second with the new offset.
            let (mut a, mut b) = (lo, hi);
            while (b - a).num_seconds() > 1 {
                let mid = add(a, (b - a).num_seconds() / 2)?;
                if offset(tz, mid) == base {
                    a = mid;
                } else {
                    b = mid;
                }
            }
            return Some((b, (oh - base).abs()));
        }
        lo = hi;
    }
    None
}

/// First wall second `>= w` that no expression matches (or `cap`).
fn union_run_end(
    exprs: &[CronExpr],
    w: chrono::NaiveDateTime,
    cap: chrono::NaiveDateTime,
) -> chrono::NaiveDateTime {
    let mut cur = w;
    while cur < cap {
        let best = exprs
            .iter()
            .filter(|e| e.matches_wall(cur))
            .map(|e| e.run_end(cur, cap))
            .max();
        match best {
            Some(r) if r > cur => cur = r,
            _ => return cur,
        }
    }
    cap
}

/// The window around a DST change in which the scan steps second by second.
fn window(t: DateTime<Utc>, shift: i64) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let w = (shift + 60).min(MARGIN - 60);
    Some((add(t, -w)?, add(t, w)?))
}

/// The first whole second after `s` at which the value might differ from `in_period(s)`.
fn jump(
    p: &TimePeriod,
    s: DateTime<Utc>,
    active: bool,
    limit: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let tz = p.zone();
    let step = add(s, 1)?;
    // Inside the window of a nearby DST change: one second at a time.
    let mut from = add(s, -MARGIN).unwrap_or(s);
    let near = add(s, MARGIN).unwrap_or(s);
    while let Some((t, shift)) = first_transition(tz, from, near) {
        let (start, end) = window(t, shift)?;
        if s >= start && s <= end {
            return Some(step);
        }
        from = t;
    }
    let off = offset(tz, s);
    let beyond = add(limit, 1).unwrap_or(limit);
    let target = if active {
        let wall = step
            .naive_utc()
            .checked_add_signed(TimeDelta::seconds(off))?;
        let cap = beyond
            .naive_utc()
            .checked_add_signed(TimeDelta::seconds(off + 1))?;
        let end = union_run_end(p.expressions(), wall, cap);
        let t = end.checked_sub_signed(TimeDelta::seconds(off + 1))?;
        Utc.from_utc_datetime(&t)
    } else {
        let local = s.with_timezone(&tz);
        match p.expressions().iter().filter_map(|e| e.next(&local)).min() {
            Some(n) => add(n.with_timezone(&Utc), -1)?,
            // No expression has a next time any more (year lists exhausted), and that only
            // gets truer later: the period stays inactive for good.
            None => return Some(beyond),
        }
    };
    let target = target.max(step).min(beyond);
    // Stop at the window of the next DST change (s itself is outside every window).
    let to = add(target, MARGIN).unwrap_or(target);
    if let Some((t, shift)) = first_transition(tz, s, to) {
        let (start, _) = window(t, shift)?;
        return Some(target.min(start).max(step));
    }
    Some(target)
}

pub(super) fn next_change(
    p: &TimePeriod,
    after: DateTime<Utc>,
    horizon: TimeDelta,
) -> Option<DateTime<Utc>> {
    if horizon <= TimeDelta::zero() {
        return None;
    }
    let limit = after
        .checked_add_signed(horizon)
        .unwrap_or(DateTime::<Utc>::MAX_UTC);
    let current = p.in_period(after);
    let mut s = add(after.with_nanosecond(0)?, 1)?;
    while s <= limit {
        if p.in_period(s) != current {
            return Some(s);
        }
        let next = jump(p, s, current, limit)?;
        if next <= s {
            return None;
        }
        s = next;
    }
    None
}
