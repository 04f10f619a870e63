//! S3 presigning with rusty-s3, addressed as upstream's S3 adapter does: `ServerAddress` as a
//! custom endpoint (https unless `Insecure`, the scheme's own port dropped; `s3.amazonaws.com`
//! counts as none), else AWS's regional endpoint for `BucketLocation` (dual-stack unless
//! `DualStack = false`, `s3-accelerate` with `Accelerate`); path style when `PathStyle` says
//! so, else automatically (virtual-host style on AWS, Google and Alibaba endpoints, path style
//! on other custom endpoints and for dotted bucket names over https); access keys with an
//! optional session token, IAM credentials from the AWS chain ([`super::aws_credentials`]) or a
//! role's STS credentials ([`super::sts`]), and the server-side-encryption headers the PUT is
//! signed with.

use std::time::Duration;

use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};

use crate::cache::aws_credentials::AwsCredentials;
use crate::cache::remote::{Download, Upload};
use crate::config::cache::CacheS3Config;

/// Why an S3 cache cannot be used.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum S3Error {
    /// `BucketName` is empty.
    #[error("[runners.cache.s3] BucketName is empty")]
    NoBucket,
    /// IAM credentials (gitlab-runner's rule picks them when `ServerAddress`, `AccessKey` or
    /// `SecretKey` is empty, or with `AuthenticationType = "iam"`) could not be found.
    #[error("[runners.cache.s3] uses IAM credentials (ServerAddress, AccessKey or SecretKey is empty, or AuthenticationType = \"iam\"): {0}")]
    Iam(String),
    /// The role of `RoleARN` / `UploadRoleARN` could not be assumed.
    #[error("[runners.cache.s3] {setting}: {message}")]
    Role {
        /// `RoleARN` or `UploadRoleARN`.
        setting: &'static str,
        /// What STS or the base credentials said.
        message: String,
    },
    /// An unknown `AuthenticationType`.
    #[error("[runners.cache.s3] AuthenticationType {0:?} is not one of access-key, iam")]
    AuthType(String),
    /// The endpoint or bucket is not valid.
    #[error("[runners.cache.s3] endpoint {endpoint:?}, bucket {bucket:?}: {message}")]
    Endpoint {
        /// The endpoint URL.
        endpoint: String,
        /// The bucket.
        bucket: String,
        /// Why.
        message: String,
    },
}

/// A configured S3 cache.
#[derive(Debug, Clone)]
pub struct S3Cache {
    bucket: Bucket,
    credentials: Credentials,
    expires: Duration,
    encryption: Vec<(String, String)>,
}

impl S3Cache {
    /// The cache from `[runners.cache.s3]` with access keys, with URLs valid for `expires`;
    /// IAM settings are an error here (see [`S3Cache::with_iam`]).
    pub fn new(c: &CacheS3Config, expires: Duration) -> Result<Self, S3Error> {
        Self::with_iam(c, expires, None)
    }

    /// The cache from `[runners.cache.s3]`, with URLs valid for `expires`, signed with `iam`
    /// (the credential chain's result) when the settings ask for IAM credentials.
    pub fn with_iam(
        c: &CacheS3Config,
        expires: Duration,
        iam: Option<&Result<AwsCredentials, String>>,
    ) -> Result<Self, S3Error> {
        let creds = base_credentials(c, iam)?;
        Self::signed_with(c, expires, &creds)
    }

    /// The cache from `[runners.cache.s3]`, with URLs valid for `expires`, signed with `creds`
    /// (the configured or IAM credentials, or a role's).
    pub fn signed_with(
        c: &CacheS3Config,
        expires: Duration,
        creds: &AwsCredentials,
    ) -> Result<Self, S3Error> {
        if c.bucket_name.trim().is_empty() {
            return Err(S3Error::NoBucket);
        }
        let region = region(c);
        let endpoint = base_url(c, &region);
        let style = if path_style(c) {
            UrlStyle::Path
        } else {
            UrlStyle::VirtualHost
        };
        let bad = |message: String| S3Error::Endpoint {
            endpoint: endpoint.clone(),
            bucket: c.bucket_name.clone(),
            message,
        };
        let url = reqwest::Url::parse(&endpoint).map_err(|e| bad(e.to_string()))?;
        let bucket = Bucket::new(url, style, c.bucket_name.clone(), region)
            .map_err(|e| bad(e.to_string()))?;
        let credentials = match &creds.session_token {
            None => Credentials::new(creds.access_key.clone(), creds.secret_key.clone()),
            Some(token) => Credentials::new_with_token(
                creds.access_key.clone(),
                creds.secret_key.clone(),
                token.clone(),
            ),
        };
        let kms = |alg: &str| {
            let mut h = vec![("x-amz-server-side-encryption".to_string(), alg.to_string())];
            if !c.server_side_encryption_key_id.is_empty() {
                h.push((
                    "x-amz-server-side-encryption-aws-kms-key-id".to_string(),
                    c.server_side_encryption_key_id.clone(),
                ));
            }
            h
        };
        let encryption = match c.server_side_encryption.to_ascii_uppercase().as_str() {
            "" => Vec::new(),
            "S3" | "AES256" => vec![(
                "x-amz-server-side-encryption".to_string(),
                "AES256".to_string(),
            )],
            "KMS" | "AWS:KMS" => kms("aws:kms"),
            "DSSE-KMS" | "AWS:KMS:DSSE" => kms("aws:kms:dsse"),
            other => {
                // As upstream: an unknown value uploads without encryption, with a warning.
                tracing::warn!(
                    value = other,
                    "unknown ServerSideEncryption value in [runners.cache.s3]; uploading without server-side encryption (use S3, KMS or DSSE-KMS)"
                );
                Vec::new()
            }
        };
        Ok(S3Cache {
            bucket,
            credentials,
            expires,
            encryption,
        })
    }

    /// Presigned GET and HEAD URLs for `object`.
    pub fn download(&self, object: &str) -> Download {
        let get = self.bucket.get_object(Some(&self.credentials), object);
        let head = self.bucket.head_object(Some(&self.credentials), object);
        Download {
            url: get.sign(self.expires).to_string(),
            head_url: Some(head.sign(self.expires).to_string()),
        }
    }

    /// A presigned PUT for `object`, signed with the cache key metadata and the encryption
    /// headers, which the helper must send as they are, and a presigned HEAD of the same
    /// object (with the same credentials) for the helper's `--check-url`.
    pub fn upload(&self, object: &str, key: &str) -> Upload {
        let mut put = self.bucket.put_object(Some(&self.credentials), object);
        let mut headers = vec![("x-amz-meta-cachekey".to_string(), key.to_string())];
        headers.extend(self.encryption.iter().cloned());
        for (k, v) in &headers {
            put.headers_mut().insert(k.clone(), v.clone());
        }
        let head = self.bucket.head_object(Some(&self.credentials), object);
        Upload {
            url: put.sign(self.expires).to_string(),
            headers: headers.iter().map(|(k, v)| format!("{k}: {v}")).collect(),
            check_url: Some(head.sign(self.expires).to_string()),
        }
    }
}

/// The region upstream falls back to.
pub const FALLBACK_REGION: &str = "us-east-1";

/// The bucket's region as upstream finds it when `BucketLocation` is empty: GetBucketLocation
/// on the custom endpoint (else AWS's global one), signed for us-east-1 with `creds`; an empty
/// answer is us-east-1 and `EU` is eu-west-1. Any failure gives us-east-1, with upstream's
/// warning.
///
/// A bucket's region does not change: a found one is remembered for the process (per location
/// URL, at most [`REGIONS_KEPT`] buckets), so only the first job asks; failures are not.
pub async fn detect_region(c: &CacheS3Config, creds: &AwsCredentials) -> String {
    let key = location_url(c).map(|u| u.to_string()).ok();
    if let Some(region) = key.as_ref().and_then(|k| found_regions().get(k).cloned()) {
        return region;
    }
    match bucket_location(c, creds).await {
        Ok(region) => {
            tracing::debug!(bucket = %c.bucket_name, location = %region, "Successfully detected S3 bucket location");
            if let Some(k) = key {
                let mut found = found_regions();
                if found.len() < REGIONS_KEPT {
                    found.insert(k, region.clone());
                }
            }
            region
        }
        Err(e) => {
            tracing::warn!(bucket = %c.bucket_name, error = %e, "Failed to detect S3 bucket location, falling back to default region");
            FALLBACK_REGION.to_owned()
        }
    }
}

/// How many buckets' detected regions [`detect_region`] keeps.
const REGIONS_KEPT: usize = 1024;

fn found_regions() -> std::sync::MutexGuard<'static, std::collections::HashMap<String, String>> {
    static FOUND: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, String>>> =
        std::sync::OnceLock::new();
    FOUND
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// The bucket's `?location` URL: path or virtual-host style as the settings say.
pub fn location_url(c: &CacheS3Config) -> Result<reqwest::Url, String> {
    let endpoint = custom_endpoint(c).unwrap_or_else(|| AWS_DEFAULT_ENDPOINT.to_owned());
    let mut url =
        reqwest::Url::parse(&endpoint).map_err(|e| format!("endpoint {endpoint:?}: {e}"))?;
    if path_style(c) {
        url.set_path(&format!("/{}", c.bucket_name));
    } else {
        let host = format!("{}.{}", c.bucket_name, url.host_str().unwrap_or_default());
        url.set_host(Some(&host))
            .map_err(|e| format!("bucket host {host:?}: {e}"))?;
    }
    url.set_query(Some("location"));
    Ok(url)
}

async fn bucket_location(c: &CacheS3Config, creds: &AwsCredentials) -> Result<String, String> {
    use sha2::{Digest, Sha256};
    let url = location_url(c)?;
    let empty = hex::encode(Sha256::digest(b""));
    let headers = crate::cache::sts::Signed {
        method: "GET",
        url: &url,
        region: FALLBACK_REGION,
        service: "s3",
        headers: vec![("x-amz-content-sha256".to_owned(), empty.clone())],
        payload_hash: empty,
    }
    .sign(creds, chrono::Utc::now());
    let http = crate::helper::http::client(Duration::from_secs(30))?;
    let mut request = http.get(url.clone());
    for (k, v) in headers {
        request = request.header(k, v);
    }
    let response = request.send().await.map_err(|e| format!("{url}: {e}"))?;
    let status = response.status();
    let body = crate::cache::aws_credentials::read_body(response, url.as_str()).await?;
    let xml = String::from_utf8_lossy(&body);
    if !status.is_success() {
        return Err(format!("{url} answered {status}"));
    }
    let constraint = location_constraint(&xml)
        .ok_or_else(|| format!("{url}: the answer has no LocationConstraint"))?;
    Ok(match constraint.as_str() {
        "" => FALLBACK_REGION.to_owned(),
        "EU" => "eu-west-1".to_owned(),
        other => other.to_owned(),
    })
}

/// The text of `<LocationConstraint …>…</LocationConstraint>` (empty when self-closing).
fn location_constraint(xml: &str) -> Option<String> {
    let start = xml.find("<LocationConstraint")?;
    let open_end = start + xml[start..].find('>')?;
    if xml[..open_end].ends_with('/') {
        return Some(String::new());
    }
    let rest = &xml[open_end + 1..];
    let end = rest.find("</LocationConstraint>")?;
    Some(rest[..end].trim().to_owned())
}

/// The bucket's region: `BucketLocation`, else us-east-1.
pub fn region(c: &CacheS3Config) -> String {
    if c.bucket_location.is_empty() {
        "us-east-1".to_string()
    } else {
        c.bucket_location.clone()
    }
}

/// The credentials the settings sign with (before any role): `AccessKey`, `SecretKey` and
/// `SessionToken` for the access-key type, else `iam`, the credential chain's result.
pub fn base_credentials(
    c: &CacheS3Config,
    iam: Option<&Result<AwsCredentials, String>>,
) -> Result<AwsCredentials, S3Error> {
    if c.bucket_name.trim().is_empty() {
        return Err(S3Error::NoBucket);
    }
    match c.auth_type() {
        Some("access-key") => Ok(AwsCredentials {
            access_key: c.access_key.clone(),
            secret_key: c.secret_key.clone(),
            session_token: Some(c.session_token.clone()).filter(|t| !t.is_empty()),
            expires: None,
            source: "config.toml",
        }),
        Some(_) => match iam {
            Some(Ok(k)) => Ok(k.clone()),
            Some(Err(e)) => Err(S3Error::Iam(e.clone())),
            None => Err(S3Error::Iam("the credentials were not looked up".into())),
        },
        None => Err(S3Error::AuthType(c.authentication_type.clone())),
    }
}

/// AWS's own endpoint: a `ServerAddress` naming it is no custom endpoint (upstream keeps
/// dual-stack and acceleration for it).
const AWS_DEFAULT_ENDPOINT: &str = "https://s3.amazonaws.com";

/// `ServerAddress` as a URL, as upstream writes it: `https://` (`http://` when `Insecure`),
/// without the scheme's own port; `None` when unset.
pub fn custom_endpoint(c: &CacheS3Config) -> Option<String> {
    let address = c.server_address.as_str();
    if address.is_empty() {
        return None;
    }
    let scheme = if c.insecure { "http" } else { "https" };
    let canonical = if c.insecure { ":80" } else { ":443" };
    let host = match address.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            if canonical[1..] == *port {
                host
            } else {
                address
            }
        }
        _ => address,
    };
    Some(format!("{scheme}://{host}"))
}

/// Whether the endpoint is one of AWS's (commercial, China, GovCloud, FIPS, dual-stack, load
/// balancer or PrivateLink), Google's or Alibaba's: those take virtual-host-style requests.
fn virtual_host_capable(host: &str) -> bool {
    static PATTERNS: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let amazon = PATTERNS.get_or_init(|| {
        regex::Regex::new(
            r"^(?:s3[.-].*\.amazonaws\.com(?:\.cn)?|s3\.amazonaws\.com|.*\.elb\.amazonaws\.com(?:\.cn)?|(?:bucket|accesspoint)\.vpce-.*\.s3\..*\.vpce\.amazonaws\.com)$",
        )
        .expect("a valid pattern")
    });
    amazon.is_match(host) || host == "storage.googleapis.com" || host.ends_with("aliyuncs.com")
}

/// Whether requests name the bucket in the path (`PathStyle`, else upstream's automatic
/// choice): no custom endpoint means virtual-host style; a custom one means path style unless
/// it is AWS, Google or Alibaba, and always path style for a bucket with dots over https (its
/// name would break the certificate's wildcard).
pub fn path_style(c: &CacheS3Config) -> bool {
    if let Some(explicit) = c.path_style {
        return explicit;
    }
    let Some(url) = custom_endpoint(c).and_then(|e| reqwest::Url::parse(&e).ok()) else {
        // No usable custom endpoint: AWS, where a dotted bucket name cannot be a host label.
        return c.bucket_name.contains('.');
    };
    if url.scheme() == "https" && c.bucket_name.contains('.') {
        return true;
    }
    !url.host_str().is_some_and(virtual_host_capable)
}

/// The base URL requests go to (the bucket is added by the URL style): the custom endpoint,
/// or AWS's regional one, dual-stack unless `DualStack = false`, `s3-accelerate` with
/// `Accelerate`, as upstream's S3 client resolves them.
pub fn base_url(c: &CacheS3Config, region: &str) -> String {
    match custom_endpoint(c) {
        Some(e) if e != AWS_DEFAULT_ENDPOINT => e,
        _ => {
            let dual = c.dual_stack.unwrap_or(true);
            match (c.accelerate, dual) {
                (true, true) => "https://s3-accelerate.dualstack.amazonaws.com".to_string(),
                (true, false) => "https://s3-accelerate.amazonaws.com".to_string(),
                (false, true) => format!("https://s3.dualstack.{region}.amazonaws.com"),
                (false, false) => format!("https://s3.{region}.amazonaws.com"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> CacheS3Config {
        CacheS3Config {
            server_address: "127.0.0.1:9000".into(),
            access_key: "AKIDEXAMPLE".into(),
            secret_key: "secret".into(),
            bucket_name: "cache".into(),
            insecure: true,
            ..Default::default()
        }
    }

    #[test]
    fn custom_endpoint_is_path_style_and_http_when_insecure() {
        let s3 = S3Cache::new(&config(), Duration::from_secs(600)).unwrap();
        let d = s3.download("project/1/key");
        assert!(
            d.url
                .starts_with("http://127.0.0.1:9000/cache/project/1/key?"),
            "{}",
            d.url
        );
        assert!(d.url.contains("X-Amz-Expires=600"), "{}", d.url);
        assert!(d.url.contains("X-Amz-Credential=AKIDEXAMPLE"), "{}", d.url);
        let mut c = config();
        c.server_address = "minio.internal:9000".into();
        c.insecure = false;
        c.path_style = Some(false);
        let s3 = S3Cache::new(&c, Duration::from_secs(600)).unwrap();
        let url = s3.download("k").url;
        assert!(
            url.starts_with("https://cache.minio.internal:9000/k?"),
            "{url}"
        );
    }

    #[test]
    fn aws_endpoint_and_signed_encryption_headers() {
        let mut c = config();
        c.server_address.clear();
        c.bucket_location = "eu-west-1".into();
        c.authentication_type = "access-key".into();
        c.server_side_encryption = "KMS".into();
        c.server_side_encryption_key_id = "alias/cache".into();
        let s3 = S3Cache::new(&c, Duration::from_secs(60)).unwrap();
        let u = s3.upload("project/1/k", "k");
        assert!(
            u.url
                .starts_with("https://cache.s3.dualstack.eu-west-1.amazonaws.com/project/1/k?"),
            "{}",
            u.url
        );
        assert!(
            u.url.contains("x-amz-meta-cachekey"),
            "signed headers listed: {}",
            u.url
        );
        assert!(u.url.contains("x-amz-server-side-encryption"), "{}", u.url);
        assert_eq!(
            u.headers,
            vec![
                "x-amz-meta-cachekey: k",
                "x-amz-server-side-encryption: aws:kms",
                "x-amz-server-side-encryption-aws-kms-key-id: alias/cache"
            ]
        );
    }

    #[test]
    fn unsupported_settings_are_errors() {
        let mut c = config();
        c.access_key.clear();
        assert!(matches!(
            S3Cache::new(&c, Duration::from_secs(1)).unwrap_err(),
            S3Error::Iam(_)
        ));
        // With the chain's credentials, the keys and session token sign the URLs.
        let found = Ok(AwsCredentials {
            access_key: "ASIAFROMCHAIN".into(),
            secret_key: "s".into(),
            session_token: Some("chain-token".into()),
            expires: None,
            source: "instance profile",
        });
        let url = S3Cache::with_iam(&c, Duration::from_secs(1), Some(&found))
            .unwrap()
            .download("k")
            .url;
        assert!(url.contains("X-Amz-Credential=ASIAFROMCHAIN"), "{url}");
        assert!(url.contains("X-Amz-Security-Token=chain-token"), "{url}");
        let failed = Err("no AWS credentials found".to_string());
        assert_eq!(
            S3Cache::with_iam(&c, Duration::from_secs(1), Some(&failed)).unwrap_err(),
            S3Error::Iam("no AWS credentials found".into())
        );
        // An unknown encryption uploads without encryption, as upstream (with a warning).
        let mut c = config();
        c.server_side_encryption = "rot13".into();
        let s3 = S3Cache::new(&c, Duration::from_secs(1)).unwrap();
        assert_eq!(s3.upload("k", "k").headers, vec!["x-amz-meta-cachekey: k"]);
        let mut c = config();
        c.bucket_name.clear();
        assert_eq!(
            S3Cache::new(&c, Duration::from_secs(1)).unwrap_err(),
            S3Error::NoBucket
        );
    }

    #[test]
    fn bucket_location_request_and_answers() {
        let mut c = config();
        c.server_address.clear();
        c.bucket_name = "examplebucket".into();
        let url = location_url(&c).unwrap();
        assert_eq!(
            url.as_str(),
            "https://examplebucket.s3.amazonaws.com/?location"
        );
        // Signed as botocore's S3SigV4Auth signs it (2015-08-30T12:36:00Z).
        let creds = AwsCredentials {
            access_key: "AKIDEXAMPLE".into(),
            secret_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
            expires: None,
            source: "test",
        };
        let empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let headers = crate::cache::sts::Signed {
            method: "GET",
            url: &url,
            region: FALLBACK_REGION,
            service: "s3",
            headers: vec![("x-amz-content-sha256".to_owned(), empty.to_owned())],
            payload_hash: empty.to_owned(),
        }
        .sign(
            &creds,
            chrono::DateTime::parse_from_rfc3339("2015-08-30T12:36:00Z")
                .unwrap()
                .with_timezone(&chrono::Utc),
        );
        assert_eq!(
            headers.last().map(|(_, v)| v.as_str()),
            Some(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/s3/aws4_request, \
                 SignedHeaders=host;x-amz-content-sha256;x-amz-date, \
                 Signature=75f46d1e86e1717a90b65a89f6b62e42f88f9b3a608b51e8bdb4981e38ba42a5"
            )
        );
        let ns = r#"xmlns="http://s3.amazonaws.com/doc/2006-03-01/""#;
        assert_eq!(
            location_constraint(&format!(
                "<LocationConstraint {ns}>eu-west-2</LocationConstraint>"
            )),
            Some("eu-west-2".into())
        );
        assert_eq!(
            location_constraint(&format!("<LocationConstraint {ns}/>")),
            Some(String::new())
        );
        assert_eq!(location_constraint("<Error/>"), None);
        // A custom endpoint in path style.
        let url = location_url(&config()).unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:9000/cache?location");
    }
}
