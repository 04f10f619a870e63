//! The provider operations, carried out with docker-machine exactly as GitLab Runner does
//! (shared/spec/docker-machine-cli.md §1), and their results mapped onto the protocol.
//!
//! Each operation validates the machine name (a path component in the store), applies the
//! name-prefix safety rule to destructive operations, answers from the store when no process
//! is needed (list, inspect, absent machines), and otherwise runs one docker-machine command
//! through `exec.rs`. Exit statuses and stderr become error kinds here. No operation decides
//! anything about how many machines there should be.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use drover_protocol::{
    CanConnectResult, CreateParams, CredentialsResult, ErrorKind, ExistsResult, ListResult,
    MachineEntry, MachineState, RemoveResult,
};
use drover_protocol::{Endpoint, InspectResult};
use tokio_util::sync::CancellationToken;

use crate::argv::Argv;
use crate::cache::ConnectCache;
use crate::exec::{Exec, ExecError, Output, LOUD, QUIET, VALUE};
use crate::store::{valid_name, Store, StoreError};

/// Upstream's deadline for every command but `stop`.
pub const LONG: Duration = Duration::from_secs(3600);
/// Upstream's deadline for `stop`.
pub const STOP: Duration = Duration::from_secs(60);

/// An operation's failure: a protocol kind and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpError {
    /// The kind.
    pub kind: ErrorKind,
    /// The message.
    pub message: String,
}

fn fail(kind: ErrorKind, message: impl Into<String>) -> OpError {
    OpError {
        kind,
        message: message.into(),
    }
}

impl From<ExecError> for OpError {
    fn from(e: ExecError) -> Self {
        let kind = match e {
            ExecError::Spawn { .. } => ErrorKind::InvalidConfig,
            ExecError::Timeout { .. } => ErrorKind::Timeout,
            ExecError::Cancelled { .. } => ErrorKind::Cancelled,
        };
        fail(kind, e.to_string())
    }
}

impl From<StoreError> for OpError {
    fn from(e: StoreError) -> Self {
        let kind = match e {
            StoreError::NotFound(_) => ErrorKind::NotFound,
            _ => ErrorKind::Failed,
        };
        fail(kind, e.to_string())
    }
}

/// Result of an operation.
pub type OpResult<T> = Result<T, OpError>;

/// Per-call context: deadline and cancellation.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The caller's deadline, if it sent one.
    pub timeout: Option<Duration>,
    /// Cancelled when drover sends `cancel` (or goes away).
    pub cancel: CancellationToken,
}

impl Ctx {
    fn deadline(&self, default: Duration) -> Duration {
        match self.timeout {
            Some(t) => t.min(default),
            None => default,
        }
    }
}

/// The shim's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The docker-machine executable.
    pub docker_machine: std::path::PathBuf,
    /// The store (must agree with docker-machine's own resolution).
    pub store: Store,
    /// Extra environment for docker-machine.
    pub env: Vec<(String, String)>,
    /// `MACHINE_BUGSNAG_API_TOKEN`.
    pub bugsnag_token: Option<String>,
    /// A fixed name prefix; when `None`, the handshake's prefix applies.
    pub name_prefix: Option<String>,
    /// Lifetime of positive can-connect results.
    pub can_connect_ttl: Duration,
    /// Hand out machines over SSH (the store's IP, port, user and key) instead of Docker's
    /// TLS port; can-connect then checks over SSH too.
    pub ssh: bool,
}

/// The shim: docker-machine behind the provider operations.
#[derive(Debug)]
pub struct Shim {
    exec: Exec,
    argv: Argv,
    store: Store,
    fixed_prefix: Option<String>,
    handshake_prefix: Mutex<Option<String>>,
    connect: ConnectCache,
    busy: Mutex<HashMap<String, MachineState>>,
    /// Held by a create while the store's `certs/` is incomplete: docker-machine bootstraps
    /// its CA and client certificate on the first create without a lock, so concurrent first
    /// creates would leave a client cert not signed by the final CA. Across processes the
    /// same create also holds the store's certificate lock ([`Store::try_lock_certs`]).
    cert_bootstrap: tokio::sync::Mutex<()>,
    /// `Some` when machines are handed out over SSH.
    ssh: Option<crate::ssh::SshTools>,
}

/// How often a create holding the bootstrap lock looks whether `certs/` is complete.
const CERTS_POLL: Duration = Duration::from_millis(100);

struct Busy<'a> {
    shim: &'a Shim,
    name: String,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.shim
            .busy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.name);
    }
}

fn mentions_missing(o: &Output) -> bool {
    o.stderr.contains("does not exist")
}

impl Shim {
    /// A shim with `settings`.
    pub fn new(settings: Settings) -> Self {
        Shim {
            exec: Exec::new(settings.docker_machine, settings.env),
            argv: Argv::new(settings.bugsnag_token.as_deref()),
            store: settings.store,
            fixed_prefix: settings.name_prefix,
            handshake_prefix: Mutex::new(None),
            connect: ConnectCache::new(settings.can_connect_ttl),
            busy: Mutex::new(HashMap::new()),
            cert_bootstrap: tokio::sync::Mutex::new(()),
            ssh: settings.ssh.then(crate::ssh::SshTools::default),
        }
    }

    /// Records the handshake's name prefix (a fixed `--name-prefix` wins).
    pub fn set_handshake_prefix(&self, prefix: Option<String>) {
        *self
            .handshake_prefix
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = prefix;
    }

    fn prefix(&self) -> Option<String> {
        self.fixed_prefix.clone().or_else(|| {
            self.handshake_prefix
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        })
    }

    fn mark(&self, name: &str, state: MachineState) -> Busy<'_> {
        self.busy
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), state);
        Busy {
            shim: self,
            name: name.to_string(),
        }
    }

    fn check_name(&self, name: &str) -> OpResult<()> {
        if valid_name(name) {
            Ok(())
        } else {
            Err(fail(
                ErrorKind::BadRequest,
                format!("{name:?} is not a valid docker-machine name (allowed: 0-9a-zA-Z . -, starting alphanumeric)"),
            ))
        }
    }

    fn check_owned(&self, name: &str) -> OpResult<()> {
        self.check_name(name)?;
        match self.prefix() {
            Some(p) if !name.starts_with(&p) => Err(fail(
                ErrorKind::Refused,
                format!("refusing to touch machine {name:?}: its name lacks the configured prefix {p:?}"),
            )),
            _ => Ok(()),
        }
    }

    /// `create --driver D --<opt>… NAME`.
    pub async fn create(&self, p: &CreateParams, ctx: &Ctx) -> OpResult<()> {
        self.check_name(&p.name)?;
        if p.driver.is_empty() {
            return Err(fail(
                ErrorKind::InvalidConfig,
                "MachineDriver is empty; set it in [runners.machine]",
            ));
        }
        if self.store.has_dir(&p.name) {
            return Err(fail(
                ErrorKind::AlreadyExists,
                format!("machine {:?} already exists", p.name),
            ));
        }
        self.connect.forget(&p.name);
        let _busy = self.mark(&p.name, MachineState::Creating);
        let argv = self
            .argv
            .create(&p.driver, &p.name, &p.options, &p.options_with_name);
        // Creates run one at a time until certs/ holds its four files, then in parallel.
        let mut bootstrap = None;
        if !self.store.certs_complete() {
            let guard = tokio::select! {
                g = self.cert_bootstrap.lock() => g,
                _ = ctx.cancel.cancelled() => {
                    return Err(fail(ErrorKind::Cancelled, format!(
                        "create of {:?} cancelled while waiting for the store's certificates", p.name
                    )));
                }
            };
            if !self.store.certs_complete() {
                // Then the other processes' creates: wait for the store's lock, or for the
                // certificates another process finished meanwhile.
                let lock = loop {
                    match self.store.try_lock_certs() {
                        Ok(Some(lock)) => break Some(lock),
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!(
                                "cannot lock the certificates in {}: {e}; creating without the lock",
                                self.store.root().display()
                            );
                            break None;
                        }
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(CERTS_POLL) => {}
                        _ = ctx.cancel.cancelled() => {
                            return Err(fail(ErrorKind::Cancelled, format!(
                                "create of {:?} cancelled while waiting for the store's certificates", p.name
                            )));
                        }
                    }
                    if self.store.certs_complete() {
                        break None;
                    }
                };
                if !self.store.certs_complete() {
                    bootstrap = Some((guard, lock));
                }
            }
        }
        let run = self.exec.run(
            "create",
            &p.name,
            &argv,
            ctx.deadline(LONG),
            &ctx.cancel,
            LOUD,
        );
        tokio::pin!(run);
        let out = loop {
            tokio::select! {
                out = &mut run => break out?,
                _ = tokio::time::sleep(CERTS_POLL), if bootstrap.is_some() => {
                    if self.store.certs_complete() {
                        bootstrap = None;
                    }
                }
            }
        };
        drop(bootstrap);
        if out.success() {
            return Ok(());
        }
        let text = out.error_text();
        let kind = if out.code == Some(3) {
            ErrorKind::InvalidConfig
        } else if out.stderr.contains("already exists") {
            ErrorKind::AlreadyExists
        } else if [
            "Invalid hostname",
            "flag provided but not defined",
            "Error setting machine configuration",
            "accessible in your PATH",
        ]
        .iter()
        .any(|s| out.stderr.contains(s))
        {
            ErrorKind::InvalidConfig
        } else {
            ErrorKind::Failed
        };
        Err(fail(kind, text))
    }

    /// The machines in the store (no process).
    pub fn list(&self) -> OpResult<ListResult> {
        let names = self.store.list()?;
        let busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        Ok(ListResult {
            machines: names
                .into_iter()
                .map(|name| MachineEntry {
                    state: busy.get(&name).copied().unwrap_or(MachineState::Unknown),
                    name,
                })
                .collect(),
        })
    }

    /// `config.json` stat, then `inspect NAME`.
    pub async fn exists(&self, name: &str, ctx: &Ctx) -> OpResult<ExistsResult> {
        self.check_name(name)?;
        if !self.store.has_config(name) {
            return Ok(ExistsResult { exists: false });
        }
        let argv = self.argv.inspect(name);
        let out = self
            .exec
            .run(
                "exists",
                name,
                &argv,
                ctx.deadline(LONG),
                &ctx.cancel,
                QUIET_ERR,
            )
            .await?;
        Ok(ExistsResult {
            exists: out.success(),
        })
    }

    /// `config NAME`, positives cached.
    pub async fn can_connect(&self, name: &str, ctx: &Ctx) -> OpResult<CanConnectResult> {
        self.check_name(name)?;
        if self.connect.fresh(name, Instant::now()) {
            return Ok(CanConnectResult { can_connect: true });
        }
        if !self.store.has_dir(name) {
            self.connect.forget(name);
            return Ok(CanConnectResult { can_connect: false });
        }
        if let Some(tools) = &self.ssh {
            let ok = self.ssh_can_connect(tools, name, ctx).await?;
            if ok {
                self.connect.record(name, Instant::now());
            } else {
                self.connect.forget(name);
            }
            return Ok(CanConnectResult { can_connect: ok });
        }
        let argv = self.argv.config(name);
        let ok = match self
            .exec
            .run(
                "can_connect",
                name,
                &argv,
                ctx.deadline(LONG),
                &ctx.cancel,
                QUIET,
            )
            .await
        {
            Ok(out) => out.success(),
            Err(ExecError::Timeout { .. }) => false,
            Err(e) => return Err(e.into()),
        };
        if ok {
            self.connect.record(name, Instant::now());
        } else {
            self.connect.forget(name);
        }
        Ok(CanConnectResult { can_connect: ok })
    }

    /// Over SSH: the store's login details, the pinned host key, and `docker version` on the
    /// machine. A machine without usable details or whose key cannot be pinned cannot connect.
    async fn ssh_can_connect(
        &self,
        tools: &crate::ssh::SshTools,
        name: &str,
        ctx: &Ctx,
    ) -> OpResult<bool> {
        let login = match self.store.ssh_login(name) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(machine = %name, error = %e, "cannot reach the machine over SSH");
                return Ok(false);
            }
        };
        let pin = match tools.pin(&self.store, name, &login, &ctx.cancel).await {
            Ok(p) => p,
            Err(crate::ssh::PinError::Exec(e @ ExecError::Cancelled { .. })) => {
                return Err(e.into())
            }
            Err(e) => {
                tracing::warn!(machine = %name, error = %e, "cannot pin the machine's SSH host key");
                return Ok(false);
            }
        };
        match tools.engine_answers(name, &login, &pin, &ctx.cancel).await {
            Ok(ok) => Ok(ok),
            Err(e @ ExecError::Spawn { .. }) => Err(fail(
                ErrorKind::InvalidConfig,
                format!("{e}; --ssh needs the OpenSSH client (ssh, ssh-keyscan)"),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// The `ssh` endpoint of machine `name` (login details from the store, host key pinned).
    async fn ssh_credentials(
        &self,
        tools: &crate::ssh::SshTools,
        name: &str,
        ctx: &Ctx,
    ) -> OpResult<CredentialsResult> {
        let login = self.store.ssh_login(name)?;
        let pin = tools
            .pin(&self.store, name, &login, &ctx.cancel)
            .await
            .map_err(|e| match e {
                crate::ssh::PinError::Exec(e) => OpError::from(e),
                other => fail(ErrorKind::Transient, other.to_string()),
            })?;
        Ok(CredentialsResult {
            endpoint: Endpoint::Ssh(drover_protocol::SshEndpoint {
                address: login.address(),
                username: login.user,
                key_path: Some(login.key_path.display().to_string()),
                key: None,
                host_key: None,
                known_hosts: Some(pin.display().to_string()),
            }),
        })
    }

    async fn value(&self, op: &str, name: &str, argv: &[String], ctx: &Ctx) -> OpResult<String> {
        let out = self
            .exec
            .run(op, name, argv, ctx.deadline(LONG), &ctx.cancel, VALUE)
            .await?;
        if !out.success() {
            let kind = if mentions_missing(&out) {
                ErrorKind::NotFound
            } else {
                ErrorKind::Failed
            };
            return Err(fail(kind, out.error_text()));
        }
        if out.cut.iter().any(|n| n.contains(" stdout line ")) {
            // A cut value is a wrong value.
            let command = argv
                .iter()
                .position(|a| a == name)
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| argv.get(i))
                .map_or(op, String::as_str);
            return Err(fail(
                ErrorKind::Failed,
                format!(
                    "docker-machine {command} {name} printed a line longer than {} bytes (the limit); the value was cut, so it is refused",
                    drover_protocol::bounded::MAX_LINE
                ),
            ));
        }
        let v = out.stdout.trim();
        if v.is_empty() {
            return Err(fail(
                ErrorKind::Failed,
                format!("failed to get {argv:?}: docker-machine printed nothing"),
            ));
        }
        Ok(v.to_string())
    }

    /// `url NAME`, then `inspect NAME -f {{.HostOptions.AuthOptions.StorePath}}`.
    pub async fn credentials(&self, name: &str, ctx: &Ctx) -> OpResult<CredentialsResult> {
        self.check_name(name)?;
        if !self.store.has_dir(name) {
            return Err(fail(
                ErrorKind::NotFound,
                format!("machine {name:?} does not exist"),
            ));
        }
        if let Some(tools) = &self.ssh {
            return self.ssh_credentials(tools, name, ctx).await;
        }
        let host = self
            .value("credentials", name, &self.argv.url(name), ctx)
            .await?;
        let cert_dir = self
            .value("credentials", name, &self.argv.store_path(name), ctx)
            .await?;
        Ok(CredentialsResult {
            endpoint: Endpoint::TcpTls {
                host,
                cert_dir,
                tls_verify: true,
            },
        })
    }

    /// `stop NAME` (1-minute deadline).
    pub async fn stop(&self, name: &str, ctx: &Ctx) -> OpResult<()> {
        self.check_owned(name)?;
        if !self.store.has_dir(name) {
            return Err(fail(
                ErrorKind::NotFound,
                format!("machine {name:?} does not exist"),
            ));
        }
        self.connect.forget(name);
        let argv = self.argv.stop(name);
        let out = self
            .exec
            .run("stop", name, &argv, ctx.deadline(STOP), &ctx.cancel, LOUD)
            .await?;
        if out.success() {
            Ok(())
        } else {
            Err(fail(ErrorKind::Failed, out.error_text()))
        }
    }

    /// `rm -y NAME`; absent machines are a success.
    pub async fn remove(&self, name: &str, ctx: &Ctx) -> OpResult<RemoveResult> {
        self.check_owned(name)?;
        if !self.store.has_dir(name) {
            return Ok(RemoveResult { existed: false });
        }
        let _busy = self.mark(name, MachineState::Removing);
        let argv = self.argv.remove(name);
        let out = self
            .exec
            .run("remove", name, &argv, ctx.deadline(LONG), &ctx.cancel, LOUD)
            .await?;
        self.connect.forget(name);
        if out.success() {
            Ok(RemoveResult { existed: true })
        } else if mentions_missing(&out) && !self.store.has_dir(name) {
            Ok(RemoveResult { existed: false })
        } else {
            Err(fail(ErrorKind::Failed, out.error_text()))
        }
    }

    /// `rm -f NAME`; the local record must be gone afterwards.
    pub async fn force_remove(&self, name: &str, ctx: &Ctx) -> OpResult<RemoveResult> {
        self.check_owned(name)?;
        if !self.store.has_dir(name) {
            return Ok(RemoveResult { existed: false });
        }
        let _busy = self.mark(name, MachineState::Removing);
        let argv = self.argv.force_remove(name);
        let out = self
            .exec
            .run(
                "force_remove",
                name,
                &argv,
                ctx.deadline(LONG),
                &ctx.cancel,
                LOUD,
            )
            .await?;
        self.connect.forget(name);
        if self.store.has_dir(name) {
            Err(fail(
                ErrorKind::Failed,
                format!(
                    "docker-machine rm -f left {} behind: {}",
                    self.store.machine_dir(name).display(),
                    out.error_text()
                ),
            ))
        } else {
            Ok(RemoveResult { existed: true })
        }
    }

    /// Driver and labels from `config.json` (no process).
    pub fn inspect(&self, name: &str) -> OpResult<InspectResult> {
        self.check_name(name)?;
        Ok(self.store.inspect(name)?)
    }
}

/// `inspect` for existence: stdout discarded, stderr logged at error level.
const QUIET_ERR: crate::exec::Levels = crate::exec::Levels {
    stdout: crate::exec::Level::Debug,
    stderr: crate::exec::Level::Error,
};
