//! The free-machine search of `Use` (spec §7, `retryUseMachine`): a fresh listing walked
//! newest first, each candidate acquired and checked **without** the connectivity cache;
//! unknown names are adopted as in the pass; a failed check removes the machine
//! ("machine is unavailable").
//!
//! Several searches may be open at once (one per job being prepared), each resumable around
//! its connectivity check like the Acquire pass.

use chrono::TimeDelta;

use super::command::Reason;
use super::machine::{Id, MachineState};
use super::{naming, Engine, EngineError, RunnerId, Time, CONNECTIVITY_CACHE_SECS};

/// Identifies one open search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FindId(u64);

/// Where a search stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum FindStep {
    /// Check this machine's connectivity (uncached), then call `find_connectivity_result`.
    CheckConnectivity {
        /// The search.
        id: FindId,
        /// The machine (now Acquired).
        name: String,
    },
    /// This machine passed the check and is Acquired for the caller.
    Found(String),
    /// No free machine: create one (`create_on_demand`) and wait for it.
    NotFound,
}

#[derive(Debug)]
pub(crate) struct FindState {
    listed: Vec<Id>,
    cursor: usize,
    pending: Option<Id>,
}

impl Engine {
    /// Starts a search for a free machine over a fresh listing (on-disk names plus in-memory
    /// Creating machines, filtered by the runner's filter).
    pub fn begin_find<S: AsRef<str>>(
        &mut self,
        runner: RunnerId,
        on_disk: &[S],
        now: Time,
    ) -> Result<FindStep, EngineError> {
        let filter = self.slot(runner)?.filter.clone();
        let mut listed = Vec::with_capacity(on_disk.len());
        let mut seen = std::collections::HashSet::new();
        for name in on_disk {
            let name = name.as_ref();
            if !naming::matches_filter(name, &filter) {
                continue;
            }
            seen.insert(name.to_string());
            let id = match self.ledger.id_of(name) {
                Some(id) => id,
                None => self.adopt(name, now),
            };
            listed.push(id);
        }
        let mut creating: Vec<(u64, Id)> = self
            .ledger
            .iter()
            .filter(|(_, m)| {
                m.state == MachineState::Creating
                    && !seen.contains(&*m.name)
                    && naming::matches_filter(&m.name, &filter)
            })
            .map(|(id, m)| (m.seq, id))
            .collect();
        creating.sort_unstable();
        listed.extend(creating.into_iter().map(|(_, id)| id));
        self.find_seq += 1;
        let id = FindId(self.find_seq);
        let cursor = listed.len();
        self.finds.insert(
            id.0,
            FindState {
                listed,
                cursor,
                pending: None,
            },
        );
        Ok(self.advance_search(id, now))
    }

    /// Resumes a search with the result of its connectivity check.
    pub fn find_connectivity_result(
        &mut self,
        id: FindId,
        ok: bool,
        now: Time,
    ) -> Result<FindStep, EngineError> {
        let Some(state) = self.finds.get_mut(&id.0) else {
            return Err(EngineError::NotWaiting(format!("search #{}", id.0)));
        };
        let Some(machine) = state.pending.take() else {
            return Err(EngineError::NotWaiting(format!("search #{}", id.0)));
        };
        if ok {
            if let Some(m) = self.ledger.get_mut(machine) {
                m.connect_ok_until =
                    now.checked_add_signed(TimeDelta::seconds(CONNECTIVITY_CACHE_SECS));
                let name = String::from(&*m.name);
                self.finds.remove(&id.0);
                return Ok(FindStep::Found(name));
            }
        } else {
            self.start_removal(machine, Reason::MachineUnavailable, now);
        }
        Ok(self.advance_search(id, now))
    }

    fn advance_search(&mut self, id: FindId, _now: Time) -> FindStep {
        loop {
            let Some(state) = self.finds.get_mut(&id.0) else {
                return FindStep::NotFound;
            };
            if state.cursor == 0 {
                self.finds.remove(&id.0);
                return FindStep::NotFound;
            }
            state.cursor -= 1;
            let Some(&mid) = state.listed.get(state.cursor) else {
                continue;
            };
            let Some(m) = self.ledger.get_mut(mid) else {
                continue;
            };
            if !m.try_acquire() {
                continue;
            }
            state.pending = Some(mid);
            return FindStep::CheckConnectivity {
                id,
                name: String::from(&*m.name),
            };
        }
    }
}
