//! Streaming secret masking over the job log, applied runner-side to every byte.
//!
//! Three filters, in upstream's order: exact phrases (masked variable values, longest first),
//! URL parameters (`private_token`, `X-Amz-Signature`, …) and token prefixes (`glpat-…`).
//! Matches are found across write boundaries: the masker holds back the tail of the stream that
//! could still be the start of a secret (a partial phrase, or an unfinished run of non-blank
//! bytes) until more data or [`Masker::finish`] decides it. It does no I/O.

use aho_corasick::{AhoCorasick, MatchKind};
use regex::bytes::Regex;

/// What replaces a secret.
pub const MASK: &[u8] = b"[MASKED]";

/// Token prefixes always masked (`glpat-`), plus those masked with `FF_MASK_ALL_DEFAULT_TOKENS`.
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

/// URL query parameters whose values are masked (names compared case-insensitively).
pub const URL_PARAMS: &[&str] = &[
    "private_token",
    "authenticity_token",
    "rss_token",
    "X-Amz-Signature",
    "X-Amz-Credential",
    "X-Amz-Security-Token",
];

/// The shortest value masked: GitLab refuses to mask a variable shorter than 8 characters, so
/// a payload from GitLab never carries one; one that does (a hand-written payload, a token
/// `t`) would turn every occurrence of a common letter into `[MASKED]`, wrecking the log and
/// showing the value by where the masks fall. Shorter phrases are left out (the executor says
/// so in the job log, naming the variable, never the value).
pub const MIN_PHRASE_CHARS: usize = 8;

/// Whether `phrase` is too short to be masked ([`MIN_PHRASE_CHARS`]).
pub fn too_short_to_mask(phrase: &str) -> bool {
    phrase.chars().count() < MIN_PHRASE_CHARS
}

/// Upper bound of bytes held back waiting for a word to end; past it, output is forced.
const MAX_HOLD: usize = 64 * 1024;

/// A streaming masker.
#[derive(Debug)]
pub struct Masker {
    phrases: Option<AhoCorasick>,
    phrase_list: Vec<Vec<u8>>,
    longest_phrase: usize,
    prefixes: Vec<String>,
    words: Option<Regex>,
    pending: Vec<u8>,
}

impl Masker {
    /// A masker for the given secret phrases and token prefixes (at most 15 prefixes are used,
    /// as upstream).
    pub fn new<P: AsRef<[u8]>>(phrases: &[P], token_prefixes: &[String]) -> Self {
        Self::with_default_tokens(phrases, token_prefixes, true)
    }

    /// As [`Masker::new`]; with `all_default_tokens` false (`FF_MASK_ALL_DEFAULT_TOKENS` off)
    /// only `glpat-` of the built-in prefixes is masked.
    pub fn with_default_tokens<P: AsRef<[u8]>>(
        phrases: &[P],
        token_prefixes: &[String],
        all_default_tokens: bool,
    ) -> Self {
        let mut phrases: Vec<Vec<u8>> = phrases
            .iter()
            .map(|p| p.as_ref().to_vec())
            .filter(|p| !too_short_to_mask(&String::from_utf8_lossy(p)))
            .collect();
        phrases.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        phrases.dedup();
        let longest_phrase = phrases.first().map(Vec::len).unwrap_or(0);
        let phrase_list = phrases;
        let phrases = if phrase_list.is_empty() {
            None
        } else {
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&phrase_list)
                .ok()
        };
        let mut prefixes: Vec<String> = Vec::new();
        let defaults = if all_default_tokens {
            DEFAULT_TOKEN_PREFIXES
        } else {
            &DEFAULT_TOKEN_PREFIXES[..1]
        };
        for p in token_prefixes
            .iter()
            .map(String::as_str)
            .chain(defaults.iter().copied())
        {
            if !p.is_empty() && !prefixes.iter().any(|q| q == p) && prefixes.len() < 15 {
                prefixes.push(p.to_string());
            }
        }
        let alternatives: Vec<String> = prefixes.iter().map(|p| regex::escape(p)).collect();
        let params: Vec<String> = URL_PARAMS.iter().map(|p| regex::escape(p)).collect();
        // Group 1: a URL parameter value (name kept). Group 2: a whole prefixed token.
        let pattern = format!(
            r"(?i:[?&](?:{})=)([^\s&#]+)|(?-i:(?:^|[^A-Za-z0-9._=-])((?:{})[A-Za-z0-9._=-]*))",
            params.join("|"),
            alternatives.join("|"),
        );
        // Built from escaped literals, so it compiles unless the prefixes blow the size limit.
        let words = Regex::new(&pattern).ok();
        Masker {
            phrases,
            phrase_list,
            longest_phrase,
            prefixes,
            words,
            pending: Vec::new(),
        }
    }

    /// Adds data; returns what can be emitted now, masked.
    pub fn push(&mut self, data: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(data);
        self.drain(false)
    }

    /// Emits everything held back, masked.
    pub fn finish(&mut self) -> Vec<u8> {
        self.drain(true)
    }

    fn drain(&mut self, last: bool) -> Vec<u8> {
        let len = self.pending.len();
        let matches: Vec<(usize, usize)> = match &self.phrases {
            Some(ac) => ac
                .find_iter(&self.pending)
                .map(|m| (m.start(), m.end()))
                .collect(),
            None => Vec::new(),
        };
        let mut cut = if last {
            len
        } else {
            len - self.partial_phrase_suffix()
        };
        if !last {
            // Keep the part of an unfinished run of non-blank bytes that may be a token or a
            // URL parameter still being written.
            loop {
                let before = cut;
                if cut > 0 && (cut == len || !self.pending[cut].is_ascii_whitespace()) {
                    cut = self.hold_start(cut);
                }
                if let Some(&(s, _)) = matches.iter().find(|(s, e)| *s < cut && *e > cut) {
                    cut = s;
                }
                if cut == before {
                    break;
                }
            }
            if cut == 0 && len > MAX_HOLD {
                cut = len - self.longest_phrase.min(len);
                if let Some(&(_, e)) = matches.iter().find(|(s, e)| *s < cut && *e > cut) {
                    cut = e;
                }
            }
        }
        if cut == 0 {
            return Vec::new();
        }
        let mut phrased = Vec::with_capacity(cut);
        let mut at = 0;
        for &(s, e) in matches.iter().filter(|(_, e)| *e <= cut) {
            phrased.extend_from_slice(&self.pending[at..s]);
            phrased.extend_from_slice(MASK);
            at = e;
        }
        phrased.extend_from_slice(&self.pending[at..cut]);
        self.pending.drain(..cut);
        self.mask_words(&phrased)
    }

    /// Where to stop emitting in the run of non-blank bytes that ends at `cut` and may go on:
    /// at its first `?`/`&` (a URL parameter may follow), else at the first word start that
    /// is, or may become, a token prefix; `cut` itself when nothing in the run can be a secret.
    fn hold_start(&self, cut: usize) -> usize {
        let mut start = cut;
        while start > 0 && !self.pending[start - 1].is_ascii_whitespace() {
            start -= 1;
        }
        let run = &self.pending[start..cut];
        if let Some(q) = run.iter().position(|b| *b == b'?' || *b == b'&') {
            return start + q;
        }
        let is_word = |b: u8| b.is_ascii_alphanumeric() || b"._=-".contains(&b);
        for i in 0..run.len() {
            if i > 0 && is_word(run[i - 1]) {
                continue;
            }
            let tail = &run[i..];
            let risky = self.prefixes.iter().any(|p| {
                let p = p.as_bytes();
                p.starts_with(tail) || tail.starts_with(p)
            });
            if risky {
                return start + i;
            }
        }
        cut
    }

    /// The length of the longest tail of `pending` that is the start of some phrase.
    fn partial_phrase_suffix(&self) -> usize {
        let len = self.pending.len();
        let max = self.longest_phrase.saturating_sub(1).min(len);
        (1..=max)
            .rev()
            .find(|&k| {
                let tail = &self.pending[len - k..];
                self.phrase_list.iter().any(|p| p.starts_with(tail))
            })
            .unwrap_or(0)
    }

    fn mask_words(&self, text: &[u8]) -> Vec<u8> {
        let Some(words) = &self.words else {
            return text.to_vec();
        };
        let mut out = Vec::with_capacity(text.len());
        let mut at = 0;
        for caps in words.captures_iter(text) {
            let Some(secret) = caps.get(1).or_else(|| caps.get(2)) else {
                continue;
            };
            if secret.as_bytes() == MASK {
                continue;
            }
            out.extend_from_slice(&text[at..secret.start()]);
            out.extend_from_slice(MASK);
            at = secret.end();
        }
        out.extend_from_slice(&text[at..]);
        out
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
    fn phrase_inside_a_word_is_masked() {
        let mut m = Masker::new(&["topsecret"], &[]);
        assert_eq!(run(&mut m, &["a=topsecret;b\n"]), "a=[MASKED];b\n");
    }

    #[test]
    fn token_prefixes_and_url_params() {
        let mut m = Masker::new::<&str>(&[], &["custom_".to_string()]);
        let out = run(
            &mut m,
            &[
                "token glpat-abc",
                "DEF123 and custom_x1 and https://h/p?a=1&X-Amz-Signature=dead",
                "beef&b=2\n",
            ],
        );
        assert_eq!(
            out,
            "token [MASKED] and [MASKED] and https://h/p?a=1&X-Amz-Signature=[MASKED]&b=2\n"
        );
    }

    #[test]
    fn default_tokens_can_be_limited_to_glpat() {
        let mut m = Masker::with_default_tokens::<&str>(&[], &[], false);
        assert_eq!(
            run(&mut m, &["glpat-aaa glrt-bbb\n"]),
            "[MASKED] glrt-bbb\n"
        );
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
    fn harmless_partial_words_stream_at_once() {
        let mut m = Masker::new::<&str>(&[], &[]);
        assert_eq!(m.push(b"progress..."), b"progress...");
        assert_eq!(m.push(b"x gl"), b"x ");
        assert_eq!(m.push(b"pat-secret"), b"");
        assert_eq!(m.push(b"MORE done"), b"[MASKED] done");
        assert_eq!(m.push(b"https://h/p?"), b"https://h/p");
        assert_eq!(m.push(b"private_token=abc"), b"");
        assert_eq!(m.finish(), b"?private_token=[MASKED]");
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
