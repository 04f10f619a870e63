//! Streaming secret masking over one stream of the job log, with upstream's results.
//!
//! Three filters run in upstream's order, each a small state machine fed by the writes of the
//! one before it:
//!
//! 1. **phrases**: each masked value (trimmed, deduplicated, empty ones dropped) is replaced by
//!    `[MASKED]`, longest phrase first, wherever it occurs;
//! 2. **URL parameters**: the value after `?name=` or `&name=` for the [`URL_PARAMS`] (names
//!    compared case-insensitively) is replaced, up to the first `?`, `&`, whitespace or
//!    control character; an empty value is masked too;
//! 3. **token prefixes**: a known prefix (`glpat-`, …) anywhere in the stream is kept and the
//!    run of `[A-Za-z0-9._=-]` after it becomes `[MASKED]` (a bare prefix stays as is).
//!
//! A filter passes each `[MASKED]` it writes on as a write of its own, which the later filters
//! never look into. A filter holds back only the bytes of a phrase or prefix it has partly
//! matched at the end of a write (at most the phrase's or prefix's length), or the name of a
//! URL parameter (at most 21 bytes); a token or URL value being masked is dropped as it
//! arrives. Nothing that may still turn out to be a secret is ever emitted, and memory stays
//! bounded. Where each filter cuts its output into writes matters to the filters after it
//! (and to the timestamper), so the cuts follow upstream's too.
//!
//! The module does no I/O: [`Masker::write`] hands its output to a callback, write by write.
//! It is a leaf: it imports nothing from the crate, and both the job log
//! ([`crate::executor::trace`]) and drover's own log ([`crate::secrets`]) use it.

use aho_corasick::{AhoCorasick, MatchKind};

/// What replaces a secret.
pub const MASK: &[u8] = b"[MASKED]";

/// Token prefixes: `glpat-` always, the others with `FF_MASK_ALL_DEFAULT_TOKENS` (on by
/// default).
pub const DEFAULT_TOKEN_PREFIXES: &[&str] = &[
    "glpat-",
    "gloas-",
    "gldt-",
    "glrt-",
    "glcbt-",
    "glrtr-",
    "glptt-",
    "glft-",
    "glimt-",
    "glagent-",
    "glsoat-",
    "glffct-",
    "_gitlab_session=",
    "gltok-",
];

/// How many token prefixes are used: the first ones in [`normalise`] order (shortest first).
pub const MAX_TOKEN_PREFIXES: usize = 15;

/// URL query parameters whose values are masked (compared case-insensitively).
pub const URL_PARAMS: &[&str] = &[
    "private_token",
    "authenticity_token",
    "rss_token",
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
];

/// The longest `?name` or `&name` the URL filter tracks: the longest parameter name plus
/// one byte, as upstream.
const URL_KEY_CAP: usize = 21;

/// The shortest secret drover's *own* log redaction ([`crate::secrets`]) registers. The job
/// log masks every non-empty masked value whatever its length, as upstream.
pub const MIN_PHRASE_CHARS: usize = 8;

/// Whether `phrase` is too short for drover's own log redaction ([`MIN_PHRASE_CHARS`]).
pub fn too_short_to_mask(phrase: &str) -> bool {
    phrase.chars().count() < MIN_PHRASE_CHARS
}

/// Upstream's clean-up of a list of phrases or prefixes: each trimmed of surrounding
/// whitespace, empty ones dropped, sorted by length and then bytewise, duplicates removed.
pub fn normalise<S: AsRef<str>>(list: &[S]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = list
        .iter()
        .map(|s| s.as_ref().trim().as_bytes().to_vec())
        .filter(|s| !s.is_empty())
        .collect();
    out.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
    out.dedup();
    out
}

/// The token prefixes a job masks: `custom` (the payload's `token_mask_prefixes`) with the
/// defaults, normalised, the first [`MAX_TOKEN_PREFIXES`] kept.
pub fn token_prefixes(custom: &[String], all_default_tokens: bool) -> Vec<Vec<u8>> {
    let defaults = if all_default_tokens {
        DEFAULT_TOKEN_PREFIXES
    } else {
        &DEFAULT_TOKEN_PREFIXES[..1]
    };
    let all: Vec<&str> = custom
        .iter()
        .map(String::as_str)
        .chain(defaults.iter().copied())
        .collect();
    let mut out = normalise(&all);
    out.truncate(MAX_TOKEN_PREFIXES);
    out
}

/// Where a filter sends its output, one write at a time.
type Next<'a> = dyn FnMut(&[u8]) + 'a;

/// Passes `data` on unless it is empty (an empty write changes nothing downstream).
fn emit(next: &mut Next<'_>, data: &[u8]) {
    if !data.is_empty() {
        next(data);
    }
}

/// One literal (a phrase or a token prefix) being looked for, with how much of it the end of
/// the previous write matched.
#[derive(Debug, Clone)]
struct Literal {
    text: Vec<u8>,
    held: usize,
    finder: memchr::memmem::Finder<'static>,
}

/// What [`Literal::resume`] decided about the bytes held from the previous write.
enum Resumed {
    /// `p` was consumed into the held match; nothing more to do in this write.
    StillHeld,
    /// The held match completed after the first `n` bytes of `p`.
    Completed(usize),
    /// The held bytes were passed on as text; scanning resumes at `n`.
    Released(usize),
}

impl Literal {
    fn new(text: Vec<u8>) -> Self {
        Literal {
            finder: memchr::memmem::Finder::new(&text).into_owned(),
            text,
            held: 0,
        }
    }

    /// Continues a match held over from the previous write. On a mismatch the held bytes go
    /// on as one write, then each leading byte of `p` that could start the literal but does
    /// not go on by itself (upstream retries such bytes one at a time before it scans).
    fn resume(&mut self, p: &[u8], next: &mut Next<'_>) -> Resumed {
        let held = self.held;
        // The held bytes are the literal's own start. Upstream drops a match that begins
        // inside them (a literal that overlaps itself, cut at the wrong place, leaks); drover
        // tries each such start, earliest first, before giving the held bytes up.
        for skip in 0..held {
            let h = held - skip;
            if self.text[skip..held] != self.text[..h] {
                continue;
            }
            let want = &self.text[h..];
            let r = want.len().min(p.len());
            if p[..r] != want[..r] {
                continue;
            }
            emit(next, &self.text[..skip]);
            self.held = h + r;
            if self.held == self.text.len() {
                self.held = 0;
                return Resumed::Completed(r);
            }
            return Resumed::StillHeld;
        }
        emit(next, &self.text[..held]);
        self.held = 0;
        let mut k = 0;
        while k < p.len() && p[k] == self.text[0] && !self.starts_at(p, k) {
            next(&p[k..k + 1]);
            k += 1;
        }
        Resumed::Released(k)
    }

    /// Whether the literal, or the start of it cut by the end of `p`, begins at `at`.
    fn starts_at(&self, p: &[u8], at: usize) -> bool {
        // A byte loop: literals are short, and a library compare call per candidate costs
        // more than the compare.
        p[at..].iter().zip(&self.text).all(|(a, b)| a == b)
    }

    /// The next place at or after `from` where the literal, or the start of it cut by the end
    /// of `p`, begins: a whole occurrence always comes before a cut one, which can only be in
    /// the last `len - 1` bytes.
    fn find(&self, p: &[u8], from: usize) -> Option<usize> {
        if let Some(at) = self.finder.find(&p[from..]) {
            return Some(from + at);
        }
        let tail = from.max(p.len().saturating_sub(self.text.len() - 1));
        (tail..p.len()).find(|&at| self.starts_at(p, at))
    }
}

/// Replaces every occurrence of one phrase.
#[derive(Debug, Clone)]
struct PhraseFilter(Literal);

impl PhraseFilter {
    fn write(&mut self, p: &[u8], next: &mut Next<'_>) {
        if p.is_empty() {
            return;
        }
        if p == MASK {
            return next(p);
        }
        let lit = &mut self.0;
        let mut at = 0;
        if lit.held > 0 {
            match lit.resume(p, next) {
                Resumed::StillHeld => return,
                Resumed::Completed(n) => {
                    next(MASK);
                    at = n;
                }
                Resumed::Released(n) => at = n,
            }
        }
        let mut sent = at;
        while let Some(start) = lit.find(p, at) {
            emit(next, &p[sent..start]);
            let end = start + lit.text.len();
            if end > p.len() {
                lit.held = p.len() - start;
                return;
            }
            next(MASK);
            at = end;
            sent = end;
        }
        emit(next, &p[sent..]);
    }

    fn close(&mut self, next: &mut Next<'_>) {
        let lit = &mut self.0;
        emit(next, &lit.text[..lit.held]);
        lit.held = 0;
    }

    fn idle(&self) -> bool {
        self.0.held == 0
    }
}

/// The bytes a token may be made of after its prefix.
fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'=')
}

/// Keeps one token prefix and masks the token after it.
#[derive(Debug, Clone)]
struct TokenFilter {
    prefix: Literal,
    /// The whole prefix was seen; the token's bytes are being dropped.
    in_token: bool,
    /// At least one token byte was dropped since the prefix.
    dropped: bool,
}

impl TokenFilter {
    fn write(&mut self, p: &[u8], next: &mut Next<'_>) {
        if p.is_empty() {
            return;
        }
        if p == MASK {
            return next(p);
        }
        let mut at = 0;
        if self.prefix.held > 0 {
            match self.prefix.resume(p, next) {
                Resumed::StillHeld => return,
                Resumed::Completed(n) => {
                    next(&self.prefix.text);
                    self.in_token = true;
                    at = n;
                }
                Resumed::Released(n) => at = n,
            }
        }
        let mut sent = at;
        loop {
            if self.in_token {
                let run = p[at..].iter().take_while(|b| token_byte(**b)).count();
                if run > 0 {
                    self.dropped = true;
                }
                at += run;
                sent = at;
                if at == p.len() {
                    return;
                }
                self.end_token(next);
            }
            let Some(start) = self.prefix.find(p, at) else {
                break;
            };
            emit(next, &p[sent..start]);
            let end = start + self.prefix.text.len();
            if end > p.len() {
                self.prefix.held = p.len() - start;
                return;
            }
            next(&self.prefix.text);
            self.in_token = true;
            at = end;
            sent = end;
        }
        emit(next, &p[sent..]);
    }

    fn end_token(&mut self, next: &mut Next<'_>) {
        if self.dropped {
            next(MASK);
        }
        self.in_token = false;
        self.dropped = false;
    }

    fn close(&mut self, next: &mut Next<'_>) {
        // A bare prefix at the very end was already passed on; upstream writes it a second
        // time here, drover does not (see README "what differs").
        self.end_token(next);
        emit(next, &self.prefix.text[..self.prefix.held]);
        self.prefix.held = 0;
    }

    fn idle(&self) -> bool {
        self.prefix.held == 0 && !self.in_token
    }
}

/// The URL parameter filter's state.
#[derive(Debug, Clone, PartialEq, Eq)]
enum UrlState {
    /// Looking for `?` or `&`.
    Idle,
    /// Reading `?name` / `&name` (the separator included) up to `=`.
    Name(Vec<u8>),
    /// Dropping a sensitive value up to its end.
    Value,
}

/// Masks the values of sensitive URL parameters.
#[derive(Debug, Clone)]
struct UrlFilter {
    state: UrlState,
}

/// The length of the character at the start of `p` and whether it ends a URL parameter value
/// (`?`, `&`, whitespace, control); bytes that are not valid UTF-8 count one at a time and end
/// nothing.
fn value_end(p: &[u8]) -> (usize, bool) {
    let b = p[0];
    if b < 0x80 {
        return (
            1,
            b == b'?' || b == b'&' || b.is_ascii_whitespace() || b == 0x0b || b < 0x20 || b == 0x7f,
        );
    }
    let want = match b {
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => return (1, false),
    };
    match p.get(..want).and_then(|s| std::str::from_utf8(s).ok()) {
        Some(s) => {
            let c = s.chars().next().unwrap_or('\u{FFFD}');
            (want, c.is_whitespace() || c.is_control())
        }
        None => (1, false),
    }
}

impl UrlFilter {
    fn write(&mut self, p: &[u8], next: &mut Next<'_>) {
        if p.is_empty() {
            return;
        }
        let mut at = 0;
        let mut sent = 0;
        while at < p.len() {
            match &mut self.state {
                UrlState::Value => {
                    let mut end = None;
                    let mut i = at;
                    while i < p.len() {
                        let (len, ends) = value_end(&p[i..]);
                        if ends {
                            end = Some(i);
                            break;
                        }
                        i += len;
                    }
                    match end {
                        None => {
                            return;
                        }
                        Some(i) => {
                            next(MASK);
                            self.state = UrlState::Idle;
                            at = i;
                            sent = i;
                        }
                    }
                }
                UrlState::Idle => match memchr::memchr2(b'?', b'&', &p[at..]) {
                    None => break,
                    Some(off) => {
                        self.state = UrlState::Name(vec![p[at + off]]);
                        at += off + 1;
                    }
                },
                UrlState::Name(name) => {
                    let b = p[at];
                    at += 1;
                    match b {
                        b'?' | b'&' => *name = vec![b],
                        b'=' => {
                            let known = name.len() <= URL_KEY_CAP
                                && URL_PARAMS
                                    .iter()
                                    .any(|k| k.as_bytes().eq_ignore_ascii_case(&name[1..]));
                            if known {
                                emit(next, &p[sent..at]);
                                sent = at;
                                self.state = UrlState::Value;
                            } else {
                                self.state = UrlState::Idle;
                            }
                        }
                        _ => {
                            name.push(b);
                            if name.len() > URL_KEY_CAP {
                                self.state = UrlState::Idle;
                            }
                        }
                    }
                }
            }
        }
        // A name as long as the cap is given up at the end of a write (upstream resets it
        // before it reads the next write).
        if matches!(&self.state, UrlState::Name(n) if n.len() == URL_KEY_CAP) {
            self.state = UrlState::Idle;
        }
        emit(next, &p[sent..]);
    }

    fn close(&mut self, next: &mut Next<'_>) {
        if self.state == UrlState::Value {
            next(MASK);
        }
        self.state = UrlState::Idle;
    }

    fn idle(&self) -> bool {
        self.state == UrlState::Idle
    }
}

/// One stage of the masking chain.
trait Filter {
    /// Filters one write, passing the result on write by write.
    fn write(&mut self, p: &[u8], next: &mut Next<'_>);
    /// Ends the stream: what the filter holds goes on.
    fn close(&mut self, next: &mut Next<'_>);
    /// Whether the filter holds nothing and is in the middle of nothing.
    fn idle(&self) -> bool;
}

/// What a literal filter looks for.
trait Looks {
    fn literal(&self) -> &Literal;
}

impl Looks for PhraseFilter {
    fn literal(&self) -> &Literal {
        &self.0
    }
}

impl Looks for TokenFilter {
    fn literal(&self) -> &Literal {
        &self.prefix
    }
}

macro_rules! filter_impl {
    ($t:ty) => {
        impl Filter for $t {
            fn write(&mut self, p: &[u8], next: &mut Next<'_>) {
                <$t>::write(self, p, next)
            }
            fn close(&mut self, next: &mut Next<'_>) {
                <$t>::close(self, next)
            }
            fn idle(&self) -> bool {
                <$t>::idle(self)
            }
        }
    };
}
filter_impl!(PhraseFilter);
filter_impl!(TokenFilter);
filter_impl!(UrlFilter);

/// Feeds `p` through `filters`, the first one first, the last one's output to `next`.
fn run<F: Filter>(filters: &mut [F], p: &[u8], next: &mut Next<'_>) {
    match filters.split_first_mut() {
        None => emit(next, p),
        Some((first, rest)) => first.write(p, &mut |piece: &[u8]| run(rest, piece, next)),
    }
}

/// Closes `filters` in order, each one's last output going through the ones after it.
fn close_all<F: Filter>(filters: &mut [F], next: &mut Next<'_>) {
    if let Some((first, rest)) = filters.split_first_mut() {
        first.close(&mut |piece: &[u8]| run(rest, piece, next));
        close_all(rest, next);
    }
}

/// A run of literal filters of one kind (longest literal first), with a quick test that lets
/// a write none of them would touch go straight through: they would pass it on unchanged, as
/// one write.
#[derive(Debug, Clone)]
struct Literals<F> {
    filters: Vec<F>,
    any: Option<AhoCorasick>,
    longest: usize,
}

impl<F: Looks> Literals<F> {
    fn new(literals: Vec<Vec<u8>>, make: impl Fn(Literal) -> F) -> Self {
        Literals {
            longest: literals.iter().map(Vec::len).max().unwrap_or(0),
            any: AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostFirst)
                .build(&literals)
                .ok(),
            // Upstream stacks them shortest innermost, so the longest looks first.
            filters: literals
                .into_iter()
                .rev()
                .map(|l| make(Literal::new(l)))
                .collect(),
        }
    }

    /// Whether some literal occurs in `p`, or some tail of `p` starts one.
    fn touches(&self, p: &[u8]) -> bool {
        let Some(ac) = &self.any else {
            return true;
        };
        if ac.is_match(p) {
            return true;
        }
        let from = p.len().saturating_sub(self.longest.saturating_sub(1));
        (from..p.len()).any(|at| {
            self.filters
                .iter()
                .any(|f| f.literal().text.starts_with(&p[at..]))
        })
    }
}

impl<F: Filter + Looks> Filter for Literals<F> {
    fn write(&mut self, p: &[u8], next: &mut Next<'_>) {
        if self.filters.iter().all(F::idle) && !self.touches(p) {
            emit(next, p)
        } else {
            run(&mut self.filters, p, next)
        }
    }

    fn close(&mut self, next: &mut Next<'_>) {
        close_all(&mut self.filters, next)
    }

    fn idle(&self) -> bool {
        self.filters.iter().all(F::idle)
    }
}

/// The URL filter with its quick test: a write with no `?` or `&` while idle goes through.
#[derive(Debug, Clone)]
struct Url(UrlFilter);

impl Filter for Url {
    fn write(&mut self, p: &[u8], next: &mut Next<'_>) {
        if self.0.idle() && memchr::memchr2(b'?', b'&', p).is_none() {
            emit(next, p)
        } else {
            self.0.write(p, next)
        }
    }

    fn close(&mut self, next: &mut Next<'_>) {
        self.0.close(next)
    }

    fn idle(&self) -> bool {
        self.0.idle()
    }
}

/// One stage of a [`Masker`].
#[derive(Debug, Clone)]
enum Group {
    Phrases(Literals<PhraseFilter>),
    Url(Url),
    Tokens(Literals<TokenFilter>),
}

impl Filter for Group {
    fn write(&mut self, p: &[u8], next: &mut Next<'_>) {
        match self {
            Group::Phrases(g) => g.write(p, next),
            Group::Url(g) => g.write(p, next),
            Group::Tokens(g) => g.write(p, next),
        }
    }

    fn close(&mut self, next: &mut Next<'_>) {
        match self {
            Group::Phrases(g) => g.close(next),
            Group::Url(g) => g.close(next),
            Group::Tokens(g) => g.close(next),
        }
    }

    fn idle(&self) -> bool {
        match self {
            Group::Phrases(g) => g.idle(),
            Group::Url(g) => g.idle(),
            Group::Tokens(g) => g.idle(),
        }
    }
}

/// Which filters a [`Masker`] runs (upstream's tests run each alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Filters {
    /// Masked values.
    pub phrases: bool,
    /// URL parameters.
    pub url: bool,
    /// Token prefixes.
    pub tokens: bool,
}

impl Filters {
    /// All three, as in the job log.
    pub const ALL: Filters = Filters {
        phrases: true,
        url: true,
        tokens: true,
    };
}

/// A streaming masker for one stream of the log.
#[derive(Debug, Clone)]
pub struct Masker {
    groups: Vec<Group>,
}

impl Masker {
    /// A masker for the given secret phrases and custom token prefixes, with every default
    /// prefix.
    pub fn new<P: AsRef<str>>(phrases: &[P], token_prefixes: &[String]) -> Self {
        Self::with_default_tokens(phrases, token_prefixes, true)
    }

    /// As [`Masker::new`]; with `all_default_tokens` false (`FF_MASK_ALL_DEFAULT_TOKENS` off)
    /// only `glpat-` of the built-in prefixes is masked.
    pub fn with_default_tokens<P: AsRef<str>>(
        phrases: &[P],
        custom_prefixes: &[String],
        all_default_tokens: bool,
    ) -> Self {
        Self::from_parts(
            normalise(phrases),
            token_prefixes(custom_prefixes, all_default_tokens),
            Filters::ALL,
        )
    }

    /// A masker from already normalised phrases and prefixes (shortest first, as
    /// [`normalise`] and [`token_prefixes`] give them), running only `filters`.
    pub fn from_parts(phrases: Vec<Vec<u8>>, prefixes: Vec<Vec<u8>>, filters: Filters) -> Self {
        let mut groups = Vec::new();
        if filters.phrases && !phrases.is_empty() {
            groups.push(Group::Phrases(Literals::new(phrases, PhraseFilter)));
        }
        if filters.url {
            groups.push(Group::Url(Url(UrlFilter {
                state: UrlState::Idle,
            })));
        }
        if filters.tokens && !prefixes.is_empty() {
            groups.push(Group::Tokens(Literals::new(prefixes, |prefix| {
                TokenFilter {
                    prefix,
                    in_token: false,
                    dropped: false,
                }
            })));
        }
        Masker { groups }
    }

    /// Masks one write, handing the result to `out` write by write.
    pub fn write(&mut self, data: &[u8], out: &mut dyn FnMut(&[u8])) {
        run(&mut self.groups, data, out)
    }

    /// Ends the stream: whatever the filters hold goes out (a partial match as text, a value
    /// or token being dropped as `[MASKED]`), and the masker starts afresh.
    pub fn close(&mut self, out: &mut dyn FnMut(&[u8])) {
        close_all(&mut self.groups, out)
    }

    /// [`Masker::write`], collected.
    pub fn push(&mut self, data: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(data.len());
        self.write(data, &mut |p| v.extend_from_slice(p));
        v
    }

    /// [`Masker::close`], collected.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut v = Vec::new();
        self.close(&mut |p| v.extend_from_slice(p));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(m: &mut Masker, chunks: &[&str]) -> String {
        let mut out = Vec::new();
        for c in chunks {
            out.extend(m.push(c.as_bytes()));
        }
        out.extend(m.finish());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn phrase_split_across_chunks_is_masked() {
        let mut m = Masker::new(&["s3cr3t-value"], &[]);
        let out = run(&mut m, &["echo s3cr", "3t-val", "ue done\n"]);
        assert_eq!(out, "echo [MASKED] done\n");
    }

    #[test]
    fn phrase_split_byte_by_byte() {
        let mut m = Masker::new(&["abcdefgh", "abcdefghij"], &[]);
        let text = "xx abcdefghij yy abcdefgh\n";
        let chunks: Vec<String> = text.chars().map(|c| c.to_string()).collect();
        let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
        assert_eq!(run(&mut m, &refs), "xx [MASKED] yy [MASKED]\n");
    }

    #[test]
    fn tokens_inside_words_and_after_equals_are_masked_prefix_kept() {
        let mut m = Masker::new::<&str>(&[], &[]);
        let out = run(
            &mut m,
            &["GITLAB_TOKEN=glpat-Abc123 --token=glrt-x9 x.glpat-q a-glpat-r b_glpat-s 9glpat-t cookie=_gitlab_session=zz\n"],
        );
        assert_eq!(
            out,
            "GITLAB_TOKEN=glpat-[MASKED] --token=glrt-[MASKED] x.glpat-[MASKED] a-glpat-[MASKED] b_glpat-[MASKED] 9glpat-[MASKED] cookie=_gitlab_session=[MASKED]\n"
        );
    }

    /// Audit D7: a bare prefix is left alone, and a prefix followed by a masked value keeps
    /// the prefix (phrases are masked before prefixes, as upstream's chain).
    #[test]
    fn bare_prefix_and_prefix_before_a_masked_value() {
        let mut m = Masker::new(&["supersecret"], &[]);
        assert_eq!(
            run(&mut m, &["glpat- alone; glpat-supersecret\n"]),
            "glpat- alone; glpat-[MASKED]\n"
        );
    }

    #[test]
    fn default_tokens_can_be_limited_to_glpat() {
        let mut m = Masker::with_default_tokens::<&str>(&[], &[], false);
        assert_eq!(
            run(&mut m, &["glpat-aaa glrt-bbb\n"]),
            "glpat-[MASKED] glrt-bbb\n"
        );
    }

    #[test]
    fn prefix_cap_keeps_the_shortest() {
        let custom: Vec<String> = ["aaaaaaa-", "bbbbbbb-"].map(String::from).to_vec();
        let p = token_prefixes(&custom, true);
        assert_eq!(p.len(), 15);
        assert!(p.iter().any(|x| x == b"gltok-"));
        assert!(!p.iter().any(|x| x == b"_gitlab_session="));
    }

    #[test]
    fn complete_lines_are_emitted_without_waiting() {
        let mut m = Masker::new(&["longsecretvalue"], &[]);
        assert_eq!(m.push(b"hello world\n"), b"hello world\n");
        // Only a tail that could start the secret waits.
        assert_eq!(m.push(b"partial"), b"partia");
        assert_eq!(m.finish(), b"l");
    }

    #[test]
    fn held_bytes_are_bounded_by_the_longest_literal() {
        let mut m = Masker::new(&["abcdefgh"], &[]);
        let mut out = Vec::new();
        // A 1 MiB line with no whitespace streams through at once.
        let line = vec![b'x'; 1 << 20];
        out.extend(m.push(&line));
        assert_eq!(out.len(), line.len());
        // A URL value being masked is dropped as it comes, never held.
        assert_eq!(m.push(b" ?private_token="), b" ?private_token=");
        assert_eq!(m.push(&line), b"");
        assert_eq!(m.push(b" end"), b"[MASKED] end");
    }

    #[test]
    fn nothing_is_lost_or_duplicated() {
        let mut m = Masker::new(&["zzzzzzzz"], &[]);
        let text = "a b c d e f g h i j k l m n o p q r s t u v w x y\n".repeat(50);
        let mut out = Vec::new();
        for chunk in text.as_bytes().chunks(7) {
            out.extend(m.push(chunk));
        }
        out.extend(m.finish());
        assert_eq!(out, text.as_bytes());
    }

    /// A value that overlaps itself is masked wherever the write boundary falls (upstream
    /// gives the held bytes up and misses a match starting inside them).
    #[test]
    fn self_overlapping_value_cut_inside_the_overlap() {
        let mut m = Masker::new(&["s3s3cret"], &[]);
        assert_eq!(run(&mut m, &["xs3s3", "s3cret\n"]), "xs3[MASKED]\n");
        let mut m = Masker::new(&["aab"], &[]);
        assert_eq!(run(&mut m, &["aa", "ab"]), "a[MASKED]");
    }

    /// The quick pass-through gives the same writes as the filters themselves.
    #[test]
    fn quick_path_agrees_with_the_filters() {
        let text = b"compiling glcbt-abc ?x=1&private_token=zz hunter2hunter2 ok\nplain line\n";
        for size in 1..text.len() {
            let mut quick = Masker::new(&["hunter2hunter2"], &[]);
            let mut a = Vec::new();
            for c in text.chunks(size) {
                quick.write(c, &mut |p| a.push(p.to_vec()));
            }
            quick.close(&mut |p| a.push(p.to_vec()));
            let mut slow = Masker::new(&["hunter2hunter2"], &[]);
            let mut b = Vec::new();
            for g in &mut slow.groups {
                if let Group::Phrases(l) = g {
                    l.any = None;
                }
                if let Group::Tokens(l) = g {
                    l.any = None;
                }
            }
            for c in text.chunks(size) {
                slow.write(c, &mut |p| b.push(p.to_vec()));
            }
            slow.close(&mut |p| b.push(p.to_vec()));
            assert_eq!(a, b, "writes of {size}");
            assert_eq!(
                a.concat(),
                b"compiling glcbt-[MASKED] ?x=1&private_token=[MASKED] [MASKED] ok\nplain line\n"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn secrets_never_survive_any_chunking(
            parts in proptest::collection::vec("[abc xyz\n.-]{0,12}", 1..8),
            cuts in proptest::collection::vec(1usize..9, 1..40),
        ) {
            let secret = "Secret-XYZ-123";
            let text = parts.join(secret);
            let mut m = Masker::new(&[secret], &[]);
            let mut out = Vec::new();
            let bytes = text.as_bytes();
            let mut at = 0;
            for c in cuts.iter().cycle() {
                if at >= bytes.len() {
                    break;
                }
                let end = (at + c).min(bytes.len());
                out.extend(m.push(&bytes[at..end]));
                at = end;
            }
            out.extend(m.finish());
            let out = String::from_utf8(out).unwrap();
            proptest::prop_assert_eq!(out, text.replace(secret, "[MASKED]"));
        }
    }
}
