//! The simulator's side of the job router ([`crate::engine::router`]): the one loop that gives
//! the router an input and answers its commands in virtual time, shared by the simulation
//! ([`crate::sim::Simulation`]) and by [`replay`], which feeds the router scripted GitLab
//! answers (the equivalence test runs the same script through `drover run`'s driver).
//!
//! Commands are answered depth-first, as nested calls would be: an input given while a
//! command is being answered (a request answered at once, a job that fails at once) has its
//! commands answered before the rest of the batch. Then the feeder's timer is armed at
//! [`Router::poll_timeout`].

use std::collections::{HashMap, VecDeque};

use super::queue::{EventQueue, SimTime};
use crate::engine::router::{
    Acquired, Answer, Command, Decision, Router, RouterConfig, RouterError, WorkerId,
};

/// The router and the state of its driver.
#[derive(Debug)]
pub(crate) struct Routing {
    pub(crate) router: Router,
    /// Commands not answered yet.
    queue: VecDeque<Command>,
    /// Whether commands are being answered (inputs given meanwhile queue theirs first).
    busy: bool,
    /// When the feeder's timer is armed.
    pub(crate) feed_at: Option<SimTime>,
}

impl Routing {
    /// A router whose feeder wakes first at 0 (the driver schedules that wake-up).
    pub(crate) fn new(router: Router) -> Self {
        Routing {
            router,
            queue: VecDeque::new(),
            busy: false,
            feed_at: Some(0),
        }
    }
}

/// A driver of the router in virtual time.
pub(crate) trait Routed {
    /// The router and its driver state.
    fn routing(&mut self) -> &mut Routing;
    /// Answers one command (perhaps calling [`route`] with its result).
    fn answer(&mut self, command: Command);
    /// Schedules the feeder's wake-up at `at`.
    fn arm_feed(&mut self, at: SimTime);
}

/// Gives the router an input and answers its commands (see the module docs).
pub(crate) fn route<T: Routed>(
    t: &mut T,
    input: impl FnOnce(&mut Router) -> Result<(), RouterError>,
) {
    let routing = t.routing();
    if let Err(e) = input(&mut routing.router) {
        tracing::warn!("simulation: {e}");
    }
    let mut fresh = Vec::new();
    while let Some(c) = routing.router.poll_command() {
        fresh.push(c);
    }
    for c in fresh.into_iter().rev() {
        routing.queue.push_front(c);
    }
    if routing.busy {
        return;
    }
    routing.busy = true;
    while let Some(c) = t.routing().queue.pop_front() {
        t.answer(c);
    }
    let routing = t.routing();
    routing.busy = false;
    if let Some(at) = routing.router.poll_timeout() {
        if routing.feed_at != Some(at) {
            routing.feed_at = Some(at);
            t.arm_feed(at);
        }
    }
}

/// GitLab's scripted answers for [`replay`] (and the equivalence test's `drover run` side).
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// Per runner (index in the config), the answers to its job requests in order; an
    /// exhausted list answers [`Answer::NoJob`].
    pub answers: Vec<Vec<Answer>>,
    /// How long each job request takes, in milliseconds.
    pub request_ms: SimTime,
    /// How long jobs run, in milliseconds: the `n`-th answer to runner `r`, if a job, runs
    /// `job_ms[(r + n) % len]` (0 if empty).
    pub job_ms: Vec<SimTime>,
    /// Runs until this instant.
    pub until: SimTime,
    /// Per runner, what its Acquire passes answer, in order (the machine pool's side of the
    /// script); a runner without answers left is refused, as with no pool at all.
    pub acquired: Vec<Vec<Acquired>>,
}

impl Script {
    /// The next answer for `runner` and, if it is a job, how long the job runs; `asked`
    /// counts the answers given per runner.
    pub fn next_answer(
        &self,
        runner: usize,
        asked: &mut HashMap<usize, usize>,
    ) -> (Answer, SimTime) {
        let (a, n) = next_in(&self.answers, runner, asked);
        let d = match self.job_ms.len() {
            0 => 0,
            len => self.job_ms[(runner + n) % len],
        };
        (a.unwrap_or(Answer::NoJob), d)
    }

    /// The next Acquire answer for `runner`; `passes` counts the passes run per runner.
    pub fn next_acquired(&self, runner: usize, passes: &mut HashMap<usize, usize>) -> Acquired {
        next_in(&self.acquired, runner, passes)
            .0
            .unwrap_or(Acquired::Refused)
    }
}

/// The entry of `runner`'s list at its count in `counts` (none past the end), with that
/// count, which then grows by one.
fn next_in<T: Clone>(
    lists: &[Vec<T>],
    runner: usize,
    counts: &mut HashMap<usize, usize>,
) -> (Option<T>, usize) {
    let n = counts.entry(runner).or_default();
    let at = *n;
    *n += 1;
    (lists.get(runner).and_then(|l| l.get(at)).cloned(), at)
}

#[derive(Debug)]
enum ReplayEv {
    Feed,
    Answer(WorkerId, Answer, SimTime),
    JobDone(WorkerId),
}

struct Replay<'a> {
    routing: Routing,
    events: EventQueue<ReplayEv>,
    script: &'a Script,
    asked: HashMap<usize, usize>,
    /// Acquire passes run per runner.
    passes: HashMap<usize, usize>,
    /// The duration of the job each worker received.
    received: HashMap<WorkerId, SimTime>,
}

impl Routed for Replay<'_> {
    fn routing(&mut self) -> &mut Routing {
        &mut self.routing
    }

    fn answer(&mut self, command: Command) {
        let now = self.events.now();
        match command {
            // The pass ends at once with the script's answer (refused once it has none).
            Command::Acquire { worker, runner } => {
                let a = self.script.next_acquired(runner, &mut self.passes);
                route(self, |r| r.acquired(worker, a, now));
            }
            Command::Request { worker, runner } => {
                let (answer, d) = self.script.next_answer(runner, &mut self.asked);
                self.events
                    .schedule_in(self.script.request_ms, ReplayEv::Answer(worker, answer, d));
            }
            Command::RunJob { worker, .. } => {
                let d = self.received.remove(&worker).unwrap_or_default();
                self.events.schedule_in(d, ReplayEv::JobDone(worker));
            }
            _ => {}
        }
    }

    fn arm_feed(&mut self, at: SimTime) {
        self.events
            .schedule(at.max(self.events.now()), ReplayEv::Feed);
    }
}

/// Feeds the router `config` the scripted answers in virtual time until `script.until` and
/// returns its decision log. Machine runners' Acquire passes answer what the script says.
pub fn replay(config: RouterConfig, script: &Script) -> Vec<Decision> {
    let mut r = Replay {
        routing: Routing::new(Router::new(config, 0).with_log()),
        events: EventQueue::new(),
        script,
        asked: HashMap::new(),
        passes: HashMap::new(),
        received: HashMap::new(),
    };
    r.events.schedule(0, ReplayEv::Feed);
    while let Some(at) = r.events.peek_time() {
        if at > script.until {
            break;
        }
        let Some((at, ev)) = r.events.pop() else {
            break;
        };
        match ev {
            ReplayEv::Feed => {
                r.routing.feed_at = None;
                route(&mut r, |x| {
                    x.handle_timeout(at);
                    Ok(())
                });
            }
            ReplayEv::Answer(w, a, d) => {
                r.received.insert(w, d);
                route(&mut r, |x| x.answered(w, a, at));
            }
            ReplayEv::JobDone(w) => route(&mut r, |x| x.job_finished(w, None, at)),
        }
    }
    r.routing.router.take_log()
}
