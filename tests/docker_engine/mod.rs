//! The real Docker Engine for tests that need one: found at its usual socket, started if it is
//! installed but not running, and a failure (never a skip) when it cannot be reached in CI.

use std::process::{Command, Stdio};

/// The Engine's usual socket.
#[allow(dead_code)]
pub const SOCKET: &str = "/var/run/docker.sock";

fn reachable() -> bool {
    Command::new("docker")
        .args([
            "-H",
            "unix:///var/run/docker.sock",
            "version",
            "--format",
            "{{.Server.Version}}",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Whether the Engine at [`SOCKET`] answers, starting it once if it is installed but not
/// running (service, systemd, then a bare `dockerd`). Panics when it cannot be reached and
/// `CI` is set; otherwise returns false so the caller skips.
pub fn engine_available() -> bool {
    if reachable() {
        return true;
    }
    let _ = Command::new("sh")
        .args([
            "-c",
            "(service docker start || systemctl start docker || \
             (command -v dockerd && (dockerd >/tmp/dockerd.log 2>&1 &))) >/dev/null 2>&1",
        ])
        .status();
    for _ in 0..20 {
        if reachable() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    if std::env::var_os("CI").is_some() {
        panic!("the Docker Engine at {SOCKET} cannot be reached and CI is set: this test must run");
    }
    eprintln!("skipping: no Docker Engine at {SOCKET}");
    false
}
