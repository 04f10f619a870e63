//! The GitLab client against the GitLab simulator (tests/gitlab-sim): job requests, the
//! per-job trace object, status updates, faults, cancellation, registration endpoints, TLS and
//! the no-token-in-logs rule.

mod test_certs;

use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use drover::gitlab::{
    system_id, Client, ClientSettings, FinalState, Info, JobOutcome, JobRequest, JobRequestOutcome,
    JobTrace, Pickup, RegisterParams, RetryPolicy, TraceOptions,
};
use drover::job::JobPayload;
use gitlab_sim::{Fault, FaultKind, JobSpec, JobState, Route, Sim};

const TOKEN: &str = "glrt-t1_SimRunnerToken0001";
const SYSTEM_ID: &str = "s_0123456789ab";

fn settings(url: &str) -> ClientSettings {
    ClientSettings {
        url: url.into(),
        retry: RetryPolicy {
            max_attempts: 5,
            base: Duration::from_millis(5),
            cap: Duration::from_secs(5),
        },
        ..ClientSettings::default()
    }
}

fn client(sim: &Sim) -> Arc<Client> {
    Arc::new(Client::new(&settings(sim.url())).expect("client"))
}

fn info() -> Arc<Info> {
    let runner = drover::config::RunnerConfig {
        executor: "docker+machine".into(),
        ..Default::default()
    };
    Arc::new(Info::for_runner(&runner, &Default::default()))
}

fn fast() -> TraceOptions {
    TraceOptions {
        update_interval: Duration::from_millis(40),
        force_send_interval: Duration::from_secs(60),
        final_backoff_base: Duration::from_millis(20),
        ..TraceOptions::default()
    }
}

/// A simulator whose PATCH/PUT answers carry no update interval, so the client's (short)
/// interval stays in force.
async fn sim() -> Sim {
    let sim = Sim::start().await.expect("start the simulator");
    sim.add_runner(TOKEN);
    sim.configure(|s| s.trace_update_interval = 0);
    sim
}

async fn request(client: &Client, info: &Info) -> drover::gitlab::JobRequestResult {
    client
        .request_job(&JobRequest {
            token: TOKEN,
            info,
            system_id: SYSTEM_ID,
            session: None,
            runner_name: "",
        })
        .await
}

async fn pickup(sim: &Sim, client: &Client, info: &Info) -> JobPayload {
    let _ = sim;
    match request(client, info).await.outcome {
        JobRequestOutcome::Job(job) => *job,
        other => panic!("expected a job, got {other:?}"),
    }
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn job_request_sends_identity_features_and_echoes_last_update() {
    let sim = sim().await;
    let (client, info) = (client(&sim), info());
    let first = request(&client, &info).await;
    assert!(
        matches!(first.outcome, JobRequestOutcome::NoJob),
        "{first:?}"
    );
    assert!(first.is_healthy());
    let id = sim.enqueue(JobSpec::script(["echo one"]).name("build"));
    let job = pickup(&sim, &client, &info).await;
    assert_eq!(job.id, id);
    assert_eq!(job.job_info.name, "build");
    assert_eq!(job.step("script").unwrap().script, ["echo one"]);

    let reqs = sim.requests_to("POST", "/api/v4/jobs/request");
    assert_eq!(reqs.len(), 2);
    let body = reqs[0].json();
    assert_eq!(reqs[0].header("runner-token"), Some(TOKEN));
    assert_eq!(body["token"], TOKEN);
    assert_eq!(body["system_id"], SYSTEM_ID);
    assert_eq!(reqs[0].header("accept"), Some("application/json"));
    assert_eq!(reqs[0].header("content-type"), Some("application/json"));
    assert!(reqs[0]
        .header("user-agent")
        .unwrap()
        .starts_with("gitlab-runner "));
    let rid = reqs[0].header("x-request-id").unwrap();
    assert!(
        rid.len() == 32
            && rid
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_ne!(Some(rid), reqs[1].header("x-request-id"));
    // GitLab (the simulator) answers without X-Request-Id: the job's correlation ID is the one
    // drover sent with the request that fetched it.
    assert_eq!(
        Some(job.request_correlation_id.as_str()),
        reqs[1].header("x-request-id")
    );
    let features = body["info"]["features"].as_object().unwrap();
    assert_eq!(features.len(), 31);
    for key in [
        "refspecs",
        "two_phase_job_commit",
        "cancel_gracefully",
        "trace_checksum",
        "masking",
    ] {
        assert_eq!(features[key], true, "{key}");
    }
    assert_eq!(features["shared"], false);
    assert_eq!(body["info"]["executor"], "docker+machine");
    assert_eq!(body["info"]["shell"], "bash");
    assert_eq!(body["info"]["config"]["gpus"], "");
    // No last_update before GitLab sent one; the 204's value is echoed next time.
    assert!(body.get("last_update").is_none());
    let echoed = reqs[1].json()["last_update"].as_str().map(str::to_owned);
    assert!(echoed.is_some(), "last_update was not echoed");
    assert_eq!(echoed, client.last_update());
}

#[tokio::test]
async fn trace_arrives_byte_exact_with_inclusive_content_ranges_and_final_checksum() {
    let sim = sim().await;
    let (client, info) = (client(&sim), info());
    let id = sim.enqueue(JobSpec::default());
    let job = pickup(&sim, &client, &info).await;
    let trace = JobTrace::start(client.clone(), info.clone(), &job, fast()).await;
    assert_eq!(trace.pickup(), Pickup::Proceed);
    assert_eq!(
        sim.job(id).unwrap().state,
        JobState::Running,
        "the ack starts the job"
    );
    let mut w = trace.writer();
    let mut expected = Vec::new();
    for i in 0..200 {
        let line = format!("line {i}: {}\n", "x".repeat(i % 50));
        w.write_all(line.as_bytes()).unwrap();
        expected.extend_from_slice(line.as_bytes());
        if i % 50 == 0 {
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
    }
    let report = trace.finish(JobOutcome::success()).await;
    assert_eq!(report.state, FinalState::Accepted);
    let view = sim.job(id).unwrap();
    assert_eq!(view.state, JobState::Success);
    assert_eq!(view.trace, expected);
    assert_eq!(view.output_matches, Some(true));
    assert_eq!(
        view.checksum.as_deref(),
        Some(gitlab_sim::checksum(&expected).as_str())
    );
    assert_eq!(view.exit_code, None, "exit_code 0 is omitted");

    let patches = sim.requests_to("PATCH", "/trace");
    assert!(
        patches.len() >= 2,
        "the log went out incrementally: {}",
        patches.len()
    );
    let mut offset = 0;
    for p in &patches {
        assert_eq!(p.query, "debug_trace=false");
        assert_eq!(p.header("job-token"), Some(job.token.as_str()));
        assert_eq!(p.header("content-type"), Some("text/plain"));
        let expect = format!("{}-{}", offset, offset + p.body.len() - 1);
        assert_eq!(p.header("content-range"), Some(expect.as_str()));
        offset += p.body.len();
    }
    let puts = sim.requests_to("PUT", &format!("/jobs/{id}"));
    let ack = puts[0].json();
    assert_eq!(ack["state"], "running");
    assert_eq!(ack["output"], serde_json::json!({}));
    assert_eq!(ack["token"], job.token.as_str());
    assert_ne!(
        puts[0].header("accept"),
        Some("application/json"),
        "PUT does not ask for JSON"
    );
    let last = puts.last().unwrap().json();
    assert_eq!(last["state"], "success");
    assert_eq!(last["output"]["bytesize"], expected.len());
    assert_eq!(last["checksum"], last["output"]["checksum"]);
}

#[tokio::test]
async fn chunks_are_at_most_one_mebibyte() {
    let sim = sim().await;
    let (client, info) = (client(&sim), info());
    let id = sim.enqueue(JobSpec::default());
    let job = pickup(&sim, &client, &info).await;
    let trace = JobTrace::start(client.clone(), info.clone(), &job, fast()).await;
    let data: Vec<u8> = (0..(2 * 1024 * 1024 + 123))
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    trace.writer().write_bytes(&data);
    let report = trace.finish(JobOutcome::success()).await;
    assert_eq!(report.state, FinalState::Accepted);
    assert_eq!(sim.trace(id), data);
    let sizes: Vec<usize> = sim
        .requests_to("PATCH", "/trace")
        .iter()
        .map(|r| r.body.len())
        .collect();
    assert_eq!(sizes, [1024 * 1024, 1024 * 1024, 123]);
}

#[tokio::test]
async fn a_lost_patch_answer_is_recovered_from_the_416_range() {
    let sim = sim().await;
    let (client, info) = (client(&sim), info());
    let id = sim.enqueue(JobSpec::default());
    let job = pickup(&sim, &client, &info).await;
    let trace = JobTrace::start(client.clone(), info.clone(), &job, fast()).await;
    // GitLab stores the first chunk, but its answer never arrives: the client resends from
    // its old offset, gets 416 with `Range: 0-<stored>`, and continues from there.
    sim.fault(Fault::once(Route::PatchTrace, FaultKind::DropAfter));
    trace.writer().write_bytes(b"first part\n");
    wait_for("the dropped PATCH", || {
        !sim.requests_to("PATCH", "/trace").is_empty()
    })
    .await;
    trace.writer().write_bytes(b"second part\n");
    let report = trace.finish(JobOutcome::success()).await;
    assert_eq!(report.state, FinalState::Accepted);
    assert_eq!(sim.trace(id), b"first part\nsecond part\n");
    let ranges: Vec<String> = sim
        .requests_to("PATCH", "/trace")
        .iter()
        .map(|r| r.header("content-range").unwrap_or("").to_owned())
        .collect();
    assert_eq!(ranges[0], "0-10");
    assert!(ranges.contains(&"11-22".to_owned()), "{ranges:?}");
    assert!(
        ranges[1].starts_with("0-"),
        "resent from the old offset first: {ranges:?}"
    );
    assert_eq!(sim.job(id).unwrap().output_matches, Some(true));
}

#[tokio::test]
async fn final_update_repeats_on_202_and_resends_the_log_on_412() {
    let sim = sim().await;
    let (client, info) = (client(&sim), info());
    let id = sim.enqueue(JobSpec::default());
    let job = pickup(&sim, &client, &info).await;
    let trace = JobTrace::start(client.clone(), info.clone(), &job, fast()).await;
    trace.writer().write_bytes(b"output\n");
    sim.configure(|s| s.final_pending_rounds = 2);
    let report = trace.finish(JobOutcome::failed("script_failure", 3)).await;
    assert_eq!(report.state, FinalState::Accepted);
    let view = sim.job(id).unwrap();
    assert_eq!(view.final_updates, 3, "two 202s, then 200");
    assert_eq!(view.state, JobState::Failed);
    assert_eq!(view.failure_reason.as_deref(), Some("script_failure"));
    assert_eq!(view.exit_code, Some(3));

    let id = sim.enqueue(JobSpec::default());
    let job = pickup(&sim, &client, &info).await;
    let trace = JobTrace::start(client.clone(), info.clone(), &job, fast()).await;
    trace.writer().write_bytes(b"abc\n");
    sim.fault(Fault::once(Route::UpdateJob, FaultKind::Status(412)));
    let report = trace.finish(JobOutcome::success()).await;
    assert_eq!(report.state, FinalState::Accepted);
    let patches = sim.requests_to("PATCH", &format!("/jobs/{id}/trace"));
    let ranges: Vec<_> = patches
        .iter()
        .filter_map(|r| r.header("content-range"))
        .collect();
    assert_eq!(
        ranges,
        ["0-3", "0-3"],
        "after 412 the log is sent again from 0"
    );
    assert_eq!(sim.job(id).unwrap().state, JobState::Success);
    assert_eq!(sim.trace(id), b"abc\n");
}

#[tokio::test]
async fn final_update_gives_up_after_the_retry_limit() {
    let sim = sim().await;
    let (client, info) = (client(&sim), info());
    sim.enqueue(JobSpec::default());
    let job = pickup(&sim, &client, &info).await;
    let opts = TraceOptions {
        final_update_retry_limit: 3,
        ..fast()
    };
    let trace = JobTrace::start(client.clone(), info.clone(), &job, opts).await;
    sim.fault(Fault {
        route: Route::UpdateJob,
        kind: FaultKind::Status(400),
        times: 100,
    });
    let report = trace.finish(JobOutcome::success()).await;
    assert_eq!(report.state, FinalState::GaveUp);
    assert_eq!(sim.requests_to("PUT", "/jobs/").len(), 1 + 3);
}

#[tokio::test]
async fn retry_after_is_honoured_and_5xx_is_retried_five_times() {
    let sim = sim().await;
    let (client, info) = (client(&sim), info());
    sim.enqueue(JobSpec::default());
    sim.fault(Fault::once(
        Route::RequestJob,
        FaultKind::RetryAfter(429, 1),
    ));
    let started = Instant::now();
    let r = request(&client, &info).await;
    assert!(matches!(r.outcome, JobRequestOutcome::Job(_)), "{r:?}");
    assert!(r.pushed_back);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After: 1 was not honoured"
    );
    assert_eq!(sim.requests_to("POST", "/jobs/request").len(), 2);

    sim.fault(Fault {
        route: Route::RequestJob,
        kind: FaultKind::Status(503),
        times: 5,
    });
    let r = request(&client, &info).await;
    assert!(matches!(r.outcome, JobRequestOutcome::Failed(_)), "{r:?}");
    assert_eq!(r.status, 503);
    assert!(r.is_healthy(), "5xx does not make a runner unhealthy");
    assert_eq!(sim.requests_to("POST", "/jobs/request").len(), 2 + 5);

    sim.fault(Fault::once(Route::RequestJob, FaultKind::Status(501)));
    let r = request(&client, &info).await;
    assert_eq!(r.status, 501);
    assert_eq!(
        sim.requests_to("POST", "/jobs/request").len(),
        2 + 5 + 1,
        "501 is not retried"
    );

    sim.fault(Fault::once(Route::RequestJob, FaultKind::Status(409)));
    let r = request(&client, &info).await;
    assert!(matches!(r.outcome, JobRequestOutcome::Failed(_)) && r.is_healthy());

    sim.fault(Fault::once(Route::RequestJob, FaultKind::DropBefore));
    let r = request(&client, &info).await;
    assert_eq!(r.status, -1);
    assert!(r.is_healthy(), "a network error is not unhealthy");

    let bad = Client::new(&settings(sim.url())).unwrap();
    let r = bad
        .request_job(&JobRequest {
            token: "glrt-unknown",
            info: &info,
            system_id: SYSTEM_ID,
            session: None,
            runner_name: "",
        })
        .await;
    assert!(matches!(r.outcome, JobRequestOutcome::Forbidden));
    assert!(!r.is_healthy());
}

#[tokio::test]
async fn lenient_payloads_and_odd_types() {
    let sim = sim().await;
    let (client, info) = (client(&sim), info());
    sim.enqueue(
        JobSpec::default()
            .override_key("brand_new_field", serde_json::json!({"nested": [1, 2]}))
            .override_key("services", serde_json::Value::Null)
            .override_key(
                "image",
                serde_json::json!({"name": "x", "executor_opts": {"docker": {"user": 1000}}}),
            ),
    );
    let job = pickup(&sim, &client, &info).await;
    assert!(job.services.is_empty());
    assert_eq!(job.image.unwrap().executor_opts.docker.user, "1000");

    sim.enqueue(JobSpec::default().override_key("steps", serde_json::json!("not a list")));
    let r = request(&client, &info).await;
    match r.outcome {
        JobRequestOutcome::Failed(e) => {
            assert_eq!(e.status(), -1);
            assert!(e.to_string().contains("request_job"), "{e}");
        }
        other => panic!("an odd type must be reported, got {other:?}"),
    }
}

#[tokio::test]
async fn graceful_cancel_then_canceled() {
    let sim = sim().await;
    let (client, info) = (client(&sim), info());
    let id = sim.enqueue(JobSpec::default());
    let job = pickup(&sim, &client, &info).await;
    let trace = JobTrace::start(client.clone(), info.clone(), &job, fast()).await;
    let (graceful, abort) = (trace.graceful_cancel(), trace.abort());
    trace.writer().write_bytes(b"working\n");
    sim.cancel(id);
    assert_eq!(sim.job(id).unwrap().state, JobState::Canceling);
    tokio::time::timeout(Duration::from_secs(10), graceful.cancelled())
        .await
        .expect("graceful cancel after canceling");
    assert!(!abort.is_cancelled());
    trace.writer().write_bytes(b"after_script ran\n");
    let report = trace.finish(JobOutcome::failed("job_canceled", 0)).await;
    assert_eq!(report.state, FinalState::Accepted);
    assert_eq!(
        report.failure_reason.as_deref(),
        Some("unknown_failure"),
        "job_canceled is not in Rails' list"
    );
    let view = sim.job(id).unwrap();
    assert_eq!(view.state, JobState::Canceled);
    assert_eq!(view.trace, b"working\nafter_script ran\n");
}

#[tokio::test]
async fn force_cancel_aborts() {
    let sim = sim().await;
    let (client, info) = (client(&sim), info());
    let id = sim.enqueue(JobSpec::default());
    let job = pickup(&sim, &client, &info).await;
    let trace = JobTrace::start(client.clone(), info.clone(), &job, fast()).await;
    let abort = trace.abort();
    sim.force_cancel(id);
    trace.writer().write_bytes(b"x\n");
    tokio::time::timeout(Duration::from_secs(10), abort.cancelled())
        .await
        .expect("abort after canceled");
    let report = trace
        .finish(JobOutcome::failed("runner_system_failure", 1))
        .await;
    assert_eq!(report.state, FinalState::Aborted);
    assert_eq!(sim.job(id).unwrap().state, JobState::Canceled);
}

#[tokio::test]
async fn pickup_ack_decides_drop_or_immediate_cancel() {
    let sim = sim().await;
    let (client, info) = (client(&sim), info());
    // Canceled between the 201 and the ack: dropped silently, no final update.
    let id = sim.enqueue(JobSpec::default());
    let job = pickup(&sim, &client, &info).await;
    sim.force_cancel(id);
    let trace = JobTrace::start(client.clone(), info.clone(), &job, fast()).await;
    assert_eq!(trace.pickup(), Pickup::Abort);
    let report = trace.finish(JobOutcome::success()).await;
    assert_eq!(report.state, FinalState::Dropped);
    assert_eq!(
        sim.requests_to("PUT", &format!("/jobs/{id}")).len(),
        1,
        "only the ack"
    );

    // Canceling at the ack: fail at once with the raw reason.
    let id = sim.enqueue(JobSpec::default());
    let job = pickup(&sim, &client, &info).await;
    sim.cancel(id);
    let trace = JobTrace::start(client.clone(), info.clone(), &job, fast()).await;
    assert_eq!(trace.pickup(), Pickup::Canceling);
    assert!(trace.graceful_cancel().is_cancelled());
    let report = trace
        .finish(JobOutcome::failed_raw("job_canceled", 0))
        .await;
    assert_eq!(report.failure_reason.as_deref(), Some("job_canceled"));
    let last = sim
        .requests_to("PUT", &format!("/jobs/{id}"))
        .last()
        .unwrap()
        .json();
    assert_eq!(last["failure_reason"], "job_canceled");
    assert_eq!(sim.job(id).unwrap().state, JobState::Canceled);

    // A failing ack (500s) still runs the job.
    let id = sim.enqueue(JobSpec::default());
    let job = pickup(&sim, &client, &info).await;
    sim.fault(Fault {
        route: Route::UpdateJob,
        kind: FaultKind::Status(500),
        times: 5,
    });
    let trace = JobTrace::start(client.clone(), info.clone(), &job, fast()).await;
    assert_eq!(trace.pickup(), Pickup::Proceed);
    let _ = trace.finish(JobOutcome::success()).await;
    let _ = id;
}

/// An ack lost with its connection is sent again, so GitLab runs the job: without it the job
/// stays unacknowledged there and its log and result are refused.
#[tokio::test]
async fn a_running_ack_lost_with_the_connection_is_sent_again() {
    let sim = sim().await;
    let (client, info) = (client(&sim), info());
    let id = sim.enqueue(JobSpec::default());
    let job = pickup(&sim, &client, &info).await;
    assert_eq!(sim.job(id).unwrap().state, JobState::Assigned);
    sim.fault(Fault {
        route: Route::UpdateJob,
        kind: FaultKind::DropBefore,
        times: 2,
    });
    let opts = TraceOptions {
        ack_retry_base: Duration::from_millis(20),
        ..fast()
    };
    let trace = JobTrace::start(client.clone(), info.clone(), &job, opts).await;
    assert_eq!(trace.pickup(), Pickup::Proceed);
    assert_eq!(
        sim.job(id).unwrap().state,
        JobState::Running,
        "acknowledged"
    );
    let mut w = trace.writer();
    std::io::Write::write_all(&mut w, b"the job's log\n").unwrap();
    let report = trace.finish(JobOutcome::success()).await;
    assert_eq!(report.state, FinalState::Accepted);
    let view = sim.job(id).unwrap();
    assert_eq!(view.state, JobState::Success);
    assert_eq!(view.trace, b"the job's log\n");
    assert_eq!(view.output_matches, Some(true));
}

#[tokio::test]
async fn keep_alive_when_silent_and_the_server_interval_is_used() {
    let sim = sim().await;
    let (client, info) = (client(&sim), info());
    let id = sim.enqueue(JobSpec::default());
    let job = pickup(&sim, &client, &info).await;
    let opts = TraceOptions {
        force_send_interval: Duration::from_millis(100),
        ..fast()
    };
    let trace = JobTrace::start(client.clone(), info.clone(), &job, opts).await;
    wait_for("two keep-alives", || {
        sim.job(id).unwrap().running_updates >= 3
    })
    .await;
    let keepalive = sim.requests_to("PUT", &format!("/jobs/{id}"))[1].json();
    assert_eq!(keepalive["state"], "running");
    assert_eq!(keepalive["output"]["checksum"], "crc32:00000000");
    // GitLab asks for 1 s between updates: the loop slows down.
    sim.configure(|s| s.trace_update_interval = 1);
    trace.writer().write_bytes(b"a\n");
    wait_for("a PATCH", || !sim.requests_to("PATCH", "/trace").is_empty()).await;
    let t0 = Instant::now();
    trace.writer().write_bytes(b"b\n");
    wait_for("a second PATCH", || {
        sim.requests_to("PATCH", "/trace").len() >= 2
    })
    .await;
    assert!(
        t0.elapsed() >= Duration::from_millis(600),
        "the server interval was ignored"
    );
    let _ = trace.finish(JobOutcome::success()).await;
    assert_eq!(sim.trace(id), b"a\nb\n");
}

#[tokio::test]
async fn trace_size_limit_on_gitlab_aborts_and_output_limit_truncates() {
    let sim = sim().await;
    let (client, info) = (client(&sim), info());
    let id = sim.enqueue(JobSpec::default());
    let job = pickup(&sim, &client, &info).await;
    let opts = TraceOptions {
        output_limit: 64,
        ..fast()
    };
    let trace = JobTrace::start(client.clone(), info.clone(), &job, opts).await;
    trace.writer().write_bytes(&[b'z'; 100]);
    let report = trace.finish(JobOutcome::success()).await;
    let stored = String::from_utf8(sim.trace(id)).unwrap();
    assert!(stored.starts_with(&"z".repeat(64)));
    assert!(stored.contains("exceeded limit of 64 bytes"));
    assert_eq!(report.bytesize as usize, stored.len());

    sim.configure(|s| s.trace_size_limit = Some(10));
    let id = sim.enqueue(JobSpec::default());
    let job = pickup(&sim, &client, &info).await;
    let trace = JobTrace::start(client.clone(), info.clone(), &job, fast()).await;
    let abort = trace.abort();
    trace.writer().write_bytes(&[b'y'; 20]);
    tokio::time::timeout(Duration::from_secs(10), abort.cancelled())
        .await
        .expect("403 on PATCH aborts");
    let report = trace.finish(JobOutcome::success()).await;
    assert_eq!(report.state, FinalState::Aborted);
    assert_eq!(
        sim.job(id).unwrap().failure_reason.as_deref(),
        Some("trace_size_exceeded")
    );
}

#[tokio::test]
async fn runner_endpoints_register_verify_unregister_reset() {
    let sim = sim().await;
    let client = client(&sim);
    sim.add_registration_token("GR1348941regtoken");
    let registered = client
        .register_runner(&RegisterParams {
            registration_token: "GR1348941regtoken".into(),
            description: "ci box".into(),
            tag_list: vec!["a".into(), "b".into()],
            run_untagged: true,
            locked: true,
            ..Default::default()
        })
        .await
        .expect("register");
    assert!(registered.id > 0 && !registered.token.is_empty());
    let reg = sim.requests_to("POST", "/api/v4/runners").remove(0).json();
    assert_eq!(reg["tag_list"], "a,b");
    assert_eq!(reg["token"], "GR1348941regtoken");
    assert_eq!(reg["info"]["executor"], "");
    assert_eq!(reg["info"]["features"]["image"], false);
    assert_eq!(reg["info"]["features"]["two_phase_job_commit"], true);
    assert!(reg.get("maintenance_note").is_none());
    assert_eq!(sim.runner_details(&registered.token).unwrap().2, ["a", "b"]);

    let bad = client
        .register_runner(&RegisterParams {
            registration_token: "wrong".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.status(), 403);
    assert!(
        bad.to_string().contains("check registration token"),
        "{bad}"
    );

    let info = Info::registration();
    let v = client
        .verify_runner(TOKEN, &info, SYSTEM_ID)
        .await
        .expect("verify");
    assert!(v.id > 0);
    assert_eq!(sim.managers(TOKEN), [SYSTEM_ID]);
    assert_eq!(
        client
            .verify_runner("glrt-nope", &info, SYSTEM_ID)
            .await
            .unwrap_err()
            .status(),
        403
    );

    client
        .unregister_manager(TOKEN, SYSTEM_ID)
        .await
        .expect("unregister manager");
    assert!(sim.managers(TOKEN).is_empty());
    assert_eq!(
        client
            .unregister_manager(TOKEN, SYSTEM_ID)
            .await
            .unwrap_err()
            .status(),
        404
    );
    let del = sim.requests_to("DELETE", "/runners/managers").remove(0);
    assert_eq!(del.json()["system_id"], SYSTEM_ID);
    assert_ne!(del.header("accept"), Some("application/json"));

    let reset = client.reset_token(TOKEN).await.expect("reset");
    assert!(reset.token.starts_with("glrt-") && reset.token != TOKEN);
    assert_eq!(
        sim.runner_tokens(),
        vec![reset.token.clone(), registered.token.clone()]
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
    );
    sim.add_pat("glpat-admin");
    let by_pat = client
        .reset_token_with_pat(registered.id, "glpat-admin")
        .await
        .expect("reset by PAT");
    assert_ne!(by_pat.token, registered.token);
    let pat_req = sim
        .requests_to("POST", &format!("/runners/{}/reset", registered.id))
        .remove(0);
    assert_eq!(pat_req.header("private-token"), Some("glpat-admin"));
    assert!(pat_req.body.is_empty());

    client
        .unregister_runner(&by_pat.token)
        .await
        .expect("unregister");
    assert_eq!(
        client
            .unregister_runner(&by_pat.token)
            .await
            .unwrap_err()
            .status(),
        403
    );
}

#[tokio::test]
async fn system_id_is_persisted_and_has_the_right_shape() {
    let dir = tempfile::tempdir().unwrap();
    let id = system_id::load_or_create(&dir.path().join("config.toml"));
    assert!(system_id::is_valid(&id), "{id}");
    assert_eq!(id.len(), 14);
    assert_eq!(
        system_id::load_or_create(&dir.path().join("config.toml")),
        id
    );
}

/// Captures log lines at debug level for the current thread.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

#[tokio::test]
async fn no_token_reaches_a_log_line_at_debug_level() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(capture.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let sim = sim().await;
    let (client, info) = (client(&sim), info());
    sim.add_registration_token("GR1348941secretreg");
    let id = sim.enqueue(JobSpec::default());
    sim.fault(Fault::once(Route::RequestJob, FaultKind::Status(500)));
    let job = pickup(&sim, &client, &info).await;
    let trace = JobTrace::start(client.clone(), info.clone(), &job, fast()).await;
    trace.writer().write_bytes(b"hello\n");
    sim.fault(Fault::once(Route::PatchTrace, FaultKind::Status(502)));
    let _ = trace.finish(JobOutcome::failed("script_failure", 1)).await;
    let reg = client
        .register_runner(&RegisterParams {
            registration_token: "GR1348941secretreg".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let _ = client
        .verify_runner(&reg.token, &Info::registration(), SYSTEM_ID)
        .await;
    let _ = client
        .request_job(&JobRequest {
            token: "glrt-t2_forbiddenTOKENvalue",
            info: &info,
            system_id: SYSTEM_ID,
            session: None,
            runner_name: "",
        })
        .await;
    let bad_url = Client::new(&settings(&format!("{}/ci", sim.url()))).unwrap();
    let _ = bad_url.reset_token(&reg.token).await;

    let text = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("Checking for jobs... received"),
        "logs were captured:\n{text}"
    );
    assert!(text.contains("DEBUG"), "debug lines were captured");
    assert!(
        text.contains("SimRunner"),
        "the short token is logged:\n{text}"
    );
    for secret in [
        TOKEN,
        job.token.as_str(),
        "GR1348941secretreg",
        reg.token.as_str(),
        "glrt-t2_forbiddenTOKENvalue",
    ] {
        assert!(
            !text.contains(secret),
            "a token reached the log: {secret}\n{text}"
        );
    }
    assert!(sim.job(id).is_some());
}

#[tokio::test]
async fn tls_ca_file_is_trusted_and_required() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = test_certs::localhost_server(dir.path());
    let sim = Sim::start_tls(gitlab_sim::TlsFiles { cert, key })
        .await
        .unwrap();
    sim.add_runner(TOKEN);
    assert!(sim.url().starts_with("https://"));
    let info = Info::registration();

    let untrusted = Client::new(&settings(sim.url())).unwrap();
    let e = untrusted
        .verify_runner(TOKEN, &info, SYSTEM_ID)
        .await
        .unwrap_err();
    assert_eq!(e.status(), -1, "{e}");

    let trusted = Client::new(&ClientSettings {
        tls_ca_file: Some(dir.path().join("ca.pem")),
        ..settings(sim.url())
    })
    .unwrap();
    assert_eq!(trusted.server_ca_chain(), None, "no handshake yet");
    trusted
        .verify_runner(TOKEN, &info, SYSTEM_ID)
        .await
        .expect("verify over TLS");
    // The chain a job gets without a configured CA file: the verified path, GitLab's
    // certificate then the root it was verified with (a refused handshake records none).
    assert_eq!(untrusted.server_ca_chain(), None);
    let chain = trusted.server_ca_chain().expect("the verified chain");
    let ders = |pem: &[u8]| -> Vec<Vec<u8>> {
        rustls_pemfile::certs(&mut &pem[..])
            .map(|c| c.expect("PEM").to_vec())
            .collect()
    };
    let expected: Vec<Vec<u8>> = ["server.pem", "ca.pem"]
        .iter()
        .flat_map(|f| ders(&std::fs::read(dir.path().join(f)).unwrap()))
        .collect();
    assert!(
        ders(chain.as_bytes()) == expected,
        "not GitLab's certificate then the root:\n{chain}"
    );
    assert!(chain.ends_with("-----END CERTIFICATE-----"), "{chain}");

    // A CA file that changes is read again for the next call, as upstream rebuilds its TLS
    // configuration when the file's mtime changes: replaced by another CA, the server is no
    // longer trusted; put back, it is again.
    let rotating = dir.path().join("rotating.pem");
    std::fs::copy(dir.path().join("ca.pem"), &rotating).unwrap();
    let renewing = Client::new(&ClientSettings {
        tls_ca_file: Some(rotating.clone()),
        ..settings(sim.url())
    })
    .unwrap();
    renewing
        .verify_runner(TOKEN, &info, SYSTEM_ID)
        .await
        .expect("verify with the right CA");
    test_certs::make_ca(dir.path(), "other");
    let set_mtime = |secs: i64| {
        let t = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64);
        std::fs::File::options()
            .write(true)
            .open(&rotating)
            .unwrap()
            .set_modified(t)
            .unwrap();
    };
    std::fs::copy(dir.path().join("other.pem"), &rotating).unwrap();
    set_mtime(1_000_000);
    let e = renewing
        .verify_runner(TOKEN, &info, SYSTEM_ID)
        .await
        .expect_err("a CA that does not sign the server's certificate");
    assert_eq!(e.status(), -1, "{e}");
    std::fs::copy(dir.path().join("ca.pem"), &rotating).unwrap();
    set_mtime(2_000_000);
    renewing
        .verify_runner(TOKEN, &info, SYSTEM_ID)
        .await
        .expect("verify after the CA came back");

    // The certs/ fallback: <host>.crt in the certificates directory.
    std::fs::create_dir(dir.path().join("certs")).unwrap();
    std::fs::copy(
        dir.path().join("ca.pem"),
        dir.path().join("certs/localhost.crt"),
    )
    .unwrap();
    let runner = drover::config::RunnerConfig {
        url: sim.url().into(),
        ..Default::default()
    };
    let s = ClientSettings::for_runner(&runner, Some(&dir.path().join("certs")));
    assert_eq!(s.tls_ca_file, Some(dir.path().join("certs/localhost.crt")));
    Client::new(&s)
        .unwrap()
        .verify_runner(TOKEN, &info, SYSTEM_ID)
        .await
        .expect("verify with certs/");

    let missing = Client::new(&ClientSettings {
        tls_ca_file: Some(dir.path().join("nope.pem")),
        ..settings(sim.url())
    })
    .unwrap_err();
    assert_eq!(missing.status(), -100);
    assert!(missing.to_string().contains("nope.pem"), "{missing}");
}
