//! Conformance of the job trace with upstream's build-level cases, which need a job on the
//! Docker Engine (gitlab-runner 19.3):
//!
//! * `common/buildtest/job_output_limit.go` (run by `executors/docker`): a log capped at
//!   12 bytes; the job keeps running and ends as it would have (success; `exit 1` as
//!   `script_failure` with exit code 1; a cancel after the notice as `job_canceled`), the log
//!   holds the notice and not the `Running with …` header.
//! * `TestBuildScriptSections` (`executors/docker`, `common/buildtest/sections.go`): with
//!   `trace_sections` and `FF_SCRIPT_SECTIONS`, a multi-line command is shown in a collapsed
//!   `section_script_step_<i>` section.
//!
//! Upstream caps its trace buffer at 12 bytes in code; here the job writes into drover's GitLab
//! log buffer made with the same 12-byte limit (the sink `drover run` uses applies the cap,
//! as upstream's buffer does). Each case's inputs and expected outcome are upstream's facts;
//! the harness is ours. Prints `trace conformance (Engine): N cases, N agree, K deliberate
//! differences` (with `--nocapture`).

mod docker_engine;
mod executor_common;

use std::io;
use std::sync::{Arc, Mutex};

use drover::executor::{FailureReason, JobError, TraceSink};
use drover::gitlab::LogBuffer;
use executor_common::*;
use serde_json::json;

/// Cases that differ on purpose (file, case), each explained in README "what differs".
const DELIBERATE: &[(&str, &str)] = &[];

/// A job log as `drover run` keeps it: the GitLab log buffer, which applies the cap.
#[derive(Clone)]
struct Buffered(Arc<Mutex<LogBuffer>>);

impl Buffered {
    fn text(&self) -> String {
        let log = self.0.lock().unwrap_or_else(|p| p.into_inner());
        plain(log.bytes())
    }
}

impl TraceSink for Buffered {
    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).write(data);
        Ok(())
    }
    fn limits_output(&self) -> bool {
        true
    }
}

/// Runs a job into a log capped at `limit` bytes; `cancel_on` cancels the job (gracefully,
/// as GitLab's cancel) once the log contains it.
async fn run_into_buffer(
    payload: &drover::job::JobPayload,
    runner: &drover::executor::RunnerSettings,
    limit: usize,
    cancel_on: Option<&str>,
) -> (Result<(), JobError>, String) {
    let sink = Buffered(Arc::new(Mutex::new(LogBuffer::new(limit))));
    let mut job_sink = sink.clone();
    let view = sink.clone();
    let cancel_on = cancel_on.map(str::to_string);
    let result = run_job_into(payload, runner, &mut job_sink, move |control| {
        if cancel_on
            .as_deref()
            .is_some_and(|c| view.text().contains(c))
        {
            control.cancel.cancel();
        }
    })
    .await;
    (result, sink.text())
}

/// A job's end as upstream's tests state it: `ok`, or the failure reason and exit code
/// (upstream's build error has exit code 0 when no script exit code applies).
fn ending(r: &Result<(), JobError>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => format!("{}/{}", e.reason(), e.exit_code().unwrap_or(0)),
    }
}

struct Outcome {
    file: &'static str,
    name: String,
    got: String,
    expected: String,
}

async fn output_limit_cases(out: &mut Vec<Outcome>) {
    let cases: [(&str, &[&str], bool, String); 3] = [
        (
            "successful job",
            &["echo Hello World", "exit 0"],
            false,
            "ok".into(),
        ),
        (
            "failed job",
            &["echo Hello World", "exit 1"],
            false,
            format!("{}/1", FailureReason::ScriptFailure),
        ),
        (
            "canceled job",
            &["echo Hello World", "sleep 10", "exit 0"],
            true,
            format!("{}/0", FailureReason::JobCanceled),
        ),
    ];
    for (i, (name, script, cancel, expected)) in cases.into_iter().enumerate() {
        let runner = settings(&format!("tlimit{i}"));
        let job = no_git_job(9100 + i as i64, 910, script, json!({}));
        let (result, log) = run_into_buffer(
            &job,
            &runner,
            12,
            cancel.then_some("Job's log exceeded limit of"),
        )
        .await;
        let checks = [
            !log.contains("with drover"),
            log.contains("Job's log exceeded limit of 12 bytes."),
            log.contains("Job execution will continue but no more output will be collected."),
        ];
        out.push(Outcome {
            file: "job_output_limit.go",
            name: name.into(),
            got: format!("{checks:?} {}", ending(&result)),
            expected: format!("{:?} {expected}", [true; 3]),
        });
        assert_clean_and_remove_reusable(&short_token(&runner));
    }
}

async fn script_sections_case(out: &mut Vec<Outcome>) {
    // The section markers' times come from awk, as upstream's (the test images have it).
    let runner = settings("tsections");
    let job = no_git_job(
        9110,
        911,
        &["echo \"Hello\nWorld\""],
        json!({
            "features": {"trace_sections": true},
            "variables": [{"key": "FF_SCRIPT_SECTIONS", "value": "true"}]
        }),
    );
    let (result, log) = run_into_buffer(&job, &runner, 4 << 20, None).await;
    let shape = regex::Regex::new(
        r"(?s)section_start:[0-9]+:section_script_step_[0-9]\[hide_duration=true,collapsed=true\]+.*Hello[\s\S]*?World.*section_end:[0-9]+:section_script_step_[0-9]",
    )
    .expect("a valid pattern");
    out.push(Outcome {
        file: "sections.go",
        name: "TestBuildScriptSections".into(),
        got: format!(
            "{} {} {}",
            shape.is_match(&log),
            !log.contains("section_start::"),
            ending(&result)
        ),
        expected: "true true ok".into(),
    });
    assert_clean_and_remove_reusable(&short_token(&runner));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_engine_conformance() {
    let _guard = engine_test!();
    let mut all = Vec::new();
    output_limit_cases(&mut all).await;
    script_sections_case(&mut all).await;

    let mut agree = 0;
    let mut deliberate = 0;
    let mut failures = Vec::new();
    for o in &all {
        let listed = DELIBERATE.iter().any(|(f, n)| *f == o.file && *n == o.name);
        match (o.got == o.expected, listed) {
            (true, false) => agree += 1,
            (false, true) => deliberate += 1,
            (true, true) => failures.push(format!(
                "{} / {}: listed as deliberate but agrees; update DELIBERATE",
                o.file, o.name
            )),
            (false, false) => failures.push(format!(
                "{} / {}:\n  expected {:?}\n  got      {:?}",
                o.file, o.name, o.expected, o.got
            )),
        }
    }
    println!(
        "trace conformance (Engine): {} cases, {agree} agree, {deliberate} deliberate differences",
        all.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
