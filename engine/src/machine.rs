//! The machine ledger: upstream's five machine states, the record kept per machine, the
//! per-pass counters, and the in-memory table the engine keeps them in.
//!
//! Every state change the engine makes goes through a method here, so the transitions can be
//! read in one place:
//!
//! | from | to | when |
//! |---|---|---|
//! | (new) | Idle, used count 1 | the pass lists a name it has never seen (adoption) |
//! | (new) | Creating | a creation starts (pre-creation or on demand) |
//! | Creating | Idle | the creation succeeded |
//! | Idle | Acquired | a free-machine search reserves it |
//! | Idle, Acquired | Used | `Use`: the job starts on it |
//! | Used, Acquired | Idle | `Release` without reaching `MaxBuilds` |
//! | any | Removing | a removal starts (pass, Release, failed creation or check, drain) |
//! | Removing | (deleted) | the removal finished, or gave up after one force-remove |
//!
//! No I/O, no clock: times are given by the caller.

use chrono::{NaiveDate, TimeZone, Utc};

use super::command::Reason;
use super::Time;

/// Upstream's machine states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MachineState {
    /// Ready and free.
    Idle,
    /// Reserved for a job request that has not started yet.
    Acquired,
    /// Being created (not yet on disk).
    Creating,
    /// Running a job.
    Used,
    /// Being removed.
    Removing,
}

impl MachineState {
    /// The lower-case name used in metrics and `decide` output.
    pub fn as_str(self) -> &'static str {
        match self {
            MachineState::Idle => "idle",
            MachineState::Acquired => "acquired",
            MachineState::Creating => "creating",
            MachineState::Used => "used",
            MachineState::Removing => "removing",
        }
    }
}

/// Failed removal attempts after which a Removing machine counts as stuck (`removeRetryTries`).
pub const STUCK_AFTER_RETRIES: u32 = 3;

/// Go's zero `time.Time` (0001-01-01 00:00:00 UTC): a machine that was never used.
pub fn zero_time() -> Time {
    let date = NaiveDate::from_ymd_opt(1, 1, 1).unwrap_or(NaiveDate::MIN);
    Utc.from_utc_datetime(&date.and_time(chrono::NaiveTime::MIN))
}

/// The per-pass counters (upstream `machinesData`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Counts {
    /// Acquired machines.
    pub acquired: i64,
    /// Creating machines (including queued creations).
    pub creating: i64,
    /// Idle machines.
    pub idle: i64,
    /// Used machines.
    pub used: i64,
    /// Removing machines with fewer than 3 failed attempts.
    pub removing: i64,
    /// Removing machines with 3 or more failed attempts.
    pub stuck_on_removing: i64,
}

impl Counts {
    /// Available = Acquired + Creating + Idle.
    pub fn available(&self) -> i64 {
        self.acquired + self.creating + self.idle
    }
    /// InUse = Used.
    pub fn in_use(&self) -> i64 {
        self.used
    }
    /// Total = every state, Removing and stuck ones included.
    pub fn total(&self) -> i64 {
        self.available() + self.used + self.removing + self.stuck_on_removing
    }
    /// Counts one machine in `state` with `retry_count` failed removals.
    pub fn add(&mut self, state: MachineState, retry_count: u32) {
        match state {
            MachineState::Idle => self.idle += 1,
            MachineState::Acquired => self.acquired += 1,
            MachineState::Creating => self.creating += 1,
            MachineState::Used => self.used += 1,
            MachineState::Removing if retry_count >= STUCK_AFTER_RETRIES => {
                self.stuck_on_removing += 1
            }
            MachineState::Removing => self.removing += 1,
        }
    }
}

/// Metric target labels, filled by the driver from the provider's stored machine state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct TargetLabels {
    /// `target_zone`.
    pub zone: String,
    /// `target_region`.
    pub region: String,
    /// `target_project`.
    pub project: String,
    /// `target_machine_type`.
    pub machine_type: String,
}

/// Where a machine's creation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CreatePhase {
    /// Waiting for growth capacity in its token's coordinator.
    Queued(Reason),
    /// The `Create` command is out.
    Running,
}

/// Where a machine's removal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RemovalPhase {
    /// `CheckExists` is out.
    CheckExists,
    /// Stuck: waiting for the provider-wide stuck-removal lock.
    WaitStuckLock,
    /// `Stop` is out.
    Stop,
    /// `Remove` is out.
    Remove,
    /// Waiting `removeRetryInterval` after a failed attempt.
    Backoff,
    /// Gave up; the one `ForceRemove` is out.
    ForceRemove,
    /// Drain: `CheckExists` is out for drain attempt `n` (1-based).
    DrainCheck(u32),
    /// Drain: `ForceRemove` is out for attempt `n`.
    DrainForce(u32),
    /// Drain: waiting before attempt `n + 1`.
    DrainBackoff(u32),
    /// Drain: every attempt failed; the record stays.
    DrainFailed,
}

/// One tracked machine (upstream `machineDetails`).
#[derive(Debug, Clone)]
pub struct Machine {
    /// The machine name.
    pub name: Box<str>,
    /// The current state.
    pub state: MachineState,
    /// When the record was made.
    pub created: Time,
    /// The last use (also set on adoption, creation success and removal start).
    pub used: Time,
    /// The last time a pass listed it (or it was created).
    pub last_seen: Time,
    /// Jobs started on it.
    pub used_count: i64,
    /// Failed removal attempts.
    pub retry_count: u32,
    /// Why it is being removed.
    pub reason: Option<Reason>,
    /// `MaxRemovalAttempts` copied at creation; 0 for adopted machines (default applies).
    pub max_removal_attempts: i64,
    /// Metric target labels (boxed: rarely read, and the pass walks every record).
    pub labels: Box<TargetLabels>,
    pub(crate) runner: Option<usize>,
    pub(crate) connect_ok_until: Option<Time>,
    pub(crate) create: Option<CreatePhase>,
    pub(crate) removal: Option<RemovalPhase>,
    pub(crate) removal_attempts: i64,
    pub(crate) seen_epoch: u64,
    pub(crate) seq: u64,
    /// Not created by this process (restored from the ledger or adopted from a listing): it
    /// may hold containers, networks or volumes of a drover that died, so the first job handed
    /// it cleans them first (see [`super::UsedMachine::clean_first`]).
    pub(crate) unvetted: bool,
}

impl Machine {
    pub(crate) fn new(name: &str, state: MachineState, now: Time, seq: u64) -> Machine {
        Machine {
            name: name.into(),
            state,
            created: now,
            used: now,
            last_seen: now,
            used_count: 0,
            retry_count: 0,
            reason: None,
            max_removal_attempts: 0,
            labels: Box::default(),
            runner: None,
            connect_ok_until: None,
            create: None,
            removal: None,
            removal_attempts: 0,
            seen_epoch: 0,
            seq,
            unvetted: false,
        }
    }

    /// The runner that owns it, if known.
    pub fn runner(&self) -> Option<super::RunnerId> {
        self.runner.map(super::RunnerId)
    }

    /// Removal attempts made in the current removal (towards `MaxRemovalAttempts`).
    pub fn removal_attempts(&self) -> i64 {
        self.removal_attempts
    }

    /// Idle → Acquired; false (and no change) from any other state.
    pub(crate) fn try_acquire(&mut self) -> bool {
        if self.state == MachineState::Idle {
            self.state = MachineState::Acquired;
            true
        } else {
            false
        }
    }

    /// Whether this Removing machine counts as stuck.
    pub fn is_stuck(&self) -> bool {
        self.state == MachineState::Removing && self.retry_count >= STUCK_AFTER_RETRIES
    }
}

/// A handle to a ledger slot; stale handles (slot reused) are detected by the generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Id {
    idx: u32,
    gen: u32,
}

impl Id {
    /// The ledger slot this handle names (reused by later records).
    pub(crate) fn slot(self) -> usize {
        self.idx as usize
    }
}

#[derive(Debug, Default)]
struct Slot {
    gen: u32,
    machine: Option<Machine>,
}

/// The name index. FxHash (`rustc-hash`): names come from the provider, not from an adversary
/// aiming for collisions, SipHash's cost dominated a pass over 10,000 machines, and its
/// iteration order is deterministic, which the simulator's reproducibility relies on.
type NameIndex = rustc_hash::FxHashMap<Box<str>, u32>;

/// The in-memory machine table: a slab plus a name index.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    slots: Vec<Slot>,
    free: Vec<u32>,
    index: NameIndex,
    /// Machines put into Creating (they never go back to it); pruned by the pass.
    pub(crate) creating: Vec<Id>,
    /// Records written since the pass indexes last read them (see `index.rs`).
    pub(crate) dirty: Vec<Id>,
    /// Whether writes are noted in `dirty` (only while the indexes are maintained).
    pub(crate) track_dirty: bool,
}

impl Ledger {
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn id_of(&self, name: &str) -> Option<Id> {
        let idx = *self.index.get(name)?;
        let slot = self.slots.get(idx as usize)?;
        Some(Id { idx, gen: slot.gen })
    }

    pub(crate) fn get(&self, id: Id) -> Option<&Machine> {
        let slot = self.slots.get(id.idx as usize)?;
        if slot.gen != id.gen {
            return None;
        }
        slot.machine.as_ref()
    }

    /// Notes that the record may have changed, for the pass indexes. The list stays bounded:
    /// when it outgrows the table, duplicates are folded.
    pub(crate) fn mark(&mut self, id: Id) {
        if !self.track_dirty {
            return;
        }
        if self.dirty.len() >= 2 * self.slots.len() + 64 {
            self.dirty.sort_unstable();
            self.dirty.dedup();
        }
        self.dirty.push(id);
    }

    pub(crate) fn get_mut(&mut self, id: Id) -> Option<&mut Machine> {
        self.mark(id);
        self.get_mut_quiet(id)
    }

    /// `get_mut` without noting a change (for writes the indexes do not read).
    pub(crate) fn get_mut_quiet(&mut self, id: Id) -> Option<&mut Machine> {
        let slot = self.slots.get_mut(id.idx as usize)?;
        if slot.gen != id.gen {
            return None;
        }
        slot.machine.as_mut()
    }

    pub(crate) fn by_name(&self, name: &str) -> Option<&Machine> {
        self.get(self.id_of(name)?)
    }

    /// Inserts a new record; the caller makes sure the name is not tracked yet.
    pub(crate) fn insert(&mut self, machine: Machine) -> Id {
        let name = machine.name.clone();
        let id = if let Some(idx) = self.free.pop() {
            let slot = &mut self.slots[idx as usize];
            slot.gen = slot.gen.wrapping_add(1);
            slot.machine = Some(machine);
            Id { idx, gen: slot.gen }
        } else {
            let idx = self.slots.len() as u32;
            self.slots.push(Slot {
                gen: 0,
                machine: Some(machine),
            });
            Id { idx, gen: 0 }
        };
        self.index.insert(name, id.idx);
        self.mark(id);
        if self
            .get(id)
            .is_some_and(|m| m.state == MachineState::Creating)
        {
            self.creating.push(id);
        }
        id
    }

    pub(crate) fn delete(&mut self, id: Id) -> Option<Machine> {
        let slot = self.slots.get_mut(id.idx as usize)?;
        if slot.gen != id.gen {
            return None;
        }
        let m = slot.machine.take()?;
        self.index.remove(&m.name);
        self.free.push(id.idx);
        self.mark(id);
        Some(m)
    }

    /// Every tracked machine with its handle, in slot order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (Id, &Machine)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            s.machine.as_ref().map(|m| {
                (
                    Id {
                        idx: i as u32,
                        gen: s.gen,
                    },
                    m,
                )
            })
        })
    }
}
