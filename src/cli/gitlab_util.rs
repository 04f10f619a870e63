//! What the GitLab-facing commands share: a runtime for one-off calls, the client, and the
//! `drover: <message>` exit.

use std::process::ExitCode;

use crate::gitlab::{Client, ClientSettings};

/// Runs a future to completion on a fresh current-thread runtime.
pub fn block_on<F: std::future::Future>(f: F) -> Result<F::Output, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(|rt| rt.block_on(f))
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

/// Builds a GitLab client, as an error message when it cannot be built.
pub fn client_for(settings: &ClientSettings) -> Result<Client, String> {
    Client::new(settings).map_err(|e| e.to_string())
}

/// Prints `drover: <message>` on stderr and returns exit code 1.
pub fn fail(message: &str) -> ExitCode {
    eprintln!("drover: {message}");
    ExitCode::FAILURE
}
