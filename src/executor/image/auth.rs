//! Registry credentials for a pull, resolved as upstream does:
//!
//! - Sources, in order: the `DOCKER_AUTH_CONFIG` variable (`$DOCKER_AUTH_CONFIG`), the runner
//!   user's `~/.docker/config.json` (else `~/.dockercfg`), then the job payload's `registry`
//!   credentials (`job payload (GitLab Registry)`). A docker config contributes its `auths`,
//!   every server its `credsStore` lists, and each `credHelpers` entry.
//! - Every entry is keyed by its registry path ([`registry_path`]: an `http(s)://` URL becomes
//!   its lower-cased host, `index.docker.io` is `docker.io`; otherwise the tag is dropped and
//!   the host lower-cased). The first source to give a path keeps it.
//! - An image is matched by its normalised path ([`image_path`]), then each parent path in
//!   turn: the longest path wins, whatever source it came from.
//! - Credential helpers are run as processes (`docker-credential-<name> get` / `list`, the
//!   server on stdin), with a timeout and bounded output. A source whose helper fails (or is
//!   missing) is skipped with a warning naming it; a helper name that is a path (not a bare
//!   name) refuses the pull.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use bollard::auth::DockerCredentials;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::job::Credentials;

/// The source name of the `DOCKER_AUTH_CONFIG` variable.
pub const SOURCE_VARIABLE: &str = "$DOCKER_AUTH_CONFIG";
/// The source name of the payload's credentials.
pub const SOURCE_PAYLOAD: &str = "job payload (GitLab Registry)";

/// How long a credential helper may run.
pub const HELPER_TIMEOUT: Duration = Duration::from_secs(30);
/// The most output read from a credential helper.
pub const HELPER_OUTPUT_LIMIT: usize = 1 << 20;

/// One set of credentials and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegistryAuth {
    /// The registry path it applies to (and below).
    pub path: String,
    /// Where it came from (`$DOCKER_AUTH_CONFIG`, a file path, the payload).
    pub source: String,
    /// User name.
    pub username: String,
    /// Password or secret.
    pub password: String,
    /// Identity token (OAuth refresh token), if any.
    pub identity_token: String,
    /// Registry token, if any.
    pub registry_token: String,
    /// The server address as written in the source.
    pub server_address: String,
}

impl RegistryAuth {
    /// The credentials for the Engine's `X-Registry-Auth`.
    pub fn docker_credentials(&self) -> DockerCredentials {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        DockerCredentials {
            username: some(&self.username),
            password: some(&self.password),
            serveraddress: some(&self.server_address),
            identitytoken: some(&self.identity_token),
            registrytoken: some(&self.registry_token),
            ..Default::default()
        }
    }
}

/// Why no credentials could be resolved at all (the pull is refused).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resolving registry credentials: {0}")]
pub struct AuthError(pub String);

/// Lower-cases the host part of `path` (the text before the first `/`).
fn lower_host(path: &str) -> String {
    match path.split_once('/') {
        Some((host, rest)) => format!("{}/{rest}", host.to_lowercase()),
        None => path.to_lowercase(),
    }
}

/// The registry path of a credentials key (a `config.json` `auths` key, a helper's server, a
/// payload URL).
pub fn registry_path(server: &str) -> String {
    let lower = server.to_ascii_lowercase();
    let stripped = ["https://", "http://"]
        .iter()
        .find(|p| lower.starts_with(**p))
        .map(|p| &server[p.len()..]);
    if let Some(rest) = stripped {
        let host = rest.split('/').next().unwrap_or_default().to_lowercase();
        return if host == "index.docker.io" {
            "docker.io".to_string()
        } else {
            host
        };
    }
    let path = server.strip_suffix('/').unwrap_or(server);
    let path = match (path.rfind(':'), path.rfind('/')) {
        (Some(tag), Some(slash)) if tag > slash => &path[..tag],
        _ => path,
    };
    lower_host(path)
}

/// The path an image is looked up by: the tag dropped, Docker Hub names under `docker.io`,
/// `index.docker.io` as `docker.io`, the host lower-cased.
pub fn image_path(image: &str) -> String {
    let (dir, last) = match image.rfind('/') {
        Some(i) => (&image[..=i], &image[i + 1..]),
        None => ("", image),
    };
    let last = last.split(':').next().unwrap_or_default();
    let joined = format!("{dir}{last}");
    let normalized = joined.trim_end_matches('/');
    let first = normalized.split('/').next().unwrap_or_default();
    let hub = !normalized.contains('/')
        || (!first.contains('.')
            && !first.contains(':')
            && !first.eq_ignore_ascii_case("localhost"));
    let out = if hub {
        format!("docker.io/{normalized}")
    } else if first.eq_ignore_ascii_case("index.docker.io") {
        normalized
            .split_once('.')
            .map(|(_, r)| r.to_string())
            .unwrap_or_default()
    } else {
        normalized.to_string()
    };
    lower_host(&out)
}

/// The credentials for `image` among `all` (longest matching path first).
pub fn for_image<'a>(all: &'a [RegistryAuth], image: &str) -> Option<&'a RegistryAuth> {
    let mut path = image_path(image);
    loop {
        if path.is_empty() {
            return None;
        }
        if let Some(found) = all.iter().find(|a| a.path == path) {
            return Some(found);
        }
        match path.rfind('/') {
            Some(i) => path.truncate(i),
            None => return None,
        }
    }
}

/// Runs credential helpers: the `PATH` they are searched on and their time limit.
#[derive(Debug, Clone)]
pub struct Helpers {
    /// The search path (`PATH` of the runner by default).
    pub path: Option<OsString>,
    /// Time limit per helper run.
    pub timeout: Duration,
}

impl Default for Helpers {
    fn default() -> Self {
        Helpers {
            path: std::env::var_os("PATH"),
            timeout: HELPER_TIMEOUT,
        }
    }
}

/// What a helper run failed with.
enum HelperError {
    /// The helper has no credentials for that server.
    NotFound,
    /// Anything else (missing helper, crash, bad output, timeout).
    Failed(String),
}

impl Helpers {
    fn find(&self, program: &str) -> Option<PathBuf> {
        let path = self.path.as_ref()?;
        std::env::split_paths(path)
            .map(|dir| dir.join(program))
            .find(|p| is_executable(p))
    }

    async fn run(&self, helper: &str, action: &str, input: &str) -> Result<String, HelperError> {
        let program = format!("docker-credential-{helper}");
        let Some(exe) = self.find(&program) else {
            return Err(HelperError::Failed(format!(
                "credential helper {program} not found on PATH: install it on the runner's \
                 host or remove it from the docker config"
            )));
        };
        let mut child = tokio::process::Command::new(&exe)
            .arg(action)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| HelperError::Failed(format!("running {}: {e}", exe.display())))?;
        let mut stdin = child.stdin.take();
        let mut stdout = child.stdout.take();
        let work = async {
            if let Some(mut s) = stdin.take() {
                let _ = s.write_all(input.as_bytes()).await;
                drop(s);
            }
            let mut out = Vec::new();
            if let Some(s) = stdout.take() {
                let mut limited = s.take(HELPER_OUTPUT_LIMIT as u64 + 1);
                let _ = limited.read_to_end(&mut out).await;
            }
            let status = child.wait().await;
            (out, status)
        };
        let (out, status) = tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| {
                HelperError::Failed(format!(
                    "{program} {action} did not finish within {}s",
                    self.timeout.as_secs()
                ))
            })?;
        if out.len() > HELPER_OUTPUT_LIMIT {
            return Err(HelperError::Failed(format!(
                "{program} {action} wrote more than {HELPER_OUTPUT_LIMIT} bytes"
            )));
        }
        let text = String::from_utf8_lossy(&out).trim().to_string();
        match status {
            Ok(s) if s.success() => Ok(text),
            Ok(_) if text == "credentials not found in native keychain" => {
                Err(HelperError::NotFound)
            }
            Ok(s) => Err(HelperError::Failed(format!(
                "{program} {action} failed ({s}): {}",
                text.chars().take(200).collect::<String>()
            ))),
            Err(e) => Err(HelperError::Failed(format!("{program} {action}: {e}"))),
        }
    }

    /// `get` for one server: `None` when the helper has nothing for it.
    async fn get(&self, helper: &str, server: &str) -> Result<Option<RegistryAuth>, String> {
        match self.run(helper, "get", server).await {
            Ok(text) => {
                let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                    format!("docker-credential-{helper} get: output is not JSON: {e}")
                })?;
                let field = |name: &str| {
                    json.as_object()
                        .and_then(|o| {
                            o.iter()
                                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                                .map(|(_, v)| v)
                        })
                        .and_then(|v| v.as_str())
                        .unwrap_or_default()
                        .to_string()
                };
                let (user, secret) = (field("Username"), field("Secret"));
                let mut auth = RegistryAuth {
                    server_address: server.to_string(),
                    ..Default::default()
                };
                if user == "<token>" {
                    auth.identity_token = secret;
                } else {
                    auth.username = user;
                    auth.password = secret;
                }
                Ok(Some(auth))
            }
            Err(HelperError::NotFound) => Ok(None),
            Err(HelperError::Failed(e)) => Err(e),
        }
    }

    /// `list`: the servers a store has credentials for.
    async fn list(&self, helper: &str) -> Result<Vec<String>, String> {
        match self.run(helper, "list", "").await {
            Ok(text) => {
                let map: BTreeMap<String, serde_json::Value> = serde_json::from_str(&text)
                    .map_err(|e| {
                        format!("docker-credential-{helper} list: output is not JSON: {e}")
                    })?;
                Ok(map.into_keys().collect())
            }
            Err(HelperError::NotFound) => Ok(Vec::new()),
            Err(HelperError::Failed(e)) => Err(e),
        }
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A helper name must be a bare name: a path would run any program of the runner's host.
fn check_helper_name(name: &str) -> Result<(), AuthError> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(AuthError(format!(
            "credential helper {name:?} is not a bare name (path traversal is not allowed)"
        )));
    }
    Ok(())
}

/// The outcome of reading one docker config.
enum ConfigError {
    /// The whole pull is refused.
    Refuse(AuthError),
    /// This source is skipped (with a warning).
    Skip(String),
}

/// The credentials in one docker `config.json` text, `server → auth`, sorted by server.
async fn read_config(text: &str, helpers: &Helpers) -> Result<Vec<RegistryAuth>, ConfigError> {
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| ConfigError::Skip(format!("not JSON: {e}")))?;
    let Some(obj) = json.as_object() else {
        return Err(ConfigError::Skip("not a JSON object".into()));
    };
    let store = obj
        .get("credsStore")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    let cred_helpers: Vec<(String, String)> = obj
        .get("credHelpers")
        .and_then(|v| v.as_object())
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    let mut auths: BTreeMap<String, RegistryAuth> = BTreeMap::new();
    if let Some(map) = obj.get("auths").and_then(|v| v.as_object()) {
        for (server, entry) in map {
            let s = |k: &str| {
                entry
                    .get(k)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string()
            };
            let mut auth = RegistryAuth {
                username: s("username"),
                password: s("password"),
                identity_token: s("identitytoken"),
                registry_token: s("registrytoken"),
                server_address: server.clone(),
                ..Default::default()
            };
            let encoded = s("auth");
            if !encoded.is_empty() {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(encoded.trim())
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| {
                        ConfigError::Skip(format!("the auth of {server:?} is not base64"))
                    })?;
                let (u, p) = decoded.split_once(':').ok_or_else(|| {
                    ConfigError::Skip(format!("the auth of {server:?} is not user:password"))
                })?;
                auth.username = u.to_string();
                auth.password = p.trim_end_matches('\n').to_string();
            }
            auths.insert(server.clone(), auth);
        }
    }
    if !store.is_empty() {
        check_helper_name(store).map_err(ConfigError::Refuse)?;
    }
    for (_, helper) in &cred_helpers {
        check_helper_name(helper).map_err(ConfigError::Refuse)?;
    }
    if !store.is_empty() {
        for server in helpers.list(store).await.map_err(ConfigError::Skip)? {
            if let Some(auth) = helpers
                .get(store, &server)
                .await
                .map_err(ConfigError::Skip)?
            {
                auths.insert(server, auth);
            }
        }
    }
    for (server, helper) in &cred_helpers {
        if let Some(auth) = helpers
            .get(helper, server)
            .await
            .map_err(ConfigError::Skip)?
        {
            auths.insert(server.clone(), auth);
        }
    }
    Ok(auths.into_values().collect())
}

/// Where the credentials for a job's pulls come from.
#[derive(Debug, Clone, Default)]
pub struct AuthSources {
    /// The `DOCKER_AUTH_CONFIG` variable's value, if set.
    pub docker_auth_config: Option<String>,
    /// The runner user's home directory (its `.docker/config.json` or `.dockercfg`).
    pub home: Option<PathBuf>,
    /// The payload's credentials.
    pub payload: Vec<Credentials>,
    /// How credential helpers are run.
    pub helpers: Helpers,
}

impl AuthSources {
    /// Every credential, in source order (a path keeps its first source). `warn` collects
    /// the warnings for the job log.
    pub async fn all(&self, warn: &mut Vec<String>) -> Result<Vec<RegistryAuth>, AuthError> {
        let mut out: Vec<RegistryAuth> = Vec::new();
        let mut add = |source: &str, list: Vec<RegistryAuth>| {
            for mut a in list {
                a.path = registry_path(&a.server_address);
                a.source = source.to_string();
                let empty = a.username.is_empty()
                    && a.password.is_empty()
                    && a.identity_token.is_empty()
                    && a.registry_token.is_empty();
                if a.path.is_empty() || empty || out.iter().any(|e| e.path == a.path) {
                    continue;
                }
                out.push(a);
            }
        };
        let mut configs: Vec<(String, String)> = Vec::new();
        if let Some(text) = self
            .docker_auth_config
            .as_deref()
            .filter(|t| !t.trim().is_empty())
        {
            configs.push((SOURCE_VARIABLE.to_string(), text.to_string()));
        }
        if let Some(home) = &self.home {
            for file in [home.join(".docker/config.json"), home.join(".dockercfg")] {
                match std::fs::read(&file) {
                    Ok(bytes) if bytes.len() <= 16 << 20 => {
                        configs.push((
                            file.display().to_string(),
                            String::from_utf8_lossy(&bytes).into_owned(),
                        ));
                        break;
                    }
                    Ok(_) => {
                        warn.push(format!(
                            "Failed to resolve credentials from {}: larger than 16 MiB. \
                             Credentials from this source will not be used.",
                            file.display()
                        ));
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        warn.push(format!(
                            "Failed to resolve credentials from {}: {e}. Credentials from \
                             this source will not be used.",
                            file.display()
                        ));
                        break;
                    }
                }
            }
        }
        for (source, text) in configs {
            match read_config(&text, &self.helpers).await {
                Ok(list) => add(&source, list),
                Err(ConfigError::Refuse(e)) => return Err(e),
                Err(ConfigError::Skip(why)) => warn.push(format!(
                    "Failed to resolve credentials from {source}: {why}. Credentials from this \
                     source will not be used."
                )),
            }
        }
        let payload = self
            .payload
            .iter()
            .filter(|c| c.r#type == "registry")
            .map(|c| RegistryAuth {
                username: c.username.clone(),
                password: c.password.clone(),
                server_address: c.url.clone(),
                ..Default::default()
            })
            .collect();
        add(SOURCE_PAYLOAD, payload);
        Ok(out)
    }

    /// The credentials for `image`, if any.
    pub async fn for_image(
        &self,
        image: &str,
        warn: &mut Vec<String>,
    ) -> Result<Option<RegistryAuth>, AuthError> {
        let all = self.all(warn).await?;
        Ok(for_image(&all, image).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(
            registry_path("https://registry.domain.tld:5005/v1/"),
            "registry.domain.tld:5005"
        );
        assert_eq!(registry_path("my.HOST/With/tag:1"), "my.host/With/tag");
        assert_eq!(image_path("ruby:3"), "docker.io/ruby");
        assert_eq!(
            image_path("InDex.DOCKER.io/user/ubuntu"),
            "docker.io/user/ubuntu"
        );
    }
}
