//! Every command that prints, with stdout full (`> /dev/full`) and with stdout a pipe whose
//! reader is gone (`| head -c0`): never a panic. A full stdout is reported (`drover: cannot
//! write the results to standard output: …`) with a non-zero exit; a closed pipe ends quietly
//! with the command's own exit code (ripgrep's choice).
//!
//! `DROVER_TEST_BIN` runs the checks against another drover binary (used to watch them fail on
//! a build without the fix).

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> PathBuf {
    std::env::var_os("DROVER_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_drover")))
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn command(args: &[String], dir: &Path) -> Command {
    let mut c = Command::new(bin());
    c.args(args)
        .current_dir(dir)
        .env_remove("CONFIG_FILE")
        .env_remove("RUNNER_DEBUG")
        .env_remove("LOG_LEVEL")
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// A pipe whose read end is already closed: every write gets EPIPE.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    drop(unsafe { OwnedFd::from_raw_fd(fds[0]) });
    Stdio::from(unsafe { OwnedFd::from_raw_fd(fds[1]) })
}

fn run(mut c: Command, stdout: Stdio) -> Output {
    c.stdout(stdout).output().expect("run drover")
}

const CONFIG: &str = r#"
concurrent = 4
[[runners]]
  name = "auto"
  url = "https://gitlab.example.com"
  token = "glrt-outputtesttoken1"
  executor = "docker+machine"
  limit = 4
  [runners.docker]
    image = "alpine"
  [runners.machine]
    IdleCount = 1
    IdleTime = 300
    MachineDriver = "google"
    MachineName = "auto-%s"
"#;

const EXPORT: &str = r#"[{"id": 1, "created_at": "2026-01-05T09:00:00Z",
    "started_at": "2026-01-05T09:00:05Z", "finished_at": "2026-01-05T09:01:05Z",
    "tag_list": ["docker"], "runner": {"description": "auto"}}]"#;

/// Every command line that prints results on stdout.
fn printing_commands(dir: &Path) -> Vec<Vec<String>> {
    let r = |p: &str| root().join(p).display().to_string();
    let w = |p: &str| dir.join(p).display().to_string();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        s(&["--version"]),
        s(&["--help"]),
        s(&["simulate", "--help"]),
        vec!["check-config".into(), "-c".into(), w("a.toml")],
        vec![
            "check-config".into(),
            "--format".into(),
            "json".into(),
            "-c".into(),
            w("a.toml"),
        ],
        vec![
            "autoscale".into(),
            "decide".into(),
            "-c".into(),
            r("fixtures/autoscale/config.toml"),
            "--state".into(),
            r("fixtures/autoscale/state.json"),
        ],
        s(&["simulate"]),
        s(&["simulate", "--format", "json"]),
        vec!["compare".into(), w("a.toml"), w("a.toml")],
        vec!["workload".into(), "import".into(), w("export.json")],
        vec![
            "provider".into(),
            "test".into(),
            "--timeout".into(),
            "20".into(),
            r("fixtures/plugins/example-plugin.sh"),
            "--".into(),
            "--state-dir".into(),
            w("plugin-state"),
        ],
        // A refused endpoint: the job log's first lines reach stdout, then a system failure.
        vec![
            "exec-job".into(),
            "--job".into(),
            r("fixtures/jobs/hello.json"),
            "--docker-host".into(),
            "tcp://127.0.0.1:9".into(),
        ],
    ]
}

#[test]
fn every_printing_command_survives_a_full_or_closed_stdout() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.toml"), CONFIG).unwrap();
    std::fs::write(dir.path().join("export.json"), EXPORT).unwrap();
    let commands = printing_commands(dir.path());
    assert!(commands.len() >= 12);
    // Each command's three runs are independent of the others': run the commands side by side.
    let problems: Vec<String> = std::thread::scope(|scope| {
        let runs: Vec<_> = commands
            .iter()
            .map(|args| scope.spawn(|| command_problems(args, dir.path())))
            .collect();
        runs.into_iter()
            .flat_map(|run| run.join().expect("a command's checks panicked"))
            .collect()
    });
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// What goes wrong with one command: its normal run, then stdout full, then stdout closed.
fn command_problems(args: &[String], dir: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let shown = args.join(" ");
    let base = run(command(args, dir), Stdio::piped());
    let Some(code) = base.status.code() else {
        problems.push(format!("{shown}: killed by a signal with a normal stdout"));
        return problems;
    };
    if base.stdout.is_empty() {
        problems.push(format!(
            "{shown}: printed nothing, so the check proves nothing"
        ));
        return problems;
    }
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = run(command(args, dir), Stdio::from(full));
    let err = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        None => problems.push(format!("{shown} > /dev/full: killed by a signal")),
        Some(0) => problems.push(format!("{shown} > /dev/full: exit 0")),
        Some(_) if err.contains("panicked") => {
            problems.push(format!("{shown} > /dev/full: panicked: {err}"))
        }
        Some(_) if !err.contains("drover: cannot write the results to standard output") => {
            problems.push(format!("{shown} > /dev/full: no clear message: {err}"))
        }
        Some(_) => {}
    }
    let out = run(command(args, dir), closed_pipe());
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.code() != Some(code) {
        problems.push(format!(
            "{shown} | closed pipe: exit {:?}, expected {code}: {err}",
            out.status
        ));
    } else if err.contains("panicked") || err.contains("cannot write") {
        problems.push(format!("{shown} | closed pipe: not quiet: {err}"));
    }
    problems
}
