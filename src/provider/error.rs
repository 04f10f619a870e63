//! Typed provider errors: every failure drover sees from a plugin, with its [`ErrorKind`].
//!
//! The manager and engine branch on [`ProviderError::kind`] only; the message is for people.
//! Failures of the plugin itself (it would not start, broke the protocol, died, or ran out of
//! time) get kinds from the same closed set, so callers need one `match`.

use std::path::PathBuf;
use std::time::Duration;

use super::protocol::ErrorKind;

/// A failed provider call.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The plugin answered the operation with an error.
    #[error("provider {op}{}: {kind}: {message}", on(.machine))]
    Plugin {
        /// The operation (`create`, `remove`, …).
        op: &'static str,
        /// The machine it was about.
        machine: Option<String>,
        /// The kind the plugin chose.
        kind: ErrorKind,
        /// The plugin's message.
        message: String,
    },
    /// The plugin executable could not be started.
    #[error("cannot start provider plugin {}: {message}; check the plugin path and that it is executable", .program.display())]
    Spawn {
        /// The executable.
        program: PathBuf,
        /// Why.
        message: String,
    },
    /// The plugin speaks another protocol version.
    #[error("provider plugin {plugin} speaks protocol version {theirs}, drover speaks {ours}; upgrade the plugin or drover")]
    IncompatibleVersion {
        /// The plugin's name.
        plugin: String,
        /// Its version.
        theirs: u32,
        /// Ours.
        ours: u32,
    },
    /// The plugin wrote something that is not the protocol.
    #[error("provider plugin broke the protocol during {op}: {message}")]
    Protocol {
        /// The operation.
        op: &'static str,
        /// What was wrong.
        message: String,
    },
    /// The plugin process exited (or closed stdout) before answering.
    #[error("provider plugin exited during {op}{}; it will be restarted on the next call", on(.machine))]
    Exited {
        /// The operation.
        op: &'static str,
        /// The machine.
        machine: Option<String>,
    },
    /// No answer within the deadline.
    #[error("provider {op}{} timed out after {}s", on(.machine), .after.as_secs())]
    Timeout {
        /// The operation.
        op: &'static str,
        /// The machine.
        machine: Option<String>,
        /// The deadline.
        after: Duration,
    },
    /// The caller cancelled the call.
    #[error("provider {op}{} cancelled", on(.machine))]
    Cancelled {
        /// The operation.
        op: &'static str,
        /// The machine.
        machine: Option<String>,
    },
}

fn on(machine: &Option<String>) -> String {
    match machine {
        Some(m) => format!(" of machine {m:?}"),
        None => String::new(),
    }
}

impl ProviderError {
    /// The kind to branch on.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ProviderError::Plugin { kind, .. } => *kind,
            ProviderError::Spawn { .. } => ErrorKind::InvalidConfig,
            ProviderError::IncompatibleVersion { .. } => ErrorKind::Unsupported,
            ProviderError::Protocol { .. } => ErrorKind::Failed,
            ProviderError::Exited { .. } => ErrorKind::Transient,
            ProviderError::Timeout { .. } => ErrorKind::Timeout,
            ProviderError::Cancelled { .. } => ErrorKind::Cancelled,
        }
    }

    /// Whether the machine was not found.
    pub fn is_not_found(&self) -> bool {
        self.kind() == ErrorKind::NotFound
    }
}
