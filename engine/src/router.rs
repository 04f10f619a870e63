//! The job router: gitlab-runner's run loop (`commands/multi.go`, spec `gitlab-api.md` §7) as a
//! sans-IO state machine, beside the autoscaling engine and in its style.
//!
//! The router decides *when* a runner asks GitLab for a job and on which worker; it never talks
//! to GitLab, a provider or a clock. Inputs carry the current time (milliseconds on any
//! monotonic origin, [`Millis`]); outputs are [`Command`]s drained with
//! [`Router::poll_command`], and [`Router::poll_timeout`] says when to call
//! [`Router::handle_timeout`] again. `drover run` drives it with GitLab, the machine pools and
//! the executor; the simulator and `drover compare` drive it with the workload and the provider
//! model. Both feed it the same inputs, so they make the same decisions.
//!
//! What it models, as upstream:
//!
//! * **workers**: `concurrent` of them; a worker takes one runner at a time and holds it from
//!   the gates through the job's end;
//! * **the feeder**: each round re-reads the runner list and sleeps `check_interval / runners`
//!   after each entry (all entries count, fed or skipped); an entry without a token or an
//!   unhealthy one is skipped; handing an entry out waits for a free worker;
//! * **the gates**, in order: the executor is known (else the runner counts a failure), `limit`
//!   (builds held), `request_concurrency` (requests in flight; adaptive: ceil of a value that
//!   grows ×1.1 on a job, shrinks ×0.95 on an empty answer and ×0.5 on a push-back, clamped to
//!   1…`request_concurrency`), then for docker+machine the Acquire pass
//!   ([`Command::Acquire`]): a refusal gives the request slot back and makes no request;
//! * **health**: a forbidden request (or an unknown executor) counts a failure, anything else
//!   resets the count; at `unhealthy_requests_limit` failures the feeder skips the runner until
//!   `unhealthy_interval` has passed since it was last healthy, then forces one attempt;
//! * **re-queue**: a runner that received a job is handed at once to the lowest free worker,
//!   unless `strict_check_interval`; with no free worker the re-queue is dropped;
//! * **releases**: after the job, the machine `Use` returned (when it is not the acquired one),
//!   then the acquired machine; after an empty answer, the acquired machine.

use std::collections::{BTreeSet, VecDeque};

use rustc_hash::FxHashMap;

/// Time in milliseconds since an origin the driver chooses (monotonic).
pub type Millis = u64;

/// `unhealthy_requests_limit`'s default.
pub const DEFAULT_UNHEALTHY_REQUESTS_LIMIT: u32 = 3;
/// `unhealthy_interval`'s default (60 minutes).
pub const DEFAULT_UNHEALTHY_INTERVAL_MS: Millis = 3_600_000;

/// How the router reaches a runner's executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutorKind {
    /// `docker+machine`: an Acquire pass before each request, machines released after.
    Machine,
    /// `docker`: no machine.
    Docker,
    /// An executor drover does not run: the runner counts a failure each turn.
    Unsupported,
}

/// One `[[runners]]` entry as the router sees it (built from the config by the drivers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerSettings {
    /// The runner's identity across reloads (its token); counters are kept by it.
    pub key: String,
    /// The token is not blank: the feeder hands the runner out.
    pub has_token: bool,
    /// Its executor.
    pub executor: ExecutorKind,
    /// `limit`: builds held at once, 0 for no limit.
    pub limit: usize,
    /// `request_concurrency`, at least 1.
    pub request_concurrency: usize,
    /// `FF_USE_ADAPTIVE_REQUEST_CONCURRENCY` (on by default).
    pub adaptive: bool,
    /// `strict_check_interval`: no re-queue after a job.
    pub strict: bool,
    /// `unhealthy_requests_limit`, at least 1.
    pub unhealthy_requests_limit: u32,
    /// `unhealthy_interval` in milliseconds.
    pub unhealthy_interval: Millis,
}

/// The settings the router reads: reloaded whole by [`Router::apply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterConfig {
    /// `concurrent`: the number of workers (at least 1).
    pub concurrent: usize,
    /// `check_interval` in milliseconds (at least 1).
    pub check_interval: Millis,
    /// The runners in file order.
    pub runners: Vec<RunnerSettings>,
}

/// A worker, by index (0 … `concurrent` − 1).
pub type WorkerId = usize;

/// What the Acquire pass answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// This machine is reserved for the job.
    Machine(String),
    /// No machine, but a request may go ahead (`Use` creates one).
    NoMachine,
    /// No free machine that can process builds (or no pool): make no request.
    Refused,
}

/// How a job request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// A job (201).
    Job,
    /// No job (204), or the request was cancelled.
    NoJob,
    /// GitLab pushed back (a retried 429/5xx): the adaptive value halves.
    PushedBack,
    /// The request failed (network, 5xx): resets health, adaptive value unchanged.
    Failed,
    /// Forbidden (403) or the client could not be built: counts a failure.
    Forbidden,
}

/// Why a worker turn made no request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// `limit` builds are held.
    Limit,
    /// `request_concurrency` requests are in flight.
    RequestConcurrency,
    /// The Acquire pass refused (`no_free_executor`).
    NoFreeExecutor,
}

/// What the router asks its driver to do, and the decisions it reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// The feeder handed runner `runner` (index into the config's list) to `worker`.
    Fed {
        /// The worker.
        worker: WorkerId,
        /// The runner.
        runner: usize,
    },
    /// The feeder skipped the runner (no token, or unhealthy).
    FeedSkipped {
        /// The runner.
        runner: usize,
    },
    /// Run the runner's Acquire pass; answer with [`Router::acquired`].
    Acquire {
        /// The worker.
        worker: WorkerId,
        /// The runner.
        runner: usize,
    },
    /// Ask GitLab for a job; answer with [`Router::answered`].
    Request {
        /// The worker.
        worker: WorkerId,
        /// The runner.
        runner: usize,
    },
    /// Run the job the last request received (ack, `Use`, executor, final update); answer
    /// with [`Router::job_finished`].
    RunJob {
        /// The worker.
        worker: WorkerId,
        /// The runner.
        runner: usize,
        /// The machine Acquire reserved, for `Use`.
        acquired: Option<String>,
    },
    /// Give a machine back to the runner's pool.
    Release {
        /// The runner.
        runner: usize,
        /// The machine.
        machine: String,
    },
    /// The worker's turn made no request.
    Skipped {
        /// The worker.
        worker: WorkerId,
        /// The runner.
        runner: usize,
        /// Why.
        why: Skip,
    },
    /// The runner's executor is not one drover runs (a health failure).
    UnsupportedExecutor {
        /// The runner.
        runner: usize,
    },
    /// The request-slot gauges after a gate or an answer (for metrics).
    RequestSlots {
        /// The runner.
        runner: usize,
        /// `request_concurrency`.
        max: usize,
        /// The adaptive value.
        adaptive: AdaptiveValue,
        /// Requests in flight.
        in_flight: usize,
    },
    /// The runner reached `unhealthy_requests_limit` failures and will be skipped.
    Unhealthy {
        /// The runner.
        runner: usize,
        /// Consecutive failures.
        failures: u32,
    },
    /// `unhealthy_interval` passed: one attempt is forced and the count reset.
    ForcedCheck {
        /// The runner.
        runner: usize,
        /// Consecutive failures before the reset.
        failures: u32,
    },
    /// The worker is free again.
    WorkerFree {
        /// The worker.
        worker: WorkerId,
    },
}

/// The adaptive request value, kept as its bits so commands compare whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveValue(pub u64);

impl AdaptiveValue {
    /// The value.
    pub fn get(self) -> f64 {
        f64::from_bits(self.0)
    }
}

/// An input the router was given, as recorded in its decision log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// [`Router::handle_timeout`].
    Timeout,
    /// [`Router::hand_out`] of this runner.
    HandOut(usize),
    /// [`Router::acquired`].
    Acquired(WorkerId, Acquired),
    /// [`Router::answered`].
    Answered(WorkerId, Answer),
    /// [`Router::job_finished`].
    JobFinished(WorkerId, Option<String>),
    /// [`Router::apply`].
    Apply,
    /// [`Router::stop`].
    Stop,
}

/// One line of the decision log: at `at`, `input` produced `commands`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// When.
    pub at: Millis,
    /// The input.
    pub input: Input,
    /// What the router said, in order.
    pub commands: Vec<Command>,
}

/// A worker's phase.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Free,
    Acquiring {
        runner: usize,
    },
    Requesting {
        runner: usize,
        acquired: Option<String>,
    },
    Running {
        runner: usize,
        acquired: Option<String>,
    },
}

/// Counters kept per runner key (they survive a reload).
#[derive(Debug, Clone)]
struct Counters {
    builds: usize,
    requests: usize,
    adaptive: f64,
    failures: u32,
    last_healthy: Millis,
}

/// An input the router cannot take (a driver bug): the worker is not where the input says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("router: worker {worker} cannot take {input} now (it is {phase}); the driver answered out of turn")]
pub struct RouterError {
    /// The worker.
    pub worker: WorkerId,
    /// The input.
    pub input: &'static str,
    /// What it was doing.
    pub phase: &'static str,
}

/// The run loop. See the module docs.
#[derive(Debug)]
pub struct Router {
    config: RouterConfig,
    counters: FxHashMap<String, Counters>,
    workers: Vec<Phase>,
    /// Workers above `concurrent` after a reload shrank it: retired when they free.
    retiring: usize,
    /// Retired workers (never handed out unless a reload grows `concurrent` again).
    retired: BTreeSet<WorkerId>,
    free: BTreeSet<WorkerId>,
    /// The feeder's round: the config's runner count when the round began, and the position.
    round: Option<(usize, usize)>,
    /// When the feeder wakes next; `None` while it waits for a free worker or has stopped.
    next_feed: Option<Millis>,
    /// The feeder waits for a free worker to hand this runner to.
    blocked: Option<usize>,
    stopped: bool,
    commands: VecDeque<Command>,
    log: Option<Vec<Decision>>,
    now: Millis,
}

impl Router {
    /// A router whose feeder first wakes at `now`.
    pub fn new(config: RouterConfig, now: Millis) -> Self {
        let n = config.concurrent.max(1);
        Router {
            config,
            counters: FxHashMap::default(),
            workers: vec![Phase::Free; n],
            retiring: 0,
            retired: BTreeSet::new(),
            free: (0..n).collect(),
            round: None,
            next_feed: Some(now),
            blocked: None,
            stopped: false,
            commands: VecDeque::new(),
            log: None,
            now,
        }
    }

    /// Records every input and the commands it produced (memory grows with the run: tests).
    pub fn with_log(mut self) -> Self {
        self.log = Some(Vec::new());
        self
    }

    /// The decision log so far, emptied.
    pub fn take_log(&mut self) -> Vec<Decision> {
        self.log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The settings in force.
    pub fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// Builds held by the runner with this key.
    pub fn builds(&self, key: &str) -> usize {
        self.counters.get(key).map_or(0, |c| c.builds)
    }

    /// Whether the runner with this key would be fed now (health only).
    pub fn is_healthy(&self, key: &str) -> bool {
        let Some(r) = self.config.runners.iter().find(|r| r.key == key) else {
            return true;
        };
        self.counters
            .get(key)
            .is_none_or(|c| c.failures < r.unhealthy_requests_limit.max(1))
    }

    /// Workers holding a runner (in the gates, requesting or running a job).
    pub fn busy_workers(&self) -> usize {
        self.workers
            .iter()
            .filter(|p| !matches!(p, Phase::Free))
            .count()
    }

    /// The next command, if any. Drain after every input.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.commands.pop_front()
    }

    /// When to call [`Router::handle_timeout`] next.
    pub fn poll_timeout(&self) -> Option<Millis> {
        if self.stopped {
            None
        } else {
            self.next_feed
        }
    }

    /// Stops feeding (shutdown): running turns go on to their end.
    pub fn stop(&mut self, now: Millis) {
        let mark = self.begin(now);
        self.stopped = true;
        self.blocked = None;
        self.next_feed = None;
        self.end(mark, Input::Stop);
    }

    /// Replaces the settings (a reload): `concurrent` adds workers at once and retires the
    /// extra ones as they free; the next round reads the new runner list.
    pub fn apply(&mut self, config: RouterConfig, now: Millis) {
        let mark = self.begin(now);
        let n = config.concurrent.max(1);
        let live = self.workers.len() - self.retired.len() - self.retiring;
        if n > live {
            let mut add = n - live;
            // Cancel pending retirements first, then bring retired workers back.
            let keep = add.min(self.retiring);
            self.retiring -= keep;
            add -= keep;
            while add > 0 {
                let Some(w) = self.retired.pop_first() else {
                    break;
                };
                self.free.insert(w);
                add -= 1;
            }
            let start = self.workers.len();
            self.workers.extend(std::iter::repeat_n(Phase::Free, add));
            self.free.extend(start..start + add);
        } else if n < live {
            self.retiring += live - n;
        }
        self.config = config;
        self.retire_free();
        if let Some(runner) = self.blocked {
            if runner >= self.config.runners.len() {
                self.blocked = None;
                self.round = None;
                self.next_feed = Some(now);
            }
        }
        self.feed_blocked(now);
        self.end(mark, Input::Apply);
    }

    /// Hands `runner` to a free worker now, outside the feeder (`drover run-single`'s loop:
    /// one runner, its own pauses). False when no worker is free.
    pub fn hand_out(&mut self, runner: usize, now: Millis) -> bool {
        let mark = self.begin(now);
        let free = self.take_free();
        if let Some(w) = free {
            self.turn(w, runner, now);
        }
        self.end(mark, Input::HandOut(runner));
        free.is_some()
    }

    /// The feeder's timer: hands out the runners that are due.
    pub fn handle_timeout(&mut self, now: Millis) {
        let mark = self.begin(now);
        self.feed(now);
        self.end(mark, Input::Timeout);
    }

    /// The Acquire pass of `worker` ended.
    pub fn acquired(
        &mut self,
        worker: WorkerId,
        result: Acquired,
        now: Millis,
    ) -> Result<(), RouterError> {
        let Some(Phase::Acquiring { runner }) = self.workers.get(worker).cloned() else {
            return Err(self.error(worker, "an Acquire result"));
        };
        let mark = self.begin(now);
        let input = Input::Acquired(worker, result.clone());
        match result {
            Acquired::Refused => {
                if let Some(c) = self.counters_of(runner) {
                    c.requests = c.requests.saturating_sub(1);
                }
                self.slots(runner);
                self.skip(worker, runner, Skip::NoFreeExecutor, now);
            }
            Acquired::Machine(m) => self.request(worker, runner, Some(m)),
            Acquired::NoMachine => self.request(worker, runner, None),
        }
        self.end(mark, input);
        Ok(())
    }

    /// The job request of `worker` was answered.
    pub fn answered(
        &mut self,
        worker: WorkerId,
        answer: Answer,
        now: Millis,
    ) -> Result<(), RouterError> {
        let Some(Phase::Requesting { runner, acquired }) = self.workers.get(worker).cloned() else {
            return Err(self.error(worker, "a request's answer"));
        };
        let mark = self.begin(now);
        let max = self
            .config
            .runners
            .get(runner)
            .map_or(1, |r| r.request_concurrency.max(1)) as f64;
        let factor = match answer {
            Answer::Job => 1.1,
            Answer::NoJob => 0.95,
            Answer::PushedBack => 0.5,
            Answer::Failed | Answer::Forbidden => 1.0,
        };
        if let Some(c) = self.counters_of(runner) {
            c.requests = c.requests.saturating_sub(1);
            c.adaptive = (c.adaptive * factor).clamp(1.0, max);
        }
        self.slots(runner);
        self.health(runner, answer != Answer::Forbidden, now);
        if answer == Answer::Job {
            if let Some(c) = self.counters_of(runner) {
                c.builds += 1;
            }
            if let Some(w) = self.workers.get_mut(worker) {
                *w = Phase::Running {
                    runner,
                    acquired: acquired.clone(),
                };
            }
            self.push(Command::RunJob {
                worker,
                runner,
                acquired,
            });
            let strict = self.config.runners.get(runner).is_none_or(|r| r.strict);
            if !strict && !self.stopped {
                if let Some(next) = self.take_free() {
                    self.turn(next, runner, now);
                }
            }
        } else {
            if let Some(machine) = acquired {
                self.push(Command::Release { runner, machine });
            }
            self.free_worker(worker, now);
        }
        self.end(mark, Input::Answered(worker, answer));
        Ok(())
    }

    /// The job of `worker` ended; `used` is the machine `Use` returned when it is not the one
    /// Acquire reserved (upstream's new data), released first.
    pub fn job_finished(
        &mut self,
        worker: WorkerId,
        used: Option<String>,
        now: Millis,
    ) -> Result<(), RouterError> {
        let Some(Phase::Running { runner, acquired }) = self.workers.get(worker).cloned() else {
            return Err(self.error(worker, "a job's end"));
        };
        let mark = self.begin(now);
        if let Some(c) = self.counters_of(runner) {
            c.builds = c.builds.saturating_sub(1);
        }
        if let Some(machine) = used.clone().filter(|u| acquired.as_ref() != Some(u)) {
            self.push(Command::Release { runner, machine });
        }
        if let Some(machine) = acquired {
            self.push(Command::Release { runner, machine });
        }
        self.free_worker(worker, now);
        self.end(mark, Input::JobFinished(worker, used));
        Ok(())
    }

    fn error(&self, worker: WorkerId, input: &'static str) -> RouterError {
        let phase = match self.workers.get(worker) {
            None => "not a worker",
            Some(Phase::Free) => "free",
            Some(Phase::Acquiring { .. }) => "acquiring",
            Some(Phase::Requesting { .. }) => "requesting",
            Some(Phase::Running { .. }) => "running a job",
        };
        RouterError {
            worker,
            input,
            phase,
        }
    }

    fn begin(&mut self, now: Millis) -> usize {
        self.now = self.now.max(now);
        self.commands.len()
    }

    fn end(&mut self, mark: usize, input: Input) {
        if let Some(log) = &mut self.log {
            let commands = self.commands.iter().skip(mark).cloned().collect();
            log.push(Decision {
                at: self.now,
                input,
                commands,
            });
        }
    }

    fn push(&mut self, c: Command) {
        self.commands.push_back(c);
    }

    fn counters_of(&mut self, runner: usize) -> Option<&mut Counters> {
        let key = &self.config.runners.get(runner)?.key;
        if !self.counters.contains_key(key.as_str()) {
            // The key is copied once, when the runner is first seen (not on every access).
            let fresh = Counters {
                builds: 0,
                requests: 0,
                adaptive: 1.0,
                failures: 0,
                last_healthy: self.now,
            };
            self.counters.insert(key.clone(), fresh);
        }
        self.counters.get_mut(key.as_str())
    }

    fn slots(&mut self, runner: usize) {
        let max = self
            .config
            .runners
            .get(runner)
            .map_or(1, |r| r.request_concurrency.max(1));
        if let Some(c) = self.counters_of(runner) {
            let (adaptive, in_flight) = (c.adaptive, c.requests);
            self.push(Command::RequestSlots {
                runner,
                max,
                adaptive: AdaptiveValue(adaptive.to_bits()),
                in_flight,
            });
        }
    }

    /// A request ended (or an executor was unknown): `ok` resets the failure count.
    fn health(&mut self, runner: usize, ok: bool, now: Millis) {
        let limit = self
            .config
            .runners
            .get(runner)
            .map_or(DEFAULT_UNHEALTHY_REQUESTS_LIMIT, |r| {
                r.unhealthy_requests_limit.max(1)
            });
        let Some(c) = self.counters_of(runner) else {
            return;
        };
        if ok {
            c.failures = 0;
            c.last_healthy = now;
            return;
        }
        c.failures += 1;
        let failures = c.failures;
        if failures >= limit {
            self.push(Command::Unhealthy { runner, failures });
        }
    }

    /// The feeder's health check (upstream's `isHealthy`): may force an attempt.
    fn feedable(&mut self, runner: usize, now: Millis) -> bool {
        let Some(r) = self.config.runners.get(runner) else {
            return false;
        };
        if !r.has_token {
            return false;
        }
        let (limit, interval) = (r.unhealthy_requests_limit.max(1), r.unhealthy_interval);
        let Some(c) = self.counters_of(runner) else {
            return false;
        };
        if c.failures < limit {
            return true;
        }
        if now.saturating_sub(c.last_healthy) >= interval {
            let failures = c.failures;
            c.failures = 0;
            c.last_healthy = now;
            self.push(Command::ForcedCheck { runner, failures });
            return true;
        }
        false
    }

    fn take_free(&mut self) -> Option<WorkerId> {
        let w = self.free.pop_first()?;
        Some(w)
    }

    /// Runs the feeder while it is due.
    fn feed(&mut self, now: Millis) {
        while !self.stopped && self.blocked.is_none() {
            match self.next_feed {
                Some(t) if t <= now => {}
                _ => return,
            }
            let (count, pos) = match self.round {
                Some(r) => r,
                None => {
                    let n = self.config.runners.len();
                    if n == 0 {
                        self.next_feed = Some(now + self.config.check_interval.max(1));
                        continue;
                    }
                    (n, 0)
                }
            };
            let step = (self.config.check_interval.max(1) / count as Millis).max(1);
            let next_round = if pos + 1 >= count {
                None
            } else {
                Some((count, pos + 1))
            };
            if pos >= self.config.runners.len() || !self.feedable(pos, now) {
                // Skipped entries still take their share of the interval.
                if pos < self.config.runners.len() {
                    self.push(Command::FeedSkipped { runner: pos });
                }
                self.round = next_round;
                self.next_feed = Some(now + step);
                continue;
            }
            match self.take_free() {
                Some(w) => {
                    self.round = next_round;
                    self.push(Command::Fed {
                        worker: w,
                        runner: pos,
                    });
                    self.turn(w, pos, now);
                    self.next_feed = Some(now + step);
                }
                None => {
                    self.round = Some((count, pos));
                    self.blocked = Some(pos);
                    self.next_feed = None;
                }
            }
        }
    }

    /// A worker freed: a blocked feeder hands its runner out at once.
    fn feed_blocked(&mut self, now: Millis) {
        let Some(runner) = self.blocked else {
            return;
        };
        if self.stopped {
            return;
        }
        let Some(w) = self.take_free() else {
            return;
        };
        self.blocked = None;
        let count = self.round.map_or(1, |(c, _)| c);
        let step = (self.config.check_interval.max(1) / count.max(1) as Millis).max(1);
        self.round = self
            .round
            .and_then(|(c, p)| (p + 1 < c).then_some((c, p + 1)));
        self.push(Command::Fed { worker: w, runner });
        self.turn(w, runner, now);
        self.next_feed = Some(now + step);
        // Anything already due is handed out when the driver next calls handle_timeout.
    }

    /// One worker turn for `runner` (upstream's processRunner): the gates, then Acquire or the
    /// request.
    fn turn(&mut self, worker: WorkerId, runner: usize, now: Millis) {
        let Some(r) = self.config.runners.get(runner) else {
            self.free_worker(worker, now);
            return;
        };
        let (executor, limit, adaptive) = (r.executor, r.limit, r.adaptive);
        let max = r.request_concurrency.max(1);
        if executor == ExecutorKind::Unsupported {
            self.push(Command::UnsupportedExecutor { runner });
            self.health(runner, false, now);
            self.free_worker(worker, now);
            return;
        }
        let Some(c) = self.counters_of(runner) else {
            return;
        };
        if limit > 0 && c.builds >= limit {
            self.skip(worker, runner, Skip::Limit, now);
            return;
        }
        let effective = if adaptive {
            (c.adaptive.ceil() as usize).clamp(1, max)
        } else {
            max
        };
        if c.requests >= effective {
            self.slots(runner);
            self.skip(worker, runner, Skip::RequestConcurrency, now);
            return;
        }
        c.requests += 1;
        self.slots(runner);
        if executor == ExecutorKind::Machine {
            if let Some(w) = self.workers.get_mut(worker) {
                *w = Phase::Acquiring { runner };
            }
            self.push(Command::Acquire { worker, runner });
        } else {
            self.request(worker, runner, None);
        }
    }

    /// The turn ends without a request.
    fn skip(&mut self, worker: WorkerId, runner: usize, why: Skip, now: Millis) {
        self.push(Command::Skipped {
            worker,
            runner,
            why,
        });
        self.free_worker(worker, now);
    }

    fn request(&mut self, worker: WorkerId, runner: usize, acquired: Option<String>) {
        if let Some(w) = self.workers.get_mut(worker) {
            *w = Phase::Requesting { runner, acquired };
        }
        self.push(Command::Request { worker, runner });
    }

    fn free_worker(&mut self, worker: WorkerId, now: Millis) {
        if let Some(w) = self.workers.get_mut(worker) {
            *w = Phase::Free;
        }
        self.free.insert(worker);
        self.push(Command::WorkerFree { worker });
        self.retire_free();
        self.feed_blocked(now);
    }

    /// Retires free workers while a reload left more than `concurrent` (highest first).
    fn retire_free(&mut self) {
        while self.retiring > 0 {
            let Some(&w) = self.free.last() else {
                return;
            };
            self.free.remove(&w);
            self.retiring -= 1;
            // The index stays: busy workers above it still report by their ids.
            self.retired.insert(w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runner(key: &str, executor: ExecutorKind) -> RunnerSettings {
        RunnerSettings {
            key: key.into(),
            has_token: true,
            executor,
            limit: 0,
            request_concurrency: 1,
            adaptive: true,
            strict: false,
            unhealthy_requests_limit: DEFAULT_UNHEALTHY_REQUESTS_LIMIT,
            unhealthy_interval: DEFAULT_UNHEALTHY_INTERVAL_MS,
        }
    }

    fn router(concurrent: usize, runners: Vec<RunnerSettings>) -> Router {
        Router::new(
            RouterConfig {
                concurrent,
                check_interval: 3_000,
                runners,
            },
            0,
        )
    }

    /// A router of `concurrent` workers and one runner, fed once at 0 (commands drained).
    fn fed_once(concurrent: usize, runner: RunnerSettings) -> Router {
        let mut r = router(concurrent, vec![runner]);
        r.handle_timeout(0);
        drain(&mut r);
        r
    }

    /// The feeder hands a docker runner to a worker, which requests a job.
    fn handed_out(worker: WorkerId, runner: usize) -> Vec<Command> {
        vec![
            Command::Fed { worker, runner },
            Command::Request { worker, runner },
        ]
    }

    /// The feeder's turn at `t` hands runner 0 to worker 0, which runs an Acquire pass.
    fn feeds_an_acquire(r: &mut Router, t: Millis) {
        r.handle_timeout(t);
        let got = drain(r);
        let acquire = Command::Acquire {
            worker: 0,
            runner: 0,
        };
        assert!(got.contains(&acquire), "{got:?}");
    }

    /// The commands since the last call, without the gauges.
    fn drain(r: &mut Router) -> Vec<Command> {
        std::iter::from_fn(|| r.poll_command())
            .filter(|c| !matches!(c, Command::RequestSlots { .. }))
            .collect()
    }

    #[test]
    fn the_feeder_staggers_every_entry_and_skips_the_tokenless_ones_in_their_turn() {
        let mut tokenless = runner("b", ExecutorKind::Docker);
        tokenless.has_token = false;
        let mut r = router(
            4,
            vec![
                runner("a", ExecutorKind::Docker),
                tokenless,
                runner("c", ExecutorKind::Docker),
            ],
        );
        r.handle_timeout(0);
        assert_eq!(drain(&mut r), handed_out(0, 0));
        // check_interval / 3 runners (all entries count, as upstream).
        assert_eq!(r.poll_timeout(), Some(1_000));
        r.handle_timeout(1_000);
        assert_eq!(drain(&mut r), [Command::FeedSkipped { runner: 1 }]);
        assert_eq!(r.poll_timeout(), Some(2_000));
        r.handle_timeout(2_000);
        assert!(matches!(
            drain(&mut r).first(),
            Some(Command::Fed { runner: 2, .. })
        ));
        // A new round starts with the first entry.
        r.handle_timeout(3_000);
        assert!(matches!(
            drain(&mut r).first(),
            Some(Command::Fed { runner: 0, .. })
        ));
    }

    #[test]
    fn the_feeder_waits_for_a_free_worker_and_hands_the_runner_out_when_one_frees() {
        let mut r = fed_once(1, runner("a", ExecutorKind::Docker));
        r.handle_timeout(3_000);
        assert_eq!(drain(&mut r), []);
        assert_eq!(r.poll_timeout(), None, "blocked on the unbuffered channel");
        r.answered(0, Answer::NoJob, 4_500).expect("requesting");
        assert_eq!(
            drain(&mut r),
            [vec![Command::WorkerFree { worker: 0 }], handed_out(0, 0)].concat()
        );
        assert_eq!(
            r.poll_timeout(),
            Some(7_500),
            "the sleep follows the hand-out"
        );
    }

    #[test]
    fn a_job_requeues_the_runner_on_the_lowest_free_worker_unless_strict() {
        for (strict, requeued) in [(false, true), (true, false)] {
            let mut a = runner("a", ExecutorKind::Docker);
            a.strict = strict;
            a.request_concurrency = 2;
            let mut r = fed_once(3, a);
            r.answered(0, Answer::Job, 100).expect("requesting");
            let got = drain(&mut r);
            assert_eq!(
                got.contains(&Command::Request {
                    worker: 1,
                    runner: 0
                }),
                requeued,
                "strict {strict}: {got:?}"
            );
            assert!(got.contains(&Command::RunJob {
                worker: 0,
                runner: 0,
                acquired: None
            }));
        }
    }

    #[test]
    fn limit_and_request_concurrency_gate_the_request() {
        let mut a = runner("a", ExecutorKind::Docker);
        a.limit = 1;
        a.request_concurrency = 3;
        let mut r = fed_once(3, a);
        // Adaptive starts at 1: the re-queue after this job is refused by `limit` first.
        r.answered(0, Answer::Job, 10).expect("requesting");
        let got = drain(&mut r);
        assert!(
            got.contains(&Command::Skipped {
                worker: 1,
                runner: 0,
                why: Skip::Limit
            }),
            "{got:?}"
        );
        r.job_finished(0, None, 20).expect("running");
        // Two requests in flight with adaptive 1.1 → ceil 2: the third is refused.
        let mut b = runner("b", ExecutorKind::Docker);
        b.request_concurrency = 3;
        let mut r = fed_once(3, b);
        r.answered(0, Answer::Job, 10).expect("requesting");
        drain(&mut r); // re-queued on worker 1 (1.1 → 2 slots)
        r.answered(1, Answer::Job, 20).expect("requesting");
        let got = drain(&mut r);
        // 1.21 → 2 slots, worker 1's request ended: worker 2 requests.
        assert!(got.contains(&Command::Request {
            worker: 2,
            runner: 0
        }));
        let mut c = runner("c", ExecutorKind::Docker);
        c.request_concurrency = 3;
        c.adaptive = false;
        let mut r = router(5, vec![c]);
        r.handle_timeout(0);
        r.handle_timeout(1_000_000);
        r.handle_timeout(2_000_000);
        r.handle_timeout(3_000_000);
        let skipped = drain(&mut r)
            .into_iter()
            .filter(|c| {
                matches!(
                    c,
                    Command::Skipped {
                        why: Skip::RequestConcurrency,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(skipped, 1, "3 requests in flight without the adaptive rule");
    }

    #[test]
    fn adaptive_value_follows_the_answers() {
        let cases: [(&[Answer], f64); 4] = [
            (&[Answer::Job], 1.1),
            (&[Answer::Job, Answer::Job], 1.1 * 1.1),
            (&[Answer::Job, Answer::NoJob], 1.1 * 0.95),
            (&[Answer::Job, Answer::PushedBack], 1.0),
        ];
        for (answers, want) in cases {
            let mut a = runner("a", ExecutorKind::Docker);
            a.request_concurrency = 5;
            a.strict = true;
            let mut r = router(1, vec![a]);
            let mut t = 0;
            let mut got = 0.0;
            for ans in answers {
                r.handle_timeout(t);
                r.answered(0, *ans, t + 1).expect("requesting");
                for c in std::iter::from_fn(|| r.poll_command()) {
                    if let Command::RequestSlots { adaptive, .. } = c {
                        got = adaptive.get();
                    }
                }
                if *ans == Answer::Job {
                    r.job_finished(0, None, t + 2).expect("running");
                    drain(&mut r);
                }
                t += 3_000;
            }
            assert!((got - want).abs() < 1e-9, "{answers:?}: {got} != {want}");
        }
    }

    #[test]
    fn forbidden_answers_make_a_runner_unhealthy_until_its_interval_then_one_forced_check() {
        let mut a = runner("a", ExecutorKind::Docker);
        a.unhealthy_requests_limit = 2;
        a.unhealthy_interval = 10_000;
        a.strict = true;
        let mut r = router(1, vec![a]);
        let feed = |r: &mut Router, t: Millis| {
            r.handle_timeout(t);
            drain(r)
        };
        feed(&mut r, 0);
        r.answered(0, Answer::Forbidden, 1).expect("requesting");
        feed(&mut r, 3_000);
        r.answered(0, Answer::Forbidden, 3_001).expect("requesting");
        assert!(drain(&mut r).contains(&Command::Unhealthy {
            runner: 0,
            failures: 2
        }));
        assert_eq!(feed(&mut r, 6_000), [Command::FeedSkipped { runner: 0 }]);
        assert_eq!(feed(&mut r, 9_000), [Command::FeedSkipped { runner: 0 }]);
        // Healthy last at 1 (the first answer reset nothing: it was at 0, the creation).
        let forced = feed(&mut r, 12_000);
        assert_eq!(
            forced.first(),
            Some(&Command::ForcedCheck {
                runner: 0,
                failures: 2
            })
        );
        // A network error resets the count.
        r.answered(0, Answer::Failed, 12_001).expect("requesting");
        drain(&mut r);
        assert!(r.is_healthy("a"));
    }

    #[test]
    fn an_unknown_executor_counts_a_failure_and_makes_no_request() {
        let mut a = runner("a", ExecutorKind::Unsupported);
        a.unhealthy_requests_limit = 1;
        let mut r = router(1, vec![a]);
        r.handle_timeout(0);
        let got = drain(&mut r);
        assert!(got.contains(&Command::UnsupportedExecutor { runner: 0 }));
        assert!(!got.iter().any(|c| matches!(c, Command::Request { .. })));
        assert!(!r.is_healthy("a"));
    }

    #[test]
    fn machine_runners_acquire_first_and_release_after_the_job_or_an_empty_answer() {
        let mut m = runner("m", ExecutorKind::Machine);
        m.strict = true;
        let mut r = router(2, vec![m]);
        r.handle_timeout(0);
        assert!(drain(&mut r).contains(&Command::Acquire {
            worker: 0,
            runner: 0
        }));
        r.acquired(0, Acquired::Machine("m-1".into()), 5)
            .expect("acquiring");
        assert!(drain(&mut r).contains(&Command::Request {
            worker: 0,
            runner: 0
        }));
        r.answered(0, Answer::NoJob, 10).expect("requesting");
        assert!(drain(&mut r).contains(&Command::Release {
            runner: 0,
            machine: "m-1".into()
        }));
        // A job: Use's machine first, then the acquired one; the same machine once.
        feeds_an_acquire(&mut r, 3_000);
        r.acquired(0, Acquired::Machine("m-1".into()), 3_005)
            .expect("acquiring");
        r.answered(0, Answer::Job, 3_010).expect("requesting");
        drain(&mut r);
        r.job_finished(0, Some("m-2".into()), 4_000)
            .expect("running");
        let releases: Vec<Command> = drain(&mut r)
            .into_iter()
            .filter(|c| matches!(c, Command::Release { .. }))
            .collect();
        assert_eq!(
            releases,
            [
                Command::Release {
                    runner: 0,
                    machine: "m-2".into()
                },
                Command::Release {
                    runner: 0,
                    machine: "m-1".into()
                }
            ]
        );
        // A refusal gives the request slot back and makes no request.
        feeds_an_acquire(&mut r, 6_000);
        r.acquired(0, Acquired::Refused, 6_005).expect("acquiring");
        let got = drain(&mut r);
        assert!(got.contains(&Command::Skipped {
            worker: 0,
            runner: 0,
            why: Skip::NoFreeExecutor
        }));
        assert!(!got.iter().any(|c| matches!(c, Command::Request { .. })));
        assert_eq!(
            r.answered(0, Answer::Job, 6_010),
            Err(RouterError {
                worker: 0,
                input: "a request's answer",
                phase: "free"
            })
        );
    }

    #[test]
    fn a_reload_resizes_the_workers_and_retires_busy_ones_when_they_free() {
        let mut a = runner("a", ExecutorKind::Docker);
        a.request_concurrency = 5;
        a.adaptive = false;
        let mut r = router(2, vec![a]);
        r.handle_timeout(0);
        r.handle_timeout(3_000);
        drain(&mut r);
        assert_eq!(r.busy_workers(), 2);
        let mut config = r.config().clone();
        config.concurrent = 1;
        r.apply(config.clone(), 3_500);
        r.answered(1, Answer::NoJob, 4_000).expect("requesting");
        r.answered(0, Answer::NoJob, 4_100).expect("requesting");
        drain(&mut r);
        // Only one worker is handed out from now on.
        r.handle_timeout(6_000);
        r.handle_timeout(9_000);
        let fed: Vec<Command> = drain(&mut r)
            .into_iter()
            .filter(|c| matches!(c, Command::Fed { .. }))
            .collect();
        assert_eq!(
            fed,
            [Command::Fed {
                worker: 0,
                runner: 0
            }]
        );
        config.concurrent = 3;
        r.apply(config, 9_500);
        assert_eq!(
            drain(&mut r),
            handed_out(1, 0),
            "the blocked feeder hands out at once, on the worker retired before"
        );
    }
}
