//! `$VAR` and `${VAR}` expansion with Go's `os.ExpandEnv` rules, applied to `url` and `token`.
//!
//! Rules: `${NAME}` takes any text up to the first `}`; `$NAME` takes the longest run of ASCII
//! letters, digits and `_`; `$` followed by one of `*#$@!?-` or a digit names that one
//! character; unset variables expand to nothing; `${}` and an unclosed `${` are dropped; a `$`
//! followed by nothing that can start a name is kept. The lookup is passed in, so tests do not
//! depend on the process environment.

/// Expands `text` using `lookup` for variable values (missing = empty).
pub fn expand_with(text: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut copied_to = 0;
    while i < bytes.len() {
        if bytes[i] != b'$' || i + 1 >= bytes.len() {
            i += 1;
            continue;
        }
        out.push_str(&text[copied_to..i]);
        let rest = &text[i + 1..];
        let (name, consumed) = shell_name(rest);
        match name {
            Some(name) => out.push_str(&lookup(name).unwrap_or_default()),
            None if consumed > 0 => {} // bad syntax: dropped
            None => out.push('$'),
        }
        i += 1 + consumed;
        copied_to = i;
    }
    out.push_str(&text[copied_to.min(text.len())..]);
    out
}

/// Expands `text` from the process environment.
pub fn expand_env(text: &str) -> String {
    expand_with(text, |name| std::env::var(name).ok())
}

fn is_special(b: u8) -> bool {
    matches!(b, b'*' | b'#' | b'$' | b'@' | b'!' | b'?' | b'-') || b.is_ascii_digit()
}

/// The variable name at the start of `s` (the text after a `$`) and how many bytes it uses.
fn shell_name(s: &str) -> (Option<&str>, usize) {
    let b = s.as_bytes();
    let Some(&first) = b.first() else {
        return (None, 0);
    };
    if first == b'{' {
        if b.len() > 2 && is_special(b[1]) && b[2] == b'}' {
            return (s.get(1..2), 3);
        }
        return match s[1..].find('}') {
            Some(0) => (None, 2),
            Some(end) => (s.get(1..1 + end), end + 2),
            None => (None, 1),
        };
    }
    if is_special(first) {
        return (s.get(0..1), 1);
    }
    let len = b
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
        .count();
    if len == 0 {
        (None, 0)
    } else {
        (s.get(..len), len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "RUNNER_TOKEN" => Some("glrt-abc".into()),
            "HOST" => Some("gitlab.example.com".into()),
            "1" => Some("one".into()),
            _ => None,
        }
    }

    #[test]
    fn go_expand_env_rules() {
        let x = |s: &str| expand_with(s, env);
        assert_eq!(x("${RUNNER_TOKEN}"), "glrt-abc");
        assert_eq!(x("$RUNNER_TOKEN"), "glrt-abc");
        assert_eq!(x("https://$HOST/"), "https://gitlab.example.com/");
        assert_eq!(x("https://${HOST}:8443"), "https://gitlab.example.com:8443");
        assert_eq!(x("a${MISSING}b"), "ab");
        assert_eq!(x("a$MISSING.b"), "a.b");
        assert_eq!(x("cost: 5$"), "cost: 5$");
        assert_eq!(x("a$ b"), "a$ b");
        assert_eq!(x("a${}b"), "ab");
        assert_eq!(x("a${b"), "ab");
        assert_eq!(x("$1x"), "onex");
        assert_eq!(x("${1}"), "one");
        assert_eq!(x("$$"), "");
        assert_eq!(x("plain"), "plain");
        assert_eq!(x("é$HOSTé"), "égitlab.example.comé");
    }
}
