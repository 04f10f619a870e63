//! The work of loading `config.toml` grows linearly with the number of runners, counted
//! without a clock: heap allocations and allocated bytes of the loading thread, which are the
//! same on every run of the same build.
//!
//! Loading was once quadratic (10,000 runners: 8 s) and later spent most of its time
//! building strings and tables per key only to copy them again. This test fails if the work
//! per runner grows with the file (a quadratic step) or if the allocations per runner rise
//! well above what the loader needs today (a copy or a string per key coming back). The
//! speed itself is measured by `cargo bench --bench config_load`, never by a test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use drover::config::load_str;

mod config_support;

/// The system allocator, counting this thread's allocations and bytes.
struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
    static BYTES: Cell<u64> = const { Cell::new(0) };
}

fn count(bytes: usize) {
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
    let _ = BYTES.try_with(|c| c.set(c.get() + bytes as u64));
}

// SAFETY: every call is passed to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// (allocations, bytes) per runner while loading a config of `runners` runners.
fn work_per_runner(runners: usize) -> (f64, f64) {
    let text = config_support::many_runners(runners);
    let before = (ALLOCS.with(Cell::get), BYTES.with(Cell::get));
    let loaded = load_str(&text, "work.toml").expect("the generated config loads");
    let after = (ALLOCS.with(Cell::get), BYTES.with(Cell::get));
    assert_eq!(loaded.config.runners.len(), runners);
    assert_eq!(loaded.warnings.len(), runners, "one warning per runner");
    drop(loaded);
    let n = runners as f64;
    (
        (after.0 - before.0) as f64 / n,
        (after.1 - before.1) as f64 / n,
    )
}

/// The most allocations one generated runner may cost: what the loader needs today (the
/// parsed sections, the checked values, the model, a warning), 54, with room for small
/// changes but not for a string or a table copy per key (17 keys per runner).
const MAX_ALLOCS_PER_RUNNER: f64 = 62.0;

#[test]
fn load_work_is_linear_in_the_runners() {
    let (small_allocs, small_bytes) = work_per_runner(500);
    let (large_allocs, large_bytes) = work_per_runner(4_000);
    eprintln!(
        "per runner: {small_allocs:.1} allocations, {small_bytes:.0} bytes at 500 runners; \
         {large_allocs:.1} allocations, {large_bytes:.0} bytes at 4,000"
    );
    // 4,000 is 500 times 2^3, so buffers that double as they grow end at the same point of
    // their last doubling in both loads and cost the same per runner: a few percent is noise.
    assert!(
        large_allocs <= small_allocs * 1.02,
        "allocations per runner grow with the file: {small_allocs:.1} at 500 runners, \
         {large_allocs:.1} at 4,000"
    );
    assert!(
        large_bytes <= small_bytes * 1.03,
        "bytes allocated per runner grow with the file: {small_bytes:.0} at 500 runners, \
         {large_bytes:.0} at 4,000"
    );
    assert!(
        large_allocs <= MAX_ALLOCS_PER_RUNNER,
        "{large_allocs:.1} allocations per runner, at most {MAX_ALLOCS_PER_RUNNER} expected"
    );
}

/// The most bytes one runner may take in the model before its sections: loading 100,000
/// runners writes this many bytes per runner into one list, and every runner is moved a few
/// times on the way. The large optional sections (`docker`, `cache`, ...) are boxed, so a
/// runner pays for the ones it has; unboxed, a runner took 3.9 KB.
const MAX_RUNNER_BYTES: usize = 1024;

#[test]
fn a_runner_in_the_model_stays_small() {
    let size = std::mem::size_of::<drover::config::model::RunnerConfig>();
    eprintln!("RunnerConfig: {size} bytes");
    assert!(
        size <= MAX_RUNNER_BYTES,
        "RunnerConfig takes {size} bytes, at most {MAX_RUNNER_BYTES} expected: box large optional sections"
    );
}
