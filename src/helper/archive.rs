//! File selection and zip archives for the cache and artifact helper commands.
//!
//! [`select`] turns `--path`/`--exclude` patterns (doublestar globs relative to the working
//! directory, which is the project dir; a matched directory brings everything below it) and
//! `--untracked` (git's untracked files, `.gitignore` not applied, as upstream) into a sorted
//! list of relative paths. [`create_zip`] writes them (files with their mode, directories,
//! symlinks as links; deflate) and [`extract_zip`] restores them, refusing entries that would
//! land outside the target directory.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use zip::write::SimpleFileOptions;

/// Errors of file selection and archiving.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// A pattern is not a valid glob.
    #[error("invalid path pattern {pattern:?}: {message}")]
    Pattern {
        /// The pattern.
        pattern: String,
        /// Why.
        message: String,
    },
    /// Reading or writing files.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
    /// The zip library failed.
    #[error("{what}: {source}")]
    Zip {
        /// What was being done.
        what: String,
        /// The error.
        source: zip::result::ZipError,
    },
    /// `git ls-files` failed (for `--untracked`).
    #[error("listing untracked files with git: {0}")]
    Git(String),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ArchiveError {
    let what = what.into();
    move |source| ArchiveError::Io { what, source }
}

fn zip_err(what: impl Into<String>) -> impl FnOnce(zip::result::ZipError) -> ArchiveError {
    let what = what.into();
    move |source| ArchiveError::Zip { what, source }
}

/// A normalised pattern relative to `root`, or `None` (with a warning) when it points outside.
fn normalise(pattern: &str, root: &Path, warnings: &mut Vec<String>) -> Option<String> {
    let p = Path::new(pattern.trim());
    let rel = if p.is_absolute() {
        match p.strip_prefix(root) {
            Ok(r) => r.to_path_buf(),
            Err(_) => {
                warnings.push(format!(
                    "{pattern}: not a subpath of the project directory {}",
                    root.display()
                ));
                return None;
            }
        }
    } else {
        p.to_path_buf()
    };
    let mut parts: Vec<String> = Vec::new();
    for c in rel.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    warnings.push(format!(
                        "{pattern}: not a subpath of the project directory {}",
                        root.display()
                    ));
                    return None;
                }
            }
            Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            Component::RootDir | Component::Prefix(_) => {}
        }
    }
    if parts.is_empty() {
        // The project dir itself: everything.
        return Some("**".into());
    }
    Some(parts.join("/"))
}

fn glob_set(
    patterns: &[String],
    root: &Path,
    warnings: &mut Vec<String>,
) -> Result<GlobSet, ArchiveError> {
    let mut b = GlobSetBuilder::new();
    for p in patterns.iter().filter(|p| !p.trim().is_empty()) {
        let Some(n) = normalise(p, root, warnings) else {
            continue;
        };
        let glob = GlobBuilder::new(&n)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| ArchiveError::Pattern {
                pattern: p.clone(),
                message: e.to_string(),
            })?;
        b.add(glob);
    }
    b.build().map_err(|e| ArchiveError::Pattern {
        pattern: patterns.join(", "),
        message: e.to_string(),
    })
}

/// Whether `rel` or one of its ancestors matches.
fn matches_self_or_ancestor(set: &GlobSet, rel: &Path) -> bool {
    rel.ancestors()
        .filter(|a| !a.as_os_str().is_empty())
        .any(|a| set.is_match(a))
}

/// Git's untracked files below `root` (ignored ones included), relative.
fn untracked(root: &Path) -> Result<Vec<PathBuf>, ArchiveError> {
    let out = std::process::Command::new("git")
        .args(["ls-files", "-o", "-z"])
        .current_dir(root)
        .output()
        .map_err(|e| ArchiveError::Git(e.to_string()))?;
    if !out.status.success() {
        return Err(ArchiveError::Git(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| PathBuf::from(String::from_utf8_lossy(s).into_owned()))
        .collect())
}

/// The selected entries, relative to `root`, sorted (parents before children), plus warnings
/// for patterns that point outside `root` or match nothing.
pub fn select(
    root: &Path,
    paths: &[String],
    excludes: &[String],
    with_untracked: bool,
) -> Result<(Vec<PathBuf>, Vec<String>), ArchiveError> {
    let mut warnings = Vec::new();
    let include = glob_set(paths, root, &mut warnings)?;
    let exclude = glob_set(excludes, root, &mut warnings)?;
    let mut out = BTreeSet::new();
    if !include.is_empty() {
        let mut hits = vec![false; include.len()];
        for entry in walkdir::WalkDir::new(root).follow_links(false).min_depth(1) {
            let entry = entry.map_err(|e| ArchiveError::Io {
                what: format!("walking {}", root.display()),
                source: e.into(),
            })?;
            let Ok(rel) = entry.path().strip_prefix(root) else {
                continue;
            };
            for i in include.matches(rel) {
                hits[i] = true;
            }
            if matches_self_or_ancestor(&include, rel) {
                out.insert(rel.to_path_buf());
            }
        }
        let patterns: Vec<&String> = paths.iter().filter(|p| !p.trim().is_empty()).collect();
        for (i, hit) in hits.iter().enumerate() {
            if !hit {
                if let Some(p) = patterns.get(i) {
                    warnings.push(format!("{p}: no matching files"));
                }
            }
        }
    }
    if with_untracked {
        for rel in untracked(root)? {
            // Parent directories come along so that modes are restored as well.
            out.insert(rel);
        }
    }
    let selected = out
        .into_iter()
        .filter(|rel| !matches_self_or_ancestor(&exclude, rel))
        .collect();
    Ok((selected, warnings))
}

/// Writes `entries` (relative to `root`) to a zip at `out`, through a temporary file renamed
/// into place. Returns the number of entries written.
pub fn create_zip(root: &Path, entries: &[PathBuf], out: &Path) -> Result<usize, ArchiveError> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
    }
    let tmp = out.with_extension("zip.tmp");
    let file = fs::File::create(&tmp).map_err(io_err(format!("creating {}", tmp.display())))?;
    let mut zip = zip::ZipWriter::new(io::BufWriter::with_capacity(1 << 20, file));
    let base = SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .large_file(false);
    let mut count = 0;
    for rel in entries {
        let path = root.join(rel);
        let meta = match fs::symlink_metadata(&path) {
            Ok(m) => m,
            // Gone since it was selected: skip, as a changing tree is normal.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err(format!("reading {}", path.display()))(e)),
        };
        let name = rel.to_string_lossy().into_owned();
        let mode = meta.permissions().mode() & 0o7777;
        let options = base.unix_permissions(mode);
        if meta.file_type().is_symlink() {
            let target =
                fs::read_link(&path).map_err(io_err(format!("reading link {}", path.display())))?;
            zip.add_symlink(name, target.to_string_lossy(), options)
                .map_err(zip_err(format!("adding {}", rel.display())))?;
        } else if meta.is_dir() {
            zip.add_directory(name, options)
                .map_err(zip_err(format!("adding {}", rel.display())))?;
        } else if meta.is_file() {
            let large = meta.len() >= 0xFFFF_FFFF;
            zip.start_file(name, options.large_file(large))
                .map_err(zip_err(format!("adding {}", rel.display())))?;
            let mut f =
                fs::File::open(&path).map_err(io_err(format!("opening {}", path.display())))?;
            io::copy(&mut f, &mut zip).map_err(io_err(format!("archiving {}", path.display())))?;
        } else {
            continue;
        }
        count += 1;
    }
    let mut w = zip
        .finish()
        .map_err(zip_err(format!("finishing {}", tmp.display())))?;
    io::Write::flush(&mut w).map_err(io_err(format!("writing {}", tmp.display())))?;
    drop(w);
    fs::rename(&tmp, out).map_err(io_err(format!("renaming {} into place", tmp.display())))?;
    Ok(count)
}

/// Extracts the zip at `file` into `dest`, keeping modes and symlinks; entries whose name
/// would leave `dest` are refused. Returns the number of entries extracted.
pub fn extract_zip(file: &Path, dest: &Path) -> Result<usize, ArchiveError> {
    use std::os::unix::fs::PermissionsExt;
    let f = fs::File::open(file).map_err(io_err(format!("opening {}", file.display())))?;
    let mut zip = zip::ZipArchive::new(io::BufReader::with_capacity(1 << 20, f))
        .map_err(zip_err(format!("reading {}", file.display())))?;
    let mut count = 0;
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .map_err(zip_err(format!("reading entry {i} of {}", file.display())))?;
        let Some(rel) = entry.enclosed_name() else {
            return Err(ArchiveError::Io {
                what: format!("entry {:?} of {}", entry.name(), file.display()),
                source: io::Error::new(
                    io::ErrorKind::InvalidData,
                    "path leaves the target directory",
                ),
            });
        };
        let path = dest.join(&rel);
        let mode = entry.unix_mode();
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io_err(format!("creating {}", parent.display())))?;
        }
        if entry.is_dir() {
            fs::create_dir_all(&path).map_err(io_err(format!("creating {}", path.display())))?;
        } else if entry.is_symlink() {
            let mut target = String::new();
            io::Read::read_to_string(&mut entry, &mut target)
                .map_err(io_err(format!("reading link {}", rel.display())))?;
            let _ = fs::remove_file(&path);
            std::os::unix::fs::symlink(&target, &path)
                .map_err(io_err(format!("linking {}", path.display())))?;
            count += 1;
            continue;
        } else {
            // Replace rather than write through: an existing symlink must not be followed.
            let _ = fs::remove_file(&path);
            let mut out =
                fs::File::create(&path).map_err(io_err(format!("creating {}", path.display())))?;
            io::copy(&mut entry, &mut out)
                .map_err(io_err(format!("extracting {}", rel.display())))?;
        }
        if let Some(m) = mode {
            fs::set_permissions(&path, fs::Permissions::from_mode(m & 0o7777))
                .map_err(io_err(format!("setting the mode of {}", path.display())))?;
        }
        count += 1;
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        fs::create_dir_all(r.join("vendor/a/b")).unwrap();
        fs::write(r.join("vendor/a/b/lib.txt"), "lib").unwrap();
        fs::write(r.join("vendor/top.txt"), "top").unwrap();
        fs::write(r.join("vendor/skip.log"), "log").unwrap();
        fs::create_dir_all(r.join("out")).unwrap();
        fs::write(r.join("out/x.bin"), "x").unwrap();
        fs::write(r.join("README"), "readme").unwrap();
        std::os::unix::fs::symlink("top.txt", r.join("vendor/link")).unwrap();
        d
    }

    fn names(v: &[PathBuf]) -> Vec<String> {
        v.iter().map(|p| p.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn directories_bring_their_contents_and_excludes_win() {
        let d = tree();
        let (sel, warnings) = select(
            d.path(),
            &["vendor/".into(), "./out/*.bin".into(), "missing/".into()],
            &["**/*.log".into()],
            false,
        )
        .unwrap();
        assert_eq!(
            names(&sel),
            vec![
                "out/x.bin",
                "vendor",
                "vendor/a",
                "vendor/a/b",
                "vendor/a/b/lib.txt",
                "vendor/link",
                "vendor/top.txt"
            ]
        );
        assert_eq!(warnings, vec!["missing/: no matching files"]);
    }

    #[test]
    fn paths_outside_the_project_are_refused() {
        let d = tree();
        let (sel, warnings) = select(
            d.path(),
            &["../etc".into(), "/etc/passwd".into()],
            &[],
            false,
        )
        .unwrap();
        assert!(sel.is_empty());
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("not a subpath"), "{warnings:?}");
    }

    #[test]
    fn zip_round_trip_keeps_modes_and_links() {
        use std::os::unix::fs::PermissionsExt;
        let d = tree();
        fs::set_permissions(
            d.path().join("vendor/top.txt"),
            fs::Permissions::from_mode(0o751),
        )
        .unwrap();
        let (sel, _) = select(d.path(), &["vendor".into()], &[], false).unwrap();
        let out = tempfile::tempdir().unwrap();
        let zip = out.path().join("c/cache.zip");
        assert_eq!(create_zip(d.path(), &sel, &zip).unwrap(), 7);
        let dest = tempfile::tempdir().unwrap();
        assert_eq!(extract_zip(&zip, dest.path()).unwrap(), 7);
        let r = dest.path();
        assert_eq!(
            fs::read_to_string(r.join("vendor/a/b/lib.txt")).unwrap(),
            "lib"
        );
        assert_eq!(
            fs::read_link(r.join("vendor/link")).unwrap(),
            PathBuf::from("top.txt")
        );
        let mode = fs::metadata(r.join("vendor/top.txt"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o751);
        assert!(!r.join("README").exists());
    }

    #[test]
    fn entries_leaving_the_target_are_refused() {
        let out = tempfile::tempdir().unwrap();
        let zip_path = out.path().join("evil.zip");
        let mut w = zip::ZipWriter::new(fs::File::create(&zip_path).unwrap());
        w.start_file("../evil.txt", SimpleFileOptions::default())
            .unwrap();
        io::Write::write_all(&mut w, b"x").unwrap();
        w.finish().unwrap();
        let dest = out.path().join("dest");
        fs::create_dir_all(&dest).unwrap();
        assert!(extract_zip(&zip_path, &dest).is_err());
        assert!(!out.path().join("evil.txt").exists());
    }
}
