//! The autoscaling engine: docker+machine's decisions (spec `autoscale-semantics.md`) as a pure
//! state machine. Facts and the current time go in; decisions and commands come out.
//!
//! The engine performs no I/O, spawns nothing and never reads a clock: `now` is an argument of
//! every input, and the random bytes of machine names come from a generator seeded by the
//! caller. The manager (a tokio driver), the simulator (virtual time) and
//! `drover autoscale decide` all drive this one implementation.
//!
//! It is a crate of its own (`drover-engine`) so that this is a compile-time fact: its
//! dependencies are chrono, rand, serde, thiserror and rustc-hash, with no runtime, process,
//! network or file crate among them. How `config.toml` becomes a [`RunnerPolicy`] is drover's
//! (`drover::engine::policy_from_runner`): the engine only sees the policy.
//!
//! The crate's second state machine, [`router`], is gitlab-runner's run loop (feeder, workers,
//! `concurrent`, `limit`, `request_concurrency`, health, re-queue, Acquire before request,
//! releases): it decides when a runner asks GitLab for a job, and its `Acquire` command is
//! when a driver runs this engine's Acquire pass.
//!
//! # Driving the engine
//!
//! Methods fall into three groups, as in quinn-proto's `Connection`:
//!
//! * **inputs** take `now`: [`Engine::begin_acquire`] / [`Engine::connectivity_result`]
//!   (the Acquire pass), [`Engine::handle`] (command results and timer ticks),
//!   [`Engine::begin_use`] and its `use_*` answers, [`Engine::release`],
//!   [`Engine::begin_drain`];
//! * **outputs**: [`Engine::poll_command`] (requests for the provider), [`Engine::poll_use`]
//!   (steps of `Use` sessions), [`Engine::poll_notice`] (logs and metrics) and
//!   [`Engine::poll_timeout`] (the next instant to come back);
//! * **getters** on `&self`: [`Engine::machine`], [`Engine::machines`],
//!   [`Engine::machine_states`], [`Engine::listing_counts`], [`Engine::filter`].
//!
//! After **every** input, a driver drains `poll_command()` until it returns `None` and executes
//! each command (concurrently is fine), drains `poll_use()` and `poll_notice()`, then arms one
//! timer at `poll_timeout()`. When the timer fires it calls `handle(Event::Tick, now)`; a tick
//! with nothing due is a no-op, so waking too often is harmless. Each command's result comes
//! back later as an [`Event`] through `handle`.
//!
//! ## The Acquire pass
//!
//! Upstream runs one Acquire pass before each job request, under a provider-wide lock. Here:
//!
//! 1. list the provider's machines (`docker-machine ls`, names in listing order) and call
//!    [`Engine::begin_acquire`]`(runner, &names, now)`. The engine adopts unknown names,
//!    decides removals, starts creations (their `Create` commands are queued) and starts the
//!    newest-first search for a free machine;
//! 2. while it returns [`AcquireStep::CheckConnectivity`], check that machine
//!    (`docker-machine config`) and call [`Engine::connectivity_result`]`(name, ok, now)`;
//! 3. [`AcquireStep::Done`] carries the [`AcquireOutcome`]: the machine to use (Acquired), or
//!    "no machine, request a job anyway" (Use will create one), or
//!    "no free machines that can process builds" (do not request a job), with a
//!    [`PassReport`] of every decision and its reason.
//!
//! Only one pass may be open at a time ([`EngineError::PassInProgress`]); this is upstream's
//! `acquireLock`. Other inputs (events, releases) may arrive while a pass waits for a
//! connectivity result.
//!
//! ## Jobs: Use and Release
//!
//! When a job arrives, call [`Engine::begin_use`]`(runner, acquired, now)` with the machine
//! Acquire returned (or `None`) — upstream's `Use` in executor Prepare. Then drain
//! [`Engine::poll_use`] after every input, as for commands, and answer each [`UseStep`]:
//!
//! * `CheckConnectivity` (uncached) → [`Engine::use_connectivity_result`];
//! * `List` (a fresh `docker-machine ls`) → [`Engine::use_listing`];
//! * `FetchCredentials` → [`Engine::use_credentials_result`];
//! * `Done` carries the machine to run the job on ([`UsedMachine`], now Used) or the
//!   [`UseError`].
//!
//! Between steps a session may wait for its own on-demand creation, an availability signal or
//! its 1 s poll; it resumes by itself when the matching event, release or tick arrives.
//! (The building blocks are public too: [`Engine::begin_find`], [`Engine::create_on_demand`],
//! [`Engine::try_acquire`], [`Engine::claim_availability`], [`Engine::use_machine`].)
//!
//! When the job ends, [`Engine::release`] the machine Use returned if `new_data` is set, and
//! the one Acquire returned (upstream's deferred Release). Release on a machine with
//! `MaxBuilds` reached removes it ("Too many builds"), whatever its state.
//!
//! ## Reconciliation
//!
//! At start, [`Engine::reconcile_ledger`] checks the ledger's records against a listing before
//! [`Engine::restore`]. While running, the driver opens a round with
//! [`Engine::begin_reconcile`], lists the provider, and closes it with
//! [`Engine::finish_reconcile`] (or [`Engine::cancel_reconcile`]): records of machines that
//! vanished are dropped and unknown machines with a runner's prefix are adopted, one
//! [`Notice::Reconciled`] each (see `reconcile.rs`).

mod command;
mod drain;
mod event;
pub mod explain;
mod find;
mod growth;
mod index;
mod machine;
pub mod naming;
mod orphans;
mod pass;
pub mod policy;
mod reconcile;
mod removal;
mod restore;
pub mod router;
mod timers;
mod use_flow;

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashMap;

pub use command::{Command, Notice, Reason, ReconcileDecision};
pub use drain::{DrainReport, DrainSettings};
pub use event::Event;
pub use find::{FindId, FindStep};
pub use machine::{zero_time, Counts, Machine, MachineState, TargetLabels, STUCK_AFTER_RETRIES};
pub use orphans::{OrphanEntry, OrphanRetry};
pub use pass::{
    AcquireOutcome, AcquireResult, AcquireStep, CreationDecision, PassReport, RemovalDecision,
};
pub use policy::{IdleSchedule, IdleSettings, Limits, RunnerPolicy};
pub use reconcile::ReconcileReport;
pub use restore::{RestoreReport, RestoredMachine};
pub use use_flow::{UseError, UseId, UseStep, UsedMachine, PROVISION_RETRY_SECS, USE_ATTEMPTS};

use machine::{Id, Ledger};

/// The one time type of the engine: a UTC wall-clock instant (periods are cron expressions in
/// time zones, so wall-clock time is what the rules are written against).
pub type Time = DateTime<Utc>;

/// `machineDeadInterval`: an Idle machine not listed for longer is left out of the state gauge.
pub const MACHINE_DEAD_INTERVAL_SECS: i64 = 20 * 60;
/// `removeRetryInterval`: the wait after a failed removal attempt.
pub const REMOVE_RETRY_INTERVAL_SECS: i64 = 30;
/// How long a positive connectivity check is cached.
pub const CONNECTIVITY_CACHE_SECS: i64 = 5 * 60;
/// Creations one pass may start at most. Upstream has no bound (an absurd `IdleCount` would
/// make it loop until memory runs out); drover stops here and warns instead of hanging.
pub const MAX_CREATIONS_PER_PASS: usize = 100_000;

/// Index of a runner in the policies the engine was built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct RunnerId(pub usize);

/// Errors from calling the engine in a way its contract does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The runner index is not one of the engine's policies.
    #[error("unknown runner #{0}")]
    UnknownRunner(usize),
    /// An Acquire pass is already open (finish it before starting another).
    #[error("an Acquire pass is already in progress")]
    PassInProgress,
    /// A connectivity result arrived while no pass waits for one, or for another machine.
    #[error("no Acquire pass is waiting for the connectivity of machine {0:?}")]
    NotWaiting(String),
    /// The machine is not tracked.
    #[error("machine not found: {0:?}")]
    UnknownMachine(String),
    /// The machine is already tracked.
    #[error("machine {0:?} is already tracked")]
    AlreadyTracked(String),
}

struct RunnerSlot {
    policy: RunnerPolicy,
    filter: String,
    matcher: naming::FilterMatcher,
    /// The ids of the last pass's on-disk listing, to skip index lookups when it repeats.
    last_listing: Vec<Id>,
}

impl RunnerSlot {
    fn new(policy: RunnerPolicy) -> RunnerSlot {
        let filter = naming::machine_filter(&policy.token, &policy.machine_name);
        RunnerSlot {
            matcher: naming::FilterMatcher::new(&filter),
            filter,
            policy,
            last_listing: Vec::new(),
        }
    }
}

/// A machine record to put into the ledger directly (restoring state after a restart, or
/// `drover autoscale decide` reading a state file). No command is in flight for it.
#[derive(Debug, Clone)]
pub struct TrackedMachine {
    /// The machine name.
    pub name: String,
    /// Its state.
    pub state: MachineState,
    /// Jobs run so far.
    pub used_count: i64,
    /// The last use ([`zero_time`] for never).
    pub used: Time,
    /// Failed removal attempts so far.
    pub retry_count: u32,
    /// The runner that owns it, if known.
    pub runner: Option<RunnerId>,
}

/// The sans-IO autoscaling engine for the runners of one provider. See the module docs for
/// the call order.
pub struct Engine {
    runners: Vec<RunnerSlot>,
    ledger: Ledger,
    commands: VecDeque<Command>,
    notices: VecDeque<Notice>,
    rng: ChaCha8Rng,
    pass: Option<pass::PassState>,
    growth: FxHashMap<String, growth::Coordinator>,
    availability: FxHashMap<String, u64>,
    stuck: removal::StuckLock,
    orphans: orphans::Orphans,
    round: Option<reconcile::Round>,
    drain: Option<drain::DrainState>,
    timers: timers::Timers,
    finds: FxHashMap<u64, find::FindState>,
    find_seq: u64,
    uses: std::collections::BTreeMap<u64, use_flow::UseSession>,
    use_steps: VecDeque<UseStep>,
    use_seq: u64,
    epoch: u64,
    seq: u64,
    index: index::Index,
    /// Whether the driver keeps the engine's copy of the listing (the indexes are kept then).
    index_wanted: bool,
    /// Listing changes reported while a pass was open, applied when it ends (a pass works on
    /// the listing as it was when it began).
    deferred_listing: Vec<(bool, Box<str>)>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("runners", &self.runners.len())
            .field("machines", &self.ledger.len())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine for these runners (indexed by [`RunnerId`] in this order), with its name
    /// generator seeded by `seed` so runs are reproducible.
    pub fn new(policies: Vec<RunnerPolicy>, seed: u64) -> Engine {
        Engine {
            runners: policies.into_iter().map(RunnerSlot::new).collect(),
            ledger: Ledger::default(),
            commands: VecDeque::new(),
            notices: VecDeque::new(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            pass: None,
            growth: FxHashMap::default(),
            availability: FxHashMap::default(),
            stuck: removal::StuckLock::default(),
            orphans: orphans::Orphans::default(),
            round: None,
            drain: None,
            timers: timers::Timers::default(),
            finds: FxHashMap::default(),
            find_seq: 0,
            uses: Default::default(),
            use_steps: VecDeque::new(),
            use_seq: 0,
            epoch: 0,
            seq: 0,
            index: index::Index::default(),
            index_wanted: false,
            deferred_listing: Vec::new(),
        }
    }

    /// Replaces a runner's policy (config reload). Machines and in-flight work are kept;
    /// queued creations are re-checked against the new `MaxGrowthRate`.
    pub fn set_policy(
        &mut self,
        runner: RunnerId,
        policy: RunnerPolicy,
    ) -> Result<(), EngineError> {
        let slot = self
            .runners
            .get_mut(runner.0)
            .ok_or(EngineError::UnknownRunner(runner.0))?;
        let token = policy.token.clone();
        *slot = RunnerSlot::new(policy);
        self.rebuild_index();
        // A new MaxGrowthRate may let queued creations start.
        self.pump_growth(&token);
        Ok(())
    }

    /// Adds a runner (config reload: a new docker+machine runner on this provider) and returns
    /// its id. Existing runners keep theirs; the new runner's machines are found by its filter
    /// at its first Acquire pass, as at start-up.
    pub fn add_runner(&mut self, policy: RunnerPolicy) -> RunnerId {
        self.runners.push(RunnerSlot::new(policy));
        self.rebuild_index();
        RunnerId(self.runners.len() - 1)
    }

    /// The provider lists a machine with this name (the driver's `docker-machine ls` gained
    /// it). With [`Engine::listing_remove`] this keeps the engine's copy of the listing that
    /// [`Engine::begin_acquire_listed`] works on. Reported during a pass, it applies when the
    /// pass ends.
    pub fn listing_insert(&mut self, name: &str) {
        self.listing_change(true, name);
    }

    /// The provider no longer lists this machine (see [`Engine::listing_insert`]).
    pub fn listing_remove(&mut self, name: &str) {
        self.listing_change(false, name);
    }

    fn listing_change(&mut self, listed: bool, name: &str) {
        self.want_index();
        if self.pass.is_some() {
            self.deferred_listing.push((listed, name.into()));
            return;
        }
        if listed {
            self.index.mirror_insert(name, &mut self.ledger);
        } else {
            self.index.mirror_remove(name, &mut self.ledger);
        }
        self.index.sync(&mut self.ledger);
    }

    /// Counters over every tracked machine, per state. Read from the pass indexes when the
    /// engine keeps them (see [`Engine::listing_insert`]), counted otherwise.
    pub fn machine_counts(&mut self) -> Counts {
        if self.index.enabled() {
            self.index.sync(&mut self.ledger);
            return self.index.all;
        }
        let mut c = Counts::default();
        for (_, m) in self.ledger.iter() {
            c.add(m.state, m.retry_count);
        }
        c
    }

    /// The engine's copy of the listing, in listing (name) order.
    pub fn listing(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.index.mirror.iter().map(|n| &**n).collect();
        names.sort_unstable();
        names
    }

    fn apply_deferred_listing(&mut self) {
        for (listed, name) in std::mem::take(&mut self.deferred_listing) {
            self.listing_change(listed, &name);
        }
    }

    /// Starts keeping the pass indexes, once the driver keeps the listing.
    fn want_index(&mut self) {
        if !self.index_wanted {
            self.index_wanted = true;
            self.rebuild_index();
        }
    }

    /// Rebuilds the pass indexes from every record (runners changed). They are kept for an
    /// engine with one runner; with several, passes walk the listing.
    fn rebuild_index(&mut self) {
        if !self.index_wanted {
            return;
        }
        let matcher = match self.runners.as_slice() {
            [only] => Some(only.matcher.clone()),
            _ => None,
        };
        self.index.enable(matcher, &mut self.ledger);
    }

    /// The runner's policy.
    pub fn policy(&self, runner: RunnerId) -> Option<&RunnerPolicy> {
        self.runners.get(runner.0).map(|s| &s.policy)
    }

    /// The runner's machine filter, `runner-<short token>-<MachineName>`.
    pub fn filter(&self, runner: RunnerId) -> Option<&str> {
        self.runners.get(runner.0).map(|s| s.filter.as_str())
    }

    /// Puts a machine record into the ledger as it is (see [`TrackedMachine`]).
    pub fn track(&mut self, m: TrackedMachine, now: Time) -> Result<(), EngineError> {
        if self.ledger.id_of(&m.name).is_some() {
            return Err(EngineError::AlreadyTracked(m.name));
        }
        if let Some(r) = m.runner {
            self.slot(r)?;
        }
        let mut rec = Machine::new(&m.name, m.state, now, self.next_seq());
        rec.used_count = m.used_count;
        rec.used = m.used;
        rec.retry_count = m.retry_count;
        rec.runner = m.runner.map(|r| r.0);
        self.ledger.insert(rec);
        Ok(())
    }

    /// Handles one fact: a command result or a timer tick.
    pub fn handle(&mut self, event: Event, now: Time) {
        match event {
            Event::Tick => self.fire_timers(now),
            Event::Created { name, ok } => self.on_created(&name, ok, now),
            Event::Exists { name, exists } => self.on_exists(&name, exists, now),
            Event::Stopped { name } => self.on_stopped(&name),
            Event::Removed { name, ok } => self.on_removed(&name, ok, now),
            Event::ForceRemoved { name, ok } => self.on_force_removed(&name, ok, now),
            Event::Labels { name, labels } => {
                if let Some(id) = self.ledger.id_of(&name) {
                    if let Some(m) = self.ledger.get_mut(id) {
                        *m.labels = labels;
                    }
                }
            }
        }
        self.drain_progress(now);
    }

    /// The next command for the driver, if any.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.commands.pop_front()
    }

    /// The next notice (for logs and metrics), if any.
    pub fn poll_notice(&mut self) -> Option<Notice> {
        self.notices.pop_front()
    }

    /// The next instant at which the engine wants `handle(Event::Tick, now)`.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.timers.next()
    }

    /// `Use`: the job starts on this machine. It becomes Used, its last use is `now` and its
    /// used count grows by one (metric `used`).
    pub fn use_machine(&mut self, name: &str, now: Time) -> Result<(), EngineError> {
        let id = self.id(name)?;
        if let Some(m) = self.ledger.get_mut(id) {
            m.state = MachineState::Used;
            m.used = now;
            m.used_count = m.used_count.saturating_add(1);
            let notice = Notice::Used {
                name: name.to_string(),
                labels: (*m.labels).clone(),
            };
            self.notices.push_back(notice);
        }
        Ok(())
    }

    /// `Release` (spec §7): a Used machine's last use becomes `now`; if `MaxBuilds` is
    /// reached the machine is removed ("Too many builds") whatever its state, otherwise it
    /// becomes Idle and availability is signalled for the runner's token. Unknown names are
    /// ignored, as upstream ignores data that is not a machine.
    pub fn release(&mut self, runner: RunnerId, name: &str, now: Time) -> Result<(), EngineError> {
        let (max_builds, token) = {
            let p = &self.slot(runner)?.policy;
            (p.limits.max_builds, p.token.clone())
        };
        let Some(id) = self.ledger.id_of(name) else {
            return Ok(());
        };
        let Some(m) = self.ledger.get_mut(id) else {
            return Ok(());
        };
        if m.state == MachineState::Removing {
            // A machine found unusable while it served a job is on its way out already.
            return Ok(());
        }
        if m.state == MachineState::Used {
            m.used = now;
        }
        if max_builds > 0 && m.used_count >= max_builds {
            self.start_removal(id, Reason::ReleaseTooManyBuilds, now);
            return Ok(());
        }
        m.state = MachineState::Idle;
        self.signal_availability(&token);
        self.use_on_available(&token);
        Ok(())
    }

    /// Counts one availability signal for `token` (its key is copied only the first time).
    pub(crate) fn signal_availability(&mut self, token: &str) {
        match self.availability.get_mut(token) {
            Some(n) => *n += 1,
            None => {
                self.availability.insert(token.to_string(), 1);
            }
        }
    }

    /// A machine handed to a job that the job could not use (its Docker endpoint did not
    /// answer, its certificates are missing): it is removed ("machine is unavailable", as a
    /// failed connectivity check in `Use` removes one), never released for another job. An
    /// untracked or already removing machine is left alone.
    pub fn release_unusable(&mut self, name: &str, now: Time) {
        let Some(id) = self.ledger.id_of(name) else {
            return;
        };
        let usable_state = self
            .ledger
            .get(id)
            .is_some_and(|m| matches!(m.state, MachineState::Used | MachineState::Acquired));
        if usable_state {
            self.start_removal(id, Reason::MachineUnavailable, now);
        }
    }

    /// Reserves an Idle machine (Idle → Acquired); false if it is not Idle or not tracked.
    pub fn try_acquire(&mut self, name: &str) -> bool {
        let Some(id) = self.ledger.id_of(name) else {
            return false;
        };
        self.ledger.get_mut(id).is_some_and(|m| m.try_acquire())
    }

    /// Claims one availability signal of the runner's token (a creation finished or a
    /// machine was released); false if there is none.
    pub fn claim_availability(&mut self, runner: RunnerId) -> Result<bool, EngineError> {
        let token = self.slot(runner)?.policy.token.clone();
        Ok(match self.availability.get_mut(&token) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        })
    }

    /// Starts an on-demand creation for the runner (the path `Use` takes when no free machine
    /// exists) and returns the new machine's name. It is throttled by `MaxGrowthRate` like
    /// every creation, and never checks `limit`, as upstream's `Use`.
    pub fn create_on_demand(&mut self, runner: RunnerId, now: Time) -> Result<String, EngineError> {
        self.slot(runner)?;
        Ok(self.start_creation(runner.0, Reason::OnDemand, now).1)
    }

    /// A tracked machine by name.
    pub fn machine(&self, name: &str) -> Option<&Machine> {
        self.ledger.by_name(name)
    }

    /// Every tracked machine (in no particular order).
    pub fn machines(&self) -> impl Iterator<Item = &Machine> {
        self.ledger.iter().map(|(_, m)| m)
    }

    /// The counters over what a pass would list right now: the given on-disk names plus the
    /// in-memory Creating machines, filtered by the runner's filter. Names never seen count
    /// as Idle; nothing is changed.
    pub fn listing_counts<S: AsRef<str>>(
        &self,
        runner: RunnerId,
        on_disk: &[S],
    ) -> Result<Counts, EngineError> {
        let filter = self.slot(runner)?.filter.as_str();
        let mut c = Counts::default();
        let mut listed = std::collections::HashSet::new();
        for name in on_disk {
            let name = name.as_ref();
            listed.insert(name);
            if !naming::matches_filter(name, filter) {
                continue;
            }
            match self.ledger.by_name(name) {
                Some(m) => c.add(m.state, m.retry_count),
                None => c.add(MachineState::Idle, 0),
            }
        }
        for (_, m) in self.ledger.iter() {
            if m.state == MachineState::Creating
                && !listed.contains(&*m.name)
                && naming::matches_filter(&m.name, filter)
            {
                c.add(m.state, m.retry_count);
            }
        }
        Ok(c)
    }

    /// The `gitlab_runner_autoscaling_machine_states` gauge: counts per target-label tuple,
    /// leaving out Idle machines not listed for more than 20 minutes. With no machines it is
    /// one all-zero entry with empty labels.
    pub fn machine_states(&self, now: Time) -> Vec<(TargetLabels, Counts)> {
        let mut by: std::collections::BTreeMap<&TargetLabels, Counts> = Default::default();
        for (id, m) in self.ledger.iter() {
            let last_seen = match self.index.seen_since(id) {
                Some(t) if t > m.last_seen => t,
                _ => m.last_seen,
            };
            if m.state == MachineState::Idle
                && policy::idle_time_elapsed(now, last_seen, MACHINE_DEAD_INTERVAL_SECS)
            {
                continue;
            }
            by.entry(&*m.labels)
                .or_default()
                .add(m.state, m.retry_count);
        }
        if by.is_empty() {
            return vec![(TargetLabels::default(), Counts::default())];
        }
        by.into_iter().map(|(l, c)| (l.clone(), c)).collect()
    }

    fn slot(&self, runner: RunnerId) -> Result<&RunnerSlot, EngineError> {
        self.runners
            .get(runner.0)
            .ok_or(EngineError::UnknownRunner(runner.0))
    }

    fn id(&self, name: &str) -> Result<Id, EngineError> {
        self.ledger
            .id_of(name)
            .ok_or_else(|| EngineError::UnknownMachine(name.to_string()))
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }
}
