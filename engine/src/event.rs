//! Facts the driver feeds into the engine with [`Engine::handle`](super::Engine::handle):
//! results of earlier [`Command`](super::Command)s, and timer wake-ups.
//!
//! Events about machines the engine no longer tracks, or that do not match what the engine is
//! waiting for, are ignored (a driver may deliver late or duplicate results safely).

use super::machine::TargetLabels;

/// A fact for the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Time passed: fire every timer due at `now`. Harmless when nothing is due.
    Tick,
    /// A `Command::Create` finished.
    Created {
        /// The machine.
        name: String,
        /// Whether `docker-machine create` succeeded.
        ok: bool,
    },
    /// The answer to `Command::CheckExists`.
    Exists {
        /// The machine.
        name: String,
        /// False if the provider says it does not exist.
        exists: bool,
    },
    /// A `Command::Stop` finished (its result does not change anything).
    Stopped {
        /// The machine.
        name: String,
    },
    /// A `Command::Remove` finished.
    Removed {
        /// The machine.
        name: String,
        /// Whether `docker-machine rm -y` succeeded.
        ok: bool,
    },
    /// A `Command::ForceRemove` finished.
    ForceRemoved {
        /// The machine.
        name: String,
        /// Whether `docker-machine rm -f` succeeded.
        ok: bool,
    },
    /// The provider's stored state gave new metric target labels for a machine.
    Labels {
        /// The machine.
        name: String,
        /// The labels.
        labels: TargetLabels,
    },
}
