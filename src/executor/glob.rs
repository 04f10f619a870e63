//! Image-name globs with the semantics upstream's allow-lists use (the `doublestar` v4 `Match`
//! rules): every `allowed_images`, `allowed_services`, `allowed_privileged_images`,
//! `allowed_privileged_services` and `services_devices` rule goes through [`matches`].
//!
//! - `*` matches any run of characters except `/`; `?` one character except `/`.
//! - `**` is a globstar only as a whole path segment: `**/` at the start of a segment matches
//!   zero or more whole segments, and a final `**` at the start of a segment matches the rest of
//!   the name. Anywhere else (`team**`, `**x`) it is a plain `*` and never crosses `/`.
//! - `[abc]`, `[a-z]`, `[^…]` / `[!…]` classes (a class may match `/`), `{a,b}` alternatives
//!   (nested, empty ones allowed, they may contain `/`), `\` escapes.
//! - When the name ends, what is left of the pattern may still match nothing only if it is
//!   `*`, `**`, `/**`, `**/` or `/**/` (so `a/**` matches `a`).
//! - A malformed pattern (unclosed `[` or `{`, an empty class, a trailing `\`) matches nothing.
//!
//! Why not `globset` (already a dependency): with `literal_separator` it agrees on `*`, `?` and
//! a mid-segment `**`, but `a/**` does not match `a` there, an unclosed `[` is read as a
//! literal instead of refusing the pattern, and `{…}` alternatives are expanded after the
//! globstar rules are applied, so the cases differ at the edges the allow-lists depend on.
//!
//! Matching is a set-of-states walk over the name (linear in its length, no recursion), so a
//! hostile name cannot blow the stack or the clock. Alternatives are expanded up front, at most
//! [`MAX_ALTERNATIVES`] per pattern; a pattern with more matches nothing.

/// The most brace alternatives one pattern may expand to.
pub const MAX_ALTERNATIVES: usize = 1024;

/// Whether `name` matches `pattern`. A malformed pattern matches nothing.
pub fn matches(pattern: &str, name: &str) -> bool {
    let Some(alternatives) = expand_braces(pattern) else {
        return false;
    };
    let name: Vec<char> = name.chars().collect();
    for alt in alternatives {
        // Alternatives are tried in order; a malformed one ends the search, as upstream's
        // matcher stops at the first error.
        match Compiled::new(&alt) {
            Some(c) => {
                if c.run(&name) {
                    return true;
                }
            }
            None => return false,
        }
    }
    false
}

/// Whether `pattern` is well formed (closed classes and alternatives, no trailing `\`, at most
/// [`MAX_ALTERNATIVES`] alternatives).
pub fn is_valid(pattern: &str) -> bool {
    expand_braces(pattern).is_some_and(|alts| alts.iter().all(|a| Compiled::new(a).is_some()))
}

/// Whether any of `rules` matches `name`.
pub fn any_matches<S: AsRef<str>>(rules: &[S], name: &str) -> bool {
    rules.iter().any(|r| matches(r.as_ref(), name))
}

/// Expands `{a,b}` alternatives (leftmost first, in order, nested ones too). `None` for an
/// unclosed `{`, a trailing `\` or more than [`MAX_ALTERNATIVES`] results.
fn expand_braces(pattern: &str) -> Option<Vec<String>> {
    let chars: Vec<char> = pattern.chars().collect();
    // Find the first unescaped `{` outside a class.
    let mut i = 0;
    let mut open = None;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '{' => {
                open = Some(i);
                break;
            }
            _ => i += 1,
        }
    }
    let Some(open) = open else {
        return Some(vec![pattern.to_string()]);
    };
    // Its matching `}` and the top-level commas inside.
    let mut depth = 0usize;
    let mut commas = Vec::new();
    let mut close = None;
    let mut j = open + 1;
    while j < chars.len() {
        match chars[j] {
            '\\' => {
                j += 2;
                continue;
            }
            '{' => depth += 1,
            '}' if depth == 0 => {
                close = Some(j);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => commas.push(j),
            _ => {}
        }
        j += 1;
    }
    let close = close?;
    let prefix: String = chars[..open].iter().collect();
    let suffix: String = chars[close + 1..].iter().collect();
    let mut bounds = vec![open];
    bounds.extend(commas);
    bounds.push(close);
    let mut out = Vec::new();
    for w in bounds.windows(2) {
        let middle: String = chars[w[0] + 1..w[1]].iter().collect();
        for expanded in expand_braces(&format!("{prefix}{middle}{suffix}"))? {
            out.push(expanded);
            if out.len() > MAX_ALTERNATIVES {
                return None;
            }
        }
    }
    Some(out)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    /// `?`
    One,
    /// `*`, or `**` that is not a whole segment.
    Star,
    /// `[…]`: negated, then the single characters and ranges.
    Class(bool, Vec<(char, char)>),
    /// `**/` at the start of a segment: zero or more whole segments.
    Dirs,
    /// `**` at the start of a segment, ending the pattern: everything left.
    Rest,
}

/// A brace-free pattern as tokens, each with the offset of its text in the pattern.
struct Compiled {
    tokens: Vec<Token>,
    /// `starts[i]`: where token `i` begins in `text`; `starts[tokens.len()]` is the end.
    starts: Vec<usize>,
    text: Vec<char>,
}

impl Compiled {
    /// Parses a brace-free pattern; `None` when it is malformed.
    fn new(pattern: &str) -> Option<Compiled> {
        let text: Vec<char> = pattern.chars().collect();
        let mut tokens = Vec::new();
        let mut starts = Vec::new();
        let mut i = 0;
        let mut segment_start = true;
        while i < text.len() {
            starts.push(i);
            match text[i] {
                '*' if text.get(i + 1) == Some(&'*') && segment_start => {
                    match text.get(i + 2) {
                        None => {
                            tokens.push(Token::Rest);
                            i += 2;
                        }
                        Some('/') => {
                            tokens.push(Token::Dirs);
                            i += 3;
                            // Still at the start of a segment.
                            continue;
                        }
                        Some(_) => {
                            tokens.push(Token::Star);
                            i += 2;
                        }
                    }
                    segment_start = false;
                }
                '*' if text.get(i + 1) == Some(&'*') => {
                    tokens.push(Token::Star);
                    i += 2;
                    segment_start = false;
                }
                '*' => {
                    tokens.push(Token::Star);
                    i += 1;
                    segment_start = false;
                }
                '?' => {
                    tokens.push(Token::One);
                    i += 1;
                    segment_start = false;
                }
                '[' => {
                    let (token, next) = parse_class(&text, i + 1)?;
                    tokens.push(token);
                    i = next;
                    segment_start = false;
                }
                '\\' => {
                    let c = *text.get(i + 1)?;
                    tokens.push(Token::Literal(c));
                    i += 2;
                    segment_start = c == '/';
                }
                c => {
                    tokens.push(Token::Literal(c));
                    i += 1;
                    segment_start = c == '/';
                }
            }
        }
        starts.push(text.len());
        Some(Compiled {
            tokens,
            starts,
            text,
        })
    }

    /// Whether the rest of the pattern from token `t` may match an empty remainder of the
    /// name (only `""`, `*`, `**`, `/**`, `**/` and `/**/`).
    fn may_end_at(&self, t: usize) -> bool {
        let rest: String = self.text[self.starts[t]..].iter().collect();
        matches!(rest.as_str(), "" | "*" | "**" | "/**" | "**/" | "/**/")
    }

    /// Runs the pattern over `name`.
    ///
    /// A state is `(s, end)`: `s = 2 * t` is "at token `t`", `s = 2 * t + 1` is "inside a
    /// segment consumed by the `Dirs` token `t`"; `end` is the token from which what is left
    /// of the pattern is judged if the name ends here (just after a `*` or `**/` that consumed
    /// the last character, at the token itself otherwise), as upstream's matcher does.
    fn run(&self, name: &[char]) -> bool {
        let mut current: Vec<(usize, usize)> = vec![(0, 0)];
        let mut closed: Vec<usize> = Vec::new();
        let mut stack: Vec<usize> = Vec::new();
        for &c in name {
            // Epsilon closure (a `*` or `**/` may match nothing), without the end markers.
            closed.clear();
            stack.clear();
            stack.extend(current.iter().map(|(s, _)| *s));
            while let Some(s) = stack.pop() {
                if closed.contains(&s) {
                    continue;
                }
                closed.push(s);
                if s % 2 == 0 {
                    let t = s / 2;
                    match self.tokens.get(t) {
                        Some(Token::Star) | Some(Token::Dirs) => stack.push(2 * (t + 1)),
                        Some(Token::Rest) => return true,
                        _ => {}
                    }
                }
            }
            let mut next: Vec<(usize, usize)> = Vec::new();
            let mut push = |state: (usize, usize)| {
                if !next.contains(&state) {
                    next.push(state);
                }
            };
            for &s in &closed {
                let t = s / 2;
                if s % 2 == 1 {
                    // Inside a segment of a `Dirs` token: a `/` ends the segment.
                    let to = if c == '/' { s - 1 } else { s };
                    push((to, t + 1));
                    continue;
                }
                let advance = match self.tokens.get(t) {
                    None => false,
                    Some(Token::Literal(l)) => *l == c,
                    Some(Token::One) => c != '/',
                    Some(Token::Class(negated, items)) => {
                        items.iter().any(|(lo, hi)| *lo <= c && c <= *hi) != *negated
                    }
                    Some(Token::Star) => {
                        if c != '/' {
                            push((s, t + 1));
                        }
                        false
                    }
                    Some(Token::Dirs) => {
                        push((if c == '/' { s } else { s + 1 }, t + 1));
                        false
                    }
                    Some(Token::Rest) => return true,
                };
                if advance {
                    push((2 * (t + 1), t + 1));
                }
            }
            if next.is_empty() {
                return false;
            }
            current = next;
        }
        current
            .iter()
            .any(|(s, end)| s % 2 == 0 && self.may_end_at((*end).min(self.tokens.len())))
    }
}

/// Parses a class body starting after `[`; returns the token and the index after `]`.
fn parse_class(text: &[char], mut i: usize) -> Option<(Token, usize)> {
    let negated = matches!(text.get(i), Some('!') | Some('^'));
    if negated {
        i += 1;
    }
    if matches!(text.get(i), None | Some(']')) {
        return None;
    }
    let mut items: Vec<(char, char)> = Vec::new();
    // Whether the last item may start a range.
    let mut last: Option<char> = None;
    loop {
        let c = *text.get(i)?;
        if c == ']' {
            return Some((Token::Class(negated, items), i + 1));
        }
        i += 1;
        if c == '-' {
            if let (Some(lo), Some(next)) = (last, text.get(i)) {
                if *next != ']' {
                    let mut hi = *next;
                    i += 1;
                    if hi == '\\' {
                        hi = *text.get(i)?;
                        i += 1;
                    }
                    // Replace the single `lo` item by the range.
                    items.pop();
                    items.push((lo, hi));
                    last = None;
                    continue;
                }
            }
        }
        let c = if c == '\\' {
            let e = *text.get(i)?;
            i += 1;
            e
        } else {
            c
        };
        items.push((c, c));
        last = Some(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_and_globstars() {
        assert!(matches("**/*", "alpine"));
        assert!(matches("**/*", "library/ruby:3"));
        assert!(!matches(
            "my.registry.tld/team**",
            "my.registry.tld/team/other/evil:1"
        ));
        assert!(matches(
            "my.registry.tld/team**",
            "my.registry.tld/team-x:1"
        ));
        assert!(matches("a/**", "a"));
        assert!(matches("{ruby,python}:*", "ruby:3"));
        assert!(matches("ruby:[0-9]*", "ruby:3.3"));
        assert!(!matches("ruby:[0-9]*", "ruby:latest"));
        assert!(!matches("a[", "a"));
        assert!(!matches("{a", "a"));
    }

    #[test]
    fn hostile_sizes_do_not_blow_up() {
        let long = "a/".repeat(50_000);
        assert!(matches("**/a/", &long));
        assert!(!matches("**/b", &long));
        let many = "{a,b,c,d}".repeat(6);
        assert!(!matches(&many, "abcdab"));
    }
}
