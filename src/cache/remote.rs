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
}

/// The distributed cache, as far as the scripts need it (signing happens runner-side).
pub trait Remote {
    /// URLs to download `key`, if there is a distributed cache.
    fn download(&self, key: &str) -> Option<Download>;
    /// The upload of `key`, if there is a distributed cache.
    fn upload(&self, key: &str) -> Option<Upload>;
    /// `MaxUploadedArchiveSize` (0: none).
    fn max_upload_size(&self) -> u64 {
        0
    }
}

/// No distributed cache: the local archive only.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalOnly;

impl Remote for LocalOnly {
    fn download(&self, _key: &str) -> Option<Download> {
        None
    }
    fn upload(&self, _key: &str) -> Option<Upload> {
        None
    }
}
