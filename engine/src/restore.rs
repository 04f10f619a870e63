//! Restoring machines from the crash-safe ledger after a restart (issue 13), sans-IO.
//!
//! gitlab-runner keeps machine state in memory only: after a restart every machine the listing
//! shows is adopted as Idle with one build. With a ledger, the manager calls
//! [`Engine::restore`] once, before the first pass, and the engine resumes from what it knew:
//!
//! | saved state | restored as |
//! |---|---|
//! | Idle, Acquired, Used | Idle, with its used count and last use (no job survives a restart; the next `Use` checks connectivity as always) |
//! | Removing | Removing, its removal attempts and failed-attempt count kept, and a new attempt started at once |
//! | Creating | Removing ("creation interrupted by a restart"): the creation died with the process, so the machine may lack what a job needs (docker-machine writes its certificates last); it is never handed to a job, and a removal attempt starts at once (nothing to remove when the provider does not have it) |
//!
//! Without a call to `restore` (no ledger, a first start after migrating), nothing changes:
//! adoption as upstream.

use super::command::{Notice, Reason};
use super::machine::{Machine, MachineState};
use super::{Engine, RunnerId, Time};

/// One machine as the ledger recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredMachine {
    /// The machine name.
    pub name: String,
    /// The owning runner, when the manager could match the ledger's runner to the config.
    pub runner: Option<RunnerId>,
    /// Its state when saved.
    pub state: MachineState,
    /// Jobs started on it.
    pub used_count: i64,
    /// Its last use.
    pub used: Time,
    /// Removal attempts made so far.
    pub removal_attempts: i64,
    /// Failed attempts in the current removal.
    pub retry_count: u32,
    /// Why it was being removed (Removing only).
    pub reason: Option<Reason>,
}

/// What [`Engine::restore`] did with each record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Restored as Idle with their recorded history.
    pub restored: Vec<String>,
    /// Restored as Removing, with a removal attempt started.
    pub resumed_removals: Vec<String>,
    /// Records of interrupted creations, restored as Removing with a removal attempt started.
    pub interrupted_creations: Vec<String>,
    /// Records for names the engine already tracks, or for a runner it does not have (the
    /// record is then kept without an owner).
    pub skipped: Vec<String>,
}

impl Engine {
    /// Every tracked machine as a ledger would record it, in ledger order: what to persist
    /// after an input that changed a machine (the manager decides when).
    pub fn snapshot(&self) -> Vec<RestoredMachine> {
        self.ledger
            .iter()
            .map(|(_, m)| RestoredMachine {
                name: m.name.to_string(),
                runner: m.runner.map(RunnerId),
                state: m.state,
                used_count: m.used_count,
                used: m.used,
                removal_attempts: m.removal_attempts,
                retry_count: m.retry_count,
                reason: m.reason,
            })
            .collect()
    }

    /// Puts the ledger's machines back (see the module docs). Call it once, before the first
    /// Acquire pass; then drain `poll_command` as after every input (resumed removals send
    /// their first command).
    pub fn restore(&mut self, records: Vec<RestoredMachine>, now: Time) -> RestoreReport {
        let mut report = RestoreReport::default();
        for r in records {
            if self.ledger.id_of(&r.name).is_some() {
                report.skipped.push(r.name);
                continue;
            }
            let runner = r.runner.filter(|id| self.runners.get(id.0).is_some());
            if r.runner.is_some() && runner.is_none() {
                report.skipped.push(r.name.clone());
            }
            let interrupted = r.state == MachineState::Creating;
            let state = match r.state {
                MachineState::Creating | MachineState::Removing => MachineState::Removing,
                MachineState::Idle | MachineState::Acquired | MachineState::Used => {
                    MachineState::Idle
                }
            };
            let seq = self.next_seq();
            let mut m = Machine::new(&r.name, state, now, seq);
            m.used_count = r.used_count;
            m.used = r.used;
            m.runner = runner.map(|id| id.0);
            m.unvetted = true;
            m.max_removal_attempts = runner
                .and_then(|id| self.runners.get(id.0))
                .map_or(0, |s| s.policy.max_removal_attempts);
            if state == MachineState::Removing {
                let reason = if interrupted {
                    Reason::CreationInterrupted
                } else {
                    r.reason.unwrap_or(Reason::TooManyIdleMachines)
                };
                m.reason = Some(reason);
                m.retry_count = r.retry_count;
                m.removal_attempts = r.removal_attempts.max(0);
                let id = self.ledger.insert(m);
                self.notices.push_back(Notice::Removing {
                    name: r.name.clone(),
                    reason,
                    last_used: r.used,
                });
                self.begin_removal_attempt(id);
                if interrupted {
                    report.interrupted_creations.push(r.name);
                } else {
                    report.resumed_removals.push(r.name);
                }
            } else {
                self.ledger.insert(m);
                report.restored.push(r.name);
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::{TimeDelta, TimeZone, Utc};

    use super::*;
    use crate::{AcquireStep, Command, Event, IdleSettings, Limits, RemovalDecision, RunnerPolicy};

    const R: RunnerId = RunnerId(0);

    fn t(secs: i64) -> Time {
        Utc.with_ymd_and_hms(2026, 11, 20, 10, 0, 0).unwrap() + TimeDelta::seconds(secs)
    }

    fn engine(max_builds: i64, max_removal_attempts: i64) -> Engine {
        Engine::new(
            vec![RunnerPolicy {
                name: "test".into(),
                token: "glrt-abcdefghijk".into(),
                limits: Limits {
                    limit: 0,
                    max_builds,
                    max_growth_rate: 0,
                },
                max_removal_attempts,
                machine_name: "auto-%s".into(),
                machine_driver: "fake".into(),
                machine_options: Vec::new(),
                machine_options_with_name: Vec::new(),
                idle: Arc::new(IdleSettings {
                    idle_count: 0,
                    idle_time: 3600,
                    ..IdleSettings::default()
                }),
            }],
            7,
        )
    }

    fn name(n: u32) -> String {
        format!("runner-abcdefghi-auto-{}-{:08x}", 1_700_000_000 + n, n)
    }

    fn rec(n: u32, state: MachineState, used_count: i64) -> RestoredMachine {
        RestoredMachine {
            name: name(n),
            runner: Some(R),
            state,
            used_count,
            used: t(-120),
            removal_attempts: 0,
            retry_count: 0,
            reason: None,
        }
    }

    fn pass_removals(e: &mut Engine, listed: &[String]) -> (Vec<String>, Vec<RemovalDecision>) {
        let mut step = e.begin_acquire(R, listed, t(0)).unwrap();
        loop {
            match step {
                AcquireStep::Done(out) => return (out.report.adopted, out.report.removals),
                AcquireStep::CheckConnectivity { name } => {
                    step = e.connectivity_result(&name, true, t(0)).unwrap();
                }
            }
        }
    }

    #[test]
    fn without_a_ledger_listed_machines_are_adopted_with_one_build() {
        let mut e = engine(3, 0);
        let (adopted, removals) = pass_removals(&mut e, &[name(1)]);
        assert_eq!(adopted, vec![name(1)]);
        assert!(removals.is_empty());
        assert_eq!(e.machine(&name(1)).unwrap().used_count, 1);
    }

    #[test]
    fn restored_machines_keep_their_history_and_max_builds_applies_to_it() {
        let mut e = engine(3, 0);
        let report = e.restore(
            vec![
                rec(1, MachineState::Used, 3),
                rec(2, MachineState::Idle, 1),
                rec(3, MachineState::Acquired, 2),
            ],
            t(-1),
        );
        assert_eq!(report.restored, vec![name(1), name(2), name(3)]);
        for n in 1..=3 {
            let m = e.machine(&name(n)).unwrap();
            assert_eq!(m.state, MachineState::Idle, "no job survives a restart");
            assert_eq!(m.used, t(-120));
        }
        let (adopted, removals) = pass_removals(&mut e, &[name(1), name(2), name(3)]);
        assert!(
            adopted.is_empty(),
            "known machines are not adopted: {adopted:?}"
        );
        let removed: Vec<(&str, Reason)> = removals
            .iter()
            .map(|d| (d.name.as_str(), d.reason))
            .collect();
        assert_eq!(
            removed,
            vec![(name(1).as_str(), Reason::TooManyBuilds)],
            "the machine that had run MaxBuilds jobs goes, the others stay"
        );
        assert_eq!(e.machine(&name(3)).unwrap().used_count, 2);
    }

    #[test]
    fn a_removal_in_flight_resumes_with_its_attempts_counted() {
        let mut e = engine(0, 2);
        let mut r = rec(4, MachineState::Removing, 1);
        r.removal_attempts = 1;
        r.retry_count = 1;
        r.reason = Some(Reason::TooManyIdleMachines);
        let report = e.restore(vec![r, rec(5, MachineState::Creating, 0)], t(0));
        assert_eq!(report.resumed_removals, vec![name(4)]);
        assert_eq!(report.interrupted_creations, vec![name(5)]);
        assert_eq!(
            e.machine(&name(5)).map(|m| m.state),
            Some(MachineState::Removing),
            "an interrupted creation is never handed to a job: it is removed"
        );
        assert_eq!(
            e.poll_command(),
            Some(Command::CheckExists {
                name: name(4),
                reason: Reason::TooManyIdleMachines
            })
        );
        assert_eq!(
            e.poll_command(),
            Some(Command::CheckExists {
                name: name(5),
                reason: Reason::CreationInterrupted
            })
        );
        // Its second attempt is its last (MaxRemovalAttempts = 2): a failure gives up.
        e.handle(
            Event::Exists {
                name: name(4),
                exists: true,
            },
            t(1),
        );
        assert!(matches!(e.poll_command(), Some(Command::Stop { .. })));
        e.handle(Event::Stopped { name: name(4) }, t(2));
        assert!(matches!(
            e.poll_command(),
            Some(Command::Remove { attempt: 2, .. })
        ));
        e.handle(
            Event::Removed {
                name: name(4),
                ok: false,
            },
            t(3),
        );
        e.handle(Event::Tick, t(3 + 3600));
        let mut gave_up = false;
        while let Some(c) = e.poll_command() {
            gave_up |= matches!(c, Command::ForceRemove { gave_up: true, .. });
        }
        assert!(
            gave_up,
            "the restored attempt count brings the give-up forward"
        );
    }

    #[test]
    fn a_snapshot_restores_into_a_fresh_engine_as_it_was() {
        let mut e = engine(0, 0);
        let mut removing = rec(3, MachineState::Removing, 2);
        removing.removal_attempts = 1;
        removing.retry_count = 1;
        removing.reason = Some(Reason::TooManyBuilds);
        e.restore(
            vec![
                rec(1, MachineState::Idle, 4),
                rec(2, MachineState::Idle, 1),
                removing,
            ],
            t(0),
        );
        let snap = e.snapshot();
        assert_eq!(snap.len(), 3);
        let removing = snap.iter().find(|m| m.name == name(3)).unwrap();
        assert_eq!(removing.state, MachineState::Removing);
        assert_eq!(removing.removal_attempts, 2, "the resumed attempt counts");
        assert_eq!(removing.reason, Some(Reason::TooManyBuilds));
        let mut fresh = engine(0, 0);
        fresh.restore(snap.clone(), t(1));
        let again = fresh.snapshot();
        let idle = |v: &[RestoredMachine]| -> Vec<(String, i64, Time, Option<RunnerId>)> {
            v.iter()
                .filter(|m| m.state == MachineState::Idle)
                .map(|m| (m.name.clone(), m.used_count, m.used, m.runner))
                .collect()
        };
        assert_eq!(idle(&again), idle(&snap));
        assert_eq!(
            idle(&snap),
            vec![
                (name(1), 4, t(-120), Some(R)),
                (name(2), 1, t(-120), Some(R))
            ]
        );
    }

    #[test]
    fn known_names_and_unknown_runners_are_reported() {
        let mut e = engine(0, 0);
        e.restore(vec![rec(1, MachineState::Idle, 1)], t(0));
        let mut stranger = rec(2, MachineState::Idle, 4);
        stranger.runner = Some(RunnerId(9));
        let report = e.restore(vec![rec(1, MachineState::Idle, 9), stranger], t(0));
        assert_eq!(report.skipped, vec![name(1), name(2)]);
        assert_eq!(report.restored, vec![name(2)], "kept without an owner");
        assert_eq!(
            e.machine(&name(1)).unwrap().used_count,
            1,
            "the first record stands"
        );
    }
}
