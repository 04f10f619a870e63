//! The GitLab simulator's own behaviour that the client tests do not reach: artifacts upload
//! and download (query or multipart parameters, 413, direct-download redirect, dependency
//! tokens), git repositories over HTTP, long polling and the two-phase ack.

use std::time::{Duration, Instant};

use gitlab_sim::{JobSpec, JobState, Sim};
use serde_json::{json, Value};

const TOKEN: &str = "glrt-t1_SimOwnTests000000";

/// reqwest is built without a default TLS provider: install ring's (plain HTTP is used here).
fn builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}

async fn pick(sim: &Sim, http: &reqwest::Client, features: Value) -> (u16, Option<Value>) {
    let r = http
        .post(format!("{}/api/v4/jobs/request", sim.url()))
        .header("RUNNER-TOKEN", TOKEN)
        .json(
            &json!({"token": TOKEN, "system_id": "s_0123456789ab", "info": {"features": features}}),
        )
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.ok())
}

#[tokio::test]
async fn artifacts_round_trip_with_the_dependency_token() {
    let sim = Sim::start().await.unwrap();
    sim.add_runner(TOKEN);
    let http = builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let build = sim.enqueue(JobSpec::default().name("build"));
    let (status, job) = pick(&sim, &http, json!({"refspecs": true})).await;
    assert_eq!(status, 201);
    let job = job.unwrap();
    assert_eq!(
        sim.job(build).unwrap().state,
        JobState::Running,
        "no two-phase feature: running at once"
    );
    let token = job["token"].as_str().unwrap().to_owned();
    let upload = |query: &'static str, fields: bool, bytes: Vec<u8>| {
        let mut form = reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(bytes).file_name("artifacts.zip"),
        );
        if fields {
            form = form
                .text("artifact_format", "gzip")
                .text("artifact_type", "junit");
        }
        http.post(format!(
            "{}/api/v4/jobs/{build}/artifacts{query}",
            sim.url()
        ))
        .header("JOB-TOKEN", token.clone())
        .multipart(form)
        .send()
    };
    let r = upload(
        "?artifact_format=zip&artifact_type=archive&expire_in=1%20week",
        false,
        b"PK-zip".to_vec(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 201);
    let r = upload("", true, b"gz".to_vec()).await.unwrap();
    assert_eq!(r.status(), 201);
    sim.configure(|s| s.artifact_size_limit = 4);
    let r = upload("", false, b"too large".to_vec()).await.unwrap();
    assert_eq!(r.status(), 413);
    let view = sim.job(build).unwrap();
    assert_eq!(view.artifacts.len(), 2);
    assert_eq!(
        (
            view.artifacts[0].params_from.as_str(),
            view.artifacts[0].expire_in.as_str()
        ),
        ("query", "1 week")
    );
    assert_eq!(
        (
            view.artifacts[1].params_from.as_str(),
            view.artifacts[1].format.as_str()
        ),
        ("multipart", "gzip")
    );

    let test = sim.enqueue(JobSpec::default().name("test").dependency(build));
    let (_, job) = pick(&sim, &http, json!({"refspecs": true})).await;
    let job = job.unwrap();
    assert_eq!(job["id"], test);
    let dep = &job["dependencies"][0];
    assert_eq!(dep["artifacts_file"]["filename"], "artifacts.zip");
    assert_eq!(dep["token"], token.as_str());
    let url = format!("{}/api/v4/jobs/{build}/artifacts", sim.url());
    let r = http
        .get(format!("{url}?direct_download=true"))
        .header("JOB-TOKEN", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 302);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    let body = http
        .get(location)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&body[..], b"PK-zip");
    let r = http
        .get(&url)
        .header("JOB-TOKEN", job["token"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        403,
        "the dependent job's own token does not open its dependency"
    );
}

#[tokio::test]
async fn repositories_clone_over_http() {
    let sim = Sim::start().await.unwrap();
    let repo = sim
        .create_repo("demo", &[("README.md", "hello\n"), ("src/a.txt", "a\n")])
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = repo.url.clone();
    let target = dir.path().join("clone");
    let out = tokio::process::Command::new("git")
        .args(["clone", "-q", &url, target.to_str().unwrap()])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(target.join("src/a.txt")).unwrap(),
        "a\n"
    );
    let head = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(&target)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&head.stdout).trim(), repo.sha);
}

#[tokio::test]
async fn long_polling_holds_until_a_job_arrives_and_two_phase_waits_for_the_ack() {
    let sim = Sim::start().await.unwrap();
    sim.add_runner(TOKEN);
    sim.configure(|s| s.long_poll_ms = 5_000);
    let http = builder().build().unwrap();
    let r = http
        .post(format!("{}/api/v4/jobs/request", sim.url()))
        .header("RUNNER-TOKEN", TOKEN)
        .json(&json!({"token": TOKEN, "system_id": "s_0123456789ab"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let version = r.headers()["x-gitlab-last-update"]
        .to_str()
        .unwrap()
        .to_owned();
    let poll = async {
        let t0 = Instant::now();
        let r = http
            .post(format!("{}/api/v4/jobs/request", sim.url()))
            .header("RUNNER-TOKEN", TOKEN)
            .json(&json!({"token": TOKEN, "system_id": "s_0123456789ab", "last_update": version}))
            .send()
            .await;
        (r, t0.elapsed())
    };
    let enqueue = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        sim.enqueue(JobSpec::default())
    };
    let ((r, waited), id) = tokio::join!(poll, enqueue);
    let r = r.unwrap();
    assert_eq!(r.status(), 204);
    assert!(r.headers().get("x-gitlab-last-update").is_none());
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(4),
        "held until the enqueue: {waited:?}"
    );
    let (status, _) = pick(
        &sim,
        &http,
        json!({"refspecs": true, "two_phase_job_commit": true}),
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(
        sim.job(id).unwrap().state,
        JobState::Assigned,
        "pending until the ack"
    );
}

/// A two-phase assignment whose ack never came: the trace and the final update are refused as
/// for any job not processing on the runner, and after the ack timeout the job goes back to
/// the queue with a new token, so the next pickup runs it.
#[tokio::test]
async fn an_unacknowledged_assignment_is_refused_and_requeued() {
    let sim = Sim::start().await.unwrap();
    sim.add_runner(TOKEN);
    sim.configure(|s| s.ack_timeout_ms = Some(200));
    let http = builder().build().unwrap();
    let id = sim.enqueue(JobSpec::default());
    let features = json!({"refspecs": true, "two_phase_job_commit": true});
    let (status, job) = pick(&sim, &http, features.clone()).await;
    assert_eq!(status, 201);
    let old = job.unwrap()["token"].as_str().unwrap().to_owned();

    let patch = http
        .patch(format!("{}/api/v4/jobs/{id}/trace", sim.url()))
        .header("JOB-TOKEN", &old)
        .header("Content-Range", "0-4")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(patch.status(), 403, "the log of an unacknowledged job");
    let put = http
        .put(format!("{}/api/v4/jobs/{id}", sim.url()))
        .json(&json!({"token": old, "state": "success", "output": {"checksum": "crc32:00000000", "bytesize": 0}}))
        .header("JOB-TOKEN", &old)
        .send()
        .await
        .unwrap();
    assert_eq!(
        put.status(),
        403,
        "the final state of an unacknowledged job"
    );
    assert_eq!(put.headers()["job-status"], "pending");
    assert_eq!(sim.job(id).unwrap().state, JobState::Assigned);

    tokio::time::sleep(Duration::from_millis(250)).await;
    let (status, job) = pick(&sim, &http, features).await;
    assert_eq!(status, 201, "handed out again after the ack timeout");
    let job = job.unwrap();
    assert_eq!(job["id"], id);
    assert_ne!(job["token"].as_str().unwrap(), old, "a new job token");
    let view = sim.job(id).unwrap();
    assert_eq!((view.state, view.requeues), (JobState::Assigned, 1));
}
