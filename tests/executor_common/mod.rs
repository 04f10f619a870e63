//! Shared harness of the executor tests on the real Docker Engine: Engine check (fail under
//! `CI`, skip otherwise), the locally built test images, a git HTTP server on 127.0.0.1
//! (`git http-backend` behind a tiny CGI bridge that requires the job token), payload and
//! settings builders, and the leftover check by label.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use base64::Engine as _;
use drover::executor::{
    self, DockerEndpoint, JobControl, JobError, JobRequest, MemorySink, RunnerSettings, TraceSink,
};
use drover::job::JobPayload;

/// Serialises the Engine tests (the machine's CPUs are shared).
pub static ENGINE_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

static IMAGES: Mutex<bool> = Mutex::new(false);

pub const BUILD_IMAGE: &str = "drover-test-executor-build:latest";
pub const HELPER_IMAGE: &str = "drover-test-executor-helper:latest";

pub use crate::docker_engine::engine_available;

/// Builds (or refreshes) the test images once per test process.
pub fn ensure_images() {
    let mut done = IMAGES.lock().unwrap_or_else(|p| p.into_inner());
    if *done {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let status = Command::new(root.join("fixtures/images/build.sh"))
        .arg(env!("CARGO_BIN_EXE_drover"))
        .status()
        .expect("run fixtures/images/build.sh");
    assert!(status.success(), "fixtures/images/build.sh failed");
    *done = true;
}

/// The guard of an Engine test: returns early when no Engine is available (outside CI), builds
/// the images once and serialises the Engine tests.
#[macro_export]
macro_rules! engine_test {
    () => {{
        if !engine_available() {
            return;
        }
        ensure_images();
        ENGINE_LOCK.lock().await
    }};
}

/// Runner settings for the test images, with a per-test token (so labels tell tests apart).
pub fn settings(test: &str) -> RunnerSettings {
    let mut s = RunnerSettings {
        name: format!("drover-test-executor-{test}"),
        token: format!("glrt-dte{test}"),
        executor: "docker".into(),
        system_id: "s_droverexecutortest".into(),
        ..Default::default()
    };
    s.docker.image = BUILD_IMAGE.into();
    s.docker.helper_image = Some(HELPER_IMAGE.into());
    s.docker.pull_policy = vec!["if-not-present".into()];
    s.docker.network_mode = Some("host".into());
    s.docker.volumes = vec!["/cache".into()];
    s
}

/// The short token the executor derives from [`settings`].
pub fn short_token(s: &RunnerSettings) -> String {
    drover::engine::naming::short_token(&s.token).to_string()
}

/// A job's outcome and trace.
pub struct Ran {
    pub result: Result<(), JobError>,
    /// The log as GitLab shows it (line timestamps removed).
    pub trace: String,
    /// The log as written, with `FF_TIMESTAMPS` headers.
    pub raw: String,
}

/// A log as GitLab shows it: the `FF_TIMESTAMPS` line headers removed.
pub fn plain(log: &[u8]) -> String {
    String::from_utf8_lossy(&drover::executor::trace::timestamp::strip(log)).into_owned()
}

/// The log in `sink` as GitLab shows it.
pub fn plain_text(sink: &MemorySink) -> String {
    plain(sink.text().as_bytes())
}

/// Runs a job; `watch` sees the trace as it grows and may cancel or abort.
pub async fn run_job_with(
    payload: &JobPayload,
    runner: &RunnerSettings,
    watch: impl Fn(&str, &JobControl) + Send,
) -> Ran {
    let sink = MemorySink::default();
    let mut job_sink = sink.clone();
    let view = sink.clone();
    let result = run_job_into(payload, runner, &mut job_sink, move |control| {
        watch(&plain_text(&view), control)
    })
    .await;
    Ran {
        result,
        trace: plain_text(&sink),
        raw: sink.text(),
    }
}

/// Runs a job writing its log into `sink`; `tick` runs every 100 ms meanwhile (to watch the
/// log and cancel or abort).
pub async fn run_job_into(
    payload: &JobPayload,
    runner: &RunnerSettings,
    sink: &mut dyn TraceSink,
    tick: impl Fn(&JobControl) + Send,
) -> Result<(), JobError> {
    let endpoint = DockerEndpoint::default();
    let control = JobControl::default();
    let req = JobRequest {
        payload,
        runner,
        endpoint: &endpoint,
        machine_name: Some("test-machine"),
        slot: Default::default(),
    };
    let job = executor::run_job(req, sink, control.clone());
    tokio::pin!(job);
    loop {
        tokio::select! {
            r = &mut job => break r,
            _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => tick(&control),
        }
    }
}

/// Runs a job to its end.
pub async fn run_job(payload: &JobPayload, runner: &RunnerSettings) -> Ran {
    run_job_with(payload, runner, |_, _| {}).await
}

/// Names of containers / volumes carrying this runner's labels.
pub fn leftovers(short: &str) -> (Vec<String>, Vec<String>) {
    let filter = format!("label=com.gitlab.gitlab-runner.runner.id={short}");
    let list = |args: &[&str]| -> Vec<String> {
        let out = Command::new("docker").args(args).output().expect("docker");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    };
    let containers = list(&["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"]);
    let volumes = list(&[
        "volume",
        "ls",
        "--filter",
        &filter,
        "--filter",
        "label=com.gitlab.gitlab-runner.reusable=false",
        "--format",
        "{{.Name}}",
    ]);
    (containers, volumes)
}

/// Runs `cmd` and returns its stdout; panics with its stderr when it fails.
pub fn output_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Seconds since the epoch, as `docker events --since` takes them.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// How many permission-fix (`cache-init`) containers this runner created since `since`
/// (seconds since the epoch), from the Engine's event log.
pub fn permission_containers_since(short: &str, since: u64) -> usize {
    let out = output_of(Command::new("docker").args([
        "events",
        "--since",
        &since.to_string(),
        "--until",
        &(unix_now() + 1).to_string(),
        "--filter",
        "type=container",
        "--filter",
        "event=create",
        "--filter",
        &format!("label=com.gitlab.gitlab-runner.runner.id={short}"),
        "--filter",
        "label=com.gitlab.gitlab-runner.type=cache-init",
        "--format",
        "{{.Actor.Attributes.name}}",
    ]));
    out.lines()
        .filter(|l| l.contains("-set-permission-"))
        .count()
}

/// Asserts nothing temporary is left, then removes this runner's reusable volumes.
pub fn assert_clean_and_remove_reusable(short: &str) {
    let (containers, volumes) = leftovers(short);
    let filter = format!("label=com.gitlab.gitlab-runner.runner.id={short}");
    let out = Command::new("docker")
        .args(["volume", "ls", "-q", "--filter", &filter])
        .output()
        .expect("docker");
    for v in String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
    {
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f", v])
            .output();
    }
    assert!(
        containers.is_empty(),
        "containers left behind: {containers:?}"
    );
    assert!(
        volumes.is_empty(),
        "temporary volumes left behind: {volumes:?}"
    );
}

/// A payload from JSON with defaults filled in for the test server.
pub fn payload(json: serde_json::Value) -> JobPayload {
    JobPayload::from_json(&json.to_string()).expect("test payload")
}

/// A job without a repository (`GIT_STRATEGY=none`, 120 s timeout) running `script`, with
/// `extra` top-level payload keys merged in (a `variables` entry adds to GIT_STRATEGY).
pub fn no_git_job(
    id: i64,
    project_id: i64,
    script: &[&str],
    extra: serde_json::Value,
) -> JobPayload {
    let mut job = serde_json::json!({
        "id": id, "token": "glcbt-nogitjobtoken",
        "job_info": {"project_id": project_id, "name": format!("job-{id}")},
        "git_info": {"repo_url": "http://127.0.0.1:1/group/project.git", "sha": "0", "ref": "main"},
        "runner_info": {"timeout": 120},
        "variables": [{"key": "GIT_STRATEGY", "value": "none", "public": true}],
        "steps": [{"name": "script", "script": script}]
    });
    if let (Some(base), Some(extra)) = (job.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            match (k.as_str(), v.as_array()) {
                ("variables", Some(more)) => {
                    if let Some(list) = base.get_mut("variables").and_then(|l| l.as_array_mut()) {
                        list.extend(more.iter().cloned());
                    }
                }
                _ => {
                    base.insert(k.clone(), v.clone());
                }
            }
        }
    }
    payload(job)
}

/// A git repository served over HTTP by `git http-backend`, requiring basic auth
/// `gitlab-ci-token:<token>`.
pub struct GitServer {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub token: String,
}

fn git(dir: &Path, args: &[&str]) -> String {
    output_of(
        Command::new("git")
            .current_dir(dir)
            .args(args)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid"),
    )
    .trim()
    .to_string()
}

impl GitServer {
    /// Starts a server with an empty bare repository `group/project.git`.
    pub fn start(token: &str) -> GitServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let bare = dir.path().join("group/project.git");
        std::fs::create_dir_all(&bare).unwrap();
        git(&bare, &["init", "-q", "--bare", "-b", "main"]);
        git(&bare, &["config", "http.receivepack", "true"]);
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        git(&work, &["init", "-q", "-b", "main"]);
        git(&work, &["remote", "add", "origin", bare.to_str().unwrap()]);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().unwrap().port();
        let root = dir.path().to_path_buf();
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("gitlab-ci-token:{token}"))
        );
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let root = root.clone();
                let expected = expected.clone();
                std::thread::spawn(move || {
                    let _ = serve(stream, &root, &expected);
                });
            }
        });
        GitServer {
            dir,
            port,
            token: token.to_string(),
        }
    }

    /// Commits `file` with `content` on main, pushes, returns the sha.
    pub fn commit(&self, file: &str, content: &str) -> String {
        let work = self.dir.path().join("work");
        std::fs::write(work.join(file), content).unwrap();
        git(&work, &["add", "."]);
        git(&work, &["commit", "-q", "-m", &format!("update {file}")]);
        git(&work, &["push", "-q", "origin", "main"]);
        git(&work, &["rev-parse", "HEAD"])
    }

    /// The clone URL GitLab would send (token embedded).
    pub fn repo_url(&self) -> String {
        format!(
            "http://gitlab-ci-token:{}@127.0.0.1:{}/group/project.git",
            self.token, self.port
        )
    }
}

fn serve(stream: TcpStream, root: &Path, expected_auth: &str) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut stream = stream;
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        let h = h.trim_end().to_string();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let header = |k: &str| headers.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    if header("authorization").as_deref() != Some(expected_auth) {
        stream.write_all(b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"git\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
        return Ok(());
    }
    let len: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body)?;
    let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
    let mut cmd = Command::new("git");
    cmd.arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("REMOTE_USER", "gitlab-ci-token")
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("CONTENT_LENGTH", len.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(t) = header("content-type") {
        cmd.env("CONTENT_TYPE", t);
    }
    if let Some(e) = header("content-encoding") {
        cmd.env("HTTP_CONTENT_ENCODING", e);
    }
    if let Some(p) = header("git-protocol") {
        cmd.env("GIT_PROTOCOL", p);
    }
    let mut child = cmd.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(&body)?;
    }
    let mut out = Vec::new();
    if let Some(mut stdout) = child.stdout.take() {
        stdout.read_to_end(&mut out)?;
    }
    let _ = child.wait();
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| out.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let (head, body) = match split {
        Some((i, n)) => (
            String::from_utf8_lossy(&out[..i]).to_string(),
            out[i + n..].to_vec(),
        ),
        None => (String::new(), out),
    };
    let mut status = "200 OK".to_string();
    let mut response = String::new();
    for h in head.lines() {
        if let Some(s) = h.strip_prefix("Status:") {
            status = s.trim().to_string();
        } else if !h.trim().is_empty() {
            response.push_str(h.trim_end());
            response.push_str("\r\n");
        }
    }
    let head = format!(
        "HTTP/1.1 {status}\r\n{response}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(&body)?;
    Ok(())
}

/// An image tag made for a test, removed when dropped.
pub struct Tag(pub String);

impl Drop for Tag {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", &self.0]).output();
    }
}

/// The drover binary under test.
pub fn drover_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_drover"))
}

/// Reads `reader` line by line up to and including `wanted` (a whole line with its `\n`);
/// returns what was read. Panics if the stream ends first.
pub fn read_until_line(reader: &mut impl std::io::BufRead, wanted: &str) -> String {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            panic!("the output ended before {wanted:?}:\n{seen}");
        }
        seen.push_str(&line);
        // Lines carry `FF_TIMESTAMPS` headers; compare what GitLab would show.
        if plain(line.as_bytes()) == wanted {
            return seen;
        }
    }
}

/// The drover binary under test: `DROVER_TEST_BIN` if set (to watch a test fail against a
/// build without a fix), else this build's.
pub fn test_bin() -> PathBuf {
    std::env::var_os("DROVER_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(drover_bin)
}
