//! The removal lifecycle (spec §9): `remove(reason)`, then up to `MaxRemovalAttempts`
//! attempts of exists-check → stop → `rm -y`, 30 s apart; stuck machines (3+ failed attempts)
//! take a provider-wide lock so only one of them is removed at a time; after the last failed
//! attempt, one `rm -f` and the record is deleted anyway.
//!
//! Each step is a [`Command`]; its result comes back as an event handled here.

use std::collections::VecDeque;

use chrono::TimeDelta;

use super::command::{Command, Notice, Reason};
use super::machine::{Id, MachineState, RemovalPhase, STUCK_AFTER_RETRIES};
use super::policy::DEFAULT_MAX_REMOVAL_ATTEMPTS;
use super::timers::Timer;
use super::{Engine, Time, REMOVE_RETRY_INTERVAL_SECS};

/// upstream's `stuckRemoveLock`: one holder, the rest wait in order.
#[derive(Debug, Default)]
pub(crate) struct StuckLock {
    holder: Option<Id>,
    waiting: VecDeque<Id>,
}

impl Engine {
    /// `remove(reason)`: the machine becomes Removing with this reason, its retry count 0 and
    /// its last use `now`, and the first attempt starts. If a removal is already running for
    /// it, that one continues (with the new reason).
    pub(crate) fn start_removal(&mut self, id: Id, reason: Reason, now: Time) {
        let Some(m) = self.ledger.get_mut(id) else {
            return;
        };
        m.reason = Some(reason);
        m.state = MachineState::Removing;
        m.retry_count = 0;
        let last_used = std::mem::replace(&mut m.used, now);
        let name = String::from(&*m.name);
        let running = m.removal.is_some();
        self.notices.push_back(Notice::Removing {
            name: name.clone(),
            reason,
            last_used,
        });
        if !running {
            if let Some(m) = self.ledger.get_mut(id) {
                m.removal_attempts = 0;
            }
            self.begin_removal_attempt(id);
        }
    }

    pub(super) fn begin_removal_attempt(&mut self, id: Id) {
        let Some(m) = self.ledger.get_mut(id) else {
            return;
        };
        m.removal_attempts += 1;
        m.removal = Some(RemovalPhase::CheckExists);
        let cmd = Command::CheckExists {
            name: String::from(&*m.name),
            reason: m.reason.unwrap_or(Reason::TooManyIdleMachines),
        };
        self.commands.push_back(cmd);
    }

    fn send_stop(&mut self, id: Id) {
        if let Some(m) = self.ledger.get_mut(id) {
            m.removal = Some(RemovalPhase::Stop);
            let cmd = Command::Stop {
                name: String::from(&*m.name),
                reason: m.reason.unwrap_or(Reason::TooManyIdleMachines),
            };
            self.commands.push_back(cmd);
        }
    }

    pub(crate) fn on_exists(&mut self, name: &str, exists: bool, now: Time) {
        let Some(id) = self.ledger.id_of(name) else {
            self.orphan_on_exists(name, exists);
            return;
        };
        let Some(m) = self.ledger.get(id) else {
            return;
        };
        match m.removal {
            Some(RemovalPhase::CheckExists) => {
                if !exists {
                    self.finish_removal(id, false);
                } else if m.retry_count >= STUCK_AFTER_RETRIES {
                    if self.stuck.holder.is_none() {
                        self.stuck.holder = Some(id);
                        self.send_stop(id);
                    } else {
                        self.stuck.waiting.push_back(id);
                        if let Some(m) = self.ledger.get_mut(id) {
                            m.removal = Some(RemovalPhase::WaitStuckLock);
                        }
                    }
                } else {
                    self.send_stop(id);
                }
            }
            Some(RemovalPhase::DrainCheck(n)) => self.drain_on_exists(id, n, exists, now),
            _ => {}
        }
    }

    pub(crate) fn on_stopped(&mut self, name: &str) {
        let Some(id) = self.ledger.id_of(name) else {
            return;
        };
        let Some(m) = self.ledger.get_mut(id) else {
            return;
        };
        if m.removal != Some(RemovalPhase::Stop) {
            return;
        }
        m.removal = Some(RemovalPhase::Remove);
        let cmd = Command::Remove {
            name: String::from(&*m.name),
            reason: m.reason.unwrap_or(Reason::TooManyIdleMachines),
            attempt: m.removal_attempts,
        };
        self.commands.push_back(cmd);
    }

    pub(crate) fn on_removed(&mut self, name: &str, ok: bool, now: Time) {
        let Some(id) = self.ledger.id_of(name) else {
            return;
        };
        let Some(m) = self.ledger.get_mut(id) else {
            return;
        };
        if m.removal != Some(RemovalPhase::Remove) {
            return;
        }
        if ok {
            self.release_stuck_lock(id);
            self.finish_removal(id, false);
            return;
        }
        m.retry_count = m.retry_count.saturating_add(1);
        m.removal = Some(RemovalPhase::Backoff);
        self.release_stuck_lock(id);
        self.timers.arm(
            now + TimeDelta::seconds(REMOVE_RETRY_INTERVAL_SECS),
            Timer::RemoveRetry(id),
        );
    }

    /// The backoff after a failed attempt ended: the next attempt, or give up.
    pub(crate) fn on_remove_retry(&mut self, id: Id) {
        let Some(m) = self.ledger.get_mut(id) else {
            return;
        };
        if m.removal != Some(RemovalPhase::Backoff) {
            return;
        }
        let allowed = if m.max_removal_attempts <= 0 {
            DEFAULT_MAX_REMOVAL_ATTEMPTS
        } else {
            m.max_removal_attempts
        };
        if m.removal_attempts < allowed {
            self.begin_removal_attempt(id);
            return;
        }
        m.removal = Some(RemovalPhase::ForceRemove);
        let name = String::from(&*m.name);
        let reason = m.reason.unwrap_or(Reason::TooManyIdleMachines);
        self.notices.push_back(Notice::Warning(format!(
            "giving up removing {name} after {} attempts; the VM may be orphaned, check the \
             cloud provider",
            m.removal_attempts
        )));
        self.commands.push_back(Command::ForceRemove {
            name,
            reason,
            gave_up: true,
        });
    }

    pub(crate) fn on_force_removed(&mut self, name: &str, ok: bool, now: Time) {
        let Some(id) = self.ledger.id_of(name) else {
            self.orphan_on_force_removed(name, ok, now);
            return;
        };
        let Some(m) = self.ledger.get(id) else {
            return;
        };
        match m.removal {
            Some(RemovalPhase::ForceRemove) => {
                let reason = m.reason.unwrap_or(Reason::TooManyIdleMachines);
                let name = name.to_string();
                self.finish_removal(id, true);
                self.track_orphan(&name, reason, now);
            }
            Some(RemovalPhase::DrainForce(n)) => self.drain_on_force(id, n, ok, now),
            _ => {}
        }
    }

    fn release_stuck_lock(&mut self, id: Id) {
        if self.stuck.holder != Some(id) {
            return;
        }
        self.stuck.holder = None;
        while let Some(next) = self.stuck.waiting.pop_front() {
            let waiting = self
                .ledger
                .get(next)
                .is_some_and(|m| m.removal == Some(RemovalPhase::WaitStuckLock));
            if waiting {
                self.stuck.holder = Some(next);
                self.send_stop(next);
                break;
            }
        }
    }

    /// Deletes the record (metric `removed`), after success or after giving up.
    pub(crate) fn finish_removal(&mut self, id: Id, gave_up: bool) {
        if let Some(m) = self.ledger.delete(id) {
            self.reconcile_note_deleted(&m.name);
            self.notices.push_back(Notice::Removed {
                name: String::from(&*m.name),
                reason: m.reason.unwrap_or(Reason::TooManyIdleMachines),
                gave_up,
                labels: *m.labels,
            });
            self.drain_record_deleted(id, gave_up);
        }
    }

    pub(crate) fn fire_timers(&mut self, now: Time) {
        while let Some(timer) = self.timers.pop_due(now) {
            match timer {
                Timer::RemoveRetry(id) => self.on_remove_retry(id),
                Timer::DrainRetry(id) => self.drain_on_retry(id, now),
                Timer::DrainDeadline => self.drain_on_deadline(now),
                Timer::UsePoll(k) => self.use_on_poll(k, now),
                Timer::UseRetry(k) => self.use_on_retry(k),
                Timer::OrphanRetry(k) => self.orphan_on_timer(k),
            }
        }
    }
}
