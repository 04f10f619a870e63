//! `[runners.cache]` with its `s3`, `gcs` and `azure` sub-tables.
//!
//! Data only, with upstream's TOML key names (CamelCase, as gitlab-runner writes them). The
//! executor's cache code reads it; nothing here signs URLs or talks to a bucket.

use serde::{Deserialize, Serialize};

/// `[runners.cache]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CacheConfig {
    /// `Type`: `s3`, `gcs` or `azure` (empty: local cache only).
    #[serde(rename = "Type")]
    pub cache_type: String,
    /// `Path`: prefix for object names.
    #[serde(rename = "Path")]
    pub path: String,
    /// `Shared`: share the cache between runners (drops the `runner/<token>/` part).
    #[serde(rename = "Shared")]
    pub shared: bool,
    /// `MaxUploadedArchiveSize` in bytes (0 = no limit).
    #[serde(rename = "MaxUploadedArchiveSize")]
    pub max_uploaded_archive_size: i64,
    /// `[runners.cache.s3]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3: Option<CacheS3Config>,
    /// `[runners.cache.gcs]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gcs: Option<CacheGcsConfig>,
    /// `[runners.cache.azure]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub azure: Option<CacheAzureConfig>,
}

/// `[runners.cache.s3]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CacheS3Config {
    /// `ServerAddress`: `host[:port]` of an S3-compatible server (empty: AWS).
    #[serde(rename = "ServerAddress")]
    pub server_address: String,
    /// `AccessKey`.
    #[serde(rename = "AccessKey")]
    pub access_key: String,
    /// `SecretKey`.
    #[serde(rename = "SecretKey")]
    pub secret_key: String,
    /// `SessionToken`.
    #[serde(rename = "SessionToken")]
    pub session_token: String,
    /// `BucketName`.
    #[serde(rename = "BucketName")]
    pub bucket_name: String,
    /// `BucketLocation`: the region.
    #[serde(rename = "BucketLocation")]
    pub bucket_location: String,
    /// `Insecure`: plain http.
    #[serde(rename = "Insecure")]
    pub insecure: bool,
    /// `AuthenticationType`: `access-key` or `iam` (case-insensitive; empty = auto).
    #[serde(rename = "AuthenticationType")]
    pub authentication_type: String,
    /// `ServerSideEncryption`: `S3`, `KMS` or `DSSE-KMS`.
    #[serde(rename = "ServerSideEncryption")]
    pub server_side_encryption: String,
    /// `ServerSideEncryptionKeyID`.
    #[serde(rename = "ServerSideEncryptionKeyID")]
    pub server_side_encryption_key_id: String,
    /// `DualStack` (unset means true).
    #[serde(rename = "DualStack", skip_serializing_if = "Option::is_none")]
    pub dual_stack: Option<bool>,
    /// `PathStyle` (unset means auto-detect).
    #[serde(rename = "PathStyle", skip_serializing_if = "Option::is_none")]
    pub path_style: Option<bool>,
    /// `Accelerate`.
    #[serde(rename = "Accelerate")]
    pub accelerate: bool,
    /// `RoleARN`.
    #[serde(rename = "RoleARN")]
    pub role_arn: String,
    /// `UploadRoleARN`.
    #[serde(rename = "UploadRoleARN")]
    pub upload_role_arn: String,
    /// `AssumeRoleMaxConcurrency`: concurrent AssumeRole calls (0: 5; negative: no limit).
    #[serde(rename = "AssumeRoleMaxConcurrency")]
    pub assume_role_max_concurrency: i64,
    /// `DisableAssumeRoleCredentialsCaching`: a new AssumeRole call for every job.
    #[serde(rename = "DisableAssumeRoleCredentialsCaching")]
    pub disable_assume_role_credentials_caching: bool,
}

impl CacheS3Config {
    /// The effective authentication type as upstream decides it: the configured one when it
    /// is `access-key` or `iam` (any case), `None` when it is something else, otherwise
    /// `access-key` if address, key and secret are all set and `iam` if not.
    pub fn auth_type(&self) -> Option<&'static str> {
        match self.authentication_type.to_ascii_lowercase().as_str() {
            "access-key" => Some("access-key"),
            "iam" => Some("iam"),
            "" => {
                if self.server_address.is_empty()
                    || self.access_key.is_empty()
                    || self.secret_key.is_empty()
                {
                    Some("iam")
                } else {
                    Some("access-key")
                }
            }
            _ => None,
        }
    }
}

/// `[runners.cache.gcs]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CacheGcsConfig {
    /// `AccessID`.
    #[serde(rename = "AccessID")]
    pub access_id: String,
    /// `PrivateKey`.
    #[serde(rename = "PrivateKey")]
    pub private_key: String,
    /// `CredentialsFile`.
    #[serde(rename = "CredentialsFile")]
    pub credentials_file: String,
    /// `BucketName`.
    #[serde(rename = "BucketName")]
    pub bucket_name: String,
    /// `UniverseDomain`.
    #[serde(rename = "UniverseDomain")]
    pub universe_domain: String,
}

/// `[runners.cache.azure]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CacheAzureConfig {
    /// `AccountName`.
    #[serde(rename = "AccountName")]
    pub account_name: String,
    /// `AccountKey`.
    #[serde(rename = "AccountKey")]
    pub account_key: String,
    /// `ContainerName`.
    #[serde(rename = "ContainerName")]
    pub container_name: String,
    /// `StorageDomain`.
    #[serde(rename = "StorageDomain")]
    pub storage_domain: String,
}
