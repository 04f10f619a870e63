//! One Acquire pass over 100 / 1,000 / 10,000 machines (target: ≤ 1 ms for 10,000).
//!
//! `listed_*` run the indexed pass (`begin_acquire_listed`, issue 24: target ≤ 0.1 ms at
//! 10,000 machines, worst case included). `listed_steady`: every machine busy, nothing to
//! find. `listed_worst`: 2,000 removals pending (Removing), 6,000 busy, 2,000 Idle and recent
//! with `IdleCount` 2,000 (every one kept), one found and checked per pass (its release, timed
//! too, makes it Idle again for the next iteration).
//!
//! `steady`: every machine busy, so the pass visits all of them, decides nothing and walks the
//! whole list looking for a free one; the ledger is unchanged, so iterations repeat exactly.
//! `mixed`: a third busy, a third idle and recent, a third idle past IdleTime (removed), plus
//! one connectivity check; a fresh engine per iteration (setup not timed).

use std::hint::black_box;
use std::sync::Arc;

use chrono::{TimeDelta, TimeZone, Utc};
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use drover::engine::{
    AcquireStep, Engine, IdleSettings, Limits, MachineState, RunnerId, RunnerPolicy, Time,
    TrackedMachine,
};

fn now() -> Time {
    Utc.with_ymd_and_hms(2026, 11, 20, 10, 0, 0).unwrap()
}

/// The benchmarks' runner: no limits, these idle settings.
fn policy(idle: IdleSettings) -> RunnerPolicy {
    RunnerPolicy {
        name: "bench".into(),
        token: "glrt-benchtoken".into(),
        limits: Limits::default(),
        max_removal_attempts: 0,
        machine_name: "auto-%s".into(),
        machine_driver: "fake".into(),
        machine_options: Vec::new(),
        machine_options_with_name: Vec::new(),
        idle: Arc::new(idle),
    }
}

fn engine(n: usize, mixed: bool) -> (Engine, Vec<String>) {
    let idle = IdleSettings {
        idle_count: if mixed { (n / 4) as i64 } else { 0 },
        idle_time: 600,
        ..IdleSettings::default()
    };
    let mut e = Engine::new(vec![policy(idle)], 1);
    let mut names = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("runner-benchtoke-auto-{}-{:08x}", 1_700_000_000 + i, i);
        let (state, ago) = match (mixed, i % 3) {
            (false, _) | (true, 0) => (MachineState::Used, 10),
            (true, 1) => (MachineState::Idle, 10),
            _ => (MachineState::Idle, 3600),
        };
        e.track(
            TrackedMachine {
                name: name.clone(),
                state,
                used_count: 1,
                used: now() - TimeDelta::seconds(ago),
                retry_count: 0,
                runner: None,
            },
            now(),
        )
        .unwrap();
        names.push(name);
    }
    (e, names)
}

fn pass(e: &mut Engine, names: &[String]) {
    let mut step = e.begin_acquire(RunnerId(0), names, now()).unwrap();
    while let AcquireStep::CheckConnectivity { name } = step {
        step = e.connectivity_result(&name, true, now()).unwrap();
    }
    let _ = black_box(step);
}

/// An engine whose copy of the listing holds `n` machines: Used, or (`worst`) 20 % Removing,
/// 60 % Used and 20 % Idle.
fn listed(n: usize, worst: bool) -> Engine {
    let idle = IdleSettings {
        idle_count: if worst { (n / 5) as i64 } else { 0 },
        idle_time: 600,
        ..IdleSettings::default()
    };
    let mut e = Engine::new(vec![policy(idle)], 1);
    for i in 0..n {
        let name = format!("runner-benchtoke-auto-{}-{:08x}", 1_700_000_000 + i, i);
        let state = match (worst, i % 5) {
            (true, 0) => MachineState::Removing,
            (true, 1) => MachineState::Idle,
            _ => MachineState::Used,
        };
        e.track(
            TrackedMachine {
                name: name.clone(),
                state,
                used_count: 1,
                used: now() - TimeDelta::seconds(10),
                retry_count: 0,
                runner: None,
            },
            now(),
        )
        .unwrap();
        e.listing_insert(&name);
    }
    e
}

fn listed_pass(e: &mut Engine) {
    let mut step = e.begin_acquire_listed(RunnerId(0), now()).unwrap();
    while let AcquireStep::CheckConnectivity { name } = step {
        step = e.connectivity_result(&name, true, now()).unwrap();
    }
    if let AcquireStep::Done(outcome) = &step {
        if let drover::engine::AcquireResult::Machine(name) = &outcome.result {
            e.release(RunnerId(0), name, now()).unwrap();
        }
    }
    let _ = black_box(step);
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("acquire_pass");
    for n in [100usize, 1_000, 10_000] {
        let mut e = listed(n, false);
        g.bench_with_input(BenchmarkId::new("listed_steady", n), &n, |b, _| {
            b.iter(|| listed_pass(&mut e))
        });
        let mut e = listed(n, true);
        g.bench_with_input(BenchmarkId::new("listed_worst", n), &n, |b, _| {
            b.iter(|| listed_pass(&mut e))
        });
        let (mut e, names) = engine(n, false);
        g.bench_with_input(BenchmarkId::new("steady", n), &n, |b, _| {
            b.iter(|| pass(&mut e, &names))
        });
        g.bench_with_input(BenchmarkId::new("mixed", n), &n, |b, &n| {
            b.iter_batched(
                || engine(n, true),
                |(mut e, names)| {
                    pass(&mut e, &names);
                    e
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
