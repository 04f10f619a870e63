//! A real OpenSSH server for the SSH tests and the prepare bench: installs openssh-server when
//! missing (`fixtures/setup/ssh.sh`), makes host and user keys in a temp dir and runs
//! `/usr/sbin/sshd -D` on a free 127.0.0.1 port as the current user, accepting one user key.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use drover::executor::ssh::SshTarget;

/// An sshd of our own, its keys and its directory.
pub struct Sshd {
    pub dir: tempfile::TempDir,
    pub port: u16,
    child: Child,
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
    /// Installs openssh-server when missing, makes keys and starts sshd (as the current user,
    /// root in CI) accepting only `user_key`.
    pub fn start() -> Sshd {
        if !Path::new("/usr/sbin/sshd").exists() {
            let ok = Command::new("bash")
                .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/setup/ssh.sh"))
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            assert!(ok, "fixtures/setup/ssh.sh could not install openssh-server");
        }
        let _ = std::fs::create_dir_all("/run/sshd");
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        for k in ["host_key", "other_host_key", "user_key", "other_user_key"] {
            keygen(&d.join(k));
        }
        std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).expect("authorized_keys");
        let port = free_port();
        let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
        std::fs::write(
            d.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nAuthorizedKeysFile {ak}\n\
                 PidFile {pid}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
                 AllowUsers {user}\nLogLevel ERROR\n",
                hk = d.join("host_key").display(),
                ak = d.join("authorized_keys").display(),
                pid = d.join("sshd.pid").display(),
            ),
        )
        .expect("sshd_config");
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start sshd");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "sshd did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Sshd { dir, port, child }
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
            username: std::env::var("USER").unwrap_or_else(|_| "root".into()),
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
