//! Reaching docker-machine machines over SSH instead of Docker's TLS port (opt-in with
//! `--ssh` / `DROVER_SHIM_SSH=1`): credentials become an `ssh` endpoint built from the store's
//! `config.json` (IP address, SSH port, user, key), and can-connect asks the machine's Engine
//! over SSH with the OpenSSH client, so port 2376 and docker-machine's certificates are no
//! longer needed once machines exist.
//!
//! docker-machine records no host key (it logs in with host-key checking off), so the shim pins
//! the key the machine shows the first time it is asked about it (`ssh-keyscan`, written to
//! `drover_known_hosts` in the machine's store directory, which `docker-machine rm` removes
//! with the machine); every later connection, drover's and can-connect's, must show the same
//! key or is refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::exec::{Exec, ExecError, QUIET, VALUE};
use crate::store::{SshLogin, Store};

/// The pin file's name in a machine's store directory.
pub const PIN_FILE: &str = "drover_known_hosts";

/// Deadline of `ssh-keyscan` and of the can-connect `ssh`.
pub const SSH_DEADLINE: Duration = Duration::from_secs(30);

/// The OpenSSH programs the shim runs.
#[derive(Debug)]
pub struct SshTools {
    keyscan: Exec,
    ssh: Exec,
}

impl Default for SshTools {
    fn default() -> Self {
        SshTools {
            keyscan: Exec::new("ssh-keyscan", Vec::new()),
            ssh: Exec::new("ssh", Vec::new()),
        }
    }
}

/// Why a pin or a check could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// The program did not run or finish.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// `ssh-keyscan` found no key.
    #[error("ssh-keyscan of {address} found no host key ({stderr}); is sshd running on the machine and the port open?")]
    NoKey {
        /// `ip:port`.
        address: String,
        /// What it said.
        stderr: String,
    },
    /// The pin could not be written.
    #[error("cannot write the host-key pin {}: {source}", .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl SshTools {
    /// The machine's pinned known-hosts file, scanning and writing it when absent.
    pub async fn pin(
        &self,
        store: &Store,
        name: &str,
        login: &SshLogin,
        cancel: &CancellationToken,
    ) -> Result<PathBuf, PinError> {
        let path = store.machine_dir(name).join(PIN_FILE);
        if path.is_file() {
            return Ok(path);
        }
        let argv: Vec<String> = vec![
            "-T".into(),
            "10".into(),
            "-p".into(),
            login.port.to_string(),
            login.ip.clone(),
        ];
        let out = self
            .keyscan
            .run("ssh_keyscan", name, &argv, SSH_DEADLINE, cancel, VALUE)
            .await?;
        let lines: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .collect();
        if !out.success() || lines.is_empty() {
            return Err(PinError::NoKey {
                address: login.address(),
                stderr: out.error_text(),
            });
        }
        // Written whole under a temporary name, then renamed: a pin is never half there.
        let tmp = path.with_extension("tmp");
        let write = std::fs::write(&tmp, format!("{}\n", lines.join("\n")))
            .and_then(|_| std::fs::rename(&tmp, &path));
        write.map_err(|source| PinError::Write {
            path: path.clone(),
            source,
        })?;
        tracing::info!(machine = %name, address = %login.address(), "pinned the machine's SSH host key");
        Ok(path)
    }

    /// Whether the machine's Engine answers `docker version` over SSH, checking the pin.
    pub async fn engine_answers(
        &self,
        name: &str,
        login: &SshLogin,
        pin: &Path,
        cancel: &CancellationToken,
    ) -> Result<bool, ExecError> {
        let opt = |o: String| ["-o".to_string(), o];
        let mut argv: Vec<String> = vec!["-n".into()];
        for o in [
            "BatchMode=yes".to_string(),
            "StrictHostKeyChecking=yes".to_string(),
            format!("UserKnownHostsFile={}", pin.display()),
            "GlobalKnownHostsFile=/dev/null".to_string(),
            "ConnectTimeout=10".to_string(),
        ] {
            argv.extend(opt(o));
        }
        argv.extend([
            "-i".into(),
            login.key_path.display().to_string(),
            "-p".into(),
            login.port.to_string(),
            format!("{}@{}", login.user, login.ip),
            "docker".into(),
            "version".into(),
            "--format".into(),
            "{{.Server.Version}}".into(),
        ]);
        match self
            .ssh
            .run("can_connect", name, &argv, SSH_DEADLINE, cancel, QUIET)
            .await
        {
            Ok(out) => Ok(out.success() && !out.stdout.trim().is_empty()),
            Err(ExecError::Timeout { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }
}
