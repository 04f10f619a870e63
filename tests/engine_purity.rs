//! Keeps the engine sans-IO: no runtime, processes, files or clock reads in `src/engine/`.

use std::path::Path;

fn scan(dir: &Path, hits: &mut Vec<String>) {
    let entries = std::fs::read_dir(dir).expect("src/engine exists");
    for entry in entries {
        let path = entry.expect("readable dir entry").path();
        if path.is_dir() {
            scan(&path, hits);
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable source file");
        for (n, line) in text.lines().enumerate() {
            // Docs may mention the drivers; code may not use them.
            let code = line.split("//").next().unwrap_or("");
            for banned in [
                "tokio",
                "std::process",
                "std::fs",
                "::now(",
                "SystemTime",
                "Instant",
            ] {
                if code.contains(banned) {
                    hits.push(format!("{}:{}: {banned}: {line}", path.display(), n + 1));
                }
            }
        }
    }
}

#[test]
fn engine_has_no_io_and_no_clock() {
    let mut hits = Vec::new();
    scan(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine"),
        &mut hits,
    );
    assert!(
        hits.is_empty(),
        "the engine must stay sans-IO:\n{}",
        hits.join("\n")
    );
}
