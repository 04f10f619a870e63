//! drover's provider protocol: what drover and a provider plugin say to each other, and the
//! bounded readers both sides use on what comes from outside ([`bounded`]).
//!
//! This crate is shared by drover and its plugins (`legacy-driver-shim`), so a plugin links the
//! protocol, not drover. It depends on serde (and serde_json for a response's free-form
//! result), thiserror and tokio's I/O traits only: no runtime, no networking.
//!
//! One JSON object per line: drover writes [`Request`]s to the plugin's stdin, the plugin writes
//! [`Response`]s to its stdout and free-form log lines to its stderr. Every request carries an
//! `id` that its response repeats. Unknown fields are ignored on both sides, so either side can
//! grow optional fields without a version bump; [`PROTOCOL_VERSION`] is checked once, at the
//! handshake. This module only defines data and (de)serialisation: spawning and speaking to a
//! plugin is drover's `provider::plugin`, and no scaling decision is ever made here. `docs/provider-plugins.md`
//! is the prose specification of the same types.

#![warn(missing_docs)]

pub mod bounded;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The protocol version this drover speaks. A plugin answering the handshake with another
/// version is refused.
pub const PROTOCOL_VERSION: u32 = 1;

/// Capability: the plugin handles several requests at once and may answer out of order.
/// Without it drover sends one request at a time.
pub const CAP_CONCURRENT: &str = "concurrent";
/// Capability: the plugin understands `cancel` notifications. Without it drover stops a
/// timed-out or cancelled operation by killing the plugin process (and starts a new one).
pub const CAP_CANCEL: &str = "cancel";

/// One operation drover asks a plugin to perform.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Operation {
    /// The first request: versions, plugin identity and capabilities.
    Handshake(HandshakeParams),
    /// Create machine `name` with the driver and options of the runner's `[runners.machine]`.
    Create(CreateParams),
    /// Every machine the plugin can see.
    List,
    /// Does machine `name` exist?
    Exists(NameParams),
    /// Can drover reach machine `name`'s Docker endpoint? (Positive answers may be cached.)
    CanConnect(NameParams),
    /// How to reach machine `name`'s Docker endpoint.
    Credentials(NameParams),
    /// Stop machine `name` (before removal). Failures are reported, and drover goes on.
    Stop(NameParams),
    /// Remove machine `name`. Idempotent: an absent machine is a success.
    Remove(NameParams),
    /// Remove machine `name` even if the cloud side fails; the local record must go.
    ForceRemove(NameParams),
    /// Driver name and metric labels of machine `name`.
    Inspect(NameParams),
}

impl Operation {
    /// The `op` string on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Operation::Handshake(_) => "handshake",
            Operation::Create(_) => "create",
            Operation::List => "list",
            Operation::Exists(_) => "exists",
            Operation::CanConnect(_) => "can_connect",
            Operation::Credentials(_) => "credentials",
            Operation::Stop(_) => "stop",
            Operation::Remove(_) => "remove",
            Operation::ForceRemove(_) => "force_remove",
            Operation::Inspect(_) => "inspect",
        }
    }

    /// The machine this operation is about, if any.
    pub fn machine(&self) -> Option<&str> {
        match self {
            Operation::Create(p) => Some(&p.name),
            Operation::Exists(p)
            | Operation::CanConnect(p)
            | Operation::Credentials(p)
            | Operation::Stop(p)
            | Operation::Remove(p)
            | Operation::ForceRemove(p)
            | Operation::Inspect(p) => Some(&p.name),
            Operation::Handshake(_) | Operation::List => None,
        }
    }
}

/// A request line: `{"id": 7, "op": "exists", "name": "…", "timeout_ms": 3600000}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Chosen by drover, unique per plugin process; the response repeats it.
    pub id: u64,
    /// How long drover will wait for the answer. A plugin should give up (and kill whatever it
    /// started) a little before, and answer with kind `timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The operation and its parameters (flattened: `op` plus the parameter fields).
    #[serde(flatten)]
    pub op: Operation,
}

/// A cancel notification: `{"op": "cancel", "target": 7}`. It has no id and gets no response
/// of its own; the cancelled request is answered (typically with kind `cancelled`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancel {
    /// Always `"cancel"`.
    pub op: String,
    /// The id of the request to abandon.
    pub target: u64,
}

impl Cancel {
    /// The notification abandoning request `target`.
    pub fn new(target: u64) -> Self {
        Cancel {
            op: "cancel".to_string(),
            target,
        }
    }
}

/// Parameters of `handshake`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandshakeParams {
    /// The protocol version drover speaks ([`PROTOCOL_VERSION`]).
    pub protocol_version: u32,
    /// drover's own version, for the plugin's logs.
    #[serde(default)]
    pub drover_version: String,
    /// When set, every machine drover creates has a name starting with this prefix, and the
    /// plugin must refuse (kind `refused`) to stop or remove any machine whose name does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_prefix: Option<String>,
}

/// Parameters of operations on one machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameParams {
    /// The machine name (drover chose it at create).
    pub name: String,
}

/// Parameters of `create`: the `[runners.machine]` shape, passed through opaque.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateParams {
    /// The machine name, chosen by drover.
    pub name: String,
    /// `MachineDriver`.
    #[serde(default)]
    pub driver: String,
    /// `MachineOptions`, each `key=value` or a bare `key`.
    #[serde(default)]
    pub options: Vec<String>,
    /// `MachineOptionsWithName`, each containing `%s` to be replaced with the name.
    #[serde(default)]
    pub options_with_name: Vec<String>,
}

/// A response line: `{"id": 7, "ok": true, "result": {…}}` or
/// `{"id": 7, "ok": false, "error": {"kind": "not_found", "message": "…"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The id of the request answered.
    pub id: u64,
    /// Whether the operation succeeded.
    pub ok: bool,
    /// The operation's result when `ok` (an object; `{}` when there is nothing to say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// The error when not `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<WireError>,
}

impl Response {
    /// A success answering `id`.
    pub fn success(id: u64, result: impl Serialize) -> Self {
        Response {
            id,
            ok: true,
            result: Some(serde_json::to_value(result).unwrap_or(serde_json::Value::Null)),
            error: None,
        }
    }

    /// A failure answering `id`.
    pub fn failure(id: u64, kind: ErrorKind, message: impl Into<String>) -> Self {
        Response {
            id,
            ok: false,
            result: None,
            error: Some(WireError {
                kind,
                message: message.into(),
            }),
        }
    }
}

/// An error on the wire: a kind from a closed set plus a message for humans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    /// What drover branches on.
    pub kind: ErrorKind,
    /// What a human reads. Never parsed.
    #[serde(default)]
    pub message: String,
}

/// The closed set of error kinds. drover branches on the kind, never on the message. A kind
/// drover does not know (from a newer plugin) is read as [`ErrorKind::Failed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The machine does not exist.
    NotFound,
    /// `create` of a name that already exists; the existing machine was left alone.
    AlreadyExists,
    /// The driver, options or plugin settings are wrong; retrying will not help.
    InvalidConfig,
    /// The cloud has no capacity (or quota) for the machine right now.
    InsufficientCapacity,
    /// A temporary problem; the same request may succeed later.
    Transient,
    /// The operation failed for a reason not covered by another kind.
    Failed,
    /// The operation ran out of time; whatever it started was killed.
    Timeout,
    /// The operation was cancelled on drover's request.
    Cancelled,
    /// The plugin refused for safety (e.g. a name outside the configured prefix).
    Refused,
    /// The plugin does not implement this operation or protocol version.
    Unsupported,
    /// The request could not be understood.
    BadRequest,
    /// Any kind this drover does not know.
    #[serde(other)]
    Unknown,
}

impl ErrorKind {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not_found",
            ErrorKind::AlreadyExists => "already_exists",
            ErrorKind::InvalidConfig => "invalid_config",
            ErrorKind::InsufficientCapacity => "insufficient_capacity",
            ErrorKind::Transient => "transient",
            ErrorKind::Failed => "failed",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Refused => "refused",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::Unknown => "failed",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of `handshake`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginInfo {
    /// The protocol version the plugin speaks; must equal [`PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// The plugin's name, e.g. `legacy-driver-shim`.
    pub name: String,
    /// The plugin's version.
    #[serde(default)]
    pub version: String,
    /// Optional abilities ([`CAP_CONCURRENT`], [`CAP_CANCEL`]); unknown ones are ignored.
    #[serde(default)]
    pub capabilities: Vec<String>,
}

impl PluginInfo {
    /// Whether the plugin advertised `cap`.
    pub fn has(&self, cap: &str) -> bool {
        self.capabilities.iter().any(|c| c == cap)
    }
}

/// The result of `list`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListResult {
    /// Every machine the plugin can see, in no particular order.
    #[serde(default)]
    pub machines: Vec<MachineEntry>,
}

/// One machine in a `list` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineEntry {
    /// Its name.
    pub name: String,
    /// A coarse state, when the plugin knows it cheaply.
    #[serde(default)]
    pub state: MachineState,
}

/// Coarse machine states (fleeting-style); `unknown` when the plugin cannot tell cheaply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MachineState {
    /// Being created by this plugin right now.
    Creating,
    /// Created and believed to be running.
    Running,
    /// Stopped.
    Stopped,
    /// Being removed by this plugin right now.
    Removing,
    /// Not known without asking the cloud.
    #[default]
    #[serde(other)]
    Unknown,
}

/// The result of `exists`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExistsResult {
    /// Whether the machine exists.
    pub exists: bool,
}

/// The result of `can_connect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanConnectResult {
    /// Whether the machine's Docker endpoint answered.
    pub can_connect: bool,
}

/// The result of `remove` and `force_remove`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveResult {
    /// `false` when there was nothing to remove (still a success).
    #[serde(default = "yes")]
    pub existed: bool,
}

fn yes() -> bool {
    true
}

/// The result of `credentials`: how to reach the machine's Docker Engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialsResult {
    /// The endpoint.
    pub endpoint: Endpoint,
}

/// A Docker endpoint, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Endpoint {
    /// TCP with TLS: `host` like `tcp://10.0.0.5:2376`; `cert_dir` holds `ca.pem`, `cert.pem`
    /// and `key.pem` (DOCKER_CERT_PATH); `tls_verify` as DOCKER_TLS_VERIFY.
    TcpTls {
        /// `tcp://HOST:PORT`.
        host: String,
        /// Directory with `ca.pem`, `cert.pem`, `key.pem`.
        cert_dir: String,
        /// Verify the server certificate (always true for docker-machine).
        #[serde(default = "yes")]
        tls_verify: bool,
    },
    /// Plain TCP without TLS (test setups only).
    Tcp {
        /// `tcp://HOST:PORT`.
        host: String,
    },
    /// A unix socket on this host.
    Unix {
        /// The socket path, e.g. `/var/run/docker.sock`.
        socket: String,
    },
    /// The machine over SSH (fleeting's connect-info shape): drover logs in and runs
    /// `docker system dial-stdio` there for each connection to its Engine.
    Ssh(SshEndpoint),
    /// An endpoint type this drover does not know.
    #[serde(other)]
    Unsupported,
}

/// How to reach a machine over SSH. At least one of `key` and `key_path` should be set (without
/// either drover asks its SSH agent); the host key is checked against `host_key`, else
/// `known_hosts`, else drover's own `~/.ssh/known_hosts`, and a machine that matches none is
/// refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshEndpoint {
    /// `HOST:PORT` (port 22 when absent), e.g. `10.0.0.5:22`.
    pub address: String,
    /// The login user (fleeting's `username`); it must be allowed to use Docker.
    pub username: String,
    /// A private key file on drover's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_path: Option<String>,
    /// A private key itself, OpenSSH or PEM (fleeting's `key`); wins over `key_path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<PrivateKey>,
    /// The machine's host public key the provider vouches for: `ssh-ed25519 AAAA…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_key: Option<String>,
    /// A known-hosts file (OpenSSH format) to check the host key against instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_hosts: Option<String>,
}

/// A private key: serialised as the plain string, shown as `<redacted>` in debug output.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PrivateKey(pub String);

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The result of `inspect`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InspectResult {
    /// The driver name (`DriverName` for docker-machine).
    #[serde(default)]
    pub driver: String,
    /// Metric labels the plugin knows; for the google driver `zone`, `machine_type`,
    /// `project`, `resolved_zone`, `resolved_machine_type`, … (see the protocol doc).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl InspectResult {
    /// The four `target_*` labels of upstream's autoscaling metrics: zone (the resolved zone
    /// when known), region (the zone up to its last `-`), project and machine type (resolved
    /// when known). Empty for every driver but `google`, as upstream.
    pub fn target_labels(&self) -> [(&'static str, String); 4] {
        let get = |k: &str| self.labels.get(k).cloned().unwrap_or_default();
        let pick = |resolved: &str, plain: &str| {
            let r = get(resolved);
            if r.is_empty() {
                get(plain)
            } else {
                r
            }
        };
        if self.driver != "google" {
            return [
                ("target_zone", String::new()),
                ("target_region", String::new()),
                ("target_project", String::new()),
                ("target_machine_type", String::new()),
            ];
        }
        let zone = pick("resolved_zone", "zone");
        let region = match zone.rfind('-') {
            Some(i) => zone[..i].to_string(),
            None => zone.clone(),
        };
        [
            ("target_zone", zone),
            ("target_region", region),
            ("target_project", get("project")),
            (
                "target_machine_type",
                pick("resolved_machine_type", "machine_type"),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_is_flat_and_unknown_fields_are_ignored() {
        let r: Request =
            serde_json::from_str(r#"{"id":3,"op":"exists","name":"m","future_field":[1,2]}"#)
                .unwrap();
        assert_eq!(r.op, Operation::Exists(NameParams { name: "m".into() }));
        let line = serde_json::to_string(&Request {
            id: 1,
            timeout_ms: None,
            op: Operation::List,
        })
        .unwrap();
        assert_eq!(line, r#"{"id":1,"op":"list"}"#);
    }

    #[test]
    fn unknown_error_kinds_and_endpoints_degrade() {
        let r: Response = serde_json::from_str(
            r#"{"id":1,"ok":false,"error":{"kind":"quota_blown","message":"x"}}"#,
        )
        .unwrap();
        assert_eq!(r.error.unwrap().kind, ErrorKind::Unknown);
        let c: CredentialsResult =
            serde_json::from_str(r#"{"endpoint":{"type":"telepathy","host":"h"}}"#).unwrap();
        assert_eq!(c.endpoint, Endpoint::Unsupported);
    }

    #[test]
    fn ssh_endpoints_round_trip_and_hide_the_key() {
        let line = r#"{"endpoint":{"type":"ssh","address":"10.0.0.5:22","username":"core","key":"PRIVATE","host_key":"ssh-ed25519 AAAAC3Nz","future":1}}"#;
        let c: CredentialsResult = serde_json::from_str(line).unwrap();
        let Endpoint::Ssh(ssh) = &c.endpoint else {
            panic!("not ssh: {c:?}");
        };
        assert_eq!(ssh.address, "10.0.0.5:22");
        assert_eq!(ssh.username, "core");
        assert_eq!(ssh.key, Some(PrivateKey("PRIVATE".into())));
        assert_eq!(ssh.key_path, None);
        assert!(!format!("{c:?}").contains("PRIVATE"));
        let back: CredentialsResult =
            serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        assert!(serde_json::from_str::<CredentialsResult>(
            r#"{"endpoint":{"type":"ssh","username":"u"}}"#
        )
        .is_err());
    }

    #[test]
    fn google_target_labels_prefer_resolved_values() {
        let mut i = InspectResult {
            driver: "google".into(),
            ..Default::default()
        };
        i.labels.insert("zone".into(), "us-east1-b".into());
        i.labels.insert("resolved_zone".into(), "us-east1-c".into());
        i.labels.insert("project".into(), "p".into());
        i.labels
            .insert("machine_type".into(), "n1-standard-1".into());
        let l = i.target_labels();
        assert_eq!(l[0].1, "us-east1-c");
        assert_eq!(l[1].1, "us-east1");
        assert_eq!(l[2].1, "p");
        assert_eq!(l[3].1, "n1-standard-1");
        i.driver = "amazonec2".into();
        assert!(i.target_labels().iter().all(|(_, v)| v.is_empty()));
    }
}
