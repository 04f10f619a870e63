//! The simulator's driver of the job router ([`crate::engine::router`]): gitlab-runner's run
//! loop (feeder, workers, `concurrent`, `limit`, `request_concurrency`, health, re-queue,
//! Acquire before request, releases) is the router's, the same one `drover run` drives. This
//! module only answers the router's commands in virtual time: an Acquire pass on the engine
//! (connectivity checks always succeed), a job request from the workload's queues (answered at
//! once), the job (the engine's `Use` session, then the job's duration) and releases.
//!
//! `Use` itself (find a machine, else create one on demand and wait, 3 attempts) is the
//! engine's `Use` session; this module answers its steps. Simplifications, all documented in
//! `docs/simulation.md`: job requests take no time (so `request_concurrency` never binds and
//! GitLab never pushes back), connectivity checks and credential fetches always succeed, and
//! GitLab never refuses a runner (so runners stay healthy). A runner that does not autoscale is
//! polled and answered "no job".

use super::queue::SimTime;
use super::route::{route, Routed, Routing};
use super::run::{Ev, Simulation};
use super::trace::RunEvent;
use crate::engine::router::{Acquired, Answer, Command as Route, Router, WorkerId};
use crate::engine::{AcquireResult, RunnerId, UseId, UseStep};

/// What a worker holds, beside what the router knows of it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) enum WorkerState {
    /// Nothing (free, or in the router's gates).
    #[default]
    Free,
    /// The request received this job; the router's `RunJob` comes next.
    Received {
        /// The job.
        job: usize,
    },
    /// Holding a job while the engine's `Use` session finds or creates its machine.
    Using {
        /// Index into the run's runners.
        runner: usize,
        /// The job.
        job: usize,
        /// The session.
        session: UseId,
        /// The machine Acquire returned.
        acquired: Option<String>,
    },
    /// Running a job on a machine.
    Running {
        /// The job.
        job: usize,
        /// The machine `Use` returned.
        machine: String,
    },
}

/// One of the `concurrent` worker goroutines.
#[derive(Debug, Default, Clone)]
pub(crate) struct Worker {
    pub(crate) state: WorkerState,
}

impl Routed for Simulation {
    fn routing(&mut self) -> &mut Routing {
        &mut self.routing
    }

    fn answer(&mut self, command: Route) {
        self.answer_route(command);
    }

    fn arm_feed(&mut self, at: SimTime) {
        self.events.schedule(at.max(self.now()), Ev::Feed);
    }
}

impl Simulation {
    /// The feeder's timer fired.
    pub(crate) fn feed(&mut self) {
        self.routing.feed_at = None;
        let now = self.router_now();
        self.route(|r| {
            r.handle_timeout(now);
            Ok(())
        });
    }

    /// The router's clock: virtual milliseconds.
    pub(crate) fn router_now(&self) -> u64 {
        self.now()
    }

    /// Gives the router an input and answers its commands (see [`super::route`]).
    pub(crate) fn route(
        &mut self,
        input: impl FnOnce(&mut Router) -> Result<(), crate::engine::router::RouterError>,
    ) {
        route(self, input);
    }

    fn answer_route(&mut self, c: Route) {
        let now = self.router_now();
        match c {
            Route::Acquire { worker, runner } => {
                let result = match self.runners.get(runner).and_then(|r| r.engine) {
                    Some(id) => self.acquire(id),
                    None => Acquired::Refused,
                };
                self.route(|r| r.acquired(worker, result, now));
            }
            Route::Request { worker, runner } => {
                let answer = match self.take_job(runner) {
                    Some(job) => {
                        if let Some(w) = self.workers.get_mut(worker) {
                            w.state = WorkerState::Received { job };
                        }
                        if self.log_events {
                            let name = self
                                .runners
                                .get(runner)
                                .map(|r| r.name.clone())
                                .unwrap_or_default();
                            self.log(|| RunEvent::Pickup { job, runner: name });
                        }
                        Answer::Job
                    }
                    None => Answer::NoJob,
                };
                self.route(|r| r.answered(worker, answer, now));
            }
            Route::RunJob {
                worker,
                runner,
                acquired,
            } => self.begin_use(worker, runner, acquired),
            Route::Release { runner, machine } => self.release(runner, &machine),
            Route::WorkerFree { worker } => {
                if let Some(w) = self.workers.get_mut(worker) {
                    w.state = WorkerState::Free;
                }
            }
            Route::Fed { .. }
            | Route::FeedSkipped { .. }
            | Route::Skipped { .. }
            | Route::UnsupportedExecutor { .. }
            | Route::RequestSlots { .. }
            | Route::Unhealthy { .. }
            | Route::ForcedCheck { .. } => {}
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

    /// GitLab hands the runner its oldest pending job, if any; a runner that does not
    /// autoscale takes none.
    fn take_job(&mut self, runner: usize) -> Option<usize> {
        let r = self.runners.get(runner)?;
        r.engine?;
        let own = r.queue.front().copied();
        let shared = self.shared.front().copied();
        match (own, shared) {
            (Some(o), Some(s)) if s < o => self.shared.pop_front(),
            (Some(_), _) => self.runners.get_mut(runner)?.queue.pop_front(),
            (None, Some(_)) => self.shared.pop_front(),
            (None, None) => None,
        }
    }

    /// Runs one Acquire pass to its end; connectivity checks always succeed.
    fn acquire(&mut self, id: RunnerId) -> Acquired {
        let now = self.wall();
        // The engine keeps its copy of the store's listing (see `observe`), so the pass reads
        // its indexes instead of walking every machine.
        let Ok(outcome) = self.engine.run_acquire(id, None::<&[&str]>, now, |_| true) else {
            return Acquired::Refused;
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
        self.pump();
        match outcome.result {
            AcquireResult::NoFreeMachines | AcquireResult::MissingMachineOptions => {
                Acquired::Refused
            }
            AcquireResult::Machine(machine) => Acquired::Machine(machine),
            AcquireResult::NoMachine => Acquired::NoMachine,
        }
    }

    /// Starts the engine's `Use` for the job worker `w` received (executor Prepare); the
    /// session's steps are answered in [`Simulation::answer_use`].
    fn begin_use(&mut self, w: WorkerId, runner: usize, acquired: Option<String>) {
        let Some(WorkerState::Received { job }) = self.workers.get(w).map(|x| x.state.clone())
        else {
            return;
        };
        let now = self.wall();
        let session = self
            .runners
            .get(runner)
            .and_then(|r| r.engine)
            .and_then(|id| self.engine.begin_use(id, acquired.as_deref(), now).ok());
        let Some(session) = session else {
            // Not reachable: only autoscaled runners receive jobs here.
            self.fail_job(w, job);
            return;
        };
        self.sessions.insert(session, w);
        if let Some(worker) = self.workers.get_mut(w) {
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
                let Some(WorkerState::Using { job, acquired, .. }) =
                    self.workers.get(w).map(|x| x.state.clone())
                else {
                    return;
                };
                match result {
                    Ok(used) => self.start_job(w, job, acquired, used.name),
                    Err(_) => self.fail_job(w, job),
                }
            }
        }
    }

    /// The job on worker `w` starts on `machine`; it ends after its duration.
    fn start_job(&mut self, w: WorkerId, job: usize, acquired: Option<String>, machine: String) {
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
        if let Some(worker) = self.workers.get_mut(w) {
            worker.state = WorkerState::Running { job, machine };
        }
        self.events.schedule_in(duration, Ev::JobDone(w));
    }

    /// `Use` failed (every on-demand creation failed): the job fails with a system failure.
    fn fail_job(&mut self, w: WorkerId, job: usize) {
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
        let now = self.router_now();
        self.route(|r| r.job_finished(w, None, now));
    }

    fn release(&mut self, runner: usize, machine: &str) {
        let Some(id) = self.runners.get(runner).and_then(|r| r.engine) else {
            return;
        };
        let now = self.wall();
        let _ = self.engine.release(id, machine, now);
        self.pump();
    }

    /// The job on worker `w` ends: the router releases its machine(s) and frees the worker.
    pub(crate) fn job_done(&mut self, w: WorkerId) {
        let Some(WorkerState::Running { job, machine }) =
            self.workers.get(w).map(|x| x.state.clone())
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
        let at = self.router_now();
        self.route(|r| r.job_finished(w, Some(machine), at));
    }
}
