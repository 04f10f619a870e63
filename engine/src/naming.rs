//! Machine names and ownership (spec §5): the short token, the RFC 1123 prefix, the filter
//! `runner-<prefix>-<MachineName>`, new names (`%s` → `<unix seconds>-<8 hex>`), and the
//! `Sscanf`-style match that decides which listed machines belong to a runner.
//!
//! Pure string functions: the random bytes and the time of a new name are arguments. The
//! engine and `drover autoscale decide` use them; so can `check-config`, for
//! [`machine_name_warning`].

use std::fmt::Write as _;

/// The runner token shortened as upstream's `ShortenToken`, the one short form drover uses
/// (machine names, container and volume names, cache paths, `CI_RUNNER_SHORT_TOKEN`, metric
/// and log labels). Three strips, in order, each of at most one leading prefix: a runner
/// token's (`glrt-` with an optional partition `t1_`/`t2_`/`t3_`, a bare partition, or
/// `glrtr-`), then a job token's `glcbt-`, then an old registration token's `GR` and 7 hex
/// digits; then the first 9 bytes (never splitting a character).
pub fn short_token(token: &str) -> &str {
    let rest = strip_job_prefix(strip_runner_prefix(token));
    let rest = strip_registration_prefix(rest);
    let mut end = rest.len().min(9);
    while !rest.is_char_boundary(end) {
        end -= 1;
    }
    &rest[..end]
}

fn strip_partition(token: &str) -> Option<&str> {
    ["t1_", "t2_", "t3_"]
        .iter()
        .find_map(|p| token.strip_prefix(p))
}

fn strip_runner_prefix(token: &str) -> &str {
    if let Some(rest) = token.strip_prefix("glrt-") {
        return strip_partition(rest).unwrap_or(rest);
    }
    strip_partition(token)
        .or_else(|| token.strip_prefix("glrtr-"))
        .unwrap_or(token)
}

fn strip_job_prefix(token: &str) -> &str {
    token.strip_prefix("glcbt-").unwrap_or(token)
}

fn strip_registration_prefix(token: &str) -> &str {
    let b = token.as_bytes();
    if b.len() >= 9 && b.starts_with(b"GR") && b[2..9].iter().all(u8::is_ascii_hexdigit) {
        return &token[9..];
    }
    token
}

/// Upstream's `MakeRFC1123Compatible`: lower-case, keep `[-a-z0-9]`, drop leading non-
/// alphanumerics, cut to 63 characters.
pub fn rfc1123(s: &str) -> String {
    let kept: String = s
        .to_lowercase()
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
        .collect();
    let trimmed = kept.trim_start_matches(|c: char| !c.is_ascii_alphanumeric());
    trimmed.chars().take(63).collect()
}

/// The filter (and name template) of a runner: `runner-<prefix>-<MachineName>`, or just
/// `MachineName` when the prefix is empty.
pub fn machine_filter(token: &str, machine_name: &str) -> String {
    let prefix = rfc1123(short_token(token));
    if prefix.is_empty() {
        machine_name.to_string()
    } else {
        format!("runner-{prefix}-{machine_name}")
    }
}

/// The warning to show for a `MachineName` that cannot name or match any machine, if any.
pub fn machine_name_warning(machine_name: &str) -> Option<String> {
    if machine_name.is_empty() {
        return Some(
            "MachineName is empty: Acquire fails with \"missing Machine options\"; set it to \
             a template such as \"auto-%s\""
                .to_string(),
        );
    }
    if !has_string_verb(machine_name) {
        return Some(format!(
            "MachineName {machine_name:?} has no %s: it loads (as upstream), but no listed \
             machine matches its filter, so every machine this runner creates is lost to it; \
             add %s, e.g. \"{machine_name}-%s\""
        ));
    }
    None
}

fn has_string_verb(format: &str) -> bool {
    let mut it = format.chars();
    while let Some(c) = it.next() {
        if c == '%' {
            match it.next() {
                Some('s') | Some('v') => return true,
                _ => {}
            }
        }
    }
    false
}

/// The suffix that replaces `%s` in a new name: `<unix seconds>-<4 bytes as 8 hex>`.
pub fn name_suffix(unix_seconds: i64, random: [u8; 4]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(21 + 8);
    let _ = write!(s, "{unix_seconds}-");
    for b in random {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
}

/// A new machine name: the filter formatted like Go's `Sprintf(filter, suffix)` — `%s`/`%v`
/// take the suffix, `%%` is `%`, a missing verb appends `%!(EXTRA string=…)`.
pub fn new_machine_name(filter: &str, suffix: &str) -> String {
    let mut out = String::with_capacity(filter.len() + suffix.len());
    let mut used = false;
    let mut it = filter.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match it.next() {
            None => out.push_str("%!(NOVERB)"),
            Some('%') => out.push('%'),
            Some(v) if used => {
                let _ = write!(out, "%!{v}(MISSING)");
            }
            Some(v) => {
                used = true;
                match v {
                    's' | 'v' => out.push_str(suffix),
                    'q' => {
                        let _ = write!(out, "{suffix:?}");
                    }
                    'x' => suffix.bytes().for_each(|b| {
                        let _ = write!(out, "{b:02x}");
                    }),
                    'X' => suffix.bytes().for_each(|b| {
                        let _ = write!(out, "{b:02X}");
                    }),
                    other => {
                        let _ = write!(out, "%!{other}(string={suffix})");
                    }
                }
            }
        }
    }
    if !used {
        let _ = write!(out, "%!(EXTRA string={suffix})");
    }
    out
}

/// A filter prepared for matching many names: [`matches_filter`] with the filter's shape
/// worked out once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterMatcher {
    filter: String,
    /// Length of the literal text before `%s`, when the filter is plain text then `%s`.
    simple: Option<usize>,
}

impl FilterMatcher {
    /// Prepares `filter`.
    pub fn new(filter: &str) -> FilterMatcher {
        let simple = filter.find('%').filter(|&pos| {
            !filter[..pos].contains(char::is_whitespace) && filter[pos..].starts_with("%s")
        });
        FilterMatcher {
            filter: filter.to_string(),
            simple,
        }
    }

    /// The filter text.
    pub fn as_str(&self) -> &str {
        &self.filter
    }

    /// The length of the literal text every matching name starts with (0 when the filter's
    /// shape is not plain text then `%s`: Sscanf's spaces match runs of any length).
    pub fn literal_prefix_len(&self) -> usize {
        self.simple.unwrap_or(0)
    }

    /// Same as [`matches_filter`]`(name, self.as_str())`.
    #[inline]
    pub fn matches(&self, name: &str) -> bool {
        match self.simple {
            Some(pos) => match name.strip_prefix(&self.filter[..pos]) {
                Some(rest) => rest
                    .chars()
                    .find(|c| !is_scan_space(*c))
                    .is_some_and(|c| c != '\n'),
                None => false,
            },
            None => scan_general(name, &self.filter),
        }
    }
}

/// Whether `name` belongs to `filter`, as `Sscanf(name, filter, &s)` scanning exactly one item:
/// the literal text before the first `%s` must match exactly, `%s` takes at least one
/// non-space character, and everything after it is ignored.
pub fn matches_filter(name: &str, filter: &str) -> bool {
    // Fast path for the common shape: plain literal text, then %s.
    if let Some(pos) = filter.find('%') {
        let lit = &filter[..pos];
        if !lit.contains(char::is_whitespace) && filter[pos..].starts_with("%s") {
            return match name.strip_prefix(lit) {
                Some(rest) => rest
                    .chars()
                    .find(|c| !is_scan_space(*c))
                    .is_some_and(|c| c != '\n'),
                None => false,
            };
        }
    }
    scan_general(name, filter)
}

fn is_scan_space(c: char) -> bool {
    c == ' ' || c == '\t' || c == '\r'
}

fn scan_general(name: &str, filter: &str) -> bool {
    let mut input = name.chars().peekable();
    let mut fmt = filter.chars().peekable();
    while let Some(f) = fmt.next() {
        if is_scan_space(f) {
            while fmt.peek().is_some_and(|c| is_scan_space(*c)) {
                fmt.next();
            }
            // One or more spaces in the input, or the end of it.
            match input.peek() {
                None => continue,
                Some(c) if is_scan_space(*c) => {
                    while input.peek().is_some_and(|c| is_scan_space(*c)) {
                        input.next();
                    }
                }
                Some(_) => return false,
            }
            continue;
        }
        if f == '\n' {
            return false;
        }
        if f != '%' {
            if input.next() != Some(f) {
                return false;
            }
            continue;
        }
        match fmt.next() {
            Some('%') => {
                while input.peek().is_some_and(|c| is_scan_space(*c)) {
                    input.next();
                }
                if input.next() != Some('%') {
                    return false;
                }
            }
            Some('s') | Some('v') => {
                while input.peek().is_some_and(|c| is_scan_space(*c)) {
                    input.next();
                }
                return input.peek().is_some_and(|c| *c != '\n');
            }
            _ => return false,
        }
    }
    false
}
