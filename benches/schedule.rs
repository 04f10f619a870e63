//! Period evaluation cost: `in_period` runs on every engine pass, `next_change` whenever the
//! engine schedules its next period timer. Run with `cargo bench --bench schedule`.

use chrono::{TimeDelta, TimeZone, Utc};
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use drover::config::cron::CronExpr;
use drover::config::periods::TimePeriod;

fn periods(c: &mut Criterion) {
    let now = Utc
        .with_ymd_and_hms(2026, 11, 23, 12, 34, 56)
        .single()
        .unwrap_or_default();
    let list = vec![
        "* * 9-17 * * mon-fri *".to_string(),
        "* * 0-5 * * sat,sun *".to_string(),
        "* * * 24-26 dec * *".to_string(),
    ];
    let berlin = TimePeriod::compile(&list, "Europe/Berlin").ok();
    let Some(berlin) = berlin else { return };
    c.bench_function("parse 7-field", |b| {
        b.iter(|| CronExpr::parse(black_box("* * 9-17 * * mon-fri *")))
    });
    c.bench_function("in_period 3 exprs Europe/Berlin", |b| {
        b.iter(|| berlin.in_period(black_box(now)))
    });
    let sparse = CronExpr::parse("0 0 0 29 feb * *").ok();
    if let Some(sparse) = sparse {
        c.bench_function("next 29 feb (years ahead)", |b| {
            b.iter(|| sparse.next(black_box(&now)))
        });
    }
    c.bench_function("next_change within 7 days Europe/Berlin", |b| {
        b.iter(|| berlin.next_change(black_box(now), TimeDelta::days(7)))
    });
    let always = TimePeriod::compile(&["* * * * * * *".to_string()], "Europe/Berlin").ok();
    if let Some(always) = always {
        c.bench_function("next_change always-on, 366 days (crosses DST)", |b| {
            b.iter(|| always.next_change(black_box(now), TimeDelta::days(366)))
        });
    }
}

criterion_group!(benches, periods);
criterion_main!(benches);
