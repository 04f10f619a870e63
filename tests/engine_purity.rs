//! Keeps the boundaries visible: no runtime, processes, files or clock reads in `src/engine/`,
//! and no GitLab client or manager in `src/executor/`.

use std::path::Path;

#[test]
fn engine_has_no_io_and_no_clock() {
    let mut hits = Vec::new();
    // Docs may mention the drivers; code may not use them.
    mentions(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine"),
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
