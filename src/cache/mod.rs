//! The distributed cache, runner side: turns `[runners.cache]` into presigned URLs for the
//! cache stages, so the job's containers download and upload the archive without ever seeing
//! the cloud credentials (upstream's `cache/cache.go` and `cache/s3v2`).
//!
//! Object names are `[<Path>/][runner/<short token>/]project/<project id>/<key>` (the
//! `runner/…` part left out with `Shared = true`). S3 is implemented (access keys; presigned
//! GET, HEAD and PUT valid for the job timeout, the PUT signed with `x-amz-meta-cachekey` and
//! the server-side-encryption headers), with access keys or with IAM credentials from the AWS
//! credential chain (environment, shared file, container endpoint, instance profile), and with
//! `RoleARN`/`UploadRoleARN` signed with the role's scoped STS credentials ([`sts`]). GCS and
//! Azure load from `config.toml` but are reported as not implemented, and the job keeps its
//! local cache.

pub mod aws_credentials;
pub mod remote;
pub mod s3;
pub mod sts;

use std::time::Duration;

use crate::cache::aws_credentials::AwsCredentials;
use crate::config::cache::{CacheConfig, CacheS3Config};
use remote::{Download, Remote, Upload};

/// The cache backend of one job: S3 signing for downloads and for uploads (the same, or each
/// with its role's credentials).
#[derive(Debug, Clone, Default)]
pub struct CacheRemote {
    download: Option<s3::S3Cache>,
    upload: Option<s3::S3Cache>,
    prefix: String,
    max_upload: u64,
}

/// The credentials looked up for a job's S3 cache.
#[derive(Debug, Clone, Default)]
pub struct LookedUp {
    /// The AWS credential chain's answer, when the settings use IAM credentials.
    pub iam: Option<Result<AwsCredentials, String>>,
    /// `RoleARN`'s credentials for downloads.
    pub download_role: Option<Result<AwsCredentials, String>>,
    /// The upload role's (`RoleARN`, else `UploadRoleARN`) credentials.
    pub upload_role: Option<Result<AwsCredentials, String>>,
    /// The bucket's region found with GetBucketLocation when `BucketLocation` is empty.
    pub region: Option<String>,
}

/// The roles of `[runners.cache.s3]` with their setting names: downloads use `RoleARN`;
/// uploads `RoleARN`, else `UploadRoleARN` (upstream's choice).
pub fn roles(c: &CacheS3Config) -> (Option<&str>, Option<(&'static str, &str)>) {
    let download = Some(c.role_arn.as_str()).filter(|r| !r.is_empty());
    let upload = match download {
        Some(r) => Some(("RoleARN", r)),
        None => Some(("UploadRoleARN", c.upload_role_arn.as_str())).filter(|(_, r)| !r.is_empty()),
    };
    (download, upload)
}

/// The object prefix of a project's cache: `[<Path>/][runner/<short token>/]project/<id>/`.
fn prefix(c: &CacheConfig, short_token: &str, project_id: i64) -> String {
    let mut prefix = String::new();
    let path = c.path.trim_matches('/');
    if !path.is_empty() {
        prefix.push_str(path);
        prefix.push('/');
    }
    if !c.shared {
        prefix.push_str(&format!("runner/{short_token}/"));
    }
    prefix.push_str(&format!("project/{project_id}/"));
    prefix
}

/// The role's credentials, when the base credentials were found.
async fn assume(
    c: &CacheS3Config,
    base: &Result<AwsCredentials, String>,
    request: &sts::RoleRequest<'_>,
) -> Result<AwsCredentials, String> {
    match base {
        Ok(b) => sts::role_credentials(c, b, request).await,
        Err(e) => Err(e.clone()),
    }
}

impl CacheRemote {
    /// The local archive only.
    pub fn local() -> Self {
        Self::default()
    }

    /// The backend `[runners.cache]` describes for a job of `project_id` on the runner with
    /// `short_token`, with URLs valid for `expires`. Settings drover cannot honour give a
    /// warning (for the job log) and the local archive only.
    pub fn from_config(
        config: Option<&CacheConfig>,
        short_token: &str,
        project_id: i64,
        expires: Duration,
    ) -> (Self, Vec<String>) {
        Self::with_credentials(
            config,
            short_token,
            project_id,
            expires,
            &LookedUp::default(),
        )
    }

    /// [`CacheRemote::from_config`], with the credentials `[runners.cache.s3]` needs looked
    /// up: IAM credentials through the AWS chain (cached while valid, a failure remembered for
    /// a while), and the roles' credentials from STS (cached while valid).
    pub async fn resolving_iam(
        config: Option<&CacheConfig>,
        short_token: &str,
        project_id: i64,
        expires: Duration,
    ) -> (Self, Vec<String>) {
        let s3c = config
            .filter(|c| c.cache_type.eq_ignore_ascii_case("s3"))
            .and_then(|c| {
                c.s3.as_ref()
                    .filter(|s| !s.bucket_name.trim().is_empty())
                    .map(|s| (c, s))
            });
        let mut looked = LookedUp::default();
        if let Some((c, s3c)) = s3c {
            if s3c.auth_type() == Some("iam") {
                looked.iam = Some(aws_credentials::cached_default_chain().await);
            }
            let base = s3::base_credentials(s3c, looked.iam.as_ref()).map_err(|e| e.to_string());
            if let (true, Ok(b)) = (s3c.bucket_location.is_empty(), &base) {
                looked.region = Some(s3::detect_region(s3c, b).await);
            }
            let (download, upload) = roles(s3c);
            if download.is_some() || upload.is_some() {
                let prefix = prefix(c, short_token, project_id);
                let region = looked.region.clone().unwrap_or_else(|| s3::region(s3c));
                let endpoint =
                    sts::endpoint(&aws_credentials::ChainInputs::from_process().env, &region);
                let request = |role_arn, upload| sts::RoleRequest {
                    role_arn,
                    region: &region,
                    prefix: &prefix,
                    upload,
                    timeout: expires,
                    endpoint: endpoint.clone(),
                };
                if let Some(role) = download {
                    looked.download_role = Some(assume(s3c, &base, &request(role, false)).await);
                }
                if let Some((_, role)) = upload {
                    looked.upload_role = Some(assume(s3c, &base, &request(role, true)).await);
                }
            }
        }
        Self::with_credentials(config, short_token, project_id, expires, &looked)
    }

    /// [`CacheRemote::from_config`] with the credentials already looked up. A direction whose
    /// role could not be assumed is left out, with a warning.
    pub fn with_credentials(
        config: Option<&CacheConfig>,
        short_token: &str,
        project_id: i64,
        expires: Duration,
        looked: &LookedUp,
    ) -> (Self, Vec<String>) {
        let Some(c) = config else {
            return (Self::local(), Vec::new());
        };
        let prefix = prefix(c, short_token, project_id);
        let max_upload = u64::try_from(c.max_uploaded_archive_size).unwrap_or(0);
        let local_because = |why: String| (Self::local(), vec![why]);
        match c.cache_type.to_ascii_lowercase().as_str() {
            "" => (Self::local(), Vec::new()),
            "s3" => {
                let Some(s3c) = &c.s3 else {
                    return local_because(
                        "[runners.cache] Type = \"s3\" has no [runners.cache.s3] section; using the local cache only".into(),
                    );
                };
                // The detected region stands for an empty BucketLocation.
                let located;
                let s3c = match &looked.region {
                    Some(region) if s3c.bucket_location.is_empty() => {
                        located = CacheS3Config {
                            bucket_location: region.clone(),
                            ..s3c.clone()
                        };
                        &located
                    }
                    _ => s3c,
                };
                let plain = s3::S3Cache::with_iam(s3c, expires, looked.iam.as_ref());
                let (download_role, upload_role) = roles(s3c);
                let signed = |setting: &'static str, role: &Option<Result<AwsCredentials, String>>| {
                    match role {
                        Some(Ok(creds)) => s3::S3Cache::signed_with(s3c, expires, creds),
                        Some(Err(e)) => Err(s3::S3Error::Role {
                            setting,
                            message: e.clone(),
                        }),
                        None => Err(s3::S3Error::Role {
                            setting,
                            message: "the role's credentials were not looked up".into(),
                        }),
                    }
                };
                let download = match download_role {
                    None => plain.clone(),
                    Some(_) => signed("RoleARN", &looked.download_role),
                };
                let upload = match upload_role {
                    None => plain,
                    Some((setting, _)) => signed(setting, &looked.upload_role),
                };
                let warnings = match (&download, &upload) {
                    (Err(d), Err(u)) if d == u => vec![format!("{d}; using the local cache only")],
                    _ => [
                        download.as_ref().err().map(|e| {
                            format!("{e}; the cache is not downloaded from S3 (local cache only)")
                        }),
                        upload.as_ref().err().map(|e| {
                            format!("{e}; the cache is not uploaded to S3 (local cache only)")
                        }),
                    ]
                    .into_iter()
                    .flatten()
                    .collect(),
                };
                (
                    CacheRemote {
                        download: download.ok(),
                        upload: upload.ok(),
                        prefix,
                        max_upload,
                    },
                    warnings,
                )
            }
            "gcs" | "azure" => local_because(format!(
                "the {} distributed cache ([runners.cache] Type = {:?}) is not implemented by drover; using the local cache only",
                c.cache_type.to_ascii_uppercase(),
                c.cache_type
            )),
            other => local_because(format!(
                "unknown [runners.cache] Type {other:?} (use s3, gcs or azure); using the local cache only"
            )),
        }
    }

    /// The object name of `key` joined to the project's prefix as a URL path (empty and `.`
    /// segments dropped, `..` going up), or `None` when the key is empty or the result is not
    /// inside the project's prefix, as upstream names objects.
    pub fn object_name(&self, key: &str) -> Option<String> {
        if key.is_empty() {
            return None;
        }
        let base: Vec<&str> = self.prefix.split('/').filter(|s| !s.is_empty()).collect();
        let mut full = base.clone();
        for segment in key.split('/') {
            match segment {
                "" | "." => {}
                ".." => {
                    full.pop()?;
                }
                s => full.push(s),
            }
        }
        (full.len() > base.len() && full.starts_with(&base)).then(|| full.join("/"))
    }

    /// Whether a distributed cache is configured and usable.
    pub fn is_remote(&self) -> bool {
        self.download.is_some() || self.upload.is_some()
    }
}

impl Remote for CacheRemote {
    fn download(&self, object: &str) -> Option<Download> {
        let s3 = self.download.as_ref()?;
        let object = self.object_name(object)?;
        Some(s3.download(&object))
    }

    fn upload(&self, object: &str, key: &str) -> Option<Upload> {
        let s3 = self.upload.as_ref()?;
        let object = self.object_name(object)?;
        Some(s3.upload(&object, key))
    }

    fn max_upload_size(&self) -> u64 {
        self.max_upload
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::cache::CacheS3Config;

    fn s3_config(shared: bool) -> CacheConfig {
        CacheConfig {
            cache_type: "s3".into(),
            path: "/ci/".into(),
            shared,
            max_uploaded_archive_size: 1024,
            s3: Some(CacheS3Config {
                server_address: "127.0.0.1:9000".into(),
                access_key: "AKIDEXAMPLE".into(),
                secret_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
                bucket_name: "runner-cache".into(),
                bucket_location: "eu-west-1".into(),
                insecure: true,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn object_names_follow_upstream_layout() {
        let (r, w) = CacheRemote::from_config(
            Some(&s3_config(false)),
            "abc123",
            42,
            Duration::from_secs(3600),
        );
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            r.object_name("main-protected").as_deref(),
            Some("ci/runner/abc123/project/42/main-protected")
        );
        // Joined as a URL path, and refused outside the project, as upstream.
        assert_eq!(
            r.object_name("a/../b").as_deref(),
            Some("ci/runner/abc123/project/42/b")
        );
        assert_eq!(
            r.object_name("../42/k").as_deref(),
            Some("ci/runner/abc123/project/42/k")
        );
        assert_eq!(r.object_name("../42"), None);
        assert_eq!(r.object_name("../42-outside"), None);
        assert_eq!(r.object_name("../../../../../../x"), None);
        assert_eq!(r.object_name(""), None);
        let (r, _) = CacheRemote::from_config(
            Some(&s3_config(true)),
            "abc123",
            42,
            Duration::from_secs(3600),
        );
        assert_eq!(r.object_name("k").as_deref(), Some("ci/project/42/k"));
        assert_eq!(r.max_upload_size(), 1024);
    }

    #[test]
    fn gcs_and_azure_are_reported_as_not_implemented() {
        for t in ["gcs", "azure"] {
            let c = CacheConfig {
                cache_type: t.into(),
                ..Default::default()
            };
            let (r, w) = CacheRemote::from_config(Some(&c), "abc", 1, Duration::from_secs(60));
            assert!(!r.is_remote());
            assert_eq!(w.len(), 1);
            assert!(w[0].contains("not implemented"), "{w:?}");
        }
        let (r, w) = CacheRemote::from_config(None, "abc", 1, Duration::from_secs(60));
        assert!(!r.is_remote() && w.is_empty());
        assert!(r.download("k").is_none());
    }

    #[test]
    fn a_role_that_could_not_be_assumed_leaves_its_direction_local() {
        let mut c = s3_config(false);
        if let Some(s3) = c.s3.as_mut() {
            s3.upload_role_arn = "arn:aws:iam::1:role/up".into();
        }
        let looked = LookedUp {
            upload_role: Some(Err("STS answered 403: AccessDenied".into())),
            ..LookedUp::default()
        };
        let (r, w) =
            CacheRemote::with_credentials(Some(&c), "abc", 1, Duration::from_secs(60), &looked);
        assert_eq!(
            w,
            vec!["[runners.cache.s3] UploadRoleARN: STS answered 403: AccessDenied; the cache is not uploaded to S3 (local cache only)"]
        );
        assert!(r.upload("k", "k").is_none());
        assert!(r
            .download("k")
            .is_some_and(|d| d.url.contains("AKIDEXAMPLE")));
        // RoleARN serves both directions: one failure, one warning, no remote.
        if let Some(s3) = c.s3.as_mut() {
            s3.role_arn = "arn:aws:iam::1:role/both".into();
        }
        let failed = Some(Err("no AWS credentials found".to_string()));
        let looked = LookedUp {
            download_role: failed.clone(),
            upload_role: failed,
            ..LookedUp::default()
        };
        let (r, w) =
            CacheRemote::with_credentials(Some(&c), "abc", 1, Duration::from_secs(60), &looked);
        assert_eq!(
            w,
            vec![
                "[runners.cache.s3] RoleARN: no AWS credentials found; using the local cache only"
            ]
        );
        assert!(!r.is_remote());
    }
}
