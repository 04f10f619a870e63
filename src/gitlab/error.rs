//! Typed errors of the GitLab client.

/// What went wrong talking to GitLab, before any endpoint-specific meaning is given to it.
#[derive(Debug, thiserror::Error)]
pub enum GitlabError {
    /// The client could not be built (upstream's status −100): a bad URL scheme, an unreadable
    /// certificate file, a key that does not match. Fix the runner's `url` or TLS settings.
    #[error("client error: {0}")]
    Client(String),
    /// No HTTP response: connection refused, DNS, TLS handshake, timeout (upstream's −1).
    #[error("{endpoint}: cannot reach GitLab at {url}: {message}")]
    Transport {
        /// The endpoint called.
        endpoint: &'static str,
        /// The URL called (never holds a token).
        url: String,
        /// What the HTTP client said.
        message: String,
    },
    /// A response arrived but its body is not what the endpoint promises (upstream's −1).
    #[error("{endpoint}: GitLab answered {status} with a body drover cannot read: {message}")]
    Decode {
        /// The endpoint called.
        endpoint: &'static str,
        /// The HTTP status.
        status: u16,
        /// What was wrong (wrong content type, bad JSON with its position).
        message: String,
    },
    /// GitLab answered with a status the endpoint treats as a failure.
    #[error("{endpoint}: GitLab answered {status}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Status {
        /// The endpoint called.
        endpoint: &'static str,
        /// The HTTP status.
        status: u16,
        /// GitLab's `message`, when the body had one.
        message: Option<String>,
    },
}

impl GitlabError {
    /// The HTTP status, or upstream's pseudo-status: −1 for transport and decode failures,
    /// −100 for a client that could not be built.
    pub fn status(&self) -> i32 {
        match self {
            GitlabError::Client(_) => -100,
            GitlabError::Transport { .. } | GitlabError::Decode { .. } => -1,
            GitlabError::Status { status, .. } => i32::from(*status),
        }
    }
}
