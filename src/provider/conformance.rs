//! The conformance suite: a black-box check that a plugin executable speaks the protocol.
//!
//! It plays drover's side against a real plugin process: handshake, unknown operations and
//! fields, the absent-machine answers, create → exists → list → can_connect → credentials →
//! inspect → stop → remove, idempotent removal, the name-prefix refusal, concurrent calls, a
//! clean stdout and exit on EOF. Each check yields one [`CheckResult`]; `drover provider test`
//! prints them one per line and the cargo tests assert on them. The suite creates exactly one
//! machine (named with the configured prefix) and removes it again.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::Rng;
use serde_json::{json, Map, Value};

use super::plugin::{Plugin, PluginCommand};
use super::protocol::{CreateParams, ErrorKind, CAP_CONCURRENT, PROTOCOL_VERSION};
use super::{Call, Endpoint, Provider, ProviderError};

/// What the suite needs to know about the plugin under test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuiteConfig {
    /// `MachineDriver` for the test machine.
    pub driver: String,
    /// `MachineOptions` for the test machine.
    pub options: Vec<String>,
    /// `MachineOptionsWithName` for the test machine.
    pub options_with_name: Vec<String>,
    /// Name prefix sent at the handshake; the test machine's name starts with it. Must not be
    /// empty (the refusal check needs a name outside it).
    pub name_prefix: String,
    /// Deadline for each call.
    pub timeout: Duration,
}

impl Default for SuiteConfig {
    fn default() -> Self {
        SuiteConfig {
            driver: String::new(),
            options: Vec::new(),
            options_with_name: Vec::new(),
            name_prefix: "drover-conformance-".into(),
            timeout: Duration::from_secs(120),
        }
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// The check's name.
    pub name: &'static str,
    /// `Ok(detail)` or `Err(reason)`.
    pub outcome: Result<String, String>,
    /// How long it took.
    pub elapsed: Duration,
}

impl CheckResult {
    /// Whether the check passed.
    pub fn passed(&self) -> bool {
        self.outcome.is_ok()
    }

    /// The line `drover provider test` prints.
    pub fn line(&self) -> String {
        let ms = self.elapsed.as_millis();
        match &self.outcome {
            Ok(d) if d.is_empty() => format!("ok    {} ({ms} ms)", self.name),
            Ok(d) => format!("ok    {}: {d} ({ms} ms)", self.name),
            Err(r) => format!("FAIL  {}: {r} ({ms} ms)", self.name),
        }
    }
}

type Outcome = Result<String, String>;

struct Runner<'a, F: FnMut(&CheckResult)> {
    results: Vec<CheckResult>,
    report: &'a mut F,
}

impl<F: FnMut(&CheckResult)> Runner<'_, F> {
    async fn check<Fut: std::future::Future<Output = Outcome>>(
        &mut self,
        name: &'static str,
        f: Fut,
    ) -> bool {
        let start = Instant::now();
        let outcome = f.await;
        let r = CheckResult {
            name,
            outcome,
            elapsed: start.elapsed(),
        };
        (self.report)(&r);
        let ok = r.passed();
        self.results.push(r);
        ok
    }
}

fn random_suffix() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{secs}-{:08x}", rand::rng().random::<u32>())
}

fn expect_kind<T: std::fmt::Debug>(r: Result<T, ProviderError>, kind: ErrorKind) -> Outcome {
    match r {
        Err(e) if e.kind() == kind => Ok(format!("{kind}")),
        Err(e) => Err(format!("expected error kind {kind}, got: {e}")),
        Ok(v) => Err(format!("expected error kind {kind}, got success {v:?}")),
    }
}

/// Runs the suite against the plugin `cmd` describes, calling `report` after every check.
/// The plugin is started with `cfg.name_prefix` as its handshake prefix.
pub async fn run(
    mut cmd: PluginCommand,
    cfg: &SuiteConfig,
    mut report: impl FnMut(&CheckResult),
) -> Vec<CheckResult> {
    cmd.name_prefix = Some(cfg.name_prefix.clone());
    let plugin = Plugin::new(cmd);
    let mut r = Runner {
        results: Vec::new(),
        report: &mut report,
    };
    let call = Call::with_timeout(cfg.timeout);
    let t = cfg.timeout;

    let ok = r
        .check("handshake", async {
            let info = plugin.start().await.map_err(|e| e.to_string())?;
            if info.protocol_version != PROTOCOL_VERSION || info.name.trim().is_empty() {
                return Err(format!("bad handshake answer {info:?}"));
            }
            Ok(format!(
                "{} {} protocol {} capabilities [{}]",
                info.name,
                info.version,
                info.protocol_version,
                info.capabilities.join(", ")
            ))
        })
        .await;
    if !ok {
        return r.results;
    }

    let absent = format!("{}{}", cfg.name_prefix, random_suffix());
    let name = format!("{}{}", cfg.name_prefix, random_suffix());

    r.check("unknown_operation", async {
        let mut o = Map::new();
        o.insert("op".into(), json!("drover_conformance_no_such_op"));
        let resp = plugin.call_json(o, t).await.map_err(|e| e.to_string())?;
        match resp.error {
            Some(e) if !resp.ok && e.kind == ErrorKind::Unsupported => Ok("unsupported".into()),
            _ => Err(format!("expected error kind unsupported, got {resp:?}")),
        }
    })
    .await;
    r.check("unknown_fields_ignored", async {
        let mut o = Map::new();
        o.insert("op".into(), json!("exists"));
        o.insert("name".into(), Value::String(absent.clone()));
        o.insert("x_conformance_extra".into(), json!({"nested": [1, 2]}));
        let resp = plugin.call_json(o, t).await.map_err(|e| e.to_string())?;
        match (&resp.result, resp.ok) {
            (Some(v), true) if v.get("exists") == Some(&json!(false)) => Ok(String::new()),
            _ => Err(format!("expected {{\"exists\": false}}, got {resp:?}")),
        }
    })
    .await;
    r.check("exists_absent", async {
        match plugin.exists(&absent, &call).await {
            Ok(false) => Ok(String::new()),
            other => Err(format!("expected false, got {other:?}")),
        }
    })
    .await;
    r.check("credentials_absent", async {
        expect_kind(
            plugin.credentials(&absent, &call).await,
            ErrorKind::NotFound,
        )
    })
    .await;
    r.check("remove_absent_is_success", async {
        plugin
            .remove(&absent, &call)
            .await
            .map(|_| String::new())
            .map_err(|e| e.to_string())
    })
    .await;
    r.check("force_remove_absent_is_success", async {
        plugin
            .force_remove(&absent, &call)
            .await
            .map(|_| String::new())
            .map_err(|e| e.to_string())
    })
    .await;
    r.check("refuse_outside_prefix", async {
        let outsider = format!("not-{}", random_suffix());
        expect_kind(plugin.remove(&outsider, &call).await, ErrorKind::Refused)?;
        expect_kind(
            plugin.force_remove(&outsider, &call).await,
            ErrorKind::Refused,
        )
    })
    .await;

    let params = CreateParams {
        name: name.clone(),
        driver: cfg.driver.clone(),
        options: cfg.options.clone(),
        options_with_name: cfg.options_with_name.clone(),
    };
    let created = r
        .check("create", async {
            // Raw, to see the answer as sent: `result` must be an object, never null.
            let request = crate::provider::protocol::Request {
                id: 0,
                timeout_ms: Some(u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
                op: crate::provider::protocol::Operation::Create(params.clone()),
            };
            let object = match serde_json::to_value(&request) {
                Ok(serde_json::Value::Object(o)) => o,
                other => return Err(format!("cannot encode the create request: {other:?}")),
            };
            let resp = plugin
                .call_json(object, t)
                .await
                .map_err(|e| e.to_string())?;
            match (resp.ok, &resp.result, &resp.error) {
                (true, Some(serde_json::Value::Object(_)), _) => Ok(name.clone()),
                (true, other, _) => Err(format!(
                    "create answered ok with result {}; the protocol's result is always an object ({{}} at least)",
                    other.as_ref().map_or("null (or missing)".to_string(), |v| v.to_string())
                )),
                (false, _, Some(e)) => Err(format!("{}: {}", e.kind.as_str(), e.message)),
                (false, _, None) => Err("create failed without an error".into()),
            }
        })
        .await;
    if created {
        r.check("create_duplicate_refused", async {
            expect_kind(
                plugin.create(&params, &call).await,
                ErrorKind::AlreadyExists,
            )?;
            match plugin.exists(&name, &call).await {
                Ok(true) => Ok("already_exists, original kept".into()),
                other => Err(format!(
                    "original machine gone after duplicate create: {other:?}"
                )),
            }
        })
        .await;
        r.check("exists_present", async {
            match plugin.exists(&name, &call).await {
                Ok(true) => Ok(String::new()),
                other => Err(format!("expected true, got {other:?}")),
            }
        })
        .await;
        r.check("list_contains", async {
            let l = plugin.list(&call).await.map_err(|e| e.to_string())?;
            if l.iter().any(|m| m.name == name) {
                Ok(format!("{} machine(s)", l.len()))
            } else {
                Err(format!("{name} missing from {l:?}"))
            }
        })
        .await;
        r.check("can_connect", async {
            plugin
                .can_connect(&name, &call)
                .await
                .map(|b| b.to_string())
                .map_err(|e| e.to_string())
        })
        .await;
        r.check("credentials", async {
            match plugin.credentials(&name, &call).await {
                Ok(Endpoint::TcpTls { host, cert_dir, .. })
                    if !host.is_empty() && !cert_dir.is_empty() =>
                {
                    // drover will read these files to talk to the machine.
                    let dir = std::path::Path::new(&cert_dir);
                    let missing: Vec<&str> = ["ca.pem", "cert.pem", "key.pem"]
                        .into_iter()
                        .filter(|f| !dir.join(f).is_file())
                        .collect();
                    if !dir.is_absolute() {
                        Err(format!(
                            "cert_dir {cert_dir:?} is relative; it must be absolute"
                        ))
                    } else if missing.is_empty() {
                        Ok(format!("tcp_tls {host} {cert_dir}"))
                    } else {
                        Err(format!(
                            "cert_dir {cert_dir:?} lacks {}: drover could not talk to the machine",
                            missing.join(", ")
                        ))
                    }
                }
                Ok(Endpoint::Ssh(ssh)) => ssh_endpoint_usable(&ssh),
                Ok(Endpoint::Tcp { host }) if !host.is_empty() => Ok(format!("tcp {host}")),
                Ok(Endpoint::Unix { socket }) if !socket.is_empty() => Ok(format!("unix {socket}")),
                other => Err(format!("expected a usable endpoint, got {other:?}")),
            }
        })
        .await;
        r.check("inspect", async {
            match plugin.inspect(&name, &call).await {
                Ok(i) if !i.driver.is_empty() => Ok(format!("driver {}", i.driver)),
                other => Err(format!("expected a driver name, got {other:?}")),
            }
        })
        .await;
        r.check("concurrent_calls", async {
            let (a, b) = tokio::join!(plugin.exists(&name, &call), plugin.exists(&absent, &call));
            let concurrent = plugin.start().await.map(|i| i.has(CAP_CONCURRENT));
            match (a, b) {
                (Ok(true), Ok(false)) => Ok(match concurrent {
                    Ok(true) => "answered out of order allowed".into(),
                    _ => "serialised by drover".into(),
                }),
                other => Err(format!("expected (true, false), got {other:?}")),
            }
        })
        .await;
        r.check("stop_answers", async {
            match plugin.stop(&name, &call).await {
                Ok(()) => Ok("stopped".into()),
                Err(ProviderError::Plugin { kind, message, .. }) => {
                    Ok(format!("refused with {kind} (drover goes on): {message}"))
                }
                Err(e) => Err(e.to_string()),
            }
        })
        .await;
        r.check("remove", async {
            match plugin.remove(&name, &call).await {
                Ok(res) if res.existed => Ok(String::new()),
                other => Err(format!("expected existed=true, got {other:?}")),
            }
        })
        .await;
        r.check("gone_after_remove", async {
            match plugin.exists(&name, &call).await {
                Ok(false) => {}
                other => return Err(format!("exists: expected false, got {other:?}")),
            }
            let l = plugin.list(&call).await.map_err(|e| e.to_string())?;
            if l.iter().any(|m| m.name == name) {
                return Err(format!("{name} still listed"));
            }
            expect_kind(plugin.credentials(&name, &call).await, ErrorKind::NotFound)
                .map(|_| String::new())
        })
        .await;
        r.check("remove_is_idempotent", async {
            match plugin.remove(&name, &call).await {
                Ok(res) if !res.existed => Ok(String::new()),
                other => Err(format!(
                    "expected success with existed=false, got {other:?}"
                )),
            }
        })
        .await;
    }
    r.check("stdout_clean", async {
        match plugin.stray_lines() {
            0 => Ok(String::new()),
            n => Err(format!("{n} non-protocol line(s) on stdout; log to stderr")),
        }
    })
    .await;
    r.check("exits_on_eof", async {
        if plugin.shutdown(Duration::from_secs(5)).await {
            Ok(String::new())
        } else {
            Err("still running 5 s after stdin closed; killed".into())
        }
    })
    .await;
    if created {
        // Best effort: never leave the test machine behind.
        let cleanup = Plugin::new(PluginCommand {
            name_prefix: Some(cfg.name_prefix.clone()),
            ..plugin_cmd_of(&plugin)
        });
        let _ = cleanup.force_remove(&name, &call).await;
        cleanup.shutdown(Duration::from_secs(5)).await;
    }
    r.results
}

fn plugin_cmd_of(p: &Plugin) -> PluginCommand {
    p.command().clone()
}

/// Whether an `ssh` credentials answer is complete enough for drover to log in and check the
/// host key: an address and user, an absolute readable key file (or the key itself), and a
/// vouched host key or an absolute known-hosts file.
fn ssh_endpoint_usable(e: &super::protocol::SshEndpoint) -> Result<String, String> {
    let file_ok = |what: &str, p: &str| {
        let path = std::path::Path::new(p);
        if !path.is_absolute() {
            Err(format!("{what} {p:?} is relative; it must be absolute"))
        } else if !path.is_file() {
            Err(format!("{what} {p:?} is not a readable file"))
        } else {
            Ok(())
        }
    };
    if e.address.trim().is_empty() || e.username.trim().is_empty() {
        return Err(format!(
            "an ssh endpoint needs an address and a username, got {e:?}"
        ));
    }
    let key = match (&e.key, &e.key_path) {
        (Some(k), _) if !k.0.trim().is_empty() => "key".to_string(),
        (_, Some(p)) if !p.is_empty() => {
            file_ok("key_path", p)?;
            format!("key_path {p}")
        }
        _ => return Err("an ssh endpoint needs key or key_path".into()),
    };
    let host = match (&e.host_key, &e.known_hosts) {
        (Some(h), _) if !h.trim().is_empty() => "host_key".to_string(),
        (_, Some(p)) if !p.is_empty() => {
            file_ok("known_hosts", p)?;
            format!("known_hosts {p}")
        }
        _ => {
            return Err(
                "an ssh endpoint needs host_key or known_hosts: drover refuses a machine whose host key nobody vouches for"
                    .into(),
            )
        }
    };
    Ok(format!("ssh {}@{} {key} {host}", e.username, e.address))
}
