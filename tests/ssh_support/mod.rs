//! A real OpenSSH server for the SSH tests and the prepare bench: installs openssh-server when
//! missing (`fixtures/setup/ssh.sh`), makes host and user keys in a temp dir and runs
//! `/usr/sbin/sshd -D` on a free 127.0.0.1 port, accepting one user key for one login: as root
//! (CI) the unprivileged `drover-ssh` that `fixtures/setup/ssh.sh` makes (docker group, plain
//! `/bin/sh`, so a session costs no login rc), otherwise the current user.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use drover::executor::ssh::SshTarget;

/// The login the tests' sshd serves when they run as root (made by `fixtures/setup/ssh.sh`).
pub const TEST_USER: &str = "drover-ssh";

/// An sshd of our own, its keys and its directory.
pub struct Sshd {
    pub dir: tempfile::TempDir,
    pub port: u16,
    /// The one login it accepts.
    pub user: String,
    child: Child,
}

fn user_exists(name: &str) -> bool {
    Command::new("id")
        .arg(name)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn setup_ssh() {
    let ok = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/setup/ssh.sh"))
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "fixtures/setup/ssh.sh failed (openssh-server, the drover-ssh login)"
    );
}

/// The login to serve: `drover-ssh` as root (set up when missing), else the current user.
fn login_user() -> String {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        if !user_exists(TEST_USER) {
            setup_ssh();
        }
        return TEST_USER.to_string();
    }
    std::env::var("USER").unwrap_or_else(|_| "root".into())
}

/// A passphrase-less ed25519 key pair at `path` and `path.pub`.
fn keygen(path: &Path) {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "drover-test", "-f"])
        .arg(path)
        .output()
        .expect("run ssh-keygen (openssh-client)");
    assert!(
        out.status.success(),
        "ssh-keygen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Sshd {
    /// Installs openssh-server when missing, makes keys and starts sshd accepting only
    /// `user_key` for [`login_user`].
    pub fn start() -> Sshd {
        if !Path::new("/usr/sbin/sshd").exists() {
            setup_ssh();
        }
        let _ = std::fs::create_dir_all("/run/sshd");
        let user = login_user();
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        for k in ["host_key", "other_host_key", "user_key", "other_user_key"] {
            keygen(&d.join(k));
        }
        std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).expect("authorized_keys");
        // sshd reads authorized_keys as the login user: let it through the temp dir.
        use std::os::unix::fs::PermissionsExt;
        for (p, mode) in [(d.to_path_buf(), 0o711), (d.join("authorized_keys"), 0o644)] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
                .expect("chmod for sshd");
        }
        let port = free_port();
        std::fs::write(
            d.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nAuthorizedKeysFile {ak}\n\
                 PidFile {pid}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
                 AllowUsers {user}\nLogLevel VERBOSE\n",
                hk = d.join("host_key").display(),
                ak = d.join("authorized_keys").display(),
                pid = d.join("sshd.pid").display(),
            ),
        )
        .expect("sshd_config");
        // Its log (every session it starts, at VERBOSE) goes to a file of the temp dir.
        let log = std::fs::File::create(d.join("sshd.log")).expect("sshd.log");
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start sshd");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "sshd did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Sshd {
            dir,
            port,
            user,
            child,
        }
    }

    pub fn path(&self, f: &str) -> PathBuf {
        self.dir.path().join(f)
    }

    pub fn pub_key(&self, f: &str) -> String {
        std::fs::read_to_string(self.path(f)).expect("public key")
    }

    /// The target as a provider would hand it out (host key vouched for).
    pub fn target(&self) -> SshTarget {
        SshTarget {
            address: format!("127.0.0.1:{}", self.port),
            username: self.user.clone(),
            key_path: Some(self.path("user_key")),
            key: None,
            host_key: Some(self.pub_key("host_key.pub")),
            known_hosts: None,
        }
    }

    /// The processes this sshd started, directly or not.
    pub fn descendants(&self) -> Vec<i32> {
        let root = self.child.id() as i32;
        let mut parent = std::collections::HashMap::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid …`; comm may hold spaces, so read after the last ')'.
            if let Some(ppid) = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok())
            {
                parent.insert(pid, ppid);
            }
        }
        let descends = |mut p: i32| {
            while let Some(&pp) = parent.get(&p) {
                if pp == root {
                    return true;
                }
                p = pp;
            }
            false
        };
        parent.keys().copied().filter(|&p| descends(p)).collect()
    }

    /// How many commands (each a `docker system dial-stdio` for drover, a `docker version` for
    /// a can-connect check) sshd has started so far, from its log.
    pub fn commands_started(&self) -> usize {
        std::fs::read_to_string(self.path("sshd.log"))
            .map(|l| l.matches("Starting session: command ").count())
            .unwrap_or(0)
    }

    /// How many `docker system dial-stdio` sessions are running under this sshd.
    pub fn dial_stdio_count(&self) -> usize {
        self.descendants()
            .into_iter()
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains("dial-stdio"))
                    .unwrap_or(false)
            })
            .count()
    }

    /// Kills sshd and its per-connection processes, as when a machine's sshd dies.
    pub fn kill_all(&mut self) {
        let is_sshd = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|c| c.trim() == "sshd")
                .unwrap_or(false)
        };
        // Only the sshd processes: the sessions' shells and `dial-stdio`s then end by
        // themselves (hang-up, end of input), as on a machine whose sshd died; killing them
        // mid-way could leave their own state (lock files of the login shell's rc) behind.
        for pid in self.descendants() {
            if is_sshd(pid) {
                // SAFETY: a process this test started (an sshd descendant of its sshd).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.kill_all();
    }
}
