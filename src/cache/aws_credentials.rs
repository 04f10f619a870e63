//! AWS credentials for an S3 cache without keys (upstream's "IAM" authentication type), found
//! the way upstream's AWS SDK finds them, in its order:
//!
//! 1. the environment: `AWS_ACCESS_KEY_ID` (or `AWS_ACCESS_KEY`) with `AWS_SECRET_ACCESS_KEY`
//!    (or `AWS_SECRET_KEY`), and `AWS_SESSION_TOKEN`;
//! 2. the shared credentials file: `AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`,
//!    profile `AWS_PROFILE` (else `default`), static keys only;
//! 3. the container credentials endpoint (ECS, EKS Pod Identity):
//!    `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` on `http://169.254.170.2`, else
//!    `AWS_CONTAINER_CREDENTIALS_FULL_URI`, with `AWS_CONTAINER_AUTHORIZATION_TOKEN` (or the
//!    contents of `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`) as `Authorization`;
//! 4. the instance profile from the EC2 instance metadata service (IMDSv2 session token, else
//!    IMDSv1), at `AWS_EC2_METADATA_SERVICE_ENDPOINT` (default `http://169.254.169.254`),
//!    skipped when `AWS_EC2_METADATA_DISABLED=true`.
//!
//! Not followed (each yields "no credentials" here, where the SDK would try it): profiles
//! that name a `role_arn`, `credential_process`, SSO or a web identity token file.
//!
//! The environment is passed in, so tests do not depend on the process's. Temporary
//! credentials are cached until five minutes before they expire, and a failed lookup is
//! remembered for 5 to 15 minutes, so jobs on a host without any source do not each wait for
//! the metadata service ([`cached_default_chain`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// The default instance metadata endpoint.
pub const IMDS_ENDPOINT: &str = "http://169.254.169.254";
/// The ECS container credentials host for `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`.
pub const ECS_ENDPOINT: &str = "http://169.254.170.2";
/// Time allowed for each request to a metadata or container endpoint.
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest answer read from a metadata or container endpoint.
const MAX_ANSWER: usize = 64 * 1024;
/// Cached credentials are renewed this long before they expire.
const RENEW_BEFORE: chrono::Duration = chrono::Duration::minutes(5);

/// Credentials and where they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsCredentials {
    /// The access key ID.
    pub access_key: String,
    /// The secret access key.
    pub secret_key: String,
    /// The session token of temporary credentials.
    pub session_token: Option<String>,
    /// When temporary credentials expire.
    pub expires: Option<DateTime<Utc>>,
    /// The provider that gave them (for logs and errors).
    pub source: &'static str,
}

/// The inputs of the chain: environment variables and the home directory.
#[derive(Debug, Clone, Default)]
pub struct ChainInputs {
    /// Environment variables (only the `AWS_*` ones are read).
    pub env: HashMap<String, String>,
    /// The home directory (for `~/.aws/credentials`).
    pub home: Option<PathBuf>,
}

impl ChainInputs {
    /// The process's environment and home directory.
    pub fn from_process() -> Self {
        ChainInputs {
            env: std::env::vars()
                .filter(|(k, _)| k.starts_with("AWS_"))
                .collect(),
            home: std::env::var_os("HOME").map(PathBuf::from),
        }
    }

    fn var(&self, key: &str) -> Option<&str> {
        self.env
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// Resolves credentials through the chain; the error lists what each provider said.
pub async fn default_chain(inputs: &ChainInputs) -> Result<AwsCredentials, String> {
    let mut tried = Vec::new();
    match from_env(inputs) {
        Ok(c) => return Ok(c),
        Err(e) => tried.push(format!("environment: {e}")),
    }
    match from_shared_file(inputs) {
        Ok(c) => return Ok(c),
        Err(e) => tried.push(format!("shared credentials file: {e}")),
    }
    let http = crate::helper::http::client(ENDPOINT_TIMEOUT)?;
    match from_container(&http, inputs).await {
        Ok(c) => return Ok(c),
        Err(e) => tried.push(format!("container credentials: {e}")),
    }
    match from_imds(&http, inputs).await {
        Ok(c) => return Ok(c),
        Err(e) => tried.push(format!("instance metadata: {e}")),
    }
    Err(format!(
        "no AWS credentials found ({}); give the runner an instance profile or set \
         AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or set AccessKey, SecretKey and \
         ServerAddress in [runners.cache.s3]",
        tried.join("; ")
    ))
}

/// A failed lookup is remembered for this long plus up to [`FAILURE_SPREAD`]: the AWS SDK's
/// window (5 to 15 minutes) before it asks an unavailable credential service again. On a host
/// without a metadata service, only the first job in that window waits for the lookup.
pub const FAILURE_MEMORY: Duration = Duration::from_secs(5 * 60);
/// The random part of the failure memory.
pub const FAILURE_SPREAD: Duration = Duration::from_secs(10 * 60);

/// What the last lookup gave.
#[derive(Debug, Clone)]
enum Remembered {
    Found(AwsCredentials),
    Failed {
        error: String,
        at: DateTime<Utc>,
        retry_at: DateTime<Utc>,
    },
}

/// The last lookup's result: credentials until shortly before they expire (static ones until
/// the process ends), a failure for [`FAILURE_MEMORY`] plus a random part of
/// [`FAILURE_SPREAD`].
#[derive(Debug, Default)]
pub struct ChainCache {
    state: Mutex<Option<Remembered>>,
}

impl ChainCache {
    /// An empty cache.
    pub const fn new() -> Self {
        ChainCache {
            state: Mutex::new(None),
        }
    }

    /// The remembered result at `now`, else `lookup`'s (then remembered).
    pub async fn get<F, Fut>(&self, now: DateTime<Utc>, lookup: F) -> Result<AwsCredentials, String>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<AwsCredentials, String>>,
    {
        let remembered = self.state.lock().ok().and_then(|g| g.clone());
        match remembered {
            Some(Remembered::Found(c)) if c.expires.is_none_or(|e| e - RENEW_BEFORE > now) => {
                return Ok(c)
            }
            Some(Remembered::Failed {
                error,
                at,
                retry_at,
            }) if now < retry_at => {
                return Err(format!(
                    "{error} (remembered from the lookup at {}; asked again after {})",
                    at.format("%H:%M:%S UTC"),
                    retry_at.format("%H:%M:%S UTC")
                ))
            }
            _ => {}
        }
        let result = lookup().await;
        let entry = match &result {
            Ok(c) => Remembered::Found(c.clone()),
            Err(e) => {
                let wait = FAILURE_MEMORY + FAILURE_SPREAD.mul_f64(rand::random::<f64>());
                Remembered::Failed {
                    error: e.clone(),
                    at: now,
                    retry_at: now
                        + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::minutes(5)),
                }
            }
        };
        if let Ok(mut g) = self.state.lock() {
            *g = Some(entry);
        }
        result
    }
}

/// The process-wide result of the chain.
static CACHED: ChainCache = ChainCache::new();

/// [`default_chain`] on the process's environment, through the process-wide [`ChainCache`].
pub async fn cached_default_chain() -> Result<AwsCredentials, String> {
    CACHED
        .get(Utc::now(), || async {
            default_chain(&ChainInputs::from_process()).await
        })
        .await
}

fn from_env(inputs: &ChainInputs) -> Result<AwsCredentials, String> {
    let key = inputs
        .var("AWS_ACCESS_KEY_ID")
        .or_else(|| inputs.var("AWS_ACCESS_KEY"));
    let secret = inputs
        .var("AWS_SECRET_ACCESS_KEY")
        .or_else(|| inputs.var("AWS_SECRET_KEY"));
    match (key, secret) {
        (Some(k), Some(s)) => Ok(AwsCredentials {
            access_key: k.to_owned(),
            secret_key: s.to_owned(),
            session_token: inputs.var("AWS_SESSION_TOKEN").map(str::to_owned),
            expires: None,
            source: "environment",
        }),
        (None, None) => Err("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set".into()),
        (Some(_), None) => Err("AWS_ACCESS_KEY_ID is set without AWS_SECRET_ACCESS_KEY".into()),
        (None, Some(_)) => Err("AWS_SECRET_ACCESS_KEY is set without AWS_ACCESS_KEY_ID".into()),
    }
}

fn from_shared_file(inputs: &ChainInputs) -> Result<AwsCredentials, String> {
    let path = match inputs.var("AWS_SHARED_CREDENTIALS_FILE") {
        Some(p) => PathBuf::from(p),
        None => match &inputs.home {
            Some(h) => h.join(".aws").join("credentials"),
            None => return Err("no home directory".into()),
        },
    };
    let profile = inputs.var("AWS_PROFILE").unwrap_or("default");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let values = ini_section(&text, profile);
    let get = |k: &str| {
        values
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    match (get("aws_access_key_id"), get("aws_secret_access_key")) {
        (Some(access_key), Some(secret_key)) => Ok(AwsCredentials {
            access_key,
            secret_key,
            session_token: get("aws_session_token"),
            expires: None,
            source: "shared credentials file",
        }),
        _ => Err(format!(
            "{}: profile {profile:?} has no aws_access_key_id and aws_secret_access_key",
            path.display()
        )),
    }
}

/// The `key = value` lines of `[section]` in an INI text (comments and blank lines skipped).
fn ini_section(text: &str, section: &str) -> Vec<(String, String)> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = name.trim() == section;
            continue;
        }
        if inside {
            if let Some((k, v)) = line.split_once('=') {
                out.push((k.trim().to_owned(), v.trim().to_owned()));
            }
        }
    }
    out
}

async fn from_container(
    http: &reqwest::Client,
    inputs: &ChainInputs,
) -> Result<AwsCredentials, String> {
    let url = if let Some(relative) = inputs.var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
        format!("{ECS_ENDPOINT}{relative}")
    } else if let Some(full) = inputs.var("AWS_CONTAINER_CREDENTIALS_FULL_URI") {
        full.to_owned()
    } else {
        return Err("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI are not set".into());
    };
    let token = match inputs.var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE") {
        Some(file) => Some(
            std::fs::read_to_string(file)
                .map_err(|e| format!("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE {file}: {e}"))?
                .trim()
                .to_owned(),
        ),
        None => inputs
            .var("AWS_CONTAINER_AUTHORIZATION_TOKEN")
            .map(str::to_owned),
    };
    let mut request = http.get(&url);
    if let Some(t) = token {
        request = request.header("Authorization", t);
    }
    let body = answer(request, &url).await?;
    parse_credentials(&body, "container credentials").map_err(|e| format!("{url}: {e}"))
}

async fn from_imds(http: &reqwest::Client, inputs: &ChainInputs) -> Result<AwsCredentials, String> {
    if inputs
        .var("AWS_EC2_METADATA_DISABLED")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    {
        return Err("AWS_EC2_METADATA_DISABLED is true".into());
    }
    let base = inputs
        .var("AWS_EC2_METADATA_SERVICE_ENDPOINT")
        .unwrap_or(IMDS_ENDPOINT)
        .trim_end_matches('/')
        .to_owned();
    // IMDSv2: a session token; an endpoint that refuses it is asked without one (IMDSv1).
    let token_url = format!("{base}/latest/api/token");
    let token = answer(
        http.put(&token_url)
            .header("X-aws-ec2-metadata-token-ttl-seconds", "21600"),
        &token_url,
    )
    .await
    .ok()
    .map(|t| t.trim().to_owned())
    .filter(|t| !t.is_empty());
    let get = |url: String| {
        let mut r = http.get(url);
        if let Some(t) = &token {
            r = r.header("X-aws-ec2-metadata-token", t);
        }
        r
    };
    let roles_url = format!("{base}/latest/meta-data/iam/security-credentials/");
    let roles = answer(get(roles_url.clone()), &roles_url).await?;
    let role = roles
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .ok_or_else(|| format!("{roles_url}: no instance profile role"))?;
    let creds_url = format!("{roles_url}{role}");
    let body = answer(get(creds_url.clone()), &creds_url).await?;
    parse_credentials(&body, "instance profile").map_err(|e| format!("{creds_url}: {e}"))
}

/// The body of an answer, at most [`MAX_ANSWER`] bytes (the AWS endpoints' answers are small).
pub(crate) async fn read_body(
    mut response: reqwest::Response,
    url: &str,
) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| format!("{url}: {e}"))? {
        if body.len() + chunk.len() > MAX_ANSWER {
            return Err(format!("{url}: answer longer than {MAX_ANSWER} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The body of a successful answer, at most [`MAX_ANSWER`] bytes.
async fn answer(request: reqwest::RequestBuilder, url: &str) -> Result<String, String> {
    let response = request.send().await.map_err(|e| format!("{url}: {e}"))?;
    let status = response.status();
    let body = read_body(response, url).await?;
    if !status.is_success() {
        return Err(format!("{url}: answered {status}"));
    }
    String::from_utf8(body).map_err(|_| format!("{url}: answer is not UTF-8"))
}

/// The credential JSON of the metadata and container endpoints.
fn parse_credentials(body: &str, source: &'static str) -> Result<AwsCredentials, String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Answer {
        #[serde(default)]
        code: Option<String>,
        #[serde(default)]
        message: Option<String>,
        #[serde(default)]
        access_key_id: String,
        #[serde(default)]
        secret_access_key: String,
        #[serde(default)]
        token: Option<String>,
        #[serde(default)]
        expiration: Option<String>,
    }
    let a: Answer =
        serde_json::from_str(body).map_err(|e| format!("credential answer is not JSON: {e}"))?;
    if let Some(code) = a.code.as_deref().filter(|c| *c != "Success") {
        return Err(format!(
            "answered code {code:?}: {}",
            a.message.unwrap_or_default()
        ));
    }
    if a.access_key_id.is_empty() || a.secret_access_key.is_empty() {
        return Err("the answer has no AccessKeyId or SecretAccessKey".into());
    }
    let expires = match a.expiration.as_deref().filter(|e| !e.is_empty()) {
        Some(e) => Some(
            DateTime::parse_from_rfc3339(e)
                .map_err(|err| format!("Expiration {e:?}: {err}"))?
                .with_timezone(&Utc),
        ),
        None => None,
    };
    Ok(AwsCredentials {
        access_key: a.access_key_id,
        secret_key: a.secret_access_key,
        session_token: a.token.filter(|t| !t.is_empty()),
        expires,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(pairs: &[(&str, &str)]) -> ChainInputs {
        ChainInputs {
            env: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            home: None,
        }
    }

    #[test]
    fn environment_keys_with_their_alternative_names() {
        let c = from_env(&inputs(&[
            ("AWS_ACCESS_KEY", "AK"),
            ("AWS_SECRET_ACCESS_KEY", "SK"),
            ("AWS_SESSION_TOKEN", "ST"),
        ]))
        .unwrap();
        assert_eq!(
            (
                c.access_key.as_str(),
                c.secret_key.as_str(),
                c.session_token.as_deref()
            ),
            ("AK", "SK", Some("ST"))
        );
        let e = from_env(&inputs(&[("AWS_ACCESS_KEY_ID", "AK")])).unwrap_err();
        assert!(e.contains("without AWS_SECRET_ACCESS_KEY"), "{e}");
    }

    #[test]
    fn shared_file_profile() {
        let dir = std::env::temp_dir().join(format!("drover-aws-creds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("credentials");
        std::fs::write(
            &file,
            "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n\n# other\n[ci]\naws_access_key_id=C\naws_secret_access_key=CS\naws_session_token = CT\n",
        )
        .unwrap();
        let path = file.to_string_lossy().to_string();
        let c = from_shared_file(&inputs(&[("AWS_SHARED_CREDENTIALS_FILE", &path)])).unwrap();
        assert_eq!((c.access_key.as_str(), c.session_token), ("D", None));
        let c = from_shared_file(&inputs(&[
            ("AWS_SHARED_CREDENTIALS_FILE", &path),
            ("AWS_PROFILE", "ci"),
        ]))
        .unwrap();
        assert_eq!(
            (c.access_key.as_str(), c.session_token.as_deref()),
            ("C", Some("CT"))
        );
        let e = from_shared_file(&inputs(&[
            ("AWS_SHARED_CREDENTIALS_FILE", &path),
            ("AWS_PROFILE", "none"),
        ]))
        .unwrap_err();
        assert!(e.contains("\"none\""), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn credential_answers() {
        let c = parse_credentials(
            r#"{"Code":"Success","AccessKeyId":"A","SecretAccessKey":"S","Token":"T","Expiration":"2030-01-02T03:04:05Z"}"#,
            "instance profile",
        )
        .unwrap();
        assert_eq!(c.session_token.as_deref(), Some("T"));
        assert_eq!(
            c.expires.map(|e| e.to_rfc3339()).as_deref(),
            Some("2030-01-02T03:04:05+00:00")
        );
        let e = parse_credentials(
            r#"{"Code":"AssumeRoleUnauthorizedAccess","Message":"no role"}"#,
            "instance profile",
        )
        .unwrap_err();
        assert!(e.contains("AssumeRoleUnauthorizedAccess"), "{e}");
        assert!(parse_credentials("{}", "x").is_err());
        assert!(parse_credentials("not json", "x").is_err());
    }

    #[tokio::test]
    async fn metadata_disabled_and_nothing_set() {
        let e = default_chain(&inputs(&[
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials"),
        ]))
        .await
        .unwrap_err();
        assert!(e.contains("AWS_EC2_METADATA_DISABLED is true"), "{e}");
        assert!(e.contains("instance profile"), "{e}");
    }

    #[tokio::test]
    async fn a_failed_lookup_is_remembered_for_a_while() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let cache = ChainCache::new();
        let calls = AtomicUsize::new(0);
        let t0 = Utc::now();
        let failing = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<AwsCredentials, String>("instance metadata: timed out".into())
        };
        assert_eq!(
            cache.get(t0, failing).await.unwrap_err(),
            "instance metadata: timed out"
        );
        // Later jobs within the window get the failure without a lookup.
        for minutes in [1, 4] {
            let e = cache
                .get(t0 + chrono::Duration::minutes(minutes), failing)
                .await
                .unwrap_err();
            assert!(
                e.starts_with("instance metadata: timed out (remembered"),
                "{e}"
            );
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // After the window (15 minutes at most) the chain is asked again, and credentials
        // found then are used from then on.
        let found = AwsCredentials {
            access_key: "A".into(),
            secret_key: "S".into(),
            session_token: None,
            expires: None,
            source: "environment",
        };
        let later = t0 + chrono::Duration::minutes(15);
        let c = cache
            .get(later, || async { Ok(found.clone()) })
            .await
            .unwrap();
        assert_eq!(c, found);
        assert_eq!(
            cache.get(later + chrono::Duration::hours(3), failing).await,
            Ok(found)
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
