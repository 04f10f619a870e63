//! Reconciliation of what the engine knows with what the provider lists (issue 13), at start
//! and periodically while running, sans-IO: the driver lists the machines and hands the names
//! in; the engine decides, one [`Notice::Reconciled`] per decision (the driver logs it and
//! counts it in `drover_machine_reconcile_decisions_total{decision}`).
//!
//! Both moments apply the same two rules:
//!
//! * a **vanished** machine (a record whose machine the provider no longer lists, and whose
//!   absence is not expected) is dropped: it would otherwise stay in the ledger, the state gauge
//!   and the free-machine search for ever (`Vanished`);
//! * an **unknown** listed machine (it matches a runner's machine filter, but no record knows
//!   it and it is not an orphan being retried) is adopted as upstream adopts a machine it finds
//!   on disk: Idle, used once (`Adopted`). The passes then decide about it as about any machine
//!   (removal when idle too long, `limit`, `MaxBuilds`).
//!
//! At start ([`Engine::reconcile_ledger`]) the records come from the ledger file and the
//! first pass adopts unknown machines. While running, [`Engine::begin_reconcile`] opens a
//! round before the driver lists the machines and [`Engine::finish_reconcile`] closes it with
//! the listing. Absence is expected for a machine being created (it may not be on disk yet)
//! or being removed (its removal checks on its own); a machine held by a pass or a job
//! (Acquired, Used) is left to the next round after its release. Only machines that were Idle
//! when the round began and still are count as vanished, so one whose creation finished while
//! the listing ran is not dropped; names whose records were deleted while the round was open
//! (a removal that finished) are not adopted back from a listing taken before.

use std::collections::HashSet;

use super::command::{Notice, ReconcileDecision};
use super::machine::{Id, Machine, MachineState};
use super::{Engine, EngineError, RestoredMachine, Time};

/// What one periodic round decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Records dropped because the provider no longer lists their machines.
    pub vanished: Vec<String>,
    /// Listed machines no record knew, now tracked as Idle with one build.
    pub adopted: Vec<String>,
}

/// An open periodic round.
#[derive(Debug, Default)]
pub(crate) struct Round {
    /// The machines that were Idle when the round began.
    idle: Vec<Id>,
    /// Names whose records were deleted since (at most one per machine removed meanwhile).
    deleted: HashSet<Box<str>>,
}

impl Engine {
    /// Start-up reconciliation of ledger records against the provider's listing, before
    /// [`Engine::restore`](super::Engine::restore): a record whose machine the provider no
    /// longer lists is dropped (`Vanished`), and a listed machine that matches a runner's
    /// filter but no record knows is reported as `Adopted` (the first pass adopts it as
    /// upstream does). Records of interrupted creations are kept for `restore` to report.
    /// Returns the records to restore.
    pub fn reconcile_ledger(
        &mut self,
        records: Vec<RestoredMachine>,
        listed: &[String],
    ) -> Vec<RestoredMachine> {
        let listed_set: HashSet<&str> = listed.iter().map(String::as_str).collect();
        let known: HashSet<String> = records.iter().map(|r| r.name.clone()).collect();
        let mut kept = Vec::with_capacity(records.len());
        for r in records {
            // Nothing is in flight at start: only an interrupted creation may be missing.
            if r.state == MachineState::Creating || listed_set.contains(r.name.as_str()) {
                kept.push(r);
            } else {
                self.reconciled(r.name, ReconcileDecision::Vanished);
            }
        }
        for name in self.unknown_listed(listed, |n| known.contains(n)) {
            self.reconciled(name, ReconcileDecision::Adopted);
        }
        kept
    }

    /// Opens a periodic reconciliation round; list the provider's machines next and close
    /// the round with [`Engine::finish_reconcile`] (or [`Engine::cancel_reconcile`] if the
    /// listing failed). Opening a round replaces one left open.
    pub fn begin_reconcile(&mut self, _now: Time) {
        let idle = self
            .ledger
            .iter()
            .filter(|(_, m)| m.state == MachineState::Idle)
            .map(|(id, _)| id)
            .collect();
        self.round = Some(Round {
            idle,
            deleted: HashSet::new(),
        });
    }

    /// Closes the open round with the provider's machine names (see the module docs).
    /// During a shutdown drain nothing is decided (the drain owns every machine).
    pub fn finish_reconcile<S: AsRef<str>>(
        &mut self,
        listed: &[S],
        now: Time,
    ) -> Result<ReconcileReport, EngineError> {
        let round = self
            .round
            .take()
            .ok_or_else(|| EngineError::NotWaiting("a reconciliation listing".into()))?;
        let mut report = ReconcileReport::default();
        if self.drain.is_some() {
            return Ok(report);
        }
        let listed_set: HashSet<&str> = listed.iter().map(AsRef::as_ref).collect();
        for id in round.idle {
            let vanished = self
                .ledger
                .get(id)
                .is_some_and(|m| m.state == MachineState::Idle && !listed_set.contains(&*m.name));
            if !vanished {
                continue;
            }
            if let Some(m) = self.ledger.delete(id) {
                report.vanished.push(m.name.to_string());
                self.reconciled(m.name.into(), ReconcileDecision::Vanished);
            }
        }
        let unknown = self.unknown_listed(listed, |n| round.deleted.contains(n));
        for name in unknown {
            self.adopt(&name, now);
            report.adopted.push(name.clone());
            self.reconciled(name, ReconcileDecision::Adopted);
        }
        Ok(report)
    }

    /// Closes the open round without deciding anything (the listing failed).
    pub fn cancel_reconcile(&mut self) {
        self.round = None;
    }

    /// Notes a deleted record for the open round, if any.
    pub(crate) fn reconcile_note_deleted(&mut self, name: &str) {
        if let Some(r) = self.round.as_mut() {
            r.deleted.insert(name.into());
        }
    }

    /// Listed names, in listing order and once each, that match a runner's filter and that
    /// neither `known`, the engine's records nor the orphan list account for.
    fn unknown_listed<S: AsRef<str>>(
        &self,
        listed: &[S],
        known: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let mut seen = HashSet::new();
        listed
            .iter()
            .map(AsRef::as_ref)
            .filter(|name| {
                self.runners.iter().any(|s| s.matcher.matches(name))
                    && !known(name)
                    && self.ledger.id_of(name).is_none()
                    && !self.is_orphan(name)
                    && seen.insert(*name)
            })
            .map(str::to_string)
            .collect()
    }

    /// Upstream's adoption of a listed machine no record knows: Idle, used once.
    pub(super) fn adopt(&mut self, name: &str, now: Time) -> Id {
        let seq = self.next_seq();
        let mut m = Machine::new(name, MachineState::Idle, now, seq);
        m.used_count = 1;
        m.unvetted = true;
        self.ledger.insert(m)
    }

    /// One reconciliation decision: one notice (a log line and a metric count).
    pub(super) fn reconciled(&mut self, name: String, decision: ReconcileDecision) {
        self.notices
            .push_back(Notice::Reconciled { name, decision });
    }
}
