//! Cache archive and extract throughput of drover's helper (`cache-archiver` /
//! `cache-extractor` without the network): a tree of small files (default 200 MB in 16 KiB
//! files, incompressible content, 100 files per directory) is selected and zipped, then the
//! zip is extracted into an empty directory. Prints MB/s of tree data for each step.
//!
//! Run: `cargo bench --bench cache_archive` (`DROVER_BENCH_TREE_MB`, `DROVER_BENCH_FILE_KB`
//! change the tree; `DROVER_BENCH_DIR` the scratch directory, default the system temp dir).

use std::time::Instant;

use drover::helper::archive;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("cache_archive: bench");
        return;
    }
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let tree_mb = env("DROVER_BENCH_TREE_MB", 200);
    let file_kb = env("DROVER_BENCH_FILE_KB", 16).max(1);
    let scratch = match std::env::var_os("DROVER_BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .expect("scratch dir");
    let src = scratch.path().join("project");
    let files = tree_mb * 1024 / file_kb;
    // xorshift: incompressible, reproducible content without reading /dev/urandom.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut buf = vec![0u8; (file_kb * 1024) as usize];
    for i in 0..files {
        let dir = src.join(format!("vendor/d{:04}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).expect("mkdir");
        }
        for chunk in buf.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let bytes = state.to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        std::fs::write(dir.join(format!("f{i}.bin")), &buf).expect("write");
    }
    let bytes = (files * file_kb * 1024) as f64;
    let mb = bytes / 1_000_000.0;
    println!("tree: {files} files of {file_kb} KiB, {mb:.0} MB");

    let zip = scratch.path().join("cache/cache.zip");
    let start = Instant::now();
    let (entries, _) = archive::select(&src, &["vendor/".into()], &[], false).expect("select");
    let n = archive::create_zip(&src, &entries, &zip).expect("zip");
    let t = start.elapsed().as_secs_f64();
    let zip_mb = std::fs::metadata(&zip).map(|m| m.len()).unwrap_or(0) as f64 / 1_000_000.0;
    println!(
        "archive: {n} entries in {t:.2} s = {:.1} MB/s (zip {zip_mb:.0} MB)",
        mb / t
    );

    let dest = scratch.path().join("restored");
    std::fs::create_dir_all(&dest).expect("mkdir");
    let start = Instant::now();
    let n = archive::extract_zip(&zip, &dest).expect("extract");
    let t = start.elapsed().as_secs_f64();
    println!("extract: {n} entries in {t:.2} s = {:.1} MB/s", mb / t);
}
