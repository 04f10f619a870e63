//! Links the `drover` executable as a position-dependent executable on Linux, as Go links
//! gitlab-runner's, unless `DROVER_BUILD_PIE=1`.
//!
//! Why: a position-independent executable is relocated when it starts: the dynamic loader
//! reads its relocation table (48,000 entries, 1.1 MB) and writes every pointer in its
//! read-only-after-relocation data (1.3 MB that become private memory of each process). Linked
//! at a fixed address, neither happens: `drover run`'s idle RSS is 2 MB smaller (one docker
//! runner, long polling, the metrics server; `cargo bench --bench manager_figures`: 15.9 →
//! 13.9 MB). The cost is that the
//! executable's own code and data are not placed at a random address (shared libraries, the
//! heap, stacks and mappings still are). Packagers whose policy requires PIE set
//! `DROVER_BUILD_PIE=1` at build time.

fn main() {
    println!("cargo:rerun-if-env-changed=DROVER_BUILD_PIE");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let pie = std::env::var("DROVER_BUILD_PIE").is_ok_and(|v| v == "1");
    if linux && !pie {
        println!("cargo:rustc-link-arg-bin=drover=-no-pie");
    }
}
