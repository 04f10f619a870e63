//! Field and entry parsing with cronexpr's token rules.
//!
//! A field is split on commas (empty pieces are skipped); each entry is lowercased and then
//! classified in cronexpr's order: wildcard (`*`, `?`), single value, `a-b`, `*/n`, `a/n`,
//! `a-b/n`, and finally "special" (`L`, `LW`, `15W`, `5L`, `5#3`), which only day-of-month and
//! day-of-week understand. Value tokens follow cronexpr's patterns exactly: at most one leading
//! zero, names only in month and day-of-week, and `7` as an alias of Sunday. Steps accept what
//! cronexpr's number table knows (`0`-`59`, `00`-`09`, `1970`-`2099`); anything else counts as
//! step 0 and is rejected. This module only parses; evaluation lives in `next.rs`.

use super::error::{CronError, Field};

/// A set of small integers (0..192) as a bitmap, with "next value at or after" lookups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub(crate) struct Bits([u64; 3]);

impl Bits {
    pub(crate) fn insert(&mut self, v: u32) {
        if let Some(word) = self.0.get_mut((v / 64) as usize) {
            *word |= 1u64 << (v % 64);
        }
    }

    pub(crate) fn contains(&self, v: u32) -> bool {
        self.0
            .get((v / 64) as usize)
            .is_some_and(|w| w & (1u64 << (v % 64)) != 0)
    }

    /// The smallest member `>= v`.
    pub(crate) fn next_ge(&self, v: u32) -> Option<u32> {
        let mut idx = (v / 64) as usize;
        let mut bit = v % 64;
        while let Some(word) = self.0.get(idx) {
            let masked = word & (u64::MAX << bit);
            if masked != 0 {
                return Some(idx as u32 * 64 + masked.trailing_zeros());
            }
            idx += 1;
            bit = 0;
        }
        None
    }

    pub(crate) fn first(&self) -> Option<u32> {
        self.next_ge(0)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }

    /// Whether every value in `lo..=hi` is a member.
    pub(crate) fn covers(&self, lo: u32, hi: u32) -> bool {
        (lo..=hi).all(|v| self.contains(v))
    }

    /// The last member of the run of consecutive members starting at `v` (which must be one).
    pub(crate) fn run_end(&self, v: u32) -> u32 {
        let mut end = v;
        while self.contains(end + 1) {
            end += 1;
        }
        end
    }
}

/// How one comma-separated entry was classified (cronexpr's directive kinds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// `*` or `?`.
    All,
    /// A single value.
    One(u32),
    /// `a-b`, `*/n`, `a/n` or `a-b/n`: values `first, first+step, … <= last`.
    Span { first: u32, last: u32, step: u32 },
    /// Anything else; only day-of-month and day-of-week give it a meaning.
    Special,
}

/// A descending range found while parsing, with the wrap-around the user probably meant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Descending {
    pub(crate) field: Field,
    pub(crate) entry: String,
    pub(crate) fix: String,
}

/// Numbers as cronexpr's `numberTokens` table knows them; anything else maps to 0.
fn number_token(s: &str) -> u32 {
    let b = s.as_bytes();
    if !b.iter().all(u8::is_ascii_digit) {
        return 0;
    }
    match b.len() {
        1 => u32::from(b[0] - b'0'),
        2 => {
            let v = u32::from(b[0] - b'0') * 10 + u32::from(b[1] - b'0');
            if v <= 59 {
                v
            } else {
                0
            }
        }
        4 => s
            .parse::<u32>()
            .ok()
            .filter(|v| (1970..=2099).contains(v))
            .unwrap_or(0),
        _ => 0,
    }
}

/// The value of one or two ASCII digits.
fn small_number(b: &[u8]) -> u32 {
    b.iter()
        .fold(0, |acc, d| acc * 10 + u32::from(d.wrapping_sub(b'0')))
}

const MONTHS: [&str; 12] = [
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
const DAYS: [&str; 7] = [
    "sunday",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
];

/// The three-letter name of a month (1-12) or day of week (0-6).
pub(crate) fn short_name(field: Field, v: u32) -> Option<&'static str> {
    let full = match field {
        Field::Month => MONTHS.get(v.checked_sub(1)? as usize)?,
        Field::DayOfWeek => DAYS.get(v as usize)?,
        _ => return None,
    };
    full.get(..3)
}

fn name_value(names: &[&str], s: &str) -> Option<usize> {
    names
        .iter()
        .position(|full| s == *full || (s.len() == 3 && full.get(..3) == Some(s)))
}

/// Matches one lowercased token against the field's value pattern and returns cronexpr's value.
pub(crate) fn value(field: Field, s: &str) -> Option<u32> {
    let b = s.as_bytes();
    let digits = !b.is_empty() && b.iter().all(u8::is_ascii_digit);
    match field {
        Field::Second | Field::Minute | Field::Hour | Field::DayOfMonth => {
            // `0?[0-9]|[1-5][0-9]` and friends: one or two digits, one leading zero at most.
            if !digits || b.len() > 2 {
                return None;
            }
            let v = small_number(b);
            let (lo, hi) = (field.min(), field.max());
            (lo..=hi).contains(&v).then_some(v)
        }
        Field::Month => {
            if digits {
                if b.len() > 2 {
                    return None;
                }
                let v = small_number(b);
                return (1..=12).contains(&v).then_some(v);
            }
            name_value(&MONTHS, s).map(|i| i as u32 + 1)
        }
        Field::DayOfWeek => {
            if digits {
                // `0?[0-7]`; `7` and `07` both mean Sunday.
                let v = match b {
                    [d] | [b'0', d] => u32::from(*d - b'0'),
                    _ => return None,
                };
                return (v <= 7).then_some(v % 7);
            }
            name_value(&DAYS, s).map(|i| i as u32)
        }
        Field::Year => {
            if !digits || b.len() != 4 {
                return None;
            }
            let v = s.parse::<u32>().ok()?;
            (1970..=2099).contains(&v).then_some(v)
        }
    }
}

fn step(field: Field, entry: &str, digits: &str) -> Result<Option<u32>, CronError> {
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return Ok(None);
    }
    let n = number_token(digits);
    if n < 1 || n > field.max() {
        return Err(CronError::InvalidStep {
            field,
            entry: entry.to_string(),
        });
    }
    Ok(Some(n))
}

/// Classifies one lowercased entry.
pub(crate) fn classify(field: Field, e: &str) -> Result<Entry, CronError> {
    if e == "*" || e == "?" {
        return Ok(Entry::All);
    }
    if let Some(v) = value(field, e) {
        return Ok(Entry::One(v));
    }
    if let Some((a, b)) = e.split_once('-') {
        if let (Some(first), Some(last)) = (value(field, a), value(field, b)) {
            return Ok(Entry::Span {
                first,
                last,
                step: 1,
            });
        }
    }
    if let Some(rest) = e.strip_prefix("*/") {
        if let Some(n) = step(field, e, rest)? {
            return Ok(Entry::Span {
                first: field.min(),
                last: field.max(),
                step: n,
            });
        }
    }
    if let Some((a, rest)) = e.split_once('/') {
        if let Some(first) = value(field, a) {
            if let Some(n) = step(field, e, rest)? {
                return Ok(Entry::Span {
                    first,
                    last: field.max(),
                    step: n,
                });
            }
        }
        if let Some((lo, hi)) = a.split_once('-') {
            if let (Some(first), Some(last)) = (value(field, lo), value(field, hi)) {
                if let Some(n) = step(field, e, rest)? {
                    return Ok(Entry::Span {
                        first,
                        last,
                        step: n,
                    });
                }
            }
        }
    }
    Ok(Entry::Special)
}

/// Splits a field into its non-empty comma-separated entries, with their original text.
pub(crate) fn entries(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').filter(|s| !s.is_empty())
}

/// Inserts `first, first+step, … <= last` (nothing if the range is descending).
pub(crate) fn populate(set: &mut Bits, first: u32, last: u32, step: u32) {
    let mut v = first;
    while v <= last {
        set.insert(v);
        match v.checked_add(step.max(1)) {
            Some(n) => v = n,
            None => break,
        }
    }
}

/// Renders a value the way the user wrote its neighbour: a name if they used names.
fn render(field: Field, v: u32, names: bool) -> String {
    if names {
        if let Some(n) = short_name(field, v) {
            return n.to_string();
        }
    }
    v.to_string()
}

/// The wrap-around meaning of a descending `first-last[/step]` range, e.g. `22-6` →
/// `22-23,0-6`, `sat-sun` → `sat,sun`. Years do not wrap: the fix is the ascending range.
pub(crate) fn descending_fix(
    field: Field,
    entry: &str,
    first: u32,
    last: u32,
    step: u32,
) -> String {
    let names = entry.bytes().any(|c| c.is_ascii_alphabetic());
    let (min, max) = (field.min(), field.max());
    let part = |lo: u32, hi: u32| -> String {
        let lo_s = render(field, lo, names);
        if lo == hi || (step > 1 && lo + step > hi) {
            lo_s
        } else if step > 1 {
            format!("{lo_s}-{}/{step}", render(field, hi, names))
        } else {
            format!("{lo_s}-{}", render(field, hi, names))
        }
    };
    if field == Field::Year {
        return part(last, first);
    }
    let mut out = part(first, max);
    let last_first = first + (max - first) / step.max(1) * step.max(1);
    let cycle = max - min + 1;
    let second = last_first + step.max(1);
    if second >= cycle + min {
        let c = second - cycle;
        if c <= last {
            out.push(',');
            out.push_str(&part(c, last));
        }
    }
    out
}

/// Parses a generic field (second, minute, hour, month, year) into its value set, as
/// cronexpr's `genericFieldHandler` does: the first wildcard ends the scan (later entries are
/// not checked), an unclassifiable entry before it is an error.
pub(crate) fn generic(
    field: Field,
    text: &str,
    offset: u32,
    descending: &mut Vec<Descending>,
) -> Result<Bits, CronError> {
    let parsed = parse_entries(field, text)?;
    let mut set = Bits::default();
    let mut found = Vec::new();
    for (raw, entry) in parsed {
        match entry {
            Entry::Special => {
                return Err(CronError::Syntax {
                    field,
                    entry: raw.to_string(),
                    hint: syntax_hint(field, &raw.to_ascii_lowercase()),
                })
            }
            Entry::One(v) => set.insert(v - offset),
            Entry::Span { first, last, step } => {
                if first > last {
                    found.push(Descending {
                        field,
                        entry: raw.to_string(),
                        fix: descending_fix(field, raw, first, last, step),
                    });
                }
                // Years are stored as offsets from 1970 (all year values are >= 1970).
                populate(
                    &mut set,
                    first.saturating_sub(offset),
                    last.saturating_sub(offset),
                    step,
                );
            }
            Entry::All => {
                populate(&mut set, field.min() - offset, field.max() - offset, 1);
                descending.extend(found);
                return Ok(set);
            }
        }
    }
    if set.is_empty() && field != Field::Year {
        if let Some(d) = found.first() {
            return Err(CronError::DescendingRange {
                field,
                entry: d.entry.clone(),
                fix: found
                    .iter()
                    .map(|d| d.fix.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            });
        }
    }
    descending.extend(found);
    Ok(set)
}

/// Classifies every entry of a field (cronexpr's `genericFieldParse`): step errors anywhere in
/// the field are reported even if a wildcard comes first.
pub(crate) fn parse_entries(field: Field, text: &str) -> Result<Vec<(&str, Entry)>, CronError> {
    let mut out = Vec::new();
    for raw in entries(text) {
        let lower = raw.to_ascii_lowercase();
        out.push((raw, classify(field, &lower)?));
    }
    if out.is_empty() {
        return Err(CronError::MissingDirective {
            field,
            text: text.to_string(),
        });
    }
    Ok(out)
}

/// Explains why an entry is not valid in its field.
pub(crate) fn syntax_hint(field: Field, e: &str) -> String {
    let accepts = field.accepts();
    let numeric_parts: Vec<&str> = e
        .split(['-', '/'])
        .filter(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()))
        .collect();
    for p in &numeric_parts {
        let v: u64 = p.parse().unwrap_or(u64::MAX);
        let (lo, hi) = (u64::from(field.min()), u64::from(field.max()));
        let hi_allowed = if field == Field::DayOfWeek { 7 } else { hi };
        if v < lo || v > hi_allowed {
            return format!(
                "{v} is out of range: the {field} field takes {}-{}",
                lo, hi_allowed
            );
        }
        if p.len() > 2 && field != Field::Year {
            return format!("`{p}` has more than one leading zero; write `{v}`");
        }
    }
    if matches!(field, Field::Month | Field::DayOfWeek)
        && e.bytes().any(|c| c.is_ascii_alphabetic())
    {
        let names = if field == Field::Month {
            "jan…dec or january…december"
        } else {
            "sun…sat or sunday…saturday"
        };
        return format!("unknown name or form; names are {names}; the field takes {accepts}");
    }
    format!("the {field} field takes {accepts}")
}
