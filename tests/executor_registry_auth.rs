//! Registry credentials from a credential helper, end to end: `drover exec-job` pulls the job
//! image from a registry on 127.0.0.1 that answers every request without the right Basic
//! credentials with the registry API's 401 challenge. The job's `DOCKER_AUTH_CONFIG` names a
//! credential helper (`credHelpers`), a real `docker-credential-drovertest` script on the
//! runner's PATH that hands out those credentials; the Engine pulls with them and the job runs
//! in the pulled image. Without the helper on the PATH, the job log names the missing helper
//! and the pull is refused by the registry.
//!
//! `DROVER_TEST_BIN` runs it against another drover binary (to watch it fail without the fix).

mod docker_engine;
mod executor_common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use base64::Engine as _;
use executor_common::*;
use sha2::{Digest, Sha256};

const USER: &str = "drover-reg-user";

fn sha(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The content a registry serves for one image: manifest and blobs by digest.
struct Image {
    manifest: Vec<u8>,
    manifest_digest: String,
    blobs: Vec<(String, Vec<u8>)>,
}

/// The build image as a registry image: `docker save`, then its config and its layers
/// (gzip-compressed) described by a schema 2 manifest.
fn registry_image(work: &Path) -> Image {
    let tar = work.join("image.tar");
    output_of(Command::new("docker").args(["save", "-o", tar.to_str().unwrap(), BUILD_IMAGE]));
    let out = work.join("image");
    std::fs::create_dir_all(&out).unwrap();
    output_of(Command::new("tar").args([
        "-xf",
        tar.to_str().unwrap(),
        "-C",
        out.to_str().unwrap(),
    ]));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let entry = &manifest[0];
    let config = std::fs::read(out.join(entry["Config"].as_str().unwrap())).unwrap();
    let mut blobs = vec![(sha(&config), config.clone())];
    let mut layers = Vec::new();
    for layer in entry["Layers"].as_array().unwrap() {
        let raw = std::fs::read(out.join(layer.as_str().unwrap())).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&raw).unwrap();
        let gz = gz.finish().unwrap();
        layers.push(serde_json::json!({
            "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
            "size": gz.len(), "digest": sha(&gz)
        }));
        blobs.push((sha(&gz), gz));
    }
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "size": config.len(), "digest": sha(&config)
        },
        "layers": layers
    })
    .to_string()
    .into_bytes();
    Image {
        manifest_digest: sha(&manifest),
        manifest,
        blobs,
    }
}

/// Counts of what the registry saw.
#[derive(Default)]
struct Seen {
    refused: AtomicUsize,
    authorized_manifests: AtomicUsize,
}

/// A registry on 127.0.0.1 serving `image` as `private/build:1` to `USER:password` only.
fn start_registry(image: Image, password: &str, seen: Arc<Seen>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{password}"))
    );
    let image = Arc::new(image);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (image, expected, seen) = (image.clone(), expected.clone(), seen.clone());
            std::thread::spawn(move || {
                let _ = serve(stream, &image, &expected, &seen);
            });
        }
    });
    port
}

fn serve(stream: TcpStream, image: &Image, expected: &str, seen: &Seen) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut stream = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let (method, target) = match (parts.next(), parts.next()) {
            (Some(m), Some(t)) if t.starts_with('/') => (m.to_string(), t.to_string()),
            // Not HTTP (the Engine tries TLS first): close.
            _ => return Ok(()),
        };
        let mut auth = None;
        let mut length = 0usize;
        loop {
            let mut h = String::new();
            reader.read_line(&mut h)?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "authorization" => auth = Some(v.trim().to_string()),
                    "content-length" => length = v.trim().parse().unwrap_or(0),
                    _ => {}
                }
            }
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body)?;
        let head = |status: &str, extra: &str, len: usize| {
            format!(
                "HTTP/1.1 {status}\r\nDocker-Distribution-API-Version: registry/2.0\r\n{extra}Content-Length: {len}\r\n\r\n"
            )
        };
        if auth.as_deref() != Some(expected) {
            seen.refused.fetch_add(1, Ordering::SeqCst);
            let msg =
                br#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#;
            stream.write_all(
                head(
                    "401 Unauthorized",
                    "WWW-Authenticate: Basic realm=\"drover-test-registry\"\r\nContent-Type: application/json\r\n",
                    msg.len(),
                )
                .as_bytes(),
            )?;
            stream.write_all(msg)?;
            continue;
        }
        let (status, extra, content): (&str, String, &[u8]) = if target == "/v2/" {
            ("200 OK", String::new(), b"{}")
        } else if target == "/v2/private/build/manifests/1"
            || target == format!("/v2/private/build/manifests/{}", image.manifest_digest)
        {
            seen.authorized_manifests.fetch_add(1, Ordering::SeqCst);
            (
                "200 OK",
                format!(
                    "Content-Type: application/vnd.docker.distribution.manifest.v2+json\r\nDocker-Content-Digest: {}\r\n",
                    image.manifest_digest
                ),
                &image.manifest,
            )
        } else if let Some(b) = image
            .blobs
            .iter()
            .find(|(d, _)| target == format!("/v2/private/build/blobs/{d}"))
        {
            (
                "200 OK",
                format!(
                    "Content-Type: application/octet-stream\r\nDocker-Content-Digest: {}\r\n",
                    b.0
                ),
                &b.1,
            )
        } else {
            ("404 Not Found", String::new(), b"")
        };
        stream.write_all(head(status, &extra, content.len()).as_bytes())?;
        if method != "HEAD" {
            stream.write_all(content)?;
        }
    }
}

/// Writes `docker-credential-drovertest` into `dir`: `get` answers USER and `password` for
/// the registry it is asked about, and records the question in `dir/asked`.
fn write_helper(dir: &Path, password: &str) {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("docker-credential-drovertest");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             case \"$1\" in\n\
             get) read -r server; printf '%s\\n' \"$server\" >> '{asked}';\n\
                  printf '{{\"ServerURL\":\"%s\",\"Username\":\"{USER}\",\"Secret\":\"{password}\"}}' \"$server\" ;;\n\
             *) echo \"unsupported: $1\" >&2; exit 1 ;;\n\
             esac\n",
            asked = dir.join("asked").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn exec_job(dir: &Path, path: &str, port: u16) -> (i32, String) {
    let config = format!(
        r#"[[runners]]
  name = "drover-test-executor-regauth"
  token = "glrt-dteregauth01"
  executor = "docker"
  [runners.docker]
    image = "{BUILD_IMAGE}"
    helper_image = "{HELPER_IMAGE}"
    pull_policy = ["if-not-present"]
    allowed_pull_policies = ["if-not-present", "always"]
    network_mode = "host"
"#
    );
    let auth = format!(r#"{{"credHelpers": {{"127.0.0.1:{port}": "drovertest"}}}}"#);
    let job = serde_json::json!({
        "id": 81, "token": "glcbt-regauthjobtoken1", "job_info": {"project_id": 881},
        "runner_info": {"timeout": 120},
        "image": {"name": format!("127.0.0.1:{port}/private/build:1"), "pull_policy": ["always"]},
        "variables": [
            {"key": "GIT_STRATEGY", "value": "none"},
            {"key": "DOCKER_AUTH_CONFIG", "value": auth}
        ],
        "steps": [{"name": "script", "script": ["echo ran-in-the-pulled-image"]}]
    });
    let c = dir.join("config.toml");
    let j = dir.join("job.json");
    std::fs::write(&c, config).unwrap();
    std::fs::write(&j, job.to_string()).unwrap();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let out = Command::new(test_bin())
        .arg("exec-job")
        .arg("--job")
        .arg(&j)
        .arg("-c")
        .arg(&c)
        .env("PATH", path)
        .env("HOME", &home)
        .output()
        .unwrap();
    // The job log as GitLab shows it (without the line timestamps), then drover's own log.
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&drover::executor::trace::timestamp::strip(&out.stdout)),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn a_credential_helper_authenticates_the_pull() {
    assert!(engine_available(), "this test needs the Docker Engine");
    ensure_images();
    let work = tempfile::tempdir().unwrap();
    let password = format!("helper-pass-{}", std::process::id());
    let seen = Arc::new(Seen::default());
    let port = start_registry(registry_image(work.path()), &password, seen.clone());
    let pulled = format!("127.0.0.1:{port}/private/build:1");
    let helpers = work.path().join("bin");
    std::fs::create_dir_all(&helpers).unwrap();
    write_helper(&helpers, &password);
    let system_path = std::env::var("PATH").unwrap_or_default();

    // Without the helper on the PATH: the log names it and the registry refuses the pull.
    let (code, text) = exec_job(work.path(), &system_path, port);
    assert_ne!(code, 0, "{text}");
    assert!(text.contains("docker-credential-drovertest"), "{text}");
    assert!(!text.contains("\nran-in-the-pulled-image"), "{text}");
    assert_eq!(seen.authorized_manifests.load(Ordering::SeqCst), 0);

    // With it: the Engine pulls with its credentials and the job runs in the pulled image.
    let (code, text) = exec_job(
        work.path(),
        &format!("{}:{system_path}", helpers.display()),
        port,
    );
    let _ = Command::new("docker").args(["rmi", &pulled]).output();
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("Authenticating with credentials from $DOCKER_AUTH_CONFIG"),
        "{text}"
    );
    assert!(text.contains("\nran-in-the-pulled-image"), "{text}");
    assert!(seen.authorized_manifests.load(Ordering::SeqCst) > 0);
    assert!(
        seen.refused.load(Ordering::SeqCst) > 0,
        "the registry never challenged"
    );
    let asked = std::fs::read_to_string(helpers.join("asked")).unwrap_or_default();
    assert!(asked.contains(&format!("127.0.0.1:{port}")), "{asked:?}");
    assert!(
        !text.contains(&password),
        "the helper's secret reached the log"
    );
    assert_clean_and_remove_reusable("dteregaut");
}
