//! What the engine asks its driver to do ([`Command`]), why ([`Reason`]), and what it tells
//! the driver happened ([`Notice`], for logs and metrics).
//!
//! A command is a request: its result comes back later as an [`Event`](super::Event), never as
//! a return value. Nothing here performs I/O.

use std::fmt;

use super::machine::TargetLabels;
use super::Time;

/// Why the engine creates or removes a machine. The `Display` text of removal reasons is
/// upstream's exact reason string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Reason {
    /// Pre-creation: the pool has less idle capacity than the idle settings ask for.
    IdleCapacity,
    /// On-demand creation for a job (`Use`).
    OnDemand,
    /// The pass: `MaxBuilds` reached ("too many builds").
    TooManyBuilds,
    /// The pass: `limit` reached ("too many machines").
    TooManyMachines,
    /// The pass: idle past `IdleTime` with enough idle capacity ("too many idle machines").
    TooManyIdleMachines,
    /// `Release`: `MaxBuilds` reached ("Too many builds", capital T).
    ReleaseTooManyBuilds,
    /// The connectivity check failed ("machine is unavailable").
    MachineUnavailable,
    /// The creation failed ("Failed to create").
    FailedToCreate,
    /// Shutdown drain ("shutdown drain").
    ShutdownDrain,
    /// drover only: the ledger says the machine was being created when drover stopped, so its
    /// creation never finished ("creation interrupted by a restart").
    CreationInterrupted,
}

impl Reason {
    /// Upstream's reason string (for removals) or a short description (for creations).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::IdleCapacity => "idle capacity below the idle settings",
            Reason::OnDemand => "on demand for a job",
            Reason::TooManyBuilds => "too many builds",
            Reason::TooManyMachines => "too many machines",
            Reason::TooManyIdleMachines => "too many idle machines",
            Reason::ReleaseTooManyBuilds => "Too many builds",
            Reason::MachineUnavailable => "machine is unavailable",
            Reason::FailedToCreate => "Failed to create",
            Reason::ShutdownDrain => "shutdown drain",
            Reason::CreationInterrupted => "creation interrupted by a restart",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request to the driver. Answer each with the matching [`Event`](super::Event).
#[must_use]
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// `docker-machine create --driver DRIVER NAME OPTIONS…`; answer with `Event::Created`.
    Create {
        /// The new machine's name.
        name: String,
        /// `MachineDriver`.
        driver: String,
        /// `MachineOptions` followed by `MachineOptionsWithName` with `%s` replaced by the name.
        options: Vec<String>,
        /// Why it is created.
        reason: Reason,
    },
    /// `docker-machine inspect`: does it exist? Answer with `Event::Exists`.
    CheckExists {
        /// The machine.
        name: String,
        /// Why it is being removed.
        reason: Reason,
    },
    /// `docker-machine stop` (1 min timeout); answer with `Event::Stopped` (errors are ignored).
    Stop {
        /// The machine.
        name: String,
        /// Why it is being removed.
        reason: Reason,
    },
    /// `docker-machine rm -y` (1 h timeout); answer with `Event::Removed`.
    Remove {
        /// The machine.
        name: String,
        /// Why it is being removed.
        reason: Reason,
        /// 1-based attempt number.
        attempt: i64,
    },
    /// `docker-machine rm -f`; answer with `Event::ForceRemoved`.
    ForceRemove {
        /// The machine.
        name: String,
        /// Why it is being removed.
        reason: Reason,
        /// True when normal removal gave up after `MaxRemovalAttempts` (the VM may be
        /// orphaned); false for drain attempts.
        gave_up: bool,
    },
}

/// Something that happened, for logs and metrics (`gitlab_runner_autoscaling_actions_total`).
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// A creation succeeded (`created`).
    Created {
        /// The machine.
        name: String,
        /// Its target labels.
        labels: TargetLabels,
    },
    /// A creation failed (`creation-failed`); a removal with "Failed to create" follows.
    CreationFailed {
        /// The machine.
        name: String,
        /// Its target labels.
        labels: TargetLabels,
    },
    /// A machine started a job (`used`).
    Used {
        /// The machine.
        name: String,
        /// Its target labels.
        labels: TargetLabels,
    },
    /// A removal started.
    Removing {
        /// The machine.
        name: String,
        /// Why.
        reason: Reason,
        /// Its last use before this removal (upstream's log line measures `used` from it).
        last_used: Time,
    },
    /// A record was deleted after removal (`removed`), also after giving up.
    Removed {
        /// The machine.
        name: String,
        /// Why it was removed.
        reason: Reason,
        /// True if every attempt failed and only the force-remove was tried.
        gave_up: bool,
        /// Its target labels.
        labels: TargetLabels,
    },
    /// The shutdown drain ended, with its summary.
    DrainFinished(super::DrainReport),
    /// Something the operator should know (orphaned VM, drain summary, deadlocked growth…).
    Warning(String),
    /// A reconciliation decision: a record whose machine vanished, a listed machine no record
    /// knew (at start and in periodic rounds, see
    /// [`Engine::begin_reconcile`](super::Engine::begin_reconcile)), or an orphan's background
    /// retry (see [`Engine::set_orphan_retry`](super::Engine::set_orphan_retry)).
    Reconciled {
        /// The machine.
        name: String,
        /// What was decided.
        decision: ReconcileDecision,
    },
}

/// What reconciliation decided about a machine the records and the provider disagree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileDecision {
    /// A removal that gave up was retried and the `rm -f` succeeded.
    Removed,
    /// The machine no longer exists at the provider: nothing left to remove (an orphan), or a
    /// record dropped because the provider no longer lists its machine (at start or in a
    /// periodic round).
    Vanished,
    /// A listed machine no record knows (at start or in a periodic round), or an orphan
    /// tracked again: it is adopted from the listing and the normal lifecycle owns it.
    Adopted,
    /// The retried `rm -f` failed; the next retry comes after `next_in_secs`.
    RetryFailed {
        /// Failed retries so far.
        attempt: u32,
        /// Seconds until the next retry.
        next_in_secs: i64,
    },
}

impl ReconcileDecision {
    /// A short label (metrics, logs).
    pub fn as_str(self) -> &'static str {
        match self {
            ReconcileDecision::Removed => "removed",
            ReconcileDecision::Vanished => "vanished",
            ReconcileDecision::Adopted => "adopted",
            ReconcileDecision::RetryFailed { .. } => "retry-failed",
        }
    }
}
