//! The engine's timers: a closed set of reasons plus an ordered table; the earliest entry is
//! what [`Engine::poll_timeout`](super::Engine::poll_timeout) returns.
//!
//! Entries are never cancelled: a timer whose machine moved on is recognised as stale when it
//! fires and ignored, so extra ticks are harmless.

use std::collections::BTreeMap;

use super::machine::Id;
use super::Time;

/// Why the engine wants to wake up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    /// `removeRetryInterval` after a failed removal attempt.
    RemoveRetry(Id),
    /// The drain backoff before the next attempt.
    DrainRetry(Id),
    /// The drain's `shutdown_timeout` ends.
    DrainDeadline,
    /// A waiting `Use` session's 1 s availability poll.
    UsePoll(u64),
    /// A `Use` session's next attempt after a failed one.
    UseRetry(u64),
    /// The next background retry of a removal that gave up.
    OrphanRetry(u64),
}

#[derive(Debug, Default)]
pub(crate) struct Timers {
    table: BTreeMap<(Time, u64), Timer>,
    seq: u64,
}

impl Timers {
    pub(crate) fn arm(&mut self, at: Time, timer: Timer) {
        self.seq += 1;
        self.table.insert((at, self.seq), timer);
    }

    pub(crate) fn next(&self) -> Option<Time> {
        self.table.keys().next().map(|(t, _)| *t)
    }

    /// Removes and returns the earliest timer due at `now`.
    pub(crate) fn pop_due(&mut self, now: Time) -> Option<Timer> {
        let (&key, _) = self.table.iter().next()?;
        if key.0 > now {
            return None;
        }
        self.table.remove(&key)
    }
}
