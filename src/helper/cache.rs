//! `cache-archiver` and `cache-extractor`, as upstream's helper commands.
//!
//! * **cache-archiver** selects `--path` patterns (and `--untracked` files) in the working
//!   directory, writes them as a zip to `--file`, and, with `--url`, uploads it with `PUT` and
//!   the given `--header`s (the presigned URL's signed headers), refusing an archive above
//!   `--max-uploaded-archive-size`. When `--file` does not exist but `--alternate-file` (the
//!   cache's name under the other `FF_HASH_CACHE_KEYS` setting) does, that file is renamed to
//!   `--file` first. When no selected file is newer than the existing archive, the archive is
//!   not rebuilt, and it is uploaded only if `--check-url` (a HEAD of the object) does not
//!   answer 200: it may have been restored from the other name.
//! * **cache-extractor**, with `--url`, downloads the archive to `--file` unless the local copy
//!   is at least as new as the remote `Last-Modified` (asked with `--head-url` when given); a
//!   404 means the cache does not exist. With `--alternate-url` (the object under the other
//!   name), both objects are asked for their `Last-Modified` (`--head-url`,
//!   `--alternate-head-url`, else the GET URLs) and the alternate is used when the primary is
//!   not available or older. It then extracts `--file` into the working directory. A missing
//!   file is an error.
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
    /// `--alternate-file`: the archive under the other naming scheme.
    pub alternate_file: Option<PathBuf>,
    /// `--check-url`: presigned HEAD of the uploaded object.
    pub check_url: Option<String>,
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
    /// `--alternate-url`: presigned GET of the object under the other naming scheme.
    pub alternate_url: Option<String>,
    /// `--alternate-head-url`: presigned HEAD of that object.
    pub alternate_head_url: Option<String>,
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
    let file = workdir.join(&o.file);
    rename_alternate(workdir, &o.file, o.alternate_file.as_deref(), log);
    let (entries, warnings) = archive::select(workdir, &o.paths, &o.excludes, o.untracked)?;
    for w in warnings {
        let _ = writeln!(log, "WARNING: {w}");
    }
    let _ = writeln!(
        log,
        "Found {} matching files and directories",
        entries.len()
    );
    if entries.is_empty() {
        // As upstream: nothing to keep is not an error, and no archive is written or sent
        // (an empty one would replace the cache others restore).
        let _ = writeln!(log, "WARNING: No files to cache.");
        return Ok(());
    }
    if up_to_date(workdir, &entries, &file) {
        let _ = writeln!(log, "Archive is up to date!");
        return upload_existing(o, &file, log).await;
    }
    archive::create_zip(workdir, &entries, &file)?;
    upload(o, &file, log).await
}

/// Moves the archive kept under the other name (`--alternate-file`) to `--file` when only it
/// exists (a project that toggled `FF_HASH_CACHE_KEYS`); both relative to `workdir`. Nothing
/// to do without an alternate (or an empty one) or when it is `--file` itself. Failures are
/// logged: the archive is then rebuilt.
pub fn rename_alternate(
    workdir: &Path,
    file: &Path,
    alternate: Option<&Path>,
    log: &mut dyn std::io::Write,
) {
    let Some(alternate) = alternate.filter(|a| !a.as_os_str().is_empty() && *a != file) else {
        return;
    };
    let (file, alternate) = (workdir.join(file), workdir.join(alternate));
    let (file, alternate) = (file.as_path(), alternate.as_path());
    match std::fs::symlink_metadata(file) {
        Ok(_) => return,
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            let _ = writeln!(log, "WARNING: {}: {e}", file.display());
            return;
        }
        Err(_) => {}
    }
    if std::fs::symlink_metadata(alternate).is_err() {
        return;
    }
    if let Some(dir) = file.parent() {
        if let Err(e) = std::fs::create_dir_all(dir) {
            let _ = writeln!(
                log,
                "WARNING: creating {} for the cache archive: {e}",
                dir.display()
            );
            return;
        }
    }
    match std::fs::rename(alternate, file) {
        Ok(()) => {
            let _ = writeln!(log, "Renamed {} to {}", alternate.display(), file.display());
        }
        Err(e) => {
            let _ = writeln!(
                log,
                "WARNING: renaming {} to {}: {e}",
                alternate.display(),
                file.display()
            );
        }
    }
}

/// Whether `file` exists and no selected entry changed after it was written (upstream's
/// test: no entry's modification time is later than the archive's).
fn up_to_date(workdir: &Path, entries: &[PathBuf], file: &Path) -> bool {
    let Some(archived) = mtime(file) else {
        return false;
    };
    entries.iter().all(|e| {
        std::fs::symlink_metadata(workdir.join(e))
            .and_then(|m| m.modified())
            .is_ok_and(|t| t <= archived)
    })
}

/// An unchanged archive `file`: uploaded unless `--check-url` says the object exists;
/// nothing to do without an archive or a URL.
pub async fn upload_existing(
    o: &ArchiverOptions,
    file: &Path,
    log: &mut dyn std::io::Write,
) -> Result<(), CacheError> {
    if o.url.as_deref().is_none_or(str::is_empty) || !file.is_file() {
        return Ok(());
    }
    if let Some(check) = o.check_url.as_deref().filter(|u| !u.is_empty()) {
        if remote_exists(check, o.timeout_minutes, log).await {
            let _ = writeln!(log, "Cache already exists remotely, skipping upload");
            return Ok(());
        }
        let _ = writeln!(log, "Cache does not exist remotely, uploading the archive");
    }
    upload(o, file, log).await
}

/// Whether a HEAD of `url` answers 200; any failure counts as absent.
async fn remote_exists(url: &str, minutes: u64, log: &mut dyn std::io::Write) -> bool {
    let client = match http::client(timeout(minutes)) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(log, "WARNING: checking the remote cache: {e}");
            return false;
        }
    };
    match client.head(url).send().await {
        Ok(r) => r.status() == reqwest::StatusCode::OK,
        Err(e) => {
            let _ = writeln!(
                log,
                "WARNING: checking the remote cache, assuming it is absent: {}",
                e.without_url()
            );
            false
        }
    }
}

/// Uploads `file` to `--url`, if given.
async fn upload(
    o: &ArchiverOptions,
    file: &Path,
    log: &mut dyn std::io::Write,
) -> Result<(), CacheError> {
    let Some(url) = o.url.as_deref().filter(|u| !u.is_empty()) else {
        return Ok(());
    };
    let size = std::fs::metadata(file)
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
    let body = tokio::fs::File::open(file)
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
        let (url, head) = select_source(o, url, log).await;
        download(o, url, head, &file, log).await?;
    }
    if !file.exists() {
        return Err(CacheError::Missing(name));
    }
    let n = archive::extract_zip(&file, workdir)?;
    let _ = writeln!(log, "Extracted {n} files and directories");
    Ok(())
}

/// The remote `Last-Modified` of an object, asked with HEAD; `None` when it cannot be had
/// (not found, any status but 200, no or a bad date, a failed request).
async fn remote_modified(client: &reqwest::Client, url: &str) -> Option<SystemTime> {
    let r = client.head(url).send().await.ok()?;
    if r.status() != reqwest::StatusCode::OK {
        return None;
    }
    let date = r
        .headers()
        .get(reqwest::header::LAST_MODIFIED)?
        .to_str()
        .ok()?;
    chrono::DateTime::parse_from_rfc2822(date)
        .ok()
        .map(SystemTime::from)
}

/// Which object to download, (GET URL, HEAD URL): the alternate when it is available and
/// the primary is not, or when it is newer; else the primary.
pub async fn select_source<'a>(
    o: &'a ExtractorOptions,
    url: &'a str,
    log: &mut dyn std::io::Write,
) -> (&'a str, Option<&'a str>) {
    let non_empty = |u: &'a Option<String>| u.as_deref().filter(|u| !u.is_empty());
    let primary = (url, non_empty(&o.head_url));
    let Some(alternate_url) = non_empty(&o.alternate_url) else {
        return primary;
    };
    let alternate = (alternate_url, non_empty(&o.alternate_head_url));
    let Ok(client) = http::client(timeout(o.timeout_minutes)) else {
        return primary;
    };
    let primary_time = remote_modified(&client, primary.1.unwrap_or(primary.0)).await;
    let alternate_time = remote_modified(&client, alternate.1.unwrap_or(alternate.0)).await;
    match (primary_time, alternate_time) {
        (None, Some(_)) => {
            let _ = writeln!(
                log,
                "Using the cache's alternate name: the primary is not available"
            );
            alternate
        }
        (Some(p), Some(a)) if a > p => {
            let _ = writeln!(log, "Using the cache's alternate name: it is newer");
            alternate
        }
        _ => primary,
    }
}

async fn download(
    o: &ExtractorOptions,
    url: &str,
    head_url: Option<&str>,
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
    if let (Some(head), Some(local)) = (head_url, local) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run_archive(o: &ArchiverOptions, dir: &Path) -> String {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut log = Vec::new();
        rt.block_on(archive(o, dir, &mut log)).unwrap();
        String::from_utf8(log).unwrap()
    }

    #[test]
    fn an_unchanged_archive_is_not_rebuilt_and_a_changed_one_is() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("vendor")).unwrap();
        std::fs::write(d.path().join("vendor/a"), "a").unwrap();
        let o = ArchiverOptions {
            file: "cache/k/cache.zip".into(),
            paths: vec!["vendor/".into()],
            ..Default::default()
        };
        let first = run_archive(&o, d.path());
        assert!(!first.contains("up to date"), "{first}");
        let zip = d.path().join("cache/k/cache.zip");
        let made = mtime(&zip).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let second = run_archive(&o, d.path());
        assert!(second.contains("Archive is up to date!"), "{second}");
        assert_eq!(mtime(&zip), Some(made));
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(d.path().join("vendor/b"), "b").unwrap();
        let third = run_archive(&o, d.path());
        assert!(!third.contains("up to date"), "{third}");
        assert!(mtime(&zip).unwrap() > made);
        // The archive under the other name becomes the primary before anything else.
        let moved = ArchiverOptions {
            file: "cache/hashed/cache.zip".into(),
            alternate_file: Some("cache/k/cache.zip".into()),
            ..o
        };
        let fourth = run_archive(&moved, d.path());
        assert!(fourth.contains("Archive is up to date!"), "{fourth}");
        assert!(!zip.exists());
        assert!(d.path().join("cache/hashed/cache.zip").is_file());
    }

    #[test]
    fn nothing_matching_writes_and_sends_no_archive() {
        let d = tempfile::tempdir().unwrap();
        let o = ArchiverOptions {
            file: "cache/k/cache.zip".into(),
            paths: vec!["vendor/".into()],
            // Nothing listens there: an upload attempt would fail the command.
            url: Some("http://127.0.0.1:9/cache.zip".into()),
            ..Default::default()
        };
        let log = run_archive(&o, d.path());
        assert!(log.contains("WARNING: No files to cache."), "{log}");
        assert!(!d.path().join("cache/k/cache.zip").exists());
    }
}
