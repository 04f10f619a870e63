//! Writes a simulator run as gitlab-runner would have logged it, in the `json` or `runner`
//! format (spec `upstream-logs.md` §1–§3): the test oracle for the parser and the comparison
//! (drover's own decisions, written as upstream's log, must come out 100 % in agreement), and
//! the generator of the benchmark's week-long logs.
//!
//! The run must have been recorded with [`crate::sim::Simulation::record_events`]. The first
//! `docker-machine create` line of a creation is written at the instant the engine decided it
//! (upstream writes it about 0.3 s later), so the comparison can judge on the exact pool.

use std::collections::HashMap;
use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::format::{self, Format, Level, Style, Value};

use crate::config::Config;
use crate::engine::naming;
use crate::sim::trace::{RunEvent, Trace};

/// The format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitFormat {
    /// logrus JSON (one object per line, keys sorted), as `journalctl -o cat` prints it.
    Json,
    /// The default `runner` format, with its colours and padding.
    Runner,
    /// logrus `text` (`time="…" level=… msg=…`, then the sorted fields).
    Text,
}

/// Job ids in the written log: the workload index plus this.
pub const JOB_ID_BASE: u64 = 7_000_000_000;

/// A field value (see [`format::Value`]); durations in milliseconds.
enum Val {
    S(String),
    I(i64),
    F(f64),
    /// A time.Duration, in milliseconds.
    D(i64),
    /// A time.Time with its monotonic reading (seconds since the process started).
    T(DateTime<Utc>, f64),
}

impl Val {
    fn value(self) -> Value {
        match self {
            Val::S(s) => Value::Str(s),
            Val::I(i) => Value::Int(i),
            Val::F(f) => Value::Float(f),
            Val::D(ms) => Value::Duration(ms.saturating_mul(1_000_000)),
            Val::T(t, m) => Value::Time(t.fixed_offset(), Some(m)),
        }
    }
}

/// Go's `time.Duration.String()` for a number of milliseconds.
pub fn go_duration_ms(ms: i64) -> String {
    format::go_duration(ms.saturating_mul(1_000_000))
}

/// Writes a recorded run as upstream's log.
pub struct Emitter<'a> {
    trace: &'a Trace,
    format: EmitFormat,
    tokens: HashMap<String, String>,
    max_builds: i64,
    start_of: HashMap<String, i64>,
    builds: i64,
    journal: bool,
    out: String,
}

impl<'a> Emitter<'a> {
    /// An emitter for `trace`, run on `config`.
    pub fn new(trace: &'a Trace, config: &Config, format: EmitFormat) -> Emitter<'a> {
        let tokens = config
            .runners
            .iter()
            .map(|r| (r.name.clone(), naming::short_token(&r.token).to_string()))
            .collect();
        Emitter {
            trace,
            format,
            tokens,
            max_builds: config.concurrent,
            start_of: HashMap::new(),
            builds: 0,
            journal: false,
            out: String::new(),
        }
    }

    /// Prefixes every line as `journalctl -o short-iso-precise --utc` prints it.
    pub fn journal_iso(mut self) -> Self {
        self.journal = true;
        self
    }

    fn wall(&self, at: u64) -> DateTime<Utc> {
        self.trace.wall(at)
    }

    fn mono(&self, t: DateTime<Utc>) -> f64 {
        // The process started 10 s before the run.
        (t - self.trace.start).num_milliseconds() as f64 / 1000.0 + 10.0
    }

    fn line(&mut self, t: DateTime<Utc>, level: &str, msg: &str, fields: Vec<(&str, Val)>) {
        if self.journal {
            let _ = write!(
                self.out,
                "{} runner-host gitlab-runner[4242]: ",
                t.format("%Y-%m-%dT%H:%M:%S%.6f+0000")
            );
        }
        let level = match level {
            "warning" => Level::Warning,
            "error" => Level::Error,
            "debug" => Level::Debug,
            _ => Level::Info,
        };
        let fields: Vec<(&str, Value)> = fields.into_iter().map(|(k, v)| (k, v.value())).collect();
        // Upstream writes the runner format's colours whether or not stderr is a terminal.
        let style = Style {
            format: match self.format {
                EmitFormat::Json => Format::Json,
                EmitFormat::Runner => Format::Runner,
                EmitFormat::Text => Format::Text,
            },
            terminal: self.format == EmitFormat::Runner,
            started: self.trace.start.fixed_offset(),
        };
        format::write_line(
            &mut self.out,
            &style,
            &format::Record {
                time: t.fixed_offset(),
                level,
                msg,
                fields: &fields,
            },
        );
    }

    fn job_id(job: usize) -> i64 {
        JOB_ID_BASE as i64 + job as i64
    }

    /// The whole log, as a string (small runs).
    pub fn emit(self, version: &str) -> String {
        let mut buf = Vec::new();
        // Writing to a Vec cannot fail.
        let _ = self.emit_to(&mut buf, version);
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// Streams the whole log to `w` (a week of a busy fleet is gigabytes).
    pub fn emit_to(mut self, w: &mut dyn std::io::Write, version: &str) -> std::io::Result<()> {
        self.write_all(w, version)?;
        self.flush(w)
    }

    fn flush(&mut self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        w.write_all(self.out.as_bytes())?;
        self.out.clear();
        Ok(())
    }

    fn write_all(&mut self, w: &mut dyn std::io::Write, version: &str) -> std::io::Result<()> {
        let t0 = self.trace.start;
        // Lines before the first config load are always in the runner format.
        let saved = self.format;
        self.format = EmitFormat::Runner;
        self.line(
            t0,
            "info",
            "Runtime platform",
            vec![
                ("arch", Val::S("amd64".into())),
                ("os", Val::S("linux".into())),
                ("pid", Val::I(4242)),
                ("revision", Val::S("d79f3e7b".into())),
                ("version", Val::S(version.into())),
            ],
        );
        self.line(
            t0,
            "info",
            "Starting multi-runner from /etc/gitlab-runner/config.toml...",
            vec![("builds", Val::I(0)), ("max_builds", Val::I(0))],
        );
        self.line(t0, "info", "Running in system-mode.", Vec::new());
        self.line(t0, "info", "", Vec::new());
        self.format = saved;
        self.line(
            t0,
            "info",
            "Configuration loaded",
            vec![
                ("builds", Val::I(0)),
                ("max_builds", Val::I(self.max_builds)),
            ],
        );
        let trace = self.trace;
        let mut runner_of: HashMap<usize, String> = HashMap::new();
        let mut use_at: HashMap<usize, (DateTime<Utc>, String)> = HashMap::new();
        let mut used_counts: HashMap<String, i64> = HashMap::new();
        let mut ip = 0u32;
        for (at, ev) in &trace.events {
            if self.out.len() > 1 << 20 {
                self.flush(w)?;
            }
            let t = self.wall(*at);
            let mono = self.mono(t);
            match ev {
                RunEvent::Pickup { job, runner } => {
                    let token = self.tokens.get(runner).cloned().unwrap_or_default();
                    runner_of.insert(*job, runner.clone());
                    let id = Self::job_id(*job);
                    let tiq = trace
                        .jobs
                        .get(*job)
                        .map_or(0, |j| at.saturating_sub(j.submitted) / 1000);
                    self.line(
                        t,
                        "info",
                        "Checking for jobs... received",
                        vec![
                            ("correlation_id", Val::S(format!("{id:032x}"))),
                            ("job", Val::I(id)),
                            (
                                "repo_url",
                                Val::S("https://gitlab.example.com/group/project.git".into()),
                            ),
                            ("runner", Val::S(token.clone())),
                            ("runner_name", Val::S(runner.clone())),
                        ],
                    );
                    self.builds += 1;
                    self.line(
                        t,
                        "info",
                        "Added job to processing list",
                        vec![
                            ("builds", Val::I(self.builds)),
                            ("job", Val::I(id)),
                            ("max_builds", Val::I(self.max_builds)),
                            ("project", Val::I(42)),
                            ("runner", Val::S(token)),
                            ("runner_name", Val::S(runner.clone())),
                            ("time_in_queue_seconds", Val::I(tiq as i64)),
                        ],
                    );
                }
                RunEvent::Use {
                    job,
                    machine,
                    used_count,
                    existing,
                } => {
                    used_counts.insert(machine.clone(), *used_count);
                    use_at.insert(*job, (t, machine.clone()));
                    ip = ip.wrapping_add(1);
                    let fields = self.job_fields(*job, &runner_of, machine, *used_count, t, mono);
                    let mut fields = fields;
                    fields.push((
                        "docker",
                        Val::S(format!("tcp://10.0.{}.{}:2376", (ip >> 8) & 255, ip & 255)),
                    ));
                    let msg = if *existing {
                        "Using existing docker-machine"
                    } else {
                        "Created docker-machine"
                    };
                    self.line(t, "info", msg, fields);
                    let fields = self.job_fields(*job, &runner_of, machine, *used_count, t, mono);
                    self.line(t, "info", "Starting docker-machine build...", fields);
                }
                RunEvent::JobEnd {
                    job,
                    machine,
                    failed,
                } => {
                    let id = Self::job_id(*job);
                    let token = runner_of
                        .get(job)
                        .and_then(|r| self.tokens.get(r))
                        .cloned()
                        .unwrap_or_default();
                    let duration = trace
                        .jobs
                        .get(*job)
                        .and_then(|j| j.started.map(|s| (s, j.submitted)))
                        .map_or(0.0, |(s, _)| at.saturating_sub(s) as f64 / 1000.0);
                    if let Some(m) = machine {
                        let uc = used_counts.get(m).copied().unwrap_or(1);
                        let f = self.job_fields(*job, &runner_of, m, uc, t, mono);
                        self.line(t, "info", "Finished docker-machine build", f);
                        let f = self.job_fields(*job, &runner_of, m, uc, t, mono);
                        self.line(t, "info", "Cleaned up docker-machine", f);
                        self.line(
                            t,
                            "info",
                            "Job succeeded",
                            vec![
                                ("duration_s", Val::F(duration)),
                                ("job", Val::I(id)),
                                ("job-status", Val::S("success".into())),
                                ("project", Val::I(42)),
                                ("runner", Val::S(token.clone())),
                            ],
                        );
                    } else if *failed {
                        self.line(
                            t,
                            "error",
                            "Job failed (system failure): no free machines",
                            vec![
                                ("duration_s", Val::F(duration)),
                                ("error", Val::S("no free machines".into())),
                                ("failure_reason", Val::S("runner_system_failure".into())),
                                ("job", Val::I(id)),
                                ("job-status", Val::S("failed".into())),
                                ("project", Val::I(42)),
                                ("runner", Val::S(token.clone())),
                            ],
                        );
                    }
                    self.builds -= 1;
                    self.line(
                        t,
                        "info",
                        "Removed job from processing list",
                        vec![
                            ("builds", Val::I(self.builds)),
                            ("job", Val::I(id)),
                            ("max_builds", Val::I(self.max_builds)),
                            ("project", Val::I(42)),
                            ("runner", Val::S(token)),
                        ],
                    );
                }
                RunEvent::CreateStart { machine } => {
                    self.start_of.insert(machine.clone(), *at as i64);
                    for msg in ["Running pre-create checks...", "Creating machine..."] {
                        self.line(
                            t,
                            "info",
                            msg,
                            vec![
                                ("driver", Val::S("google".into())),
                                ("name", Val::S(machine.clone())),
                                ("operation", Val::S("create".into())),
                            ],
                        );
                    }
                }
                RunEvent::Created { machine, ok } => {
                    let took = self.start_of.remove(machine).map_or(0, |s| *at as i64 - s);
                    if *ok {
                        self.line(
                            t,
                            "info",
                            "Machine created",
                            vec![
                                ("duration", Val::D(took)),
                                ("name", Val::S(machine.clone())),
                                ("now", Val::T(t, mono)),
                                ("retries", Val::I(0)),
                            ],
                        );
                    } else {
                        self.line(
                            t,
                            "error",
                            "Machine creation failed",
                            vec![
                                ("error", Val::S("exit status 1".into())),
                                ("name", Val::S(machine.clone())),
                                ("time", Val::D(took)),
                            ],
                        );
                    }
                }
                RunEvent::RemovalRequested {
                    machine,
                    reason,
                    used_count,
                } => {
                    self.line(
                        t,
                        "warning",
                        "Requesting machine removal",
                        vec![
                            ("lifetime", Val::D(0)),
                            ("name", Val::S(machine.clone())),
                            ("now", Val::T(t, mono)),
                            ("reason", Val::S(reason.clone())),
                            ("used", Val::D(0)),
                            ("usedCount", Val::I(*used_count)),
                        ],
                    );
                }
                RunEvent::RemovalAttempt { machine } => {
                    for msg in ["Stopping machine", "Removing machine"] {
                        self.line(t, "warning", msg, vec![("name", Val::S(machine.clone()))]);
                    }
                }
                RunEvent::Removed { machine } => {
                    self.line(
                        t,
                        "info",
                        "Machine removed",
                        vec![
                            ("name", Val::S(machine.clone())),
                            ("now", Val::T(t, mono)),
                            ("retries", Val::I(0)),
                        ],
                    );
                }
            }
        }
        let _ = use_at;
        Ok(())
    }

    fn job_fields(
        &self,
        job: usize,
        runner_of: &HashMap<usize, String>,
        machine: &str,
        used_count: i64,
        t: DateTime<Utc>,
        mono: f64,
    ) -> Vec<(&'static str, Val)> {
        let token = runner_of
            .get(&job)
            .and_then(|r| self.tokens.get(r))
            .cloned()
            .unwrap_or_default();
        vec![
            ("job", Val::I(Self::job_id(job))),
            ("name", Val::S(machine.to_string())),
            ("now", Val::T(t, mono)),
            ("project", Val::I(42)),
            ("runner", Val::S(token)),
            ("usedCount", Val::I(used_count)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(go_duration_ms(0), "0s");
        assert_eq!(go_duration_ms(310), "310ms");
        assert_eq!(go_duration_ms(91_500), "1m31.5s");
        assert_eq!(go_duration_ms(7_200_000), "2h0m0s");
    }
}
