//! Role credentials for the S3 cache's `RoleARN` / `UploadRoleARN`: an STS `AssumeRole` call
//! with a session policy that narrows the role to the one action (`s3:GetObject` to download,
//! `s3:PutObject` to upload, plus `kms:Decrypt` and `kms:GenerateDataKey` on the key with KMS
//! encryption), as upstream's S3 adapter asks for them.
//!
//! Upstream hands such credentials to its helper with a GoCloud URL; drover signs the job's
//! presigned URLs with them instead, so the credentials never enter the job's containers. The
//! policy therefore names the job's object prefix (`…/project/<id>/*`) rather than one object:
//! the URLs are signed once per job, before the cache keys are expanded.
//!
//! The endpoint is STS in the bucket's region (`AWS_ENDPOINT_URL_STS`, else
//! `AWS_ENDPOINT_URL`, overrides it, as in the AWS SDK). Results are cached per role, bucket,
//! prefix and direction while they stay valid long enough (upstream's rule: the job timeout,
//! at least a minute, at most 55 minutes when an hour covers the job), up to 1000 entries, and
//! at most `AssumeRoleMaxConcurrency` calls (default 5, negative: no limit) run at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use crate::cache::aws_credentials::AwsCredentials;
use crate::config::cache::CacheS3Config;

/// The session upstream asks for.
pub const SESSION: Duration = Duration::from_secs(3600);
/// The longest session STS grants.
const MAX_SESSION: Duration = Duration::from_secs(12 * 3600);
/// Time allowed for one STS call.
const STS_TIMEOUT: Duration = Duration::from_secs(30);
/// Cached role credentials kept at most.
const CACHE_ENTRIES: usize = 1000;
/// Concurrent AssumeRole calls when `AssumeRoleMaxConcurrency` is 0.
const DEFAULT_CONCURRENCY: usize = 5;

/// The ARN partition of an AWS region.
pub fn partition(region: &str) -> &'static str {
    if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else if region.starts_with("cn-") {
        "aws-cn"
    } else {
        "aws"
    }
}

/// Whether uploads are encrypted with a KMS key (`KMS` or `DSSE-KMS` and their aliases).
pub fn kms_encrypted(c: &CacheS3Config) -> bool {
    matches!(
        c.server_side_encryption.to_ascii_uppercase().as_str(),
        "KMS" | "AWS:KMS" | "DSSE-KMS" | "AWS:KMS:DSSE"
    )
}

/// The session policy: the direction's one S3 action on the objects under `prefix`, and the
/// KMS actions a multipart upload needs on the encryption key.
pub fn session_policy(c: &CacheS3Config, region: &str, prefix: &str, upload: bool) -> String {
    let action = if upload {
        "s3:PutObject"
    } else {
        "s3:GetObject"
    };
    let mut statements = vec![serde_json::json!({
        "Effect": "Allow",
        "Action": [action],
        "Resource": format!(
            "arn:{}:s3:::{}/{}*",
            partition(region),
            c.bucket_name,
            prefix
        ),
    })];
    if kms_encrypted(c) {
        statements.push(serde_json::json!({
            "Effect": "Allow",
            "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
            "Resource": c.server_side_encryption_key_id,
        }));
    }
    serde_json::json!({"Version": "2012-10-17", "Statement": statements}).to_string()
}

/// The STS endpoint: `AWS_ENDPOINT_URL_STS`, else `AWS_ENDPOINT_URL`, else STS in `region`.
pub fn endpoint(env: &HashMap<String, String>, region: &str) -> String {
    let set = |k: &str| env.get(k).filter(|v| !v.trim().is_empty()).cloned();
    set("AWS_ENDPOINT_URL_STS")
        .or_else(|| set("AWS_ENDPOINT_URL"))
        .unwrap_or_else(|| {
            let suffix = if region.starts_with("cn-") { ".cn" } else { "" };
            format!("https://sts.{region}.amazonaws.com{suffix}")
        })
}

/// One AssumeRole call.
#[derive(Debug, Clone)]
pub struct AssumeRole {
    /// The role.
    pub role_arn: String,
    /// `RoleSessionName`.
    pub session_name: String,
    /// The session policy (JSON).
    pub policy: String,
    /// `DurationSeconds`.
    pub duration: Duration,
    /// The region the request is signed for.
    pub region: String,
}

/// SigV4 headers (`X-Amz-Date`, `X-Amz-Security-Token`, `Authorization`) for a form POST of
/// `body` to `url` (service `sts`) at `now`.
pub fn sign_form_post(
    url: &reqwest::Url,
    body: &str,
    region: &str,
    creds: &AwsCredentials,
    now: DateTime<Utc>,
) -> Vec<(String, String)> {
    let request = Signed {
        method: "POST",
        url,
        region,
        service: "sts",
        headers: vec![(
            "content-type".to_owned(),
            "application/x-www-form-urlencoded; charset=utf-8".to_owned(),
        )],
        payload_hash: hex::encode(Sha256::digest(body.as_bytes())),
    };
    request.sign(creds, now)
}

/// A request to sign with SigV4.
pub struct Signed<'a> {
    /// The HTTP method.
    pub method: &'a str,
    /// The URL (its query already encoded, pairs in sorted order).
    pub url: &'a reqwest::Url,
    /// The region of the credential scope.
    pub region: &'a str,
    /// The service of the credential scope (`sts`, `s3`).
    pub service: &'a str,
    /// Headers signed besides `host`, `x-amz-date` and the session token (names lower case,
    /// in sorted order before those).
    pub headers: Vec<(String, String)>,
    /// The hex SHA-256 of the body.
    pub payload_hash: String,
}

impl Signed<'_> {
    /// The headers to send (`host` left to the HTTP client), `Authorization` last.
    pub fn sign(mut self, creds: &AwsCredentials, now: DateTime<Utc>) -> Vec<(String, String)> {
        let amz_date = now.format("%Y%m%dT%H%M%SZ").to_string();
        let day = now.format("%Y%m%d").to_string();
        let host = match self.url.port() {
            Some(p) => format!("{}:{p}", self.url.host_str().unwrap_or_default()),
            None => self.url.host_str().unwrap_or_default().to_owned(),
        };
        let mut headers = std::mem::take(&mut self.headers);
        headers.push(("host".to_owned(), host));
        headers.push(("x-amz-date".to_owned(), amz_date.clone()));
        if let Some(t) = &creds.session_token {
            headers.push(("x-amz-security-token".to_owned(), t.clone()));
        }
        headers.sort();
        let signed: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
        let signed = signed.join(";");
        let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
        let path = if self.url.path().is_empty() {
            "/"
        } else {
            self.url.path()
        };
        let query: String = match self.url.query() {
            Some(q) => {
                let mut pairs: Vec<String> = q
                    .split('&')
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        if p.contains('=') {
                            p.to_owned()
                        } else {
                            format!("{p}=")
                        }
                    })
                    .collect();
                pairs.sort();
                pairs.join("&")
            }
            None => String::new(),
        };
        let canonical = format!(
            "{}\n{path}\n{query}\n{canonical_headers}\n{signed}\n{}",
            self.method, self.payload_hash
        );
        let scope = format!("{day}/{}/{}/aws4_request", self.region, self.service);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            hex::encode(Sha256::digest(canonical.as_bytes()))
        );
        let mut key = format!("AWS4{}", creds.secret_key).into_bytes();
        for part in [
            day.as_str(),
            self.region,
            self.service,
            "aws4_request",
            to_sign.as_str(),
        ] {
            key = hmac(&key, part.as_bytes());
        }
        headers.retain(|(k, _)| k != "host");
        headers.push((
            "authorization".to_owned(),
            format!(
                "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={}",
                creds.access_key,
                hex::encode(key)
            ),
        ));
        headers
    }
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length, so this cannot fail.
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

/// The form body of a call (`Action`, `Version` and the parameters, URL-encoded).
fn form(params: &[(&str, &str)]) -> String {
    let mut u = reqwest::Url::parse("http://form.invalid/").expect("a valid URL");
    {
        let mut q = u.query_pairs_mut();
        for (k, v) in params {
            q.append_pair(k, v);
        }
    }
    u.query().unwrap_or_default().to_owned()
}

/// The text of the first `<tag>…</tag>` in an XML answer, entities decoded.
fn xml_text(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&format!("</{tag}>"))?;
    Some(
        xml[start..end]
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
}

/// Calls STS `AssumeRole` at `endpoint` with `base` credentials.
pub async fn assume_role(
    http: &reqwest::Client,
    endpoint: &str,
    base: &AwsCredentials,
    call: &AssumeRole,
) -> Result<AwsCredentials, String> {
    let url =
        reqwest::Url::parse(endpoint).map_err(|e| format!("STS endpoint {endpoint:?}: {e}"))?;
    let duration = call.duration.as_secs().to_string();
    let body = form(&[
        ("Action", "AssumeRole"),
        ("Version", "2011-06-15"),
        ("RoleArn", &call.role_arn),
        ("RoleSessionName", &call.session_name),
        ("Policy", &call.policy),
        ("DurationSeconds", &duration),
    ]);
    let mut request = http.post(url.clone()).body(body.clone());
    for (k, v) in sign_form_post(&url, &body, &call.region, base, Utc::now()) {
        request = request.header(k, v);
    }
    let response = request
        .send()
        .await
        .map_err(|e| format!("STS AssumeRole at {endpoint}: {e}"))?;
    let status = response.status();
    let answer = crate::cache::aws_credentials::read_body(response, endpoint)
        .await
        .map_err(|e| format!("STS AssumeRole: {e}"))?;
    let xml = String::from_utf8_lossy(&answer);
    if !status.is_success() {
        return Err(format!(
            "STS AssumeRole at {endpoint} answered {status}: {} {}",
            xml_text(&xml, "Code").unwrap_or_default(),
            xml_text(&xml, "Message").unwrap_or_default()
        ));
    }
    let field = |tag: &str| {
        xml_text(&xml, tag)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("STS AssumeRole at {endpoint}: the answer has no {tag}"))
    };
    let expiration = field("Expiration")?;
    let expires = DateTime::parse_from_rfc3339(&expiration)
        .map_err(|e| format!("STS AssumeRole: Expiration {expiration:?}: {e}"))?
        .with_timezone(&Utc);
    Ok(AwsCredentials {
        access_key: field("AccessKeyId")?,
        secret_key: field("SecretAccessKey")?,
        session_token: Some(field("SessionToken")?),
        expires: Some(expires),
        source: "STS AssumeRole",
    })
}

/// The time the role's credentials must stay valid for a job of `timeout`, and the session
/// asked for: upstream's one hour with at least `timeout` (but at least a minute, and at most
/// 55 minutes, so cached credentials are reused) when an hour covers the job; for longer jobs
/// the whole timeout, with a session that long (STS's 12 hours at most).
pub fn validity_and_session(timeout: Duration) -> (Duration, Duration) {
    let needed = timeout.max(Duration::from_secs(60));
    if needed <= SESSION {
        (needed.min(Duration::from_secs(55 * 60)), SESSION)
    } else {
        (needed, (needed + Duration::from_secs(300)).min(MAX_SESSION))
    }
}

/// Cached role credentials by role, bucket, prefix and direction.
static CACHE: Mutex<Vec<(String, AwsCredentials)>> = Mutex::new(Vec::new());
/// The concurrency limit of each configuration.
static LIMITS: Mutex<Vec<(String, Arc<tokio::sync::Semaphore>)>> = Mutex::new(Vec::new());

fn cached(key: &str, valid_until: DateTime<Utc>) -> Option<AwsCredentials> {
    let cache = CACHE.lock().ok()?;
    cache
        .iter()
        .find(|(k, c)| k == key && c.expires.is_some_and(|e| e >= valid_until))
        .map(|(_, c)| c.clone())
}

fn remember(key: String, creds: &AwsCredentials) {
    let Ok(mut cache) = CACHE.lock() else {
        return;
    };
    let now = Utc::now();
    cache.retain(|(k, c)| *k != key && c.expires.is_some_and(|e| e > now));
    if cache.len() >= CACHE_ENTRIES {
        // The entry that expires first goes.
        if let Some(i) = (0..cache.len()).min_by_key(|i| cache[*i].1.expires) {
            cache.swap_remove(i);
        }
    }
    cache.push((key, creds.clone()));
}

fn limit(c: &CacheS3Config) -> Option<Arc<tokio::sync::Semaphore>> {
    let permits = match c.assume_role_max_concurrency {
        n if n < 0 => return None,
        0 => DEFAULT_CONCURRENCY,
        n => usize::try_from(n).unwrap_or(DEFAULT_CONCURRENCY),
    };
    let key = format!("{}\0{}\0{permits}", c.role_arn, c.upload_role_arn);
    let mut limits = LIMITS.lock().ok()?;
    if let Some((_, s)) = limits.iter().find(|(k, _)| *k == key) {
        return Some(s.clone());
    }
    let s = Arc::new(tokio::sync::Semaphore::new(permits));
    limits.push((key, s.clone()));
    Some(s)
}

/// What a job's cache direction asks STS for.
#[derive(Debug, Clone)]
pub struct RoleRequest<'a> {
    /// The role.
    pub role_arn: &'a str,
    /// The bucket's region.
    pub region: &'a str,
    /// The job's object prefix in the bucket.
    pub prefix: &'a str,
    /// Upload (`s3:PutObject`) or download (`s3:GetObject`).
    pub upload: bool,
    /// The job timeout (the presigned URLs' lifetime).
    pub timeout: Duration,
    /// The STS endpoint.
    pub endpoint: String,
}

/// The role's credentials for one direction of a job's cache: cached ones while they stay
/// valid long enough (unless `DisableAssumeRoleCredentialsCaching`), else a new AssumeRole
/// call signed with `base`, within the configuration's concurrency limit. A session longer
/// than upstream's hour that STS refuses is asked again for an hour.
pub async fn role_credentials(
    c: &CacheS3Config,
    base: &AwsCredentials,
    r: &RoleRequest<'_>,
) -> Result<AwsCredentials, String> {
    let (validity, session) = validity_and_session(r.timeout);
    let key = format!(
        "{}\0{}\0{}\0{}",
        r.role_arn, c.bucket_name, r.prefix, r.upload
    );
    let use_cache = !c.disable_assume_role_credentials_caching;
    let valid_until = |now: DateTime<Utc>| {
        now + chrono::Duration::from_std(validity).unwrap_or(chrono::Duration::hours(1))
    };
    if use_cache {
        if let Some(creds) = cached(&key, valid_until(Utc::now())) {
            return Ok(creds);
        }
    }
    let limit = limit(c);
    let _permit = match &limit {
        Some(s) => Some(
            s.acquire()
                .await
                .map_err(|e| format!("waiting for an AssumeRole slot: {e}"))?,
        ),
        None => None,
    };
    // Another job may have fetched them while this one waited.
    if use_cache {
        if let Some(creds) = cached(&key, valid_until(Utc::now())) {
            return Ok(creds);
        }
    }
    let http = crate::helper::http::client(STS_TIMEOUT)?;
    let nonce: [u8; 8] = rand::random();
    let mut call = AssumeRole {
        role_arn: r.role_arn.to_owned(),
        session_name: format!("gitlab-runner-cache-upload-{}", hex::encode(nonce)),
        policy: session_policy(c, r.region, r.prefix, r.upload),
        duration: session,
        region: r.region.to_owned(),
    };
    let mut result = assume_role(&http, &r.endpoint, base, &call).await;
    if session > SESSION
        && result
            .as_ref()
            .is_err_and(|e| e.contains("ValidationError") || e.contains("DurationSeconds"))
    {
        call.duration = SESSION;
        result = assume_role(&http, &r.endpoint, base, &call).await;
    }
    let creds = result.map_err(|e| format!("assuming role {}: {e}", r.role_arn))?;
    if use_cache {
        remember(key, &creds);
    }
    Ok(creds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> AwsCredentials {
        AwsCredentials {
            access_key: "AKIDEXAMPLE".into(),
            secret_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
            expires: None,
            source: "config",
        }
    }

    #[test]
    fn signature_matches_the_aws_sdk() {
        // The same request signed by botocore's SigV4Auth (service sts, region us-east-1, at
        // 2015-08-30T12:36:00Z), without and with a session token, gives these signatures.
        let url = reqwest::Url::parse("https://sts.us-east-1.amazonaws.com/").unwrap();
        let body = "Action=GetCallerIdentity&Version=2011-06-15";
        let now = DateTime::parse_from_rfc3339("2015-08-30T12:36:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let auth = |creds: &AwsCredentials| {
            sign_form_post(&url, body, "us-east-1", creds, now)
                .into_iter()
                .find(|(k, _)| k == "authorization")
                .map(|(_, v)| v)
                .unwrap_or_default()
        };
        let scope = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/sts/aws4_request";
        assert_eq!(
            auth(&base()),
            format!(
                "{scope}, SignedHeaders=content-type;host;x-amz-date, \
                 Signature=52a8540fea00e731072179f763577cbe2a45eac2c5d32fb4d785f3eefac88165"
            )
        );
        let mut with_token = base();
        with_token.session_token = Some("TOKEN".into());
        assert_eq!(
            auth(&with_token),
            format!(
                "{scope}, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, \
                 Signature=df766bcb7fd842e04d5ffee86f2e73a8b11eb19627adfb431093b9218da64928"
            )
        );
    }

    #[test]
    fn policy_names_the_direction_the_prefix_and_the_kms_key() {
        let mut c = CacheS3Config {
            bucket_name: "cache".into(),
            ..Default::default()
        };
        let p: serde_json::Value = serde_json::from_str(&session_policy(
            &c,
            "eu-west-1",
            "runner/abc/project/1/",
            false,
        ))
        .unwrap();
        assert_eq!(
            p,
            serde_json::json!({"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Action": ["s3:GetObject"],
                 "Resource": "arn:aws:s3:::cache/runner/abc/project/1/*"}]})
        );
        c.server_side_encryption = "dsse-kms".into();
        c.server_side_encryption_key_id = "arn:aws-us-gov:kms:us-gov-west-1:1:key/k".into();
        let p: serde_json::Value =
            serde_json::from_str(&session_policy(&c, "us-gov-west-1", "p/", true)).unwrap();
        assert_eq!(
            p["Statement"][0]["Resource"],
            "arn:aws-us-gov:s3:::cache/p/*"
        );
        assert_eq!(p["Statement"][0]["Action"][0], "s3:PutObject");
        assert_eq!(
            p["Statement"][1],
            serde_json::json!({"Effect": "Allow", "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                "Resource": "arn:aws-us-gov:kms:us-gov-west-1:1:key/k"})
        );
        assert_eq!(partition("cn-north-1"), "aws-cn");
    }

    #[test]
    fn endpoints_and_sessions() {
        let mut env = HashMap::new();
        assert_eq!(
            endpoint(&env, "eu-west-1"),
            "https://sts.eu-west-1.amazonaws.com"
        );
        assert_eq!(
            endpoint(&env, "cn-north-1"),
            "https://sts.cn-north-1.amazonaws.com.cn"
        );
        env.insert("AWS_ENDPOINT_URL".into(), "http://all:1".into());
        assert_eq!(endpoint(&env, "eu-west-1"), "http://all:1");
        env.insert("AWS_ENDPOINT_URL_STS".into(), "http://sts:2".into());
        assert_eq!(endpoint(&env, "eu-west-1"), "http://sts:2");
        let min = |m: u64| Duration::from_secs(m * 60);
        assert_eq!(validity_and_session(Duration::ZERO), (min(1), min(60)));
        assert_eq!(validity_and_session(min(30)), (min(30), min(60)));
        assert_eq!(validity_and_session(min(60)), (min(55), min(60)));
        assert_eq!(validity_and_session(min(180)), (min(180), min(185)));
        assert_eq!(
            validity_and_session(min(24 * 60)),
            (min(24 * 60), min(12 * 60))
        );
    }

    #[test]
    fn xml_fields() {
        let xml = "<AssumeRoleResponse><Credentials><AccessKeyId>ASIA1</AccessKeyId>\
                   <SessionToken>a&amp;b</SessionToken></Credentials></AssumeRoleResponse>";
        assert_eq!(xml_text(xml, "AccessKeyId").as_deref(), Some("ASIA1"));
        assert_eq!(xml_text(xml, "SessionToken").as_deref(), Some("a&b"));
        assert_eq!(xml_text(xml, "Expiration"), None);
    }
}
