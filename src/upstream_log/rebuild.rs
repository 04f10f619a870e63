//! Events → what upstream did: the jobs and machines of the log ([`Collector`], first pass),
//! and upstream's machine pool replayed event by event ([`Replay`], second pass), which stops
//! at every creation and removal upstream made and hands the pool as it was at that instant to
//! a judge (the comparison asks drover's engine; this module decides nothing).
//!
//! The second pass knows the first pass's results, so it can mark a machine Acquired from the
//! pickup of the job that will say `Using existing docker-machine` on it (Acquire reserves it
//! before the job request, and nothing is logged then), and put machines created before the
//! log began into the pool from the start.
//!
//! Memory is bounded: at most [`MAX_JOBS`] jobs and [`MAX_MACHINES`] machines are kept (more
//! are counted and dropped), and the undo journal that rebuilds the pool at a creation's name
//! second holds only the last few seconds.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use chrono::{DateTime, TimeDelta, Utc};

use super::events::{Event, EventKind};

/// Most jobs kept from one log.
pub const MAX_JOBS: usize = 5_000_000;
/// Most machines kept from one log.
pub const MAX_MACHINES: usize = 1_000_000;
/// Most jobs waiting for a machine at once (older ones are forgotten).
const MAX_PENDING: usize = 100_000;

/// One job as the log tells it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct UpJob {
    /// Job id.
    pub id: u64,
    /// Short token of the runner that picked it up.
    pub runner: String,
    /// `runner_name`, when logged (18.9+).
    pub runner_name: Option<String>,
    /// Pickup − `time_in_queue_seconds` (16.10+).
    pub queued_at: Option<DateTime<Utc>>,
    /// `Checking for jobs... received`.
    pub picked_at: Option<DateTime<Utc>>,
    /// The machine it ran on.
    pub machine: Option<String>,
    /// True for `Using existing docker-machine`, false for `Created docker-machine`.
    pub existing: Option<bool>,
    /// `Using/Created docker-machine`.
    pub on_machine_at: Option<DateTime<Utc>>,
    /// `Cleaned up docker-machine`.
    pub cleaned_at: Option<DateTime<Utc>>,
    /// `success`, `failed` or a failure reason; `None` if the end is not in the log.
    pub status: Option<String>,
    /// `duration_s` of the job end line.
    pub duration_s: Option<f64>,
    /// `Removed job from processing list`.
    pub done_at: Option<DateTime<Utc>>,
}

impl UpJob {
    /// Seconds from `Using/Created docker-machine` to `Cleaned up docker-machine`.
    pub fn on_machine_s(&self) -> Option<f64> {
        let (a, b) = (self.on_machine_at?, self.cleaned_at?);
        Some((b - a).num_milliseconds().max(0) as f64 / 1000.0)
    }
}

/// One machine as the log tells it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct UpMachine {
    /// Name.
    pub name: String,
    /// The Unix second in the name (the creation decision, to the second).
    pub create_requested_at: Option<DateTime<Utc>>,
    /// The first docker-machine create line.
    pub create_started_at: Option<DateTime<Utc>>,
    /// `Machine created`.
    pub created_at: Option<DateTime<Utc>>,
    /// `Machine creation failed` was logged.
    pub create_failed: bool,
    /// The `duration` of `Machine created`.
    pub creation_s: Option<f64>,
    /// Jobs it ran, in order.
    pub jobs: Vec<u64>,
    /// `reason` of `Requesting machine removal`.
    pub removal_reason: Option<String>,
    /// `Requesting machine removal`.
    pub removal_requested_at: Option<DateTime<Utc>>,
    /// `Machine removed`.
    pub removed_at: Option<DateTime<Utc>>,
    /// Failed `docker-machine rm` attempts.
    pub removal_retries: u32,
    /// Removal gave up (19.1+).
    pub removal_gave_up: bool,
    /// Its creation is not in the log (made before the log began, or its start was lost).
    pub before_log: bool,
    /// The first line that mentions it.
    pub first_seen_at: DateTime<Utc>,
    /// `usedCount` of its first job line (machines from before the log).
    pub first_used_count: Option<i64>,
}

/// The Unix second embedded in a machine name (`…-<unix>-<8 hex>…`).
pub fn name_second(name: &str) -> Option<DateTime<Utc>> {
    let b = name.as_bytes();
    let mut best = None;
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() && (i == 0 || b[i - 1] == b'-') {
            let mut j = i;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            let hex_ok = j + 9 <= b.len()
                && b[j] == b'-'
                && b[j + 1..j + 9]
                    .iter()
                    .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c));
            if hex_ok && (9..=11).contains(&(j - i)) {
                if let Some(t) = name[i..j]
                    .parse::<i64>()
                    .ok()
                    .and_then(|s| DateTime::from_timestamp(s, 0))
                {
                    best = Some(t);
                }
            }
            i = j;
        } else {
            i += 1;
        }
    }
    best
}

/// First pass: every job and machine of the log, restarts and versions.
#[derive(Debug, Default)]
pub struct Collector {
    /// Jobs in pickup order.
    pub jobs: Vec<UpJob>,
    /// Machines in order of first mention.
    pub machines: Vec<UpMachine>,
    job_index: HashMap<u64, usize>,
    machine_index: HashMap<String, usize>,
    /// Process starts (`Runtime platform` or a monotonic-clock jump).
    pub restarts: Vec<DateTime<Utc>>,
    /// `Configuration loaded` after the first one of each process.
    pub reloads: Vec<DateTime<Utc>>,
    loaded_in_process: bool,
    /// The first and last event times.
    pub span: Option<(DateTime<Utc>, DateTime<Utc>)>,
    /// Jobs dropped past [`MAX_JOBS`].
    pub dropped_jobs: u64,
    /// Machines dropped past [`MAX_MACHINES`].
    pub dropped_machines: u64,
    /// Events about jobs the log never picked up (the pickup is before the log).
    pub orphan_job_events: u64,
}

impl Collector {
    /// The job with this id.
    pub fn job(&self, id: u64) -> Option<&UpJob> {
        self.job_index.get(&id).and_then(|&i| self.jobs.get(i))
    }

    /// The machine with this name.
    pub fn machine(&self, name: &str) -> Option<&UpMachine> {
        self.machine_index
            .get(name)
            .and_then(|&i| self.machines.get(i))
    }

    fn job_mut(&mut self, id: u64) -> Option<&mut UpJob> {
        match self.job_index.get(&id) {
            Some(&i) => self.jobs.get_mut(i),
            None => {
                self.orphan_job_events += 1;
                None
            }
        }
    }

    fn machine_mut(
        &mut self,
        name: &str,
        at: DateTime<Utc>,
        creating: bool,
    ) -> Option<&mut UpMachine> {
        if let Some(&i) = self.machine_index.get(name) {
            return self.machines.get_mut(i);
        }
        if self.machines.len() >= MAX_MACHINES {
            self.dropped_machines += 1;
            return None;
        }
        self.machine_index
            .insert(name.to_string(), self.machines.len());
        self.machines.push(UpMachine {
            name: name.to_string(),
            create_requested_at: name_second(name),
            create_started_at: None,
            created_at: None,
            create_failed: false,
            creation_s: None,
            jobs: Vec::new(),
            removal_reason: None,
            removal_requested_at: None,
            removed_at: None,
            removal_retries: 0,
            removal_gave_up: false,
            before_log: !creating,
            first_seen_at: at,
            first_used_count: None,
        });
        self.machines.last_mut()
    }

    /// Takes one event.
    pub fn push(&mut self, e: &Event) {
        let at = e.at;
        self.span = Some(match self.span {
            Some((a, b)) => (a.min(at), b.max(at)),
            None => (at, at),
        });
        match &e.kind {
            EventKind::ProcessStart { .. } => {
                self.restarts.push(at);
                self.loaded_in_process = false;
            }
            EventKind::ConfigLoaded => {
                if self.loaded_in_process {
                    self.reloads.push(at);
                }
                self.loaded_in_process = true;
            }
            EventKind::Pickup {
                job,
                runner,
                runner_name,
            } => {
                if let Some(j) = self.job_index.get(job).and_then(|&i| self.jobs.get_mut(i)) {
                    // A duplicate pickup line that escaped de-duplication: keep the first.
                    if j.runner_name.is_none() {
                        j.runner_name.clone_from(runner_name);
                    }
                    return;
                }
                if self.jobs.len() >= MAX_JOBS {
                    self.dropped_jobs += 1;
                    return;
                }
                self.job_index.insert(*job, self.jobs.len());
                self.jobs.push(UpJob {
                    id: *job,
                    runner: runner.clone(),
                    runner_name: runner_name.clone(),
                    queued_at: None,
                    picked_at: Some(at),
                    machine: None,
                    existing: None,
                    on_machine_at: None,
                    cleaned_at: None,
                    status: None,
                    duration_s: None,
                    done_at: None,
                });
            }
            EventKind::Added {
                job,
                time_in_queue_s,
                runner_name,
            } => {
                if let Some(j) = self.job_mut(*job) {
                    if let (Some(tiq), Some(p)) = (time_in_queue_s, j.picked_at) {
                        j.queued_at = TimeDelta::try_milliseconds((tiq * 1000.0) as i64)
                            .and_then(|d| p.checked_sub_signed(d));
                    }
                    if j.runner_name.is_none() {
                        j.runner_name.clone_from(runner_name);
                    }
                }
            }
            EventKind::Use {
                job,
                name,
                used_count,
                existing,
            } => {
                if let Some(j) = self.job_mut(*job) {
                    j.machine = Some(name.clone());
                    j.existing = Some(*existing);
                    j.on_machine_at = Some(at);
                }
                if let Some(m) = self.machine_mut(name, at, false) {
                    if m.jobs.len() < 1_000_000 && m.jobs.last() != Some(job) {
                        m.jobs.push(*job);
                    }
                    if m.before_log && m.first_used_count.is_none() {
                        m.first_used_count = *used_count;
                    }
                }
            }
            EventKind::Cleanup { job, .. } => {
                if let Some(j) = self.job_mut(*job) {
                    j.cleaned_at.get_or_insert(at);
                }
            }
            EventKind::JobEnd {
                job,
                status,
                duration_s,
            } => {
                if let Some(j) = self.job_mut(*job) {
                    j.status = Some(status.clone());
                    j.duration_s = *duration_s;
                }
            }
            EventKind::JobRemoved { job } => {
                if let Some(j) = self.job_mut(*job) {
                    j.done_at.get_or_insert(at);
                }
            }
            EventKind::CreateStart { name } => {
                if let Some(m) = self.machine_mut(name, at, true) {
                    m.create_started_at.get_or_insert(at);
                }
            }
            EventKind::Created { name, duration_s } => {
                let log_start = self.span.map(|(a, _)| a);
                if let Some(m) = self.machine_mut(name, at, false) {
                    m.created_at = Some(at);
                    m.creation_s = *duration_s;
                    if m.create_started_at.is_none() && m.before_log {
                        // Its start is not in the log (lost docker-machine output, or the
                        // log began mid-creation).
                        m.before_log = m.create_requested_at.is_none_or(|s| Some(s) < log_start);
                    }
                }
            }
            EventKind::CreateFailed { name } => {
                if let Some(m) = self.machine_mut(name, at, true) {
                    m.create_failed = true;
                }
            }
            EventKind::RemovalRequested {
                name,
                reason,
                used_count,
                ..
            } => {
                if let Some(m) = self.machine_mut(name, at, false) {
                    if m.before_log && m.first_used_count.is_none() {
                        m.first_used_count = *used_count;
                    }
                    m.removal_reason = Some(reason.clone());
                    m.removal_requested_at = Some(at);
                }
            }
            EventKind::RemovalAttempt { name } => {
                if let Some(m) = self.machine_mut(name, at, false) {
                    if m.removal_requested_at.is_some() {
                        m.removal_retries = m.removal_retries.saturating_add(1);
                    }
                }
            }
            EventKind::Removed {
                name,
                retries,
                gave_up,
            } => {
                if let Some(m) = self.machine_mut(name, at, false) {
                    m.removed_at = Some(at);
                    m.removal_gave_up = *gave_up;
                    // `Removing machine` lines are attempts: retries = attempts − 1.
                    m.removal_retries = retries.unwrap_or(m.removal_retries.saturating_sub(1));
                }
            }
        }
    }

    /// Ends the pass: attempt counts become retry counts where no `Machine removed` said so.
    pub fn finish(&mut self) {
        for m in &mut self.machines {
            if m.removed_at.is_none() {
                m.removal_retries = m.removal_retries.saturating_sub(1);
            }
        }
    }
}

/// A machine's state in the replayed pool (upstream's five states).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolState {
    /// Ready and free.
    Idle,
    /// Reserved by Acquire for the job about to be picked up.
    Acquired,
    /// Being created.
    Creating,
    /// Running a job.
    Used,
    /// Being removed.
    Removing,
}

/// One machine of the replayed pool.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolMachine {
    /// Name.
    pub name: String,
    /// State.
    pub state: PoolState,
    /// Jobs run (upstream's `UsedCount`).
    pub used_count: i64,
    /// Last use (upstream's `Used`).
    pub last_used: DateTime<Utc>,
    /// Failed removal attempts.
    pub retry_count: u32,
    /// `Removing machine` lines since the removal was requested.
    pub attempts: u32,
    /// Whether a listing shows it (false while Creating and after a failed creation).
    pub on_disk: bool,
    /// False for a machine from before the log whose state no line has confirmed yet.
    pub confirmed: bool,
}

/// Upstream's decision kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DecisionKind {
    /// A creation.
    Create,
    /// A removal.
    Remove,
}

/// An upstream decision with the pool as it was.
#[derive(Debug, Clone)]
pub struct DecisionPoint {
    /// When the decision shows in the log (the removal's `now`, the creation's first line).
    pub at: DateTime<Utc>,
    /// Creation or removal.
    pub kind: DecisionKind,
    /// The machine.
    pub machine: String,
    /// Upstream's reason (removals), empty for creations.
    pub reason: String,
    /// The pool just before the decision line (every runner's machines), in listing order:
    /// on-disk names sorted, then the ones not on disk.
    pub pool: Vec<PoolMachine>,
    /// Jobs picked up and not yet on a machine, with the short token that picked them up.
    pub pending: Vec<(u64, String)>,
    /// For creations: the earliest instant the decision can have been taken (the name's
    /// second, at most the create-line delay before the line), and the pool then, when
    /// something changed between it and the first create line.
    pub earlier: Option<EarlierPool>,
    /// The source line.
    pub line: u64,
}

/// The pool at an earlier instant: (instant, machines in listing order, waiting jobs).
pub type EarlierPool = (DateTime<Utc>, Vec<PoolMachine>, Vec<(u64, String)>);

/// One change of the pool's counts, for the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolCounts {
    /// Idle + Acquired.
    pub idle: u32,
    /// Used.
    pub used: u32,
    /// Creating.
    pub creating: u32,
    /// Removing.
    pub removing: u32,
}

#[derive(Debug, Clone)]
enum Undo {
    Machine(String, Option<PoolMachine>),
    Pending(u64, Option<String>),
}

/// Second pass: replays the pool. See the module docs.
#[derive(Debug)]
pub struct Replay<'c> {
    collected: &'c Collector,
    pool: BTreeMap<String, PoolMachine>,
    pending: BTreeMap<u64, String>,
    /// job → machine it will use with `Using existing` (from the first pass).
    journal: VecDeque<(DateTime<Utc>, Undo)>,
    started: bool,
    /// The pool counts after each change, in time order.
    pub timeline: Vec<(DateTime<Utc>, PoolCounts)>,
    counts: PoolCounts,
    /// Creations whose start is not in the log (not judged).
    pub unjudged_creations: u64,
    released: HashSet<u64>,
    create_line_delay: TimeDelta,
}

const JOURNAL_SECS: i64 = 3;
/// Most undo entries kept (hostile input could put any number of lines in one second).
const MAX_JOURNAL: usize = 100_000;

impl<'c> Replay<'c> {
    /// A replay over the first pass's results.
    pub fn new(collected: &'c Collector) -> Replay<'c> {
        Replay {
            collected,
            pool: BTreeMap::new(),
            pending: BTreeMap::new(),
            journal: VecDeque::new(),
            started: false,
            timeline: Vec::new(),
            counts: PoolCounts::default(),
            unjudged_creations: 0,
            released: HashSet::new(),
            create_line_delay: TimeDelta::milliseconds(500),
        }
    }

    /// How long upstream may take from a creation decision to its first docker-machine line
    /// (default 0.5 s; spec: about 0.3 s). Pool changes in that window before the line make
    /// the decision's state uncertain. drover's emitter writes the line at the decision: 0.
    pub fn with_create_line_delay(mut self, d: TimeDelta) -> Self {
        self.create_line_delay = d;
        self
    }

    fn listing(&self) -> Vec<PoolMachine> {
        let mut v: Vec<PoolMachine> = self.pool.values().filter(|m| m.on_disk).cloned().collect();
        v.extend(self.pool.values().filter(|m| !m.on_disk).cloned());
        v
    }

    fn pending_list(&self) -> Vec<(u64, String)> {
        self.pending.iter().map(|(j, r)| (*j, r.clone())).collect()
    }

    fn count(&mut self, state: PoolState, add: bool) {
        let c = &mut self.counts;
        let slot = match state {
            PoolState::Idle | PoolState::Acquired => &mut c.idle,
            PoolState::Used => &mut c.used,
            PoolState::Creating => &mut c.creating,
            PoolState::Removing => &mut c.removing,
        };
        *slot = if add {
            slot.saturating_add(1)
        } else {
            slot.saturating_sub(1)
        };
    }

    fn set(&mut self, at: DateTime<Utc>, m: PoolMachine) {
        self.count(m.state, true);
        let prev = self.pool.insert(m.name.clone(), m.clone());
        if let Some(p) = &prev {
            self.count(p.state, false);
        }
        self.journal.push_back((at, Undo::Machine(m.name, prev)));
    }

    fn delete(&mut self, at: DateTime<Utc>, name: &str) {
        if let Some(prev) = self.pool.remove(name) {
            self.count(prev.state, false);
            self.journal
                .push_back((at, Undo::Machine(name.to_string(), Some(prev))));
        }
    }

    fn update(&mut self, at: DateTime<Utc>, name: &str, f: impl FnOnce(&mut PoolMachine)) {
        if let Some(m) = self.pool.get(name) {
            let mut m = m.clone();
            f(&mut m);
            m.confirmed = true;
            self.set(at, m);
        }
    }

    /// The pool at `t`: the current pool with journal entries at or after `t` undone.
    fn pool_at(&self, t: DateTime<Utc>) -> (Vec<PoolMachine>, Vec<(u64, String)>, bool) {
        let mut pool = self.pool.clone();
        let mut pending = self.pending.clone();
        let mut changed = false;
        for (at, u) in self.journal.iter().rev() {
            if *at < t {
                break;
            }
            changed = true;
            match u {
                Undo::Machine(name, Some(prev)) => {
                    pool.insert(name.clone(), prev.clone());
                }
                Undo::Machine(name, None) => {
                    pool.remove(name);
                }
                Undo::Pending(job, Some(r)) => {
                    pending.insert(*job, r.clone());
                }
                Undo::Pending(job, None) => {
                    pending.remove(job);
                }
            }
        }
        let mut v: Vec<PoolMachine> = pool.values().filter(|m| m.on_disk).cloned().collect();
        v.extend(pool.values().filter(|m| !m.on_disk).cloned());
        (v, pending.into_iter().collect(), changed)
    }

    fn record(&mut self, at: DateTime<Utc>) {
        let c = self.counts;
        match self.timeline.last_mut() {
            Some((t, last)) if *t == at => *last = c,
            Some((_, last)) if *last == c => {}
            _ => self.timeline.push((at, c)),
        }
    }

    fn start(&mut self, at: DateTime<Utc>) {
        self.started = true;
        // Machines from before the log: in the pool from the start, Idle, state unconfirmed.
        let before: Vec<PoolMachine> = self
            .collected
            .machines
            .iter()
            .filter(|m| m.before_log && m.created_at.is_none())
            .map(|m| PoolMachine {
                name: m.name.clone(),
                state: PoolState::Idle,
                used_count: m.first_used_count.map_or(1, |c| (c - 1).max(0)),
                last_used: at,
                retry_count: 0,
                attempts: 0,
                on_disk: true,
                confirmed: false,
            })
            .collect();
        for m in before {
            self.count(m.state, true);
            self.pool.insert(m.name.clone(), m);
        }
        self.record(at);
    }

    /// Takes one event; calls `judge` at each upstream decision with the pool before it.
    pub fn push(&mut self, e: &Event, judge: &mut dyn FnMut(&DecisionPoint)) {
        let at = e.at;
        if !self.started {
            self.start(at);
        }
        while self.journal.front().is_some_and(|(t, _)| {
            (at - *t).num_seconds() > JOURNAL_SECS || self.journal.len() > MAX_JOURNAL
        }) {
            self.journal.pop_front();
        }
        match &e.kind {
            EventKind::ProcessStart { .. } => {
                // Machines on disk are found again: Idle, used once, fresh times (spec §5.2.4).
                let names: Vec<String> = self.pool.keys().cloned().collect();
                for n in names {
                    let on_disk = self
                        .pool
                        .get(&n)
                        .is_some_and(|m| m.on_disk || m.state == PoolState::Creating);
                    if !on_disk {
                        self.delete(at, &n);
                        continue;
                    }
                    self.update(at, &n, |m| {
                        m.state = PoolState::Idle;
                        m.used_count = 1;
                        m.last_used = at;
                        m.retry_count = 0;
                        m.attempts = 0;
                        m.on_disk = true;
                    });
                }
                let jobs: Vec<u64> = self.pending.keys().copied().collect();
                for j in jobs {
                    let r = self.pending.remove(&j);
                    self.journal.push_back((at, Undo::Pending(j, r)));
                }
            }
            EventKind::ConfigLoaded | EventKind::Added { .. } => {}
            EventKind::Pickup { job, runner, .. } => {
                if self.pending.len() < MAX_PENDING {
                    let prev = self.pending.insert(*job, runner.clone());
                    self.journal.push_back((at, Undo::Pending(*job, prev)));
                }
                // Acquire reserved the machine this job will say `Using existing` about.
                if let Some(j) = self.collected.job(*job) {
                    if let (Some(true), Some(name)) = (j.existing, &j.machine) {
                        if self
                            .pool
                            .get(name)
                            .is_some_and(|m| m.state == PoolState::Idle)
                        {
                            self.update(at, name, |m| m.state = PoolState::Acquired);
                        }
                    }
                }
            }
            EventKind::Use {
                job,
                name,
                used_count,
                ..
            } => {
                if let Some(r) = self.pending.remove(job) {
                    self.journal.push_back((at, Undo::Pending(*job, Some(r))));
                }
                if !self.pool.contains_key(name) {
                    self.set(
                        at,
                        PoolMachine {
                            name: name.clone(),
                            state: PoolState::Idle,
                            used_count: used_count.map_or(0, |c| c - 1),
                            last_used: at,
                            retry_count: 0,
                            attempts: 0,
                            on_disk: true,
                            confirmed: true,
                        },
                    );
                }
                self.update(at, name, |m| {
                    m.state = PoolState::Used;
                    m.last_used = at;
                    m.used_count = used_count.unwrap_or(m.used_count.saturating_add(1));
                });
            }
            EventKind::Cleanup { job, name } => {
                // A machine obtained in job context is released in Cleanup.
                let j = self.collected.job(*job);
                let machine = name.clone().or_else(|| j.and_then(|j| j.machine.clone()));
                let existing = j.and_then(|j| j.existing).unwrap_or(false);
                if let Some(machine) = machine.filter(|_| !existing) {
                    self.release(at, *job, &machine);
                }
            }
            EventKind::JobEnd { job, .. } | EventKind::JobRemoved { job } => {
                if let Some(r) = self.pending.remove(job) {
                    self.journal.push_back((at, Undo::Pending(*job, Some(r))));
                }
                // The runner's deferred Release of the machine Acquire reserved. Without the
                // `Removed job…` line (before 16.2), the job end stands in.
                let j = self.collected.job(*job);
                let wait_for_removed = j.is_some_and(|j| j.done_at.is_some())
                    && matches!(e.kind, EventKind::JobEnd { .. });
                if let Some(j) = j.filter(|j| j.existing == Some(true)) {
                    if let (Some(name), false) = (&j.machine, wait_for_removed) {
                        let name = name.clone();
                        self.release(at, *job, &name);
                    }
                }
            }
            EventKind::CreateStart { name } => {
                if !self.pool.contains_key(name) {
                    self.judge_creation(at, name, e.line, judge);
                    self.set(at, creating(name, at));
                }
            }
            EventKind::Created { name, .. } => {
                if !self.pool.contains_key(name) {
                    self.unjudged_creations += 1;
                    self.set(at, creating(name, at));
                }
                self.update(at, name, |m| {
                    m.state = PoolState::Idle;
                    m.last_used = at;
                    m.on_disk = true;
                });
            }
            EventKind::CreateFailed { name } => {
                if !self.pool.contains_key(name) {
                    self.unjudged_creations += 1;
                    self.set(at, creating(name, at));
                }
            }
            EventKind::RemovalRequested {
                name,
                reason,
                used_count,
                ..
            } => {
                if !self.pool.contains_key(name) {
                    // Never mentioned before: from before the log.
                    self.set(
                        at,
                        PoolMachine {
                            name: name.clone(),
                            state: PoolState::Idle,
                            used_count: used_count.unwrap_or(1),
                            last_used: at,
                            retry_count: 0,
                            attempts: 0,
                            on_disk: true,
                            confirmed: false,
                        },
                    );
                }
                let point = DecisionPoint {
                    at,
                    kind: DecisionKind::Remove,
                    machine: name.clone(),
                    reason: reason.clone(),
                    pool: self.listing(),
                    pending: self.pending_list(),
                    earlier: None,
                    line: e.line,
                };
                judge(&point);
                self.update(at, name, |m| {
                    if m.state == PoolState::Creating {
                        m.on_disk = false;
                    }
                    m.state = PoolState::Removing;
                    m.retry_count = 0;
                    m.attempts = 0;
                    m.last_used = at;
                });
            }
            EventKind::RemovalAttempt { name } => {
                if self
                    .pool
                    .get(name)
                    .is_some_and(|m| m.state == PoolState::Removing)
                {
                    self.update(at, name, |m| {
                        // The first attempt is not a retry.
                        m.attempts = m.attempts.saturating_add(1);
                        m.retry_count = m.attempts.saturating_sub(1);
                    });
                }
            }
            EventKind::Removed { name, .. } => self.delete(at, name),
        }
        self.record(at);
    }

    fn release(&mut self, at: DateTime<Utc>, job: u64, name: &str) {
        if !self.released.insert(job) {
            return;
        }
        let Some(m) = self.pool.get(name) else {
            return;
        };
        let was_used = m.state == PoolState::Used;
        if matches!(m.state, PoolState::Used | PoolState::Acquired) {
            self.update(at, name, |m| {
                if was_used {
                    m.last_used = at;
                }
                m.state = PoolState::Idle;
            });
        }
    }

    fn judge_creation(
        &mut self,
        at: DateTime<Utc>,
        name: &str,
        line: u64,
        judge: &mut dyn FnMut(&DecisionPoint),
    ) {
        let earlier = name_second(name)
            .filter(|s| *s <= at && (at - *s).num_seconds() <= JOURNAL_SECS)
            .map(|s| s.max(at - self.create_line_delay))
            .filter(|from| *from < at)
            .and_then(|from| {
                let (pool, pending, changed) = self.pool_at(from);
                changed.then_some((from, pool, pending))
            });
        let point = DecisionPoint {
            at,
            kind: DecisionKind::Create,
            machine: name.to_string(),
            reason: String::new(),
            pool: self.listing(),
            pending: self.pending_list(),
            earlier,
            line,
        };
        judge(&point);
    }
}

fn creating(name: &str, at: DateTime<Utc>) -> PoolMachine {
    PoolMachine {
        name: name.to_string(),
        state: PoolState::Creating,
        used_count: 0,
        last_used: at,
        retry_count: 0,
        attempts: 0,
        on_disk: false,
        confirmed: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_seconds() {
        let t = name_second("runner-abcdefghi-auto-1700000000-0a1b2c3d");
        assert_eq!(t.map(|t| t.timestamp()), Some(1_700_000_000));
        assert_eq!(name_second("runner-abc-auto-17-0a1b2c3d"), None);
        assert_eq!(name_second("runner-abc-auto-1700000000-zzzzzzzz"), None);
    }
}
