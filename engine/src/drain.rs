//! Shutdown drain (spec §10): remove every tracked machine, busy ones included, at most
//! `concurrency` at a time, each with `max_retries + 1` force-remove attempts and a growing
//! backoff, all bounded by the shutdown timeout.
//!
//! The driver calls [`Engine::begin_drain`] when `[machine.shutdown_drain]` is enabled and
//! keeps feeding events and ticks until [`Notice::DrainFinished`] comes out.

use std::collections::VecDeque;

use chrono::TimeDelta;

use super::command::{Command, Notice, Reason};
use super::machine::{Id, MachineState, RemovalPhase};
use super::timers::Timer;
use super::{Engine, Time};

/// `[machine.shutdown_drain]` plus the global `shutdown_timeout`, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainSettings {
    /// `enabled`; when false the drain is skipped.
    pub enabled: bool,
    /// `concurrency`; 0 or less means 3.
    pub concurrency: i64,
    /// `max_retries`; 0 or less means 3 (quirk: 0 still retries).
    pub max_retries: i64,
    /// `retry_backoff` in seconds; 0 or less means 5.
    pub retry_backoff_secs: i64,
    /// The global `shutdown_timeout` in seconds; 0 or less means 30.
    pub shutdown_timeout_secs: i64,
}

impl DrainSettings {
    fn or_default(v: i64, d: i64) -> i64 {
        if v <= 0 {
            d
        } else {
            v
        }
    }
    /// `concurrency` with the default applied.
    pub fn concurrency(&self) -> usize {
        Self::or_default(self.concurrency, 3)
            .try_into()
            .unwrap_or(usize::MAX)
    }
    /// Attempts per machine: `max_retries + 1` with the default applied.
    pub fn attempts(&self) -> u32 {
        let r = Self::or_default(self.max_retries, 3);
        u32::try_from(r).unwrap_or(u32::MAX - 1).saturating_add(1)
    }
    /// The backoff unit with the default applied.
    pub fn backoff(&self) -> TimeDelta {
        let s = Self::or_default(self.retry_backoff_secs, 5);
        TimeDelta::try_seconds(s).unwrap_or(TimeDelta::MAX)
    }
    /// The shutdown timeout with the default applied.
    pub fn timeout(&self) -> TimeDelta {
        let s = Self::or_default(self.shutdown_timeout_secs, 30);
        TimeDelta::try_seconds(s).unwrap_or(TimeDelta::MAX)
    }
}

/// The drain's summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DrainReport {
    /// Machines removed (or found gone).
    pub succeeded: usize,
    /// Machines whose removal failed or timed out; their records stay.
    pub failed: usize,
    /// Machines never handed out because the timeout ended first.
    pub not_started: usize,
    /// True if the shutdown timeout ended the drain.
    pub timed_out: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Waiting for an in-flight creation or removal.
    Waiting,
    /// Drain attempts running.
    Working,
}

#[derive(Debug)]
pub(crate) struct DrainState {
    settings: DrainSettings,
    deadline: Time,
    pending: VecDeque<Id>,
    active: Vec<(Id, Stage)>,
    report: DrainReport,
}

impl Engine {
    /// Starts the shutdown drain of every tracked machine (all runners, all states).
    /// Ignored while a drain is already running.
    pub fn begin_drain(&mut self, settings: DrainSettings, now: Time) {
        if self.drain.is_some() {
            return;
        }
        if !settings.enabled {
            self.notices.push_back(Notice::Warning(
                "shutdown drain is disabled; machines are left as they are".to_string(),
            ));
            return;
        }
        if settings.timeout() < TimeDelta::minutes(5) {
            self.notices.push_back(Notice::Warning(format!(
                "shutdown_timeout is {} s: a drain may not finish before it ends; consider at \
                 least 300 s",
                settings.timeout().num_seconds()
            )));
        }
        let mut all: Vec<(&str, Id)> = self.ledger.iter().map(|(id, m)| (&*m.name, id)).collect();
        all.sort_unstable();
        let pending = all.into_iter().map(|(_, id)| id).collect();
        let deadline = now.checked_add_signed(settings.timeout()).unwrap_or(now);
        self.timers.arm(deadline, Timer::DrainDeadline);
        self.drain = Some(DrainState {
            settings,
            deadline,
            pending,
            active: Vec::new(),
            report: DrainReport::default(),
        });
        self.drain_progress(now);
    }

    fn drain_done(&mut self, id: Id, success: bool) {
        if let Some(d) = self.drain.as_mut() {
            if let Some(pos) = d.active.iter().position(|(a, _)| *a == id) {
                d.active.swap_remove(pos);
                if success {
                    d.report.succeeded += 1;
                } else {
                    d.report.failed += 1;
                }
            }
        }
    }

    fn in_flight(&self, id: Id) -> Option<bool> {
        let m = self.ledger.get(id)?;
        let transient = matches!(m.state, MachineState::Creating | MachineState::Removing);
        let removal_running = m.removal.is_some_and(|r| r != RemovalPhase::DrainFailed);
        Some(transient && (m.create.is_some() || removal_running))
    }

    /// Re-checks waiting machines, hands out new ones, and reports the end.
    pub(crate) fn drain_progress(&mut self, now: Time) {
        let Some(d) = self.drain.as_ref() else {
            return;
        };
        let waiting: Vec<Id> = d
            .active
            .iter()
            .filter(|(_, s)| *s == Stage::Waiting)
            .map(|(id, _)| *id)
            .collect();
        for id in waiting {
            match self.in_flight(id) {
                None => self.drain_done(id, true),
                Some(true) => {}
                Some(false) => self.drain_work(id),
            }
        }
        loop {
            let Some(d) = self.drain.as_mut() else {
                return;
            };
            if d.active.len() >= d.settings.concurrency() || d.report.timed_out {
                break;
            }
            let Some(id) = d.pending.pop_front() else {
                break;
            };
            d.active.push((id, Stage::Waiting));
            match self.in_flight(id) {
                None => self.drain_done(id, true),
                Some(true) => {}
                Some(false) => {
                    let stale = self.ledger.get(id).is_some_and(|m| {
                        matches!(m.state, MachineState::Creating | MachineState::Removing)
                    });
                    if stale {
                        self.notices.push_back(Notice::Warning(
                            "drain: machine is in a transient state with nothing in flight \
                             (from before a restart); removing it anyway"
                                .to_string(),
                        ));
                    }
                    self.drain_work(id)
                }
            }
        }
        let Some(d) = self.drain.as_ref() else {
            return;
        };
        if d.active.is_empty() && (d.pending.is_empty() || d.report.timed_out) {
            let report = d.report;
            self.drain = None;
            let _ = now;
            self.notices.push_back(Notice::DrainFinished(report));
        }
    }

    fn drain_work(&mut self, id: Id) {
        if let Some(d) = self.drain.as_mut() {
            for (a, s) in d.active.iter_mut() {
                if *a == id {
                    *s = Stage::Working;
                }
            }
        }
        let Some(m) = self.ledger.get_mut(id) else {
            return;
        };
        m.state = MachineState::Removing;
        m.reason = Some(Reason::ShutdownDrain);
        m.removal = Some(RemovalPhase::DrainCheck(1));
        let name = String::from(&*m.name);
        self.notices.push_back(Notice::Removing {
            name: name.clone(),
            reason: Reason::ShutdownDrain,
            last_used: m.used,
        });
        self.commands.push_back(Command::CheckExists {
            name,
            reason: Reason::ShutdownDrain,
        });
    }

    fn drain_delete(&mut self, id: Id) {
        if let Some(m) = self.ledger.delete(id) {
            self.notices.push_back(Notice::Removed {
                name: String::from(&*m.name),
                reason: Reason::ShutdownDrain,
                gave_up: false,
                labels: *m.labels,
            });
        }
        self.drain_done(id, true);
    }

    fn drain_fail(&mut self, id: Id) {
        if let Some(m) = self.ledger.get_mut(id) {
            m.removal = Some(RemovalPhase::DrainFailed);
        }
        self.drain_done(id, false);
    }

    pub(crate) fn drain_on_exists(&mut self, id: Id, n: u32, exists: bool, _now: Time) {
        if !exists {
            self.drain_delete(id);
            return;
        }
        let Some(m) = self.ledger.get_mut(id) else {
            return;
        };
        m.removal = Some(RemovalPhase::DrainForce(n));
        let name = String::from(&*m.name);
        self.commands.push_back(Command::ForceRemove {
            name,
            reason: Reason::ShutdownDrain,
            gave_up: false,
        });
    }

    pub(crate) fn drain_on_force(&mut self, id: Id, n: u32, ok: bool, now: Time) {
        if ok {
            self.drain_delete(id);
            return;
        }
        let Some(d) = self.drain.as_ref() else {
            self.drain_fail(id);
            return;
        };
        if d.report.timed_out || n >= d.settings.attempts() {
            self.drain_fail(id);
            return;
        }
        let at = d
            .settings
            .backoff()
            .checked_mul(i32::try_from(n).unwrap_or(i32::MAX))
            .and_then(|wait| now.checked_add_signed(wait))
            .unwrap_or(d.deadline);
        if let Some(m) = self.ledger.get_mut(id) {
            m.removal = Some(RemovalPhase::DrainBackoff(n));
        }
        self.timers.arm(at, Timer::DrainRetry(id));
    }

    pub(crate) fn drain_on_retry(&mut self, id: Id, _now: Time) {
        let Some(m) = self.ledger.get_mut(id) else {
            return;
        };
        let Some(RemovalPhase::DrainBackoff(n)) = m.removal else {
            return;
        };
        m.removal = Some(RemovalPhase::DrainCheck(n + 1));
        let name = String::from(&*m.name);
        self.commands.push_back(Command::CheckExists {
            name,
            reason: Reason::ShutdownDrain,
        });
    }

    pub(crate) fn drain_on_deadline(&mut self, now: Time) {
        let Some(d) = self.drain.as_mut() else {
            return;
        };
        if now < d.deadline {
            return;
        }
        d.report.timed_out = true;
        d.report.not_started += d.pending.len();
        d.pending.clear();
        let active = d.active.clone();
        self.notices.push_back(Notice::Warning(
            "Drain operation cancelled or timed out".to_string(),
        ));
        for (id, stage) in active {
            let backoff = self
                .ledger
                .get(id)
                .is_some_and(|m| matches!(m.removal, Some(RemovalPhase::DrainBackoff(_))));
            if backoff {
                self.drain_fail(id);
            } else if stage == Stage::Waiting {
                self.drain_done(id, false);
            }
        }
    }

    /// A normal removal deleted a record: a drain waiting on it is done.
    pub(crate) fn drain_record_deleted(&mut self, id: Id, gave_up: bool) {
        let waiting = self.drain.as_ref().is_some_and(|d| {
            d.active
                .iter()
                .any(|(a, s)| *a == id && *s == Stage::Waiting)
        });
        if waiting {
            self.drain_done(id, !gave_up);
        }
    }
}
