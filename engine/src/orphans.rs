//! Removals that gave up are not forgotten (a deliberate difference from upstream, opt-in with
//! [`Engine::set_orphan_retry`](super::Engine::set_orphan_retry)).
//!
//! Upstream deletes a machine's record after `MaxRemovalAttempts` failed removals and one
//! `rm -f`, so a VM the provider still lists, or that `rm -f` could not delete, keeps billing.
//! With orphan retry on, the record is still deleted exactly as upstream (metric `removed`, the
//! machine no longer counts towards `limit`), but its name goes onto an orphan list: after a
//! capped exponential backoff the engine asks `CheckExists`; a machine that is gone is resolved
//! ("vanished"), one that exists gets an `rm -f` ("removed" on success, another backoff on
//! failure). A machine that is tracked again meanwhile (adopted from a listing) belongs to the
//! normal lifecycle and leaves the list ("adopted"). Each decision is one
//! [`Notice::Reconciled`].

use std::collections::BTreeMap;

use chrono::TimeDelta;

use super::command::{Command, Notice, Reason, ReconcileDecision};
use super::timers::Timer;
use super::{Engine, Time, REMOVE_RETRY_INTERVAL_SECS};

/// The backoff of orphan removal retries: `first`, doubled after each failure, at most `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrphanRetry {
    /// The delay before the first retry.
    pub first: TimeDelta,
    /// The longest delay between retries.
    pub cap: TimeDelta,
}

impl Default for OrphanRetry {
    /// 30 s (upstream's `removeRetryInterval`) doubling up to 1 h.
    fn default() -> OrphanRetry {
        OrphanRetry {
            first: TimeDelta::seconds(REMOVE_RETRY_INTERVAL_SECS),
            cap: TimeDelta::hours(1),
        }
    }
}

impl OrphanRetry {
    /// The delay after `failures` failed retries (0 before the first).
    pub fn delay(&self, failures: u32) -> TimeDelta {
        let factor = 1i32.checked_shl(failures.min(30)).unwrap_or(i32::MAX);
        self.first
            .checked_mul(factor)
            .map_or(self.cap, |d| d.min(self.cap))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Waiting,
    Checking,
    Forcing,
}

#[derive(Debug)]
struct Orphan {
    name: String,
    reason: Reason,
    failures: u32,
    phase: Phase,
    /// When its current (or next) retry was due.
    due: Time,
}

/// One orphan as a ledger keeps it, so a restart resumes its retries
/// ([`Engine::orphan_entries`], [`Engine::resume_orphans`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanEntry {
    /// The machine name.
    pub name: String,
    /// Why it was being removed when the removal gave up.
    pub reason: Reason,
    /// Failed background retries so far (the backoff goes on from there).
    pub failures: u32,
    /// When the next retry is due (in the past for a retry that was running).
    pub next_retry: Time,
}

#[derive(Debug, Default)]
pub(crate) struct Orphans {
    settings: Option<OrphanRetry>,
    list: BTreeMap<u64, Orphan>,
    seq: u64,
}

impl Orphans {
    fn key_of(&self, name: &str, phase: Phase) -> Option<u64> {
        self.list
            .iter()
            .find(|(_, o)| o.name == name && o.phase == phase)
            .map(|(k, _)| *k)
    }
}

impl Engine {
    /// Turns background retries of removals that gave up on (`Some`) or off (`None`, upstream's
    /// behaviour and the default). Turning it off forgets the orphan list.
    pub fn set_orphan_retry(&mut self, settings: Option<OrphanRetry>) {
        self.orphans.settings = settings;
        if settings.is_none() {
            self.orphans.list.clear();
        }
    }

    /// The machines whose removal gave up and that are retried in the background.
    pub fn orphans(&self) -> impl Iterator<Item = &str> {
        self.orphans.list.values().map(|o| o.name.as_str())
    }

    /// Whether `name` is on the orphan list.
    pub(crate) fn is_orphan(&self, name: &str) -> bool {
        self.orphans.list.values().any(|o| o.name == name)
    }

    /// Puts a machine whose removal gave up onto the orphan list (after its record was
    /// deleted); its first retry comes after the first backoff delay.
    pub fn track_orphan(&mut self, name: &str, reason: Reason, now: Time) {
        let Some(settings) = self.orphans.settings else {
            return;
        };
        self.add_orphan(name, reason, 0, now + settings.delay(0));
    }

    /// The orphan list as a ledger records it, in the order the orphans were added.
    pub fn orphan_entries(&self) -> Vec<OrphanEntry> {
        self.orphans
            .list
            .values()
            .map(|o| OrphanEntry {
                name: o.name.clone(),
                reason: o.reason,
                failures: o.failures,
                next_retry: o.due,
            })
            .collect()
    }

    /// Puts a ledger's orphans back after a restart: each keeps its failure count and its next
    /// retry time (a retry that was due or running when drover stopped runs at the next tick).
    /// Names already tracked or already orphans are skipped; with orphan retry off, nothing
    /// is resumed (upstream forgets them).
    pub fn resume_orphans(&mut self, entries: Vec<OrphanEntry>) {
        if self.orphans.settings.is_none() {
            return;
        }
        for e in entries {
            if self.ledger.id_of(&e.name).is_none() {
                self.add_orphan(&e.name, e.reason, e.failures, e.next_retry);
            }
        }
    }

    fn add_orphan(&mut self, name: &str, reason: Reason, failures: u32, due: Time) {
        if self.is_orphan(name) {
            return;
        }
        self.orphans.seq += 1;
        let key = self.orphans.seq;
        self.orphans.list.insert(
            key,
            Orphan {
                name: name.to_string(),
                reason,
                failures,
                phase: Phase::Waiting,
                due,
            },
        );
        self.timers.arm(due, Timer::OrphanRetry(key));
    }

    fn resolve_orphan(&mut self, key: u64, decision: ReconcileDecision) {
        if let Some(o) = self.orphans.list.remove(&key) {
            self.reconciled(o.name, decision);
        }
    }

    pub(crate) fn orphan_on_timer(&mut self, key: u64) {
        let Some(o) = self.orphans.list.get_mut(&key) else {
            return;
        };
        if o.phase != Phase::Waiting {
            return;
        }
        if self.ledger.id_of(&o.name).is_some() {
            self.resolve_orphan(key, ReconcileDecision::Adopted);
            return;
        }
        o.phase = Phase::Checking;
        self.commands.push_back(Command::CheckExists {
            name: o.name.clone(),
            reason: o.reason,
        });
    }

    /// An `Exists` answer for an untracked machine; true if it was an orphan's.
    pub(crate) fn orphan_on_exists(&mut self, name: &str, exists: bool) -> bool {
        let Some(key) = self.orphans.key_of(name, Phase::Checking) else {
            return false;
        };
        if !exists {
            self.resolve_orphan(key, ReconcileDecision::Vanished);
            return true;
        }
        if let Some(o) = self.orphans.list.get_mut(&key) {
            o.phase = Phase::Forcing;
            self.commands.push_back(Command::ForceRemove {
                name: o.name.clone(),
                reason: o.reason,
                gave_up: true,
            });
        }
        true
    }

    /// A `ForceRemoved` answer for an untracked machine; true if it was an orphan's.
    pub(crate) fn orphan_on_force_removed(&mut self, name: &str, ok: bool, now: Time) -> bool {
        let Some(key) = self.orphans.key_of(name, Phase::Forcing) else {
            return false;
        };
        if ok {
            self.resolve_orphan(key, ReconcileDecision::Removed);
            return true;
        }
        let Some(settings) = self.orphans.settings else {
            return true;
        };
        if let Some(o) = self.orphans.list.get_mut(&key) {
            o.failures = o.failures.saturating_add(1);
            o.phase = Phase::Waiting;
            let delay = settings.delay(o.failures);
            o.due = now + delay;
            let attempt = o.failures;
            self.notices.push_back(Notice::Reconciled {
                name: o.name.clone(),
                decision: ReconcileDecision::RetryFailed {
                    attempt,
                    next_in_secs: delay.num_seconds(),
                },
            });
            self.timers.arm(now + delay, Timer::OrphanRetry(key));
        }
        true
    }
}
