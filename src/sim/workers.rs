//! gitlab-runner's run loop in virtual time (spec `gitlab-api.md` §7): the feeder hands
//! `[[runners]]` entries to `concurrent` workers every `check_interval / runners`; a worker
//! checks the runner's `limit`, runs an Acquire pass on the engine, requests a job, and runs
//! it synchronously (waiting for an on-demand machine if Acquire had none), then releases the
//! machine. This is the only place Acquire passes happen, so it decides *when* the engine
//! scales; *what* it does is the engine's.
//!
//! `Use` itself (find a machine, else create one on demand and wait, 3 attempts) is the
//! engine's `Use` session; this module answers its steps. Simplifications, all documented in
//! `docs/simulation.md`: job requests take no time (so `request_concurrency` never binds),
//! connectivity checks and credential fetches always succeed, and runners never become
//! unhealthy.

use super::run::{Ev, Simulation};
use super::trace::RunEvent;
use crate::engine::{AcquireResult, AcquireStep, RunnerId, UseId, UseStep};

/// What a worker is doing.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) enum WorkerState {
    /// Waiting for the feeder.
    #[default]
    Free,
    /// Holding a job while the engine's `Use` session finds or creates its machine.
    Using {
        /// Index into the run's runners.
        runner: usize,
        /// The job.
        job: usize,
        /// The session.
        session: UseId,
        /// The machine Acquire returned, released after the job (upstream's deferred Release).
        acquired: Option<String>,
    },
    /// Running a job on a machine.
    Running {
        /// Index into the run's runners.
        runner: usize,
        /// The job.
        job: usize,
        /// The machine `Use` returned.
        machine: String,
        /// The machine Acquire returned, if it is another one.
        acquired: Option<String>,
    },
}

/// One of the `concurrent` worker goroutines.
#[derive(Debug, Default, Clone)]
pub(crate) struct Worker {
    pub(crate) state: WorkerState,
}

impl Simulation {
    /// The free worker with the lowest index.
    fn free_worker(&self) -> Option<usize> {
        self.free_workers.first().copied()
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
            self.free_workers.insert(w);
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
            let acquired = match result {
                AcquireResult::NoFreeMachines | AcquireResult::MissingMachineOptions => return,
                AcquireResult::Machine(machine) => Some(machine),
                AcquireResult::NoMachine => None,
            };
            let Some(job) = self.take_job(runner) else {
                // An empty job request: release the machine Acquire reserved.
                if let Some(machine) = acquired {
                    let now = self.wall();
                    let _ = self.engine.release(id, &machine, now);
                    self.pump();
                }
                return;
            };
            self.claim(runner);
            if self.log_events {
                let name = self
                    .runners
                    .get(runner)
                    .map(|r| r.name.clone())
                    .unwrap_or_default();
                self.log(|| RunEvent::Pickup { job, runner: name });
            }
            self.begin_use(w, runner, id, job, acquired);
            if strict {
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
        // The engine keeps its copy of the store's listing (see `observe`), so the pass reads
        // its indexes instead of walking every machine.
        let mut step = self.engine.begin_acquire_listed(id, now).ok()?;
        let outcome = loop {
            match step {
                AcquireStep::CheckConnectivity { name } => {
                    step = self.engine.connectivity_result(&name, true, now).ok()?;
                }
                AcquireStep::Done(outcome) => break outcome,
            }
        };
        if self.log_events {
            // The pass's decisions in the order the engine took them: removals, then creations.
            for r in &outcome.report.removals {
                self.logged_removals.insert(r.name.clone());
                self.log(|| RunEvent::RemovalRequested {
                    machine: r.name.clone(),
                    reason: r.reason.to_string(),
                    used_count: r.used_count,
                });
            }
            for c in &outcome.report.created {
                self.log(|| RunEvent::CreateStart {
                    machine: c.name.clone(),
                });
            }
        }
        let result = outcome.result;
        self.pump();
        Some(result)
    }

    /// Starts the engine's `Use` for a job (executor Prepare); the session's steps are
    /// answered in [`Simulation::answer_use`].
    fn begin_use(
        &mut self,
        w: usize,
        runner: usize,
        id: RunnerId,
        job: usize,
        acquired: Option<String>,
    ) {
        let now = self.wall();
        let Ok(session) = self.engine.begin_use(id, acquired.as_deref(), now) else {
            return;
        };
        self.sessions.insert(session, w);
        if let Some(worker) = self.workers.get_mut(w) {
            self.free_workers.remove(&w);
            worker.state = WorkerState::Using {
                runner,
                job,
                session,
                acquired,
            };
        }
        self.pump();
    }

    /// Answers one step of a `Use` session: connectivity and credentials always succeed,
    /// listings are the simulated store; `Done` starts the job or fails it.
    pub(crate) fn answer_use(&mut self, step: UseStep) {
        let now = self.wall();
        match step {
            UseStep::CheckConnectivity { id, .. } => {
                let _ = self.engine.use_connectivity_result(id, true, now);
            }
            UseStep::List { id } => {
                let _ = self.engine.use_listing(id, self.disk.listing(), now);
            }
            UseStep::FetchCredentials { id, .. } => {
                let _ = self.engine.use_credentials_result(id, true, now);
            }
            UseStep::Done { id, result } => {
                let Some(w) = self.sessions.remove(&id) else {
                    return;
                };
                match result {
                    Ok(used) => self.start_job(w, used.name),
                    Err(_) => self.fail_job(w),
                }
            }
        }
    }

    /// The job on worker `w` starts on `machine`; it ends after its duration.
    fn start_job(&mut self, w: usize, machine: String) {
        let Some(WorkerState::Using {
            runner,
            job,
            acquired,
            ..
        }) = self.workers.get(w).map(|x| x.state.clone())
        else {
            return;
        };
        let now = self.now();
        self.queued = self.queued.saturating_sub(1);
        let duration = self.jobs.get(job).map_or(0, |j| j.duration);
        if let Some(outcome) = self.trace.jobs.get_mut(job) {
            outcome.started = Some(now);
            outcome.waited_for_creation = self
                .ready_at
                .get(&machine)
                .is_some_and(|&ready| ready > outcome.submitted);
        }
        if self.log_events {
            let used_count = self.engine.machine(&machine).map_or(0, |m| m.used_count);
            let existing = acquired.as_deref() == Some(machine.as_str());
            self.log(|| RunEvent::Use {
                job,
                machine: machine.clone(),
                used_count,
                existing,
            });
        }
        let acquired = acquired.filter(|a| *a != machine);
        if let Some(worker) = self.workers.get_mut(w) {
            worker.state = WorkerState::Running {
                runner,
                job,
                machine,
                acquired,
            };
        }
        self.events.schedule_in(duration, Ev::JobDone(w));
    }

    /// `Use` failed (every on-demand creation failed): the job fails with a system failure.
    fn fail_job(&mut self, w: usize) {
        let Some(WorkerState::Using {
            runner,
            job,
            acquired,
            ..
        }) = self.workers.get(w).map(|x| x.state.clone())
        else {
            return;
        };
        self.queued = self.queued.saturating_sub(1);
        if let Some(outcome) = self.trace.jobs.get_mut(job) {
            outcome.failed = true;
        }
        self.log(|| RunEvent::JobEnd {
            job,
            machine: None,
            failed: true,
        });
        self.finished += 1;
        self.end_build(runner);
        self.release(runner, acquired.as_deref());
        self.worker_freed(w);
    }

    fn release(&mut self, runner: usize, machine: Option<&str>) {
        let (Some(id), Some(machine)) = (self.runners.get(runner).and_then(|r| r.engine), machine)
        else {
            return;
        };
        let now = self.wall();
        let _ = self.engine.release(id, machine, now);
        self.pump();
    }

    /// The job on worker `w` ends: release its machine(s), free the slot.
    pub(crate) fn job_done(&mut self, w: usize) {
        let Some(WorkerState::Running {
            runner,
            job,
            machine,
            acquired,
        }) = self.workers.get(w).map(|x| x.state.clone())
        else {
            return;
        };
        let now = self.now();
        if let Some(outcome) = self.trace.jobs.get_mut(job) {
            outcome.finished = Some(now);
        }
        self.log(|| RunEvent::JobEnd {
            job,
            machine: Some(machine.clone()),
            failed: false,
        });
        self.finished += 1;
        self.end_build(runner);
        // The executor's cleanup releases the machine Use returned; then the runner's deferred
        // Release releases the one Acquire returned, if it was another.
        self.release(runner, Some(&machine));
        self.release(runner, acquired.as_deref());
        self.worker_freed(w);
    }

    fn end_build(&mut self, runner: usize) {
        if let Some(r) = self.runners.get_mut(runner) {
            r.builds -= 1;
        }
    }
}
