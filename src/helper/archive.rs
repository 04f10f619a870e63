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

/// Where an archive entry named `rel` (already free of `..` and roots) may be written below
/// `dest`, or why not: no directory on the way may be a symlink this archive created
/// (`links`), and none may resolve outside `dest`. Upstream checks neither; without it, a
/// link entry `l -> /etc` followed by a file entry `l/passwd` writes outside the folder.
pub fn entry_target(
    dest: &Path,
    rel: &Path,
    links: &BTreeSet<PathBuf>,
) -> Result<PathBuf, ArchiveError> {
    let refuse = |why: String| ArchiveError::Io {
        what: format!("entry {:?}", rel.display().to_string()),
        source: io::Error::new(io::ErrorKind::InvalidData, why),
    };
    let mut root: Option<PathBuf> = None;
    let mut prefix = PathBuf::new();
    let mut parts = rel.components().peekable();
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            break;
        }
        prefix.push(part);
        if links.contains(&prefix) {
            return Err(refuse(format!(
                "goes through {}, a symlink of the same archive",
                prefix.display()
            )));
        }
        let on_disk = dest.join(&prefix);
        match fs::symlink_metadata(&on_disk) {
            Ok(m) if m.file_type().is_symlink() => {
                let root = match &root {
                    Some(r) => r,
                    None => root.insert(
                        fs::canonicalize(dest)
                            .map_err(io_err(format!("resolving {}", dest.display())))?,
                    ),
                };
                let inside = fs::canonicalize(&on_disk).is_ok_and(|t| t.starts_with(root));
                if !inside {
                    return Err(refuse(format!(
                        "goes through the symlink {}, which leads outside the target directory",
                        prefix.display()
                    )));
                }
            }
            Ok(_) => {}
            // Nothing there yet: the rest is created as plain directories.
            Err(_) => break,
        }
    }
    Ok(dest.join(rel))
}

/// Extracts the zip at `file` into `dest`, keeping modes and symlinks. Entries whose name
/// would leave `dest`, or whose way goes through a symlink of the archive or one leading
/// outside `dest` ([`entry_target`]), are refused. Returns the number of entries extracted.
pub fn extract_zip(file: &Path, dest: &Path) -> Result<usize, ArchiveError> {
    use std::os::unix::fs::PermissionsExt;
    let f = fs::File::open(file).map_err(io_err(format!("opening {}", file.display())))?;
    let mut zip = zip::ZipArchive::new(io::BufReader::with_capacity(1 << 20, f))
        .map_err(zip_err(format!("reading {}", file.display())))?;
    let mut count = 0;
    let mut links = BTreeSet::new();
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
        let path = entry_target(dest, &rel, &links).map_err(|e| match e {
            ArchiveError::Io { what, source } => ArchiveError::Io {
                what: format!("{what} of {}", file.display()),
                source,
            },
            other => other,
        })?;
        let mode = entry.unix_mode();
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io_err(format!("creating {}", parent.display())))?;
        }
        if entry.is_dir() {
            if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
                // A directory entry never follows a link that stands in its place.
                fs::remove_file(&path).map_err(io_err(format!("replacing {}", path.display())))?;
            }
            fs::create_dir_all(&path).map_err(io_err(format!("creating {}", path.display())))?;
        } else if entry.is_symlink() {
            let mut target = String::new();
            io::Read::read_to_string(&mut entry, &mut target)
                .map_err(io_err(format!("reading link {}", rel.display())))?;
            let _ = fs::remove_file(&path);
            std::os::unix::fs::symlink(&target, &path)
                .map_err(io_err(format!("linking {}", path.display())))?;
            links.insert(rel);
            count += 1;
            continue;
        } else {
            // Replace rather than write through: an existing symlink must not be followed.
            let _ = fs::remove_file(&path);
            let mut out = create_new(&path)?;
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

/// Creates `path` for writing without following a symlink in its place (`O_NOFOLLOW`); the
/// caller removed what stood there, so a link that appears meanwhile is an error, not a write
/// elsewhere.
pub fn create_new(path: &Path) -> Result<fs::File, ArchiveError> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(io_err(format!("creating {}", path.display())))
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

    /// A zip of `entries`: (name, Some(link target)) for a symlink, (name, None) for a file
    /// holding "pwned".
    fn zip_of(path: &Path, entries: &[(&str, Option<&str>)]) {
        let mut w = zip::ZipWriter::new(fs::File::create(path).unwrap());
        for (name, link) in entries {
            match link {
                Some(t) => w
                    .add_symlink(*name, *t, SimpleFileOptions::default())
                    .unwrap(),
                None => {
                    w.start_file(*name, SimpleFileOptions::default()).unwrap();
                    io::Write::write_all(&mut w, b"pwned").unwrap();
                }
            }
        }
        w.finish().unwrap();
    }

    /// A target folder and, beside it, an outside folder an attacker aims at.
    fn sandbox() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("dest");
        let outside = d.path().join("outside");
        fs::create_dir_all(&dest).unwrap();
        fs::create_dir_all(&outside).unwrap();
        (d, dest, outside)
    }

    #[test]
    fn a_later_entry_never_goes_through_a_symlink_of_the_archive() {
        let (d, dest, outside) = sandbox();
        let outside_s = outside.to_str().unwrap();
        // Absolute link out, relative link out, and a link that stays inside: none may be
        // traversed by a later entry, directly or below a directory of its own.
        for (i, link) in [outside_s, "../outside", "sub"].into_iter().enumerate() {
            fs::create_dir_all(dest.join("sub")).unwrap();
            let zip = d.path().join(format!("evil{i}.zip"));
            zip_of(
                &zip,
                &[("keep.txt", None), ("l", Some(link)), ("l/pwned", None)],
            );
            let err = extract_zip(&zip, &dest).expect_err(link).to_string();
            assert!(err.contains("symlink"), "{err}");
            assert!(!outside.join("pwned").exists(), "wrote outside via {link}");
            assert!(!dest.join("sub/pwned").exists(), "went through {link}");
            let zip = d.path().join(format!("deep{i}.zip"));
            zip_of(&zip, &[("m", Some(link)), ("m/x/y/pwned", None)]);
            assert!(extract_zip(&zip, &dest).is_err(), "{link}");
            assert!(!outside.join("x").exists());
        }
    }

    #[test]
    fn a_symlink_already_there_may_not_lead_outside() {
        let (d, dest, outside) = sandbox();
        std::os::unix::fs::symlink(&outside, dest.join("cache")).unwrap();
        fs::create_dir_all(dest.join("real")).unwrap();
        std::os::unix::fs::symlink("real", dest.join("inner")).unwrap();
        let zip = d.path().join("a.zip");
        zip_of(&zip, &[("cache/pwned", None)]);
        assert!(extract_zip(&zip, &dest).is_err());
        assert!(!outside.join("pwned").exists());
        // A link of the project that stays inside keeps working, as before.
        let zip = d.path().join("b.zip");
        zip_of(&zip, &[("inner/ok.txt", None)]);
        assert_eq!(extract_zip(&zip, &dest).unwrap(), 1);
        assert_eq!(fs::read(dest.join("real/ok.txt")).unwrap(), b"pwned");
        // A link standing where a file goes is replaced, not written through.
        std::os::unix::fs::symlink(outside.join("target"), dest.join("file")).unwrap();
        let zip = d.path().join("c.zip");
        zip_of(&zip, &[("file", None)]);
        assert_eq!(extract_zip(&zip, &dest).unwrap(), 1);
        assert!(!outside.join("target").exists());
        assert!(!fs::symlink_metadata(dest.join("file"))
            .unwrap()
            .file_type()
            .is_symlink());
    }
}
