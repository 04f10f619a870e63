//! Token helpers: telling authentication tokens from registration tokens, and the short form
//! that is the only part of a token ever written to a log line.

/// Whether `token` is a runner authentication token of the "created" kind (`glrt-…`). As
/// upstream, only the prefix counts; `glrtr-` (a registration token) does not match.
pub fn is_authentication_token(token: &str) -> bool {
    token.starts_with("glrt-")
}

/// The short token used in logs and machine names: the first 9 characters after stripping
/// `glrt-`/`glrtr-` and a partition prefix `t1_`/`t2_`/`t3_`; 8 characters of a legacy token.
pub fn short_token(token: &str) -> String {
    let (rest, len) = if let Some(r) = token.strip_prefix("glrtr-") {
        (r, 9)
    } else if let Some(r) = token.strip_prefix("glrt-") {
        (r, 9)
    } else {
        (token, 8)
    };
    let rest = ["t1_", "t2_", "t3_"]
        .iter()
        .find_map(|p| rest.strip_prefix(p))
        .unwrap_or(rest);
    rest.chars().take(len).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_forms() {
        assert_eq!(short_token("glrt-t1_abcdefghijKLMN"), "abcdefghi");
        assert_eq!(short_token("glrt-zyxwvutsrqpo"), "zyxwvutsr");
        assert_eq!(short_token("glrtr-123456789012"), "123456789");
        assert_eq!(short_token("0123456789abcdef"), "01234567");
        assert_eq!(short_token("ab"), "ab");
        assert!(is_authentication_token("glrt-x"));
        assert!(!is_authentication_token("glrtr-x"));
    }
}
