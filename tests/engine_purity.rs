//! Keeps the boundaries visible. The engine is the `drover-engine` crate: its dependency tree
//! holds no runtime, network, Docker or process crate (checked here on `cargo tree`), clippy
//! refuses clock reads, files, processes and sockets in it (`engine/clippy.toml`), and a text
//! scan of its sources backs both. The provider plugin links the protocol crate, not drover.
//! And no GitLab client or manager in `src/executor/`.

use std::path::Path;
use std::process::Command;

/// The packages `package`'s normal (non-dev, non-build) dependency tree holds, itself included.
fn dependency_closure(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            package,
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn the_engine_crate_links_no_runtime_network_docker_or_process_crate() {
    let deps = dependency_closure("drover-engine");
    // The listing is real: the engine and its time crate are in it.
    assert!(
        deps.iter().any(|d| d == "drover-engine") && deps.iter().any(|d| d == "chrono"),
        "{deps:?}"
    );
    let banned = [
        "tokio",
        "mio",
        "bollard",
        "reqwest",
        "hyper",
        "socket2",
        "rustls",
        "ssh2",
        "axum",
        "getrandom",
        "drover",
    ];
    let found: Vec<&String> = deps
        .iter()
        .filter(|d| banned.contains(&d.as_str()))
        .collect();
    assert!(
        found.is_empty(),
        "drover-engine must stay sans-IO, but its dependency tree holds {found:?}"
    );
}

#[test]
fn the_provider_plugin_links_the_protocol_not_drover() {
    let deps = dependency_closure("legacy-driver-shim");
    assert!(deps.iter().any(|d| d == "drover-protocol"), "{deps:?}");
    assert!(
        !deps
            .iter()
            .any(|d| d == "drover" || d == "drover-engine" || d == "bollard"),
        "legacy-driver-shim links more than the protocol: {deps:?}"
    );
    // Issue 24's target: at most 80 packages.
    assert!(deps.len() <= 80, "{} packages: {deps:?}", deps.len());
}

#[test]
fn engine_has_no_io_and_no_clock() {
    let mut hits = Vec::new();
    // Docs may mention the drivers; code may not use them.
    mentions(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("engine/src"),
        &[
            "tokio",
            "std::process",
            "std::fs",
            "::now(",
            "SystemTime",
            "Instant",
        ],
        &mut hits,
    );
    assert!(
        hits.is_empty(),
        "the engine must stay sans-IO:\n{}",
        hits.join("\n")
    );
}

/// Lines of `dir`'s Rust files whose code (not comments) mentions any of `banned`.
fn mentions(dir: &Path, banned: &[&str], hits: &mut Vec<String>) {
    let entries = std::fs::read_dir(dir).expect("source dir exists");
    for entry in entries {
        let path = entry.expect("readable dir entry").path();
        if path.is_dir() {
            mentions(&path, banned, hits);
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for b in banned {
                if code.contains(b) {
                    hits.push(format!("{}:{}: {b}: {line}", path.display(), n + 1));
                }
            }
        }
    }
}

#[test]
fn executor_never_speaks_gitlab() {
    let mut hits = Vec::new();
    mentions(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/executor"),
        &["crate::gitlab", "gitlab::", "crate::manager"],
        &mut hits,
    );
    assert!(
        hits.is_empty(),
        "the executor must not import the GitLab client or the manager:\n{}",
        hits.join("\n")
    );
}
