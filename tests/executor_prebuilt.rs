//! The default helper image from an archive installed with the runner (upstream's
//! `helper-images` folders), on the real Docker Engine:
//!
//! - a `prebuilt-<flavor>-x86_64.docker.tar.zst` made with `docker save` from the test helper
//!   image (gzip-compressed: the Engine reads the compression from the content, and Engines
//!   before 23.0, like the 20.10 one these tests run on, read no zstd), in `<binary's folder>/../helper-images`, is loaded and tagged as the default
//!   helper when that image is not on the Engine, and the job runs with it without a pull;
//! - an archive that is not an image is named in a warning and the job goes on to the pull
//!   (here refused by `pull_policy = never`, so nothing leaves the machine);
//! - a root filesystem `.tar.xz` is imported with the helper's entrypoint.
//!
//! Each case uses its own flavor, so the default helper name is unique to the test run.

mod docker_engine;
mod executor_common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use drover::executor::image::{self, prebuilt};
use drover::executor::JobError;
use executor_common::*;
use serde_json::json;

/// `<test binary's folder>/../helper-images`, one of upstream's places.
fn helper_images_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent().expect("exe folder").join("../helper-images")
}

/// Removes the files and image tags it names when dropped.
struct Cleanup {
    files: Vec<PathBuf>,
    images: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
        for i in &self.images {
            let _ = Command::new("docker")
                .args(["rmi", "--no-prune", i])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A unique flavor, its default helper name, where its loadable archive goes, and the clean-up
/// of both.
fn installed_archive(prefix: &str) -> (String, String, PathBuf, Cleanup) {
    let flavor = format!("{prefix}{}", std::process::id());
    let default_helper = image::default_helper_image("x86_64", Some(&flavor));
    let dir = helper_images_dir();
    std::fs::create_dir_all(&dir).expect("helper-images dir");
    let archive = dir.join(format!("prebuilt-{flavor}-x86_64.docker.tar.zst"));
    let cleanup = Cleanup {
        files: vec![archive.clone()],
        images: vec![default_helper.clone()],
    };
    (flavor, default_helper, archive, cleanup)
}

fn image_id(name: &str) -> Option<String> {
    let out = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", name])
        .output()
        .expect("docker");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn sh(script: &str) {
    let status = Command::new("sh")
        .args(["-c", script])
        .status()
        .expect("sh");
    assert!(status.success(), "failed: {script}");
}

#[tokio::test]
async fn the_default_helper_is_loaded_from_an_installed_archive() {
    let _guard = engine_test!();
    let (flavor, default_helper, archive, _cleanup) = installed_archive("droverprebuilt");
    assert_eq!(
        image_id(&default_helper),
        None,
        "{default_helper} already exists"
    );
    sh(&format!(
        "docker save {HELPER_IMAGE} | gzip -1 > '{}'",
        archive.display()
    ));

    let mut s = settings("prebuilt");
    s.docker.helper_image = None;
    s.docker.helper_image_flavor = Some(flavor.clone());
    let job = no_git_job(7301, 7301, &["echo prebuilt-helper-ran"], json!({}));
    let ran = run_job(&job, &s).await;
    assert!(ran.result.is_ok(), "{:?}\n{}", ran.result, ran.trace);
    assert!(ran.trace.contains("prebuilt-helper-ran"), "{}", ran.trace);
    assert!(
        !ran.trace
            .contains(&format!("Pulling docker image {default_helper}")),
        "the helper was pulled:\n{}",
        ran.trace
    );
    assert_eq!(
        image_id(&default_helper),
        image_id(HELPER_IMAGE),
        "the archive's image is not tagged as the default helper"
    );
}

#[tokio::test]
async fn a_broken_archive_is_named_and_the_pull_follows() {
    let _guard = engine_test!();
    let (flavor, default_helper, archive, _cleanup) = installed_archive("droverbroken");
    std::fs::write(&archive, b"this is not an image archive").expect("write archive");

    let mut s = settings("prebuiltbroken");
    s.docker.helper_image = None;
    s.docker.helper_image_flavor = Some(flavor.clone());
    s.docker.pull_policy = vec!["never".into()];
    let job = no_git_job(7302, 7302, &["echo must-not-run"], json!({}));
    let ran = run_job(&job, &s).await;
    assert!(
        matches!(ran.result, Err(JobError::Failed(_))),
        "{:?}\n{}",
        ran.result,
        ran.trace
    );
    assert!(
        ran.trace.contains(&format!(
            "Failed to load the helper image {default_helper} from {}",
            archive.display()
        )),
        "no warning naming the archive:\n{}",
        ran.trace
    );
    assert!(
        ran.trace
            .contains(&format!("Using helper image:  {default_helper}")),
        "{}",
        ran.trace
    );
    assert!(!ran.trace.contains("must-not-run"), "{}", ran.trace);
}

#[tokio::test]
async fn a_root_filesystem_archive_is_imported_with_the_helper_entrypoint() {
    let _guard = engine_test!();
    let tag = format!("drover-prebuilt-import-{}:x86_64-test", std::process::id());
    let dir = tempfile::tempdir().expect("tempdir");
    let archive = dir.path().join("prebuilt-alpine-x86_64.tar.xz");
    let container = format!("drover-prebuilt-export-{}", std::process::id());
    let _cleanup = Cleanup {
        files: Vec::new(),
        images: vec![tag.clone()],
    };
    sh(&format!(
        "docker create --name {container} drover-test-executor-service:latest >/dev/null && \
         docker export {container} | xz -0 -T1 > '{}'; rc=$?; docker rm {container} >/dev/null; \
         exit $rc",
        archive.display()
    ));
    let docker = bollard::Docker::connect_with_local_defaults().expect("docker client");
    let candidates =
        prebuilt::archive_candidates(&[dir.path().to_path_buf()], "prebuilt-alpine-x86_64");
    let outcome = prebuilt::load(&docker, &candidates, &tag).await;
    assert!(outcome.loaded, "{:?}", outcome.warnings);
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
    let out = Command::new("docker")
        .args([
            "image",
            "inspect",
            "--format",
            "{{json .Config.Entrypoint}}",
            &tag,
        ])
        .output()
        .expect("docker");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        r#"["/usr/bin/dumb-init","/entrypoint"]"#
    );
}
