//! The metrics HTTP server over real TCP on 127.0.0.1: every upstream metric family with its
//! type and exactly its labels, the methods `/metrics` answers, readiness, the jobs list, and
//! `gitlab_runner_errors_total` through a real `tracing` subscriber.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use drover::engine::{Counts, TargetLabels};
use drover::metrics::server::{self, ListenAddress, Readiness};
use drover::metrics::{
    BuildInfo, JobPickup, JobState, MachineAction, Metrics, ProcessingFailure, RunnerLabels,
    SlotOperation,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------------------------------------
// A plain HTTP/1.1 client and an exposition-format parser, so the test depends on neither the
// server's framework nor the Prometheus crate's own encoder.

struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

async fn http(addr: SocketAddr, method: &str, path: &str) -> Answer {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let req = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw))
        .await
        .expect("answer within 10 s")
        .expect("read");
    let text = String::from_utf8(raw).expect("UTF-8 answer");
    let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .expect("status line")
        .split(' ')
        .nth(1)
        .expect("status");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Answer {
        status: status.parse().expect("numeric status"),
        headers,
        body: body.to_string(),
    }
}

#[derive(Debug, Default)]
struct Family {
    kind: String,
    help: bool,
    /// Every sample: (sample name, labels, value).
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (name, after) = rest.split_once("=\"").expect("label=\"");
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().expect("closing quote") {
                (_, '\\') => match chars.next().expect("escape").1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        out.insert(name.trim_start_matches(',').to_string(), value);
        rest = &after[end + 1..];
    }
    out
}

fn parse_exposition(text: &str) -> BTreeMap<String, Family> {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("help text");
            families.entry(name.into()).or_default().help = !help.is_empty();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("type");
            families.entry(name.into()).or_default().kind = kind.into();
        } else {
            let (series, value) = line.rsplit_once(' ').expect("value");
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, parse_labels(l.strip_suffix('}').expect("}"))),
                None => (series, BTreeMap::new()),
            };
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    let base = name.strip_suffix(s)?;
                    (families.get(base)?.kind == "histogram").then_some(base)
                })
                .unwrap_or(name);
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().expect("numeric value"),
            };
            families
                .get_mut(family)
                .unwrap_or_else(|| panic!("sample {name} before its # TYPE"))
                .samples
                .push((name.to_string(), labels, value));
        }
    }
    families
}

/// Label names of a family's samples, `le` left out.
fn label_names(f: &Family) -> BTreeSet<BTreeSet<String>> {
    f.samples
        .iter()
        .map(|(_, l, _)| l.keys().filter(|k| *k != "le").cloned().collect())
        .collect()
}

fn value(fams: &BTreeMap<String, Family>, sample: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let family = ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|s| sample.strip_suffix(s).filter(|b| fams.contains_key(*b)))
        .unwrap_or(sample);
    fams.get(family)?
        .samples
        .iter()
        .find(|(n, l, _)| {
            n == sample
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| *v)
}

fn buckets(fams: &BTreeMap<String, Family>, family: &str) -> Vec<String> {
    let mut les: Vec<String> = Vec::new();
    for (n, l, _) in &fams[family].samples {
        if n.ends_with("_bucket") {
            let le = l["le"].clone();
            if !les.contains(&le) {
                les.push(le);
            }
        }
    }
    les
}

// ---------------------------------------------------------------------------------------------

struct Running {
    addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Cancels the server and waits (at most 3 s) for it to stop cleanly.
    async fn shut_down(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(3), self.task)
            .await
            .expect("the server stops within 3 s of the cancel")
            .expect("the server task did not panic");
    }
}

async fn bind_loopback() -> tokio::net::TcpListener {
    ListenAddress::parse("127.0.0.1:0")
        .unwrap()
        .bind()
        .await
        .expect("bind")
}

async fn start(metrics: &Metrics, readiness: &Readiness) -> Running {
    let listener = bind_loopback().await;
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let task = tokio::spawn(server::serve(
        listener,
        metrics.clone(),
        readiness.clone(),
        stop.clone(),
    ));
    Running { addr, stop, task }
}

fn metrics() -> Metrics {
    Metrics::new("s_0123456789ab", &BuildInfo::current()).expect("registry")
}

fn runner_a() -> RunnerLabels {
    RunnerLabels::new("t1_abcdef", "runner-a")
}

fn pickup(url: &str) -> JobPickup<'_> {
    JobPickup {
        url,
        time_in_queue_seconds: 4.5,
        project_jobs_running: "+Inf",
        queue_size: Some(7),
        queue_depth: Some(3),
    }
}

const R: &[&str] = &["runner", "runner_name", "system_id"];
const T: &[&str] = &[
    "target_zone",
    "target_region",
    "target_project",
    "target_machine_type",
];

/// Every upstream family: (name, type, labels in upstream's order).
fn upstream_families() -> Vec<(&'static str, &'static str, Vec<&'static str>)> {
    let r = |extra: &[&'static str]| -> Vec<&'static str> { [R, extra].concat() };
    let a =
        |first: &'static str| -> Vec<&'static str> { [&[first][..], T, &["executor"]].concat() };
    vec![
        (
            "gitlab_runner_version_info",
            "gauge",
            vec![
                "name",
                "version",
                "revision",
                "branch",
                "go_version",
                "built_at",
                "os",
                "architecture",
            ],
        ),
        ("gitlab_runner_concurrent", "gauge", vec![]),
        ("gitlab_runner_limit", "gauge", r(&[])),
        (
            "gitlab_runner_jobs",
            "gauge",
            r(&["state", "stage", "executor_stage"]),
        ),
        ("gitlab_runner_jobs_total", "counter", r(&[])),
        ("gitlab_runner_job_duration_seconds", "histogram", r(&[])),
        (
            "gitlab_runner_job_queue_duration_seconds",
            "histogram",
            r(&["project_jobs_running"]),
        ),
        ("gitlab_runner_job_queue_size", "gauge", r(&[])),
        ("gitlab_runner_job_queue_depth", "gauge", r(&[])),
        (
            "gitlab_runner_acceptable_job_queuing_duration_exceeded_total",
            "counter",
            r(&[]),
        ),
        (
            "gitlab_runner_job_stage_duration_seconds",
            "histogram",
            r(&["stage"]),
        ),
        (
            "gitlab_runner_request_concurrency",
            "gauge",
            vec!["runner", "system_id"],
        ),
        (
            "gitlab_runner_request_concurrency_exceeded_total",
            "counter",
            vec!["runner", "system_id"],
        ),
        (
            "gitlab_runner_request_concurrency_hard_limit",
            "gauge",
            vec!["runner", "system_id"],
        ),
        (
            "gitlab_runner_request_concurrency_adaptive_limit",
            "gauge",
            vec!["runner", "system_id"],
        ),
        (
            "gitlab_runner_request_concurrency_used_limit",
            "gauge",
            vec!["runner", "system_id"],
        ),
        (
            "gitlab_runner_api_request_statuses_total",
            "counter",
            vec!["runner", "system_id", "endpoint", "status", "method"],
        ),
        (
            "gitlab_runner_api_request_duration_seconds",
            "histogram",
            vec!["runner", "system_id", "endpoint", "status_class", "method"],
        ),
        (
            "gitlab_runner_api_request_retries_total",
            "counter",
            vec!["path", "method"],
        ),
        ("gitlab_runner_errors_total", "counter", vec!["level"]),
        (
            "gitlab_runner_failed_jobs_total",
            "counter",
            r(&["failure_reason"]),
        ),
        ("gitlab_runner_worker_slots_number", "gauge", vec![]),
        (
            "gitlab_runner_worker_slot_operations_total",
            "counter",
            vec!["operation"],
        ),
        ("gitlab_runner_worker_feeds_total", "counter", r(&[])),
        (
            "gitlab_runner_worker_feed_failures_total",
            "counter",
            r(&[]),
        ),
        (
            "gitlab_runner_worker_processing_failures_total",
            "counter",
            [&["failure_type"][..], R].concat(),
        ),
        (
            "gitlab_runner_autoscaling_actions_total",
            "counter",
            a("action"),
        ),
        (
            "gitlab_runner_autoscaling_machine_states",
            "gauge",
            a("state"),
        ),
        (
            "gitlab_runner_autoscaling_machine_creation_duration_seconds",
            "histogram",
            vec!["executor"],
        ),
        (
            "gitlab_runner_autoscaling_machine_stopping_duration_seconds",
            "histogram",
            vec!["executor"],
        ),
        (
            "gitlab_runner_autoscaling_machine_removal_duration_seconds",
            "histogram",
            vec!["executor"],
        ),
        (
            "gitlab_runner_autoscaling_machine_failed_creation_duration_seconds",
            "histogram",
            vec!["executor"],
        ),
    ]
}

/// Calls every method of the API once.
fn exercise(m: &Metrics) -> drover::metrics::RunningJob {
    m.set_concurrent(10);
    m.worker_slots(10);
    m.worker_slot_operation(SlotOperation::Started);
    m.api_attempts("/api/v4/jobs/request", "POST", 1);
    let r = m.runner(&runner_a());
    r.set_limit(4);
    r.feed();
    r.feed_failure();
    r.processing_failure(ProcessingFailure::NoFreeExecutor);
    r.request_concurrency(1);
    r.request_concurrency_exceeded();
    r.request_concurrency_limits(3, 1.5, 2);
    r.api_request("request_job", "POST", 201, Duration::from_millis(120));
    r.acceptable_queuing_duration_exceeded();
    r.stage_duration("step_script", Duration::from_secs(12));
    let done = r.job_started(pickup("https://gitlab.example/g/p/-/jobs/1"));
    done.finish(Some("script_failure"));
    let a = m.autoscaling();
    let google = TargetLabels {
        zone: "europe-west1-b".into(),
        region: "europe-west1".into(),
        project: "proj".into(),
        machine_type: "n1-standard-1".into(),
    };
    a.action(MachineAction::Created, &google);
    a.creation_duration(40.0);
    a.failed_creation_duration(2.0);
    a.stopping_duration(2.0);
    a.removal_duration(2.0);
    let counts = Counts {
        idle: 2,
        used: 1,
        ..Counts::default()
    };
    a.set_machine_states(vec![(google, counts)]);
    r.job_started(pickup("https://gitlab.example/g/p/-/jobs/2"))
}

#[tokio::test]
async fn every_upstream_family_is_served_with_its_type_and_exactly_its_labels() {
    let m = metrics();
    let _job = exercise(&m);
    let srv = start(&m, &Readiness::new()).await;
    let got = http(srv.addr, "GET", "/metrics").await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let fams = parse_exposition(&got.body);
    let want = upstream_families();
    for (name, kind, labels) in &want {
        let f = fams
            .get(*name)
            .unwrap_or_else(|| panic!("{name} missing from:\n{}", got.body));
        assert_eq!(f.kind, *kind, "{name}");
        assert!(f.help, "{name} has help text");
        assert!(!f.samples.is_empty(), "{name} has samples");
        let expect: BTreeSet<String> = labels.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            label_names(f),
            BTreeSet::from([expect]),
            "{name}: every series has exactly upstream's labels"
        );
    }
    // Nothing else but the process collector; no go_* pretending to be Go.
    let extra: Vec<&String> = fams
        .keys()
        .filter(|n| !want.iter().any(|(w, _, _)| w == n) && !n.starts_with("process_"))
        .collect();
    assert!(extra.is_empty(), "unexpected families {extra:?}");
    for p in [
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        let v = value(&fams, p, &[]).unwrap_or_else(|| panic!("{p} missing"));
        // CPU seconds move in clock ticks: a young test process may show 0.
        let floor = if p == "process_cpu_seconds_total" {
            0.0
        } else {
            1.0
        };
        assert!(v >= floor, "{p} = {v}");
    }
    srv.shut_down().await;
}

#[tokio::test]
async fn values_buckets_and_constant_series_are_upstreams() {
    let m = metrics();
    let job = exercise(&m);
    job.set_state(JobState::Running);
    job.set_stage("step_script");
    job.set_executor_stage("docker_run");
    let body = String::from_utf8(m.encode_text().unwrap()).unwrap();
    let f = parse_exposition(&body);
    let ra = [
        ("runner", "t1_abcdef"),
        ("runner_name", "runner-a"),
        ("system_id", "s_0123456789ab"),
    ];
    let with =
        |extra: &[(&'static str, &'static str)]| -> Vec<(&str, &str)> { [&ra[..], extra].concat() };
    assert_eq!(value(&f, "gitlab_runner_jobs_total", &ra), Some(2.0));
    assert_eq!(value(&f, "gitlab_runner_limit", &ra), Some(4.0));
    assert_eq!(value(&f, "gitlab_runner_job_queue_size", &ra), Some(7.0));
    assert_eq!(value(&f, "gitlab_runner_job_queue_depth", &ra), Some(3.0));
    assert_eq!(
        value(
            &f,
            "gitlab_runner_job_queue_duration_seconds_count",
            &with(&[("project_jobs_running", "+Inf")])
        ),
        Some(2.0)
    );
    assert_eq!(
        value(&f, "gitlab_runner_job_duration_seconds_count", &ra),
        Some(1.0),
        "only the finished job is observed"
    );
    assert_eq!(
        value(
            &f,
            "gitlab_runner_failed_jobs_total",
            &with(&[("failure_reason", "script_failure")])
        ),
        Some(1.0)
    );
    // gitlab_runner_jobs: the idle series at 0, and the running job's permutation.
    assert_eq!(
        value(
            &f,
            "gitlab_runner_jobs",
            &with(&[
                ("state", "idle"),
                ("stage", "idle"),
                ("executor_stage", "idle")
            ])
        ),
        Some(0.0)
    );
    assert_eq!(
        value(
            &f,
            "gitlab_runner_jobs",
            &with(&[
                ("state", "running"),
                ("stage", "step_script"),
                ("executor_stage", "docker_run")
            ])
        ),
        Some(1.0)
    );
    // Processing failures and slot operations exist with 0 from the start.
    for (t, v) in [
        ("other", 0.0),
        ("no_free_executor", 1.0),
        ("job_failure", 0.0),
    ] {
        assert_eq!(
            value(
                &f,
                "gitlab_runner_worker_processing_failures_total",
                &with(&[("failure_type", t)])
            ),
            Some(v),
            "{t}"
        );
    }
    assert_eq!(
        value(
            &f,
            "gitlab_runner_worker_slot_operations_total",
            &[("operation", "stopped")]
        ),
        Some(0.0)
    );
    let api = [
        ("runner", "t1_abcdef"),
        ("system_id", "s_0123456789ab"),
        ("endpoint", "request_job"),
        ("method", "post"),
    ];
    assert_eq!(
        value(
            &f,
            "gitlab_runner_api_request_statuses_total",
            &[&api[..], &[("status", "201")]].concat()
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &f,
            "gitlab_runner_api_request_duration_seconds_count",
            &[&api[..], &[("status_class", "2xx")]].concat()
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &f,
            "gitlab_runner_api_request_retries_total",
            &[("path", "/api/v4/jobs/request"), ("method", "post")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &f,
            "gitlab_runner_request_concurrency_adaptive_limit",
            &[("runner", "t1_abcdef")]
        ),
        Some(1.5)
    );
    assert_eq!(
        value(
            &f,
            "gitlab_runner_autoscaling_machine_states",
            &[
                ("state", "idle"),
                ("target_zone", "europe-west1-b"),
                ("target_region", "europe-west1"),
                ("executor", "docker+machine")
            ]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &f,
            "gitlab_runner_autoscaling_actions_total",
            &[("action", "created"), ("target_project", "proj")]
        ),
        Some(1.0)
    );
    let v = value(
        &f,
        "gitlab_runner_version_info",
        &[("name", "drover"), ("os", "linux")],
    );
    assert_eq!(v, Some(1.0));

    let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        buckets(&f, "gitlab_runner_job_duration_seconds"),
        list(&[
            "30", "60", "300", "600", "1800", "3600", "7200", "10800", "18000", "36000", "+Inf"
        ])
    );
    let queue = list(&[
        "1", "3", "10", "30", "60", "120", "300", "900", "1800", "3600", "+Inf",
    ]);
    assert_eq!(
        buckets(&f, "gitlab_runner_job_queue_duration_seconds"),
        queue
    );
    assert_eq!(
        buckets(&f, "gitlab_runner_job_stage_duration_seconds"),
        queue
    );
    assert_eq!(
        buckets(&f, "gitlab_runner_api_request_duration_seconds"),
        list(&["0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "+Inf"])
    );
    let machine = list(&[
        "1", "3", "5", "10", "30", "50", "60", "80", "90", "120", "+Inf",
    ]);
    for h in ["stopping", "removal", "failed_creation"] {
        let name = format!("gitlab_runner_autoscaling_machine_{h}_duration_seconds");
        assert_eq!(buckets(&f, &name), machine, "{name}");
    }
    let creation: Vec<f64> = buckets(
        &f,
        "gitlab_runner_autoscaling_machine_creation_duration_seconds",
    )
    .iter()
    .map(|b| {
        if b == "+Inf" {
            f64::INFINITY
        } else {
            b.parse().unwrap()
        }
    })
    .collect();
    assert_eq!(creation.len(), 11);
    for (i, b) in creation[..10].iter().enumerate() {
        let want = 30.0 * 1.25_f64.powi(i as i32);
        assert!((b - want).abs() < 1e-6, "bucket {i}: {b} vs {want}");
    }
}

#[tokio::test]
async fn with_no_machines_the_state_gauge_shows_six_states_with_empty_targets() {
    let m = metrics();
    let f = parse_exposition(&String::from_utf8(m.encode_text().unwrap()).unwrap());
    let states = &f["gitlab_runner_autoscaling_machine_states"].samples;
    let names: BTreeSet<&str> = states.iter().map(|(_, l, _)| l["state"].as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "acquired",
            "creating",
            "idle",
            "used",
            "removing",
            "stuck-on-removing"
        ])
    );
    for (_, l, v) in states {
        assert_eq!(*v, 0.0);
        for t in T {
            assert_eq!(l[*t], "", "{t}");
        }
    }
    // The errors counter has its four levels from the start; no runner means no jobs series.
    for level in ["panic", "fatal", "error", "warning"] {
        assert_eq!(
            value(&f, "gitlab_runner_errors_total", &[("level", level)]),
            Some(0.0),
            "{level}"
        );
    }
    assert!(!f.contains_key("gitlab_runner_jobs"));
}

#[tokio::test]
async fn metrics_answers_get_and_head_only_and_unknown_paths_are_404() {
    let m = metrics();
    let srv = start(&m, &Readiness::new()).await;
    let head = http(srv.addr, "HEAD", "/metrics").await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty(), "HEAD has no body: {:?}", head.body);
    assert!(head.headers["content-type"].starts_with("text/plain; version=0.0.4"));
    for method in ["POST", "PUT", "DELETE"] {
        let a = http(srv.addr, method, "/metrics").await;
        assert_eq!(a.status, 405, "{method}");
        assert!(
            a.headers["allow"].contains("GET"),
            "{method}: {:?}",
            a.headers
        );
    }
    for path in [
        "/",
        "/debug/process/state",
        "/debug/pprof/",
        "/metricsx",
        "/health",
    ] {
        assert_eq!(http(srv.addr, "GET", path).await.status, 404, "{path}");
    }
    srv.shut_down().await;
}

#[tokio::test]
async fn readiness_flips_with_the_manager() {
    let m = metrics();
    let ready = Readiness::new();
    let srv = start(&m, &ready).await;
    let a = http(srv.addr, "GET", "/health/ready").await;
    assert_eq!((a.status, a.body.as_str()), (503, "not ready"));
    ready.set_ready(true);
    let a = http(srv.addr, "GET", "/health/ready").await;
    assert_eq!((a.status, a.body.as_str()), (200, "ready"));
    ready.set_ready(false);
    assert_eq!(http(srv.addr, "GET", "/health/ready").await.status, 503);
    srv.shut_down().await;
}

#[tokio::test]
async fn the_jobs_list_has_one_upstream_line_per_running_job() {
    let m = metrics();
    let r = m.runner(&runner_a());
    let srv = start(&m, &Readiness::new()).await;
    let empty = http(srv.addr, "GET", "/debug/jobs/list").await;
    assert_eq!(empty.status, 200);
    assert_eq!(empty.body, "");
    assert_eq!(empty.headers["x-list-version"], "2");
    assert_eq!(empty.headers["content-type"], "text/plain");

    let first = r.job_started(pickup("https://gitlab.example/g/p/-/jobs/11"));
    first.set_state(JobState::Running);
    first.set_stage("step_script");
    first.set_executor_stage("docker_run");
    let second = r.job_started(pickup("https://gitlab.example/g/p/-/jobs/12"));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let list = http(srv.addr, "GET", "/debug/jobs/list").await;
    let line = regex::Regex::new(
        r"^url=(\S+) state=(\w+) stage=(\S*) executor_stage=(\S*) duration=((\d+h)?(\d+m)?\d+(\.\d+)?(s|ms|µs|ns))$",
    )
    .unwrap();
    let lines: Vec<&str> = list.body.lines().collect();
    assert_eq!(lines.len(), 2, "{}", list.body);
    assert!(list.body.ends_with('\n'));
    let c = line
        .captures(lines[0])
        .unwrap_or_else(|| panic!("{}", lines[0]));
    assert_eq!(&c[1], "https://gitlab.example/g/p/-/jobs/11");
    assert_eq!(
        (&c[2], &c[3], &c[4]),
        ("running", "step_script", "docker_run")
    );
    let c = line
        .captures(lines[1])
        .unwrap_or_else(|| panic!("{}", lines[1]));
    assert_eq!(&c[1], "https://gitlab.example/g/p/-/jobs/12");
    assert_eq!((&c[2], &c[3], &c[4]), ("pending", "", ""));
    assert!(c[5].ends_with("ms"), "a 20 ms old job: {}", &c[5]);

    first.finish(None);
    drop(second);
    let list = http(srv.addr, "GET", "/debug/jobs/list").await;
    assert_eq!(list.body, "", "finished and dropped jobs leave the list");
    let f = parse_exposition(&String::from_utf8(m.encode_text().unwrap()).unwrap());
    assert_eq!(
        value(
            &f,
            "gitlab_runner_job_duration_seconds_count",
            &[("runner", "t1_abcdef")]
        ),
        Some(2.0)
    );
    assert!(
        !f.contains_key("gitlab_runner_failed_jobs_total"),
        "no failure reason, no failed job"
    );
    srv.shut_down().await;
}

#[tokio::test]
async fn errors_total_counts_warnings_and_errors_through_a_real_subscriber() {
    use tracing_subscriber::layer::SubscriberExt;
    let m = metrics();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::INFO)
        .with(m.errors_layer());
    tracing::subscriber::with_default(subscriber, || {
        tracing::debug!("not written, not counted");
        tracing::info!("written, not an error");
        tracing::warn!("one warning");
        tracing::error!("one error");
        tracing::error!(job = 7, "another error");
    });
    let f = parse_exposition(&String::from_utf8(m.encode_text().unwrap()).unwrap());
    let level = |l| value(&f, "gitlab_runner_errors_total", &[("level", l)]);
    assert_eq!(level("warning"), Some(1.0));
    assert_eq!(level("error"), Some(2.0));
    assert_eq!(level("panic"), Some(0.0));
    assert_eq!(level("fatal"), Some(0.0));

    // With the log level at error, warnings are not written and so not counted.
    let quiet = tracing_subscriber::registry()
        .with(tracing_subscriber::filter::LevelFilter::ERROR)
        .with(m.errors_layer());
    tracing::subscriber::with_default(quiet, || tracing::warn!("dropped"));
    let f = parse_exposition(&String::from_utf8(m.encode_text().unwrap()).unwrap());
    assert_eq!(
        value(&f, "gitlab_runner_errors_total", &[("level", "warning")]),
        Some(1.0)
    );
}

#[tokio::test]
async fn a_taken_port_is_a_clear_error_and_shutdown_is_prompt() {
    let m = metrics();
    let srv = start(&m, &Readiness::new()).await;
    let taken = ListenAddress::parse(&srv.addr.to_string()).unwrap();
    let e = taken.bind().await.unwrap_err().to_string();
    assert!(e.contains(&srv.addr.to_string()), "{e}");
    assert!(e.contains("listen_address"), "{e}");
    // Neither an idle connection nor a client stuck half-way through its request holds the
    // shutdown up for longer than the grace period.
    let idle = TcpStream::connect(srv.addr).await.unwrap();
    let mut stuck = TcpStream::connect(srv.addr).await.unwrap();
    stuck
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    srv.stop.cancel();
    let limit = server::SHUTDOWN_GRACE + Duration::from_secs(3);
    tokio::time::timeout(limit, srv.task)
        .await
        .expect("the server stops within its grace period")
        .unwrap();
    drop((idle, stuck));
}

/// `cli::logging::install_with` sets the process-wide subscriber, so this runs in a child
/// process (this test binary again, this test alone) to keep the other tests' logs out.
#[test]
fn the_run_commands_subscriber_writes_and_counts_warnings_and_errors() {
    const CHILD: &str = "DROVER_TEST_LOGGING_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let m = metrics();
        let settings = drover::cli::logging::settings(
            false,
            Some("warn"),
            None,
            tracing_subscriber::filter::LevelFilter::INFO,
        )
        .expect("settings");
        drover::cli::logging::install_with(settings, Some(m.errors_layer()));
        tracing::info!("below the level: neither written nor counted");
        tracing::warn!("child warning line");
        tracing::error!("child error line");
        let f = parse_exposition(&String::from_utf8(m.encode_text().unwrap()).unwrap());
        let level = |l| value(&f, "gitlab_runner_errors_total", &[("level", l)]);
        assert_eq!((level("warning"), level("error")), (Some(1.0), Some(1.0)));
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "the_run_commands_subscriber_writes_and_counts_warnings_and_errors",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .expect("the test binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 passed"),
        "the child ran the test:\n{stdout}"
    );
    assert!(stderr.contains("child warning line"), "{stderr}");
    assert!(stderr.contains("child error line"), "{stderr}");
    assert!(!stderr.contains("below the level"), "{stderr}");
}

/// Slowloris and held connections: clients that open connections and send half a request (or
/// nothing, or one request and then sit idle) take at most `max_connections` slots, are closed
/// after the header timeout, and `/metrics` keeps answering meanwhile.
#[tokio::test]
async fn held_and_half_sent_connections_are_bounded_and_timed_out() {
    let listener = bind_loopback().await;
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let limits = server::ServeLimits {
        max_connections: 8,
        header_read_timeout: Duration::from_millis(400),
    };
    let task = tokio::spawn(server::serve_with(
        listener,
        server::router(metrics(), Readiness::new()),
        limits,
        stop.clone(),
    ));
    // 24 half-sent requests, 4 silent connections and one idle after a whole request: more
    // than three times the limit.
    let mut held = Vec::new();
    for _ in 0..24 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .await
            .expect("write");
        held.push(s);
    }
    for _ in 0..4 {
        held.push(TcpStream::connect(addr).await.expect("connect"));
    }
    let mut idle = TcpStream::connect(addr).await.expect("connect");
    idle.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    // A scrape still gets its answer: the held connections are closed one batch after another.
    let started = std::time::Instant::now();
    let a = http(addr, "GET", "/metrics").await;
    assert_eq!(a.status, 200);
    let waited = started.elapsed();
    // Every held connection was closed by the server (EOF or reset), none answered.
    for (i, s) in held.iter_mut().enumerate() {
        let mut buf = [0u8; 256];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("connection {i} still held after 10 s"))
            .unwrap_or(0);
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(
            n == 0 || !text.starts_with("HTTP/1.1 200"),
            "connection {i} got {text:?}"
        );
    }
    // The idle keep-alive connection got its answer, then was closed when idle too long.
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), idle.read_to_end(&mut raw))
        .await
        .expect("the idle keep-alive connection is closed")
        .ok();
    assert!(
        String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    println!("scrape answered after {waited:?} with 29 connections held (limit 8, header timeout 400 ms)");
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the server stops")
        .unwrap();
}

/// drover raises its soft limit on open files to the hard limit at start, as Go's runtime does
/// for gitlab-runner.
#[test]
fn the_open_files_soft_limit_is_raised_to_the_hard_limit() {
    use std::os::unix::process::CommandExt;
    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut hard) },
        0
    );
    if hard.rlim_max <= 256 {
        panic!(
            "the hard limit on open files ({}) is too low for this test",
            hard.rlim_max
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "concurrent = 1\n").unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_drover"));
    cmd.arg("run")
        .arg("-c")
        .arg(&config)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let max = hard.rlim_max;
    // SAFETY: only async-signal-safe setrlimit between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let low = libc::rlimit {
                rlim_cur: 256,
                rlim_max: max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &low) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("start drover run");
    let limits = format!("/proc/{}/limits", child.id());
    let mut soft = String::new();
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(50));
        let text = std::fs::read_to_string(&limits).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.starts_with("Max open files")) {
            soft = line.split_whitespace().nth(3).unwrap_or("").to_owned();
            if soft == max.to_string() {
                break;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(soft, max.to_string(), "soft limit seen in {limits}");
}
