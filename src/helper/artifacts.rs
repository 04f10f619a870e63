//! `artifacts-uploader` and `artifacts-downloader`, as upstream's helper commands. They run in
//! the job's helper container and talk to GitLab's job API with the job token.
//!
//! * **artifacts-uploader** selects `--path`/`--exclude`/`--untracked` in the working directory
//!   and packs them as `--artifact-format` says: `zip` (default, `<name>.zip`), `gzip` (one gzip
//!   member per file, `<name>.gz`) or `raw` (exactly one file, as it is). It posts the archive to
//!   `POST <url>/api/v4/jobs/<id>/artifacts` as the multipart field `file`, with `JOB-TOKEN` and
//!   `artifact_format`, `artifact_type` and `expire_in` in the query when given. Up to 3
//!   attempts (6 when GitLab answers 503), 1 s doubling between them; 413 fails at once ("too
//!   large"), other 4xx too.
//! * **artifacts-downloader** gets `GET <url>/api/v4/jobs/<id>/artifacts` with `JOB-TOKEN` (the
//!   dependency's), adding `direct_download=true` on the first try when `--direct-download` or
//!   `FF_USE_DIRECT_DOWNLOAD` says so, follows redirects, retries twice on server and network
//!   errors, detects zip or gzip by their magic bytes and extracts into the working directory.
//!
//! `zipzstd` and `tarzstd` are not implemented (an error that says so).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::helper::archive::{self, ArchiveError};
use crate::helper::http;

/// Errors of the artifact commands.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactsError {
    /// Selecting or packing files.
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// Nothing matched.
    #[error("no files to upload")]
    Empty,
    /// `raw` with more than one file.
    #[error("the raw artifact format takes exactly one file, {0} matched")]
    RawNeedsOneFile(usize),
    /// A format drover does not implement.
    #[error("artifact format {0:?} is not supported by drover's helper (use zip, gzip or raw)")]
    Format(String),
    /// GitLab refused the archive as too large.
    #[error("too large archive: GitLab answered 413 Request Entity Too Large (the instance's maximum artifacts size)")]
    TooLarge,
    /// GitLab refused the request.
    #[error("{0}")]
    Http(String),
    /// The dependency has no artifacts.
    #[error("artifacts of job {0} not found (404)")]
    NotFound(i64),
    /// Local files.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> ArtifactsError {
    move |source| ArtifactsError::Io { what, source }
}

/// Options of `artifacts-uploader`.
#[derive(Debug, Clone, Default)]
pub struct UploadOptions {
    /// `--url`: GitLab's base URL.
    pub url: String,
    /// `--token`: the job token.
    pub token: String,
    /// `--id`: the job ID.
    pub id: i64,
    /// `--path`.
    pub paths: Vec<String>,
    /// `--exclude`.
    pub excludes: Vec<String>,
    /// `--untracked`.
    pub untracked: bool,
    /// `--name` (default `artifacts`).
    pub name: String,
    /// `--expire-in`.
    pub expire_in: String,
    /// `--artifact-format` (default zip).
    pub format: String,
    /// `--artifact-type`.
    pub artifact_type: String,
    /// `--timeout` for each request.
    pub timeout: Duration,
}

/// Options of `artifacts-downloader`.
#[derive(Debug, Clone, Default)]
pub struct DownloadOptions {
    /// `--url`.
    pub url: String,
    /// `--token`: the dependency's job token.
    pub token: String,
    /// `--id`: the dependency's job ID.
    pub id: i64,
    /// Ask for a direct download (object storage redirect) first.
    pub direct_download: bool,
    /// Timeout of each request.
    pub timeout: Duration,
}

/// A file in the system temp dir, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str, id: i64) -> Self {
        Scratch(std::env::temp_dir().join(format!(
            "drover-artifacts-{what}-{id}-{}",
            std::process::id()
        )))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The archive file name for `name` and `format`.
pub fn archive_name(name: &str, format: &str) -> String {
    let base = Path::new(if name.is_empty() { "artifacts" } else { name })
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "artifacts".into());
    match format {
        "gzip" => format!("{base}.gz"),
        "raw" => base,
        _ => format!("{base}.zip"),
    }
}

/// Packs the selection into `out` as `format`; returns the file name to upload under.
pub fn pack(
    o: &UploadOptions,
    workdir: &Path,
    out: &Path,
    log: &mut dyn Write,
) -> Result<String, ArtifactsError> {
    let format = if o.format.is_empty() {
        "zip"
    } else {
        o.format.as_str()
    };
    let (entries, warnings) = archive::select(workdir, &o.paths, &o.excludes, o.untracked)?;
    for w in warnings {
        let _ = writeln!(log, "WARNING: {w}");
    }
    let files: Vec<&PathBuf> = entries
        .iter()
        .filter(|rel| {
            workdir
                .join(rel)
                .symlink_metadata()
                .is_ok_and(|m| !m.is_dir())
        })
        .collect();
    let _ = writeln!(
        log,
        "Found {} matching artifact files and directories",
        entries.len()
    );
    match format {
        "zip" => {
            if entries.is_empty() {
                return Err(ArtifactsError::Empty);
            }
            archive::create_zip(workdir, &entries, out)?;
            Ok(archive_name(&o.name, "zip"))
        }
        "gzip" => {
            if files.is_empty() {
                return Err(ArtifactsError::Empty);
            }
            let f = std::fs::File::create(out)
                .map_err(io_err(format!("creating {}", out.display())))?;
            let mut w = std::io::BufWriter::new(f);
            for rel in files {
                let mut enc = flate2::GzBuilder::new()
                    .filename(rel.to_string_lossy().as_bytes())
                    .write(&mut w, flate2::Compression::default());
                let mut src = std::fs::File::open(workdir.join(rel))
                    .map_err(io_err(format!("opening {}", rel.display())))?;
                std::io::copy(&mut src, &mut enc)
                    .map_err(io_err(format!("compressing {}", rel.display())))?;
                enc.finish()
                    .map_err(io_err(format!("compressing {}", rel.display())))?;
            }
            w.flush()
                .map_err(io_err(format!("writing {}", out.display())))?;
            Ok(archive_name(&o.name, "gzip"))
        }
        "raw" => {
            if files.len() != 1 {
                return Err(ArtifactsError::RawNeedsOneFile(files.len()));
            }
            std::fs::copy(workdir.join(files[0]), out)
                .map_err(io_err(format!("copying {}", files[0].display())))?;
            let name = if o.name.is_empty() {
                files[0]
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            } else {
                archive_name(&o.name, "raw")
            };
            Ok(name)
        }
        other => Err(ArtifactsError::Format(other.to_string())),
    }
}

/// Runs `artifacts-uploader` in `workdir`.
pub async fn upload(
    o: &UploadOptions,
    workdir: &Path,
    log: &mut dyn Write,
) -> Result<(), ArtifactsError> {
    let scratch = Scratch::new("upload", o.id);
    let file = scratch.0.clone();
    let filename = match pack(o, workdir, &file, log) {
        Ok(f) => f,
        // Nothing to upload is reported and is not a failure, as upstream.
        Err(ArtifactsError::Empty) => {
            let _ = writeln!(log, "ERROR: No files to upload");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let size = std::fs::metadata(&file)
        .map_err(io_err(format!("reading {}", file.display())))?
        .len();
    let client = http::client(o.timeout).map_err(ArtifactsError::Http)?;
    let mut query: Vec<(&str, &str)> = Vec::new();
    for (k, v) in [
        ("artifact_format", o.format.as_str()),
        ("artifact_type", o.artifact_type.as_str()),
        ("expire_in", o.expire_in.as_str()),
    ] {
        if !v.is_empty() {
            query.push((k, v));
        }
    }
    let url = format!(
        "{}/api/v4/jobs/{}/artifacts",
        o.url.trim_end_matches('/'),
        o.id
    );
    let kind = if o.artifact_type.is_empty() {
        "archive"
    } else {
        o.artifact_type.as_str()
    };
    let mut attempt = 0u32;
    let mut max_attempts = 3u32;
    loop {
        attempt += 1;
        let body = tokio::fs::File::open(&file)
            .await
            .map_err(io_err(format!("opening {}", file.display())))?;
        let part = reqwest::multipart::Part::stream_with_length(reqwest::Body::from(body), size)
            .file_name(filename.clone())
            .mime_str("application/octet-stream")
            .map_err(|e| ArtifactsError::Http(e.to_string()))?;
        let form = reqwest::multipart::Form::new().part("file", part);
        let _ = writeln!(log, "Uploading artifacts as {kind:?} to coordinator...");
        let sent = client
            .post(&url)
            .query(&query)
            .header("JOB-TOKEN", &o.token)
            .multipart(form)
            .send()
            .await;
        let retry_reason = match sent {
            Ok(r) => {
                let status = r.status();
                let _ = writeln!(
                    log,
                    "Uploading artifacts as {kind:?} to coordinator... {status}  id={}",
                    o.id
                );
                if status.is_success() {
                    return Ok(());
                }
                if status == reqwest::StatusCode::PAYLOAD_TOO_LARGE {
                    return Err(ArtifactsError::TooLarge);
                }
                if status == reqwest::StatusCode::SERVICE_UNAVAILABLE {
                    max_attempts = 6;
                }
                if status.is_client_error() {
                    return Err(ArtifactsError::Http(format!(
                        "uploading artifacts: {status}"
                    )));
                }
                format!("{status}")
            }
            Err(e) => e.without_url().to_string(),
        };
        if attempt >= max_attempts {
            return Err(ArtifactsError::Http(format!(
                "uploading artifacts failed after {attempt} attempts: {retry_reason}"
            )));
        }
        let _ = writeln!(log, "WARNING: Retrying... ({retry_reason})");
        tokio::time::sleep(Duration::from_secs(1 << (attempt - 1).min(5))).await;
    }
}

/// Runs `artifacts-downloader` in `workdir`.
pub async fn download(
    o: &DownloadOptions,
    workdir: &Path,
    log: &mut dyn Write,
) -> Result<(), ArtifactsError> {
    let client = http::client(o.timeout).map_err(ArtifactsError::Http)?;
    let url = format!(
        "{}/api/v4/jobs/{}/artifacts",
        o.url.trim_end_matches('/'),
        o.id
    );
    let scratch = Scratch::new("download", o.id);
    let file = scratch.0.clone();
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let mut req = client.get(&url).header("JOB-TOKEN", &o.token);
        if o.direct_download && attempt == 1 {
            req = req.query(&[("direct_download", "true")]);
        }
        let _ = writeln!(log, "Downloading artifacts from coordinator...");
        let outcome: Result<(), String> = async {
            let mut r = req.send().await.map_err(|e| e.without_url().to_string())?;
            let status = r.status();
            if status == reqwest::StatusCode::NOT_FOUND {
                return Err("404".into());
            }
            if !status.is_success() {
                return Err(status.to_string());
            }
            let mut out = tokio::fs::File::create(&file)
                .await
                .map_err(|e| e.to_string())?;
            while let Some(chunk) = r.chunk().await.map_err(|e| e.without_url().to_string())? {
                tokio::io::AsyncWriteExt::write_all(&mut out, &chunk)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            tokio::io::AsyncWriteExt::flush(&mut out)
                .await
                .map_err(|e| e.to_string())?;
            Ok(())
        }
        .await;
        match outcome {
            Ok(()) => {
                let _ = writeln!(
                    log,
                    "Downloading artifacts from coordinator... ok  id={}",
                    o.id
                );
                break;
            }
            Err(e) if e == "404" => return Err(ArtifactsError::NotFound(o.id)),
            Err(e) if e.starts_with("401") || e.starts_with("403") => {
                return Err(ArtifactsError::Http(format!(
                    "downloading artifacts of job {}: {e}",
                    o.id
                )))
            }
            Err(e) if attempt >= 3 => {
                return Err(ArtifactsError::Http(format!(
                    "downloading artifacts of job {} failed after {attempt} attempts: {e}",
                    o.id
                )))
            }
            Err(e) => {
                let _ = writeln!(log, "WARNING: Retrying... ({e})");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    extract_any(&file, workdir, log)
}

/// Extracts a downloaded archive, zip or gzip, chosen by its magic bytes.
pub fn extract_any(file: &Path, workdir: &Path, log: &mut dyn Write) -> Result<(), ArtifactsError> {
    let mut magic = [0u8; 4];
    let n = std::fs::File::open(file)
        .and_then(|mut f| f.read(&mut magic))
        .map_err(io_err(format!("reading {}", file.display())))?;
    match &magic[..n.min(4)] {
        [0x50, 0x4b, ..] => {
            let count = archive::extract_zip(file, workdir)?;
            let _ = writeln!(log, "Extracted {count} files and directories");
            Ok(())
        }
        [0x1f, 0x8b, ..] => {
            let f =
                std::fs::File::open(file).map_err(io_err(format!("opening {}", file.display())))?;
            let mut dec = flate2::read::MultiGzDecoder::new(std::io::BufReader::new(f));
            let name = dec
                .header()
                .and_then(|h| h.filename())
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .unwrap_or_else(|| "artifacts".into());
            let rel = Path::new(&name);
            if rel.is_absolute()
                || rel
                    .components()
                    .any(|c| matches!(c, std::path::Component::ParentDir))
            {
                return Err(ArtifactsError::Http(format!(
                    "gzip member name {name:?} leaves the working directory"
                )));
            }
            // Its directories may not lead outside through a symlink, and a symlink standing
            // where the file goes is replaced, not written through.
            let target = archive::entry_target(workdir, rel, &Default::default())?;
            if let Some(dir) = target.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(io_err(format!("creating {}", dir.display())))?;
            }
            if std::fs::symlink_metadata(&target).is_ok_and(|m| !m.is_dir()) {
                std::fs::remove_file(&target)
                    .map_err(io_err(format!("replacing {}", target.display())))?;
            }
            let mut out = archive::create_new(&target)?;
            std::io::copy(&mut dec, &mut out).map_err(io_err(format!("extracting {name}")))?;
            Ok(())
        }
        _ => Err(ArtifactsError::Format("unknown (not zip or gzip)".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("out/sub")).unwrap();
        std::fs::write(d.path().join("out/a.txt"), "a").unwrap();
        std::fs::write(d.path().join("out/sub/b.log"), "b").unwrap();
        std::fs::write(d.path().join("report.xml"), "<xml/>").unwrap();
        d
    }

    #[test]
    fn names_follow_the_format() {
        assert_eq!(archive_name("", "zip"), "artifacts.zip");
        assert_eq!(archive_name("dir/build", "gzip"), "build.gz");
        assert_eq!(archive_name("report", "raw"), "report");
    }

    #[test]
    fn zip_gzip_and_raw_packing() {
        let d = tree();
        let out = tempfile::tempdir().unwrap();
        let mut log = Vec::new();
        let o = UploadOptions {
            paths: vec!["out/".into()],
            excludes: vec!["**/*.log".into()],
            ..Default::default()
        };
        let zip = out.path().join("a.zip");
        assert_eq!(pack(&o, d.path(), &zip, &mut log).unwrap(), "artifacts.zip");
        let dest = tempfile::tempdir().unwrap();
        extract_any(&zip, dest.path(), &mut log).unwrap();
        assert!(dest.path().join("out/a.txt").exists());
        assert!(!dest.path().join("out/sub/b.log").exists());

        let o = UploadOptions {
            paths: vec!["report.xml".into()],
            format: "gzip".into(),
            name: "junit".into(),
            ..Default::default()
        };
        let gz = out.path().join("r.gz");
        assert_eq!(pack(&o, d.path(), &gz, &mut log).unwrap(), "junit.gz");
        let dest = tempfile::tempdir().unwrap();
        extract_any(&gz, dest.path(), &mut log).unwrap();
        assert_eq!(
            std::fs::read_to_string(dest.path().join("report.xml")).unwrap(),
            "<xml/>"
        );

        let raw = UploadOptions {
            format: "raw".into(),
            ..o.clone()
        };
        let r = out.path().join("raw");
        assert_eq!(pack(&raw, d.path(), &r, &mut log).unwrap(), "junit");
        let two = UploadOptions {
            paths: vec!["out/".into()],
            format: "raw".into(),
            ..Default::default()
        };
        assert!(matches!(
            pack(&two, d.path(), &r, &mut log),
            Err(ArtifactsError::RawNeedsOneFile(2))
        ));
        let zstd = UploadOptions {
            format: "zipzstd".into(),
            ..o
        };
        assert!(matches!(
            pack(&zstd, d.path(), &r, &mut log),
            Err(ArtifactsError::Format(_))
        ));
        let none = UploadOptions {
            paths: vec!["nothing/".into()],
            ..Default::default()
        };
        assert!(matches!(
            pack(&none, d.path(), &r, &mut log),
            Err(ArtifactsError::Empty)
        ));
    }

    #[test]
    fn a_gzip_name_never_leads_outside_through_a_symlink() {
        use std::io::Write as _;
        let d = tempfile::tempdir().unwrap();
        let (work, outside) = (d.path().join("work"), d.path().join("outside"));
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, work.join("l")).unwrap();
        let gz = d.path().join("a.gz");
        let mut enc = flate2::GzBuilder::new()
            .filename("l/pwned")
            .write(std::fs::File::create(&gz).unwrap(), Default::default());
        enc.write_all(b"pwned").unwrap();
        enc.finish().unwrap();
        let mut log = Vec::new();
        assert!(extract_any(&gz, &work, &mut log).is_err());
        assert!(!outside.join("pwned").exists());
    }
}
