//! gitlab-runner's run loop in virtual time (spec `gitlab-api.md` §7): the feeder hands
//! `[[runners]]` entries to `concurrent` workers every `check_interval / runners`; a worker
//! checks the runner's `limit`, runs an Acquire pass on the engine, requests a job, and runs
//! it synchronously (waiting for an on-demand machine if Acquire had none), then releases the
//! machine. This is the only place Acquire passes happen, so it decides *when* the engine
//! scales; *what* it does is the engine's.
//!
//! Simplifications, all documented in `docs/simulation.md`: job requests take no time (so
//! `request_concurrency` never binds), connectivity checks always succeed, and runners never
//! become unhealthy.

use super::queue::SimTime;
use super::run::{Ev, Simulation};
use crate::engine::{AcquireResult, AcquireStep, RunnerId};

/// `provisionRetryInterval`: the pause between on-demand attempts in `Use`.
const PROVISION_RETRY: SimTime = 1_000;
/// `Use` gives up on a job after this many failed on-demand attempts.
const USE_ATTEMPTS: u32 = 3;

/// What a worker is doing.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) enum WorkerState {
    /// Waiting for the feeder.
    #[default]
    Free,
    /// Holding a job, waiting for an on-demand machine (`retryUseMachine`).
    Waiting {
        /// Index into the run's runners.
        runner: usize,
        /// The job.
        job: usize,
        /// Attempts started so far (1-based).
        attempt: u32,
        /// The machine this attempt is creating, if the creation is still running.
        own: Option<String>,
    },
    /// Sleeping `provisionRetryInterval` after a failed attempt.
    Retrying {
        /// Index into the run's runners.
        runner: usize,
        /// The job.
        job: usize,
        /// Attempts made so far.
        attempt: u32,
    },
    /// Running a job on a machine.
    Running {
        /// Index into the run's runners.
        runner: usize,
        /// The job.
        job: usize,
        /// The machine.
        machine: String,
    },
}

/// One of the `concurrent` worker goroutines.
#[derive(Debug, Default, Clone)]
pub(crate) struct Worker {
    pub(crate) state: WorkerState,
}

impl Simulation {
    fn free_worker(&self) -> Option<usize> {
        self.workers
            .iter()
            .position(|w| w.state == WorkerState::Free)
    }

    /// The feeder wakes: hand the next runner to a free worker, or block until one frees.
    pub(crate) fn feed(&mut self) {
        if self.runners.is_empty() {
            self.events.schedule_in(self.feed_interval, Ev::Feed);
            return;
        }
        match self.free_worker() {
            Some(w) => self.hand_out(w),
            None => self.feeder_blocked = true,
        }
    }

    /// Gives the next runner in file order to worker `w`, then sleeps the feeder.
    fn hand_out(&mut self, w: usize) {
        let runner = self.feed_next % self.runners.len();
        self.feed_next = (self.feed_next + 1) % self.runners.len();
        self.process(w, runner);
        self.events.schedule_in(self.feed_interval, Ev::Feed);
    }

    /// A worker has become free: unblock the feeder if it waits.
    fn worker_freed(&mut self, w: usize) {
        if let Some(worker) = self.workers.get_mut(w) {
            worker.state = WorkerState::Free;
        }
        if self.feeder_blocked {
            self.feeder_blocked = false;
            self.hand_out(w);
        }
    }

    /// A job is submitted: it waits in its runner's queue, or the shared one.
    pub(crate) fn arrive(&mut self, job: usize) {
        self.queued += 1;
        match self.jobs.get(job).and_then(|j| j.runner) {
            Some(r) => {
                if let Some(runner) = self.runners.get_mut(r) {
                    runner.queue.push_back(job);
                }
            }
            None => self.shared.push_back(job),
        }
    }

    /// GitLab hands the runner its oldest pending job, if any.
    fn take_job(&mut self, runner: usize) -> Option<usize> {
        let own = self.runners.get(runner)?.queue.front().copied();
        let shared = self.shared.front().copied();
        match (own, shared) {
            (Some(o), Some(s)) if s < o => self.shared.pop_front(),
            (Some(_), _) => self.runners.get_mut(runner)?.queue.pop_front(),
            (None, Some(_)) => self.shared.pop_front(),
            (None, None) => None,
        }
    }

    /// One worker iteration for `runner` (multi.go's processRunner), repeated at once while it
    /// receives jobs and workers are free (the non-blocking re-queue).
    fn process(&mut self, mut w: usize, runner: usize) {
        loop {
            let Some(r) = self.runners.get(runner) else {
                return;
            };
            let Some(id) = r.engine else {
                return; // not autoscaled: polled, but takes no jobs in the simulation
            };
            if r.limit > 0 && r.builds >= r.limit {
                return;
            }
            let strict = r.strict;
            let Some(result) = self.acquire(id) else {
                return;
            };
            let got_job = match result {
                AcquireResult::NoFreeMachines | AcquireResult::MissingMachineOptions => false,
                AcquireResult::Machine(machine) => match self.take_job(runner) {
                    Some(job) => {
                        self.claim(runner);
                        self.start_job(w, runner, job, machine);
                        true
                    }
                    None => {
                        let now = self.wall();
                        let _ = self.engine.release(id, &machine, now);
                        self.pump();
                        false
                    }
                },
                AcquireResult::NoMachine => match self.take_job(runner) {
                    Some(job) => {
                        self.claim(runner);
                        self.use_on_demand(w, runner, job, 1);
                        true
                    }
                    None => false,
                },
            };
            if !got_job || strict {
                return;
            }
            match self.free_worker() {
                Some(next) => w = next,
                None => return,
            }
        }
    }

    fn claim(&mut self, runner: usize) {
        if let Some(r) = self.runners.get_mut(runner) {
            r.builds += 1;
        }
    }

    /// Runs one Acquire pass to its end; connectivity checks always succeed.
    fn acquire(&mut self, id: RunnerId) -> Option<AcquireResult> {
        let now = self.wall();
        let names: Vec<&str> = self.disk.iter().map(String::as_str).collect();
        let mut step = self.engine.begin_acquire(id, &names, now).ok()?;
        let result = loop {
            match step {
                AcquireStep::CheckConnectivity { name } => {
                    step = self.engine.connectivity_result(&name, true, now).ok()?;
                }
                AcquireStep::Done(outcome) => break outcome.result,
            }
        };
        self.pump();
        Some(result)
    }

    /// The job starts on `machine` (Use); it ends after its duration.
    fn start_job(&mut self, w: usize, runner: usize, job: usize, machine: String) {
        let now = self.now();
        let wall = self.wall();
        let _ = self.engine.use_machine(&machine, wall);
        self.pump();
        self.queued = self.queued.saturating_sub(1);
        let duration = self.jobs.get(job).map_or(0, |j| j.duration);
        if let Some(outcome) = self.trace.jobs.get_mut(job) {
            outcome.started = Some(now);
            outcome.waited_for_creation = self
                .ready_at
                .get(&machine)
                .is_some_and(|&ready| ready > outcome.submitted);
        }
        if let Some(worker) = self.workers.get_mut(w) {
            worker.state = WorkerState::Running {
                runner,
                job,
                machine,
            };
        }
        self.events.schedule_in(duration, Ev::JobDone(w));
    }

    /// The job on worker `w` ends: release its machine, free the slot.
    pub(crate) fn job_done(&mut self, w: usize) {
        let Some(WorkerState::Running {
            runner,
            job,
            machine,
        }) = self.workers.get(w).map(|x| x.state.clone())
        else {
            return;
        };
        let now = self.now();
        if let Some(outcome) = self.trace.jobs.get_mut(job) {
            outcome.finished = Some(now);
        }
        self.finished += 1;
        self.end_build(runner);
        if let Some(id) = self.runners.get(runner).and_then(|r| r.engine) {
            let wall = self.wall();
            let _ = self.engine.release(id, &machine, wall);
            self.pump();
            self.machine_available(runner, None);
        }
        self.worker_freed(w);
    }

    fn end_build(&mut self, runner: usize) {
        if let Some(r) = self.runners.get_mut(runner) {
            r.builds -= 1;
        }
    }

    /// The newest Idle machine of `runner` in listing order, acquired; `None` if there is none.
    fn find_free(&mut self, runner: usize) -> Option<String> {
        let name = self
            .disk
            .iter()
            .rev()
            .find(|n| {
                self.owner.get(*n) == Some(&runner)
                    && self
                        .engine
                        .machine(n)
                        .is_some_and(|m| m.state == crate::engine::MachineState::Idle)
            })?
            .clone();
        self.engine.try_acquire(&name).then_some(name)
    }

    /// `Use` without a machine from Acquire: attempt `attempt` of `retryUseMachine`.
    fn use_on_demand(&mut self, w: usize, runner: usize, job: usize, attempt: u32) {
        if let Some(machine) = self.find_free(runner) {
            self.start_job(w, runner, job, machine);
            return;
        }
        let Some(id) = self.runners.get(runner).and_then(|r| r.engine) else {
            return;
        };
        let wall = self.wall();
        let own = self.engine.create_on_demand(id, wall).ok();
        if let Some(name) = &own {
            self.owner.insert(name.clone(), runner);
        }
        if let Some(worker) = self.workers.get_mut(w) {
            worker.state = WorkerState::Waiting {
                runner,
                job,
                attempt,
                own,
            };
        }
        self.pump();
    }

    /// The sleep after a failed attempt is over: try again.
    pub(crate) fn use_retry(&mut self, w: usize) {
        if let Some(WorkerState::Retrying {
            runner,
            job,
            attempt,
        }) = self.workers.get(w).map(|x| x.state.clone())
        {
            self.use_on_demand(w, runner, job, attempt + 1);
        }
    }

    /// A creation failed: the worker waiting for it ends its attempt (spec §7).
    pub(crate) fn creation_failed(&mut self, machine: &str) {
        let waiting = self.workers.iter().position(
            |x| matches!(&x.state, WorkerState::Waiting { own: Some(o), .. } if o == machine),
        );
        let Some(w) = waiting else {
            return;
        };
        let Some(WorkerState::Waiting {
            runner,
            job,
            attempt,
            ..
        }) = self.workers.get(w).map(|x| x.state.clone())
        else {
            return;
        };
        if attempt < USE_ATTEMPTS {
            if let Some(worker) = self.workers.get_mut(w) {
                worker.state = WorkerState::Retrying {
                    runner,
                    job,
                    attempt,
                };
            }
            self.events.schedule_in(PROVISION_RETRY, Ev::UseRetry(w));
            return;
        }
        // Every attempt failed: the job fails with a system failure and frees its slot.
        self.queued = self.queued.saturating_sub(1);
        if let Some(outcome) = self.trace.jobs.get_mut(job) {
            outcome.failed = true;
        }
        self.finished += 1;
        self.end_build(runner);
        self.worker_freed(w);
    }

    /// A machine of `runner` became available (`created` names a finished creation): workers
    /// waiting on their own creation take it; others claim availability signals.
    pub(crate) fn machine_available(&mut self, runner: usize, created: Option<String>) {
        let Some(id) = self.runners.get(runner).and_then(|r| r.engine) else {
            return;
        };
        for w in 0..self.workers.len() {
            let Some(WorkerState::Waiting {
                runner: r,
                job,
                own,
                ..
            }) = self.workers.get(w).map(|x| x.state.clone())
            else {
                continue;
            };
            if r != runner {
                continue;
            }
            if let (Some(own), Some(created)) = (&own, &created) {
                if own == created && self.engine.try_acquire(own) {
                    self.start_job(w, runner, job, own.clone());
                    continue;
                }
            }
            if self.engine.claim_availability(id).unwrap_or(false) {
                if let Some(machine) = self.find_free(runner) {
                    self.start_job(w, runner, job, machine);
                }
            }
        }
    }
}
