//! Benchmark: loading a `config.toml` with many runners, to keep the loader linear in the size
//! of the file (it was quadratic: 10,000 runners took 8 s, 20,000 took 32 s).
//!
//! `cargo bench --bench config_load` builds in release mode, loads generated configs of 1,000,
//! 10,000 and 100,000 runners (each runner a realistic `docker+machine` section with a duplicate
//! key, so the loader also produces one warning per runner) seven times each and prints each
//! wall time, the best, the median and the time per runner. The target: 100,000 runners well
//! under a second. Pass sizes as arguments to pick others: `cargo bench --bench config_load --
//! 20000`; `DROVER_BENCH_RUNS=N` sets the number of timed loads.
//!
//! A reference on the same line: `toml` parsing the whole file in one piece on one thread
//! (`DeTable::parse`, code drover does not write; the loader parses a few `[[runners]]`
//! sections at a time, on one thread per core). One more, untimed load gives the peak heap
//! the load reached above what was allocated before it: the allocator counts only during that
//! load, so the timed ones run on the plain system allocator, as drover does.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use drover::config::load_str;

#[path = "../tests/config_support/mod.rs"]
mod config_support;

/// The system allocator, counting live bytes and their peak while `COUNTING` is set.
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            let size = layout.size() as isize;
            let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            if new_size >= layout.size() {
                let grown = (new_size - layout.size()) as isize;
                let live = LIVE.fetch_add(grown, Ordering::Relaxed) + grown;
                PEAK.fetch_max(live, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub((layout.size() - new_size) as isize, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The peak heap `f` reached above what was live when it started (frees of blocks allocated
/// before it take `LIVE` below 0, which can only lower the peak seen).
fn peak_heap<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LIVE.store(0, Ordering::Relaxed);
    PEAK.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::Relaxed);
    let out = f();
    COUNTING.store(false, Ordering::Relaxed);
    (out, PEAK.load(Ordering::Relaxed).max(0) as usize)
}

/// Checks that `loaded` holds `runners` runners and at least as many warnings.
fn check(loaded: &Result<drover::config::Loaded, drover::config::ConfigError>, runners: usize) {
    match loaded {
        Ok(l) if l.config.runners.len() == runners && l.warnings.len() >= runners => {}
        Ok(l) => panic!(
            "loaded {} runners and {} warnings, expected {runners} of each",
            l.config.runners.len(),
            l.warnings.len()
        ),
        Err(e) => panic!("the generated config does not load: {e}"),
    }
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1_000, 10_000, 100_000]
    } else {
        sizes
    };
    let runs: usize = std::env::var("DROVER_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(7);
    for runners in sizes {
        let text = config_support::many_runners(runners);
        let mut times = Vec::with_capacity(runs);
        let mut parse_best = Duration::MAX;
        for _ in 0..runs {
            let start = Instant::now();
            let parsed = toml::de::DeTable::parse(&text).is_ok();
            parse_best = parse_best.min(start.elapsed());
            assert!(parsed, "the generated config parses");
            let start = Instant::now();
            let loaded = load_str(&text, "bench.toml");
            times.push(start.elapsed());
            check(&loaded, runners);
        }
        let (loaded, peak) = peak_heap(|| load_str(&text, "bench.toml"));
        check(&loaded, runners);
        drop(loaded);
        let shown: Vec<String> = times.iter().map(|t| format!("{t:.2?}")).collect();
        times.sort();
        let best = times[0];
        let median = times[times.len() / 2];
        println!(
            "config_load {runners} runners ({:.1} MB): {} best {best:.2?} median {median:.2?} \
             ({:.2?} per runner); toml's one-piece parse alone: {parse_best:.2?}; peak heap {:.0} MB",
            text.len() as f64 / 1e6,
            shown.join(" "),
            median / runners.max(1) as u32,
            peak as f64 / 1e6,
        );
    }
}
