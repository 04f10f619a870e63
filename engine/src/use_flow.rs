//! `Use` (spec §7, executor Prepare) as resumable sessions: check the machine Acquire gave
//! (uncached), otherwise up to 3 attempts 1 s apart of "search a fresh listing, else create
//! one and wait for it, for an availability signal, or for a 1 s poll", then fetch the Docker
//! credentials and mark the machine Used.
//!
//! Each step that needs the provider is a [`UseStep`] from [`Engine::poll_use`]; the driver
//! answers with the matching `use_*` input. Sessions waiting for a machine wake up on their
//! own when creations finish, machines are released, or their timers fire.

use chrono::TimeDelta;

use super::find::{FindId, FindStep};
use super::machine::{Id, MachineState};
use super::timers::Timer;
use super::{Engine, EngineError, Reason, RunnerId, Time};

/// `retryUseMachine`'s attempts.
pub const USE_ATTEMPTS: u32 = 3;
/// `provisionRetryInterval`: the wait after a failed attempt, and the availability poll.
pub const PROVISION_RETRY_SECS: i64 = 1;

/// Identifies one `Use` session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UseId(pub(crate) u64);

/// The machine a session ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsedMachine {
    /// The machine, now Used.
    pub name: String,
    /// True when it is not the machine Acquire returned: release it after the job too.
    pub new_data: bool,
    /// First use since drover started (restored from its ledger or adopted): work a dead
    /// drover left on it must be found and ended before the job runs, or the machine given
    /// back as unusable when that fails.
    pub clean_first: bool,
}

/// Why a session failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UseError {
    /// The last attempt's creation failed.
    #[error("failed to create machine {0:?}")]
    CreationFailed(String),
    /// Fetching the Docker credentials failed; the machine was released.
    #[error("failed to get credentials of machine {0:?}")]
    Credentials(String),
}

/// What a session needs from the driver, or its end.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum UseStep {
    /// Check this machine's connectivity without the cache; answer with
    /// [`Engine::use_connectivity_result`].
    CheckConnectivity {
        /// The session.
        id: UseId,
        /// The machine.
        name: String,
    },
    /// List the provider's machines; answer with [`Engine::use_listing`].
    List {
        /// The session.
        id: UseId,
    },
    /// Fetch the machine's Docker credentials; answer with [`Engine::use_credentials_result`].
    FetchCredentials {
        /// The session.
        id: UseId,
        /// The machine.
        name: String,
    },
    /// The session is over.
    Done {
        /// The session.
        id: UseId,
        /// The machine to run the job on, or why there is none.
        result: Result<UsedMachine, UseError>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    CheckData(Id),
    Listing,
    Checking(FindId),
    Waiting(Id),
    Backoff,
    Credentials(Id),
}

#[derive(Debug)]
pub(crate) struct UseSession {
    runner: usize,
    data: Option<Id>,
    attempt: u32,
    phase: Phase,
    /// The creation this attempt started. A wake-up (availability signal or poll) searches
    /// the pool; when that finds nothing the session goes back to waiting for this creation
    /// instead of starting another one.
    own: Option<Id>,
    /// The result of `own`, when it finished while the session was searching.
    own_result: Option<bool>,
}

impl Engine {
    /// Starts `Use` for a job of `runner`, with the machine Acquire returned (if any).
    pub fn begin_use(
        &mut self,
        runner: RunnerId,
        acquired: Option<&str>,
        now: Time,
    ) -> Result<UseId, EngineError> {
        self.slot(runner)?;
        self.use_seq += 1;
        let id = UseId(self.use_seq);
        let data = acquired.and_then(|n| self.ledger.id_of(n));
        let data_ok = data
            .and_then(|d| self.ledger.get(d))
            .is_some_and(|m| m.state == MachineState::Acquired);
        let phase = match data {
            Some(d) if data_ok => Phase::CheckData(d),
            _ => Phase::Listing,
        };
        self.uses.insert(
            id.0,
            UseSession {
                runner: runner.0,
                data,
                attempt: 1,
                phase,
                own: None,
                own_result: None,
            },
        );
        match phase {
            Phase::CheckData(d) => {
                let name = self.name_of(d);
                self.use_steps
                    .push_back(UseStep::CheckConnectivity { id, name });
            }
            _ => self.use_steps.push_back(UseStep::List { id }),
        }
        let _ = now;
        Ok(id)
    }

    /// The next step of any `Use` session, if any. Drain after every input.
    pub fn poll_use(&mut self) -> Option<UseStep> {
        self.use_steps.pop_front()
    }

    fn name_of(&self, id: Id) -> String {
        self.ledger
            .get(id)
            .map(|m| String::from(&*m.name))
            .unwrap_or_default()
    }

    fn session(&mut self, id: UseId) -> Result<&mut UseSession, EngineError> {
        self.uses
            .get_mut(&id.0)
            .ok_or_else(|| EngineError::NotWaiting(format!("use session #{}", id.0)))
    }

    /// Answers [`UseStep::List`] with the provider's on-disk names in listing order.
    pub fn use_listing<S: AsRef<str>>(
        &mut self,
        id: UseId,
        on_disk: &[S],
        now: Time,
    ) -> Result<(), EngineError> {
        let s = self.session(id)?;
        if s.phase != Phase::Listing {
            return Err(EngineError::NotWaiting(format!(
                "listing for use session #{}",
                id.0
            )));
        }
        let runner = RunnerId(s.runner);
        let step = self.begin_find(runner, on_disk, now)?;
        self.use_find_step(id, step, now);
        Ok(())
    }

    /// Answers [`UseStep::CheckConnectivity`].
    pub fn use_connectivity_result(
        &mut self,
        id: UseId,
        ok: bool,
        now: Time,
    ) -> Result<(), EngineError> {
        let phase = self.session(id)?.phase;
        match phase {
            Phase::CheckData(d) if ok => self.use_credentials(id, d),
            Phase::CheckData(_) => {
                if let Ok(s) = self.session(id) {
                    s.phase = Phase::Listing;
                }
                self.use_steps.push_back(UseStep::List { id });
            }
            Phase::Checking(fid) => {
                let step = self.find_connectivity_result(fid, ok, now)?;
                self.use_find_step(id, step, now);
            }
            _ => {
                return Err(EngineError::NotWaiting(format!(
                    "connectivity for use session #{}",
                    id.0
                )))
            }
        }
        Ok(())
    }

    /// Answers [`UseStep::FetchCredentials`]: on success the machine becomes Used.
    pub fn use_credentials_result(
        &mut self,
        id: UseId,
        ok: bool,
        now: Time,
    ) -> Result<(), EngineError> {
        let s = self.session(id)?;
        let Phase::Credentials(m) = s.phase else {
            return Err(EngineError::NotWaiting(format!(
                "credentials for use session #{}",
                id.0
            )));
        };
        let (runner, data) = (s.runner, s.data);
        self.uses.remove(&id.0);
        let name = self.name_of(m);
        let result = if ok {
            self.use_machine(&name, now)?;
            let clean_first = self
                .ledger
                .get_mut(m)
                .is_some_and(|x| std::mem::take(&mut x.unvetted));
            Ok(UsedMachine {
                name,
                new_data: data != Some(m),
                clean_first,
            })
        } else {
            self.release(RunnerId(runner), &name, now)?;
            Err(UseError::Credentials(name))
        };
        self.use_steps.push_back(UseStep::Done { id, result });
        Ok(())
    }

    fn use_credentials(&mut self, id: UseId, m: Id) {
        if let Ok(s) = self.session(id) {
            s.phase = Phase::Credentials(m);
        }
        let name = self.name_of(m);
        self.use_steps
            .push_back(UseStep::FetchCredentials { id, name });
    }

    fn use_find_step(&mut self, id: UseId, step: FindStep, now: Time) {
        match step {
            FindStep::CheckConnectivity { id: fid, name } => {
                if let Ok(s) = self.session(id) {
                    s.phase = Phase::Checking(fid);
                }
                self.use_steps
                    .push_back(UseStep::CheckConnectivity { id, name });
            }
            FindStep::Found(name) => {
                if let Some(m) = self.ledger.id_of(&name) {
                    self.use_credentials(id, m);
                }
            }
            FindStep::NotFound => {
                let Some(s) = self.uses.get_mut(&id.0) else {
                    return;
                };
                match (s.own, s.own_result.take()) {
                    // This attempt's creation is still running: keep waiting for it.
                    (Some(own), None) => {
                        s.phase = Phase::Waiting(own);
                        self.arm_use_poll(id, now);
                    }
                    // It finished while the session was searching: act on it now.
                    (Some(own), Some(ok)) => {
                        s.phase = Phase::Waiting(own);
                        self.use_own_created(id.0, own, ok, now);
                    }
                    // The attempt has no creation yet: start one and wait for it.
                    (None, _) => {
                        let runner = s.runner;
                        let (own, _) = self.start_creation(runner, Reason::OnDemand, now);
                        if let Ok(s) = self.session(id) {
                            s.own = Some(own);
                            s.phase = Phase::Waiting(own);
                        }
                        self.arm_use_poll(id, now);
                    }
                }
            }
        }
    }

    fn arm_use_poll(&mut self, id: UseId, now: Time) {
        self.timers.arm(
            now + TimeDelta::seconds(PROVISION_RETRY_SECS),
            Timer::UsePoll(id.0),
        );
    }

    /// A creation finished: the session that started it takes it (or fails its attempt); a
    /// session busy searching the pool keeps the result for when its search comes back empty.
    pub(crate) fn use_on_created(&mut self, machine: Id, ok: bool, now: Time) {
        let mut owners: Vec<u64> = self
            .uses
            .iter()
            .filter(|(_, s)| s.own == Some(machine))
            .map(|(k, _)| *k)
            .collect();
        owners.sort_unstable();
        for k in owners {
            let Some(s) = self.uses.get_mut(&k) else {
                continue;
            };
            if s.phase == Phase::Waiting(machine) {
                self.use_own_created(k, machine, ok, now);
            } else {
                s.own_result = Some(ok);
            }
        }
    }

    /// The creation session `k` waits for finished with `ok`.
    fn use_own_created(&mut self, k: u64, machine: Id, ok: bool, now: Time) {
        let id = UseId(k);
        if ok {
            let got = self
                .ledger
                .get_mut(machine)
                .is_some_and(|m| m.try_acquire());
            if got {
                self.use_credentials(id, machine);
            } else {
                // Someone else took it first; keep waiting for an availability signal.
                self.arm_use_poll(id, now);
            }
            return;
        }
        {
            let Some(s) = self.uses.get_mut(&k) else {
                return;
            };
            s.own = None;
            if s.attempt >= USE_ATTEMPTS {
                self.uses.remove(&k);
                let name = self.name_of(machine);
                self.use_steps.push_back(UseStep::Done {
                    id,
                    result: Err(UseError::CreationFailed(name)),
                });
            } else {
                s.attempt += 1;
                s.phase = Phase::Backoff;
                self.timers.arm(
                    now + TimeDelta::seconds(PROVISION_RETRY_SECS),
                    Timer::UseRetry(k),
                );
            }
        }
    }

    /// An availability signal for `token`: waiting sessions of that token claim it and search.
    pub(crate) fn use_on_available(&mut self, token: &str) {
        let mut waiting: Vec<u64> = self
            .uses
            .iter()
            .filter(|(_, s)| matches!(s.phase, Phase::Waiting(_)))
            .filter(|(_, s)| {
                self.runners
                    .get(s.runner)
                    .is_some_and(|r| r.policy.token == token)
            })
            .map(|(k, _)| *k)
            .collect();
        waiting.sort_unstable();
        for k in waiting {
            let claimed = match self.availability.get_mut(token) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    true
                }
                _ => false,
            };
            if !claimed {
                break;
            }
            if let Some(s) = self.uses.get_mut(&k) {
                s.phase = Phase::Listing;
            }
            self.use_steps.push_back(UseStep::List { id: UseId(k) });
        }
    }

    pub(crate) fn use_on_poll(&mut self, k: u64, now: Time) {
        let Some(s) = self.uses.get(&k) else {
            return;
        };
        if !matches!(s.phase, Phase::Waiting(_)) {
            return;
        }
        let token = self
            .runners
            .get(s.runner)
            .map(|r| r.policy.token.clone())
            .unwrap_or_default();
        if self.availability.get(&token).is_some_and(|n| *n > 0) {
            self.use_on_available(&token);
        }
        if self
            .uses
            .get(&k)
            .is_some_and(|s| matches!(s.phase, Phase::Waiting(_)))
        {
            self.arm_use_poll(UseId(k), now);
        }
    }

    pub(crate) fn use_on_retry(&mut self, k: u64) {
        if let Some(s) = self.uses.get_mut(&k) {
            if s.phase == Phase::Backoff {
                s.phase = Phase::Listing;
                self.use_steps.push_back(UseStep::List { id: UseId(k) });
            }
        }
    }
}
