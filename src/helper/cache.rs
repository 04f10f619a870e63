//! `cache-archiver` and `cache-extractor`, as upstream's helper commands.
//!
//! * **cache-archiver** selects `--path` patterns (and `--untracked` files) in the working
//!   directory, writes them as a zip to `--file`, and, with `--url`, uploads it with `PUT` and
//!   the given `--header`s (the presigned URL's signed headers), refusing an archive above
//!   `--max-uploaded-archive-size`.
//! * **cache-extractor**, with `--url`, downloads the archive to `--file` unless the local copy
//!   is at least as new as the remote `Last-Modified` (asked with `--head-url` when given); a
//!   404 means the cache does not exist. It then extracts `--file` into the working directory.
//!   A missing file is an error.
//!
//! Every failure is an error the CLI reports on stderr with exit code 1; the generated script
//! turns it into "Failed to create cache" / "Failed to extract cache" and never fails the job.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::helper::archive::{self, ArchiveError};
use crate::helper::http;

/// Errors of the cache commands.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Selecting or archiving files.
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// The archive is bigger than `--max-uploaded-archive-size`.
    #[error("cache archive size ({size} bytes) exceeds the maximum upload size of {max} bytes (MaxUploadedArchiveSize); the archive was kept locally only")]
    TooLarge {
        /// Archive size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// The archive does not exist (locally or remotely).
    #[error("{0}: cache does not exist")]
    Missing(String),
    /// HTTP failure.
    #[error("{0}")]
    Http(String),
    /// A flag combination this helper does not support.
    #[error("{0}")]
    Unsupported(String),
    /// Local file errors.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

/// Options of `cache-archiver`.
#[derive(Debug, Clone, Default)]
pub struct ArchiverOptions {
    /// `--file`.
    pub file: PathBuf,
    /// `--path`.
    pub paths: Vec<String>,
    /// `--exclude`.
    pub excludes: Vec<String>,
    /// `--untracked`.
    pub untracked: bool,
    /// `--url` (presigned PUT).
    pub url: Option<String>,
    /// `--header` (`Key: Value`).
    pub headers: Vec<String>,
    /// `--timeout` in minutes.
    pub timeout_minutes: u64,
    /// `--max-uploaded-archive-size` (0: no limit).
    pub max_upload: u64,
    /// `--gocloud-url`.
    pub gocloud_url: Option<String>,
}

/// Options of `cache-extractor`.
#[derive(Debug, Clone, Default)]
pub struct ExtractorOptions {
    /// `--file`.
    pub file: PathBuf,
    /// `--url` (presigned GET).
    pub url: Option<String>,
    /// `--head-url` (presigned HEAD).
    pub head_url: Option<String>,
    /// `--timeout` in minutes.
    pub timeout_minutes: u64,
    /// `--gocloud-url`.
    pub gocloud_url: Option<String>,
}

fn timeout(minutes: u64) -> Duration {
    Duration::from_secs(60 * if minutes == 0 { 10 } else { minutes })
}

fn gocloud_unsupported(url: &Option<String>) -> Result<(), CacheError> {
    match url {
        Some(u) if !u.is_empty() => Err(CacheError::Unsupported(format!(
            "--gocloud-url {}: GoCloud caches (Azure, S3 with RoleARN) are not implemented by drover's helper",
            http::redact(u)
        ))),
        _ => Ok(()),
    }
}

/// Splits `Key: Value` headers.
fn parse_headers(headers: &[String]) -> Result<reqwest::header::HeaderMap, CacheError> {
    let mut map = reqwest::header::HeaderMap::new();
    for h in headers {
        let (k, v) = h
            .split_once(':')
            .ok_or_else(|| CacheError::Http(format!("--header {h:?}: use \"Key: Value\"")))?;
        let name = reqwest::header::HeaderName::from_bytes(k.trim().as_bytes())
            .map_err(|e| CacheError::Http(format!("--header {h:?}: {e}")))?;
        let value = reqwest::header::HeaderValue::from_str(v.trim())
            .map_err(|e| CacheError::Http(format!("--header {h:?}: {e}")))?;
        map.append(name, value);
    }
    Ok(map)
}

/// Runs `cache-archiver` in `workdir`, logging to `log`.
pub async fn archive(
    o: &ArchiverOptions,
    workdir: &Path,
    log: &mut dyn std::io::Write,
) -> Result<(), CacheError> {
    gocloud_unsupported(&o.gocloud_url)?;
    let (entries, warnings) = archive::select(workdir, &o.paths, &o.excludes, o.untracked)?;
    for w in warnings {
        let _ = writeln!(log, "WARNING: {w}");
    }
    let _ = writeln!(
        log,
        "Found {} matching files and directories",
        entries.len()
    );
    let file = workdir.join(&o.file);
    archive::create_zip(workdir, &entries, &file)?;
    let Some(url) = o.url.as_deref().filter(|u| !u.is_empty()) else {
        return Ok(());
    };
    let size = std::fs::metadata(&file)
        .map_err(|source| CacheError::Io {
            what: format!("reading {}", file.display()),
            source,
        })?
        .len();
    if o.max_upload > 0 && size > o.max_upload {
        return Err(CacheError::TooLarge {
            size,
            max: o.max_upload,
        });
    }
    let _ = writeln!(
        log,
        "Uploading {} to {}",
        file.file_name().unwrap_or_default().to_string_lossy(),
        http::redact(url)
    );
    let client = http::client(timeout(o.timeout_minutes)).map_err(CacheError::Http)?;
    let body = tokio::fs::File::open(&file)
        .await
        .map_err(|source| CacheError::Io {
            what: format!("opening {}", file.display()),
            source,
        })?;
    let response = client
        .put(url)
        .headers(parse_headers(&o.headers)?)
        .header(reqwest::header::CONTENT_LENGTH, size)
        .body(reqwest::Body::from(body))
        .send()
        .await
        .map_err(|e| CacheError::Http(format!("uploading the cache: {}", e.without_url())))?;
    let status = response.status();
    if !status.is_success() {
        let text = response.text().await.unwrap_or_default();
        return Err(CacheError::Http(format!(
            "uploading the cache: {status}: {}",
            text.chars().take(512).collect::<String>()
        )));
    }
    Ok(())
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).ok()?.modified().ok()
}

/// Runs `cache-extractor` in `workdir`, logging to `log`.
pub async fn extract(
    o: &ExtractorOptions,
    workdir: &Path,
    log: &mut dyn std::io::Write,
) -> Result<(), CacheError> {
    gocloud_unsupported(&o.gocloud_url)?;
    let file = workdir.join(&o.file);
    let name = o.file.to_string_lossy().into_owned();
    if let Some(url) = o.url.as_deref().filter(|u| !u.is_empty()) {
        download(o, url, &file, log).await?;
    }
    if !file.exists() {
        return Err(CacheError::Missing(name));
    }
    let n = archive::extract_zip(&file, workdir)?;
    let _ = writeln!(log, "Extracted {n} files and directories");
    Ok(())
}

async fn download(
    o: &ExtractorOptions,
    url: &str,
    file: &Path,
    log: &mut dyn std::io::Write,
) -> Result<(), CacheError> {
    let client = http::client(timeout(o.timeout_minutes)).map_err(CacheError::Http)?;
    let http_err =
        |e: reqwest::Error| CacheError::Http(format!("downloading the cache: {}", e.without_url()));
    let last_modified = |r: &reqwest::Response| {
        r.headers()
            .get(reqwest::header::LAST_MODIFIED)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| chrono::DateTime::parse_from_rfc2822(v).ok())
            .map(SystemTime::from)
    };
    let local = mtime(file);
    if let (Some(head), Some(local)) = (o.head_url.as_deref().filter(|u| !u.is_empty()), local) {
        let r = client.head(head).send().await.map_err(http_err)?;
        if r.status() == reqwest::StatusCode::NOT_FOUND {
            return Err(CacheError::Missing(o.file.to_string_lossy().into_owned()));
        }
        if r.status().is_success() && last_modified(&r).is_some_and(|remote| local >= remote) {
            let _ = writeln!(log, "{} is up to date", o.file.display());
            return Ok(());
        }
    }
    let _ = writeln!(
        log,
        "Downloading {} from {}",
        file.file_name().unwrap_or_default().to_string_lossy(),
        http::redact(url)
    );
    let mut r = client.get(url).send().await.map_err(http_err)?;
    if r.status() == reqwest::StatusCode::NOT_FOUND {
        return Err(CacheError::Missing(o.file.to_string_lossy().into_owned()));
    }
    if !r.status().is_success() {
        return Err(CacheError::Http(format!(
            "downloading the cache: {}",
            r.status()
        )));
    }
    if let (Some(remote), Some(local)) = (last_modified(&r), local) {
        if local >= remote {
            let _ = writeln!(log, "{} is up to date", o.file.display());
            return Ok(());
        }
    }
    let io = |what: String| move |source| CacheError::Io { what, source };
    if let Some(dir) = file.parent() {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(io(format!("creating {}", dir.display())))?;
    }
    let tmp = file.with_extension("download");
    let mut out = tokio::fs::File::create(&tmp)
        .await
        .map_err(io(format!("creating {}", tmp.display())))?;
    while let Some(chunk) = r.chunk().await.map_err(http_err)? {
        tokio::io::AsyncWriteExt::write_all(&mut out, &chunk)
            .await
            .map_err(io(format!("writing {}", tmp.display())))?;
    }
    tokio::io::AsyncWriteExt::flush(&mut out)
        .await
        .map_err(io(format!("writing {}", tmp.display())))?;
    drop(out);
    tokio::fs::rename(&tmp, file)
        .await
        .map_err(io(format!("renaming {}", tmp.display())))?;
    Ok(())
}
