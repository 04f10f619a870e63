//! Benchmark: loading a `config.toml` with many runners, to keep the loader linear in the size
//! of the file (it was quadratic: 10,000 runners took 8 s, 20,000 took 32 s).
//!
//! `cargo bench --bench config_load` builds in release mode, loads generated configs of 1,000,
//! 10,000 and 100,000 runners (each runner a realistic `docker+machine` section with a duplicate
//! key, so the loader also produces one warning per runner) three times each and prints each
//! wall time, the best, and the time per runner. The target: 100,000 runners well under a
//! second. Pass sizes as arguments to pick others: `cargo bench --bench config_load -- 20000`.
//!
//! On a shared machine wall time also counts other processes, so each line also gives the
//! best CPU time of the loading thread; the same for `toml` parsing the whole file in one
//! piece (`DeTable::parse`, code drover does not write: a reference, since the loader parses a
//! `[[runners]]` section at a time, which is about a fifth faster); and the peak heap the load
//! reached above what was allocated before it (a counting allocator).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use drover::config::load_str;

#[path = "../tests/config_support/mod.rs"]
mod config_support;

/// The system allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let grown = new_size - layout.size();
                let live = LIVE.fetch_add(grown, Ordering::Relaxed) + grown;
                PEAK.fetch_max(live, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// CPU time this thread has used so far.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Runs `f` and returns its wall time, its CPU time, and the peak heap above the start.
fn measure<T>(f: impl FnOnce() -> T) -> (T, Duration, Duration, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let cpu = thread_cpu();
    let start = Instant::now();
    let out = f();
    let wall = start.elapsed();
    let cpu = thread_cpu().saturating_sub(cpu);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    (out, wall, cpu, peak)
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
    for runners in sizes {
        let text = config_support::many_runners(runners);
        let mut times = Vec::new();
        let mut cpu_best = Duration::MAX;
        let mut peak = 0;
        let mut parse_best = Duration::MAX;
        for _ in 0..3 {
            let (parsed, _, parse_cpu, _) = measure(|| toml::de::DeTable::parse(&text).is_ok());
            assert!(parsed, "the generated config parses");
            parse_best = parse_best.min(parse_cpu);
            let (loaded, took, cpu, heap) = measure(|| load_str(&text, "bench.toml"));
            cpu_best = cpu_best.min(cpu);
            peak = peak.max(heap);
            match loaded {
                Ok(l) if l.config.runners.len() == runners && l.warnings.len() >= runners => {}
                Ok(l) => panic!(
                    "loaded {} runners and {} warnings, expected {runners} of each",
                    l.config.runners.len(),
                    l.warnings.len()
                ),
                Err(e) => panic!("the generated config does not load: {e}"),
            }
            times.push(took);
        }
        let best = times.iter().min().copied().unwrap_or(Duration::ZERO);
        let shown: Vec<String> = times.iter().map(|t| format!("{t:.2?}")).collect();
        println!(
            "config_load {runners} runners ({:.1} MB): {} best {best:.2?} ({:.2?} per runner); \
             CPU best {cpu_best:.2?} (toml's one-piece parse alone: {parse_best:.2?}); peak heap {:.0} MB",
            text.len() as f64 / 1e6,
            shown.join(" "),
            best / runners.max(1) as u32,
            peak as f64 / 1e6,
        );
    }
}
