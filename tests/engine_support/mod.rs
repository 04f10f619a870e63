//! A simulated-time harness for engine tests: a virtual clock, a fake provider with latency
//! and failure knobs, and `drive` / `advance` that run the engine until nothing is left to do.
//! Nothing sleeps.

#![allow(dead_code)]

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use chrono::{TimeDelta, TimeZone, Utc};
use drover::engine::{
    AcquireOutcome, AcquireStep, Command, Engine, Event, IdleSettings, Limits, Notice,
    ReconcileReport, RunnerId, RunnerPolicy, Time, UseError, UseStep, UsedMachine,
};

/// 2026-11-20T10:00:00Z plus `secs`.
pub fn t(secs: i64) -> Time {
    Utc.with_ymd_and_hms(2026, 11, 20, 10, 0, 0).unwrap() + TimeDelta::seconds(secs)
}

pub const TOKEN: &str = "glrt-abcdefghijk";
pub const FILTER: &str = "runner-abcdefghi-auto-%s";

pub fn idle(ic: i64, it: i64) -> IdleSettings {
    IdleSettings {
        idle_count: ic,
        idle_time: it,
        ..IdleSettings::default()
    }
}

pub fn limits(limit: i64, max_builds: i64, growth: i64) -> Limits {
    Limits {
        limit,
        max_builds,
        max_growth_rate: growth,
    }
}

pub fn policy(idle: IdleSettings, limits: Limits) -> RunnerPolicy {
    RunnerPolicy {
        name: "test".into(),
        token: TOKEN.into(),
        limits,
        max_removal_attempts: 0,
        machine_name: "auto-%s".into(),
        machine_driver: "fake".into(),
        machine_options: vec!["fake-size=small".into()],
        machine_options_with_name: vec!["fake-label=%s".into()],
        idle: Arc::new(idle),
    }
}

/// A machine name in the runner's namespace.
pub fn name(n: u32) -> String {
    format!("runner-abcdefghi-auto-{}-{:08x}", 1_700_000_000 + n, n)
}

pub struct World {
    pub engine: Engine,
    pub now: Time,
    /// The fake provider's machines (a directory scan: sorted names).
    pub disk: BTreeSet<String>,
    pub unreachable: HashSet<String>,
    pub fail_creates: usize,
    /// Names whose `rm -y` fails this many more times.
    pub rm_failures: HashMap<String, u32>,
    pub force_fails: bool,
    pub create_latency: i64,
    pending_creates: Vec<(Time, String)>,
    pub commands: Vec<Command>,
    pub notices: Vec<Notice>,
    pub checks: Vec<String>,
    pub bad_credentials: HashSet<String>,
    pub use_steps: Vec<UseStep>,
}

pub const R: RunnerId = RunnerId(0);

impl World {
    pub fn new(policy: RunnerPolicy) -> World {
        World {
            engine: Engine::new(vec![policy], 7),
            now: t(0),
            disk: BTreeSet::new(),
            unreachable: HashSet::new(),
            fail_creates: 0,
            rm_failures: HashMap::new(),
            force_fails: false,
            create_latency: 0,
            pending_creates: Vec::new(),
            commands: Vec::new(),
            notices: Vec::new(),
            checks: Vec::new(),
            bad_credentials: HashSet::new(),
            use_steps: Vec::new(),
        }
    }

    pub fn with_disk(mut self, names: &[String]) -> World {
        self.disk.extend(names.iter().cloned());
        self
    }

    /// One Acquire pass, answering connectivity checks from `unreachable`; then drives.
    pub fn acquire(&mut self) -> AcquireOutcome {
        let names: Vec<String> = self.disk.iter().cloned().collect();
        let mut step = self.engine.begin_acquire(R, &names, self.now).unwrap();
        let mut guard = 0;
        let outcome = loop {
            guard += 1;
            assert!(guard < 10_000, "pass does not end");
            match step {
                AcquireStep::CheckConnectivity { name } => {
                    self.checks.push(name.clone());
                    let ok = !self.unreachable.contains(&name);
                    step = self
                        .engine
                        .connectivity_result(&name, ok, self.now)
                        .unwrap();
                }
                AcquireStep::Done(o) => break *o,
            }
        };
        self.drive();
        outcome
    }

    /// One periodic reconciliation round over the fake provider's listing; then drives.
    pub fn reconcile(&mut self) -> ReconcileReport {
        self.engine.begin_reconcile(self.now);
        let names: Vec<String> = self.disk.iter().cloned().collect();
        let report = self.engine.finish_reconcile(&names, self.now).unwrap();
        self.drive();
        report
    }

    /// Executes every queued command against the fake provider until none is left.
    pub fn drive(&mut self) {
        for _ in 0..100_000 {
            while let Some(n) = self.engine.poll_notice() {
                self.notices.push(n);
            }
            let Some(cmd) = self.engine.poll_command() else {
                return;
            };
            self.commands.push(cmd.clone());
            let now = self.now;
            match cmd {
                Command::Create { name, .. } => {
                    if self.create_latency == 0 {
                        self.finish_create(name);
                    } else {
                        let at = now + TimeDelta::seconds(self.create_latency);
                        self.pending_creates.push((at, name));
                    }
                }
                Command::CheckExists { name, .. } => {
                    let exists = self.disk.contains(&name);
                    self.engine.handle(Event::Exists { name, exists }, now);
                }
                Command::Stop { name, .. } => self.engine.handle(Event::Stopped { name }, now),
                Command::Remove { name, .. } => {
                    let fails = self.rm_failures.get_mut(&name).filter(|n| **n > 0);
                    let ok = match fails {
                        Some(n) => {
                            *n -= 1;
                            false
                        }
                        None => {
                            self.disk.remove(&name);
                            true
                        }
                    };
                    self.engine.handle(Event::Removed { name, ok }, now);
                }
                Command::ForceRemove { name, .. } => {
                    let ok = !self.force_fails;
                    if ok {
                        self.disk.remove(&name);
                    }
                    self.engine.handle(Event::ForceRemoved { name, ok }, now);
                }
            }
        }
        panic!("drive did not settle (livelock?)");
    }

    fn finish_create(&mut self, name: String) {
        let ok = if self.fail_creates > 0 {
            self.fail_creates -= 1;
            false
        } else {
            self.disk.insert(name.clone());
            true
        };
        self.engine.handle(Event::Created { name, ok }, self.now);
    }

    /// Moves the clock forward, firing timers and finishing creations in time order.
    pub fn advance(&mut self, secs: i64) {
        let target = self.now + TimeDelta::seconds(secs);
        loop {
            self.drive();
            let next_create = self.pending_creates.iter().map(|(t, _)| *t).min();
            let next = [self.engine.poll_timeout(), next_create]
                .into_iter()
                .flatten()
                .filter(|t| *t <= target)
                .min();
            let Some(at) = next else { break };
            self.now = self.now.max(at);
            let due: Vec<String> = self
                .pending_creates
                .iter()
                .filter(|(t, _)| *t <= self.now)
                .map(|(_, n)| n.clone())
                .collect();
            self.pending_creates.retain(|(t, _)| *t > self.now);
            for n in due {
                self.finish_create(n);
            }
            self.engine.handle(Event::Tick, self.now);
        }
        self.now = target;
        self.engine.handle(Event::Tick, self.now);
        self.drive();
    }

    /// Runs one `Use` session to its end, answering its steps from the fake provider and
    /// moving the clock 1 s at a time while it waits (at most `max_secs`).
    pub fn run_use(
        &mut self,
        acquired: Option<&str>,
        max_secs: i64,
    ) -> Result<UsedMachine, UseError> {
        let id = self.engine.begin_use(R, acquired, self.now).unwrap();
        let mut waited = 0;
        loop {
            self.drive();
            if let Some(step) = self.engine.poll_use() {
                self.use_steps.push(step.clone());
                let now = self.now;
                match step {
                    UseStep::CheckConnectivity { id, name } => {
                        let ok = !self.unreachable.contains(&name);
                        self.engine.use_connectivity_result(id, ok, now).unwrap();
                    }
                    UseStep::List { id } => {
                        let names: Vec<String> = self.disk.iter().cloned().collect();
                        self.engine.use_listing(id, &names, now).unwrap();
                    }
                    UseStep::FetchCredentials { id, name } => {
                        let ok = !self.bad_credentials.contains(&name);
                        self.engine.use_credentials_result(id, ok, now).unwrap();
                    }
                    UseStep::Done { id: done, result } if done == id => return result,
                    UseStep::Done { .. } => {}
                }
                continue;
            }
            assert!(waited < max_secs, "Use did not finish in {max_secs} s");
            waited += 1;
            self.advance(1);
        }
    }

    pub fn state(&self, name: &str) -> Option<drover::engine::MachineState> {
        self.engine.machine(name).map(|m| m.state)
    }

    pub fn count(&self, f: impl Fn(&Command) -> bool) -> usize {
        self.commands.iter().filter(|c| f(c)).count()
    }
}
