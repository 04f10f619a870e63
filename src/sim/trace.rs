//! What a simulation run records: the timeline of machine and queue counts, every scaling
//! decision, and every job's fate. The simulator ([`crate::sim`]) writes a [`Trace`]; reports,
//! plots and comparisons ([`crate::sim::report`], [`crate::sim::plot`], [`crate::sim::compare`])
//! only read it. Nothing here decides or simulates anything.

use chrono::{DateTime, Utc};

use super::queue::SimTime;
use crate::engine::Reason;

/// Machines by state and queued jobs at one instant.
///
/// `idle` includes machines upstream calls *Acquired* (reserved for a job request that has not
/// started a job yet); `removing` includes machines stuck on removal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Idle (and acquired) machines.
    pub idle: u32,
    /// Machines running a job.
    pub used: u32,
    /// Machines being created.
    pub creating: u32,
    /// Machines being removed.
    pub removing: u32,
    /// Jobs submitted but not yet started.
    pub queued: u32,
}

impl Counts {
    /// All machines, in any state.
    pub fn total(&self) -> u32 {
        self.idle + self.used + self.creating + self.removing
    }
}

/// The counts from `at` until the next row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// When the counts took these values.
    pub at: SimTime,
    /// The values.
    pub counts: Counts,
}

/// Whether a decision creates or removes a machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// A machine creation.
    Create,
    /// A machine removal.
    Remove,
}

impl Action {
    /// `create` or `remove`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Remove => "remove",
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One scaling action the engine decided, as the simulator executed it.
///
/// Sixteen bytes: a manager-day records over a million of them, so the runner is an index into
/// [`Trace::runners`] (see [`Trace::runner_of`]) and the reason is the engine's own enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// When the command was issued.
    pub at: SimTime,
    /// The runner the command was for: an index into [`Trace::runners`].
    pub runner: u32,
    /// Create or remove.
    pub action: Action,
    /// Why; [`Reason::as_str`] is upstream's words (for removals: the removal reason).
    pub reason: Reason,
}

/// What happened to one job of the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobOutcome {
    /// When it was submitted.
    pub submitted: SimTime,
    /// When it started on a machine, if it did.
    pub started: Option<SimTime>,
    /// When it finished, if it did.
    pub finished: Option<SimTime>,
    /// True if the machine it ran on finished its creation after the job was submitted: the job
    /// waited (at least partly) for a creation.
    pub waited_for_creation: bool,
    /// True if the job failed for lack of a machine (every on-demand creation attempt failed).
    pub failed: bool,
}

/// One machine or job event of a run, as gitlab-runner would log it. Recorded only when asked
/// ([`crate::sim::Simulation::record_events`]), to write a run as upstream's log
/// ([`crate::upstream_log::emit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEvent {
    /// A runner received a job (`Checking for jobs... received`).
    Pickup {
        /// Index of the job in the workload.
        job: usize,
        /// The runner's `name`.
        runner: String,
    },
    /// The job started on a machine (`Using existing` / `Created docker-machine`).
    Use {
        /// The job.
        job: usize,
        /// The machine.
        machine: String,
        /// Its used count after this use.
        used_count: i64,
        /// True when it is the machine Acquire reserved.
        existing: bool,
    },
    /// The job ended on its machine (`Cleaned up docker-machine`, then the job end lines).
    JobEnd {
        /// The job.
        job: usize,
        /// The machine, if it got one.
        machine: Option<String>,
        /// True if the job failed for lack of a machine.
        failed: bool,
    },
    /// A creation was decided (its first `docker-machine create` line).
    CreateStart {
        /// The machine.
        machine: String,
    },
    /// A creation ended.
    Created {
        /// The machine.
        machine: String,
        /// Whether it succeeded.
        ok: bool,
    },
    /// A removal was decided (`Requesting machine removal`).
    RemovalRequested {
        /// The machine.
        machine: String,
        /// Upstream's reason string.
        reason: String,
        /// Its used count.
        used_count: i64,
    },
    /// One `docker-machine rm` attempt (`Removing machine`).
    RemovalAttempt {
        /// The machine.
        machine: String,
    },
    /// The machine is gone (`Machine removed`).
    Removed {
        /// The machine.
        machine: String,
    },
}

/// Everything one simulation run recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// Wall-clock time of [`SimTime`] 0.
    pub start: DateTime<Utc>,
    /// When the run stopped.
    pub end: SimTime,
    /// The seed of the provider model.
    pub seed: u64,
    /// Count changes, in time order, at most one row per instant.
    pub timeline: Vec<Row>,
    /// Scaling decisions in the order they were issued.
    pub decisions: Vec<Decision>,
    /// The runners decisions name ([`Decision::runner`] indexes it): the config's `name`s in
    /// file order, perhaps followed by `?` for machines no runner's filter matches.
    pub runners: Vec<String>,
    /// Jobs in workload order.
    pub jobs: Vec<JobOutcome>,
    /// Machine creations that were started.
    pub creations: u64,
    /// Creations that failed.
    pub creation_failures: u64,
    /// Completed removals, counted by reason (the engine's reasons in upstream's words; a
    /// replayed log's are its own text).
    pub removals: std::collections::BTreeMap<String, u64>,
    /// Warnings the engine raised (deduplicated, in order of first appearance).
    pub warnings: Vec<String>,
    /// Machine and job events in order, when the run recorded them (empty otherwise).
    pub events: Vec<(SimTime, RunEvent)>,
}

impl Trace {
    /// An empty trace starting at `start`.
    pub fn new(start: DateTime<Utc>, seed: u64) -> Self {
        Self {
            start,
            end: 0,
            seed,
            timeline: vec![Row {
                at: 0,
                counts: Counts::default(),
            }],
            decisions: Vec::new(),
            runners: Vec::new(),
            jobs: Vec::new(),
            creations: 0,
            creation_failures: 0,
            removals: Default::default(),
            warnings: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Records the counts at `at`. A row is added only when something changed; several changes
    /// at one instant leave one row with the last values.
    pub fn record(&mut self, at: SimTime, counts: Counts) {
        match self.timeline.last_mut() {
            Some(last) if last.counts == counts => {}
            Some(last) if last.at == at => {
                last.counts = counts;
                // Collapsing may make this row equal to the one before; drop it then.
                let n = self.timeline.len();
                if n >= 2 && self.timeline[n - 2].counts == counts {
                    self.timeline.pop();
                }
            }
            _ => self.timeline.push(Row { at, counts }),
        }
    }

    /// The name of the runner a decision was for (`?` if the trace does not know it).
    pub fn runner_of(&self, d: &Decision) -> &str {
        usize::try_from(d.runner)
            .ok()
            .and_then(|i| self.runners.get(i))
            .map_or("?", String::as_str)
    }

    /// Counts one completed removal with its reason.
    pub fn count_removal(&mut self, reason: &str) {
        match self.removals.get_mut(reason) {
            Some(n) => *n += 1,
            None => {
                self.removals.insert(reason.to_string(), 1);
            }
        }
    }

    /// The wall-clock time of a [`SimTime`].
    pub fn wall(&self, at: SimTime) -> DateTime<Utc> {
        let delta = chrono::Duration::milliseconds(at.min(i64::MAX as u64) as i64);
        self.start
            .checked_add_signed(delta)
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(idle: u32, queued: u32) -> Counts {
        Counts {
            idle,
            queued,
            ..Counts::default()
        }
    }

    #[test]
    fn records_one_row_per_change_and_instant() {
        let mut t = Trace::new(DateTime::UNIX_EPOCH, 0);
        t.record(0, c(1, 0));
        t.record(5, c(1, 0));
        t.record(5, c(2, 0));
        t.record(5, c(2, 1));
        t.record(9, c(2, 0));
        t.record(9, c(2, 1));
        let rows: Vec<_> = t.timeline.iter().map(|r| (r.at, r.counts)).collect();
        assert_eq!(rows, vec![(0, c(1, 0)), (5, c(2, 1))]);
        assert_eq!(c(2, 5).total(), 2);
    }

    #[test]
    fn a_decision_is_sixteen_bytes() {
        // A manager-day records 1.14 million decisions; the memory target counts on this.
        assert_eq!(std::mem::size_of::<Decision>(), 16);
    }
}
