//! Creations and `MaxGrowthRate` queueing (spec §8): the per-runner-token coordinator that
//! lets at most `MaxGrowthRate` `create` commands run at once, and the handling of their
//! results.
//!
//! A creation is registered (Creating, used count 0) as soon as it is decided, so it counts
//! toward `Creating` while it waits in the queue. The quirk is kept: a negative
//! `MaxGrowthRate` never lets a queued creation start.

use std::collections::VecDeque;

use rand::RngCore;

use super::command::{Command, Notice, Reason};
use super::machine::{CreatePhase, Id, Machine, MachineState};
use super::{naming, Engine, Time};

/// One token's coordinator: creations running and creations waiting, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Coordinator {
    running: i64,
    queue: VecDeque<Id>,
}

impl Engine {
    /// `create()`: registers a Creating machine for `runner` and queues its command.
    pub(crate) fn start_creation(
        &mut self,
        runner: usize,
        reason: Reason,
        now: Time,
    ) -> (Id, String) {
        let (filter, token, max_removal) = match self.runners.get(runner) {
            Some(s) => (
                s.filter.clone(),
                s.policy.token.clone(),
                s.policy.max_removal_attempts,
            ),
            None => (String::new(), String::new(), 0),
        };
        // The suffix always lands in the name (Sprintf appends an unused argument), so a
        // clash needs the same 4 random bytes in the same second; after 64 clashes (only
        // possible with a filter that yields fixed names) a counter makes it unique.
        let mut name = String::new();
        for attempt in 0u32.. {
            let mut random = [0u8; 4];
            self.rng.fill_bytes(&mut random);
            let suffix = naming::name_suffix(now.timestamp(), random);
            name = naming::new_machine_name(&filter, &suffix);
            if attempt >= 64 {
                name = format!("{name}-{}", self.seq);
            }
            if self.ledger.id_of(&name).is_none() || attempt >= 64 {
                break;
            }
        }
        let seq = self.next_seq();
        let mut m = Machine::new(&name, MachineState::Creating, now, seq);
        m.runner = Some(runner);
        m.max_removal_attempts = max_removal;
        m.create = Some(CreatePhase::Queued(reason));
        let id = self.ledger.insert(m);
        match self.growth.get_mut(token.as_str()) {
            Some(c) => c.queue.push_back(id),
            None => {
                let mut c = Coordinator::default();
                c.queue.push_back(id);
                self.growth.insert(token.clone(), c);
            }
        }
        self.pump_growth(&token);
        if let Some(m) = self.ledger.get(id) {
            if matches!(m.create, Some(CreatePhase::Queued(_))) && self.growth_rate(runner) < 0 {
                self.notices.push_back(Notice::Warning(format!(
                    "creation of {name} waits forever: MaxGrowthRate is negative \
                     (upstream's coordinator deadlocks on it); set MaxGrowthRate to 0 for \
                     unlimited"
                )));
            }
        }
        (id, name)
    }

    fn growth_rate(&self, runner: usize) -> i64 {
        self.runners
            .get(runner)
            .map_or(0, |s| s.policy.limits.max_growth_rate)
    }

    /// Starts every queued creation of `token` that its runner's rate allows, oldest first.
    pub(crate) fn pump_growth(&mut self, token: &str) {
        // The queue is taken out while the ledger and the runners are read, and put back
        // (its allocation kept) with the creations the rate holds back.
        let Some(coordinator) = self.growth.get_mut(token) else {
            return;
        };
        let mut queue = std::mem::take(&mut coordinator.queue);
        let mut running = coordinator.running;
        let mut waiting = VecDeque::new();
        while let Some(id) = queue.pop_front() {
            let Some(m) = self.ledger.get(id) else {
                continue;
            };
            let Some(CreatePhase::Queued(reason)) = m.create else {
                continue;
            };
            let runner = m.runner.unwrap_or(usize::MAX);
            let rate = self.growth_rate(runner);
            if rate != 0 && running >= rate {
                waiting.push_back(id);
                continue;
            }
            running += 1;
            let name = String::from(&*m.name);
            let (driver, options) = match self.runners.get(runner) {
                Some(s) => {
                    let p = &s.policy;
                    let mut options = p.machine_options.clone();
                    options.extend(
                        p.machine_options_with_name
                            .iter()
                            .map(|o| naming::new_machine_name(o, &name)),
                    );
                    (p.machine_driver.clone(), options)
                }
                None => (String::new(), Vec::new()),
            };
            if let Some(m) = self.ledger.get_mut(id) {
                m.create = Some(CreatePhase::Running);
            }
            self.commands.push_back(Command::Create {
                name,
                driver,
                options,
                reason,
            });
        }
        if let Some(coordinator) = self.growth.get_mut(token) {
            coordinator.running = running;
            coordinator.queue = if waiting.is_empty() { queue } else { waiting };
        }
    }

    pub(crate) fn on_created(&mut self, name: &str, ok: bool, now: Time) {
        let Some(id) = self.ledger.id_of(name) else {
            return;
        };
        let Some(m) = self.ledger.get_mut(id) else {
            return;
        };
        if m.create != Some(CreatePhase::Running) {
            return;
        }
        m.create = None;
        let token = m
            .runner
            .and_then(|r| self.runners.get(r))
            .map(|s| s.policy.token.clone())
            .unwrap_or_default();
        let labels = (*m.labels).clone();
        if ok {
            m.state = MachineState::Idle;
            m.used = now;
            self.notices.push_back(Notice::Created {
                name: name.to_string(),
                labels,
            });
            self.signal_availability(&token);
            self.use_on_created(id, true, now);
            self.use_on_available(&token);
        } else {
            self.notices.push_back(Notice::CreationFailed {
                name: name.to_string(),
                labels,
            });
            self.start_removal(id, Reason::FailedToCreate, now);
            self.use_on_created(id, false, now);
        }
        if let Some(c) = self.growth.get_mut(&token) {
            c.running -= 1;
        }
        self.pump_growth(&token);
    }
}
