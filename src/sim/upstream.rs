//! `drover compare -c config.toml --upstream-log runner.log…`: upstream as its log shows it
//! against drover on the same config and the same jobs.
//!
//! * **Decision by decision**: the log is replayed ([`crate::upstream_log::Replay`]); at each
//!   upstream creation and removal the rebuilt pool goes through the same path as
//!   `drover autoscale decide` ([`super::decide::prepare`]) into drover's engine, which
//!   says what it would do on exactly that state. Nothing here decides: every verdict
//!   compares what the engine returned with what the log says.
//! * **As a whole**: the jobs' queue-entry times and machine times go through the simulator
//!   with creation times drawn from the ones upstream observed, and both sides' figures are
//!   set side by side (and plotted).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::{json, Value};

use super::decide::{self, StateFile, StateMachine};
use super::provider::{Latency, ProviderModel};
use super::queue::SimTime;
use super::report::Summary;
use super::trace::{Counts, JobOutcome, Trace};
use super::workload::{Job, SubmittedAt, Workload};
use super::Scenario;
use crate::config::{Config, RunnerConfig};
use crate::engine::{explain, naming, AcquireResult, Engine, MachineState, Notice, Reason};
use crate::upstream_log::rebuild::{name_second, PoolCounts, UpJob};
use crate::upstream_log::{
    self, Collector, DecisionKind, DecisionPoint, PoolMachine, PoolState, ReadOptions, Replay,
    Stats,
};

/// How long after a creation's name second its first docker-machine line may come before the
/// creation counts as queued (by `MaxGrowthRate`): then the state it was decided on is gone.
const QUEUED_AFTER_SECS: i64 = 2;
/// Removals drover decides that upstream made within this many seconds count as upstream's.
const SAME_PASS_SECS: i64 = 2;

/// drover's verdict on one upstream decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// drover decides the same (same machine and reason; for creations: it creates too).
    Same,
    /// drover decides something else about the machine (another reason).
    Different,
    /// drover would not make this decision on that state.
    None,
    /// The log cannot tell (spec §5.2): not counted either way.
    Ambiguous,
}

/// One compared decision.
#[derive(Debug, Clone, Serialize)]
pub struct DecisionRow {
    /// When upstream's decision shows in the log.
    pub at: DateTime<Utc>,
    /// Creation or removal.
    pub kind: DecisionKind,
    /// The machine.
    pub machine: String,
    /// The `[[runners]]` entry it belongs to, if the config has one.
    pub runner: Option<String>,
    /// Upstream's reason (removals; for creations, the cause as inferred).
    pub upstream_reason: Option<String>,
    /// drover's verdict (`None` for decisions only drover makes).
    pub drover: Option<Verdict>,
    /// drover's reason, when it decides something.
    pub drover_reason: Option<String>,
    /// drover's explanation, one sentence.
    pub explanation: String,
    /// The log line of upstream's decision.
    pub line: u64,
}

/// The config's autoscaled runners with their machine filters.
struct Runners<'c> {
    list: Vec<(&'c RunnerConfig, String, String)>,
}

impl<'c> Runners<'c> {
    fn new(config: &'c Config) -> Runners<'c> {
        let list = config
            .runners
            .iter()
            .filter(|r| r.machine.is_some())
            .map(|r| {
                let mn = r
                    .machine
                    .as_ref()
                    .map(|m| m.machine_name.clone())
                    .unwrap_or_default();
                (
                    r,
                    naming::machine_filter(&r.token, &mn),
                    naming::short_token(&r.token).to_string(),
                )
            })
            .collect();
        Runners { list }
    }

    fn of_machine(&self, name: &str) -> Option<&(&'c RunnerConfig, String, String)> {
        self.list
            .iter()
            .find(|(_, f, _)| naming::matches_filter(name, f))
    }

    /// The runner name for a job's short token (or its logged runner name).
    fn of_job(&self, j: &UpJob) -> Option<String> {
        if let Some(n) = &j.runner_name {
            if self.list.iter().any(|(r, _, _)| &r.name == n) {
                return Some(n.clone());
            }
        }
        self.list
            .iter()
            .find(|(_, _, t)| !j.runner.is_empty() && t == &j.runner)
            .map(|(r, _, _)| r.name.clone())
    }
}

fn engine_state(s: PoolState) -> MachineState {
    match s {
        PoolState::Idle => MachineState::Idle,
        PoolState::Acquired => MachineState::Acquired,
        PoolState::Creating => MachineState::Creating,
        PoolState::Used => MachineState::Used,
        PoolState::Removing => MachineState::Removing,
    }
}

fn state_file(pool: &[PoolMachine], filter: &str) -> StateFile {
    StateFile {
        machines: pool
            .iter()
            .filter(|m| naming::matches_filter(&m.name, filter))
            .map(|m| StateMachine {
                name: m.name.clone(),
                state: Some(engine_state(m.state)),
                used_count: m.used_count,
                last_used: Some(m.last_used),
                retry_count: m.retry_count,
                on_disk: m.on_disk,
                reachable: true,
            })
            .collect(),
    }
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// The judge: asks the engine at each upstream decision.
struct Judge<'c> {
    config: &'c Config,
    runners: Runners<'c>,
    collected: &'c Collector,
    rows: Vec<DecisionRow>,
    drover_only: Vec<DecisionRow>,
    drover_only_seen: HashSet<String>,
    /// (runner, second) passes whose creations were already compared.
    creation_passes_seen: HashSet<(String, i64)>,
    failed_create_removes: Option<bool>,
    errors: Vec<String>,
}

struct Answer {
    verdict: Verdict,
    reason: Option<String>,
    explanation: String,
}

impl<'c> Judge<'c> {
    fn judge(&mut self, p: &DecisionPoint) {
        let Some((rc, filter, token)) = self.runners.of_machine(&p.machine).cloned() else {
            self.push(
                p,
                None,
                Answer {
                    verdict: Verdict::Ambiguous,
                    reason: None,
                    explanation: "the machine matches no [[runners]] MachineName filter of this \
                                  config: is it the config that was in force?"
                        .into(),
                },
            );
            return;
        };
        let unconfirmed = p
            .pool
            .iter()
            .filter(|m| !m.confirmed && naming::matches_filter(&m.name, &filter))
            .count();
        let answer = match p.kind {
            DecisionKind::Remove => self.judge_removal(p, rc, &filter),
            DecisionKind::Create => self.judge_creation(p, rc, &filter, &token),
        };
        let answer = match answer {
            Ok(a) if unconfirmed > 0 && a.verdict != Verdict::Ambiguous => Answer {
                verdict: Verdict::Ambiguous,
                explanation: format!(
                    "{unconfirmed} machine(s) from before the log are in the pool and no line has \
                     shown their state yet (drover alone: {})",
                    a.explanation
                ),
                ..a
            },
            Ok(a) => a,
            Err(e) => {
                if self.errors.len() < 10 {
                    self.errors.push(format!("{e:#}"));
                }
                Answer {
                    verdict: Verdict::Ambiguous,
                    reason: None,
                    explanation: format!("drover could not evaluate this state: {e:#}"),
                }
            }
        };
        self.push(p, Some(rc.name.clone()), answer);
    }

    fn push(&mut self, p: &DecisionPoint, runner: Option<String>, a: Answer) {
        let upstream_reason = match p.kind {
            DecisionKind::Remove => Some(p.reason.clone()),
            DecisionKind::Create => None,
        };
        self.rows.push(DecisionRow {
            at: p.at,
            kind: p.kind,
            machine: p.machine.clone(),
            runner,
            upstream_reason,
            drover: Some(a.verdict),
            drover_reason: a.reason,
            explanation: a.explanation,
            line: p.line,
        });
    }

    fn judge_removal(
        &mut self,
        p: &DecisionPoint,
        rc: &RunnerConfig,
        filter: &str,
    ) -> anyhow::Result<Answer> {
        let pass_reasons = [
            Reason::TooManyBuilds,
            Reason::TooManyMachines,
            Reason::TooManyIdleMachines,
        ];
        if pass_reasons.iter().any(|r| r.as_str() == p.reason) {
            let state = state_file(&p.pool, filter);
            let d = decide::decide(self.config, Some(&rc.name), &state, p.at)?;
            let report = &d.outcome.report;
            self.note_drover_only(p, rc, report);
            self.note_drover_only_creations(p.at, p.line, rc, filter, report);
            return Ok(match report.removals.iter().find(|r| r.name == p.machine) {
                Some(r) if r.reason.as_str() == p.reason => Answer {
                    verdict: Verdict::Same,
                    reason: Some(r.reason.to_string()),
                    explanation: explain::removal_sentence(r, report),
                },
                Some(r) => Answer {
                    verdict: Verdict::Different,
                    reason: Some(r.reason.to_string()),
                    explanation: explain::removal_sentence(r, report),
                },
                None => Answer {
                    verdict: Verdict::None,
                    reason: None,
                    explanation: format!(
                        "drover keeps {} on this state: {}",
                        p.machine,
                        keep_sentence(&p.machine, &p.pool, &d)
                    ),
                },
            });
        }
        if p.reason == Reason::ReleaseTooManyBuilds.as_str() {
            // Release: the machine as it was when its job ended (Used), then the engine's
            // release.
            let mut pool = p.pool.clone();
            let mut count = 0;
            for m in pool.iter_mut().filter(|m| m.name == p.machine) {
                m.state = PoolState::Used;
                count = m.used_count;
            }
            let state = state_file(&pool, filter);
            let mut prep = decide::prepare(self.config, Some(&rc.name), &state, p.at)?;
            prep.engine.release(prep.runner, &p.machine, p.at)?;
            let removing = prep
                .engine
                .machine(&p.machine)
                .is_some_and(|m| m.state == MachineState::Removing);
            let max_builds = rc.machine.as_ref().map_or(0, |m| m.max_builds);
            return Ok(if removing {
                Answer {
                    verdict: Verdict::Same,
                    reason: Some(Reason::ReleaseTooManyBuilds.to_string()),
                    explanation: format!(
                        "released {} after {count} builds >= MaxBuilds {max_builds} (Too many builds)",
                        p.machine
                    ),
                }
            } else {
                Answer {
                    verdict: Verdict::None,
                    reason: None,
                    explanation: format!(
                        "drover keeps {} at release: {count} builds < MaxBuilds {max_builds} \
                         (a lowered MaxBuilds, or a use count the log undercounts after a restart)",
                        p.machine
                    ),
                }
            });
        }
        if p.reason == Reason::FailedToCreate.as_str() {
            let same = self.failed_create_check(rc)?;
            return Ok(Answer {
                verdict: if same { Verdict::Same } else { Verdict::None },
                reason: same.then(|| Reason::FailedToCreate.to_string()),
                explanation: if same {
                    format!(
                        "{}'s creation failed; drover removes every machine whose creation fails \
                         (Failed to create)",
                        p.machine
                    )
                } else {
                    "drover's engine did not remove a machine whose creation failed".into()
                },
            });
        }
        if p.reason == Reason::MachineUnavailable.as_str() {
            return Ok(Answer {
                verdict: Verdict::Ambiguous,
                reason: None,
                explanation: "upstream's connectivity check (docker-machine config) failed; the \
                              log does not show connectivity checks, so drover's answer on that \
                              check cannot be compared"
                    .into(),
            });
        }
        Ok(Answer {
            verdict: Verdict::Ambiguous,
            reason: None,
            explanation: format!(
                "reason {:?} is not one upstream's scaling decides (a machine found at start-up, \
                 or a shutdown drain)",
                p.reason
            ),
        })
    }

    /// Whether the engine removes a machine whose creation failed (asked once).
    fn failed_create_check(&mut self, rc: &RunnerConfig) -> anyhow::Result<bool> {
        if let Some(v) = self.failed_create_removes {
            return Ok(v);
        }
        let prep = decide::prepare(
            self.config,
            Some(&rc.name),
            &StateFile {
                machines: Vec::new(),
            },
            DateTime::UNIX_EPOCH,
        )?;
        let mut engine: Engine = prep.engine;
        let now = DateTime::UNIX_EPOCH;
        let name = engine.create_on_demand(prep.runner, now)?;
        while engine.poll_command().is_some() {}
        engine.handle(
            crate::engine::Event::Created {
                name: name.clone(),
                ok: false,
            },
            now,
        );
        let mut removes = false;
        while let Some(n) = engine.poll_notice() {
            if let Notice::Removing {
                name: n, reason, ..
            } = n
            {
                removes |= n == name && reason == Reason::FailedToCreate;
            }
        }
        self.failed_create_removes = Some(removes);
        Ok(removes)
    }

    /// Creations drover starts in a pass beyond those upstream started in the same pass (the
    /// machines whose names carry a second within [`SAME_PASS_SECS`] of it), compared once per
    /// runner and second. Upstream's extra creations show as its own decisions instead.
    fn note_drover_only_creations(
        &mut self,
        at: DateTime<Utc>,
        line: u64,
        rc: &RunnerConfig,
        filter: &str,
        report: &crate::engine::PassReport,
    ) {
        if report.created.is_empty()
            || !self
                .creation_passes_seen
                .insert((rc.name.clone(), at.timestamp()))
        {
            return;
        }
        let upstream = self
            .collected
            .machines
            .iter()
            .filter(|m| naming::matches_filter(&m.name, filter))
            .filter(|m| {
                m.create_requested_at
                    .is_some_and(|t| (t - at).num_seconds().abs() <= SAME_PASS_SECS)
            })
            .count();
        for c in report.created.iter().skip(upstream) {
            self.drover_only.push(DecisionRow {
                at,
                kind: DecisionKind::Create,
                machine: c.name.clone(),
                runner: Some(rc.name.clone()),
                upstream_reason: None,
                drover: None,
                drover_reason: Some(Reason::IdleCapacity.to_string()),
                explanation: format!(
                    "drover starts {} creation(s) in this pass, upstream {upstream}: IdleCount {}, \
                     {} idle and {} creating before the pass, limit {}",
                    report.created.len(),
                    report.idle.idle_count,
                    c.counts_before.idle,
                    c.counts_before.creating,
                    report.limits.limit
                ),
                line,
            });
        }
    }

    fn note_drover_only(
        &mut self,
        p: &DecisionPoint,
        rc: &RunnerConfig,
        report: &crate::engine::PassReport,
    ) {
        for r in &report.removals {
            if r.name == p.machine || self.drover_only_seen.contains(&r.name) {
                continue;
            }
            let upstream_soon = self.collected.machine(&r.name).is_some_and(|m| {
                m.removal_requested_at
                    .is_some_and(|t| t >= p.at && (t - p.at).num_seconds() <= SAME_PASS_SECS)
            });
            if upstream_soon {
                continue;
            }
            self.drover_only_seen.insert(r.name.clone());
            self.drover_only.push(DecisionRow {
                at: p.at,
                kind: DecisionKind::Remove,
                machine: r.name.clone(),
                runner: Some(rc.name.clone()),
                upstream_reason: None,
                drover: None,
                drover_reason: Some(r.reason.to_string()),
                explanation: explain::removal_sentence(r, report),
                line: p.line,
            });
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn creation_answer(
        &mut self,
        pool: &[PoolMachine],
        pending: &[(u64, String)],
        at: DateTime<Utc>,
        rc: &RunnerConfig,
        filter: &str,
        token: &str,
        note_extra_at_line: Option<u64>,
    ) -> anyhow::Result<Answer> {
        let state = state_file(pool, filter);
        let d = decide::decide(self.config, Some(&rc.name), &state, at)?;
        let report = &d.outcome.report;
        if let Some(line) = note_extra_at_line {
            self.note_drover_only_creations(at, line, rc, filter, report);
        }
        let sentences = explain::pass_sentences(report, &d.outcome.result);
        if !report.created.is_empty() {
            return Ok(Answer {
                verdict: Verdict::Same,
                reason: Some(Reason::IdleCapacity.to_string()),
                explanation: sentences
                    .iter()
                    .find(|s| s.starts_with("creating"))
                    .cloned()
                    .unwrap_or_default(),
            });
        }
        // A job picked up and not yet on a machine, that will not use a reserved one: upstream's
        // Use creates on demand when no free machine exists.
        let waiting: Vec<u64> = pending
            .iter()
            .filter(|(_, r)| r == token)
            .map(|(j, _)| *j)
            .filter(|j| {
                self.collected
                    .job(*j)
                    .is_none_or(|job| job.existing != Some(true))
            })
            .collect();
        let last = sentences.last().cloned().unwrap_or_default();
        Ok(match (&d.outcome.result, waiting.first()) {
            (AcquireResult::Machine(m), Some(j)) => Answer {
                verdict: Verdict::Ambiguous,
                reason: None,
                explanation: format!(
                    "job {j} waits for a machine, but drover would hand it the free machine {m}; \
                     upstream creates on demand when the reserved machine fails its connect check, \
                     which the log does not show (spec §5.2)"
                ),
            },
            (_, Some(j)) => Answer {
                verdict: Verdict::Same,
                reason: Some(Reason::OnDemand.to_string()),
                explanation: format!("job {j} waits and no free machine exists: {last}"),
            },
            (_, None) => Answer {
                verdict: Verdict::None,
                reason: None,
                explanation: format!("drover creates nothing on this state: {last}"),
            },
        })
    }

    fn judge_creation(
        &mut self,
        p: &DecisionPoint,
        rc: &RunnerConfig,
        filter: &str,
        token: &str,
    ) -> anyhow::Result<Answer> {
        if let Some(s) = name_second(&p.machine) {
            let gap = (p.at - s).num_seconds();
            if gap >= QUEUED_AFTER_SECS {
                return Ok(Answer {
                    verdict: Verdict::Ambiguous,
                    reason: None,
                    explanation: format!(
                        "the creation's first docker-machine line comes {gap} s after the second \
                         in its name: it waited (MaxGrowthRate), and the pool it was decided on is \
                         not in the log"
                    ),
                });
            }
        }
        let now =
            self.creation_answer(&p.pool, &p.pending, p.at, rc, filter, token, Some(p.line))?;
        if let Some((s, pool, pending)) = &p.earlier {
            let before = self.creation_answer(pool, pending, *s, rc, filter, token, None)?;
            if before.verdict != now.verdict {
                return Ok(Answer {
                    verdict: Verdict::Ambiguous,
                    reason: None,
                    explanation: format!(
                        "the pool changed between the second in the name and the first create \
                         line, and drover's answer depends on which state it was: {} / {}",
                        before.explanation, now.explanation
                    ),
                });
            }
        }
        Ok(now)
    }
}

fn keep_sentence(name: &str, pool: &[PoolMachine], d: &decide::Decision) -> String {
    let r = &d.outcome.report;
    let m = pool.iter().find(|m| m.name == name);
    match m {
        Some(m) if m.state != PoolState::Idle => {
            format!("it is {:?}, not Idle", m.state).to_lowercase()
        }
        Some(m) => {
            let idle_s = (d.now - m.last_used).num_seconds();
            format!(
                "used {} times, idle {} s (IdleTime {} s), IdleCount {}, limit {}, MaxBuilds {}",
                m.used_count,
                idle_s,
                r.idle.idle_time,
                r.idle.idle_count,
                r.limits.limit,
                r.limits.max_builds
            )
        }
        None => "it is not in the rebuilt pool".into(),
    }
}

/// What the comparison found.
#[derive(Debug)]
pub struct Report {
    /// Parser statistics.
    pub stats: Stats,
    /// What the log shows.
    pub collected: Collector,
    /// Upstream decisions, compared.
    pub decisions: Vec<DecisionRow>,
    /// Decisions drover makes at those instants that upstream did not.
    pub drover_only: Vec<DecisionRow>,
    /// Upstream's trace rebuilt from the log (for the figures and the plot).
    pub upstream_trace: Trace,
    /// drover's simulated trace on the same jobs.
    pub drover_trace: Trace,
    /// Jobs left out of the replay, with why.
    pub unplaced: BTreeMap<String, u64>,
    /// Notes on what was assumed.
    pub notes: Vec<String>,
    /// Errors the engine raised on some states.
    pub errors: Vec<String>,
}

/// Builds the workload from the log's jobs: queue entry = pickup − time in queue, duration =
/// time on the machine. Returns the workload and the jobs left out, by reason.
pub fn workload_from_jobs(
    collected: &Collector,
    config: Option<&Config>,
    queue_entries: Option<&HashMap<u64, DateTime<Utc>>>,
) -> (Workload, BTreeMap<String, u64>) {
    let runners = config.map(Runners::new);
    let mut jobs = Vec::new();
    let mut unplaced: BTreeMap<String, u64> = BTreeMap::new();
    let mut skip = |why: &str| *unplaced.entry(why.to_string()).or_insert(0) += 1;
    for j in &collected.jobs {
        let Some(queued) = j
            .queued_at
            .or_else(|| queue_entries.and_then(|q| q.get(&j.id).copied()))
        else {
            skip(if queue_entries.is_some() {
                "no time_in_queue_seconds in the log and not in the jobs export"
            } else {
                "no time_in_queue_seconds (runner older than 16.10, or no `Added job to processing \
                 list` line): give a GitLab jobs export for the queue times (--jobs-export)"
            });
            continue;
        };
        let Some(on_machine) = j.on_machine_s() else {
            skip(if j.on_machine_at.is_none() {
                "never got a machine in the log (failed before, or the log ends first)"
            } else {
                "no `Cleaned up docker-machine` line (the log ends while it runs)"
            });
            continue;
        };
        let runner = match &runners {
            Some(rs) => match rs.of_job(j) {
                Some(n) => Some(n),
                None => {
                    skip("its runner token matches no docker+machine [[runners]] entry of the config");
                    continue;
                }
            },
            None => j.runner_name.clone(),
        };
        jobs.push(Job {
            submitted_at: SubmittedAt::At(queued),
            duration: (on_machine * 1000.0).round() as SimTime,
            runner,
            tags: Vec::new(),
            line: 0,
        });
    }
    jobs.sort_by_key(|j| j.submitted_at);
    (Workload { jobs }, unplaced)
}

fn ms_between(a: DateTime<Utc>, b: DateTime<Utc>) -> SimTime {
    (b - a).num_milliseconds().max(0) as SimTime
}

/// Upstream as a simulator trace: the replayed pool's timeline, the queue from the jobs'
/// queue-entry and machine times, creations, removals and job outcomes.
fn upstream_trace(
    collected: &Collector,
    timeline: &[(DateTime<Utc>, PoolCounts)],
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Trace {
    let mut t = Trace::new(start, 0);
    // Queue changes: +1 at queue entry, −1 on the machine (or at the job end without one).
    let mut queue: Vec<(DateTime<Utc>, i64)> = Vec::new();
    for j in &collected.jobs {
        if let Some(q) = j.queued_at {
            queue.push((q.max(start), 1));
            let out = j.on_machine_at.or(j.done_at).unwrap_or(end);
            queue.push((out.max(start), -1));
        }
    }
    queue.sort_by_key(|(at, d)| (*at, *d));
    let mut qi = 0;
    let mut queued: i64 = 0;
    let mut machines = PoolCounts {
        idle: 0,
        used: 0,
        creating: 0,
        removing: 0,
    };
    let mut ti = 0;
    loop {
        let next_t = timeline.get(ti).map(|(at, _)| *at);
        let next_q = queue.get(qi).map(|(at, _)| *at);
        let at = match (next_t, next_q) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => break,
        };
        while timeline.get(ti).is_some_and(|(t2, _)| *t2 == at) {
            machines = timeline[ti].1;
            ti += 1;
        }
        while queue.get(qi).is_some_and(|(t2, _)| *t2 == at) {
            queued += queue[qi].1;
            qi += 1;
        }
        t.record(
            ms_between(start, at),
            Counts {
                idle: machines.idle,
                used: machines.used,
                creating: machines.creating,
                removing: machines.removing,
                queued: queued.max(0) as u32,
            },
        );
    }
    t.end = ms_between(start, end);
    let created_at: HashMap<&str, Option<DateTime<Utc>>> = collected
        .machines
        .iter()
        .map(|m| (m.name.as_str(), m.created_at))
        .collect();
    t.jobs = collected
        .jobs
        .iter()
        .filter_map(|j| {
            let q = j.queued_at?;
            Some(JobOutcome {
                submitted: ms_between(start, q),
                started: j.on_machine_at.map(|s| ms_between(start, s)),
                finished: j.cleaned_at.map(|s| ms_between(start, s)),
                waited_for_creation: j
                    .machine
                    .as_deref()
                    .and_then(|m| created_at.get(m).copied().flatten())
                    .is_some_and(|c| c > q),
                failed: j.on_machine_at.is_none()
                    && j.status.as_deref() == Some("runner_system_failure"),
            })
        })
        .collect();
    for m in &collected.machines {
        if !m.before_log {
            t.creations += 1;
        }
        if m.create_failed {
            t.creation_failures += 1;
        }
        if m.removed_at.is_some() {
            t.count_removal(m.removal_reason.as_deref().unwrap_or_default());
        }
    }
    t
}

/// Reads a GitLab jobs export's queue entries (for logs of runners before 16.10).
pub fn read_queue_entries(path: &std::path::Path) -> anyhow::Result<HashMap<u64, DateTime<Utc>>> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {name}"))?;
    Ok(crate::sim::import::queue_entries(&text, &name)?)
}

/// Runs the whole comparison.
pub fn compare(
    config: &Config,
    paths: &[PathBuf],
    opts: ReadOptions,
    seed: u64,
    queue_entries: Option<&HashMap<u64, DateTime<Utc>>>,
) -> anyhow::Result<Report> {
    let paths = upstream_log::order_files(paths, opts);
    let (collected, stats) = upstream_log::collect(&paths, opts)?;
    let mut judge = Judge {
        config,
        runners: Runners::new(config),
        collected: &collected,
        rows: Vec::new(),
        drover_only: Vec::new(),
        drover_only_seen: HashSet::new(),
        creation_passes_seen: HashSet::new(),
        failed_create_removes: None,
        errors: Vec::new(),
    };
    if judge.runners.list.is_empty() {
        anyhow::bail!("the config has no [[runners]] entry with a [runners.machine] section");
    }
    let mut replay = Replay::new(&collected)
        .with_create_line_delay(chrono::TimeDelta::milliseconds(opts.create_line_delay_ms));
    upstream_log::stream_events(&paths, opts, |e| {
        replay.push(e, &mut |p| judge.judge(p));
    })?;
    let (start, end) = collected
        .span
        .context("the log has no timed line: nothing to compare")?;
    let up_trace = upstream_trace(&collected, &replay.timeline, start, end);
    let unjudged = replay.unjudged_creations;
    drop(replay);
    let Judge {
        rows,
        drover_only,
        errors,
        ..
    } = judge;
    // As a whole: the same jobs through the simulator, creation times as observed.
    let (workload, unplaced) = workload_from_jobs(&collected, Some(config), queue_entries);
    let mut notes = stats.notes.clone();
    let creation_ms: Vec<SimTime> = collected
        .machines
        .iter()
        .filter_map(|m| m.creation_s)
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| (s * 1000.0).round() as SimTime)
        .collect();
    let removal_ms: Vec<SimTime> = collected
        .machines
        .iter()
        .filter(|m| m.removal_retries == 0)
        .filter_map(|m| Some(ms_between(m.removal_requested_at?, m.removed_at?)))
        .collect();
    let attempted = collected.machines.iter().filter(|m| !m.before_log).count();
    let failed = collected
        .machines
        .iter()
        .filter(|m| m.create_failed)
        .count();
    let default = ProviderModel::default();
    let model = ProviderModel {
        create_latency: if creation_ms.is_empty() {
            notes.push("no `Machine created` durations in the log: creations take 60-120 s".into());
            default.create_latency
        } else {
            Latency::Empirical(Arc::from(creation_ms))
        },
        create_failure_rate: if attempted > 0 {
            (failed as f64 / attempted as f64).clamp(0.0, 1.0)
        } else {
            0.0
        },
        remove_latency: if removal_ms.is_empty() {
            default.remove_latency
        } else {
            Latency::Empirical(Arc::from(removal_ms))
        },
        remove_failure_rate: 0.0,
        seed,
    };
    let scenario = Scenario {
        config,
        workload: &workload,
        from: Some(start),
        until: Some(end),
        model,
        any_runner: false,
    };
    let drover_trace = crate::sim::simulate(&scenario)?;
    if unjudged > 0 {
        notes.push(format!(
            "{unjudged} creation(s) have no first docker-machine line (lost output, or the log \
             began mid-creation): not judged"
        ));
    }
    Ok(Report {
        stats,
        collected,
        decisions: rows,
        drover_only,
        upstream_trace: up_trace,
        drover_trace,
        unplaced,
        notes,
        errors,
    })
}

impl Report {
    fn tally(&self) -> BTreeMap<Verdict, usize> {
        let mut t = BTreeMap::new();
        for r in &self.decisions {
            if let Some(v) = r.drover {
                *t.entry(v).or_insert(0) += 1;
            }
        }
        t
    }

    /// Decisions compared (ambiguous ones excluded) and how many agree.
    pub fn agreement(&self) -> (usize, usize) {
        let t = self.tally();
        let get = |v| t.get(&v).copied().unwrap_or(0);
        let judged = get(Verdict::Same) + get(Verdict::Different) + get(Verdict::None);
        (get(Verdict::Same), judged)
    }

    /// True when every judged decision agrees, at least one was judged, and drover makes no
    /// decision of its own at those instants.
    pub fn all_agree(&self) -> bool {
        let (same, judged) = self.agreement();
        judged > 0 && same == judged && self.drover_only.is_empty()
    }

    /// The JSON report.
    pub fn json(&self) -> Value {
        let c = &self.collected;
        let jobs: Vec<Value> = c
            .jobs
            .iter()
            .map(|j| {
                json!({
                    "id": j.id,
                    "runner": j.runner_name.clone().unwrap_or_else(|| j.runner.clone()),
                    "runner_token": j.runner,
                    "queued_at": j.queued_at.map(rfc),
                    "picked_at": j.picked_at.map(rfc),
                    "machine": j.machine,
                    "on_machine_s": j.on_machine_s(),
                    "status": j.status,
                })
            })
            .collect();
        let machines: Vec<Value> = c
            .machines
            .iter()
            .map(|m| {
                json!({
                    "name": m.name,
                    "create_requested_at": m.create_requested_at.map(rfc),
                    "created_at": m.created_at.map(rfc),
                    "create_failed": m.create_failed,
                    "creation_s": m.creation_s,
                    "before_log": m.before_log,
                    "jobs": m.jobs,
                    "removal_reason": m.removal_reason,
                    "removal_requested_at": m.removal_requested_at.map(rfc),
                    "removed_at": m.removed_at.map(rfc),
                    "removal_retries": m.removal_retries,
                    "removal_gave_up": m.removal_gave_up,
                })
            })
            .collect();
        let row = |r: &DecisionRow| {
            json!({
                "at": rfc(r.at),
                "kind": r.kind,
                "machine": r.machine,
                "runner": r.runner,
                "upstream_reason": r.upstream_reason,
                "drover": r.drover.map_or(Value::from("drover-only"), |v| json!(v)),
                "drover_reason": r.drover_reason,
                "explanation": r.explanation,
                "line": r.line,
            })
        };
        let (same, judged) = self.agreement();
        let tally: BTreeMap<String, usize> = self
            .tally()
            .into_iter()
            .map(|(k, v)| (format!("{k:?}").to_lowercase(), v))
            .collect();
        json!({
            "verdict": self.verdict_line(),
            "upstream": {
                "version": self.stats.versions.last(),
                "versions": self.stats.versions,
                "restarts": c.restarts.iter().map(|t| rfc(*t)).collect::<Vec<_>>(),
                "config_reloads": c.reloads.iter().map(|t| rfc(*t)).collect::<Vec<_>>(),
                "jobs": jobs,
                "machines": machines,
            },
            "decisions": self.decisions.iter().map(row).collect::<Vec<_>>(),
            "drover_only": self.drover_only.iter().map(row).collect::<Vec<_>>(),
            "summary": {
                "decisions": {"agree": same, "judged": judged, "by_verdict": tally,
                              "drover_only": self.drover_only.len()},
                "upstream": Summary::of(&self.upstream_trace),
                "drover": Summary::of(&self.drover_trace),
                "jobs_not_replayed": self.unplaced,
            },
            "log": self.stats,
            "notes": self.notes,
            "errors": self.errors,
        })
    }

    /// The one-line verdict.
    pub fn verdict_line(&self) -> String {
        let (same, judged) = self.agreement();
        let t = self.tally();
        let amb = t.get(&Verdict::Ambiguous).copied().unwrap_or(0);
        let differ = judged - same;
        let mut s = if judged == 0 {
            "no upstream decision could be judged".to_string()
        } else if differ == 0 {
            format!("{same} of {judged} decisions agree")
        } else {
            let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
            for r in &self.decisions {
                if matches!(r.drover, Some(Verdict::Different) | Some(Verdict::None)) {
                    let what = match r.kind {
                        DecisionKind::Create => "creation".to_string(),
                        DecisionKind::Remove => {
                            format!(
                                "removal ({})",
                                r.upstream_reason.clone().unwrap_or_default()
                            )
                        }
                    };
                    *kinds.entry(what).or_insert(0) += 1;
                }
            }
            let list: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
            format!(
                "{same} of {judged} decisions agree; the {differ} that differ are: {}",
                list.join(", ")
            )
        };
        if amb > 0 {
            s.push_str(&format!("; {amb} the log cannot decide (not counted)"));
        }
        if !self.drover_only.is_empty() {
            s.push_str(&format!(
                "; drover would also make {} decision(s) upstream did not",
                self.drover_only.len()
            ));
        }
        s
    }

    /// The text report: verdict first, then differences, figures and what the log lacks.
    pub fn text(&self) -> String {
        let mut out = String::new();
        out.push_str(&self.verdict_line());
        out.push('\n');
        let (same, judged) = self.agreement();
        out.push_str(
            if judged > 0 && same == judged && self.drover_only.is_empty() {
                "=> drover decides as your gitlab-runner did on every decision the log can show.\n"
            } else if judged == 0 {
                "=> collect a longer log (see docs/check-against-your-fleet.md).\n"
            } else {
                "=> read the differences below before you switch: each names the machine, the log \
             line and drover's reason.\n"
            },
        );
        let differing: Vec<&DecisionRow> = self
            .decisions
            .iter()
            .filter(|r| matches!(r.drover, Some(Verdict::Different) | Some(Verdict::None)))
            .collect();
        if !differing.is_empty() {
            out.push_str("\ndecisions that differ:\n");
            for r in differing.iter().take(50) {
                out.push_str(&format!(
                    "- {} line {}: upstream {} {}{}; drover: {}\n",
                    rfc(r.at),
                    r.line,
                    match r.kind {
                        DecisionKind::Create => "created",
                        DecisionKind::Remove => "removed",
                    },
                    r.machine,
                    r.upstream_reason
                        .as_ref()
                        .map(|s| format!(" ({s})"))
                        .unwrap_or_default(),
                    r.explanation
                ));
            }
            if differing.len() > 50 {
                out.push_str(&format!(
                    "  … and {} more (--format json lists all)\n",
                    differing.len() - 50
                ));
            }
        }
        if !self.drover_only.is_empty() {
            out.push_str("\ndecisions only drover makes:\n");
            for r in self.drover_only.iter().take(20) {
                out.push_str(&format!(
                    "- {} (near line {}): {} {}: {}\n",
                    rfc(r.at),
                    r.line,
                    match r.kind {
                        DecisionKind::Create => "create",
                        DecisionKind::Remove => "remove",
                    },
                    r.machine,
                    r.explanation
                ));
            }
        }
        let amb: Vec<&DecisionRow> = self
            .decisions
            .iter()
            .filter(|r| r.drover == Some(Verdict::Ambiguous))
            .collect();
        if !amb.is_empty() {
            out.push_str(&format!("\nambiguous ({}), first ones:\n", amb.len()));
            for r in amb.iter().take(5) {
                out.push_str(&format!(
                    "- {} line {} {}: {}\n",
                    rfc(r.at),
                    r.line,
                    r.machine,
                    r.explanation
                ));
            }
        }
        let a = Summary::of(&self.upstream_trace);
        let b = Summary::of(&self.drover_trace);
        out.push_str(&format!(
            "\nas a whole ({} to {}), upstream as logged vs drover replaying the same {} jobs:\n",
            a.from,
            a.until,
            self.drover_trace.jobs.len()
        ));
        out.push_str(&crate::sim::compare::figures_table(
            &a, "upstream", &b, "drover",
        ));
        let s = &self.stats;
        out.push_str(&format!(
            "\nlog: {} lines, {} jobs, {} machines, {} restart(s), version {}; {} unknown, {} \
             duplicate, {} continuation, {} foreign line(s)\n",
            s.lines,
            self.collected.jobs.len(),
            self.collected.machines.len(),
            self.collected.restarts.len(),
            s.versions.last().map_or("unknown", |v| v.as_str()),
            s.unknown_lines,
            s.duplicate_lines,
            s.continuation_lines,
            s.foreign_lines
        ));
        for (why, n) in &self.unplaced {
            out.push_str(&format!("not replayed: {n} job(s): {why}\n"));
        }
        if s.suppressed_by_journald > 0 {
            out.push_str(&format!(
                "warning: journald suppressed {} gitlab-runner message(s): the log has gaps\n",
                s.suppressed_by_journald
            ));
        }
        if !self.collected.reloads.is_empty() {
            out.push_str(&format!(
                "warning: the config was reloaded {} time(s); decisions after a changed config \
                 are judged against the config you gave\n",
                self.collected.reloads.len()
            ));
        }
        for n in &self.notes {
            out.push_str(&format!("note: {n}\n"));
        }
        out
    }
}
