//! A hostile or broken GitLab, as a small HTTP server in the test that answers what the test
//! scripts: the trace loop must not spin on a 202 whose `Range` goes backwards, a server that
//! accepts a request and never answers must not hold the call beyond the response-header
//! timeout, and a status update answered `200` is accepted whatever the body. The server also
//! counts connections, for the client's periodic reconnect (`connection_max_age`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use drover::gitlab::{
    Client, ClientSettings, FinalState, Info, JobCredentials, JobOutcome, JobState, JobTrace,
    JobUpdate, RetryPolicy, TraceOptions, TraceOutput, UpdateState,
};
use drover::job::JobPayload;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server does with one request.
#[derive(Clone)]
enum Answer {
    /// Status, extra headers and body.
    Reply(u16, Vec<(&'static str, String)>, Vec<u8>),
    /// Read the request and never answer (the connection stays open).
    Hang,
}

type Handler = dyn Fn(&str, &str) -> Answer + Send + Sync;

/// The server: every request it read, as `METHOD path`.
struct Hostile {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
    connections: Arc<std::sync::atomic::AtomicUsize>,
}

impl Hostile {
    async fn start(handler: impl Fn(&str, &str) -> Answer + Send + Sync + 'static) -> Hostile {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let log = seen.clone();
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = connections.clone();
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(serve(conn, handler.clone(), log.clone()));
            }
        });
        Hostile {
            url,
            seen,
            connections,
        }
    }

    fn count(&self, prefix: &str) -> usize {
        let seen = self.seen.lock().expect("seen");
        seen.iter().filter(|r| r.starts_with(prefix)).count()
    }
}

/// Serves requests on one keep-alive connection until the client closes it.
async fn serve(mut conn: TcpStream, handler: Arc<Handler>, seen: Arc<Mutex<Vec<String>>>) {
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 8192];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            assert!(buf.len() < 1 << 20, "request head too large");
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let mut lines = head.lines();
        let mut first = lines.next().unwrap_or("").split(' ');
        let (method, path) = (
            first.next().unwrap_or("").to_owned(),
            first.next().unwrap_or("").to_owned(),
        );
        let length: usize = lines
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let mut chunk = [0u8; 65536];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..head_end + length);
        seen.lock().expect("seen").push(format!("{method} {path}"));
        match handler(&method, &path) {
            Answer::Hang => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
            Answer::Reply(status, headers, body) => {
                let mut out = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n",
                    body.len()
                );
                for (k, v) in headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("\r\n");
                if conn.write_all(out.as_bytes()).await.is_err()
                    || conn.write_all(&body).await.is_err()
                {
                    return;
                }
            }
        }
    }
}

/// `drover run -c <config>` with its log in `drover.log` beside the config.
fn drover_run(config: &std::path::Path) -> (std::process::Child, std::path::PathBuf) {
    let log = config.with_file_name("drover.log");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_drover"))
        .arg("run")
        .arg("-c")
        .arg(config)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("drover run");
    (child, log)
}

fn client(url: &str, header_timeout: Option<Duration>) -> Arc<Client> {
    Arc::new(
        Client::new(&ClientSettings {
            url: url.into(),
            retry: RetryPolicy {
                max_attempts: 2,
                base: Duration::from_millis(5),
                cap: Duration::from_millis(50),
            },
            response_header_timeout: header_timeout,
            ..ClientSettings::default()
        })
        .expect("client"),
    )
}

fn info() -> Arc<Info> {
    Arc::new(Info::for_runner(
        &drover::config::RunnerConfig::default(),
        &Default::default(),
    ))
}

fn job() -> JobPayload {
    JobPayload::from_json(r#"{"id": 77, "token": "job-token-77"}"#).expect("payload")
}

/// A status update with no log.
fn update(state: JobState) -> JobUpdate {
    JobUpdate {
        state,
        failure_reason: None,
        exit_code: 0,
        output: TraceOutput::default(),
    }
}

fn fast() -> TraceOptions {
    TraceOptions {
        update_interval: Duration::from_millis(40),
        force_send_interval: Duration::from_secs(60),
        final_backoff_base: Duration::from_millis(20),
        final_update_retry_limit: 2,
        ..TraceOptions::default()
    }
}

/// A hang guard: the awaited work must end long before this.
async fn within<T>(what: &str, secs: u64, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not end within {secs} s"))
}

#[tokio::test]
async fn a_202_whose_range_goes_back_to_zero_does_not_loop_the_trace() {
    let server = Hostile::start(|method, _| match method {
        "PATCH" => Answer::Reply(202, vec![("Range", "0-0".into())], Vec::new()),
        _ => Answer::Reply(200, Vec::new(), Vec::new()),
    })
    .await;
    let trace = JobTrace::start(client(&server.url, None), info(), &job(), fast()).await;
    trace.writer().write_bytes(b"hello from the job\n");
    let report = within("the final update", 20, trace.finish(JobOutcome::success())).await;
    assert_eq!(report.state, FinalState::Accepted);
    // One append of the log, then the final update: the 202 advanced by what was sent.
    let patches = server.count("PATCH");
    assert_eq!(patches, 1, "PATCHes sent: {patches}");
}

#[tokio::test]
async fn a_server_that_never_answers_fails_the_call_after_the_header_timeout() {
    let server = Hostile::start(|_, _| Answer::Hang).await;
    let client = client(&server.url, Some(Duration::from_millis(300)));
    let update = update(JobState::Running);
    let creds = JobCredentials::of(&job());
    let r = within(
        "a PUT to a silent server",
        20,
        client.update_job(&creds, &info(), &update),
    )
    .await;
    assert_eq!(r.status, -1, "{r:?}");
    assert_eq!(r.state, UpdateState::Failed, "{r:?}");
    assert_eq!(server.count("PUT"), 1, "transport errors are not retried");
}

#[tokio::test]
async fn a_200_with_a_huge_body_is_an_accepted_update() {
    let body = vec![b'x'; 17 * 1024 * 1024];
    let server = Hostile::start(move |_, _| Answer::Reply(200, Vec::new(), body.clone())).await;
    let client = client(&server.url, None);
    let update = update(JobState::Success);
    let creds = JobCredentials::of(&job());
    let r = within("the PUT", 30, client.update_job(&creds, &info(), &update)).await;
    assert_eq!(r.state, UpdateState::Succeeded, "{r:?}");
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn a_busy_client_still_reconnects_after_connection_max_age() {
    let server = Hostile::start(|_, _| Answer::Reply(200, Vec::new(), Vec::new())).await;
    let client = Arc::new(
        Client::new(&ClientSettings {
            url: server.url.clone(),
            connection_max_age: Some(Duration::from_millis(250)),
            ..ClientSettings::default()
        })
        .expect("client"),
    );
    let update = update(JobState::Running);
    let creds = JobCredentials::of(&job());
    // A call every 50 ms for a second: the connection is never idle, yet it is renewed.
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(1) {
        let r = client.update_job(&creds, &info(), &update).await;
        assert_eq!(r.state, UpdateState::Succeeded, "{r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let n = server.connections.load(std::sync::atomic::Ordering::SeqCst);
    assert!((3..=8).contains(&n), "connections opened: {n}");
}

/// GitLab's error message goes into drover's log quoted: a newline in it cannot forge a log
/// line and an escape sequence cannot reach the operator's terminal, in any log format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_error_message_forges_no_log_line() {
    let forged = "WARNING: Job succeeded forged=1";
    let body =
        format!("{{\"message\": \"refused\\n{forged}\\r\\u001b[2J\\u001b]0;pwned\\u0007 end\"}}")
            .into_bytes();
    let server = Hostile::start(move |_, path| {
        if path.contains("/jobs/request") {
            Answer::Reply(
                400,
                vec![("Content-Type", "application/json".into())],
                body.clone(),
            )
        } else {
            Answer::Reply(200, Vec::new(), Vec::new())
        }
    })
    .await;
    for format in ["runner", "text", "json"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            format!(
                "concurrent = 1\ncheck_interval = 1\nlog_format = \"{format}\"\n\n[[runners]]\n  name = \"hostile\"\n  url = \"{}\"\n  token = \"glrt-hostileRunner000\"\n  executor = \"docker\"\n  [runners.docker]\n    image = \"alpine\"\n",
                server.url
            ),
        )
        .expect("config");
        let before_start = server.count("POST");
        let (mut child, log) = drover_run(&config);
        let started = std::time::Instant::now();
        let before = before_start;
        while server.count("POST") < before + 2 && started.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let _ = child.wait();
        let text = std::fs::read_to_string(&log).expect("read log");
        assert!(
            text.contains("refused"),
            "{format}: the message is logged:\n{text}"
        );
        for line in text.lines() {
            assert!(
                !line.trim_start().starts_with("WARNING: Job succeeded"),
                "{format}: a forged line:\n{text}"
            );
            assert!(
                !line.contains("level=warning msg=\"Job succeeded")
                    && !line.starts_with("{\"forged"),
                "{format}: a forged line:\n{text}"
            );
        }
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\r'),
            "{format}: a raw control character in the log:\n{text:?}"
        );
    }
}

/// A runner GitLab keeps refusing is paused with upstream's error line, and retried after
/// `unhealthy_interval` with upstream's warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unhealthy_runner_is_paused_and_forced_again_with_upstreams_lines() {
    let server = Hostile::start(|_, path| {
        if path.contains("/jobs/request") {
            Answer::Reply(
                403,
                Vec::new(),
                b"{\"message\": \"403 Forbidden\"}".to_vec(),
            )
        } else {
            Answer::Reply(200, Vec::new(), Vec::new())
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "concurrent = 1\ncheck_interval = 1\n\n[[runners]]\n  name = \"refused\"\n  url = \"{}\"\n  token = \"glrt-refusedRunner00\"\n  executor = \"docker\"\n  unhealthy_requests_limit = 2\n  unhealthy_interval = \"2s\"\n  [runners.docker]\n    image = \"alpine\"\n",
            server.url
        ),
    )
    .expect("config");
    let (mut child, log) = drover_run(&config);
    let id = format!("{}refusedRu", server.url);
    let paused = format!("Runner {id:?} is unhealthy and will be disabled for 2s seconds!");
    let forced = format!("Runner {id:?} is not healthy, but check for a new job will be forced!");
    let started = std::time::Instant::now();
    let mut text = String::new();
    while started.elapsed() < Duration::from_secs(30) {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(&paused) && text.contains(&forced) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    assert!(text.contains(&format!("ERROR: {paused}")), "{text}");
    assert!(text.contains(&format!("WARNING: {forced}")), "{text}");
    // Paused: two refusals, then nothing for 2 s, then the forced check.
    assert!(server.count("POST") >= 3, "{}", server.count("POST"));
}
