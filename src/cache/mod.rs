//! The distributed cache, runner side: turns `[runners.cache]` into presigned URLs for the
//! cache stages, so the job's containers download and upload the archive without ever seeing
//! the cloud credentials (upstream's `cache/cache.go` and `cache/s3v2`).
//!
//! Object names are `[<Path>/][runner/<short token>/]project/<project id>/<key>` (the
//! `runner/…` part left out with `Shared = true`). S3 is implemented (access keys; presigned
//! GET, HEAD and PUT valid for the job timeout, the PUT signed with `x-amz-meta-cachekey` and
//! the server-side-encryption headers), with access keys or with IAM credentials from the AWS
//! credential chain (environment, shared file, container endpoint, instance profile). GCS,
//! Azure and `RoleARN` load from `config.toml` but are reported as not implemented, and the job
//! keeps its local cache.

pub mod aws_credentials;
pub mod remote;
pub mod s3;

use std::time::Duration;

use crate::config::cache::CacheConfig;
use remote::{Download, Remote, Upload};

/// The cache backend of one job.
#[derive(Debug, Clone, Default)]
pub struct CacheRemote {
    s3: Option<s3::S3Cache>,
    prefix: String,
    max_upload: u64,
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
        Self::with_iam(config, short_token, project_id, expires, None)
    }

    /// [`CacheRemote::from_config`], with IAM credentials looked up through the AWS chain
    /// (cached while valid) when `[runners.cache.s3]` asks for them.
    pub async fn resolving_iam(
        config: Option<&CacheConfig>,
        short_token: &str,
        project_id: i64,
        expires: Duration,
    ) -> (Self, Vec<String>) {
        let wants_iam = config.is_some_and(|c| {
            c.cache_type.eq_ignore_ascii_case("s3")
                && c.s3.as_ref().is_some_and(|s| {
                    s.auth_type() == Some("iam")
                        && s.role_arn.is_empty()
                        && s.upload_role_arn.is_empty()
                        && !s.bucket_name.trim().is_empty()
                })
        });
        let iam = if wants_iam {
            Some(aws_credentials::cached_default_chain().await)
        } else {
            None
        };
        Self::with_iam(config, short_token, project_id, expires, iam.as_ref())
    }

    /// [`CacheRemote::from_config`] with the IAM credentials already looked up.
    pub fn with_iam(
        config: Option<&CacheConfig>,
        short_token: &str,
        project_id: i64,
        expires: Duration,
        iam: Option<&Result<aws_credentials::AwsCredentials, String>>,
    ) -> (Self, Vec<String>) {
        let Some(c) = config else {
            return (Self::local(), Vec::new());
        };
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
                match s3::S3Cache::with_iam(s3c, expires, iam) {
                    Ok(s3) => (
                        CacheRemote {
                            s3: Some(s3),
                            prefix,
                            max_upload,
                        },
                        Vec::new(),
                    ),
                    Err(e) => local_because(format!("{e}; using the local cache only")),
                }
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
        self.s3.is_some()
    }
}

impl Remote for CacheRemote {
    fn download(&self, key: &str) -> Option<Download> {
        let s3 = self.s3.as_ref()?;
        let object = self.object_name(key)?;
        Some(s3.download(&object))
    }

    fn upload(&self, key: &str) -> Option<Upload> {
        let s3 = self.s3.as_ref()?;
        let object = self.object_name(key)?;
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
}
