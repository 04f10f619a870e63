//! What the cache stages need of the distributed cache: presigned URLs for one key, signed
//! runner-side. The executor's scripts ([`crate::executor::script::cache`]) consume these; the
//! S3 implementation ([`super::s3`], [`super::CacheRemote`]) produces them.

/// Presigned download URLs for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Download {
    /// GET URL.
    pub url: String,
    /// HEAD URL.
    pub head_url: Option<String>,
}

/// A presigned upload for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    /// PUT URL.
    pub url: String,
    /// Headers the signature covers (`Key: Value`), which the helper must send.
    pub headers: Vec<String>,
    /// HEAD URL of the same object (the helper's `--check-url`): whether it exists already.
    pub check_url: Option<String>,
}

/// The distributed cache, as far as the scripts need it (signing happens runner-side).
pub trait Remote {
    /// URLs to download the object named `object` (the key, or its sharded name under
    /// `FF_HASH_CACHE_KEYS`), if there is a distributed cache and the name stays inside the
    /// project's objects.
    fn download(&self, object: &str) -> Option<Download>;
    /// The upload of the object named `object`, its metadata naming the cache key `key` (the
    /// key as the job log shows it), under the same conditions.
    fn upload(&self, object: &str, key: &str) -> Option<Upload>;
    /// `MaxUploadedArchiveSize` (0: none).
    fn max_upload_size(&self) -> u64 {
        0
    }
}

/// No distributed cache: the local archive only.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalOnly;

impl Remote for LocalOnly {
    fn download(&self, _object: &str) -> Option<Download> {
        None
    }
    fn upload(&self, _object: &str, _key: &str) -> Option<Upload> {
        None
    }
}
