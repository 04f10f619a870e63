//! The Acquire pass (spec §6): listing, adoption, removal decisions against partly
//! accumulated counters, pre-creation, and the newest-first search for a free machine with its
//! connectivity checks, resumable around each check (the check is provider I/O).
//!
//! Every decision is recorded in a [`PassReport`] with the numbers it was made on, so
//! `drover autoscale decide` explains the same decisions the manager acts on.

use chrono::TimeDelta;

use super::command::{Notice, Reason};
use super::index::Key;
use super::machine::{Counts, Id, MachineState};
use super::policy::{self, IdleSettings, Limits, MachineFacts, RemoveVerdict};
use super::{Engine, EngineError, RunnerId, Time, CONNECTIVITY_CACHE_SECS, MAX_CREATIONS_PER_PASS};

/// A removal the pass decided, with the facts it was decided on.
#[derive(Debug, Clone, PartialEq)]
pub struct RemovalDecision {
    /// The machine.
    pub name: String,
    /// Upstream's reason.
    pub reason: Reason,
    /// The counters accumulated before this machine (earlier machines only).
    pub counts_before: Counts,
    /// The machine's used count.
    pub used_count: i64,
    /// Whole seconds since its last use (saturating).
    pub idle_for_secs: i64,
}

/// A creation the pass started.
#[derive(Debug, Clone, PartialEq)]
pub struct CreationDecision {
    /// The new machine's name.
    pub name: String,
    /// The counters just before it was started.
    pub counts_before: Counts,
}

/// Everything one pass decided and why.
#[derive(Debug, Clone, PartialEq)]
pub struct PassReport {
    /// The runner.
    pub runner: RunnerId,
    /// Its machine filter.
    pub filter: String,
    /// `now` when the pass began.
    pub started: Time,
    /// The idle settings in effect when the pass began.
    pub idle: IdleSettings,
    /// `limit`, `MaxBuilds`, `MaxGrowthRate`.
    pub limits: Limits,
    /// Counters over the listed machines as they were before the pass (new names as Idle).
    pub input_counts: Counts,
    /// `canCreate(onDemand=false)` on the input counts.
    pub can_create_idle: bool,
    /// `canCreate(onDemand=true)` on the input counts.
    pub can_create_on_demand: bool,
    /// Listed machines the pass had never seen (adopted as Idle with used count 1).
    pub adopted: Vec<String>,
    /// Removals decided while visiting the listing, in order.
    pub removals: Vec<RemovalDecision>,
    /// Creations started, in order.
    pub created: Vec<CreationDecision>,
    /// Machines that failed the connectivity check (removed: "machine is unavailable").
    pub unavailable: Vec<String>,
    /// The pass counters after removals and creations (what `canCreate` saw last).
    pub counts: Counts,
    /// Listed names that did not match the filter.
    pub ignored: usize,
}

/// What the pass returns to the job loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquireResult {
    /// Use this machine (now Acquired).
    Machine(String),
    /// No machine, no error: request a job anyway; `Use` creates a machine.
    NoMachine,
    /// "no free machines that can process builds": do not request a job.
    NoFreeMachines,
    /// "missing Machine options": the runner has no `MachineName`.
    MissingMachineOptions,
}

impl AcquireResult {
    /// Upstream's error text, for the two error outcomes.
    pub fn error_text(&self) -> Option<&'static str> {
        match self {
            AcquireResult::NoFreeMachines => Some("no free machines that can process builds"),
            AcquireResult::MissingMachineOptions => Some("missing Machine options"),
            _ => None,
        }
    }
}

/// The pass's outcome and its report.
#[derive(Debug, Clone, PartialEq)]
pub struct AcquireOutcome {
    /// What to do next.
    pub result: AcquireResult,
    /// What was decided.
    pub report: PassReport,
}

/// Where the pass stands.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub enum AcquireStep {
    /// Check this machine's connectivity, then call `connectivity_result`.
    CheckConnectivity {
        /// The machine (now Acquired).
        name: String,
    },
    /// The pass is over.
    Done(Box<AcquireOutcome>),
}

#[derive(Debug)]
pub(crate) struct PassState {
    runner: usize,
    kept: Vec<Id>,
    cursor: usize,
    /// An indexed pass: the search continues below this name (`None`: from the newest), over
    /// the listed Idle machines that were members when the pass began (index clock).
    indexed: Option<(Option<Key>, u64)>,
    pending: Option<Id>,
    report: PassReport,
}

impl PassReport {
    /// A report with nothing decided yet.
    fn empty(
        runner: RunnerId,
        filter: String,
        started: Time,
        idle: IdleSettings,
        limits: Limits,
    ) -> PassReport {
        PassReport {
            runner,
            filter,
            started,
            idle,
            limits,
            input_counts: Counts::default(),
            can_create_idle: false,
            can_create_on_demand: false,
            adopted: Vec::new(),
            removals: Vec::new(),
            created: Vec::new(),
            unavailable: Vec::new(),
            counts: Counts::default(),
            ignored: 0,
        }
    }
}

fn verdict_reason(v: RemoveVerdict) -> Reason {
    match v {
        RemoveVerdict::TooManyBuilds => Reason::TooManyBuilds,
        RemoveVerdict::TooManyMachines => Reason::TooManyMachines,
        RemoveVerdict::TooManyIdleMachines => Reason::TooManyIdleMachines,
    }
}

fn whole_seconds(d: TimeDelta) -> i64 {
    d.num_seconds()
}

impl Engine {
    /// Starts an Acquire pass for `runner` over the provider's on-disk machine names in
    /// listing order. See the module docs of [`engine`](super) for the call order.
    pub fn begin_acquire<S: AsRef<str>>(
        &mut self,
        runner: RunnerId,
        on_disk: &[S],
        now: Time,
    ) -> Result<AcquireStep, EngineError> {
        if self.pass.is_some() {
            return Err(EngineError::PassInProgress);
        }
        let slot = self.slot(runner)?;
        let limits = slot.policy.limits;
        let idle = slot.policy.idle.idle_at(now);
        let filter = slot.filter.clone();
        let missing = slot.policy.machine_name.is_empty();
        let mut report = PassReport::empty(runner, filter, now, idle, limits);
        if missing {
            return Ok(AcquireStep::Done(Box::new(AcquireOutcome {
                result: AcquireResult::MissingMachineOptions,
                report,
            })));
        }
        self.epoch += 1;
        let mut kept = Vec::with_capacity(on_disk.len());
        let mut counts = Counts::default();
        let (matcher, last) = match self.runners.get_mut(runner.0) {
            Some(s) => (s.matcher.clone(), std::mem::take(&mut s.last_listing)),
            None => return Err(EngineError::UnknownRunner(runner.0)),
        };
        let mut listing = Vec::with_capacity(on_disk.len());
        let mut cursor = 0;
        for name in on_disk {
            let name = name.as_ref();
            if !matcher.matches(name) {
                report.ignored += 1;
                continue;
            }
            // Listings mostly repeat: try the next id of the last listing (or the one after,
            // if a machine went away) before the name index.
            let mut known = None;
            for skip in 0..2 {
                let hit = last
                    .get(cursor + skip)
                    .copied()
                    .filter(|id| self.ledger.get(*id).is_some_and(|m| &*m.name == name));
                if hit.is_some() {
                    cursor += skip + 1;
                    known = hit;
                    break;
                }
            }
            let id = self.visit(name, known, now, &mut counts, &mut kept, &mut report);
            listing.extend(id);
        }
        if let Some(s) = self.runners.get_mut(runner.0) {
            s.last_listing = listing;
        }
        // In-memory Creating machines not on disk yet, in creation order.
        let mut still = std::mem::take(&mut self.ledger.creating);
        still.retain(|id| {
            self.ledger
                .get(*id)
                .is_some_and(|m| m.state == MachineState::Creating)
        });
        let mut creating: Vec<(u64, Id)> = still
            .iter()
            .filter_map(|id| self.ledger.get(*id).map(|m| (*id, m)))
            .filter(|(_, m)| m.seen_epoch != self.epoch && matcher.matches(&m.name))
            .map(|(id, m)| (m.seq, id))
            .collect();
        self.ledger.creating = still;
        creating.sort_unstable();
        for (_, id) in creating {
            let _ = self.visit("", Some(id), now, &mut counts, &mut kept, &mut report);
        }
        self.create_for_pass(runner.0, counts, &mut report, now);
        let cursor = kept.len();
        self.pass = Some(PassState {
            runner: runner.0,
            kept,
            cursor,
            indexed: None,
            pending: None,
            report,
        });
        Ok(self.advance_find(now))
    }

    /// createMachines: creations while `canCreate` holds on the pass counters.
    fn create_for_pass(
        &mut self,
        runner: usize,
        mut counts: Counts,
        report: &mut PassReport,
        now: Time,
    ) {
        let (limits, idle) = (report.limits, report.idle);
        report.can_create_idle = policy::can_create(&limits, &idle, &report.input_counts, false);
        report.can_create_on_demand =
            policy::can_create(&limits, &idle, &report.input_counts, true);
        while policy::can_create(&limits, &idle, &counts, false) {
            if report.created.len() >= MAX_CREATIONS_PER_PASS {
                self.notices.push_back(Notice::Warning(format!(
                    "stopped after starting {MAX_CREATIONS_PER_PASS} creations in one pass; \
                     check IdleCount and limit"
                )));
                break;
            }
            let before = counts;
            let (_, name) = self.start_creation(runner, Reason::IdleCapacity, now);
            report.created.push(CreationDecision {
                name,
                counts_before: before,
            });
            counts.creating += 1;
        }
        report.counts = counts;
    }

    /// Starts an Acquire pass for `runner` over the engine's copy of the listing (kept by
    /// [`Engine::listing_insert`] and [`Engine::listing_remove`]): the same decisions as
    /// [`Engine::begin_acquire`] over that listing in name order, which is the order
    /// `docker-machine ls` lists in.
    ///
    /// In steady state the pass reads the indexes kept on every transition (see `index.rs`)
    /// and costs what it decides, whatever the number of machines. It walks the listing as
    /// `begin_acquire` does when the indexes cannot settle its decisions exactly: with several
    /// runners on the engine, `IdleScaleFactor` set, an Idle machine at `MaxBuilds`, or a
    /// listed name no record knows (the walk adopts it; the next pass is indexed again).
    pub fn begin_acquire_listed(
        &mut self,
        runner: RunnerId,
        now: Time,
    ) -> Result<AcquireStep, EngineError> {
        if self.pass.is_some() {
            return Err(EngineError::PassInProgress);
        }
        self.want_index();
        self.index.sync(&mut self.ledger);
        let slot = self.slot(runner)?;
        let limits = slot.policy.limits;
        let idle = slot.policy.idle.idle_at(now);
        let filter = slot.filter.clone();
        if slot.policy.machine_name.is_empty() {
            return self.begin_acquire::<&str>(runner, &[], now);
        }
        let at_max_builds = limits.max_builds > 0
            && self
                .index
                .max_idle_used_count()
                .is_some_and(|u| u >= limits.max_builds);
        let indexed = self.index.enabled()
            && self.runners.len() == 1
            && idle.idle_scale_factor.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
            && !at_max_builds
            && self.index.untracked_listed() == 0;
        if !indexed {
            let names: Vec<Box<str>> = self.index.listing_in_order().iter().cloned().collect();
            return self.begin_acquire(runner, &names, now);
        }
        self.epoch += 1;
        let mut report = PassReport::empty(runner, filter, now, idle, limits);
        report.ignored = self.index.mirror.len() - self.index.listed_len();
        report.input_counts = self.index.counts;
        // The Idle machines shouldRemove may remove (every other one is kept): at listing
        // positions from `limit` on ("too many machines"), and before that the ones idle
        // longer than IdleTime that come after the IdleCount-th available machine (the
        // counters only grow along the listing, so "too many idle machines" holds from there).
        let rule2_from: Option<Key> = usize::try_from(limits.limit)
            .ok()
            .filter(|&l| l > 0)
            .and_then(|l| self.index.listed_at(l))
            .cloned();
        let mut candidates: std::collections::BTreeMap<Key, Id> = Default::default();
        if let Some(from) = &rule2_from {
            for (key, id) in self.index.idle_from(from) {
                candidates.insert(key.clone(), id);
            }
        }
        let after: Option<Option<Key>> = if idle.idle_count <= 0 {
            Some(None)
        } else {
            self.index
                .kth_available(idle.idle_count)
                .map(|k| Some(k.clone()))
        };
        if let Some(after) = after {
            let expired = self
                .index
                .idle_by_used()
                .take_while(|(used, _)| policy::idle_time_elapsed(now, *used, idle.idle_time));
            for (_, id) in expired {
                let Some(key) = self.index.key_of(id) else {
                    continue;
                };
                let past = after.as_ref().is_none_or(|a| key > a);
                let before_limit = rule2_from.as_ref().is_none_or(|r| key < r);
                if past && before_limit {
                    candidates.insert(key.clone(), id);
                }
            }
        }
        for (key, id) in candidates {
            self.index.sync(&mut self.ledger);
            let counts_before = self.index.counts_before(&key);
            let Some(m) = self.ledger.get(id) else {
                continue;
            };
            let facts = MachineFacts {
                state: m.state,
                used_count: m.used_count,
                used: m.used,
            };
            if let Some(v) = policy::should_remove(&facts, &limits, &idle, &counts_before, now) {
                let reason = verdict_reason(v);
                report.removals.push(RemovalDecision {
                    name: String::from(&*m.name),
                    reason,
                    counts_before,
                    used_count: m.used_count,
                    idle_for_secs: whole_seconds(now - m.used),
                });
                self.start_removal(id, reason, now);
            }
        }
        self.index.sync(&mut self.ledger);
        let counts = self.index.counts;
        let clock = self.index.note_pass(now);
        self.create_for_pass(runner.0, counts, &mut report, now);
        self.pass = Some(PassState {
            runner: runner.0,
            kept: Vec::new(),
            cursor: 0,
            indexed: Some((None, clock)),
            pending: None,
            report,
        });
        Ok(self.advance_find(now))
    }

    /// The next listed Idle machine of an indexed search, newest first.
    fn next_indexed(&mut self) -> Option<Id> {
        self.index.sync(&mut self.ledger);
        loop {
            let p = self.pass.as_mut()?;
            let (below, clock) = p.indexed.as_mut()?;
            let (key, id) = self.index.idle_before(below.as_ref())?;
            *below = Some(key.clone());
            if self.index.member_before(id, *clock) {
                return Some(id);
            }
        }
    }

    /// updateMachines for one listed machine: get or adopt, refresh, decide, count.
    fn visit(
        &mut self,
        name: &str,
        known: Option<Id>,
        now: Time,
        counts: &mut Counts,
        kept: &mut Vec<Id>,
        report: &mut PassReport,
    ) -> Option<Id> {
        let id = match known.or_else(|| self.ledger.id_of(name)) {
            Some(id) => id,
            None => {
                report.adopted.push(name.to_string());
                self.adopt(name, now)
            }
        };
        let m = self.ledger.get_mut(id)?;
        m.last_seen = now;
        m.seen_epoch = self.epoch;
        report.input_counts.add(m.state, m.retry_count);
        let facts = MachineFacts {
            state: m.state,
            used_count: m.used_count,
            used: m.used,
        };
        match policy::should_remove(&facts, &report.limits, &report.idle, counts, now) {
            Some(v) => {
                let reason = verdict_reason(v);
                report.removals.push(RemovalDecision {
                    name: String::from(&*m.name),
                    reason,
                    counts_before: *counts,
                    used_count: m.used_count,
                    idle_for_secs: whole_seconds(now - m.used),
                });
                self.start_removal(id, reason, now);
            }
            None => kept.push(id),
        }
        if let Some(m) = self.ledger.get(id) {
            counts.add(m.state, m.retry_count);
        }
        Some(id)
    }

    /// Runs an Acquire pass to its end for a driver that can check connectivity at once
    /// (the simulator, `autoscale decide`): `listing` is the provider's listing in its order,
    /// or `None` for the engine's own copy (the indexed pass, [`Engine::begin_acquire_listed`]);
    /// `connect` answers each [`AcquireStep::CheckConnectivity`]. This is the one Acquire step
    /// loop; `drover run`'s pool answers the same steps asynchronously.
    pub fn run_acquire<S: AsRef<str>>(
        &mut self,
        runner: RunnerId,
        listing: Option<&[S]>,
        now: Time,
        mut connect: impl FnMut(&str) -> bool,
    ) -> Result<AcquireOutcome, EngineError> {
        let mut step = match listing {
            Some(l) => self.begin_acquire(runner, l, now)?,
            None => self.begin_acquire_listed(runner, now)?,
        };
        loop {
            match step {
                AcquireStep::CheckConnectivity { name } => {
                    let ok = connect(&name);
                    step = self.connectivity_result(&name, ok, now)?;
                }
                AcquireStep::Done(outcome) => return Ok(*outcome),
            }
        }
    }

    /// Resumes the pass with the result of the connectivity check it asked for.
    pub fn connectivity_result(
        &mut self,
        name: &str,
        ok: bool,
        now: Time,
    ) -> Result<AcquireStep, EngineError> {
        let pending = self.pass.as_ref().and_then(|p| p.pending);
        let Some(id) = pending.filter(|id| self.ledger.get(*id).is_some_and(|m| &*m.name == name))
        else {
            // The machine may have been deleted meanwhile; accept its result as a failure.
            let waiting_for_deleted = self
                .pass
                .as_ref()
                .and_then(|p| p.pending)
                .is_some_and(|id| self.ledger.get(id).is_none());
            if waiting_for_deleted {
                return Ok(self.advance_find(now));
            }
            return Err(EngineError::NotWaiting(name.to_string()));
        };
        if let Some(p) = self.pass.as_mut() {
            p.pending = None;
        }
        if ok {
            if let Some(m) = self.ledger.get_mut(id) {
                m.connect_ok_until =
                    now.checked_add_signed(TimeDelta::seconds(CONNECTIVITY_CACHE_SECS));
            }
            return Ok(self.finish_pass(AcquireResult::Machine(name.to_string()), now));
        }
        if let Some(p) = self.pass.as_mut() {
            p.report.unavailable.push(name.to_string());
        }
        self.start_removal(id, Reason::MachineUnavailable, now);
        Ok(self.advance_find(now))
    }

    /// findFreeMachine: walk the kept machines from the newest, acquire, check.
    fn advance_find(&mut self, now: Time) -> AcquireStep {
        loop {
            let Some(p) = self.pass.as_mut() else {
                return self.finish_pass(AcquireResult::NoMachine, now);
            };
            let id = if p.indexed.is_some() {
                match self.next_indexed() {
                    Some(id) => id,
                    None => break,
                }
            } else {
                if p.cursor == 0 {
                    break;
                }
                p.cursor -= 1;
                let Some(&id) = p.kept.get(p.cursor) else {
                    continue;
                };
                id
            };
            let Some(p) = self.pass.as_mut() else {
                break;
            };
            let Some(m) = self.ledger.get_mut(id) else {
                continue;
            };
            if !m.try_acquire() {
                continue;
            }
            if m.connect_ok_until.is_some_and(|until| now < until) {
                let name = String::from(&*m.name);
                return self.finish_pass(AcquireResult::Machine(name), now);
            }
            let name = String::from(&*m.name);
            p.pending = Some(id);
            return AcquireStep::CheckConnectivity { name };
        }
        // No machine found.
        let (runner, counts) = match self.pass.as_ref() {
            Some(p) => (p.runner, p.report.counts),
            None => return self.finish_pass(AcquireResult::NoMachine, now),
        };
        let (limits, idle) = match self.runners.get(runner) {
            Some(s) => (s.policy.limits, s.policy.idle.idle_at(now)),
            None => return self.finish_pass(AcquireResult::NoMachine, now),
        };
        let result = if idle.idle_count == 0 && policy::can_create(&limits, &idle, &counts, true) {
            AcquireResult::NoMachine
        } else if counts.idle == 0 {
            AcquireResult::NoFreeMachines
        } else {
            AcquireResult::NoMachine
        };
        self.finish_pass(result, now)
    }

    fn finish_pass(&mut self, result: AcquireResult, now: Time) -> AcquireStep {
        let pass = self.pass.take();
        self.apply_deferred_listing();
        match pass {
            Some(p) => AcquireStep::Done(Box::new(AcquireOutcome {
                result,
                report: p.report,
            })),
            None => AcquireStep::Done(Box::new(AcquireOutcome {
                result,
                report: PassReport::empty(
                    RunnerId(usize::MAX),
                    String::new(),
                    now,
                    IdleSettings::default(),
                    Limits::default(),
                ),
            })),
        }
    }
}
