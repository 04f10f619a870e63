//! The simulator proper: drives [`crate::engine::Engine`] in virtual time.
//!
//! It plays the parts around the engine that the manager plays in production, with fakes:
//! GitLab is the workload (jobs arrive at their submission time and wait in a queue), the
//! provider is the [`ProviderModel`] (each command completes after a drawn latency, perhaps
//! failing), and gitlab-runner's run loop (feeder, workers, per-runner `limit`, global
//! `concurrent`; see the `workers` module) decides when Acquire passes happen. Every scaling
//! decision is the engine's. Time comes only from the [`EventQueue`]; the run is a pure
//! function of its [`Scenario`].

use std::collections::VecDeque;

use rustc_hash::{FxHashMap, FxHashSet};

use chrono::{DateTime, Utc};

use super::provider::ProviderModel;
use super::queue::{EventQueue, SimTime};
use super::scenario::{is_machine_runner, Resolved, Scenario, ScenarioError, GIVE_UP_AFTER};
use super::store::Store;
use super::trace::{Action, Counts, Decision, JobOutcome, RunEvent, Trace};
use super::workers::Worker;
use crate::engine::router::Router;
use crate::engine::{self, Command, Engine, Notice, RunnerId, UseId};

/// Machines the simulator follows at once, at most: a config that makes more exist (an absurd
/// `IdleCount`) stops the run with a warning instead of growing without bound. The engine's
/// own bound on creations per pass is the same figure.
pub const MAX_SIM_MACHINES: u32 = engine::MAX_CREATIONS_PER_PASS as u32;

/// Something due at an instant of virtual time.
#[derive(Debug)]
pub(crate) enum Ev {
    /// Job `n` of the resolved workload is submitted.
    Arrival(usize),
    /// The feeder wakes up to hand the next runner to a worker.
    Feed,
    /// The job on this worker ends.
    JobDone(usize),
    /// A provider command finished; its result for the engine.
    Provider(engine::Event),
    /// The engine asked to be woken (its `poll_timeout`).
    Tick,
}

/// One `[[runners]]` entry as the run loop sees it.
#[derive(Debug)]
pub(crate) struct SimRunner {
    /// `name`, for reports.
    pub(crate) name: String,
    /// The engine's id for it, if it autoscales (`docker+machine` with a token).
    pub(crate) engine: Option<RunnerId>,
    /// Jobs that only this runner may take, in submission order.
    pub(crate) queue: VecDeque<usize>,
}

/// A run in progress. See the module docs.
pub struct Simulation {
    pub(crate) engine: Engine,
    pub(crate) events: EventQueue<Ev>,
    pub(crate) start: DateTime<Utc>,
    pub(crate) model: ProviderModel,
    pub(crate) trace: Trace,
    pub(crate) runners: Vec<SimRunner>,
    /// `RunnerId` index → index into `runners`.
    pub(crate) by_engine_id: Vec<usize>,
    pub(crate) jobs: Vec<super::scenario::TimedJob>,
    /// Jobs any runner may take, in submission order.
    pub(crate) shared: VecDeque<usize>,
    pub(crate) workers: Vec<Worker>,
    /// gitlab-runner's run loop: the job router, driven by `workers`.
    pub(crate) routing: super::route::Routing,
    /// Machine names on the simulated provider's disk, in listing (lexicographic) order.
    pub(crate) disk: Store,
    /// Which runner (index into `runners`) each machine belongs to.
    pub(crate) owner: FxHashMap<String, usize>,
    /// When each machine finished its creation.
    pub(crate) ready_at: FxHashMap<String, SimTime>,
    /// Which worker each `Use` session belongs to.
    pub(crate) sessions: FxHashMap<UseId, usize>,
    pub(crate) creates_issued: u64,
    pub(crate) removals_issued: u64,
    /// The engine tick currently scheduled, to avoid scheduling duplicates.
    tick_at: Option<SimTime>,
    pub(crate) queued: u32,
    pub(crate) finished: usize,
    until: Option<SimTime>,
    /// Whether to record [`RunEvent`]s.
    pub(crate) log_events: bool,
    /// Removals already recorded from their pass report.
    pub(crate) logged_removals: FxHashSet<String>,
    /// The index in [`Trace::runners`] of `?`, the runner of a decision for a machine no
    /// runner owns, once one was needed.
    unknown_runner: Option<u32>,
    /// Job indexes in arrival order, when the workload is not in time order (else empty).
    arrival_order: Vec<usize>,
    /// How many jobs have arrived.
    arrived: usize,
}

impl Simulation {
    /// Prepares a run of `scenario`.
    pub fn new(scenario: &Scenario<'_>) -> Result<Self, ScenarioError> {
        let Resolved { start, until, jobs } = scenario.resolve()?;
        let config = scenario.config;
        let mut policies = Vec::new();
        let mut by_engine_id = Vec::new();
        let mut runners = Vec::with_capacity(config.runners.len());
        for (i, r) in config.runners.iter().enumerate() {
            let engine = if is_machine_runner(r) {
                let policy = engine::policy_from_runner(r)
                    .map_err(|e| ScenarioError::Policy(e.to_string()))?;
                policies.push(policy);
                by_engine_id.push(i);
                Some(RunnerId(policies.len() - 1))
            } else {
                None
            };
            runners.push(SimRunner {
                name: r.name.clone(),
                engine,
                queue: VecDeque::new(),
            });
        }
        let mut router_config = engine::router_config(config);
        // The workload stands for GitLab: a runner needs no real token to be simulated, and
        // each entry keeps counters of its own.
        for (i, r) in router_config.runners.iter_mut().enumerate() {
            r.has_token = true;
            r.key = format!("runner #{i}");
        }
        let concurrent = router_config.concurrent;
        let mut events = EventQueue::new();
        // Arrivals are read from the workload in (time, position) order rather than queued:
        // a manager-day holds 570,000 of them. They come before any queued event due at the
        // same instant, as they would have with the lowest sequence numbers.
        let arrival_order = if jobs.windows(2).all(|w| w[0].at <= w[1].at) {
            Vec::new()
        } else {
            let mut order: Vec<usize> = (0..jobs.len()).collect();
            order.sort_by_key(|&i| (jobs[i].at, i));
            order
        };
        events.schedule(0, Ev::Feed);
        let router = Router::new(router_config, 0);
        let mut trace = Trace::new(start, scenario.model.seed);
        trace.runners = runners.iter().map(|r| r.name.clone()).collect();
        trace.jobs = jobs
            .iter()
            .map(|j| JobOutcome {
                submitted: j.at,
                started: None,
                finished: None,
                waited_for_creation: false,
                failed: false,
            })
            .collect();
        let mut sim = Simulation {
            engine: Engine::new(policies, scenario.model.seed),
            events,
            start,
            model: scenario.model.clone(),
            trace,
            runners,
            by_engine_id,
            jobs,
            shared: VecDeque::new(),
            workers: (0..concurrent).map(|_| Worker::default()).collect(),
            routing: super::route::Routing::new(router),
            disk: Store::default(),
            owner: FxHashMap::default(),
            ready_at: FxHashMap::default(),
            sessions: FxHashMap::default(),
            creates_issued: 0,
            removals_issued: 0,
            tick_at: None,
            queued: 0,
            finished: 0,
            until,
            log_events: false,
            logged_removals: Default::default(),
            unknown_runner: None,
            arrival_order,
            arrived: 0,
        };
        sim.record();
        Ok(sim)
    }

    /// Also records every machine and job event in [`Trace::events`] (memory grows with the
    /// run: for tests and benchmarks that write the run as upstream's log).
    pub fn record_events(mut self) -> Self {
        self.log_events = true;
        self
    }

    /// Records a run event at the current instant, if asked to.
    pub(crate) fn log(&mut self, event: impl FnOnce() -> RunEvent) {
        if self.log_events {
            let now = self.now();
            self.trace.events.push((now, event()));
        }
    }

    /// Runs to the end and returns what happened.
    ///
    /// The run ends at `--until` if given; otherwise when every job has finished, or
    /// [`GIVE_UP_AFTER`] past the last submission if some never can.
    pub fn run(mut self) -> Trace {
        let give_up = self.jobs.last().map_or(0, |j| j.at) + GIVE_UP_AFTER;
        let end = self.until.unwrap_or(give_up);
        let mut now = 0;
        while let Some(at) = self.peek_time() {
            if at > end {
                break;
            }
            if self.until.is_none() && self.finished == self.jobs.len() && at > now {
                break;
            }
            let Some((at, ev)) = self.pop_event() else {
                break;
            };
            now = at;
            self.dispatch(ev);
            // One timeline row per instant: record once the instant's last event is handled.
            if self.peek_time() != Some(now) {
                self.record();
                if self.stop_if_too_many(now) {
                    self.trace.end = now;
                    return self.trace;
                }
            }
        }
        self.trace.end = match self.until {
            Some(u) => u,
            None if self.finished == self.jobs.len() => now,
            None => end,
        };
        self.trace
    }

    /// The next job to arrive: its time and index.
    fn next_arrival(&self) -> Option<(SimTime, usize)> {
        let i = if self.arrival_order.is_empty() {
            self.arrived
        } else {
            *self.arrival_order.get(self.arrived)?
        };
        self.jobs.get(i).map(|j| (j.at, i))
    }

    /// When the next event (an arrival or a queued event) is due.
    fn peek_time(&self) -> Option<SimTime> {
        match (self.next_arrival(), self.events.peek_time()) {
            (Some((a, _)), Some(e)) => Some(a.min(e)),
            (a, e) => a.map(|(a, _)| a).or(e),
        }
    }

    /// The next event: an arrival first when one is due no later than the queue's next.
    fn pop_event(&mut self) -> Option<(SimTime, Ev)> {
        if let Some((at, i)) = self.next_arrival() {
            if self.events.peek_time().is_none_or(|e| at <= e) {
                self.arrived += 1;
                self.events.advance_to(at);
                return Some((at, Ev::Arrival(i)));
            }
        }
        self.events.pop()
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Arrival(job) => self.arrive(job),
            Ev::Feed => self.feed(),
            Ev::JobDone(worker) => self.job_done(worker),
            Ev::Provider(event) => {
                let now = self.wall();
                self.engine.handle(event, now);
                self.pump();
            }
            Ev::Tick => {
                self.tick_at = None;
                let now = self.wall();
                self.engine.handle(engine::Event::Tick, now);
                self.pump();
            }
        }
    }

    /// The current virtual time.
    pub(crate) fn now(&self) -> SimTime {
        self.events.now()
    }

    /// The current virtual time as the engine's wall-clock time.
    pub(crate) fn wall(&self) -> engine::Time {
        self.trace.wall(self.now())
    }

    /// Drains the engine after an input: executes its commands on the provider model,
    /// records its notices, wakes workers waiting for machines, and arms its timer.
    pub(crate) fn pump(&mut self) {
        loop {
            let mut progressed = false;
            while let Some(cmd) = self.engine.poll_command() {
                progressed = true;
                self.execute(cmd);
            }
            while let Some(notice) = self.engine.poll_notice() {
                progressed = true;
                self.observe(notice);
            }
            while let Some(step) = self.engine.poll_use() {
                progressed = true;
                self.answer_use(step);
            }
            if !progressed {
                break;
            }
        }
        if let Some(t) = self.engine.poll_timeout() {
            let at = (t - self.start).num_milliseconds().max(0) as SimTime;
            let at = at.max(self.now());
            if self.tick_at.is_none_or(|s| at < s) {
                self.tick_at = Some(at);
                self.events.schedule(at, Ev::Tick);
            }
        }
    }

    /// The runner whose machine filter matches `machine` (the first, in file order).
    fn owner_by_filter(&self, machine: &str) -> Option<usize> {
        self.by_engine_id.iter().enumerate().find_map(|(eid, &r)| {
            self.engine
                .filter(RunnerId(eid))
                .is_some_and(|f| engine::naming::matches_filter(machine, f))
                .then_some(r)
        })
    }

    /// The index in [`Trace::runners`] of the runner owning `machine`.
    fn runner_index(&mut self, machine: &str) -> u32 {
        if let Some(i) = self.owner.get(machine).and_then(|&r| u32::try_from(r).ok()) {
            return i;
        }
        *self.unknown_runner.get_or_insert_with(|| {
            self.trace.runners.push("?".into());
            u32::try_from(self.trace.runners.len() - 1).unwrap_or(u32::MAX)
        })
    }

    /// Executes one engine command on the simulated provider.
    fn execute(&mut self, cmd: Command) {
        let now = self.now();
        match cmd {
            Command::Create { name, reason, .. } => {
                if reason == engine::Reason::OnDemand {
                    self.log(|| RunEvent::CreateStart {
                        machine: name.clone(),
                    });
                }
                if !self.owner.contains_key(&name) {
                    if let Some(r) = self.owner_by_filter(&name) {
                        self.owner.insert(name.clone(), r);
                    }
                }
                let outcome = self.model.creation(self.creates_issued);
                self.creates_issued += 1;
                self.trace.creations += 1;
                let runner = self.runner_index(&name);
                self.trace.decisions.push(Decision {
                    at: now,
                    runner,
                    action: Action::Create,
                    reason,
                });
                self.events.schedule(
                    now.saturating_add(outcome.latency),
                    Ev::Provider(engine::Event::Created {
                        name,
                        ok: !outcome.fails,
                    }),
                );
            }
            Command::CheckExists { name, .. } => {
                let exists = self.disk.contains(&name);
                self.events
                    .schedule(now, Ev::Provider(engine::Event::Exists { name, exists }));
            }
            Command::Stop { name, .. } => {
                self.events
                    .schedule(now, Ev::Provider(engine::Event::Stopped { name }));
            }
            Command::Remove { name, .. } => {
                self.log(|| RunEvent::RemovalAttempt {
                    machine: name.clone(),
                });
                let outcome = self.model.removal(self.removals_issued);
                self.removals_issued += 1;
                self.events.schedule(
                    now.saturating_add(outcome.latency),
                    Ev::Provider(engine::Event::Removed {
                        name,
                        ok: !outcome.fails,
                    }),
                );
            }
            Command::ForceRemove { name, .. } => {
                self.events.schedule(
                    now,
                    Ev::Provider(engine::Event::ForceRemoved { name, ok: true }),
                );
            }
        }
    }

    /// Records a notice: machines appearing and disappearing on the simulated store, and the
    /// figures of the trace.
    fn observe(&mut self, notice: Notice) {
        let now = self.now();
        match notice {
            Notice::Created { name, .. } => {
                self.log(|| RunEvent::Created {
                    machine: name.clone(),
                    ok: true,
                });
                self.disk.insert(name.clone());
                self.engine.listing_insert(&name);
                self.ready_at.insert(name, now);
            }
            Notice::CreationFailed { name, .. } => {
                self.log(|| RunEvent::Created {
                    machine: name.clone(),
                    ok: false,
                });
                self.trace.creation_failures += 1
            }
            Notice::Removing { name, reason, .. } => {
                if !self.logged_removals.remove(&name) {
                    let used_count = self.engine.machine(&name).map_or(0, |m| m.used_count);
                    self.log(|| RunEvent::RemovalRequested {
                        machine: name.clone(),
                        reason: reason.to_string(),
                        used_count,
                    });
                }
                let runner = self.runner_index(&name);
                self.trace.decisions.push(Decision {
                    at: now,
                    runner,
                    action: Action::Remove,
                    reason,
                });
            }
            Notice::Removed { name, reason, .. } => {
                self.log(|| RunEvent::Removed {
                    machine: name.clone(),
                });
                self.disk.remove(&name);
                self.engine.listing_remove(&name);
                self.owner.remove(&name);
                self.ready_at.remove(&name);
                self.trace.count_removal(reason.as_str());
            }
            Notice::Warning(w) if !self.trace.warnings.contains(&w) => self.trace.warnings.push(w),
            _ => {}
        }
    }

    /// Stops the run, with a warning, once [`MAX_SIM_MACHINES`] machines exist at once.
    fn stop_if_too_many(&mut self, now: SimTime) -> bool {
        let total = self.trace.timeline.last().map_or(0, |r| r.counts.total());
        if total < MAX_SIM_MACHINES {
            return false;
        }
        self.trace.warnings.push(format!(
            "simulation stopped at {}: {total} machines existed at once, the most the simulator follows ({MAX_SIM_MACHINES}); check IdleCount, IdleCountMin and limit",
            self.trace.wall(now).format("%Y-%m-%d %H:%M:%S UTC"),
        ));
        true
    }

    /// Appends the current counts to the timeline.
    fn record(&mut self) {
        let mut c = Counts {
            queued: self.queued,
            ..Counts::default()
        };
        let m = self.engine.machine_counts();
        let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
        c.idle = count(m.idle + m.acquired);
        c.used = count(m.used);
        c.creating = count(m.creating);
        c.removing = count(m.removing + m.stuck_on_removing);
        let now = self.now();
        self.trace.record(now, c);
    }
}

/// Runs `scenario` to its end.
pub fn simulate(scenario: &Scenario<'_>) -> Result<Trace, ScenarioError> {
    Ok(Simulation::new(scenario)?.run())
}
