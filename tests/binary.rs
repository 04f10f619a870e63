//! The built `drover` executable itself: on Linux it is linked at a fixed address (ELF type
//! `EXEC`), as gitlab-runner's Go binary is, so that it starts without relocating itself
//! (see `build.rs`); a build with `DROVER_BUILD_PIE=1` is position-independent (`DYN`).

#[cfg(target_os = "linux")]
#[test]
fn the_executable_is_position_dependent_unless_pie_was_asked_for() {
    let path = env!("CARGO_BIN_EXE_drover");
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    assert_eq!(bytes.get(..4), Some(&b"\x7fELF"[..]), "{path} is not ELF");
    // e_type: two little-endian bytes at offset 16 (x86-64 and aarch64 are little-endian).
    let e_type = match bytes.get(16..18) {
        Some(&[lo, hi]) => u16::from_le_bytes([lo, hi]),
        _ => panic!("{path}: truncated ELF header"),
    };
    let (want, what) = match option_env!("DROVER_BUILD_PIE") {
        Some("1") => (3, "DYN (position-independent)"),
        _ => (2, "EXEC (fixed address)"),
    };
    assert_eq!(e_type, want, "{path}: ELF type {e_type}, expected {what}");
}
