//! Token helpers: telling authentication tokens from registration tokens. The short form, the
//! only part of a token ever written to a log line, is the engine's
//! [`crate::engine::naming::short_token`] (upstream's one `ShortenToken`).

/// Whether `token` is a runner authentication token of the "created" kind (`glrt-…`). As
/// upstream, only the prefix counts; `glrtr-` (a registration token) does not match.
pub fn is_authentication_token(token: &str) -> bool {
    token.starts_with("glrt-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authentication_tokens() {
        assert!(is_authentication_token("glrt-x"));
        assert!(!is_authentication_token("glrtr-x"));
    }
}
