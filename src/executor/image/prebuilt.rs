//! The default helper image from an archive installed with the runner, for machines that cannot
//! reach `registry.gitlab.com` (air-gapped fleets). Upstream's packages ship
//! `prebuilt-<flavor>-<arch>.docker.tar.zst` (a `docker save` archive, loaded) or
//! `prebuilt-<flavor>-<arch>.tar.xz` (a root filesystem, imported with the helper's entrypoint)
//! in `helper-images` folders next to the binary; drover ships none, so an operator can put
//! upstream's (or one made with `docker save … | zstd`) at the same places:
//!
//! - `<drover's folder>/out/helper-images`
//! - `<drover's folder>/../helper-images`
//! - `<working directory>/out/helper-images`
//! - `<drover's folder>/../lib/gitlab-runner/helper-images` (`/usr/lib/gitlab-runner/…` for a
//!   binary in `/usr/bin`, where upstream's Linux packages install them)
//!
//! The archive is streamed to the Engine, never held in memory.

use std::path::{Path, PathBuf};

use bollard::query_parameters::{CreateImageOptions, ImportImageOptions, TagImageOptions};
use bollard::Docker;
use futures_util::{StreamExt, TryStreamExt};

use super::split_reference;

/// A `docker save` archive (compressed or not; the Engine detects it): loaded.
pub const LOAD_SUFFIX: &str = ".docker.tar.zst";
/// A root filesystem archive: imported.
pub const IMPORT_SUFFIX: &str = ".tar.xz";

/// The entrypoint an imported root filesystem gets back (an export loses it).
const HELPER_ENTRYPOINT: &str = r#"ENTRYPOINT ["/usr/bin/dumb-init", "/entrypoint"]"#;

/// The folders searched, in upstream's order.
pub fn search_dirs() -> Vec<PathBuf> {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    let cwd = std::env::current_dir().ok();
    let mut dirs = Vec::new();
    if let Some(d) = &exe_dir {
        dirs.push(d.join("out/helper-images"));
        dirs.push(d.join("../helper-images"));
    }
    if let Some(d) = &cwd {
        dirs.push(d.join("out/helper-images"));
    }
    if let Some(d) = &exe_dir {
        dirs.push(d.join("../lib/gitlab-runner/helper-images"));
    }
    dirs
}

/// Upstream's helper architecture name for an Engine architecture (`x86_64`, `arm64`, `arm`,
/// else the Engine's own; an empty one is the machine drover runs on, in Go's names).
pub fn helper_architecture(engine_arch: &str) -> String {
    let arch = match engine_arch {
        "" => match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            other => other,
        },
        other => other,
    };
    match arch {
        "amd64" => "x86_64",
        "aarch64" => "arm64",
        "armv6l" | "armv7l" => "arm",
        other => other,
    }
    .to_string()
}

/// The archive paths tried for a helper whose prebuilt base name is `prebuilt` (see
/// [`super::HelperImageInfo`]), in order: per folder, the loadable then the importable archive,
/// then the same with `amd64` for `x86_64`.
pub fn archive_candidates(dirs: &[PathBuf], prebuilt: &str) -> Vec<PathBuf> {
    let mut names = vec![
        format!("{prebuilt}{LOAD_SUFFIX}"),
        format!("{prebuilt}{IMPORT_SUFFIX}"),
    ];
    if prebuilt.contains("x86_64") {
        let amd = prebuilt.replace("x86_64", "amd64");
        names.push(format!("{amd}{LOAD_SUFFIX}"));
        names.push(format!("{amd}{IMPORT_SUFFIX}"));
    }
    dirs.iter()
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .collect()
}

/// What loading found: whether an archive gave the image, and a warning for each archive that
/// exists but could not be used (upstream only logs these at debug level).
#[derive(Debug, Default)]
pub struct LoadOutcome {
    /// The image is now tagged `name`.
    pub loaded: bool,
    /// `Failed to load the helper image from <path>: <why>` lines.
    pub warnings: Vec<String>,
}

/// Makes `name` (`repo:tag`) from the first archive of `candidates` that exists and loads.
/// Missing archives are skipped silently; one that fails is named in a warning and the next
/// is tried.
pub async fn load(docker: &Docker, candidates: &[PathBuf], name: &str) -> LoadOutcome {
    let mut outcome = LoadOutcome::default();
    for path in candidates {
        if !path.is_file() {
            continue;
        }
        let path_text = path.display().to_string();
        let result = if path_text.ends_with(LOAD_SUFFIX) {
            load_saved(docker, path, name).await
        } else {
            import_rootfs(docker, path, name).await
        };
        match result {
            Ok(()) => {
                outcome.loaded = true;
                return outcome;
            }
            Err(e) => outcome.warnings.push(format!(
                "Failed to load the helper image {name} from {path_text}: {e} (remove or \
                 replace the archive; trying the next source)"
            )),
        }
    }
    outcome
}

async fn open(path: &Path) -> Result<tokio_util::io::ReaderStream<tokio::fs::File>, String> {
    tokio::fs::File::open(path)
        .await
        .map(tokio_util::io::ReaderStream::new)
        .map_err(|e| format!("opening it: {e}"))
}

/// Longest Engine progress text kept for the error.
const MAX_MESSAGE: usize = 4096;

fn cut(mut s: String) -> String {
    if s.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// Whether the file starts with zstd's magic number.
fn is_zstd(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == [0x28, 0xb5, 0x2f, 0xfd]
}

/// `docker load`, then tags the image it reports as `name`.
async fn load_saved(docker: &Docker, path: &Path, name: &str) -> Result<(), String> {
    let mut stream = docker.import_image(
        ImportImageOptions {
            quiet: true,
            ..Default::default()
        },
        bollard::body_try_stream(open(path).await?),
        None,
    );
    let mut image = None;
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| {
            let hint = if is_zstd(path) {
                " (a zstd archive needs an Engine that reads zstd; `zstd -dc <archive> | gzip` \
                 makes one every Engine reads)"
            } else {
                ""
            };
            cut(format!("the Engine refused it: {e}{hint}"))
        })?;
        let text = info.stream.unwrap_or_default();
        for prefix in ["Loaded image ID:", "Loaded image:"] {
            if let Some(rest) = text.trim().strip_prefix(prefix) {
                if image.is_none() {
                    image = Some(rest.trim().to_string());
                }
            }
        }
    }
    let image =
        image.ok_or("the Engine loaded it but named no image (is it a `docker save` archive?)")?;
    let (repo, tag) = split_reference(name);
    docker
        .tag_image(
            &image,
            Some(TagImageOptions {
                repo: Some(repo),
                tag: Some(tag),
            }),
        )
        .await
        .map_err(|e| cut(format!("tagging {image} as {name}: {e}")))
}

/// `docker import` with the helper's entrypoint (not for `concrete` tags, which keep theirs).
async fn import_rootfs(docker: &Docker, path: &Path, name: &str) -> Result<(), String> {
    let (repo, tag) = split_reference(name);
    let changes = if tag.starts_with("concrete") {
        Vec::new()
    } else {
        vec![HELPER_ENTRYPOINT.to_string()]
    };
    let options = CreateImageOptions {
        from_src: Some("-".to_string()),
        repo: Some(repo),
        tag: Some(tag),
        changes,
        ..Default::default()
    };
    docker
        .create_image(
            Some(options),
            Some(bollard::body_try_stream(open(path).await?)),
            None,
        )
        .try_for_each(|info| async move {
            match info.error_detail.and_then(|d| d.message) {
                Some(m) => Err(bollard::errors::Error::DockerStreamError { error: m }),
                None => Ok(()),
            }
        })
        .await
        .map_err(|e| cut(format!("the Engine refused it: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_upstream_names_and_order() {
        let dirs = vec![PathBuf::from("/a"), PathBuf::from("/b")];
        let got: Vec<String> = archive_candidates(&dirs, "prebuilt-alpine-x86_64")
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            got,
            [
                "/a/prebuilt-alpine-x86_64.docker.tar.zst",
                "/a/prebuilt-alpine-x86_64.tar.xz",
                "/a/prebuilt-alpine-amd64.docker.tar.zst",
                "/a/prebuilt-alpine-amd64.tar.xz",
                "/b/prebuilt-alpine-x86_64.docker.tar.zst",
                "/b/prebuilt-alpine-x86_64.tar.xz",
                "/b/prebuilt-alpine-amd64.docker.tar.zst",
                "/b/prebuilt-alpine-amd64.tar.xz",
            ]
        );
        let got: Vec<String> = archive_candidates(&dirs[..1], "prebuilt-ubuntu-arm64")
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            got,
            [
                "/a/prebuilt-ubuntu-arm64.docker.tar.zst",
                "/a/prebuilt-ubuntu-arm64.tar.xz",
            ]
        );
    }

    #[test]
    fn search_dirs_are_upstreams() {
        let dirs = search_dirs();
        let tails: Vec<bool> = [
            "out/helper-images",
            "../helper-images",
            "out/helper-images",
            "../lib/gitlab-runner/helper-images",
        ]
        .iter()
        .zip(&dirs)
        .map(|(tail, d)| d.ends_with(tail))
        .collect();
        assert_eq!(dirs.len(), 4);
        assert_eq!(tails, [true, true, true, true]);
    }
}
